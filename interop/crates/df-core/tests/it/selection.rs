use df_core::selection::{Path, Selector, num_selected, reference_select};

use crate::Rng;

fn data(rng: &mut Rng, n: usize, zeros: u64, ties: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            if rng.below(100) < zeros {
                if rng.below(2) == 0 { 0.0 } else { -0.0 }
            } else if ties {
                (rng.below(50) as f32 - 25.0) * 0.125
            } else {
                rng.f32() * (1.0 + rng.below(4) as f32)
            }
        })
        .collect()
}

fn top2k_ok(d: &[f32], k: usize, s: &[u32]) -> bool {
    let mut mags: Vec<f32> = d
        .iter()
        .map(|x| x.abs())
        .filter(|x| *x > 0.0 && !x.is_nan())
        .collect();
    mags.sort_by(|a, b| b.total_cmp(a));
    let cand = mags.len();
    let bound = if cand == 0 {
        0.0
    } else {
        mags[(2 * k).min(cand) - 1]
    };
    s.len() <= k
        && s.len() >= k.div_ceil(2).min(cand)
        && s.windows(2).all(|w| w[0] < w[1])
        && s.iter()
            .all(|&i| d[i as usize] != 0.0 && d[i as usize].abs() >= bound)
}

#[test]
fn k_rule() {
    // REQ: DF-GEN-2
    assert_eq!(num_selected(24, 0.05), 2);
    assert_eq!(num_selected(10, 0.01), 1);
    assert_eq!(num_selected(100, 0.07), 8); // 100 * 0.07 = 7.000000000000001 in binary64
    assert_eq!(num_selected(5, 1.0), 5);
}

#[test]
fn exact_matches_reference_small() {
    // REQ: DF-GEN-3
    let mut rng = Rng(11);
    let mut sel = Selector::new();
    let mut out = Vec::new();
    for n in [1usize, 2, 5, 24, 100, 1000] {
        for &(z, ties) in &[(0u64, false), (30, true), (90, false), (100, false)] {
            let d = data(&mut rng, n, z, ties);
            for k in [1usize, 2, n / 3 + 1, n] {
                sel.select(&d, k, false, &mut out);
                assert_eq!(out, reference_select(&d, k), "n={n} k={k}");
            }
        }
    }
    // NaN is not a candidate; inf is the largest magnitude
    let d = [1.0, f32::NAN, -f32::INFINITY, 0.5, -0.0];
    sel.select(&d, 2, false, &mut out);
    assert_eq!(out, vec![0, 2]);
    sel.select(&d, 5, false, &mut out);
    assert_eq!(out, vec![0, 2, 3]);
}

#[test]
fn exact_matches_reference_large_all_paths() {
    // REQ: DF-GEN-3
    let mut rng = Rng(12);
    let mut sel = Selector::new();
    let mut out = Vec::new();
    let n = 200_000;
    let mut paths = std::collections::HashSet::new();
    for &(z, ties) in &[(0u64, false), (0, true), (97, false), (99, true)] {
        let d = data(&mut rng, n, z, ties);
        for ratio in [0.001, 0.05, 0.3] {
            let k = num_selected(n, ratio);
            sel.select(&d, k, false, &mut out);
            paths.insert(sel.last_path);
            assert_eq!(out, reference_select(&d, k), "z={z} ties={ties} k={k}");
        }
    }
    // adversarial for the sample: the sampled positions (stride 4) hold the large values, so the
    // sample's threshold is too high and the histogram path must take over
    let d: Vec<f32> = (0..n)
        .map(|i| {
            if i % 4 == 0 {
                10.0 + (i % 7) as f32
            } else {
                1.0 + (i % 13) as f32 * 0.1
            }
        })
        .collect();
    let k = num_selected(n, 0.001);
    sel.select(&d, k, false, &mut out);
    paths.insert(sel.last_path);
    assert_eq!(out, reference_select(&d, k));
    let k = num_selected(n, 0.2);
    sel.select(&d, k, false, &mut out);
    paths.insert(sel.last_path);
    assert_eq!(out, reference_select(&d, k));
    assert!(
        paths.contains(&Path::Sample) && paths.contains(&Path::Histogram),
        "{paths:?}"
    );
}

#[test]
fn fast_mode_bounds() {
    // REQ: DF-GEN-7
    let mut rng = Rng(13);
    let mut sel = Selector::new();
    let mut out = Vec::new();
    for n in [50usize, 100_000] {
        for &(z, ties) in &[(0u64, false), (50, true), (99, false)] {
            let d = data(&mut rng, n, z, ties);
            for ratio in [0.01, 0.05, 0.5] {
                let k = num_selected(n, ratio);
                sel.select(&d, k, true, &mut out);
                assert!(top2k_ok(&d, k, &out), "n={n} z={z} k={k} got {}", out.len());
            }
        }
    }
}
