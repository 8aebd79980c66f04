//! Every conformance vector of `conformance/vectors/index.json`, bit for bit.

use std::path::{Path, PathBuf};

use serde_json::Value;

use df_core::wire::{entry_from_json, packet_from_json};
use df_core::{
    Admission, Engine, Manifest, Outcome, OwnedEntry, OwnedPacket, SyncConfig, decode_packet,
    encode_packet, validate_packet,
};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../conformance/vectors")
}

fn read_json(p: &Path) -> Result<Value, String> {
    let s = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&s).map_err(|e| format!("{}: {e}", p.display()))
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
    ) != (
        want.version_major,
        want.version_minor,
        want.sender,
        want.sender_incarnation,
        &want.fingerprint,
        want.encoding,
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

fn run_decode(dir: &Path, rel: &str) -> Result<(), String> {
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
    Ok(())
}

fn node_engine(j: &Value, anchor: Vec<f32>) -> Result<Engine, String> {
    let m = Manifest::from_json(s(j, "manifest")?)?;
    let cfg = SyncConfig::from_json(s(j, "config")?).map_err(|e| e.to_string())?;
    let node = s(j, "node")?;
    Engine::new(
        m,
        cfg,
        hex_u64(s(node, "id")?)?,
        hex_u64(s(node, "incarnation")?)?,
        anchor,
    )
    .map_err(|e| e.to_string())
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
    let out = e.generate(&active, fast).map_err(|x| x.to_string())?;
    let x = s(&j, "expected")?;
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
    if let Some(ab) = x.get("active_bits") {
        cmp_bits("active", &active, &bits(ab)?)?;
    }
    let ns = s(x, "next_seq")?.as_u64().ok_or("next_seq")?;
    if e.next_seq() != ns {
        return Err(format!("next_seq {} want {ns}", e.next_seq()));
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
        if t.len() != 3 {
            return Err("accepted triple".into());
        }
        let seq = t[2].as_u64().ok_or("seq")?;
        let a = e
            .receiver_state_mut()
            .admit(hex_u64(&t[0])?, hex_u64(&t[1])?, seq);
        if a != Admission::Accepted {
            return Err(format!("history entry {t:?} not accepted: {a:?}"));
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
    let c = r.counters.to_json();
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

#[test]
fn conformance_vectors() {
    // REQ: DF-RCV-1
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
            "decode" => run_decode(&dir, path),
            "generate" => run_generate(&dir, path),
            "receive" => run_receive(&dir, path),
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
