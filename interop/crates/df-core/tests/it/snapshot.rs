//! `df_core::snapshot`, mirroring `tests/test_snapshot.py` of the Python reference: chunk
//! parameters, the server's capture policy, decoding and the joiner's verification (DF-ZEN-12).

use std::cell::Cell;
use std::time::{Duration, Instant};

use df_core::snapshot::{
    ChunkHeader, SnapshotAssembler, SnapshotError, SnapshotErrorKind as K, SnapshotServer,
    SnapshotSource, VerifiedSnapshot, chunk_count, decode_chunk, encode_chunk,
    encode_snapshot_chunk, fetch_snapshot_chunks, format_chunk_params, max_chunk_size,
    parse_chunk_params, snapshot_digest, trim_blanks,
};

const FP: [u8; 32] = [7; 32];
const MPS: usize = 16 * 1024 * 1024;

fn source(n: usize) -> SnapshotSource {
    let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
    SnapshotSource::new(5, FP, v, "test").expect("source")
}

fn kind<T: std::fmt::Debug>(r: Result<T, SnapshotError>) -> K {
    r.expect_err("must fail").kind
}

/// Assembles `src` served by node 9, snapshot 1, at `cs` values per chunk.
fn assemble(src: &SnapshotSource, cs: usize) -> Result<VerifiedSnapshot, SnapshotError> {
    let mut a = SnapshotAssembler::new(FP, cs)?
        .expect_node(9)
        .expect_total(src.total());
    while let Some(i) = a.next_missing() {
        let buf = encode_chunk(src, 9, 1, i, cs, MPS)?;
        a.add(i, &decode_chunk(&buf)?)?;
    }
    a.finish()
}

#[test]
fn chunk_params_parse_both_separators_and_refuse_bad_ones() {
    // REQ: DF-ZEN-5
    assert_eq!(
        parse_chunk_params("chunk=3&chunk_size=10", MPS),
        Ok((3, 10))
    );
    assert_eq!(
        parse_chunk_params("chunk_size=10;chunk=0;x=y", MPS),
        Ok((0, 10))
    );
    assert_eq!(
        parse_chunk_params(&format_chunk_params(2, 7), MPS),
        Ok((2, 7))
    );
    let limit = max_chunk_size(MPS);
    assert_eq!(limit, (MPS - 1024) / 4);
    assert_eq!(
        parse_chunk_params(&format_chunk_params(0, limit), MPS),
        Ok((0, limit))
    );
    for bad in [
        "chunk=1",
        "chunk_size=4",
        "chunk=-1&chunk_size=4",
        "chunk=1&chunk_size=0",
        "chunk=a&chunk_size=4",
        "chunk=1&chunk_size=99999999999999999999999",
        &format_chunk_params(0, limit + 1),
    ] {
        assert_eq!(kind(parse_chunk_params(bad, MPS)), K::BadRequest, "{bad}");
    }
}

#[test]
fn chunks_round_trip_and_reassemble() {
    // REQ: DF-ZEN-5, DF-ZEN-11, DF-ZEN-12
    let src = source(10);
    assert_eq!(chunk_count(10, 3), 4);
    let buf = encode_chunk(&src, 9, 4, 3, 3, MPS).expect("last chunk");
    let c = decode_chunk(&buf).expect("decodes");
    assert_eq!((c.node, c.incarnation, c.snapshot_id), (9, 5, 4));
    assert_eq!((c.total, c.offset), (10, 9));
    assert_eq!(&c.values[..], &src.values()[9..]);
    assert_eq!(&c.digest, src.digest());
    assert_eq!(c.digest, snapshot_digest(src.values()));
    // chunk index and size out of range
    assert_eq!(kind(encode_chunk(&src, 9, 4, 4, 3, MPS)), K::BadRequest);
    assert_eq!(kind(encode_chunk(&src, 9, 4, 0, 0, MPS)), K::BadRequest);
    assert_eq!(kind(encode_chunk(&src, 9, 4, 0, 300, 2023)), K::BadRequest);
    assert_eq!(
        kind(encode_chunk(&src, 0, 4, 0, 3, MPS)),
        K::InvalidArgument
    );
    for cs in [1, 3, 9, 10, 1000] {
        let v = assemble(&src, cs).expect("assembles");
        assert_eq!(v.values, src.values());
        assert_eq!(v.header.snapshot_id, 1);
        assert_eq!(v.header.incarnation, 5);
    }
    assert_eq!(
        kind(SnapshotSource::new(0, FP, vec![1.0], "x")),
        K::InvalidArgument
    );
    assert_eq!(
        kind(SnapshotSource::new(1, FP, Vec::new(), "x")),
        K::InvalidArgument
    );
}

fn header(src: &SnapshotSource) -> ChunkHeader {
    ChunkHeader {
        node: 9,
        incarnation: src.incarnation(),
        fingerprint: *src.fingerprint(),
        snapshot_id: 1,
        total: src.total(),
        digest: *src.digest(),
    }
}

#[test]
fn a_non_finite_snapshot_is_refused() {
    // REQ: DF-ZEN-12 (every value is finite)
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut v: Vec<f32> = vec![1.0; 6];
        v[4] = bad;
        // a server that is not conforming serves the non-finite anchor, digest and all consistent
        let src = SnapshotSource::new(5, FP, v.clone(), "test").expect("source");
        let h = header(&src);
        let mut a = SnapshotAssembler::new(FP, 3)
            .expect("assembler")
            .expect_node(9)
            .expect_total(6);
        let first = encode_snapshot_chunk(&h, 0, &v[..3]);
        a.add(0, &decode_chunk(&first).expect("decodes"))
            .expect("chunk 0 is finite");
        let second = encode_snapshot_chunk(&h, 3, &v[3..]);
        let e = a
            .add(1, &decode_chunk(&second).expect("decodes"))
            .expect_err("non-finite refused");
        assert_eq!(e.kind, K::NonFinite);
        assert!(e.detail.contains("value 4"), "{e}");
    }
}

#[test]
fn a_snapshot_holding_a_non_finite_value_is_never_served() {
    // REQ: DF-ZEN-43
    for (at, bad) in [(11, f32::INFINITY), (0, f32::NAN), (6, f32::NEG_INFINITY)] {
        let mut v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        v[at] = bad;
        let src = SnapshotSource::new(5, FP, v, "test").expect("source");
        assert_eq!(src.non_finite_at(), Some(at as u64));
        let mut srv = SnapshotServer::new(3, MPS).expect("server");
        let now = Instant::now();
        for q in [
            "chunk=0&chunk_size=5",
            "chunk=2&chunk_size=5",
            "chunk=0&chunk_size=12",
        ] {
            let e = srv
                .answer(q, now, || src.clone())
                .expect_err("never served");
            assert_eq!(e.kind, K::NonFinite, "{q}");
            assert!(
                e.detail.contains(&format!("value {at} is not finite")),
                "{e}"
            );
        }
        // a query that DF-ZEN-5 refuses anyway is refused as before
        assert_eq!(
            kind(srv.answer("chunk=3&chunk_size=5", now, || src.clone())),
            K::BadRequest
        );
    }
    assert_eq!(source(3).non_finite_at(), None);
}

#[test]
fn chunk_params_are_read_by_the_rules_of_df_zen_42() {
    // REQ: DF-ZEN-42
    for (q, want) in [
        ("chunk=1;chunk_size=5&x", (1, 5)),
        ("&chunk=1&&chunk_size=5;", (1, 5)),
        ("=1&chunk=1&chunk_size=5", (1, 5)),
        (" \tchunk\t = 01 \t&chunk_size= 5", (1, 5)),
        ("chunk=00000000000000000001&chunk_size=5", (1, 5)),
        ("chunk=1&chunk=x&chunk_size=5&chunk_size=4", (1, 5)),
        ("chunk=1& chunk =2&chunk_size=5", (1, 5)),
    ] {
        assert_eq!(parse_chunk_params(q, MPS), Ok(want), "{q:?}");
    }
    for bad in [
        "chunk=x&chunk=1&chunk_size=5",
        "chunk=1=1&chunk_size=5",
        "Chunk=1&chunk_size=5",
        "chunk=\u{a0}1&chunk_size=5",
        "chunk=1\n&chunk_size=5",
        "chunk=1&chunk_size=\u{b}5",
        "chunk=+1&chunk_size=5",
        "chunk=-0&chunk_size=5",
        "chunk=000000000000000000001&chunk_size=5",
        "chunk=\u{ff11}&chunk_size=5",
    ] {
        assert_eq!(kind(parse_chunk_params(bad, MPS)), K::BadRequest, "{bad:?}");
    }
    assert_eq!(trim_blanks(" \t x \t "), "x");
    assert_eq!(trim_blanks("\u{a0}x\n"), "\u{a0}x\n");
}

#[test]
fn a_digest_mismatch_is_refused() {
    // REQ: DF-ZEN-12 (the SHA-256 of the values equals digest)
    let src = source(6);
    let mut h = header(&src);
    h.digest[0] ^= 1;
    let mut a = SnapshotAssembler::new(FP, 3).expect("asm");
    for i in 0..2u64 {
        let s = (i * 3) as usize;
        let buf = encode_snapshot_chunk(&h, i * 3, &src.values()[s..s + 3]);
        a.add(i, &decode_chunk(&buf).expect("decodes"))
            .expect("chunk ok");
    }
    assert!(a.is_complete());
    assert_eq!(kind(a.finish()), K::DigestMismatch);
}

#[test]
fn inconsistent_chunks_are_refused_and_change_nothing() {
    // REQ: DF-ZEN-12 (same node, incarnation, snapshot_id, total and digest; fingerprint and N
    // are the joiner's; chunk j has offset j*c and min(c, N - j*c) values)
    let src = source(7);
    let h = header(&src);
    let chunk = |h: &ChunkHeader, off: u64, n: usize| {
        let s = off as usize;
        encode_snapshot_chunk(h, off, &src.values()[s..s + n])
    };
    let first = chunk(&h, 0, 3);
    let mut edits: Vec<(ChunkHeader, K)> = Vec::new();
    for f in 0..5 {
        let mut x = h;
        match f {
            0 => x.node = 10,
            1 => x.incarnation = 6,
            2 => x.snapshot_id = 2,
            3 => x.digest[5] ^= 1,
            _ => x.total = 8,
        }
        edits.push((x, K::Inconsistent));
    }
    let mut fp = h;
    fp.fingerprint[0] ^= 1;
    edits.push((fp, K::FingerprintMismatch));
    for (x, want) in edits {
        let mut a = SnapshotAssembler::new(FP, 3).expect("asm");
        a.add(0, &decode_chunk(&first).expect("ok")).expect("first");
        let second = chunk(&x, 3, 3);
        let before = a.next_missing();
        assert_eq!(kind(a.add(1, &decode_chunk(&second).expect("ok"))), want);
        assert_eq!(a.next_missing(), before, "a refused chunk changes nothing");
    }
    // wrong offset, wrong length, index out of range
    let mut a = SnapshotAssembler::new(FP, 3).expect("asm");
    a.add(0, &decode_chunk(&first).expect("ok")).expect("first");
    assert_eq!(
        kind(a.add(1, &decode_chunk(&chunk(&h, 4, 3)).expect("ok"))),
        K::BadOffset
    );
    assert_eq!(
        kind(a.add(1, &decode_chunk(&chunk(&h, 3, 2)).expect("ok"))),
        K::BadOffset
    );
    assert_eq!(
        kind(a.add(3, &decode_chunk(&chunk(&h, 6, 1)).expect("ok"))),
        K::BadOffset
    );
    // the joiner's N and the asked node
    let asm = || SnapshotAssembler::new(FP, 3).expect("asm");
    let c0 = decode_chunk(&first).expect("ok");
    assert_eq!(kind(asm().expect_total(8).add(0, &c0)), K::Inconsistent);
    assert_eq!(kind(asm().expect_node(3).add(0, &c0)), K::Inconsistent);
    assert_eq!(kind(asm().max_values(6).add(0, &c0)), K::Malformed);
    // incomplete
    let mut a = asm();
    a.add(0, &c0).expect("first");
    assert_eq!(a.next_missing(), Some(1));
    assert_eq!(kind(a.finish()), K::Incomplete);
    assert_eq!(kind(asm().finish()), K::Incomplete);
    assert_eq!(kind(SnapshotAssembler::new(FP, 0)), K::InvalidArgument);
}

#[test]
fn decode_chunk_reports_typed_kinds() {
    // REQ: DF-ZEN-12 (identifier DFS1 and version_major = 1)
    let src = source(4);
    let good = encode_chunk(&src, 9, 1, 0, 4, MPS).expect("chunk");
    let mut bad_id = good.clone();
    bad_id[4] = b'X';
    assert_eq!(kind(decode_chunk(&bad_id)), K::BadIdentifier);
    assert_eq!(kind(decode_chunk(&good[..6])), K::BadIdentifier);
    assert_eq!(kind(decode_chunk(&good[..good.len() - 8])), K::Malformed);
    let mut h = header(&src);
    h.snapshot_id = 0;
    assert_eq!(
        kind(decode_chunk(&encode_snapshot_chunk(&h, 0, &[1.0]))),
        K::Malformed
    );
    let h = header(&src);
    assert_eq!(
        kind(decode_chunk(&encode_snapshot_chunk(&h, 3, &[1.0, 2.0]))),
        K::Malformed
    );
    assert_eq!(
        kind(decode_chunk(&encode_snapshot_chunk(&h, 0, &[]))),
        K::Malformed
    );
}

#[test]
fn server_policy_reuses_and_keeps_captures_by_the_given_time() {
    // REQ: DF-ZEN-11 (one snapshot_id per capture, chunk 0 shares a capture younger than 10 s,
    // a capture is kept while queried)
    let t0 = Instant::now();
    let s = |secs: u64| t0 + Duration::from_secs(secs);
    let captures = Cell::new(0u32);
    let capture = || {
        captures.set(captures.get() + 1);
        source(5 + captures.get() as usize)
    };
    let mut srv = SnapshotServer::new(9, MPS).expect("server");
    assert_eq!(kind(SnapshotServer::new(0, MPS)), K::InvalidArgument);
    let id_of = |buf: Vec<u8>| decode_chunk(&buf).expect("chunk").snapshot_id;
    // first request captures
    assert_eq!(
        id_of(
            srv.answer("chunk=0&chunk_size=2", s(0), capture)
                .expect("ok")
        ),
        1
    );
    // a second joiner within 10 s shares it; later chunks use it
    assert_eq!(
        id_of(
            srv.answer("chunk=0&chunk_size=2", s(9), capture)
                .expect("ok")
        ),
        1
    );
    assert_eq!(
        id_of(
            srv.answer("chunk=2&chunk_size=2", s(15), capture)
                .expect("ok")
        ),
        1
    );
    assert_eq!(captures.get(), 1);
    // chunk 0 after 10 s: a new capture with a new id
    assert_eq!(
        id_of(
            srv.answer("chunk=0;chunk_size=2", s(20), capture)
                .expect("ok")
        ),
        2
    );
    assert_eq!(captures.get(), 2);
    // later chunks keep using it while it is queried within 60 s ...
    assert_eq!(
        id_of(
            srv.answer("chunk=1&chunk_size=2", s(75), capture)
                .expect("ok")
        ),
        2
    );
    // ... and a capture unqueried for more than 60 s is released
    assert_eq!(
        id_of(
            srv.answer("chunk=1&chunk_size=2", s(140), capture)
                .expect("ok")
        ),
        3
    );
    assert_eq!(captures.get(), 3);
    // bad requests are typed errors
    assert_eq!(
        kind(srv.answer("chunk=99&chunk_size=2", s(141), capture)),
        K::BadRequest
    );
    assert_eq!(
        kind(srv.answer("chunk_size=2", s(141), capture)),
        K::BadRequest
    );
    // info: a fresh request
    let info = srv.info(s(200), capture);
    assert_eq!(info["node"], "0000000000000009");
    assert_eq!(info["incarnation"], "0000000000000005");
    assert_eq!(info["fingerprint"], hex::encode(FP));
    assert_eq!(info["framework"], "test");
    assert_eq!(info["N"], 9);
    // REQ: DF-ZEN-231
    assert_eq!(
        info["supports"],
        serde_json::json!({
            "encodings": ["F32", "F16", "BF16", "Q8"],
            "index_encodings": ["PLAIN", "PACKED"],
        })
    );
    assert!(!srv.needs_capture(false, s(200)));
    assert!(srv.needs_capture(true, s(210)));
}

#[test]
fn a_young_capture_is_reused_only_while_the_state_version_is_unchanged() {
    // REQ: DF-ZEN-11 (a joiner never gets a capture older than the state, also within 10 s)
    let t0 = Instant::now();
    let s = |secs: u64| t0 + Duration::from_secs(secs);
    let captures = Cell::new(0u32);
    let capture = || {
        captures.set(captures.get() + 1);
        source(5 + captures.get() as usize)
    };
    let id_of = |buf: Vec<u8>| decode_chunk(&buf).expect("chunk").snapshot_id;
    let mut srv = SnapshotServer::new(9, MPS).expect("server");
    srv.set_version(Some(1));
    let first = srv.answer("chunk=0&chunk_size=2", s(0), capture);
    assert_eq!(id_of(first.expect("ok")), 1);
    // the same version within 10 s: shared
    assert!(!srv.needs_capture(true, s(1)));
    let again = srv.answer("chunk=0&chunk_size=2", s(1), capture);
    assert_eq!(id_of(again.expect("ok")), 1);
    assert_eq!(captures.get(), 1);
    // the state changed a second later: chunk 0 and info capture again ...
    srv.set_version(Some(2));
    assert!(srv.needs_capture(true, s(2)));
    // ... later chunks of the running transfer keep their capture
    assert!(!srv.needs_capture(false, s(2)));
    let later = srv.answer("chunk=1&chunk_size=2", s(2), capture);
    assert_eq!(id_of(later.expect("ok")), 1);
    let fresh = srv.answer("chunk=0&chunk_size=2", s(2), capture);
    assert_eq!(id_of(fresh.expect("ok")), 2);
    assert_eq!(captures.get(), 2);
    let _ = srv.info(s(3), capture);
    assert_eq!(
        captures.get(),
        2,
        "info at the same version reuses the capture"
    );
    // no version known: reuse by age only
    srv.set_version(None);
    assert!(!srv.needs_capture(true, s(4)));
    assert!(srv.needs_capture(true, s(12)));
}

#[test]
fn fetch_chunks_restarts_when_the_server_switches_snapshots() {
    // REQ: DF-ZEN-12 (a failed snapshot is discarded and retried)
    let t0 = Instant::now();
    let clock = Cell::new(t0);
    let mut srv = SnapshotServer::new(9, MPS).expect("server");
    let served = Cell::new(0u32);
    let request = |i: u64, cs: usize, _left: Duration| {
        served.set(served.get() + 1);
        clock.set(clock.get() + Duration::from_secs(1));
        let n = if served.get() == 1 { 7 } else { 8 };
        if served.get() == 2 {
            // another joiner asks for chunk 0 after the reuse time: the server captures anew
            clock.set(clock.get() + Duration::from_secs(20));
            srv.answer("chunk=0&chunk_size=3", clock.get(), || source(n))?;
        }
        srv.answer(&format_chunk_params(i, cs), clock.get(), || source(n))
    };
    let asm = SnapshotAssembler::new(FP, 3).expect("asm").expect_node(9);
    let deadline = t0 + Duration::from_secs(3600);
    let got = fetch_snapshot_chunks(request, &asm, deadline, 4, || clock.get()).expect("fetched");
    assert_eq!(got.values, source(8).values());
    assert_eq!(got.header.snapshot_id, 2);
    // a deadline already passed is a timeout
    let late = fetch_snapshot_chunks(
        |_, _, _| Err(SnapshotError::new(K::ServerError, "unused")),
        &asm,
        t0,
        4,
        || t0 + Duration::from_secs(1),
    );
    assert_eq!(kind(late), K::Timeout);
    // a server error is returned as is
    let e = fetch_snapshot_chunks(
        |_, _, _| Err(SnapshotError::new(K::ServerError, "boom")),
        &asm,
        deadline,
        4,
        || t0,
    );
    assert_eq!(kind(e), K::ServerError);
}
