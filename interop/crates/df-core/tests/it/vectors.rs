//! Every conformance vector of `conformance/vectors/index.json`, bit for bit.

use std::path::{Path, PathBuf};

// the compact form of large arrays; a file of its own beside this one in both test binaries
#[path = "recipes.rs"]
mod recipes;

use serde_json::Value;

use df_core::snapshot::{
    SnapshotAssembler, SnapshotChunk, SnapshotServer, SnapshotSource, decode_chunk,
};
use df_core::wire::{entry_from_json, packet_from_json};
use df_core::{
    Admission, Engine, EngineError, Manifest, Outcome, OwnedEntry, OwnedPacket, SyncConfig,
    decode_packet, encode_packet, validate_packet,
};

/// `conformance/vectors` of this checkout, or `$DF_CONFORMANCE_VECTORS` (the mutation campaign runs an
/// older commit's vectors to score the suite before a change).
fn vectors_dir() -> PathBuf {
    match std::env::var_os("DF_CONFORMANCE_VECTORS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../conformance/vectors"),
    }
}

fn read_json(p: &Path) -> Result<Value, String> {
    let s = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    // correctly rounded floats (df_core::json), as df-driver reads its requests; recipes expanded
    // to the full form, as the runner expands them before it sends a vector to a driver
    let mut v = df_core::json::from_str(&s).map_err(|e| format!("{}: {e}", p.display()))?;
    recipes::expand(&mut v).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(v)
}

fn s<'a>(v: &'a Value, k: &str) -> Result<&'a Value, String> {
    v.get(k).ok_or_else(|| format!("missing key {k}"))
}

fn hex_u64(v: &Value) -> Result<u64, String> {
    Ok(df_core::wire::u64_from_json(v, "id")?)
}

fn bits(v: &Value) -> Result<Vec<f32>, String> {
    v.as_array()
        .ok_or("bits: not a list")?
        .iter()
        .map(|b| {
            let t = b.as_str().ok_or("bits: not a string")?;
            u32::from_str_radix(t, 16)
                .map(f32::from_bits)
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn bit_vec(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn cmp_bits(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    if bit_vec(got) != bit_vec(want) {
        return Err(format!("{what}: got {got:?}, want {want:?}"));
    }
    Ok(())
}

fn entry_eq(what: &str, got: &OwnedEntry, want: &OwnedEntry) -> Result<(), String> {
    if (got.origin, got.incarnation, got.seq, got.hops, &got.indices)
        != (
            want.origin,
            want.incarnation,
            want.seq,
            want.hops,
            &want.indices,
        )
    {
        return Err(format!("{what}: got {got:?}, want {want:?}"));
    }
    // REQ: DF-SEC-140, DF-RLY-140 (the signature generated or forwarded, 1.1)
    if got.signature != want.signature {
        return Err(format!(
            "{what}: signature {:?}, want {:?}",
            got.signature.as_deref().map(hex),
            want.signature.as_deref().map(hex)
        ));
    }
    cmp_bits(&format!("{what} values"), &got.values, &want.values)
}

/// Expected entry with `values_bits` when present.
fn expected_entry(v: &Value) -> Result<OwnedEntry, String> {
    let mut e = entry_from_json(v)?;
    if let Some(b) = v.get("values_bits") {
        e.values = bits(b)?;
    }
    Ok(e)
}

fn packet_eq(what: &str, got: &OwnedPacket, want: &OwnedPacket) -> Result<(), String> {
    if (
        got.version_major,
        got.version_minor,
        got.sender,
        got.sender_incarnation,
        &got.fingerprint,
        got.encoding,
        &got.heard,
    ) != (
        want.version_major,
        want.version_minor,
        want.sender,
        want.sender_incarnation,
        &want.fingerprint,
        want.encoding,
        &want.heard,
    ) {
        return Err(format!(
            "{what}: header differs: got {got:?}, want {want:?}"
        ));
    }
    if got.entries.len() != want.entries.len() {
        return Err(format!(
            "{what}: {} entries, want {}",
            got.entries.len(),
            want.entries.len()
        ));
    }
    for (j, (a, b)) in got.entries.iter().zip(&want.entries).enumerate() {
        entry_eq(&format!("{what} entries[{j}]"), a, b)?;
    }
    Ok(())
}

fn ctx(j: &Value) -> Result<([u8; 32], u64, u8, usize), String> {
    let c = s(j, "context")?;
    let fp = hex::decode(s(c, "fingerprint")?.as_str().ok_or("fp")?).map_err(|e| e.to_string())?;
    let fp: [u8; 32] = fp.try_into().map_err(|_| "fingerprint length")?;
    let n = s(c, "num_params")?.as_u64().ok_or("num_params")?;
    let h =
        u8::try_from(s(c, "hop_limit")?.as_u64().ok_or("hop_limit")?).map_err(|e| e.to_string())?;
    let m = usize::try_from(s(c, "max_packet_size")?.as_u64().ok_or("mps")?)
        .map_err(|e| e.to_string())?;
    Ok((fp, n, h, m))
}

/// Length of the LEB128 varint of `v` (DF-PKT-116), computed here, not by `df_core::compact`.
fn varint_len(v: u32) -> usize {
    (1..=5).find(|&n| u64::from(v) >> (7 * n) == 0).unwrap_or(5)
}

/// The packed indices a sender MUST write for `indices` (DF-PKT-110, DF-PKT-116): the shorter of the
/// delta and bitmap forms, delta on a tie. Written here from the spec's table, independently of
/// `df_core::compact`, so that a mutant of the encoder cannot change what it is compared with.
fn shorter_form(indices: &[u32]) -> Vec<u8> {
    let mut delta = vec![0u8];
    let mut prev = None;
    for &i in indices {
        let mut v = prev.map_or(i, |p| i - p);
        prev = Some(i);
        while v >= 0x80 {
            delta.push(0x80 | (v & 0x7F) as u8);
            v >>= 7;
        }
        delta.push(v as u8);
    }
    let (base, last) = (indices[0], indices[indices.len() - 1]);
    let span = (last - base) as usize + 1;
    if 1 + varint_len(base) + span.div_ceil(8) >= delta.len() {
        return delta;
    }
    let mut bitmap = delta[..1 + varint_len(base)].to_vec();
    bitmap[0] = 1;
    let start = bitmap.len();
    bitmap.resize(start + span.div_ceil(8), 0);
    for &i in indices {
        let r = (i - base) as usize;
        bitmap[start + r / 8] |= 1 << (r % 8);
    }
    bitmap
}

/// The runner's encode round trip (`Runner.run_encode`) with this implementation as producer and
/// consumer: it encodes the vector's packet, decodes its own bytes under the vector's context to the
/// same packet, and (DF-PKT-116) writes each entry's packed indices in the shorter form.
fn encode_round_trip(
    want: &OwnedPacket,
    (fp, n, h, m): ([u8; 32], u64, u8, usize),
) -> Result<(), String> {
    let bytes = encode_packet(want);
    let got = decode_packet(&bytes, m)
        .and_then(|p| validate_packet(&p, &fp, n, h).map(|()| p))
        .map_err(|e| format!("encode: its own encoding is rejected: {e}"))?;
    packet_eq("encode", &got.to_owned_packet(), want)?;
    if want.index_encoding == df_core::compact::IndexEncoding::Packed {
        let root = df_core::generated::packet::deltafabric::v_1::root_as_packet(&bytes)
            .map_err(|e| format!("encode: {e}"))?;
        for (j, (e, w)) in root.entries().iter().zip(&want.entries).enumerate() {
            let got = e.packed_indices().map(|v| v.bytes().to_vec());
            if got.as_deref() != Some(&shorter_form(&w.indices)[..]) {
                return Err(format!(
                    "encode: entries[{j}] packed as {got:02x?}, not the shorter form (DF-PKT-116)"
                ));
            }
        }
    }
    Ok(())
}

fn run_decode(dir: &Path, rel: &str, round_trip: bool) -> Result<(), String> {
    let j = read_json(&dir.join(format!("{rel}.json")))?;
    let bytes = std::fs::read(dir.join(format!("{rel}.dfp"))).map_err(|e| e.to_string())?;
    let (fp, n, h, m) = ctx(&j)?;
    let mut shifted = vec![0u8; bytes.len() + 1];
    shifted[1..].copy_from_slice(&bytes);
    for (label, buf) in [("aligned", &bytes[..]), ("unaligned", &shifted[1..])] {
        let res = decode_packet(buf, m).and_then(|p| validate_packet(&p, &fp, n, h).map(|()| p));
        match (j.get("error").and_then(Value::as_str), res) {
            (Some(code), Err(e)) if e.code.as_str() == code => {}
            (Some(code), Err(e)) => return Err(format!("{label}: got {e}, want {code}")),
            (Some(code), Ok(_)) => return Err(format!("{label}: accepted, want {code}")),
            (None, Err(e)) => return Err(format!("{label}: rejected with {e}, want ok")),
            (None, Ok(p)) => {
                let want = packet_from_json(s(&j, "packet")?)?;
                packet_eq(label, &p.to_owned_packet(), &want)?;
                // and the JSON this implementation prints parses back to the same
                let again = packet_from_json(&df_core::wire::packet_to_json(&p))?;
                packet_eq(&format!("{label} json"), &again, &want)?;
            }
        }
    }
    if round_trip && j.get("error").is_none() {
        encode_round_trip(&packet_from_json(s(&j, "packet")?)?, (fp, n, h, m))?;
    }
    Ok(())
}

fn node_engine(j: &Value, anchor: Vec<f32>) -> Result<Engine, String> {
    let m = Manifest::from_json(s(j, "manifest")?)?;
    let cfg = SyncConfig::from_json(s(j, "config")?).map_err(|e| e.to_string())?;
    let node = s(j, "node")?;
    let id = hex_u64(s(node, "id")?)?;
    let mut e = Engine::new(m, cfg, id, hex_u64(s(node, "incarnation")?)?, anchor)
        .map_err(|e| e.to_string())?;
    if let Some(sg) = node.get("signing") {
        // REQ: DF-SEC-145 (the pinned keys of a signed cluster, 1.1)
        let signing = df_core::signing::Signing::from_json(
            s(sg, "keys")?,
            sg.get("secret").and_then(Value::as_str),
            Some(id),
        )
        .map_err(|e| e.to_string())?;
        e.set_signing(Some(signing)).map_err(|e| e.to_string())?;
    }
    Ok(e)
}

fn run_generate(dir: &Path, rel: &str) -> Result<(), String> {
    let j = read_json(&dir.join(format!("{rel}.json")))?;
    let mut e = node_engine(&j, bits(s(&j, "anchor_bits")?)?)?;
    let seq_start = s(&j, "seq_start")?.as_u64().ok_or("seq_start")?;
    e.set_next_seq(seq_start);
    let active = bits(s(&j, "active_bits")?)?;
    let fast = j.get("fast").and_then(Value::as_bool).unwrap_or(false);
    if let Some(k) = j.get("k").and_then(Value::as_u64) {
        let got = df_core::selection::num_selected(e.num_params(), e.config().ratio);
        if got as u64 != k {
            return Err(format!("k: got {got}, want {k}"));
        }
    }
    let x = s(&j, "expected")?;
    if let Some(code) = x.get("error") {
        // DF-GEN-9 / DF-GEN-31: the generation fails as a whole and changes nothing
        return match e.generate(&active, fast) {
            Err(EngineError::NonFinite { .. }) if code == "NON_FINITE" => {
                cmp_bits("anchor", e.anchor(), &bits(s(x, "anchor_bits")?)?)?;
                let ns = s(x, "next_seq")?.as_u64().ok_or("next_seq")?;
                if e.next_seq() != ns || ns != seq_start {
                    return Err(format!(
                        "failed generation moved next_seq to {}",
                        e.next_seq()
                    ));
                }
                Ok(())
            }
            other => Err(format!("expected the error {code}, got {other:?}")),
        };
    }
    if let Some(bounds) = x.get("fast") {
        // 1.1: a fast vector is judged by DF-GEN-7's bounds, not by one set
        let anchor = bits(s(&j, "anchor_bits")?)?;
        let out = e.generate(&active, fast).map_err(|x| x.to_string())?;
        fast_problem(&e, &j, bounds, &active, &anchor, &out)?;
        let ns = s(x, "next_seq")?.as_u64().ok_or("next_seq")?;
        if e.next_seq() != ns {
            return Err(format!("next_seq {} want {ns}", e.next_seq()));
        }
        return Ok(());
    }
    let out = e.generate(&active, fast).map_err(|x| x.to_string())?;
    let want: Vec<OwnedEntry> = s(x, "entries")?
        .as_array()
        .ok_or("entries")?
        .iter()
        .map(expected_entry)
        .collect::<Result<_, _>>()?;
    if x.get("exact_split")
        .and_then(Value::as_bool)
        .unwrap_or(true)
    {
        if out.len() != want.len() {
            return Err(format!("{} entries, want {}", out.len(), want.len()));
        }
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            entry_eq(&format!("entries[{i}]"), a, b)?;
        }
    } else {
        let cat = |v: &[OwnedEntry]| -> (Vec<u32>, Vec<u32>) {
            (
                v.iter().flat_map(|e| e.indices.clone()).collect(),
                v.iter().flat_map(|e| bit_vec(&e.values)).collect(),
            )
        };
        if cat(&out) != cat(&want) {
            return Err("split entries: concatenation differs".into());
        }
        if out.len() < 2 {
            return Err("split entries: expected more than one entry".into());
        }
        // DF-GEN-30: no piece holds more values than the size estimate allows
        if let Some(per) = x.get("max_entry_values").and_then(Value::as_u64) {
            if out.iter().any(|en| en.indices.len() as u64 > per) {
                return Err(format!(
                    "split entries: a piece holds more than {per} values"
                ));
            }
            if per != e.config().max_values_per_entry() as u64 {
                return Err(format!("max_entry_values {per} != this implementation's"));
            }
        }
        for (i, en) in out.iter().enumerate() {
            if en.seq != seq_start + i as u64 || en.hops != 0 || en.origin != e.node_id() {
                return Err(format!("split entries[{i}]: bad header {en:?}"));
            }
            let pk = e.pack(std::slice::from_ref(en), &[]);
            if pk.len() != 1 || pk[0].len() > e.config().max_packet_size {
                return Err(format!("split entries[{i}]: does not fit a packet alone"));
            }
        }
    }
    cmp_bits("anchor", e.anchor(), &bits(s(x, "anchor_bits")?)?)?;
    let mut active = active;
    let (ci, cv) = e.last_correction();
    for (&i, &c) in ci.iter().zip(cv) {
        active[i as usize] += c; // DF-GEN-70: average_over > 1
    }
    if let Some(ab) = x.get("active_bits") {
        cmp_bits("active", &active, &bits(ab)?)?;
    }
    let ns = s(x, "next_seq")?.as_u64().ok_or("next_seq")?;
    if e.next_seq() != ns {
        return Err(format!("next_seq {} want {ns}", e.next_seq()));
    }
    Ok(())
}

/// DF-GEN-7 (a)-(d) on a fast generation's set S, and DF-GEN-4/5/6 on what was made of it (`F32`
/// values: a sent value is `d[i]`, the anchor becomes `fl32(anchor + d)` at S). The vector's pinned
/// bounds (`expected.fast`) must be the ones computed here from its inputs.
fn fast_problem(
    e: &Engine,
    j: &Value,
    bounds: &Value,
    active: &[f32],
    anchor: &[f32],
    out: &[OwnedEntry],
) -> Result<(), String> {
    let n = active.len();
    let k = s(j, "k")?.as_u64().ok_or("k")? as usize;
    let d: Vec<f32> = active.iter().zip(anchor).map(|(a, b)| a - b).collect();
    let mag = |x: f32| if x.is_nan() { 0.0 } else { x.abs() };
    let c = d.iter().filter(|&&x| mag(x) > 0.0).count();
    let t = if 2 * k <= n {
        let mut m: Vec<f32> = d.iter().map(|&x| mag(x)).collect();
        m.sort_unstable_by(f32::total_cmp);
        m[n - 2 * k]
    } else {
        0.0
    };
    let min_sel = k.div_ceil(2).min(c);
    let pinned = (
        s(bounds, "k")?.as_u64(),
        s(bounds, "candidates")?.as_u64(),
        s(bounds, "min_selected")?.as_u64(),
        s(bounds, "max_selected")?.as_u64(),
        s(bounds, "threshold_bits")?.as_str(),
    );
    let mine = format!("{:08x}", t.to_bits());
    if pinned
        != (
            Some(k as u64),
            Some(c as u64),
            Some(min_sel as u64),
            Some(k as u64),
            Some(mine.as_str()),
        )
    {
        return Err(format!(
            "the vector's fast bounds {pinned:?} are not its own"
        ));
    }
    let seq_start = s(j, "seq_start")?.as_u64().ok_or("seq_start")?;
    // the header is judged against the vector's node, not the engine's own accessors
    let node = s(j, "node")?;
    let (id, inc) = (hex_u64(s(node, "id")?)?, hex_u64(s(node, "incarnation")?)?);
    let mut sel: Vec<u32> = Vec::new();
    for (i, en) in out.iter().enumerate() {
        if en.seq != seq_start + i as u64
            || en.hops != 0
            || en.origin != id
            || en.incarnation != inc
            || en.indices.is_empty()
        {
            return Err(format!("fast entries[{i}]: bad header or empty {en:?}"));
        }
        if bit_vec(&en.values)
            != en
                .indices
                .iter()
                .map(|&x| d[x as usize].to_bits())
                .collect::<Vec<_>>()
        {
            return Err(format!(
                "fast entries[{i}]: values are not d at the indices"
            ));
        }
        if en.indices.len() > e.config().max_values_per_entry() {
            return Err(format!(
                "fast entries[{i}]: more values than DF-GEN-6 allows"
            ));
        }
        let pk = e.pack(std::slice::from_ref(en), &[]);
        if pk.len() != 1 || pk[0].len() > e.config().max_packet_size {
            return Err(format!("fast entries[{i}]: does not fit a packet alone"));
        }
        sel.extend_from_slice(&en.indices);
    }
    if sel.windows(2).any(|w| w[1] <= w[0]) {
        return Err("fast: indices not strictly increasing over the entries".into());
    }
    if sel.len() > k {
        return Err(format!("DF-GEN-7 (a): {} selected, k = {k}", sel.len()));
    }
    if sel.len() < min_sel {
        return Err(format!(
            "DF-GEN-7 (b): {} selected, min(ceil(k/2), C) = {min_sel}",
            sel.len()
        ));
    }
    if let Some(&i) = sel.iter().find(|&&i| mag(d[i as usize]) == 0.0) {
        return Err(format!("DF-GEN-7 (c): index {i} is not a candidate"));
    }
    if let Some(&i) = sel.iter().find(|&&i| mag(d[i as usize]) < t) {
        return Err(format!("DF-GEN-7 (d): |d[{i}]| is below T = {t}"));
    }
    let mut want = anchor.to_vec();
    for &i in &sel {
        want[i as usize] += d[i as usize];
    }
    if bit_vec(e.anchor()) != bit_vec(&want) {
        return Err("fast: the anchor is not anchor + sent values at S".into());
    }
    if !e.last_correction().0.is_empty() {
        return Err("fast: a correction of active with average_over 1".into());
    }
    Ok(())
}

fn run_receive(dir: &Path, rel: &str) -> Result<(), String> {
    let cdir = dir.join(rel);
    let j = read_json(&cdir.join("case.json"))?;
    let node = s(&j, "node")?;
    let mut e = node_engine(&j, bits(s(node, "anchor_bits")?)?)?;
    let mut active = bits(s(node, "active_bits")?)?;
    for t in s(node, "accepted")?.as_array().ok_or("accepted")? {
        let t = t.as_array().ok_or("accepted triple")?;
        if t.len() != 3 && t.len() != 4 {
            return Err("accepted triple".into());
        }
        let seq = t[2].as_u64().ok_or("seq")?;
        let (origin, inc) = (hex_u64(&t[0])?, hex_u64(&t[1])?);
        let a = e.receiver_state_mut().admit(origin, inc, seq);
        if a != Admission::Accepted {
            return Err(format!("history entry {t:?} not accepted: {a:?}"));
        }
        if let Some(at) = t.get(3) {
            // REQ: DF-RCV-178 (the clock reading at which the history entry was accepted)
            e.receiver_state_mut()
                .set_accepted_at(origin, inc, hex_u64(at)?);
        }
    }
    if let Some(ms) = node.get("members").and_then(|m| m.as_array()) {
        // REQ: DF-RCV-51 (the receiver's membership)
        let set = ms
            .iter()
            .map(hex_u64)
            .collect::<Result<std::collections::HashSet<u64>, _>>()?;
        e.receiver_state_mut().set_members(Some(set));
    }
    if let Some(now) = node.get("now_us") {
        // REQ: DF-RCV-175 (the receiver's clock, after the history)
        e.set_now_us(hex_u64(now)?);
    }
    let mut bufs = Vec::new();
    for p in s(&j, "packets")?.as_array().ok_or("packets")? {
        let name = p.as_str().ok_or("packet name")?;
        bufs.push(std::fs::read(cdir.join(name)).map_err(|x| x.to_string())?);
    }
    let views: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
    // REQ: DF-RCV-50 (the active weights are checked too)
    let current = active.clone();
    let view = |idx: &[u32]| {
        idx.iter()
            .map(|&i| current[i as usize])
            .collect::<Vec<f32>>()
    };
    let r = e.receive_with(&views, Some(&view));
    r.apply_to(&mut active);
    let x = s(&j, "expected")?;
    let want_rej: Vec<Option<String>> = s(x, "rejections")?
        .as_array()
        .ok_or("rejections")?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect();
    let got_rej: Vec<Option<String>> = r
        .outcomes
        .iter()
        .map(|o| match o {
            Outcome::Ok => None,
            Outcome::Rejected(c) => Some(c.as_str().to_string()),
        })
        .collect();
    if got_rej != want_rej {
        return Err(format!("rejections: got {got_rej:?}, want {want_rej:?}"));
    }
    if let Some(eo) = x.get("entry_outcomes") {
        let want: Vec<Vec<String>> =
            serde_json::from_value(eo.clone()).map_err(|x| x.to_string())?;
        let got: Vec<Vec<String>> = r
            .entry_outcomes
            .iter()
            .map(|v| v.iter().map(|a| a.as_str().to_string()).collect())
            .collect();
        if got != want {
            return Err(format!("entry_outcomes: got {got:?}, want {want:?}"));
        }
    }
    let agg = s(x, "aggregate")?;
    let idx: Vec<u32> =
        serde_json::from_value(s(agg, "indices")?.clone()).map_err(|x| x.to_string())?;
    if r.indices != idx {
        return Err(format!(
            "aggregate indices: got {:?}, want {idx:?}",
            r.indices
        ));
    }
    cmp_bits("aggregate", &r.values, &bits(s(agg, "values_bits")?)?)?;
    cmp_bits("active", &active, &bits(s(x, "active_bits")?)?)?;
    cmp_bits("anchor", e.anchor(), &bits(s(x, "anchor_bits")?)?)?;
    let want_relay: Vec<OwnedEntry> = s(x, "relay_entries")?
        .as_array()
        .ok_or("relay_entries")?
        .iter()
        .map(expected_entry)
        .collect::<Result<_, _>>()?;
    if r.relay.len() != want_relay.len() {
        return Err(format!(
            "relay entries: got {:?}, want {want_relay:?}",
            r.relay
        ));
    }
    for (i, (a, b)) in r.relay.iter().zip(&want_relay).enumerate() {
        entry_eq(&format!("relay_entries[{i}]"), a, b)?;
    }
    let packed = e.pack(&[], &r.relay);
    let want_pk: Vec<OwnedPacket> = s(x, "relay")?
        .as_array()
        .ok_or("relay")?
        .iter()
        .map(packet_from_json)
        .collect::<Result<_, _>>()?;
    if packed.len() != want_pk.len() {
        return Err(format!(
            "relay packets: got {}, want {}",
            packed.len(),
            want_pk.len()
        ));
    }
    for (i, (buf, want)) in packed.iter().zip(&want_pk).enumerate() {
        let got = decode_packet(buf, e.config().max_packet_size).map_err(|x| x.to_string())?;
        packet_eq(&format!("relay[{i}]"), &got.to_owned_packet(), want)?;
    }
    // counters of this step
    let mut c = r.counters.to_json();
    c["relay_dropped_oversize"] = Value::from(e.relay_dropped_oversize());
    let wc = s(x, "counters")?;
    for (k, v) in wc.as_object().ok_or("counters")? {
        let g = c.get(k).ok_or_else(|| format!("counter {k} unknown"))?;
        if v.is_object() {
            for (kk, vv) in v.as_object().ok_or("counters")? {
                let gg = g.get(kk).cloned().unwrap_or(Value::from(0));
                if &gg != vv {
                    return Err(format!("counter {k}.{kk}: got {gg}, want {vv}"));
                }
            }
            // anything we count that the vector does not list must be zero
            for (kk, gg) in g.as_object().ok_or("counters")? {
                if !v.as_object().is_some_and(|o| o.contains_key(kk)) && gg != &Value::from(0) {
                    return Err(format!("counter {k}.{kk}: got {gg}, want 0"));
                }
            }
        } else if g != v {
            return Err(format!("counter {k}: got {g}, want {v}"));
        }
    }
    // re-encoding the expected relay JSON gives bytes this implementation accepts too
    for p in &want_pk {
        decode_packet(&encode_packet(p), e.config().max_packet_size).map_err(|x| x.to_string())?;
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn chunk_matches(c: &SnapshotChunk<'_>, want: &Value) -> Result<(), String> {
    let got = [
        ("node", format!("{:016x}", c.node)),
        ("incarnation", format!("{:016x}", c.incarnation)),
        ("snapshot_id", format!("{:016x}", c.snapshot_id)),
        ("fingerprint", hex(&c.fingerprint)),
        ("digest", hex(&c.digest)),
    ];
    for (k, g) in got {
        if s(want, k)?.as_str() != Some(g.as_str()) {
            return Err(format!("{k}: got {g}, want {}", want[k]));
        }
    }
    for (k, g) in [
        ("total", c.total),
        ("offset", c.offset),
        ("version_minor", u64::from(c.version_minor)),
    ] {
        if s(want, k)?.as_u64() != Some(g) {
            return Err(format!("{k}: got {g}, want {}", want[k]));
        }
    }
    let want_bits: Vec<u32> = bits(s(want, "values_bits")?)?
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let got_bits: Vec<u32> = c.values.iter().map(|x| x.to_bits()).collect();
    if got_bits != want_bits {
        return Err("values differ (bit patterns)".into());
    }
    Ok(())
}

/// A `snapshot/serve` vector (DF-ZEN-5, DF-ZEN-11; driver protocol 5.12): one `SnapshotServer`
/// whose one capture is the vector's anchor answers the queries in order, at one instant (as
/// df-driver's `snapshot_serve`); each chunk, decoded, must carry the expected fields (values by bit
/// pattern) and one non-zero `snapshot_id` for the whole vector, each error reply must be of the
/// kind expected (`BAD_REQUEST`, or `NON_FINITE` for DF-ZEN-43).
fn run_snapshot_serve(v: &Value) -> Result<(), String> {
    // `anchor_bits` (binary32 patterns, a NaN's payload kept) when given, else `anchor`
    let anchor: Vec<f32> = match v.get("anchor_bits").and_then(Value::as_array) {
        Some(bits) => bits
            .iter()
            .map(|b| {
                b.as_str()
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .map(f32::from_bits)
                    .ok_or_else(|| format!("anchor_bits: bad pattern {b}"))
            })
            .collect::<Result<_, _>>()?,
        None => s(v, "anchor")?
            .as_array()
            .ok_or("anchor: not a list")?
            .iter()
            .map(|x| df_core::wire::f32_from_json(x).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
    };
    let fp: [u8; 32] = hex::decode(s(v, "fingerprint")?.as_str().ok_or("fingerprint")?)
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|_| "fingerprint: not 32 bytes")?;
    let source = SnapshotSource::new(hex_u64(s(v, "incarnation")?)?, fp, anchor, "vectors")
        .map_err(|e| e.to_string())?;
    let mps = s(v, "max_packet_size")?.as_u64().ok_or("max_packet_size")? as usize;
    let mut server = SnapshotServer::new(hex_u64(s(v, "node")?)?, mps)
        .map_err(|e| e.to_string())?
        .with_times(std::time::Duration::MAX, std::time::Duration::MAX);
    let now = std::time::Instant::now();
    let queries = s(v, "queries")?.as_array().ok_or("queries")?;
    let replies = s(s(v, "expected")?, "replies")?
        .as_array()
        .ok_or("replies")?;
    if queries.len() != replies.len() {
        return Err("as many replies as queries expected".into());
    }
    let mut ids = std::collections::BTreeSet::new();
    for (q, want) in queries.iter().zip(replies) {
        let q = q.as_str().ok_or("query: not a string")?;
        match (server.answer(q, now, || source.clone()), want.get("chunk")) {
            (Ok(buf), Some(w)) => {
                let c = decode_chunk(&buf).map_err(|e| format!("{q:?}: {e}"))?;
                if c.snapshot_id == 0 {
                    return Err(format!("{q:?}: snapshot_id 0"));
                }
                ids.insert(c.snapshot_id);
                let mut w = w.clone();
                w["snapshot_id"] = Value::String(format!("{:016x}", c.snapshot_id));
                chunk_matches(&c, &w).map_err(|e| format!("{q:?}: {e}"))?;
            }
            (Ok(_), None) => return Err(format!("{q:?}: served, expected the error reply")),
            (Err(e), None)
                if want.get("error").and_then(Value::as_str) == Some(e.kind.as_str()) => {}
            (Err(e), _) => return Err(format!("{q:?}: {e}, expected {want}")),
        }
    }
    if ids.len() > 1 {
        return Err(format!("several snapshot ids in one capture: {ids:?}"));
    }
    Ok(())
}

/// A snapshot vector (DF-ZEN-40, DF-ZEN-41): one chunk decoded alone, or replies assembled in order;
/// `snapshot/serve/` (DF-ZEN-5, DF-ZEN-11): the server side.
fn run_snapshot(dir: &Path, path: &str) -> Result<(), String> {
    let base = dir.join(path);
    if path.starts_with("snapshot/serve/") {
        return run_snapshot_serve(&read_json(&base.with_extension("json"))?);
    }
    if !base.is_dir() {
        let v = read_json(&base.with_extension("json"))?;
        let want = s(&v, "expected")?;
        let buf = std::fs::read(base.with_extension("dfs")).map_err(|e| e.to_string())?;
        return match (decode_chunk(&buf), s(want, "outcome")?.as_str()) {
            (Ok(c), Some("ok")) => chunk_matches(&c, s(want, "chunk")?),
            (Ok(_), o) => Err(format!("accepted, expected {o:?}")),
            (Err(e), Some(o)) if e.kind.as_str() == o => Ok(()),
            (Err(e), o) => Err(format!("{e}, expected {o:?}")),
        };
    }
    let v = read_json(&base.join("case.json"))?;
    let want = s(&v, "expected")?;
    let fp: [u8; 32] = hex::decode(s(&v, "fingerprint")?.as_str().ok_or("fingerprint")?)
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|_| "fingerprint: not 32 bytes")?;
    let chunk_size = s(&v, "chunk_size")?.as_u64().ok_or("chunk_size")? as usize;
    let mut asm = SnapshotAssembler::new(fp, chunk_size)
        .map_err(|e| e.to_string())?
        .expect_total(s(&v, "num_params")?.as_u64().ok_or("num_params")?)
        .expect_node(hex_u64(s(&v, "node")?)?);
    let indices = s(&v, "indices")?.as_array().ok_or("indices")?;
    let files = s(&v, "chunks")?.as_array().ok_or("chunks")?;
    let mut outcome: Option<(String, u64)> = None;
    for (at, (i, f)) in indices.iter().zip(files).enumerate() {
        let buf =
            std::fs::read(base.join(f.as_str().ok_or("chunk file")?)).map_err(|e| e.to_string())?;
        let added = decode_chunk(&buf).and_then(|c| asm.add(i.as_u64().unwrap_or(u64::MAX), &c));
        if let Err(e) = added {
            outcome = Some((e.kind.as_str().to_string(), at as u64));
            break;
        }
    }
    let installed = match outcome {
        Some(_) => None,
        None => match asm.finish() {
            Ok(snap) => Some(snap),
            Err(e) => {
                outcome = Some((e.kind.as_str().to_string(), files.len() as u64));
                None
            }
        },
    };
    match (outcome, installed) {
        (Some((kind, at)), _) => {
            if s(want, "outcome")?.as_str() != Some(kind.as_str())
                || want["at"].as_u64() != Some(at)
            {
                return Err(format!(
                    "{kind} at {at}, expected {} at {}",
                    want["outcome"], want["at"]
                ));
            }
            Ok(())
        }
        (None, Some(snap)) => {
            if s(want, "outcome")?.as_str() != Some("ok") {
                return Err(format!("installed, expected {}", want["outcome"]));
            }
            let want_bits: Vec<u32> = bits(s(want, "values_bits")?)?
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let got_bits: Vec<u32> = snap.values.iter().map(|x| x.to_bits()).collect();
            if got_bits != want_bits
                || s(want, "digest")?.as_str() != Some(&hex(&snap.header.digest))
            {
                return Err("installed values or digest differ".into());
            }
            Ok(())
        }
        (None, None) => Err("neither installed nor refused".into()),
    }
}

/// Whether a node starts with `config` and `manifest` (as `df-driver`'s `check_config` answers):
/// DF-PAR-11, DF-PAR-260, DF-MAN-1, DF-MAN-7 (`1 <= N`, which `Engine::new` checks).
fn node_accepts(config: &Value, manifest: &Value) -> bool {
    SyncConfig::from_json(config).is_ok()
        && Manifest::from_json(manifest).is_ok_and(|m| m.num_params() >= 1)
}

fn run_config(dir: &Path, rel: &str) -> Result<(), String> {
    // REQ: DF-PAR-11, DF-PAR-260, DF-MAN-7
    let j = read_json(&dir.join(format!("{rel}.json")))?;
    let cases = s(&j, "cases")?.as_array().ok_or("cases is not a list")?;
    let mut wrong = Vec::new();
    for c in cases {
        let want = s(c, "accepted")?
            .as_bool()
            .ok_or("accepted is not a bool")?;
        if node_accepts(s(c, "config")?, s(c, "manifest")?) != want {
            let name = c["name"].as_str().unwrap_or("?");
            wrong.push(format!(
                "{name}: {}",
                if want { "refused" } else { "accepted" }
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// The first difference of `got` from `want`, every member of `want` present (extra members of
/// `got` ignored, as the runner's `diff_json(..., subset=True)`).
fn subset_diff(want: &Value, got: &Value, at: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, wv)| match g.get(k) {
            None => Some(format!("{at}/{k}: missing")),
            Some(gv) => subset_diff(wv, gv, &format!("{at}/{k}")),
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (wv, gv))| subset_diff(wv, gv, &format!("{at}/{i}"))),
        _ if want == got => None,
        _ => Some(format!("{at}: expected {want}, got {got}")),
    }
}

/// A `repair` vector (spec 7.9) through `df_core::repair_io`, exactly as `df-driver` answers the
/// runner's `repair_*` commands (driver protocol 5.11).
fn run_repair(dir: &Path, rel: &str) -> Result<(), String> {
    // REQ: DF-RCV-160, DF-RCV-161, DF-RCV-162, DF-RCV-163, DF-RCV-164, DF-RCV-165, DF-RCV-230
    use df_core::repair_io::{repair_decode, repair_encode, repair_gaps, repair_resend};
    let base = dir.join(rel);
    let v = read_json(&base.with_extension("json"))?;
    let want = s(&v, "expected")?;
    let area = Path::new(rel)
        .parent()
        .and_then(Path::file_name)
        .and_then(|a| a.to_str())
        .unwrap_or("");
    let got = match area {
        "request" => {
            let buf = std::fs::read(base.with_extension("dfr")).map_err(|e| e.to_string())?;
            repair_decode(&buf)
        }
        "encode" => match repair_encode(s(&v, "request")?)? {
            Err(refusal) => refusal,
            Ok(buf) => {
                let back = repair_decode(&buf);
                let want = v.get("decodes_to").map_or_else(|| s(&v, "request"), Ok)?;
                if back["outcome"] != "ok" || &back["request"] != want {
                    return Err(format!("its encoding decodes to {back}"));
                }
                serde_json::json!({"outcome": "ok"})
            }
        },
        "gaps" => repair_gaps(&v)?,
        "resend" => repair_resend(&v)?,
        other => return Err(format!("unknown repair area {other:?}")),
    };
    match subset_diff(want, &got, "") {
        None => Ok(()),
        Some(d) => Err(d),
    }
}

#[test]
fn conformance_vectors() {
    // REQ: DF-RCV-1, DF-ZEN-40, DF-ZEN-41
    let dir = vectors_dir();
    let index =
        read_json(&dir.join("index.json")).expect("conformance/vectors/index.json must exist");
    assert_eq!(index["version"], 1);
    let list = index["vectors"].as_array().expect("vectors list");
    assert!(!list.is_empty(), "index.json lists no vector");
    let mut failures = Vec::new();
    let mut counts = std::collections::BTreeMap::new();
    for v in list {
        let id = v["id"].as_str().unwrap_or("?");
        let kind = v["kind"].as_str().unwrap_or("?");
        let path = v["path"].as_str().unwrap_or("?");
        let res = match kind {
            // the runner's rule (`round_trips`): a valid vector unless it says "encode": false
            "decode" => run_decode(
                &dir,
                path,
                v["expect"].as_str().unwrap_or("ok") == "ok" && v["encode"] != false,
            ),
            "generate" => run_generate(&dir, path),
            "receive" => run_receive(&dir, path),
            "snapshot" => run_snapshot(&dir, path),
            "config" => run_config(&dir, path),
            "repair" => run_repair(&dir, path),
            // the digits CNN lives in df-node: its forward vectors run in df-node's tests/forward.rs
            // and through df-driver in the conformance run
            "forward" => {
                *counts
                    .entry("forward (df-node)".to_string())
                    .or_insert(0usize) += 1;
                continue;
            }
            other => Err(format!("unknown kind {other}")),
        };
        *counts.entry(kind.to_string()).or_insert(0usize) += 1;
        if let Err(e) = res {
            failures.push(format!("{id}: {e}"));
        }
    }
    eprintln!("conformance vectors run: {counts:?}");
    assert!(
        failures.is_empty(),
        "{} vector(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
