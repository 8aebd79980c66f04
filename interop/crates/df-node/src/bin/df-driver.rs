//! `df-driver`: the Rust implementation behind the conformance driver protocol
//! (`conformance/driver-protocol.md`, version 1.0).
//!
//! JSON lines on stdin, exactly one JSON line per request on stdout (flushed), logs on stderr.
//! `decode`, `encode`, `generate`, `receive` and `snapshot_*` call `df-core`; `forward` runs the
//! Burn digits CNN of `df-node` once (one inference and one SGD step); `peer` runs live nodes on
//! `df-zenoh`, with a flat f32 weight vector (`model.kind = "flat"`) or the demo's digits CNN
//! trained with Burn through `df-burn` / `df-node` (`model.kind = "digits_cnn"`).
//! Nothing here draws entropy: ids, incarnations, seeds and weights come from the requests.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::optim::SgdConfig;
use burn::tensor::{Int, Tensor, TensorData};
use df_burn::CanonicalLayout;
use df_core::signing::Signing;
use df_core::snapshot::{
    SnapshotAssembler, SnapshotChunk, SnapshotError, SnapshotErrorKind, SnapshotServer,
    SnapshotSource as CoreSnapshotSource, decode_chunk,
};
use df_core::wire::{hex16, packet_from_json, packet_to_json};
use df_core::{
    Admission, Counters, Engine, EngineError, ErrorCode, Manifest, Outcome, OwnedEntry, SyncConfig,
    TensorSpec, decode_packet, encode_packet, validate_packet,
};
use df_fabric::Transport;
use df_node::TrainBackend;
use df_node::data::{IMAGE_LEN, Split};
use df_node::node::{
    Model, evaluate, forward_check, initial_model, model_manifest, sgd_config, train_step,
};
use df_node::rng::SplitMix64;
use df_zenoh::{SnapshotSource, TransportConfig, ZenohTransport};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

const PROTOCOL_VERSION: u64 = 1;
const SPEC_VERSION: &str = "1.1";

// ------------------------------------------------------------------------------------------------
// Answers
// ------------------------------------------------------------------------------------------------

/// A non-`ok` answer (this implementation supports every case, so it never answers `skipped`).
enum Fail {
    Rejected(ErrorCode, String),
    Errored(String),
}

type Answer = Result<Value, Fail>;

fn err(msg: impl Into<String>) -> Fail {
    Fail::Errored(msg.into())
}

fn log(msg: &str) {
    eprintln!("[df-driver] {msg}");
}

// ------------------------------------------------------------------------------------------------
// Small codecs: base64 (RFC 4648, padded), hex, f32 bit patterns
// ------------------------------------------------------------------------------------------------

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b64_decode(s: &str) -> Result<Vec<u8>, Fail> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(4) {
        return Err(err("base64: length not a multiple of 4"));
    }
    let val = |c: u8| -> Result<u32, Fail> {
        B64.iter()
            .position(|&x| x == c)
            .map(|p| p as u32)
            .ok_or_else(|| err(format!("base64: bad character {:?}", c as char)))
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (k, q) in s.chunks(4).enumerate() {
        let last = k + 1 == s.len() / 4;
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(err("base64: bad padding"));
        }
        let mut n = 0u32;
        for (i, &c) in q.iter().enumerate() {
            n |= if i >= 4 - pad { 0 } else { val(c)? } << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Ok(out)
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_decode(s: &str) -> Result<Vec<u8>, Fail> {
    if !s.len().is_multiple_of(2) {
        return Err(err("hex: odd length"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| err(format!("hex: {e}"))))
        .collect()
}

fn fingerprint(s: &str) -> Result<[u8; 32], Fail> {
    hex_decode(s)?
        .try_into()
        .map_err(|_| err("fingerprint: not 32 bytes"))
}

fn id_of(v: &Value, what: &str) -> Result<u64, Fail> {
    match v {
        Value::String(s) => u64::from_str_radix(s, 16).map_err(|e| err(format!("{what}: {e}"))),
        Value::Number(n) => n.as_u64().ok_or_else(|| err(format!("{what}: not a u64"))),
        _ => Err(err(format!("{what}: missing or not a hex string"))),
    }
}

fn bits_of(v: &[f32]) -> Vec<String> {
    v.iter().map(|x| format!("{:08x}", x.to_bits())).collect()
}

fn f32s_from(v: &Value, name: &str) -> Result<Vec<f32>, Fail> {
    if let Some(bits) = v.get(format!("{name}_bits")).and_then(Value::as_array) {
        return bits
            .iter()
            .map(|b| {
                b.as_str()
                    .and_then(|s| u32::from_str_radix(s, 16).ok())
                    .map(f32::from_bits)
                    .ok_or_else(|| err(format!("{name}_bits: bad pattern")))
            })
            .collect();
    }
    v.get(name)
        .and_then(Value::as_array)
        .ok_or_else(|| err(format!("missing {name}")))?
        .iter()
        .map(|x| df_core::wire::f32_from_json(x).map_err(err))
        .collect()
}

fn f32_json(v: &[f32]) -> Vec<Value> {
    v.iter().map(|&x| df_core::wire::f32_to_json(x)).collect()
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn sha256_hex(v: &[f32]) -> String {
    hex_lower(&Sha256::digest(le_bytes(v)))
}

fn get<'a>(v: &'a Value, key: &str) -> Result<&'a Value, Fail> {
    v.get(key).ok_or_else(|| err(format!("missing {key:?}")))
}

fn entry_json(e: &OwnedEntry) -> Value {
    let mut v = json!({
        "origin": hex16(e.origin),
        "incarnation": hex16(e.incarnation),
        "seq": e.seq,
        "hops": e.hops,
        "indices": e.indices,
        "values": f32_json(&e.values),
        "values_bits": bits_of(&e.values),
    });
    if let Some(s) = &e.signature {
        let hex: String = s.iter().map(|b| format!("{b:02x}")).collect();
        v["signature"] = json!(hex); // 1.1, DF-PKT-140
    }
    v
}

fn manifest_of(v: &Value) -> Result<Manifest, Fail> {
    Manifest::from_json(get(v, "manifest")?).map_err(err)
}

// ------------------------------------------------------------------------------------------------
// Stateless commands
// ------------------------------------------------------------------------------------------------

fn hello(req: &Value) -> Answer {
    let versions: Vec<u64> = req
        .get("versions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_else(|| vec![PROTOCOL_VERSION]);
    if !versions.contains(&PROTOCOL_VERSION) {
        return Err(err(format!(
            "driver protocol versions {versions:?} not supported"
        )));
    }
    Ok(json!({
        "name": "rust",
        "version": env!("CARGO_PKG_VERSION"),
        "language": "rust",
        "framework": "burn",
        "spec_version": SPEC_VERSION,
        "protocol_versions": [PROTOCOL_VERSION],
        "capabilities": ["decode", "decode.batch", "encode", "generate", "generate.fast", "receive",
                         "encoding.f16", "encoding.bf16", "encoding.q8", "index.packed", "peer",
                         "peer.snapshot", "peer.train",
                         "snapshot", "snapshot.serve", "forward", "signing", "config", "repair"],
        // DF-CNF-30 (driver protocol 5.1): the conformance targets claimed; node implies the others
        "claims": ["codec", "engine", "node"],
    }))
}

/// The `context` of a `decode` / `decode_batch` request.
struct DecodeContext {
    fingerprint: [u8; 32],
    num_params: u64,
    hop_limit: u8,
    max_packet_size: usize,
}

impl DecodeContext {
    fn from_request(req: &Value) -> Result<Self, Fail> {
        let ctx = get(req, "context")?;
        let num = |k: &str| {
            get(ctx, k)?
                .as_u64()
                .ok_or_else(|| err(format!("context.{k}")))
        };
        Ok(DecodeContext {
            fingerprint: fingerprint(get(ctx, "fingerprint")?.as_str().unwrap_or(""))?,
            num_params: num("num_params")?,
            hop_limit: u8::try_from(num("hop_limit")?).map_err(|_| err("hop_limit > 255"))?,
            max_packet_size: usize::try_from(num("max_packet_size")?)
                .map_err(|_| err("max_packet_size"))?,
        })
    }

    /// Decode then validate (spec DF-RCV-8, in the order of DF-RCV-20): the packet JSON, or the code.
    fn run(&self, buf: &[u8]) -> Result<Value, df_core::error::DecodeError> {
        let pkt = decode_packet(buf, self.max_packet_size)?;
        validate_packet(&pkt, &self.fingerprint, self.num_params, self.hop_limit)?;
        Ok(packet_to_json(&pkt))
    }
}

fn b64_arg(v: &Value, what: &str) -> Result<Vec<u8>, Fail> {
    b64_decode(
        v.as_str()
            .ok_or_else(|| err(format!("{what}: not a string")))?,
    )
}

fn decode(req: &Value) -> Answer {
    let buf = b64_arg(get(req, "packet")?, "packet")?;
    let ctx = DecodeContext::from_request(req)?;
    let pkt = ctx
        .run(&buf)
        .map_err(|e| Fail::Rejected(e.code, e.to_string()))?;
    Ok(json!({ "packet": pkt }))
}

/// `decode_batch` (capability `decode.batch`): `decode` of every packet of the request, in order.
fn decode_batch(req: &Value) -> Answer {
    let ctx = DecodeContext::from_request(req)?;
    let packets = get(req, "packets")?
        .as_array()
        .ok_or_else(|| err("packets: not a list"))?;
    let mut results = Vec::with_capacity(packets.len());
    for (i, p) in packets.iter().enumerate() {
        let buf = b64_arg(p, &format!("packets[{i}]"))?;
        results.push(match ctx.run(&buf) {
            Ok(pkt) => json!({ "packet": pkt }),
            Err(e) => json!({ "rejected": e.code.as_str() }),
        });
    }
    Ok(json!({ "results": results }))
}

/// `check_config` (driver protocol 5.10, 1.1): would a node start with this configuration and
/// manifest? (DF-PAR-11, DF-PAR-260; DF-MAN-1; DF-MAN-7, whose `1 <= N` `Engine::new` checks.)
fn check_config(req: &Value) -> Answer {
    let refusal = match SyncConfig::from_json(get(req, "config")?) {
        Err(e) => Some(e.to_string()),
        Ok(_) => match Manifest::from_json(get(req, "manifest")?) {
            Err(e) => Some(e.to_string()),
            Ok(m) if m.num_params() == 0 => Some("manifest has no value (DF-MAN-7: 1 <= N)".into()),
            Ok(_) => None,
        },
    };
    Ok(match refusal {
        None => json!({"accepted": true}),
        Some(message) => json!({"accepted": false, "message": message}),
    })
}

fn encode(req: &Value) -> Answer {
    let pkt = packet_from_json(get(req, "packet")?).map_err(err)?;
    Ok(json!({ "packet": b64_encode(&encode_packet(&pkt)) }))
}

fn engine_for(v: &Value, node: &Value, anchor: Vec<f32>) -> Result<Engine, Fail> {
    let config = SyncConfig::from_json(v.get("config").unwrap_or(&json!({}))).map_err(err)?;
    let id = id_of(get(node, "id")?, "node.id")?;
    let mut eng = Engine::new(
        manifest_of(v)?,
        config,
        id,
        id_of(get(node, "incarnation")?, "node.incarnation")?,
        anchor,
    )
    .map_err(|e| err(e.to_string()))?;
    if let Some(s) = node.get("signing") {
        // signed entries (1.1, driver protocol 5.5): pinned keys and, optionally, the secret seed
        let signing = Signing::from_json(
            get(s, "keys")?,
            s.get("secret").and_then(Value::as_str),
            Some(id),
        )
        .map_err(|e| err(e.to_string()))?;
        eng.set_signing(Some(signing))
            .map_err(|e| err(e.to_string()))?;
    }
    Ok(eng)
}

fn generate(req: &Value) -> Answer {
    let v = get(req, "vector")?;
    let active = f32s_from(v, "active")?;
    let mut eng = engine_for(v, get(v, "node")?, f32s_from(v, "anchor")?)?;
    eng.set_next_seq(v.get("seq_start").and_then(Value::as_u64).unwrap_or(1));
    let fast = v.get("fast").and_then(Value::as_bool).unwrap_or(false);
    // DF-GEN-9: a failed generation is answered `ok` with `"error": "NON_FINITE"`, no entry and
    // the unchanged state (driver protocol 5.4).
    let (entries, error) = match eng.generate(&active, fast) {
        Ok(entries) => (entries, None),
        Err(EngineError::NonFinite { .. }) => (Vec::new(), Some("NON_FINITE")),
        Err(e) => return Err(err(e.to_string())),
    };
    let mut active = active;
    let (ci, cv) = eng.last_correction();
    for (&i, &c) in ci.iter().zip(cv) {
        active[i as usize] += c; // DF-GEN-70, average_over > 1
    }
    let sizes: Vec<usize> = entries
        .iter()
        .flat_map(|e| eng.pack(std::slice::from_ref(e), &[]))
        .map(|p| p.len())
        .collect();
    let mut out = json!({
        "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
        "next_seq": eng.next_seq(),
        "anchor": f32_json(eng.anchor()),
        "anchor_bits": bits_of(eng.anchor()),
        "active_bits": bits_of(&active),
        "entry_packet_sizes": sizes,
    });
    if let Some(code) = error {
        out["error"] = json!(code);
    }
    Ok(out)
}

fn receive(req: &Value) -> Answer {
    let v = get(req, "vector")?;
    let node = get(v, "node")?;
    let mut active = f32s_from(node, "active")?;
    let mut eng = engine_for(v, node, f32s_from(node, "anchor")?)?;
    // driver protocol 5.5: the history is restored with no seq-jump, clock or grace bound, and no
    // membership; the vector's bounds are set after it
    let (jump, ahead, grace) = {
        let c = eng.config();
        (c.max_seq_jump, c.max_incarnation_ahead, c.incarnation_grace)
    };
    eng.receiver_state_mut().set_max_seq_jump(0);
    eng.receiver_state_mut().set_max_incarnation_ahead(0);
    eng.receiver_state_mut().set_incarnation_grace(0);
    for h in node
        .get("accepted")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let t = h
            .as_array()
            .filter(|t| t.len() == 3 || t.len() == 4)
            .ok_or_else(|| err("accepted: bad triple"))?;
        let seq = t[2].as_u64().ok_or_else(|| err("accepted: bad seq"))?;
        let (origin, inc) = (id_of(&t[0], "origin")?, id_of(&t[1], "incarnation")?);
        let verdict = eng.receiver_state_mut().admit(origin, inc, seq);
        if verdict != Admission::Accepted {
            return Err(err(format!(
                "accepted history entry {t:?} would be dropped"
            )));
        }
        if let Some(at) = t.get(3) {
            // DF-RCV-178 (1.1): the clock reading at which the entry was accepted
            let at = id_of(at, "accepted_at")?;
            eng.receiver_state_mut().set_accepted_at(origin, inc, at);
        }
    }
    eng.receiver_state_mut().set_max_seq_jump(jump);
    eng.receiver_state_mut().set_max_incarnation_ahead(ahead);
    eng.receiver_state_mut().set_incarnation_grace(grace);
    if let Some(ms) = node.get("members").and_then(Value::as_array) {
        // DF-RCV-51 (1.1): only these node ids are tracked as origins
        let set = ms
            .iter()
            .map(|m| id_of(m, "members"))
            .collect::<Result<std::collections::HashSet<u64>, _>>()?;
        eng.receiver_state_mut().set_members(Some(set));
    }
    if let Some(now) = node.get("now_us") {
        // DF-RCV-175 (1.1): the receiver's clock, after the history (which it does not judge)
        eng.set_now_us(id_of(now, "now_us")?);
    }
    let packets: Vec<Vec<u8>> = get(req, "packets")?
        .as_array()
        .ok_or_else(|| err("packets: not a list"))?
        .iter()
        .map(|p| b64_decode(p.as_str().unwrap_or("")))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
    let view = |idx: &[u32]| {
        idx.iter()
            .map(|&i| active[i as usize])
            .collect::<Vec<f32>>()
    };
    let res = eng.receive_with(&refs, Some(&view));
    res.apply_to(&mut active);
    let max = eng.config().max_packet_size;
    let mut relay = Vec::new();
    for p in eng.pack(&[], &res.relay) {
        let decoded = decode_packet(&p, max).map_err(|e| err(format!("own relay packet: {e}")))?;
        relay.push(packet_to_json(&decoded));
    }
    let code = |o: &Outcome| match o {
        Outcome::Ok => None,
        Outcome::Rejected(c) => Some(c.as_str()),
    };
    Ok(json!({
        "rejections": res.outcomes.iter().map(code).collect::<Vec<_>>(),
        "outcomes": res.outcomes.iter().map(|o| code(o).unwrap_or("ok")).collect::<Vec<_>>(),
        "entry_outcomes": res.entry_outcomes.iter()
            .map(|v| v.iter().map(|a| a.as_str()).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "aggregate": {"indices": res.indices, "values": f32_json(&res.values),
                      "values_bits": bits_of(&res.values)},
        "active": f32_json(&active),
        "active_bits": bits_of(&active),
        "anchor": f32_json(eng.anchor()),
        "anchor_bits": bits_of(eng.anchor()),
        "relay_entries": res.relay.iter().map(entry_json).collect::<Vec<_>>(),
        "relay": relay,
        "counters": counters_json(&res.counters, eng.relay_dropped_oversize()),
    }))
}

// ------------------------------------------------------------------------------------------------
// Live nodes (`peer`)
// ------------------------------------------------------------------------------------------------

/// The weights a node trains or receives into, in the canonical layout.
enum Weights {
    Flat(Vec<f32>),
    Cnn {
        model: Option<Box<Model>>,
        layout: CanonicalLayout,
        include_buffers: bool,
    },
}

/// The demo's digits CNN (`df_node::model::DigitsCnn`, `delta_fabric.demo.model.DigitsCNN`).
const DIGITS_CNN: &[(&str, &[u64])] = &[
    ("bn1.bias", &[16]),
    ("bn1.running_mean", &[16]),
    ("bn1.running_var", &[16]),
    ("bn1.weight", &[16]),
    ("conv1.bias", &[16]),
    ("conv1.weight", &[16, 1, 3, 3]),
    ("fc1.bias", &[64]),
    ("fc1.weight", &[64, 256]),
    ("fc2.bias", &[10]),
    ("fc2.weight", &[10, 64]),
];

fn scenario_manifest(model: &Value, include_buffers: bool) -> Result<Manifest, Fail> {
    let specs: Vec<TensorSpec> = match model.get("kind").and_then(Value::as_str) {
        Some("flat") => get(model, "tensors")?
            .as_array()
            .ok_or_else(|| err("model.tensors: not a list"))?
            .iter()
            .map(|t| {
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err("tensor name"))?;
                let shape: Vec<u64> = t
                    .get("shape")
                    .and_then(Value::as_array)
                    .ok_or_else(|| err("tensor shape"))?
                    .iter()
                    .map(|d| d.as_u64().ok_or_else(|| err("tensor dim")))
                    .collect::<Result<_, _>>()?;
                Ok(TensorSpec::new(name, &shape))
            })
            .collect::<Result<_, Fail>>()?,
        Some("digits_cnn") => DIGITS_CNN
            .iter()
            .filter(|(n, _)| include_buffers || !n.starts_with("bn1.running_"))
            .map(|(n, s)| TensorSpec::new(*n, s))
            .collect(),
        other => return Err(err(format!("unknown model kind {other:?}"))),
    };
    Manifest::new(specs).map_err(err)
}

fn load_split(data: &Value) -> Result<Split, Fail> {
    let n = get(data, "count")?
        .as_u64()
        .ok_or_else(|| err("data.count"))? as usize;
    let path = |k: &str| -> Result<String, Fail> {
        Ok(get(data, k)?
            .as_str()
            .ok_or_else(|| err(format!("data.{k}")))?
            .to_string())
    };
    let xb = std::fs::read(path("x")?).map_err(|e| err(format!("data.x: {e}")))?;
    let y = std::fs::read(path("y")?).map_err(|e| err(format!("data.y: {e}")))?;
    if xb.len() != n * IMAGE_LEN * 4 || y.len() != n {
        return Err(err(format!("data: sizes do not match count {n}")));
    }
    let x = xb
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Split { x, y })
}

fn batch(split: &Split, idx: &[usize]) -> (Tensor<TrainBackend, 4>, Tensor<TrainBackend, 1, Int>) {
    let device = Default::default();
    let mut x = Vec::with_capacity(idx.len() * IMAGE_LEN);
    let mut y = Vec::with_capacity(idx.len());
    for &i in idx {
        x.extend_from_slice(split.image(i));
        y.push(i64::from(split.y[i]));
    }
    let n = idx.len();
    (
        Tensor::from_data(TensorData::new(x, [n, 1, 8, 8]), &device),
        Tensor::from_data(TensorData::new(y, [n]), &device),
    )
}

/// The DF-RCV-10 counters as the driver protocol reports them (section 5.5): the engine's
/// counters plus `relay_dropped_oversize`, which the engine keeps apart because packing counts it.
fn counters_json(c: &Counters, relay_dropped_oversize: u64) -> Value {
    let mut j = c.to_json();
    j["relay_dropped_oversize"] = json!(relay_dropped_oversize);
    j
}

fn add_counters(a: &mut Counters, b: &Counters) {
    a.packets_received += b.packets_received;
    a.packets_accepted += b.packets_accepted;
    a.packets_rejected += b.packets_rejected;
    a.entries_accepted += b.entries_accepted;
    a.entries_relayed += b.entries_relayed;
    a.values_applied += b.values_applied;
    a.relay_suppressed += b.relay_suppressed;
    for (x, y) in a.errors.iter_mut().zip(b.errors) {
        *x += y;
    }
    for (x, y) in a.drops.iter_mut().zip(b.drops) {
        *x += y;
    }
}

/// The anchor served to joiners (DF-ZEN-5), replaced after every step that changed it.
type Served = Arc<Mutex<(u64, Arc<Vec<f32>>)>>;

struct PeerNode {
    join: Value,
    node_id: u64,
    manifest: Manifest,
    config: SyncConfig,
    engine: Engine,
    weights: Weights,
    transport: Option<ZenohTransport>,
    served: Served,
    accepted: Vec<Value>,
    past: Counters,
    /// `relay_dropped_oversize` of earlier incarnations (restarts).
    past_dropped_oversize: u64,
    steps: u64,
    rng: SplitMix64,
}

impl PeerNode {
    fn open_transport(&self) -> Result<ZenohTransport, Fail> {
        let j = &self.join;
        let strings = |k: &str| -> Result<Vec<String>, Fail> {
            get(j, k)?
                .as_array()
                .ok_or_else(|| err(format!("{k}: not a list")))?
                .iter()
                .map(|s| {
                    s.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| err(format!("{k}: not strings")))
                })
                .collect()
        };
        let subscribe = strings("subscribe")?;
        let mut cfg = TransportConfig::new(self.node_id);
        cfg.namespace = get(j, "namespace")?
            .as_str()
            .unwrap_or_default()
            .to_string();
        cfg.listen = strings("listen")?;
        cfg.connect = strings("connect")?;
        cfg.multicast = false; // multicast and gossip scouting off (DF-ZEN-15)
        cfg.max_packet_size = self.config.max_packet_size;
        cfg.neighbours = if subscribe == ["*"] {
            None
        } else {
            Some(
                subscribe
                    .iter()
                    .map(|s| id_of(&json!(s), "subscribe"))
                    .collect::<Result<_, _>>()?,
            )
        };
        let t = ZenohTransport::open(cfg).map_err(|e| err(e.to_string()))?;
        let served = self.served.clone();
        let fp = self.manifest.fingerprint();
        t.serve_snapshot(Arc::new(move || {
            let (incarnation, values) = served.lock().map(|g| g.clone()).map_err(|_| {
                SnapshotError::new(SnapshotErrorKind::ServerError, "node state poisoned")
            })?;
            SnapshotSource::new(incarnation, fp, values.as_slice(), "burn")
        }))
        .map_err(|e| err(e.to_string()))?;
        Ok(t)
    }

    fn join(j: &Value) -> Result<PeerNode, Fail> {
        let config = SyncConfig::from_json(get(j, "config")?).map_err(err)?;
        let include_buffers = get(j, "config")?
            .get("include_buffers")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let model_json = get(j, "model")?;
        let manifest = scenario_manifest(model_json, include_buffers)?;
        let n = manifest.num_params() as usize;
        let node_id = id_of(get(j, "node_id")?, "node_id")?;
        let incarnation = id_of(get(j, "incarnation")?, "incarnation")?;
        let seed = j.get("seed").and_then(Value::as_u64).unwrap_or(0);
        let engine = Engine::new(
            manifest.clone(),
            config.clone(),
            node_id,
            incarnation,
            vec![0.0; n],
        )
        .map_err(|e| err(e.to_string()))?;
        let mut node = PeerNode {
            join: j.clone(),
            node_id,
            manifest,
            config,
            engine,
            weights: Weights::Flat(vec![0.0; n]),
            transport: None,
            served: Arc::new(Mutex::new((incarnation, Arc::new(vec![0.0; n])))),
            accepted: Vec::new(),
            past: Counters::default(),
            past_dropped_oversize: 0,
            steps: 0,
            rng: SplitMix64::new(seed),
        };
        node.transport = Some(node.open_transport()?);
        let init = get(j, "init")?;
        let flat: Vec<f32> = match init.get("kind").and_then(Value::as_str) {
            Some("zeros") => vec![0.0; n],
            Some("weights") => {
                let b = b64_decode(get(init, "b64")?.as_str().unwrap_or(""))?;
                let w: Vec<f32> = b
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                if w.len() != n {
                    return Err(err(format!("init weights: {} values for N = {n}", w.len())));
                }
                w
            }
            Some("snapshot") => {
                let from = id_of(get(init, "from")?, "init.from")?;
                let secs = init
                    .get("timeout_s")
                    .and_then(Value::as_f64)
                    .unwrap_or(30.0);
                let t = node.transport.as_ref().ok_or_else(|| err("no transport"))?;
                let snap = t
                    .fetch_snapshot(
                        from,
                        &node.manifest.fingerprint(),
                        Duration::from_secs_f64(secs),
                    )
                    .map_err(|e| err(e.to_string()))?;
                if snap.values.len() != n {
                    return Err(err("snapshot size differs from N"));
                }
                snap.values
            }
            other => return Err(err(format!("unknown init kind {other:?}"))),
        };
        if model_json.get("kind").and_then(Value::as_str) == Some("digits_cnn") {
            let model = initial_model(Some(&flat), include_buffers, seed)
                .map_err(|e| err(e.to_string()))?;
            let (layout, m) =
                model_manifest(&model, include_buffers).map_err(|e| err(e.to_string()))?;
            if m.fingerprint() != node.manifest.fingerprint() {
                return Err(err(
                    "the Burn model's manifest differs from the scenario model's",
                ));
            }
            node.weights = Weights::Cnn {
                model: Some(Box::new(model)),
                layout,
                include_buffers,
            };
        } else {
            node.weights = Weights::Flat(flat.clone());
        }
        node.engine = Engine::new(
            node.manifest.clone(),
            node.config.clone(),
            node_id,
            incarnation,
            flat,
        )
        .map_err(|e| err(e.to_string()))?;
        node.publish_anchor();
        Ok(node)
    }

    fn transport(&self) -> Result<&ZenohTransport, Fail> {
        self.transport
            .as_ref()
            .ok_or_else(|| err("transport closed"))
    }

    fn publish_anchor(&self) {
        if let Ok(mut g) = self.served.lock() {
            *g = (
                self.engine.incarnation(),
                Arc::new(self.engine.anchor().to_vec()),
            );
        }
    }

    fn active(&self) -> Result<Vec<f32>, Fail> {
        match &self.weights {
            Weights::Flat(v) => Ok(v.clone()),
            Weights::Cnn {
                model,
                include_buffers,
                ..
            } => {
                let m = model.as_ref().ok_or_else(|| err("model missing"))?;
                df_burn::export_with_layout::<TrainBackend, _>(m.as_ref(), *include_buffers)
                    .map(|(_, v)| v)
                    .map_err(|e| err(e.to_string()))
            }
        }
    }

    /// One protocol step: local delta, receive/apply/relay, generate when `sync`, publish.
    fn step(&mut self, sync: bool, delta: Option<&Value>) -> Result<Vec<Value>, Fail> {
        if let Some(d) = delta {
            let Weights::Flat(active) = &mut self.weights else {
                return Err(err("a scripted delta needs the flat model"));
            };
            let idx = get(d, "indices")?
                .as_array()
                .ok_or_else(|| err("delta.indices"))?;
            let vals = get(d, "values")?
                .as_array()
                .ok_or_else(|| err("delta.values"))?;
            for (i, v) in idx.iter().zip(vals) {
                let i = i.as_u64().ok_or_else(|| err("delta index"))? as usize;
                let v = df_core::wire::f32_from_json(v).map_err(err)?;
                *active
                    .get_mut(i)
                    .ok_or_else(|| err("delta index out of range"))? += v;
            }
        }
        let packets = self
            .transport()?
            .drain(usize::MAX)
            .map_err(|e| err(e.to_string()))?;
        // DF-ZEN-154: packets the transport refused before its queue are counted as the engine
        // counts a packet it rejects
        for (code, n) in self.transport()?.take_screened() {
            self.engine.count_rejected(code, n);
        }
        let mut relay = Vec::new();
        if !packets.is_empty() {
            let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            let current = self.active()?;
            let view = |idx: &[u32]| {
                idx.iter()
                    .map(|&i| current[i as usize])
                    .collect::<Vec<f32>>()
            };
            let res = self.engine.receive_with(&refs, Some(&view));
            for ((buf, outcome), verdicts) in
                packets.iter().zip(&res.outcomes).zip(&res.entry_outcomes)
            {
                if *outcome != Outcome::Ok {
                    continue;
                }
                let pkt = decode_packet(buf, self.config.max_packet_size)
                    .map_err(|e| err(e.to_string()))?;
                for (e, v) in pkt.entries.iter().zip(verdicts) {
                    if *v == Admission::Accepted {
                        self.accepted.push(json!({"origin": hex16(e.origin),
                            "incarnation": hex16(e.incarnation), "seq": e.seq, "hops": e.hops}));
                    }
                }
            }
            match &mut self.weights {
                Weights::Flat(active) => res.apply_to(active),
                Weights::Cnn { model, layout, .. } => {
                    if !res.indices.is_empty() {
                        let m = model.take().ok_or_else(|| err("model missing"))?;
                        let (m, _) = df_burn::apply_sparse::<TrainBackend, _>(
                            *m,
                            layout,
                            &res.indices,
                            &res.values,
                        )
                        .map_err(|e| err(e.to_string()))?;
                        *model = Some(Box::new(m));
                    }
                }
            }
            relay = res.relay;
        }
        let own = if sync {
            let active = self.active()?;
            self.engine
                .generate(&active, false)
                .map_err(|e| err(e.to_string()))?
        } else {
            Vec::new()
        };
        self.steps += 1;
        let mut published = Vec::new();
        if !packets.is_empty() || !own.is_empty() {
            self.publish_anchor();
        }
        for p in self.engine.pack_packets(&own, &relay) {
            for e in &p.entries {
                published.push(
                    json!({"origin": hex16(e.origin), "incarnation": hex16(e.incarnation),
                                      "seq": e.seq, "hops": e.hops}),
                );
            }
            self.transport()?
                .publish(&encode_packet(&p))
                .map_err(|e| err(e.to_string()))?;
        }
        Ok(published)
    }

    fn counters(&self) -> Counters {
        let mut c = self.past.clone();
        add_counters(&mut c, self.engine.counters());
        c
    }

    fn matches(&self, want: &Value) -> bool {
        self.accepted.iter().any(|a| {
            a["origin"] == want["origin"]
                && a["seq"] == want["seq"]
                && (want.get("incarnation").is_none() || a["incarnation"] == want["incarnation"])
        })
    }

    fn wait(&mut self, until: &Value, timeout: Duration) -> Result<bool, Fail> {
        let deadline = Instant::now() + timeout;
        loop {
            self.step(false, None)?;
            if let Some(list) = until.get("accepted").and_then(Value::as_array)
                && list.iter().all(|w| self.matches(w))
            {
                return Ok(true);
            }
            if let Some(n) = until.get("packets_received").and_then(Value::as_u64)
                && self.counters().packets_received >= n
            {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.transport()?
                .wait_for_packets(left.min(Duration::from_millis(50)))
                .map_err(|e| err(e.to_string()))?;
        }
    }

    fn settle(&mut self, quiet: Duration, timeout: Duration) -> Result<(), Fail> {
        let deadline = Instant::now() + timeout;
        let mut last = Instant::now();
        while Instant::now() < deadline {
            let before = self.counters().packets_received;
            self.step(false, None)?;
            if self.counters().packets_received != before {
                last = Instant::now();
            } else if last.elapsed() >= quiet {
                return Ok(());
            }
            self.transport()?
                .wait_for_packets(Duration::from_millis(20))
                .map_err(|e| err(e.to_string()))?;
        }
        Ok(())
    }

    fn close(&mut self) {
        if let Some(mut t) = self.transport.take()
            && let Err(e) = t.close()
        {
            log(&format!("closing the transport: {e}"));
        }
    }

    fn restart(&mut self, incarnation: u64, connect: Option<&Value>) -> Result<(), Fail> {
        if let Some(c) = connect {
            self.join["connect"] = c.clone();
        }
        add_counters(&mut self.past, self.engine.counters());
        self.past_dropped_oversize += self.engine.relay_dropped_oversize();
        let anchor = self.engine.anchor().to_vec();
        self.close();
        self.engine = Engine::new(
            self.manifest.clone(),
            self.config.clone(),
            self.node_id,
            incarnation,
            anchor,
        )
        .map_err(|e| err(e.to_string()))?;
        self.publish_anchor();
        self.transport = Some(self.open_transport()?);
        Ok(())
    }

    fn train(&mut self, ins: &Value) -> Result<u64, Fail> {
        let split = load_split(get(ins, "data")?)?;
        if split.is_empty() {
            return Err(err("empty training shard"));
        }
        let steps = get(ins, "steps")?.as_u64().ok_or_else(|| err("steps"))?;
        let lr = get(ins, "lr")?.as_f64().ok_or_else(|| err("lr"))?;
        let bs = ins.get("batch_size").and_then(Value::as_u64).unwrap_or(32) as usize;
        if let Some(seed) = ins.get("seed").and_then(Value::as_u64) {
            self.rng = SplitMix64::new(seed ^ self.node_id);
        }
        let interval = u64::from(self.config.sync_interval.max(1));
        // plain SGD (no momentum) keeps no state: a fresh optimizer per call is the same optimizer
        let cfg: SgdConfig = sgd_config(0.0);
        let mut optim = cfg.init::<TrainBackend, Model>();
        for _ in 0..steps {
            let idx: Vec<usize> = (0..bs).map(|_| self.rng.below(split.len())).collect();
            let (x, y) = batch(&split, &idx);
            let Weights::Cnn { model, .. } = &mut self.weights else {
                return Err(err("train needs the digits_cnn model"));
            };
            let m = model.take().ok_or_else(|| err("model missing"))?;
            let (m, _loss) = train_step(*m, &mut optim, x, y, lr);
            *model = Some(Box::new(m));
            self.step((self.steps + 1).is_multiple_of(interval), None)?;
        }
        Ok(steps)
    }

    fn evaluate(&self, ins: &Value) -> Answer {
        let split = load_split(get(ins, "data")?)?;
        let Weights::Cnn { model: Some(m), .. } = &self.weights else {
            return Err(err("evaluate needs the digits_cnn model"));
        };
        let (acc, per_class) = evaluate(m.as_ref(), &split);
        Ok(json!({"op": "evaluate", "accuracy": acc,
                  "per_class": per_class.iter().map(|x| x.unwrap_or(0.0)).collect::<Vec<_>>()}))
    }

    fn report(&self, weights: bool) -> Answer {
        let active = self.active()?;
        let mut out = json!({
            "op": "report",
            "node_id": hex16(self.node_id),
            "incarnation": hex16(self.engine.incarnation()),
            "fingerprint": hex_lower(&self.manifest.fingerprint()),
            "num_params": self.manifest.num_params(),
            "accepted": self.accepted,
            "counters": counters_json(
                &self.counters(),
                self.past_dropped_oversize + self.engine.relay_dropped_oversize(),
            ),
            "active_sha256": sha256_hex(&active),
            "anchor_sha256": sha256_hex(self.engine.anchor()),
            "steps": self.steps,
        });
        if weights {
            out["active_b64"] = json!(b64_encode(&le_bytes(&active)));
            out["anchor_b64"] = json!(b64_encode(&le_bytes(self.engine.anchor())));
        }
        Ok(out)
    }
}

#[derive(Default)]
struct PeerHost {
    nodes: HashMap<String, PeerNode>,
}

fn secs(v: &Value, key: &str, default: f64) -> Duration {
    Duration::from_secs_f64(
        v.get(key)
            .and_then(Value::as_f64)
            .unwrap_or(default)
            .max(0.0),
    )
}

impl PeerHost {
    fn run(&mut self, req: &Value) -> Answer {
        let session = get(req, "session")?
            .as_str()
            .ok_or_else(|| err("session"))?
            .to_string();
        let deadline = Instant::now() + secs(req, "timeout_s", 60.0);
        let script = get(req, "script")?
            .as_array()
            .ok_or_else(|| err("script: not a list"))?;
        let mut events = Vec::new();
        for ins in script {
            if Instant::now() > deadline {
                return Err(err(format!(
                    "peer script of {session:?} ran past its timeout"
                )));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            events.push(self.one(&session, ins, left)?);
        }
        Ok(json!({ "events": events }))
    }

    fn node(&mut self, session: &str) -> Result<&mut PeerNode, Fail> {
        self.nodes
            .get_mut(session)
            .ok_or_else(|| err(format!("session {session:?} has not joined")))
    }

    fn one(&mut self, session: &str, ins: &Value, left: Duration) -> Answer {
        let op = get(ins, "op")?.as_str().ok_or_else(|| err("op"))?;
        if op == "join" {
            if self.nodes.contains_key(session) {
                return Err(err(format!("session {session:?} already joined")));
            }
            let node = PeerNode::join(ins)?;
            let ev = json!({"op": "join", "fingerprint": hex_lower(&node.manifest.fingerprint()),
                            "num_params": node.manifest.num_params()});
            self.nodes.insert(session.to_string(), node);
            return Ok(ev);
        }
        let node = self.node(session)?;
        match op {
            "wait_alive" => {
                let want: Vec<u64> = get(ins, "nodes")?
                    .as_array()
                    .ok_or_else(|| err("nodes"))?
                    .iter()
                    .map(|n| id_of(n, "nodes"))
                    .collect::<Result<_, _>>()?;
                let deadline = Instant::now() + secs(ins, "timeout_s", 20.0).min(left);
                loop {
                    let live = node.transport()?.peers().map_err(|e| err(e.to_string()))?;
                    if want.iter().all(|w| live.contains(w)) || Instant::now() >= deadline {
                        std::thread::sleep(secs(ins, "grace_ms", 300.0) / 1000);
                        let alive: Vec<String> = live.iter().map(|&x| hex16(x)).collect();
                        return Ok(json!({"op": "wait_alive", "alive": alive}));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            "step" => {
                let sync = get(ins, "sync")?.as_bool().ok_or_else(|| err("sync"))?;
                let published = node.step(sync, ins.get("delta"))?;
                Ok(json!({"op": "step", "published": published}))
            }
            "send" => {
                let list = get(ins, "packets")?
                    .as_array()
                    .ok_or_else(|| err("packets"))?;
                for p in list {
                    let pkt = packet_from_json(p).map_err(err)?;
                    node.transport()?
                        .publish(&encode_packet(&pkt))
                        .map_err(|e| err(e.to_string()))?;
                }
                Ok(json!({"op": "send", "count": list.len()}))
            }
            "inject" => {
                let list = get(ins, "packets")?
                    .as_array()
                    .ok_or_else(|| err("packets"))?;
                for p in list {
                    let bytes = b64_decode(p.as_str().unwrap_or(""))?;
                    node.transport()?
                        .publish(&bytes)
                        .map_err(|e| err(e.to_string()))?;
                }
                Ok(json!({"op": "inject", "count": list.len()}))
            }
            "wait" => {
                let ok = node.wait(get(ins, "until")?, secs(ins, "timeout_s", 20.0).min(left))?;
                Ok(json!({"op": "wait", "satisfied": ok}))
            }
            "settle" => {
                let quiet = secs(ins, "quiet_ms", 300.0) / 1000;
                node.settle(quiet, secs(ins, "timeout_s", 10.0).min(left))?;
                Ok(json!({"op": "settle"}))
            }
            "restart" => {
                node.restart(
                    id_of(get(ins, "incarnation")?, "incarnation")?,
                    ins.get("connect"),
                )?;
                Ok(json!({"op": "restart"}))
            }
            "train" => Ok(json!({"op": "train", "steps": node.train(ins)?})),
            "evaluate" => node.evaluate(ins),
            "report" => node.report(ins.get("weights").and_then(Value::as_bool).unwrap_or(false)),
            "leave" => {
                node.close();
                self.nodes.remove(session);
                Ok(json!({"op": "leave"}))
            }
            other => Err(err(format!("unknown instruction {other:?}"))),
        }
    }

    fn close(&mut self) {
        for n in self.nodes.values_mut() {
            n.close();
        }
        self.nodes.clear();
    }
}

// ------------------------------------------------------------------------------------------------
// Snapshot vectors (driver protocol 5.8): df_core::snapshot
// ------------------------------------------------------------------------------------------------

fn chunk_json(c: &SnapshotChunk<'_>) -> Value {
    json!({
        "version_major": 1,
        "version_minor": c.version_minor,
        "node": hex16(c.node),
        "incarnation": hex16(c.incarnation),
        "fingerprint": hex_lower(&c.fingerprint),
        "snapshot_id": hex16(c.snapshot_id),
        "total": c.total,
        "offset": c.offset,
        "digest": hex_lower(&c.digest),
        "values": f32_json(&c.values),
        "values_bits": bits_of(&c.values),
    })
}

fn refused(e: &SnapshotError, at: Option<usize>) -> Value {
    let mut v = json!({"outcome": e.kind.as_str(), "message": e.detail});
    if let Some(at) = at {
        v["at"] = json!(at);
    }
    v
}

fn b64_member(req: &Value, key: &str) -> Result<Vec<u8>, Fail> {
    b64_decode(
        get(req, key)?
            .as_str()
            .ok_or_else(|| err(format!("{key}: not a string")))?,
    )
}

fn snapshot_decode(req: &Value) -> Answer {
    let buf = b64_member(req, "chunk")?;
    Ok(match decode_chunk(&buf) {
        Ok(c) => json!({"outcome": "ok", "chunk": chunk_json(&c)}),
        Err(e) => refused(&e, None),
    })
}

fn snapshot_assemble(req: &Value) -> Answer {
    let v = get(req, "vector")?;
    let chunks: Vec<Vec<u8>> = get(req, "chunks")?
        .as_array()
        .ok_or_else(|| err("chunks: not a list"))?
        .iter()
        .map(|c| b64_decode(c.as_str().ok_or_else(|| err("chunks: not strings"))?))
        .collect::<Result<_, _>>()?;
    let indices: Vec<u64> = get(v, "indices")?
        .as_array()
        .ok_or_else(|| err("indices: not a list"))?
        .iter()
        .map(|i| i.as_u64().ok_or_else(|| err("indices: not integers")))
        .collect::<Result<_, _>>()?;
    if indices.len() != chunks.len() {
        return Err(err(format!(
            "{} chunks for {} indices",
            chunks.len(),
            indices.len()
        )));
    }
    let chunk_size = usize::try_from(
        get(v, "chunk_size")?
            .as_u64()
            .ok_or_else(|| err("chunk_size"))?,
    )
    .map_err(|_| err("chunk_size"))?;
    let num_params = get(v, "num_params")?
        .as_u64()
        .ok_or_else(|| err("num_params"))?;
    let mut asm = SnapshotAssembler::new(
        fingerprint(get(v, "fingerprint")?.as_str().unwrap_or(""))?,
        chunk_size,
    )
    .map_err(|e| err(e.to_string()))?
    .expect_total(num_params)
    .expect_node(id_of(get(v, "node")?, "node")?);
    for (at, (&index, buf)) in indices.iter().zip(&chunks).enumerate() {
        let added = decode_chunk(buf).and_then(|c| asm.add(index, &c));
        if let Err(e) = added {
            return Ok(refused(&e, Some(at)));
        }
    }
    Ok(match asm.finish() {
        Ok(s) => json!({
            "outcome": "ok",
            "at": null,
            "node": hex16(s.header.node),
            "incarnation": hex16(s.header.incarnation),
            "snapshot_id": hex16(s.header.snapshot_id),
            "total": s.header.total,
            "digest": hex_lower(&s.header.digest),
            "values": f32_json(&s.values),
            "values_bits": bits_of(&s.values),
        }),
        Err(e) => refused(&e, Some(chunks.len())),
    })
}

/// `snapshot_serve` (driver protocol 5.12): the snapshot queryable of one node (spec DF-ZEN-5,
/// DF-ZEN-11), `df_core::snapshot::SnapshotServer` with the vector's `max_packet_size`, whose one
/// capture is the vector's anchor, answering the queries in order. Every query is answered at one
/// instant with reuse and keep times that are never reached, so no clock reaches a result (driver
/// protocol section 4): the chunks are cut from one capture, as for a joiner's queries within a
/// second. Each reply is `{"chunk": base64}` or `{"error": "BAD_REQUEST" | "NON_FINITE", "message"}`
/// (`NON_FINITE`: a query DF-ZEN-43 refuses, the capture is not finite).
fn snapshot_serve(req: &Value) -> Answer {
    let v = get(req, "vector")?;
    let source = CoreSnapshotSource::new(
        id_of(get(v, "incarnation")?, "incarnation")?,
        fingerprint(get(v, "fingerprint")?.as_str().unwrap_or(""))?,
        f32s_from(v, "anchor")?,
        "burn",
    )
    .map_err(|e| err(e.to_string()))?;
    let mps = get(v, "max_packet_size")?
        .as_u64()
        .and_then(|m| usize::try_from(m).ok())
        .ok_or_else(|| err("max_packet_size: not an integer"))?;
    let mut server = SnapshotServer::new(id_of(get(v, "node")?, "node")?, mps)
        .map_err(|e| err(e.to_string()))?
        .with_times(Duration::MAX, Duration::MAX);
    let now = Instant::now();
    let mut replies = Vec::new();
    for q in get(v, "queries")?
        .as_array()
        .ok_or_else(|| err("queries: not a list"))?
    {
        let q = q.as_str().ok_or_else(|| err("queries: not strings"))?;
        replies.push(match server.answer(q, now, || source.clone()) {
            Ok(buf) => json!({"chunk": b64_encode(&buf)}),
            Err(e)
                if matches!(
                    e.kind,
                    SnapshotErrorKind::BadRequest | SnapshotErrorKind::NonFinite
                ) =>
            {
                json!({"error": e.kind.as_str(), "message": e.detail})
            }
            Err(e) => return Err(err(e.to_string())),
        });
    }
    Ok(json!({ "replies": replies }))
}

// ------------------------------------------------------------------------------------------------
// The forward check (driver protocol 5.9): the Burn digits CNN of df-node
// ------------------------------------------------------------------------------------------------

/// `repair_decode` (driver protocol 5.11, 1.1; spec DF-RCV-161).
fn repair_decode(req: &Value) -> Answer {
    Ok(df_core::repair_io::repair_decode(&b64_member(
        req, "bytes",
    )?))
}

/// `repair_gaps` (driver protocol 5.11, 1.1; spec DF-RCV-162, -163, -165, -230).
fn repair_gaps(req: &Value) -> Answer {
    df_core::repair_io::repair_gaps(get(req, "vector")?).map_err(err)
}

/// `repair_resend` (driver protocol 5.11, 1.1; spec DF-RCV-164, -165).
fn repair_resend(req: &Value) -> Answer {
    df_core::repair_io::repair_resend(get(req, "vector")?).map_err(err)
}

/// `repair_encode` (driver protocol 5.11, 1.1): the buffer in base64, or the refusal.
fn repair_encode(req: &Value) -> Answer {
    Ok(
        match df_core::repair_io::repair_encode(get(req, "request")?).map_err(err)? {
            Ok(buf) => json!({"outcome": "ok", "bytes": b64_encode(&buf)}),
            Err(refusal) => refusal,
        },
    )
}

fn f32s_b64(req: &Value, key: &str) -> Result<Vec<f32>, Fail> {
    let raw = b64_member(req, key)?;
    if raw.len() % 4 != 0 {
        return Err(err(format!("{key}: not a whole number of f32")));
    }
    Ok(raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn rows_json(v: &[f32], n: usize) -> Value {
    let width = v.len().checked_div(n).unwrap_or(0);
    Value::Array(
        v.chunks(width.max(1))
            .map(|r| Value::Array(r.iter().map(|&x| json!(f64::from(x))).collect()))
            .collect(),
    )
}

fn forward(req: &Value) -> Answer {
    let v = get(req, "vector")?;
    let include_buffers = v
        .get("include_buffers")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let manifest = scenario_manifest(get(v, "model")?, include_buffers)?;
    if manifest_of(v)? != manifest
        || hex_lower(&manifest.fingerprint()) != get(v, "fingerprint")?.as_str().unwrap_or("")
    {
        return Err(err("the vector's manifest is not the digits CNN's"));
    }
    let n = usize::try_from(get(v, "count")?.as_u64().ok_or_else(|| err("count"))?)
        .map_err(|_| err("count"))?;
    let x = f32s_b64(v, "x_b64")?;
    let y: Vec<i64> = get(v, "y")?
        .as_array()
        .ok_or_else(|| err("y: not a list"))?
        .iter()
        .map(|l| l.as_i64().ok_or_else(|| err("y: not integers")))
        .collect::<Result<_, _>>()?;
    let weights = f32s_b64(v, "weights_b64")?;
    let lr = get(v, "lr")?.as_f64().ok_or_else(|| err("lr"))?;
    if x.len() != n * IMAGE_LEN || y.len() != n || weights.len() as u64 != manifest.num_params() {
        return Err(err(
            "x_b64, y or weights_b64 do not match count / the manifest",
        ));
    }
    let (layout, _) = initial_model(Some(&weights), include_buffers, 0)
        .and_then(|m| model_manifest(&m, include_buffers))
        .map_err(|e| err(e.to_string()))?;
    if df_burn::layout_manifest(&layout).map_err(|e| err(e.to_string()))? != manifest {
        return Err(err("the Burn model's manifest differs from the vector's"));
    }
    // inference logits, then one plain SGD step exactly as the `train` instruction runs it
    let out =
        forward_check(&weights, include_buffers, &x, &y, lr).map_err(|e| err(e.to_string()))?;
    Ok(json!({
        "logits_eval": rows_json(&out.logits_eval, n),
        "logits_train": rows_json(&out.logits_train, n),
        "loss": f64::from(out.loss),
        "weights_b64": b64_encode(&le_bytes(&out.weights)),
    }))
}

// ------------------------------------------------------------------------------------------------
// The loop
// ------------------------------------------------------------------------------------------------

fn respond(host: &mut PeerHost, req: &Value) -> Value {
    let cmd = req.get("cmd").and_then(Value::as_str).unwrap_or("");
    let result = match cmd {
        "hello" => hello(req),
        "decode" => decode(req),
        "decode_batch" => decode_batch(req),
        "encode" => encode(req),
        "generate" => generate(req),
        "receive" => receive(req),
        "check_config" => check_config(req),
        "snapshot_decode" => snapshot_decode(req),
        "snapshot_assemble" => snapshot_assemble(req),
        "snapshot_serve" => snapshot_serve(req),
        "repair_decode" => repair_decode(req),
        "repair_encode" => repair_encode(req),
        "repair_gaps" => repair_gaps(req),
        "repair_resend" => repair_resend(req),
        "forward" => forward(req),
        "peer" => host.run(req),
        "stop" => {
            host.close();
            Ok(json!({}))
        }
        _ => return json!({"unsupported": {"cmd": cmd}}),
    };
    match result {
        Ok(v) => json!({ "ok": v }),
        Err(Fail::Rejected(code, message)) => {
            json!({"rejected": {"code": code.as_str(), "message": message}})
        }
        Err(Fail::Errored(message)) => {
            log(&format!("{cmd} failed: {message}"));
            json!({"errored": {"message": message}})
        }
    }
}

fn main() {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut host = PeerHost::default();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let (seq, body, stop) = match df_core::json::from_str(&line) {
            Ok(req) if req.is_object() => {
                let stop = req.get("cmd").and_then(Value::as_str) == Some("stop");
                let seq = req.get("seq").cloned().unwrap_or(json!(0));
                let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    respond(&mut host, &req)
                }))
                .unwrap_or_else(|_| json!({"errored": {"message": "panic (see stderr)"}}));
                (seq, body, stop)
            }
            _ => (
                json!(0),
                json!({"errored": {"message": "unreadable request"}}),
                false,
            ),
        };
        let mut msg = Map::new();
        msg.insert("seq".into(), seq);
        if let Value::Object(b) = body {
            msg.extend(b);
        }
        let written = writeln!(stdout, "{}", Value::Object(msg)).and_then(|()| stdout.flush());
        if written.is_err() || stop {
            break;
        }
    }
    host.close();
}
