//! Array recipes: the compact form of a vector's large arrays (`conformance/vectors/README.md`,
//! "Recipes"), expanded to the full form that the rest of the vectors test reads. The same rules as
//! the runner's `delta_fabric_conformance.recipes`:
//!
//! - a recipe at a member `x` becomes `x` (numbers; non-finite values as strings) and `x_bits`;
//! - a recipe at a member `x_bits` becomes the bit patterns only;
//! - a recipe at `indices` (`range`) becomes a list of integers.

use serde_json::{Map, Value};

fn int(r: &Value, key: &str, lo: u64) -> Result<u64, String> {
    match r.get(key).and_then(Value::as_u64) {
        Some(v) if v >= lo && v < 1 << 32 => Ok(v),
        _ => Err(format!(
            "recipe {}: {key} must be an integer >= {lo}",
            r["recipe"]
        )),
    }
}

fn pattern(b: &Value) -> Result<u32, String> {
    b.as_str()
        .filter(|t| t.len() == 8)
        .and_then(|t| u32::from_str_radix(t, 16).ok())
        .ok_or_else(|| format!("bad bit pattern {b}"))
}

/// `(-1)^j`: +1 for even `j`.
fn sign(j: u64) -> f64 {
    if j.is_multiple_of(2) { 1.0 } else { -1.0 }
}

/// `count` magnitudes `lo + j step`, `step = 2^floor(log2((hi - lo) / count))`, signs alternating.
fn spread(count: u64, lo: f64, hi: f64) -> Vec<f64> {
    let step = 2f64.powi(((hi - lo) / count as f64).log2().floor() as i32);
    (0..count)
        .map(|j| (lo + j as f64 * step) * sign(j))
        .collect()
}

/// `(-1)^i (i + 1) 2^-24` for every `i < n`.
fn ramp(n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|i| (i + 1) as f64 * 2f64.powi(-24) * sign(i))
        .collect()
}

/// The `m`-th index (from 0) that is not a multiple of 4.
fn unsampled(m: u64) -> usize {
    (4 * (m / 3) + m % 3 + 1) as usize
}

fn put(x: &mut [f64], at: usize, v: f64) -> Result<(), String> {
    *x.get_mut(at).ok_or("recipe position beyond n")? = v;
    Ok(())
}

fn sample_overestimates(n: usize) -> Result<Vec<f64>, String> {
    let mut x = ramp(n);
    for (j, v) in spread(2000, 2.0, 3.0).into_iter().enumerate() {
        put(&mut x, 28 + 64 * j, v)?;
    }
    for (j, v) in spread(1000, 4.0, 5.0).into_iter().enumerate() {
        put(&mut x, unsampled(5 + 48 * j as u64), v)?;
    }
    Ok(x)
}

fn sample_underestimates(n: usize) -> Result<Vec<f64>, String> {
    let mut x = ramp(n);
    for (j, v) in spread(800, 1.0, 1.5).into_iter().enumerate() {
        put(&mut x, 12 + 160 * j, v)?;
    }
    for (j, v) in spread(12000, 2.0, 3.0).into_iter().enumerate() {
        let s = if j.is_multiple_of(3) { -1.0 } else { 1.0 };
        put(&mut x, unsampled(1 + 8 * j as u64), v.abs() * s)?;
    }
    Ok(x)
}

fn base(r: &Value, name: &str, n: usize) -> Result<Vec<f32>, String> {
    let wide = match name {
        "zeros" => vec![0.0; n],
        "permutation" => {
            let (mul, m) = (
                u128::from(int(r, "multiplier", 0)?),
                u128::from(int(r, "modulus", 1)?),
            );
            (0..n as u64)
                .map(|i| ((u128::from(i) * mul % m + 1) as f64) * sign(i))
                .collect()
        }
        "steps" => {
            let (start, stride) = (int(r, "start", 0)?, int(r, "stride", 1)?);
            let count = int(r, "count", 0)?;
            let denom = r
                .get("denominator")
                .and_then(Value::as_f64)
                .filter(|d| *d > 0.0)
                .ok_or("recipe steps: denominator must be a positive number")?;
            let mut x = vec![0.0; n];
            for j in 0..count {
                put(
                    &mut x,
                    (start + stride * j) as usize,
                    (j + 1) as f64 / denom * sign(j),
                )?;
            }
            x
        }
        "sample_overestimates" | "sample_underestimates" if n < 131_072 => {
            return Err(format!("recipe {name}: n must be at least 131072"));
        }
        "sample_overestimates" => sample_overestimates(n)?,
        "sample_underestimates" => sample_underestimates(n)?,
        other => return Err(format!("unknown f32 recipe {other}")),
    };
    // one rounding from binary64 to binary32 (exact for these values)
    Ok(wide.into_iter().map(|v| v as f32).collect())
}

fn members(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "zeros" | "sample_overestimates" | "sample_underestimates" => &[],
        "permutation" => &["multiplier", "modulus"],
        "steps" => &["start", "stride", "count", "denominator"],
        _ => return None,
    })
}

/// The f32 array of an f32 recipe.
pub fn expand_f32(r: &Value) -> Result<Vec<f32>, String> {
    let name = r["recipe"].as_str().ok_or("recipe: not a name")?;
    let own = members(name).ok_or_else(|| format!("unknown f32 recipe {name}"))?;
    let obj = r.as_object().ok_or("recipe: not an object")?;
    if let Some(k) = obj.keys().find(|k| {
        !["recipe", "n", "fill", "set"].contains(&k.as_str()) && !own.contains(&k.as_str())
    }) {
        return Err(format!("recipe {name}: unknown member {k}"));
    }
    let n = int(r, "n", 1)? as usize;
    let mut x = base(r, name, n)?;
    if let Some(fill) = r.get("fill") {
        let m = int(fill, "modulus", 1)?;
        let bits = pattern(&fill["bits"])?;
        let res: Vec<u64> = fill["residues"]
            .as_array()
            .ok_or("fill: residues")?
            .iter()
            .map(|v| v.as_u64().filter(|v| *v < m).ok_or("fill: residue"))
            .collect::<Result<_, _>>()?;
        for (i, v) in x.iter_mut().enumerate() {
            if res.contains(&(i as u64 % m)) {
                *v = f32::from_bits(bits);
            }
        }
    }
    if let Some(set) = r.get("set") {
        let idx = set["indices"].as_array().ok_or("set: indices")?;
        let bits = set["bits"].as_array().ok_or("set: bits")?;
        if idx.len() != bits.len() {
            return Err("set: indices and bits differ in length".into());
        }
        for (i, b) in idx.iter().zip(bits) {
            let i = i.as_u64().ok_or("set: index")? as usize;
            *x.get_mut(i).ok_or("set: index beyond n")? = f32::from_bits(pattern(b)?);
        }
    }
    Ok(x)
}

/// The index list of an index recipe (`range`).
pub fn expand_indices(r: &Value) -> Result<Vec<u64>, String> {
    if r["recipe"] != "range" || r.as_object().map(Map::len) != Some(4) {
        return Err(format!(
            "index recipe: expected range (start, step, count), got {r}"
        ));
    }
    let (start, step, count) = (int(r, "start", 0)?, int(r, "step", 1)?, int(r, "count", 0)?);
    Ok((0..count).map(|j| start + step * j).collect())
}

fn number(v: f32) -> Value {
    match serde_json::Number::from_f64(f64::from(v)) {
        Some(x) => Value::Number(x),
        None if v.is_nan() => Value::from("nan"),
        None if v > 0.0 => Value::from("inf"),
        None => Value::from("-inf"),
    }
}

fn bits_json(x: &[f32]) -> Value {
    Value::Array(
        x.iter()
            .map(|v| Value::from(format!("{:08x}", v.to_bits())))
            .collect(),
    )
}

fn is_recipe(v: &Value) -> bool {
    v.get("recipe").is_some()
}

/// `v` with every recipe replaced by the lists it stands for.
pub fn expand(v: &mut Value) -> Result<(), String> {
    match v {
        Value::Array(a) => a.iter_mut().try_for_each(expand),
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for key in keys {
                if !is_recipe(&m[&key]) {
                    expand(m.get_mut(&key).expect("key"))?;
                    continue;
                }
                let r = m[&key].clone();
                let at = |e: String| format!("/{key}: {e}");
                if key == "indices" {
                    let idx = expand_indices(&r).map_err(at)?;
                    m.insert(
                        key,
                        Value::Array(idx.into_iter().map(Value::from).collect()),
                    );
                } else if key.ends_with("_bits") {
                    let x = expand_f32(&r).map_err(at)?;
                    m.insert(key, bits_json(&x));
                } else {
                    let twin = format!("{key}_bits");
                    if m.contains_key(&twin) {
                        return Err(format!("{twin} given beside the recipe of {key}"));
                    }
                    let x = expand_f32(&r).map_err(at)?;
                    m.insert(twin, bits_json(&x));
                    m.insert(key, Value::Array(x.iter().copied().map(number).collect()));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// The input recipes of the N = 2^17 generate vectors and the SHA-256 of the little-endian
    /// binary32 array each stood for as a list (the files before recipes; the Python expansion,
    /// `tests/test_vector_recipes.py`, gives the same).
    const PINNED: &[(&str, &str)] = &[
        (
            r#"{"recipe":"zeros","n":131072}"#,
            "07854d2fef297a06ba81685e660c332de36d5d18d546927d30daad6d7fda1541",
        ),
        (
            r#"{"recipe":"permutation","n":131072,"multiplier":7919,"modulus":131071}"#,
            "3809095d5b90c36bb906dafecda6232bb3bbaa05963719544bcb478142feed9c",
        ),
        (
            r#"{"recipe":"permutation","n":131072,"multiplier":7919,"modulus":131071,
                "set":{"indices":[0,131071],"bits":["48000040","c8000000"]}}"#,
            "4996087c540927ece34050ae28fb45445e644d88a9f6723af5d49e11a87b34c9",
        ),
        (
            r#"{"recipe":"steps","n":131072,"start":1,"stride":1310,"count":100,"denominator":128}"#,
            "475ba93d30908eeb91c53434f13f6ceeb3ed879b7bb081500677502e265cc52b",
        ),
        (
            r#"{"recipe":"steps","n":131072,"start":0,"stride":16,"count":8192,"denominator":3807,
                "fill":{"modulus":4,"residues":[1,2],"bits":"7fc00000"}}"#,
            "f7d73c298386f34f3b93b81265ec2ecc62c0b417c81e75349462c9a114322465",
        ),
        (
            r#"{"recipe":"steps","n":131072,"start":0,"stride":4,"count":32768,"denominator":32768}"#,
            "040fc894928145e8ddeaf26f62038a666cd5d8a9ce836666962d906ee281c376",
        ),
        (
            r#"{"recipe":"sample_overestimates","n":131072}"#,
            "7fc40e0131fc1ac3f965826ea10ff1b843e12a547b8040d521381178e0931c17",
        ),
        (
            r#"{"recipe":"sample_underestimates","n":131072}"#,
            "bbacc2e236fc2dfd02d7950e0b33e6ae93988c1319f02ebeb2e6139ac6e9313e",
        ),
    ];

    #[test]
    fn recipes_expand_to_the_pinned_arrays() {
        for (text, digest) in PINNED {
            let r: Value = serde_json::from_str(text).expect("recipe JSON");
            let x = expand_f32(&r).expect("expands");
            let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
            assert_eq!(hex::encode(Sha256::digest(&bytes)), *digest, "{text}");
        }
    }

    #[test]
    fn expansion_writes_numbers_bits_and_indices() {
        let mut v: Value = serde_json::from_str(
            r#"{"active":{"recipe":"steps","n":4,"start":1,"stride":2,"count":2,"denominator":2,
                 "fill":{"modulus":4,"residues":[0],"bits":"7fc00000"}},
                "expected":{"active_bits":{"recipe":"zeros","n":2},
                            "entries":[{"indices":{"recipe":"range","start":3,"step":5,"count":3}}]}}"#,
        )
        .expect("JSON");
        expand(&mut v).expect("expands");
        assert_eq!(v["active"], serde_json::json!(["nan", 0.5, 0.0, -1.0]));
        assert_eq!(
            v["active_bits"],
            serde_json::json!(["7fc00000", "3f000000", "00000000", "bf800000"])
        );
        assert_eq!(
            v["expected"]["active_bits"],
            serde_json::json!(["00000000", "00000000"])
        );
        assert_eq!(
            v["expected"]["entries"][0]["indices"],
            serde_json::json!([3, 8, 13])
        );
        for bad in [
            r#"{"x":{"recipe":"unknown","n":3}}"#,
            r#"{"x":{"recipe":"zeros","n":3},"x_bits":[]}"#,
            r#"{"x":{"recipe":"steps","n":3,"start":2,"stride":1,"count":2,"denominator":1}}"#,
            r#"{"x":{"recipe":"zeros","n":3,"extra":1}}"#,
            r#"{"x":{"recipe":"zeros","n":3,"set":{"indices":[3],"bits":["00000000"]}}}"#,
        ] {
            let mut v: Value = serde_json::from_str(bad).expect("JSON");
            assert!(expand(&mut v).is_err(), "{bad}");
        }
    }
}
