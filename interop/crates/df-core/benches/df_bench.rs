//! Harness-free bench (`cargo bench -p df-core --bench df_bench`, release profile).
//!
//! Selection (exact and fast) and apply of k entries at N = 10,000,000 (ratio 0.05: k = 500,000),
//! as ratios to one memcpy of N f32 measured in the same run; decode (+ validate) of a packet of
//! 1,000,000 values in GB/s, aligned and unaligned, against a same-bytes baseline: a fresh
//! `Vec<u8>` copy of the same packet bytes (what any decoder that owns its output must at least
//! do), timed alternately with the decode. Best of several runs. Signed entries (1.1): verify and
//! sign time against decode + validate of the same packet (`DF_BENCH_ONLY=signing` runs only that).

use std::hint::black_box;
use std::time::{Duration, Instant};

use df_core::selection::{Selector, num_selected};
use df_core::{
    OwnedEntry, OwnedPacket, ValueEncoding, decode_packet, encode_packet, validate_packet,
};

/// Best times of `f` and of `g`, run alternately (a load change hits both alike).
fn best_pair<F: FnMut(), G: FnMut()>(runs: usize, mut f: F, mut g: G) -> (Duration, Duration) {
    let (mut bf, mut bg) = (Duration::MAX, Duration::MAX);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        bf = bf.min(t.elapsed());
        let t = Instant::now();
        g();
        bg = bg.min(t.elapsed());
    }
    (bf, bg)
}

fn best<F: FnMut()>(runs: usize, mut f: F) -> Duration {
    let mut b = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        f();
        b = b.min(t.elapsed());
    }
    b
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Roughly Gaussian (sum of 4 uniforms), like a training delta.
    fn gauss(&mut self) -> f32 {
        let mut s = 0.0f32;
        for _ in 0..4 {
            s += (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * 1e-3
    }
}

fn main() {
    let n: usize = std::env::var("DF_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let runs = 7;
    if std::env::var("DF_BENCH_ONLY").as_deref() == Ok("signing") {
        signing_cost(runs); // `DF_BENCH_ONLY=signing`: the signed-entry figures alone
        return;
    }
    let mut rng = Rng(42);
    let d: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    let mut dst = vec![0.0f32; n];
    let memcpy = best(runs, || {
        dst.copy_from_slice(black_box(&d));
        black_box(&dst);
    });
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    println!("N = {n}, memcpy of N f32: {:.3} ms", ms(memcpy));

    let k = num_selected(n, 0.05);
    let mut sel = Selector::new();
    let mut out = Vec::new();
    for (name, fast) in [("exact", false), ("fast", true)] {
        let t = best(runs, || {
            sel.select(black_box(&d), k, fast, &mut out);
            black_box(&out);
        });
        println!(
            "select {name:5} k = {k}: {:.3} ms = {:.2} x memcpy (path {:?}, {} selected)",
            ms(t),
            t.as_secs_f64() / memcpy.as_secs_f64(),
            sel.last_path,
            out.len()
        );
    }
    // delta computation + exact selection, as in Engine::generate
    let anchor = vec![0.0f32; n];
    let mut diff = Vec::with_capacity(n);
    let t = best(runs, || {
        diff.clear();
        diff.extend(d.iter().zip(&anchor).map(|(&a, &b)| a - b));
        sel.select(&diff, k, false, &mut out);
        black_box(&out);
    });
    println!(
        "diff + select exact: {:.3} ms = {:.2} x memcpy",
        ms(t),
        t.as_secs_f64() / memcpy.as_secs_f64()
    );

    // apply k entries (sorted random indices), as ReceiveResult::apply_to
    sel.select(&d, k, false, &mut out);
    let idx = out.clone();
    let vals: Vec<f32> = idx.iter().map(|&i| d[i as usize]).collect();
    let mut active = vec![1.0f32; n];
    let t = best(runs, || {
        for (&i, &v) in idx.iter().zip(&vals) {
            active[i as usize] += v;
        }
        black_box(&active);
    });
    println!(
        "apply k = {}: {:.3} ms = {:.3} x memcpy",
        idx.len(),
        ms(t),
        t.as_secs_f64() / memcpy.as_secs_f64()
    );

    // decode + validate of a packet with 1,000,000 values
    let m = 1_000_000usize;
    let step = (n / m).max(1) as u32;
    let mut p = OwnedPacket::new(1, 1, [3; 32], ValueEncoding::F32);
    p.entries.push(OwnedEntry {
        origin: 2,
        incarnation: 1,
        seq: 1,
        hops: 0,
        indices: (0..m as u32).map(|i| i * step).collect(),
        values: (0..m).map(|i| d[i]).collect(),
        signature: None,
    });
    let buf = encode_packet(&p);
    let mut shifted = vec![0u8; buf.len() + 1];
    shifted[1..].copy_from_slice(&buf);
    for (name, b) in [("aligned", &buf[..]), ("unaligned", &shifted[1..])] {
        let (t, copy) = best_pair(
            runs,
            || {
                let pk = decode_packet(black_box(b), 1 << 26).expect("decodes");
                validate_packet(&pk, &[3; 32], n as u64, 16).expect("valid");
                black_box(&pk);
            },
            || {
                black_box(black_box(b).to_vec());
            },
        );
        println!(
            "decode+validate {name:9} {} values ({} bytes): {:.3} ms = {:.2} GB/s; \
             same-bytes copy to a fresh Vec<u8>: {:.3} ms = {:.2} GB/s; decode / copy = {:.2}",
            m,
            b.len(),
            ms(t),
            b.len() as f64 / t.as_secs_f64() / 1e9,
            ms(copy),
            b.len() as f64 / copy.as_secs_f64() / 1e9,
            t.as_secs_f64() / copy.as_secs_f64()
        );
    }
    signing_cost(runs);
    let t = best(runs, || {
        black_box(encode_packet(black_box(&p)));
    });
    println!(
        "encode {} values: {:.3} ms = {:.2} GB/s",
        m,
        ms(t),
        buf.len() as f64 / t.as_secs_f64() / 1e9
    );
}

/// Signed entries (spec 1.1 section 13.1): for packets of one entry of n F32 values, the bytes a
/// signature adds, and verifying (and signing) the entry against decode + validate of the same
/// packet, timed alternately. Prints only.
fn signing_cost(runs: usize) {
    use df_core::signing::{Signing, public_key_of};
    let fp = [3u8; 32];
    let seed = [9u8; 32];
    let signer = Signing::new(&[], Some(seed), Some(2)).expect("key");
    let verifier = Signing::new(&[(2, public_key_of(&seed))], None, None).expect("key");
    let mut rng = Rng(7);
    for n in [10usize, 865, 10_000] {
        let indices: Vec<u32> = (0..n as u32).map(|i| i * 7).collect();
        let values: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
        let sig = signer
            .sign(&fp, ValueEncoding::F32, 2, 1, 1, &indices, &values)
            .expect("signs");
        let mut p = OwnedPacket::new(1, 1, fp, ValueEncoding::F32);
        p.entries.push(OwnedEntry {
            origin: 2,
            incarnation: 1,
            seq: 1,
            hops: 0,
            indices: indices.clone(),
            values: values.clone(),
            signature: None,
        });
        let plain = encode_packet(&p);
        p.entries[0].signature = Some(sig.to_vec());
        let signed = encode_packet(&p);
        let decode = || {
            let pk = decode_packet(black_box(&signed), 1 << 26).expect("decodes");
            validate_packet(&pk, &fp, 1 << 31, 16).expect("valid");
            black_box(&pk);
        };
        let pk = decode_packet(&signed, 1 << 26).expect("decodes");
        let e = &pk.entries[0];
        let (t_dec, t_ver) = best_pair(runs * 10, decode, || {
            verifier
                .verify(
                    &fp,
                    ValueEncoding::F32,
                    e.origin,
                    e.incarnation,
                    e.seq,
                    &e.indices,
                    &e.values,
                    e.signature.as_ref(),
                )
                .expect("verifies");
        });
        let (t_dec2, t_sign) = best_pair(runs * 10, decode, || {
            black_box(signer.sign(&fp, ValueEncoding::F32, 2, 1, 1, &indices, &values));
        });
        println!(
            "signed entry of {n} values: +{} bytes; decode+validate {:.1} us; verify / decode = {:.2}; \
             sign / decode = {:.2}",
            signed.len() - plain.len(),
            t_dec.as_secs_f64() * 1e6,
            t_ver.as_secs_f64() / t_dec.as_secs_f64(),
            t_sign.as_secs_f64() / t_dec2.as_secs_f64()
        );
    }
}
