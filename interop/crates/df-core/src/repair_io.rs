//! The repair commands of the conformance driver protocol (section 5.11, capability `repair`,
//! added in 1.1) on [`crate::repair`]: JSON in, JSON out, as `df-driver` answers them and as
//! df-core's vector test (`tests/it/vectors.rs`) judges them. Python: the conformance kit's
//! `delta_fabric_conformance.kit.repair_io`.
//!
//! - [`repair_decode`]: one `RepairRequest` buffer decoded and checked (DF-RCV-161);
//! - [`repair_encode`]: request fields encoded, or refused when they would not decode;
//! - [`repair_gaps`]: a [`GapTracker`] fed round by round (DF-RCV-162, -163, -165, -230);
//! - [`repair_resend`]: a [`ResendBuffer`]'s operations in order (DF-RCV-164, -165).
//!
//! A refused request is an `outcome`; `Err` is for input that is not a vector (a driver failure).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::OwnedEntry;
use crate::repair::{
    GapParams, GapTracker, REQUEST_VERSION_MINOR, RepairCounters, RepairErrorKind, RepairRequest,
    ResendBuffer, ResendParams, decode_request, encode_request,
};
use crate::wire::{entry_from_json, f32_to_json, hex16, u64_from_json};

/// The counters a gap tracker reports (DF-RCV-165 names).
pub const GAP_COUNTERS: [&str; 3] = ["requests_sent", "seqs_requested", "seqs_given_up"];
/// The counters a resend buffer reports (DF-RCV-165 names).
pub const RESEND_COUNTERS: [&str; 5] = [
    "requests_received",
    "requests_refused",
    "entries_resent",
    "seqs_unavailable",
    "seqs_deferred",
];

fn get<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("missing {key:?}"))
}

fn uint(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{what}: not an unsigned integer"))
}

fn id(v: &Value, what: &str) -> Result<u64, String> {
    if v.as_str().is_none_or(|s| s.len() != 16) {
        return Err(format!("{what}: not 16 hex digits"));
    }
    u64_from_json(v, what).map_err(|e| e.0)
}

fn list<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>, String> {
    v.as_array().ok_or_else(|| format!("{what}: not a list"))
}

/// Request fields as JSON (ids as 16 hex digits).
pub fn request_to_json(r: &RepairRequest) -> Value {
    json!({
        "sender": hex16(r.sender),
        "sender_incarnation": hex16(r.sender_incarnation),
        "fingerprint": hex::encode(r.fingerprint),
        "origin": hex16(r.origin),
        "incarnation": hex16(r.incarnation),
        "seqs": r.seqs,
        "version_minor": r.version_minor,
    })
}

/// Request fields from JSON. `Ok(Err(detail))`: fields no request can hold (a fingerprint that is
/// not 32 bytes); the outer `Err` is for JSON that is not request fields.
pub fn request_from_json(j: &Value) -> Result<Result<RepairRequest, String>, String> {
    let fp = hex::decode(
        get(j, "fingerprint")?
            .as_str()
            .ok_or("fingerprint: not hex")?,
    )
    .map_err(|e| format!("fingerprint: {e}"))?;
    let seqs = list(get(j, "seqs")?, "seqs")?
        .iter()
        .map(|s| uint(s, "seq"))
        .collect::<Result<Vec<u64>, String>>()?;
    let version_minor = match j.get("version_minor") {
        None => REQUEST_VERSION_MINOR, // the node's own (DF-VER-1)
        Some(v) => u16::try_from(uint(v, "version_minor")?).map_err(|e| e.to_string())?,
    };
    let sender = id(get(j, "sender")?, "sender")?;
    let sender_incarnation = id(get(j, "sender_incarnation")?, "sender_incarnation")?;
    let origin = id(get(j, "origin")?, "origin")?;
    let incarnation = id(get(j, "incarnation")?, "incarnation")?;
    let Ok(fingerprint) = <[u8; 32]>::try_from(fp.as_slice()) else {
        return Ok(Err(format!(
            "fingerprint has {} bytes, expected 32",
            fp.len()
        )));
    };
    Ok(Ok(RepairRequest {
        sender,
        sender_incarnation,
        fingerprint,
        origin,
        incarnation,
        seqs,
        version_minor,
    }))
}

fn refused(kind: RepairErrorKind, detail: &str) -> Value {
    json!({"outcome": kind.as_str(), "message": detail})
}

/// `repair_decode`: `{"outcome": "ok", "request": {...}}` or the refusal's kind.
pub fn repair_decode(buf: &[u8]) -> Value {
    match decode_request(buf) {
        Ok(r) => json!({"outcome": "ok", "request": request_to_json(&r)}),
        Err(e) => refused(e.kind, &e.detail),
    }
}

/// `repair_encode`: `{"outcome": "ok", "bytes": <the buffer>}` (the caller writes it in base64)
/// or the refusal's kind.
pub fn repair_encode(fields: &Value) -> Result<Result<Vec<u8>, Value>, String> {
    Ok(match request_from_json(fields)? {
        Err(detail) => Err(refused(RepairErrorKind::Malformed, &detail)),
        Ok(r) => encode_request(&r).map_err(|e| refused(e.kind, &e.detail)),
    })
}

fn counters_json(c: &RepairCounters, names: &[&str]) -> Value {
    let all: Map<String, Value> = c
        .pairs()
        .iter()
        .filter(|(k, _)| names.contains(k))
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    Value::Object(all)
}

/// `repair_gaps`: `{"rounds": [{"requests": [[origin, incarnation, [seqs]]], "counters"}]}`.
pub fn repair_gaps(vector: &Value) -> Result<Value, String> {
    let p = get(vector, "params")?;
    let param = |k: &str| get(p, k).and_then(|v| uint(v, k));
    let mut g = GapTracker::new(GapParams {
        window: param("window")?,
        delay: param("delay")?,
        retry: param("retry")?,
        attempts: param("attempts")?,
        max_requests: usize::try_from(param("max_requests")?).map_err(|e| e.to_string())?,
    })?;
    let mut rounds = Vec::new();
    for rnd in list(get(vector, "rounds")?, "rounds")? {
        for a in list(get(rnd, "accepted")?, "accepted")? {
            let a = list(a, "accepted entry")?;
            if a.len() != 3 {
                return Err("accepted entry: not [origin, incarnation, seq]".into());
            }
            g.observe(
                id(&a[0], "origin")?,
                id(&a[1], "incarnation")?,
                uint(&a[2], "seq")?,
            );
        }
        let live: Option<BTreeSet<u64>> = match rnd.get("reachable") {
            None => None,
            Some(r) => Some(
                list(r, "reachable")?
                    .iter()
                    .map(|x| id(x, "reachable"))
                    .collect::<Result<_, _>>()?,
            ),
        };
        let reqs: Vec<Value> = g
            .round_reachable(live.as_ref())
            .into_iter()
            .map(|(o, i, seqs)| json!([hex16(o), hex16(i), seqs]))
            .collect();
        rounds.push(json!({
            "requests": reqs,
            "counters": counters_json(&g.counters, &GAP_COUNTERS),
        }));
    }
    Ok(json!({ "rounds": rounds }))
}

fn entry_json(e: &OwnedEntry) -> Value {
    json!({
        "origin": hex16(e.origin),
        "incarnation": hex16(e.incarnation),
        "seq": e.seq,
        "hops": e.hops,
        "indices": e.indices,
        "values": e.values.iter().map(|&x| f32_to_json(x)).collect::<Vec<Value>>(),
        "values_bits": e.values.iter().map(|x| format!("{:08x}", x.to_bits())).collect::<Vec<String>>(),
    })
}

/// `repair_resend`: `{"ops": [...]}`, one answer per operation: `add` -> `held`; `request` ->
/// `queued`, `pending`; `take` -> `take` (the entries resent), `pending`; each with `counters`.
pub fn repair_resend(vector: &Value) -> Result<Value, String> {
    let p = get(vector, "params")?;
    let bound = |k: &str| {
        get(p, k)
            .and_then(|v| uint(v, k))
            .and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
    };
    let fp = hex::decode(
        get(vector, "fingerprint")?
            .as_str()
            .ok_or("fingerprint: not hex")?,
    )
    .map_err(|e| format!("fingerprint: {e}"))?;
    let fp = <[u8; 32]>::try_from(fp.as_slice()).map_err(|_| "fingerprint: not 32 bytes")?;
    let mut buf = ResendBuffer::new(
        id(get(vector, "node")?, "node")?,
        id(get(vector, "incarnation")?, "incarnation")?,
        fp,
        ResendParams {
            max_entries: bound("max_entries")?,
            max_values: bound("max_values")?,
            max_values_per_round: bound("max_values_per_round")?,
            max_pending: bound("max_pending")?,
        },
    )?;
    let mut ops = Vec::new();
    for op in list(get(vector, "ops")?, "ops")? {
        let mut out = if let Some(add) = op.get("add") {
            let entries = list(add, "add")?
                .iter()
                .map(|e| entry_from_json(e).map_err(|e| e.0))
                .collect::<Result<Vec<OwnedEntry>, String>>()?;
            buf.add(&entries);
            json!({"held": buf.held()})
        } else if let Some(r) = op.get("request") {
            let req = request_from_json(r)?.map_err(|e| format!("request: {e}"))?;
            let queued = buf.request(&req);
            json!({"queued": queued, "pending": buf.pending()})
        } else if op.get("take").is_some() {
            let took: Vec<Value> = buf.take().iter().map(entry_json).collect();
            json!({"take": took, "pending": buf.pending()})
        } else {
            return Err("unknown resend operation".into());
        };
        out["counters"] = counters_json(&buf.counters, &RESEND_COUNTERS);
        ops.push(out);
    }
    Ok(json!({ "ops": ops }))
}
