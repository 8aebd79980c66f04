//! Optional native kernels of the DeltaFabric Python core (`delta_fabric_native`).
//!
//! Each function is one numeric pass of the NumPy reference core (`delta_fabric.kernels` names the
//! NumPy function it replaces) and gives the same bits: IEEE 754 f32 arithmetic, round to nearest
//! even, in the same order. The protocol's decisions stay in Python; these only read and write
//! buffers (NumPy arrays, or any object with the buffer protocol) that the caller passes.
//!
//! Safety: no `unsafe`. Buffers are read and written through `Cell` views (PyO3's `as_slice` /
//! `as_mut_slice`), so two arguments that are the same array are well defined. Every index is
//! bounds-checked; a bad argument raises `ValueError` (or `TypeError` for a wrong element type)
//! before anything is written.

use std::cell::Cell;

use pyo3::buffer::{Element, PyBuffer, ReadOnlyCell};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

/// The largest number of bytes a LEB128 varint of a u32 takes.
const MAX_VARINT: usize = 5;

/// The buckets of the selection's magnitude histogram: the top 16 bits of an f32 magnitude.
const HIST: usize = 1 << 16;

// --- buffers ------------------------------------------------------------------------------------

fn buffer<T: Element>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyBuffer<T>> {
    let buf = PyBuffer::<T>::get(obj).map_err(|e| PyTypeError::new_err(format!("{what}: {e}")))?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what}: not C-contiguous")));
    }
    // PyO3 0.27 takes a '>' (big-endian) format for native on little-endian hosts: refuse any
    // explicit byte order that is not this host's
    let foreign: &[u8] = if cfg!(target_endian = "little") {
        b">!"
    } else {
        b"<"
    };
    if buf
        .format()
        .to_bytes()
        .first()
        .is_some_and(|c| foreign.contains(c))
    {
        return Err(PyTypeError::new_err(format!(
            "{what}: not in this host's byte order"
        )));
    }
    Ok(buf)
}

fn ro<'a, T: Element>(
    py: Python<'a>,
    b: &'a PyBuffer<T>,
    what: &str,
) -> PyResult<&'a [ReadOnlyCell<T>]> {
    b.as_slice(py)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: not a contiguous buffer")))
}

fn rw<'a, T: Element>(py: Python<'a>, b: &'a PyBuffer<T>, what: &str) -> PyResult<&'a [Cell<T>]> {
    b.as_mut_slice(py)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: read-only or not contiguous")))
}

/// An index array: NumPy `uint32` or `intp` (`int64`), read as `usize`.
enum Index {
    U32(PyBuffer<u32>),
    I64(PyBuffer<i64>),
}

impl Index {
    fn get(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Index> {
        if PyBuffer::<u32>::get(obj).is_ok() {
            return Ok(Index::U32(buffer::<u32>(obj, what)?));
        }
        Ok(Index::I64(buffer::<i64>(obj, what)?))
    }

    fn len(&self) -> usize {
        match self {
            Index::U32(b) => b.item_count(),
            Index::I64(b) => b.item_count(),
        }
    }

    /// Every index, checked `< n`, as one `Vec<usize>`-free pass: `f(position, index)`.
    fn for_each(
        &self,
        py: Python<'_>,
        n: usize,
        what: &str,
        mut f: impl FnMut(usize, usize),
    ) -> PyResult<()> {
        match self {
            Index::U32(b) => {
                let s = ro(py, b, what)?;
                for (j, v) in s.iter().enumerate() {
                    let i = v.get() as usize;
                    if i >= n {
                        return Err(out_of_range(what, i, n));
                    }
                    f(j, i);
                }
            }
            Index::I64(b) => {
                let s = ro(py, b, what)?;
                for (j, v) in s.iter().enumerate() {
                    let v = v.get();
                    let i = usize::try_from(v).map_err(|_| {
                        PyValueError::new_err(format!("{what}: negative index {v}"))
                    })?;
                    if i >= n {
                        return Err(out_of_range(what, i, n));
                    }
                    f(j, i);
                }
            }
        }
        Ok(())
    }

    /// Checks every index `< n` (and, with `ascending`, strictly increasing) before a write pass.
    fn check(&self, py: Python<'_>, n: usize, ascending: bool, what: &str) -> PyResult<()> {
        let mut prev: Option<usize> = None;
        let mut bad = false;
        self.for_each(py, n, what, |_, i| {
            if ascending {
                if let Some(p) = prev {
                    bad |= i <= p;
                }
                prev = Some(i);
            }
        })?;
        if bad {
            return Err(PyValueError::new_err(format!(
                "{what}: not strictly increasing"
            )));
        }
        Ok(())
    }
}

fn out_of_range(what: &str, i: usize, n: usize) -> PyErr {
    PyValueError::new_err(format!("{what}: index {i} out of range for {n} values"))
}

fn same_len(what: &str, a: usize, b: usize) -> PyResult<()> {
    if a != b {
        return Err(PyValueError::new_err(format!(
            "{what}: lengths differ ({a} and {b})"
        )));
    }
    Ok(())
}

/// The f32 parts of a flat vector (1-D, in order) with their start offsets.
struct Parts {
    bufs: Vec<PyBuffer<f32>>,
    starts: Vec<usize>,
    total: usize,
}

impl Parts {
    fn get(parts: &Bound<'_, PyList>, what: &str) -> PyResult<Parts> {
        let mut bufs = Vec::with_capacity(parts.len());
        let mut starts = Vec::with_capacity(parts.len());
        let mut total = 0usize;
        for p in parts.iter() {
            let b = buffer::<f32>(&p, what)?;
            starts.push(total);
            total += b.item_count();
            bufs.push(b);
        }
        Ok(Parts {
            bufs,
            starts,
            total,
        })
    }
}

// --- packed indices (replaces compact._varint_sums) ---------------------------------------------

/// The running sums of the LEB128 varints of `data` into `out` (u32, at least as long as the number
/// of varints; `len(data)` always is). Returns the number of varints, or a negative code of the
/// first fault class found over the whole string, in `compact._varint_sums`'s order: -1 truncated
/// (the last byte continues), -2 a varint longer than 5 bytes, -3 overlong (a 0 last byte after a
/// continuation byte), -4 a varint value >= 2**32 (a 5th byte above 4 bits), -5 a running sum >= 2**32.
#[pyfunction]
fn varint_sums(py: Python<'_>, data: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>) -> PyResult<i64> {
    let db = buffer::<u8>(data, "data")?;
    let ob = buffer::<u32>(out, "out")?;
    let d = ro(py, &db, "data")?;
    let o = rw(py, &ob, "out")?;
    let n = d.len();
    if n == 0 {
        return Ok(0);
    }
    if d[n - 1].get() >= 0x80 {
        return Ok(-1);
    }
    let varints = d.iter().filter(|c| c.get() < 0x80).count();
    if varints > o.len() {
        return Err(PyValueError::new_err(
            "out: shorter than the number of varints",
        ));
    }
    // classes found anywhere (the first class in order wins, as in the NumPy pass)
    let (mut too_long, mut overlong, mut too_big) = (false, false, false);
    let mut count = 0usize;
    let mut sum: u64 = 0;
    let mut value: u64 = 0;
    let mut k = 0usize; // the position of the current byte in its varint
    let mut i = 0usize;
    while i < n {
        if k == 0 && i + 8 <= n {
            // eight one-byte varints in a row (the common case of dense indices): no branch each
            let w = &d[i..i + 8];
            if w.iter().fold(0u8, |a, c| a | c.get()) < 0x80 {
                for c in w {
                    sum += u64::from(c.get());
                    o[count].set(sum as u32);
                    count += 1;
                }
                i += 8;
                continue;
            }
        }
        let b = d[i].get();
        i += 1;
        if k >= MAX_VARINT {
            too_long = true;
        }
        if k == MAX_VARINT - 1 && b >= 0x10 {
            too_big = true;
        }
        if k < MAX_VARINT {
            value |= u64::from(b & 0x7F) << (7 * k);
        }
        if b < 0x80 {
            if k > 0 && b == 0 {
                overlong = true;
            }
            sum += value;
            o[count].set(sum as u32);
            count += 1;
            value = 0;
            k = 0;
        } else {
            k += 1;
        }
    }
    if too_long {
        return Ok(-2);
    }
    if overlong {
        return Ok(-3);
    }
    if too_big {
        return Ok(-4);
    }
    if sum >= 1 << 32 {
        return Ok(-5);
    }
    Ok(count as i64)
}

/// The LEB128 varints of the first index and of every gap of strictly increasing u32 `indices`
/// into `out` (at least `5 * len(indices)` bytes). Returns the number of bytes (replaces
/// `compact._varints(compact._gaps(indices))`).
#[pyfunction]
fn varint_gaps(
    py: Python<'_>,
    indices: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let ib = buffer::<u32>(indices, "indices")?;
    let ob = buffer::<u8>(out, "out")?;
    let (ix, o) = (ro(py, &ib, "indices")?, rw(py, &ob, "out")?);
    if o.len() < MAX_VARINT * ix.len() {
        return Err(PyValueError::new_err("out: shorter than 5 bytes per index"));
    }
    if ix.windows(2).any(|w| w[1].get() <= w[0].get()) {
        return Err(PyValueError::new_err("indices: not strictly increasing"));
    }
    let mut m = 0usize;
    let mut prev = 0u32;
    for c in ix.iter() {
        let i = c.get();
        let mut x = i - prev;
        prev = i;
        while x >= 0x80 {
            o[m].set((x as u8 & 0x7F) | 0x80);
            x >>= 7;
            m += 1;
        }
        o[m].set(x as u8);
        m += 1;
    }
    Ok(m)
}

// --- gathers and scatters ---------------------------------------------------------------------

/// `out[j] = fl32(src[ix[j]] + a[j])`; returns whether every result is finite
/// (replaces `src[ix] + a` and `np.isfinite(...).all()`).
#[pyfunction]
fn gather_add(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    ix: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let sb = buffer::<f32>(src, "src")?;
    let ab = buffer::<f32>(a, "a")?;
    let ob = buffer::<f32>(out, "out")?;
    let index = Index::get(ix, "ix")?;
    let (s, av, o) = (ro(py, &sb, "src")?, ro(py, &ab, "a")?, rw(py, &ob, "out")?);
    same_len("ix and a", index.len(), av.len())?;
    same_len("ix and out", index.len(), o.len())?;
    index.check(py, s.len(), false, "ix")?; // nothing is written before every index is known good
    let mut finite = true;
    index.for_each(py, s.len(), "ix", |j, i| {
        let r = s[i].get() + av[j].get();
        finite &= r.is_finite();
        o[j].set(r);
    })?;
    Ok(finite)
}

/// `dst[ix[j]] = vals[j]` in order (replaces `dst[ix] = vals`: the last write wins).
#[pyfunction]
fn scatter(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    ix: &Bound<'_, PyAny>,
    vals: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let db = buffer::<f32>(dst, "dst")?;
    let vb = buffer::<f32>(vals, "vals")?;
    let index = Index::get(ix, "ix")?;
    let (d, v) = (rw(py, &db, "dst")?, ro(py, &vb, "vals")?);
    same_len("ix and vals", index.len(), v.len())?;
    index.check(py, d.len(), false, "ix")?;
    index.for_each(py, d.len(), "ix", |j, i| d[i].set(v[j].get()))
}

/// `dst[ix[j]] = value` (replaces `dst[ix] = value`).
#[pyfunction]
fn scatter_value(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    ix: &Bound<'_, PyAny>,
    value: f32,
) -> PyResult<()> {
    let db = buffer::<f32>(dst, "dst")?;
    let index = Index::get(ix, "ix")?;
    let d = rw(py, &db, "dst")?;
    index.check(py, d.len(), false, "ix")?;
    index.for_each(py, d.len(), "ix", |_, i| d[i].set(value))
}

/// `dst[ix[j]] = fl32(dst[ix[j]] + vals[j])` for strictly increasing `ix` (replaces
/// `dst[ix] = dst[ix] + vals`, which is the same for distinct indices).
#[pyfunction]
fn scatter_add(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    ix: &Bound<'_, PyAny>,
    vals: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let db = buffer::<f32>(dst, "dst")?;
    let vb = buffer::<f32>(vals, "vals")?;
    let index = Index::get(ix, "ix")?;
    let (d, v) = (rw(py, &db, "dst")?, ro(py, &vb, "vals")?);
    same_len("ix and vals", index.len(), v.len())?;
    index.check(py, d.len(), true, "ix")?;
    index.for_each(py, d.len(), "ix", |j, i| d[i].set(d[i].get() + v[j].get()))
}

// --- the active weights as parts ----------------------------------------------------------------

/// `gather_add` of the anchor and the same sums on the active weights' parts in one walk over
/// strictly increasing `ix`: writes `out[j] = fl32(anchor[ix[j]] + a[j])` and returns whether that
/// and `fl32(active[ix[j]] + a[j])` are finite for every `j` (DF-RCV-50 of one packet).
#[pyfunction]
fn check_sums(
    py: Python<'_>,
    anchor: &Bound<'_, PyAny>,
    parts: &Bound<'_, PyList>,
    ix: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let anb = buffer::<f32>(anchor, "anchor")?;
    let an = ro(py, &anb, "anchor")?;
    let ps = Parts::get(parts, "parts")?;
    let views = ps
        .bufs
        .iter()
        .map(|b| ro(py, b, "parts"))
        .collect::<PyResult<Vec<_>>>()?;
    same_len("parts and anchor", ps.total, an.len())?;
    let (ab, ob) = (buffer::<f32>(a, "a")?, buffer::<f32>(out, "out")?);
    let (av, o) = (ro(py, &ab, "a")?, rw(py, &ob, "out")?);
    let index = Index::get(ix, "ix")?;
    same_len("ix and a", index.len(), av.len())?;
    same_len("ix and out", index.len(), o.len())?;
    index.check(py, ps.total, true, "ix")?; // nothing is written before the indices are known good
    let mut finite = true;
    let mut p = 0usize;
    index.for_each(py, ps.total, "ix", |j, i| {
        while i >= ps.starts[p] + views[p].len() {
            p += 1;
        }
        let x = av[j].get();
        let s = an[i].get() + x;
        o[j].set(s);
        finite &= s.is_finite() & (views[p][i - ps.starts[p]].get() + x).is_finite();
    })?;
    Ok(finite)
}

/// `active[ix[j]] = fl32(active[ix[j]] + vals[j])` over the writable `parts` of `active`, for
/// strictly increasing `ix` (replaces an `index_add_` per tensor).
#[pyfunction]
fn parts_scatter_add(
    py: Python<'_>,
    parts: &Bound<'_, PyList>,
    ix: &Bound<'_, PyAny>,
    vals: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let ps = Parts::get(parts, "parts")?;
    let views = ps
        .bufs
        .iter()
        .map(|b| rw(py, b, "parts"))
        .collect::<PyResult<Vec<_>>>()?;
    let vb = buffer::<f32>(vals, "vals")?;
    let v = ro(py, &vb, "vals")?;
    let index = Index::get(ix, "ix")?;
    same_len("ix and vals", index.len(), v.len())?;
    index.check(py, ps.total, true, "ix")?; // nothing is written before the indices are known good
    match &index {
        Index::U32(b) => {
            let s = ro(py, b, "ix")?;
            add_to_parts(&views, s.iter().map(|c| c.get() as usize), v);
        }
        Index::I64(b) => {
            let s = ro(py, b, "ix")?;
            add_to_parts(&views, s.iter().map(|c| c.get() as usize), v);
        }
    }
    Ok(())
}

/// `active[i] = fl32(active[i] + v[j])` for checked, strictly increasing flat indices `i` over
/// the parts `views` (a tight loop per part: no per-index lookup of the part).
fn add_to_parts(views: &[&[Cell<f32>]], ix: impl Iterator<Item = usize>, v: &[ReadOnlyCell<f32>]) {
    let mut p = 0usize;
    let mut start = 0usize;
    let mut dst: &[Cell<f32>] = views.first().copied().unwrap_or(&[]);
    for (i, x) in ix.zip(v) {
        while i >= start + dst.len() {
            start += dst.len();
            p += 1;
            dst = views[p];
        }
        let c = &dst[i - start];
        c.set(c.get() + x.get());
    }
}

// --- union of sorted index lists (replaces engine._union) ----------------------------------------

/// The sorted distinct union of strictly increasing u32 index lists, all `< n`, written to `out`
/// (intp, at least the sum of the lengths). Returns its length.
#[pyfunction]
fn union(
    py: Python<'_>,
    lists: &Bound<'_, PyList>,
    n: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let ob = buffer::<i64>(out, "out")?;
    let o = rw(py, &ob, "out")?;
    let bufs = lists
        .iter()
        .map(|l| buffer::<u32>(&l, "lists"))
        .collect::<PyResult<Vec<_>>>()?;
    let views = bufs
        .iter()
        .map(|b| ro(py, b, "lists"))
        .collect::<PyResult<Vec<_>>>()?;
    let total: usize = views.iter().map(|v| v.len()).sum();
    if o.len() < total {
        return Err(PyValueError::new_err(
            "out: shorter than the lists together",
        ));
    }
    for v in &views {
        let mut prev: Option<u32> = None;
        for c in v.iter() {
            let i = c.get();
            if i as usize >= n {
                return Err(out_of_range("lists", i as usize, n));
            }
            if prev.is_some_and(|p| i <= p) {
                return Err(PyValueError::new_err("lists: not strictly increasing"));
            }
            prev = Some(i);
        }
    }
    let mut m = 0usize;
    if views.len() == 2 {
        // a two-way merge
        let (a, b) = (views[0], views[1]);
        let (mut x, mut y) = (0usize, 0usize);
        while x < a.len() && y < b.len() {
            let (u, w) = (a[x].get(), b[y].get());
            let v = u.min(w);
            x += usize::from(u == v);
            y += usize::from(w == v);
            o[m].set(i64::from(v));
            m += 1;
        }
        for c in a[x..].iter().chain(b[y..].iter()) {
            o[m].set(i64::from(c.get()));
            m += 1;
        }
    } else if 8 * total >= n {
        let mut mark = vec![false; n];
        for v in &views {
            for c in v.iter() {
                mark[c.get() as usize] = true;
            }
        }
        for (i, &b) in mark.iter().enumerate() {
            if b {
                o[m].set(i as i64);
                m += 1;
            }
        }
    } else {
        let mut all: Vec<u32> = Vec::with_capacity(total);
        for v in &views {
            all.extend(v.iter().map(|c| c.get()));
        }
        all.sort_unstable();
        all.dedup();
        for (j, &i) in all.iter().enumerate() {
            o[j].set(i64::from(i));
        }
        m = all.len();
    }
    Ok(m)
}

// --- selection (replaces the block loop of Selector._delta_by_sample) ---------------------------

/// The candidates of a threshold: every `i` with `|d_i| >= t` (with `zero`: `|d_i| > 0`), where
/// `d = fl32(active - anchor)` and `active` is the concatenation of `parts`, ascending; NaN is never a
/// candidate. Writes up to `len(out_idx)` of them (`out_idx`: intp, `out_d`: `d` there) and returns
/// how many there are (a count above the room means: call again with more). With `hist` (u32,
/// `HIST` long) it also counts the written candidates by the top 16 bits of `|d|` (what `trim`
/// would count first).
#[pyfunction]
#[pyo3(signature = (parts, anchor, t, zero, out_idx, out_d, hist=None))]
#[allow(clippy::too_many_arguments)]
fn collect_at_least(
    py: Python<'_>,
    parts: &Bound<'_, PyList>,
    anchor: &Bound<'_, PyAny>,
    t: f32,
    zero: bool,
    out_idx: &Bound<'_, PyAny>,
    out_d: &Bound<'_, PyAny>,
    hist: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let ps = Parts::get(parts, "parts")?;
    let views = ps
        .bufs
        .iter()
        .map(|b| ro(py, b, "parts"))
        .collect::<PyResult<Vec<_>>>()?;
    let anb = buffer::<f32>(anchor, "anchor")?;
    let an = ro(py, &anb, "anchor")?;
    same_len("parts and anchor", ps.total, an.len())?;
    let (ib, db) = (
        buffer::<i64>(out_idx, "out_idx")?,
        buffer::<f32>(out_d, "out_d")?,
    );
    let (oi, od) = (rw(py, &ib, "out_idx")?, rw(py, &db, "out_d")?);
    same_len("out_idx and out_d", oi.len(), od.len())?;
    let room = oi.len();
    let hb = hist.map(|h| buffer::<u32>(h, "hist")).transpose()?;
    let hv = match &hb {
        Some(b) => Some(rw(py, b, "hist")?),
        None => None,
    };
    if let Some(h) = hv {
        if h.len() != HIST {
            return Err(PyValueError::new_err(format!(
                "hist: {HIST} counts expected"
            )));
        }
        for c in h {
            c.set(0);
        }
    }
    let mut m = 0usize;
    const BLOCK: usize = 1024;
    let mut dd = [0f32; BLOCK];
    for (p, view) in views.iter().enumerate() {
        let off = ps.starts[p];
        let anc = &an[off..off + view.len()];
        for (c, (xs, ys)) in view.chunks(BLOCK).zip(anc.chunks(BLOCK)).enumerate() {
            let w = xs.len();
            for ((d, x), y) in dd[..w].iter_mut().zip(xs).zip(ys) {
                *d = x.get() - y.get();
            }
            let base = off + c * BLOCK;
            for (g, group) in dd[..w].chunks(64).enumerate() {
                let mut bits = 0u64;
                if zero {
                    for (k, &d) in group.iter().enumerate() {
                        bits |= u64::from(d.abs() > 0.0) << k;
                    }
                } else {
                    for (k, &d) in group.iter().enumerate() {
                        bits |= u64::from(d.abs() >= t) << k;
                    }
                }
                while bits != 0 {
                    let k = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if m < room {
                        oi[m].set((base + g * 64 + k) as i64);
                        od[m].set(group[k]);
                        if let Some(h) = hv {
                            let c = &h[((group[k].to_bits() & 0x7FFF_FFFF) >> 15) as usize];
                            c.set(c.get() + 1);
                        }
                    }
                    m += 1;
                }
            }
        }
    }
    Ok(m)
}

// --- a sparse aggregate (replaces the dense scratch of Engine.receive) ----------------------------

/// Adds an entry to a sparse aggregate: `agg_idx` (strictly increasing u32) with `agg_val`, and
/// the entry's strictly increasing `idx` with damped values `u`. Writes the union of the indices to
/// `out_idx` and the aggregate there to `out_val` (at least `len(agg_idx) + len(idx)` each):
/// `fl32(agg + u)` where both have the index, `fl32(+0 + u)` where only the entry has it, `agg`
/// where only the aggregate has it; and the aggregate at the entry's indices to `new` (`len(idx)`).
/// These are the sums of the dense pass (`agg[ix] = agg[ix] + u` over an aggregate that is +0
/// elsewhere). Returns the union's length.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn merge_add(
    py: Python<'_>,
    agg_idx: &Bound<'_, PyAny>,
    agg_val: &Bound<'_, PyAny>,
    idx: &Bound<'_, PyAny>,
    u: &Bound<'_, PyAny>,
    out_idx: &Bound<'_, PyAny>,
    out_val: &Bound<'_, PyAny>,
    new: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let (aib, avb) = (
        buffer::<u32>(agg_idx, "agg_idx")?,
        buffer::<f32>(agg_val, "agg_val")?,
    );
    let (ib, ub) = (buffer::<u32>(idx, "idx")?, buffer::<f32>(u, "u")?);
    let (oib, ovb, nb) = (
        buffer::<u32>(out_idx, "out_idx")?,
        buffer::<f32>(out_val, "out_val")?,
        buffer::<f32>(new, "new")?,
    );
    let (ai, av) = (ro(py, &aib, "agg_idx")?, ro(py, &avb, "agg_val")?);
    let (ei, eu) = (ro(py, &ib, "idx")?, ro(py, &ub, "u")?);
    let (oi, ov, nw) = (
        rw(py, &oib, "out_idx")?,
        rw(py, &ovb, "out_val")?,
        rw(py, &nb, "new")?,
    );
    same_len("agg_idx and agg_val", ai.len(), av.len())?;
    same_len("idx and u", ei.len(), eu.len())?;
    same_len("idx and new", ei.len(), nw.len())?;
    same_len("out_idx and out_val", oi.len(), ov.len())?;
    if oi.len() < ai.len() + ei.len() {
        return Err(PyValueError::new_err(
            "out_idx: shorter than the two lists together",
        ));
    }
    for (what, s) in [("agg_idx", ai), ("idx", ei)] {
        if s.windows(2).any(|w| w[1].get() <= w[0].get()) {
            return Err(PyValueError::new_err(format!(
                "{what}: not strictly increasing"
            )));
        }
    }
    // The union through a bitmap of the indices (N / 8 bytes, in cache) and the rank of an index in
    // it (a popcount): no data-dependent branch per index, unlike a two-way merge.
    let top = ai
        .last()
        .map_or(0, |c| c.get())
        .max(ei.last().map_or(0, |c| c.get()));
    let words = top as usize / 64 + 1;
    let mut bits = vec![0u64; words];
    for c in ai.iter().chain(ei.iter()) {
        let i = c.get() as usize;
        bits[i / 64] |= 1u64 << (i % 64);
    }
    let mut base = Vec::with_capacity(words);
    let mut m = 0usize;
    for (w, &word) in bits.iter().enumerate() {
        base.push(m);
        let mut b = word;
        while b != 0 {
            oi[m].set((w * 64) as u32 + b.trailing_zeros());
            b &= b - 1;
            m += 1;
        }
    }
    let rank =
        |i: usize| base[i / 64] + (bits[i / 64] & ((1u64 << (i % 64)) - 1)).count_ones() as usize;
    for c in &ov[..m] {
        c.set(0.0);
    }
    // the aggregate where it has the index (it never holds -0: its first values are fl32(+0 + u)
    // and a sum is -0 only of two -0), then fl32(agg + u) there, +0 + u elsewhere
    for (c, v) in ai.iter().zip(av.iter()) {
        ov[rank(c.get() as usize)].set(v.get());
    }
    for ((c, v), w) in ei.iter().zip(eu.iter()).zip(nw.iter()) {
        let slot = &ov[rank(c.get() as usize)];
        let s = slot.get() + v.get();
        slot.set(s);
        w.set(s);
    }
    Ok(m)
}

/// The `k` largest magnitudes of the candidates `sel` (ascending intp indices) with `d` there, ties
/// by lower index (replaces `selection._trim_mask` and the two fancy indexings after it): writes
/// the kept indices to `out_idx` (intp) and `d` there to `out_d` (each at least `k` long) and
/// returns `k` (or `len(sel)` when it is not above `k`: everything is kept). No `d` may be NaN.
/// `hist`: the counts `collect_at_least` made of these candidates (checked against them: a
/// histogram that does not add up, or that has infinities or NaN in its top bucket, is made again).
#[pyfunction]
#[pyo3(signature = (sel, d, k, out_idx, out_d, hist=None))]
fn trim(
    py: Python<'_>,
    sel: &Bound<'_, PyAny>,
    d: &Bound<'_, PyAny>,
    k: usize,
    out_idx: &Bound<'_, PyAny>,
    out_d: &Bound<'_, PyAny>,
    hist: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let (sb, db) = (buffer::<i64>(sel, "sel")?, buffer::<f32>(d, "d")?);
    let (s, dv) = (ro(py, &sb, "sel")?, ro(py, &db, "d")?);
    let (ib, ob) = (
        buffer::<i64>(out_idx, "out_idx")?,
        buffer::<f32>(out_d, "out_d")?,
    );
    let (oi, od) = (rw(py, &ib, "out_idx")?, rw(py, &ob, "out_d")?);
    same_len("sel and d", s.len(), dv.len())?;
    let c = s.len();
    let keep = k.min(c);
    if oi.len() < keep || od.len() < keep {
        return Err(PyValueError::new_err("out_idx / out_d: shorter than k"));
    }
    // the magnitudes' bits: for non-negative floats their order is the numbers' order
    let mag = |x: &ReadOnlyCell<f32>| x.get().to_bits() & 0x7FFF_FFFF;
    // the keep-th largest magnitude `t`, by a radix select: a histogram of the top 16 bits finds
    // its bucket, a selection among that bucket's low 15 bits finds it there (O(c), no sort)
    // a given histogram is taken when its counts add up to `c` and nothing lies in the buckets
    // of infinity and NaN (0xFF00 and above), where it could hide a NaN; else it is made here
    let given: Option<Vec<u32>> = match hist {
        Some(h) => {
            let hb = buffer::<u32>(h, "hist")?;
            let hv = ro(py, &hb, "hist")?;
            if hv.len() != HIST {
                return Err(PyValueError::new_err(format!(
                    "hist: {HIST} counts expected"
                )));
            }
            let counts: Vec<u32> = hv.iter().map(|c| c.get()).collect();
            let total: u64 = counts.iter().map(|&n| u64::from(n)).sum();
            (total == c as u64 && counts[0xFF00..].iter().all(|&n| n == 0)).then_some(counts)
        }
        None => None,
    };
    let hist = match given {
        Some(h) => {
            // the NaN check without the histogram: an integer reduction (vectorises)
            let top = dv
                .chunks(1024)
                .map(|c| c.iter().map(&mag).fold(0, u32::max))
                .fold(0, u32::max);
            if top > 0x7F80_0000 {
                return Err(PyValueError::new_err("d: NaN among the candidates"));
            }
            h
        }
        None => {
            let mut h = vec![0u32; HIST];
            let mut nan = false;
            for x in dv.iter() {
                let b = mag(x);
                nan |= b > 0x7F80_0000;
                h[(b >> 15) as usize] += 1;
            }
            if nan {
                return Err(PyValueError::new_err("d: NaN among the candidates"));
            }
            h
        }
    };
    let (t, above) = if keep == 0 || keep == c {
        (0, c) // every candidate is kept (or none is asked for)
    } else {
        // the bucket where the count from the top reaches `keep`, and the count above it
        let (mut bucket, mut higher) = (hist.len() - 1, 0usize);
        while higher + (hist[bucket] as usize) < keep {
            higher += hist[bucket] as usize;
            bucket -= 1;
        }
        let mut low: Vec<u32> = dv
            .iter()
            .map(mag)
            .filter(|&b| (b >> 15) as usize == bucket)
            .map(|b| b & 0x7FFF)
            .collect();
        let need = keep - higher; // 1 ..= low.len(): the need-th largest of the bucket
        if low.len() != hist[bucket] as usize {
            // a given histogram that does not match the candidates: refused before any write
            return Err(PyValueError::new_err("hist: does not match d"));
        }
        let pos = low.len() - need;
        let tl = *low.select_nth_unstable(pos).1;
        let above = higher + low.iter().filter(|&&b| b > tl).count();
        let t = ((bucket as u32) << 15) | tl;
        (t, above)
    };
    let mut ties = keep.saturating_sub(above); // taken from the lowest indices first
    let mut m = 0usize;
    for (x, y) in s.iter().zip(dv.iter()) {
        if m == keep {
            break;
        }
        let mag = y.get().to_bits() & 0x7FFF_FFFF;
        let take = keep == c || mag > t || (mag == t && ties > 0);
        if take {
            if keep != c && mag == t {
                ties -= 1;
            }
            oi[m].set(x.get());
            od[m].set(y.get());
            m += 1;
        }
    }
    Ok(m)
}

/// The largest magnitude over the concatenation of `parts` (0 for none), or +inf when a value is
/// NaN or infinite: a bound for the DF-RCV-50 proof (two f32 below 2**127 in magnitude have a
/// finite sum).
#[pyfunction]
fn max_abs(py: Python<'_>, parts: &Bound<'_, PyList>) -> PyResult<f32> {
    let ps = Parts::get(parts, "parts")?;
    let mut top = 0i32;
    for b in &ps.bufs {
        for c in ro(py, b, "parts")?.chunks(1024) {
            // an integer reduction (vectorises): a magnitude's bits order as the magnitude; NaN
            // and inf have bits >= inf's
            let m = c
                .iter()
                .map(|x| (x.get().to_bits() & 0x7FFF_FFFF) as i32)
                .fold(0, i32::max);
            top = top.max(m);
        }
    }
    Ok(if top >= 0x7F80_0000 {
        f32::INFINITY
    } else {
        f32::from_bits(top as u32)
    })
}

// --- counts ----------------------------------------------------------------------------------

/// How many of `values` have `|v| >= t` (NaN never does): replaces
/// `np.count_nonzero(np.abs(values) >= t)`.
#[pyfunction]
fn count_at_least(py: Python<'_>, values: &Bound<'_, PyAny>, t: f32) -> PyResult<usize> {
    let vb = buffer::<f32>(values, "values")?;
    let v = ro(py, &vb, "values")?;
    Ok(v.iter().map(|x| usize::from(x.get().abs() >= t)).sum())
}

/// Whether the u32 `ix` are strictly increasing (replaces `np.all(ix[1:] > ix[:-1])`).
#[pyfunction]
fn increasing(py: Python<'_>, ix: &Bound<'_, PyAny>) -> PyResult<bool> {
    let b = buffer::<u32>(ix, "ix")?;
    let s = ro(py, &b, "ix")?;
    // a count of the pairs out of order (vectorises, where `all` stops at each pair)
    let bad: usize = s
        .iter()
        .zip(s.iter().skip(1))
        .map(|(a, b)| usize::from(a.get() >= b.get()))
        .sum();
    Ok(bad == 0)
}

// --- Q8 values (replaces compact.q8_encode / q8_quantize) ---------------------------------------

/// `2**e` as an f64, for `e` in f64's normal range.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The Q8 scale of a finite, positive largest magnitude `m` (`compact.q8_scale`): the smallest
/// `2**e` (`e >= -149`) with `127 * 2**e >= m`.
fn q8_scale_of(m: f32) -> f32 {
    let m = f64::from(m);
    let e0 = ((m.to_bits() >> 52) & 0x7FF) as i32 - 1022; // frexp: m < 2**e0
    let e = if 127.0 * pow2(e0 - 7) >= m {
        e0 - 7
    } else {
        e0 - 6
    };
    let e = e.max(-149);
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (e + 149))
    }
}

/// Q8 of f32 `values` (`compact.q8_encode`): writes the codes to `out_q` (int8, as long) and,
/// unless None, the decoded values `fl32(q * scale)` to `out_v` (`compact.q8_quantize`). Returns
/// the scale (0 when every value is 0), or NaN, with nothing written, when a value is not finite.
#[pyfunction]
#[pyo3(signature = (values, out_q, out_v=None))]
fn q8(
    py: Python<'_>,
    values: &Bound<'_, PyAny>,
    out_q: &Bound<'_, PyAny>,
    out_v: Option<&Bound<'_, PyAny>>,
) -> PyResult<f32> {
    let vb = buffer::<f32>(values, "values")?;
    let v = ro(py, &vb, "values")?;
    let qb = buffer::<i8>(out_q, "out_q")?;
    let q = rw(py, &qb, "out_q")?;
    same_len("values and out_q", v.len(), q.len())?;
    let ob = out_v.map(|o| buffer::<f32>(o, "out_v")).transpose()?;
    let o = match &ob {
        Some(b) => Some(rw(py, b, "out_v")?),
        None => None,
    };
    if let Some(o) = o {
        same_len("values and out_v", v.len(), o.len())?;
    }
    let top_bits = v
        .chunks(1024)
        .map(|c| {
            c.iter()
                .map(|x| (x.get().to_bits() & 0x7FFF_FFFF) as i32)
                .fold(0, i32::max)
        })
        .fold(0, i32::max);
    if top_bits >= 0x7F80_0000 {
        return Ok(f32::NAN);
    }
    if top_bits == 0 {
        for c in q.iter() {
            c.set(0);
        }
        if let Some(o) = o {
            for c in o.iter() {
                c.set(0.0);
            }
        }
        return Ok(0.0);
    }
    let scale = q8_scale_of(f32::from_bits(top_bits as u32));
    Q8Coder::new(scale).codes(1.0, v, q);
    if let Some(o) = o {
        for (c, x) in o.iter().zip(q.iter()) {
            c.set(f32::from(x.get()) * scale);
        }
    }
    Ok(scale)
}

/// What a node sends of its delta `d` under DF-GEN-70 with Q8 values: `v = fl32(weight * d)`, its
/// Q8 codes to `out_q`, the decoded `sent = fl32(q * scale)` to `out_sent` and the correction
/// `fl32(sent - d)` to `out_corr` (each as long as `d`); returns the scale, or NaN, with nothing
/// written, when a `v` is not finite (replaces `q8_quantize(fl32(w * d))` and the subtraction).
#[pyfunction]
fn q8_send(
    py: Python<'_>,
    d: &Bound<'_, PyAny>,
    weight: f32,
    out_q: &Bound<'_, PyAny>,
    out_sent: &Bound<'_, PyAny>,
    out_corr: &Bound<'_, PyAny>,
) -> PyResult<f32> {
    let db = buffer::<f32>(d, "d")?;
    let dv = ro(py, &db, "d")?;
    let qb = buffer::<i8>(out_q, "out_q")?;
    let (sb, cb) = (
        buffer::<f32>(out_sent, "out_sent")?,
        buffer::<f32>(out_corr, "out_corr")?,
    );
    let (q, sent, corr) = (
        rw(py, &qb, "out_q")?,
        rw(py, &sb, "out_sent")?,
        rw(py, &cb, "out_corr")?,
    );
    same_len("d and out_q", dv.len(), q.len())?;
    same_len("d and out_sent", dv.len(), sent.len())?;
    same_len("d and out_corr", dv.len(), corr.len())?;
    let top_bits = dv
        .chunks(1024)
        .map(|c| {
            c.iter()
                .map(|x| ((weight * x.get()).to_bits() & 0x7FFF_FFFF) as i32)
                .fold(0, i32::max)
        })
        .fold(0, i32::max);
    if top_bits >= 0x7F80_0000 {
        return Ok(f32::NAN);
    }
    if top_bits == 0 {
        // every v is 0: codes 0, sent +0, correction fl32(+0 - d)
        for (((c, s), r), x) in q.iter().zip(sent).zip(corr).zip(dv) {
            c.set(0);
            s.set(0.0);
            r.set(0.0 - x.get());
        }
        return Ok(0.0);
    }
    let scale = q8_scale_of(f32::from_bits(top_bits as u32));
    Q8Coder::new(scale).codes(weight, dv, q);
    for (c, s) in q.iter().zip(sent) {
        s.set(f32::from(c.get()) * scale);
    }
    for ((s, r), x) in sent.iter().zip(corr).zip(dv) {
        r.set(s.get() - x.get());
    }
    Ok(scale)
}

/// The Q8 codes of finite values under an entry's positive scale (`compact.q8_encode`).
struct Q8Coder {
    scale: f32,
    /// `1 / scale` when it is a power of two in range (a normal scale): the product by it is the
    /// same exact quotient as the division
    inv: Option<f32>,
    /// the largest code whose value stays finite: min(127, floor(FLT_MAX / scale))
    top: f32,
}

impl Q8Coder {
    fn new(scale: f32) -> Q8Coder {
        Q8Coder {
            scale,
            inv: (scale >= f32::MIN_POSITIVE).then(|| 1.0 / scale),
            top: (f64::from(f32::MAX) / f64::from(scale)).floor().min(127.0) as f32,
        }
    }

    /// `y = v / scale` (exact: a quotient below the normal range rounds to 0 either way), at
    /// most 127 in magnitude, rounded to nearest even by adding and subtracting 1.5 * 2**23 (exact
    /// below 2**22; `round_ties_even` is a libm call per value on baseline x86-64), then clamped
    /// to the codes whose value stays finite.
    fn round(y: f32, top: f32) -> i8 {
        const ROUND: f32 = 12_582_912.0;
        ((y + ROUND) - ROUND).clamp(-top, top) as i8
    }

    /// `out[j] = code(weight * v[j])`, with the choice of product or division made once.
    fn codes(&self, weight: f32, v: &[ReadOnlyCell<f32>], out: &[Cell<i8>]) {
        let top = self.top;
        match self.inv {
            Some(inv) => {
                for (c, x) in out.iter().zip(v) {
                    c.set(Self::round(weight * x.get() * inv, top));
                }
            }
            None => {
                for (c, x) in out.iter().zip(v) {
                    c.set(Self::round(weight * x.get() / self.scale, top));
                }
            }
        }
    }
}

/// `out = fl32(q * scale)` of Q8 codes; returns whether every value is finite (a scale near
/// FLT_MAX can overflow; replaces the decode's product and its finite check).
#[pyfunction]
fn q8_decode(
    py: Python<'_>,
    codes: &Bound<'_, PyAny>,
    scale: f32,
    out: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let qb = buffer::<i8>(codes, "codes")?;
    let q = ro(py, &qb, "codes")?;
    let ob = buffer::<f32>(out, "out")?;
    let o = rw(py, &ob, "out")?;
    same_len("codes and out", q.len(), o.len())?;
    let mut finite = true;
    for (c, x) in o.iter().zip(q) {
        let v = f32::from(x.get()) * scale;
        finite &= v.is_finite();
        c.set(v);
    }
    Ok(finite)
}

// --- the strided sample of the selection (replaces the sample pass of Selector._delta_by_sample)

/// `out[j] = |fl32(active[j * stride] - anchor[j * stride])|` for `j < len(out)`, where `active`
/// is the concatenation of `parts` (every position must lie inside it).
#[pyfunction]
fn sample_abs(
    py: Python<'_>,
    parts: &Bound<'_, PyList>,
    anchor: &Bound<'_, PyAny>,
    stride: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let ps = Parts::get(parts, "parts")?;
    let views = ps
        .bufs
        .iter()
        .map(|b| ro(py, b, "parts"))
        .collect::<PyResult<Vec<_>>>()?;
    let anb = buffer::<f32>(anchor, "anchor")?;
    let an = ro(py, &anb, "anchor")?;
    same_len("parts and anchor", ps.total, an.len())?;
    let ob = buffer::<f32>(out, "out")?;
    let o = rw(py, &ob, "out")?;
    if stride == 0 {
        return Err(PyValueError::new_err("stride: must be at least 1"));
    }
    if let Some(last) = o.len().checked_sub(1)
        && last.checked_mul(stride).is_none_or(|i| i >= ps.total)
    {
        return Err(PyValueError::new_err(format!(
            "out: {} samples of stride {stride} do not fit in {} values",
            o.len(),
            ps.total
        )));
    }
    let mut p = 0usize;
    for (j, c) in o.iter().enumerate() {
        let i = j * stride;
        while i >= ps.starts[p] + views[p].len() {
            p += 1;
        }
        c.set((views[p][i - ps.starts[p]].get() - an[i].get()).abs());
    }
    Ok(())
}

#[pymodule]
fn delta_fabric_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(varint_sums, m)?)?;
    m.add_function(wrap_pyfunction!(gather_add, m)?)?;
    m.add_function(wrap_pyfunction!(scatter, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_value, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(parts_scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(union, m)?)?;
    m.add_function(wrap_pyfunction!(collect_at_least, m)?)?;
    m.add_function(wrap_pyfunction!(merge_add, m)?)?;
    m.add_function(wrap_pyfunction!(varint_gaps, m)?)?;
    m.add_function(wrap_pyfunction!(check_sums, m)?)?;
    m.add_function(wrap_pyfunction!(trim, m)?)?;
    m.add_function(wrap_pyfunction!(max_abs, m)?)?;
    m.add_function(wrap_pyfunction!(q8, m)?)?;
    m.add_function(wrap_pyfunction!(q8_send, m)?)?;
    m.add_function(wrap_pyfunction!(q8_decode, m)?)?;
    m.add_function(wrap_pyfunction!(count_at_least, m)?)?;
    m.add_function(wrap_pyfunction!(increasing, m)?)?;
    m.add_function(wrap_pyfunction!(sample_abs, m)?)?;
    m.add("MAX_VARINT", MAX_VARINT)?;
    m.add("HIST", HIST)?;
    // the widest vector extension this build may use (`-C target-cpu=native` enables the host's)
    let simd = if cfg!(target_feature = "avx512f") {
        "avx512f"
    } else if cfg!(target_feature = "avx2") {
        "avx2"
    } else if cfg!(target_feature = "sse4.1") {
        "sse4.1"
    } else if cfg!(target_feature = "sse2") {
        "sse2"
    } else if cfg!(target_feature = "neon") {
        "neon"
    } else {
        "none"
    };
    m.add("SIMD", simd)?;
    m.add("API", 2)?;
    Ok(())
}
