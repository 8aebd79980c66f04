//! Top-k selection of a delta by magnitude (spec sections 5.3 and 5.7: DF-GEN-3 exact, DF-GEN-7 fast).
//!
//! Magnitudes are compared through the bit pattern `key = bits & 0x7fff_ffff`, which orders
//! non-NaN |x| exactly like the values. Candidates are `0 < key <= 0x7f80_0000` (non-zero, not NaN;
//! an infinity is the largest magnitude).
//!
//! Exact mode: a threshold `t` is estimated from a deterministic strided sample, aimed a little
//! *below* the k-th largest magnitude; one pass collects `C = {i : key(i) >= t}` (ascending).
//! When `|C| >= k`, C holds every index the reference rule can pick, and the k-th largest key `T`
//! of C (one `select_nth_unstable`) plus a pass keeping `key > T`, then the lowest indices with
//! `key == T`, gives the reference set bit for bit. When the estimate misses, a 2-pass histogram
//! over the upper 16 bits of the key gives a guaranteed superset instead. No O(N log N) sort.
//!
//! Fast mode aims at `0.75 k`; it keeps the collected set when `ceil(k/2) <= |C| <= 2k`
//! (truncated to its first k indices when larger than k: every member lies within the top 2k since
//! `|{key >= t}| <= 2k`), and falls back to the exact mode otherwise.

/// k of DF-GEN-2: `ceil(N * ratio)` in binary64, clamped to `[1, N]` (N >= 1).
pub fn num_selected(n: usize, ratio: f64) -> usize {
    let k = (n as f64 * ratio).ceil();
    let k = if k.is_nan() || k < 1.0 {
        1
    } else if k >= n as f64 {
        n
    } else {
        k as usize
    };
    k.clamp(1, n.max(1))
}

const KEY_MASK: u32 = 0x7fff_ffff;
const KEY_INF: u32 = 0x7f80_0000;

#[inline(always)]
fn key(x: f32) -> u32 {
    let k = x.to_bits() & KEY_MASK;
    if k > KEY_INF { 0 } else { k }
}

/// DF-GEN-3 by definition (sort by |d| desc, index asc; keep `min(k, #candidates)`), ascending.
/// O(N log N): for tests.
pub fn reference_select(d: &[f32], k: usize) -> Vec<u32> {
    let mut c: Vec<u32> = (0..d.len() as u32)
        .filter(|&i| key(d[i as usize]) != 0)
        .collect();
    c.sort_by(|&a, &b| key(d[b as usize]).cmp(&key(d[a as usize])).then(a.cmp(&b)));
    c.truncate(k);
    c.sort_unstable();
    c
}

/// How the last [`Selector::select`] call was resolved (for tests and the bench).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Path {
    /// Not run yet.
    #[default]
    None,
    /// Threshold from the sample.
    Sample,
    /// Histogram of the key's upper 16 bits.
    Histogram,
    /// Every candidate (at most k of them).
    All,
}

/// Reusable scratch for selecting among N values. One per engine; not thread-safe.
#[derive(Debug, Default)]
pub struct Selector {
    cand: Vec<u32>,
    keys: Vec<u32>,
    sample: Vec<u32>,
    hist: Vec<u32>,
    /// How the last call was resolved.
    pub last_path: Path,
}

const MIN_SAMPLE: usize = 65_536;
const MIN_SAMPLE_RANK: f64 = 64.0;
const SMALL_N: usize = 1 << 16;

impl Selector {
    /// An empty selector (scratch grows on first use and is kept).
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes into `out` the ascending indices selected from `d` (never an index with `d == 0` or
    /// NaN). `fast == false`: exactly the DF-GEN-3 set. `fast == true`: a DF-GEN-7 set.
    pub fn select(&mut self, d: &[f32], k: usize, fast: bool, out: &mut Vec<u32>) {
        out.clear();
        let n = d.len();
        if n == 0 || k == 0 {
            self.last_path = Path::All;
            return;
        }
        let k = k.min(n);
        if n >= SMALL_N
            && k < n
            && let Some(t) = self.sample_threshold(d, k, if fast { 0.75 } else { -1.0 })
        {
            collect_at_least(d, t, &mut self.cand);
            let c = self.cand.len();
            if fast && c >= k.div_ceil(2) && c <= 2 * k {
                self.last_path = Path::Sample;
                out.extend_from_slice(&self.cand[..c.min(k)]);
                return;
            }
            if !fast && c >= k {
                self.last_path = Path::Sample;
                finish(d, &self.cand, k, &mut self.keys, out);
                return;
            }
        }
        self.by_histogram(d, k, out);
    }

    /// The threshold key from a strided sample: aimed below the k-th largest (exact, `aim < 0`)
    /// or at `aim * k` (fast). `None` when the sample is too small to aim with.
    fn sample_threshold(&mut self, d: &[f32], k: usize, aim: f64) -> Option<u32> {
        let n = d.len();
        let q = k as f64 / n as f64;
        let want = ((4.0 * MIN_SAMPLE_RANK / q).ceil() as usize).max(MIN_SAMPLE);
        let m = want.min(n / 4).max(1);
        let stride = n / m;
        self.sample.clear();
        self.sample
            .extend(d.iter().step_by(stride).take(m).map(|&x| key(x)));
        let m = self.sample.len();
        let expected = q * m as f64;
        let rank = if aim > 0.0 {
            let r = (aim * expected).round();
            if r < MIN_SAMPLE_RANK {
                return None;
            }
            r as usize
        } else {
            if expected < MIN_SAMPLE_RANK / 2.0 {
                return None;
            }
            (1.1 * expected + 4.0 * expected.sqrt() + 2.0).ceil() as usize
        };
        let rank = rank.clamp(1, m);
        let (_, t, _) = self.sample.select_nth_unstable(m - rank);
        let t = *t;
        if t == 0 { None } else { Some(t) }
    }

    fn by_histogram(&mut self, d: &[f32], k: usize, out: &mut Vec<u32>) {
        self.hist.clear();
        self.hist.resize(1 << 16, 0);
        let mut total: usize = 0;
        for &x in d {
            let kk = key(x);
            if kk != 0 {
                self.hist[(kk >> 16) as usize] += 1;
                total += 1;
            }
        }
        if total <= k {
            self.last_path = Path::All;
            collect_at_least(d, 1, out);
            return;
        }
        let mut cum: usize = 0;
        let mut b = 0usize;
        for i in (0..self.hist.len()).rev() {
            cum += self.hist[i] as usize;
            if cum >= k {
                b = i;
                break;
            }
        }
        self.last_path = Path::Histogram;
        collect_at_least(d, ((b as u32) << 16).max(1), &mut self.cand);
        finish(d, &self.cand, k, &mut self.keys, out);
    }
}

/// `out = {i : key(d[i]) >= t}` ascending (t >= 1).
fn collect_at_least(d: &[f32], t: u32, out: &mut Vec<u32>) {
    // branch-free writes into a block buffer: the selection rate is unpredictable per element
    const BLOCK: usize = 1024;
    out.clear();
    let mut buf = [0u32; BLOCK];
    for (b, chunk) in d.chunks(BLOCK).enumerate() {
        let base = (b * BLOCK) as u32;
        let mut len = 0usize;
        for (j, &x) in chunk.iter().enumerate() {
            buf[len] = base + j as u32;
            len += usize::from(key(x) >= t);
        }
        out.extend_from_slice(&buf[..len]);
    }
}

/// From an ascending candidate set containing every index whose key reaches the k-th largest key
/// of all, the reference selection of k (ties by lower index), ascending.
fn finish(d: &[f32], cand: &[u32], k: usize, keys: &mut Vec<u32>, out: &mut Vec<u32>) {
    out.clear();
    if cand.len() <= k {
        out.extend_from_slice(cand);
        return;
    }
    keys.clear();
    keys.extend(cand.iter().map(|&i| key(d[i as usize])));
    let c = keys.len();
    let (_, t, _) = keys.select_nth_unstable(c - k);
    let t = *t;
    let greater = keys.iter().filter(|&&x| x > t).count();
    let mut need = k - greater;
    out.reserve(k);
    for &i in cand {
        let kk = key(d[i as usize]);
        if kk > t {
            out.push(i);
        } else if kk == t && need > 0 {
            out.push(i);
            need -= 1;
        }
    }
}
