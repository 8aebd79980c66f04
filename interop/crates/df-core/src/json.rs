//! A JSON reader whose floats are correctly rounded: [`from_str`] builds the same
//! [`serde_json::Value`] as `serde_json::from_str`, except that every number with a fraction or an
//! exponent is read by the standard library's `f64::from_str` (correctly rounded, IEEE 754
//! round-to-nearest-even). serde_json without its `float_roundtrip` feature reads some 17-digit
//! decimals one ulp off (`0.10000000149011613` became `fl32(0.1)` as an f32 threshold), and that
//! feature would change serde_json for every crate of the workspace (zenoh and burn included, so a
//! full rebuild of a warm target directory). The conformance driver (`df-driver`) reads its requests
//! and the `vectors` test reads the vectors with this reader (DF-CNF-20: a JSON number is the value
//! of its decimal text).
//!
//! Integers are read as serde_json does: a `u64` or `i64` when they fit, `-0` as the float `-0.0`, and
//! larger ones as floats. Nesting is limited to 127 levels (serde_json's limit), so hostile input
//! cannot overflow the stack.

use serde_json::{Map, Number, Value};

/// serde_json's limit: 127 nested arrays or objects are read, 128 are refused.
const MAX_DEPTH: usize = 127;

/// Parses one JSON text (surrounding whitespace allowed).
pub fn from_str(s: &str) -> Result<Value, String> {
    let mut p = Parser {
        b: s.as_bytes(),
        s,
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.b.len() {
        return Err(p.fail("trailing characters"));
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn fail(&self, what: &str) -> String {
        format!("JSON: {what} at byte {}", self.i)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.fail("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        match self.b.get(self.i) {
            None => Err(self.fail("unexpected end")),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[' | b'{') if depth >= MAX_DEPTH => Err(self.fail("nesting deeper than 127")),
            Some(b'[') => {
                self.i += 1;
                let mut out = Vec::new();
                self.ws();
                if self.eat(b']') {
                    return Ok(Value::Array(out));
                }
                loop {
                    self.ws();
                    out.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(b']') {
                        return Ok(Value::Array(out));
                    }
                    if !self.eat(b',') {
                        return Err(self.fail("expected ',' or ']'"));
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut out = Map::new();
                self.ws();
                if self.eat(b'}') {
                    return Ok(Value::Object(out));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return Err(self.fail("expected a key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(b':') {
                        return Err(self.fail("expected ':'"));
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    out.insert(k, v);
                    self.ws();
                    if self.eat(b'}') {
                        return Ok(Value::Object(out));
                    }
                    if !self.eat(b',') {
                        return Err(self.fail("expected ',' or '}'"));
                    }
                }
            }
            Some(_) => Err(self.fail("unexpected character")),
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| self.fail("invalid \\u escape"))?;
        self.i += 4;
        u32::from_str_radix(h, 16).map_err(|e| self.fail(&e.to_string()))
    }

    /// A string; `self.i` at its opening quote.
    fn string(&mut self) -> Result<String, String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while let Some(&c) = self.b.get(self.i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            // `start` and `self.i` lie on character boundaries: only ASCII bytes stop the scan
            out.push_str(&self.s[start..self.i]);
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = *self
                        .b
                        .get(self.i)
                        .ok_or_else(|| self.fail("unexpected end"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if !(self.eat(b'\\') && self.eat(b'u')) {
                                    return Err(self.fail("lone surrogate"));
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.fail("lone surrogate"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            out.push(
                                char::from_u32(code).ok_or_else(|| self.fail("lone surrogate"))?,
                            );
                        }
                        _ => return Err(self.fail("invalid escape")),
                    }
                }
                Some(_) => return Err(self.fail("control character in a string")),
                None => return Err(self.fail("unterminated string")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        let negative = self.eat(b'-');
        let int_start = self.i;
        let n = self.digits();
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return Err(self.fail("invalid number"));
        }
        let mut float = false;
        if self.eat(b'.') {
            float = true;
            if self.digits() == 0 {
                return Err(self.fail("invalid number"));
            }
        }
        if self.eat(b'e') || self.eat(b'E') {
            float = true;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return Err(self.fail("invalid number"));
            }
        }
        let text = &self.s[start..self.i];
        if !float {
            if !negative && let Ok(u) = text.parse::<u64>() {
                return Ok(Value::Number(u.into()));
            }
            if let Ok(i) = text.parse::<i64>()
                && i != 0
            {
                return Ok(Value::Number(i.into()));
            }
        }
        // correctly rounded (std); a finite JSON number never reads as NaN, overflow reads as inf
        let f: f64 = text.parse().map_err(|_| self.fail("invalid number"))?;
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| self.fail("number out of range"))
    }
}

#[cfg(test)]
mod tests {
    use super::from_str;
    use serde_json::{Value, json};

    #[test]
    fn same_values_as_serde_json() {
        for s in [
            r#"{"a": [1, -2, 3.5, -0.0, 1e3, 18446744073709551615, -9223372036854775808], "b": null}"#,
            r#"  {"s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00y", "t": true, "f": false, "e": {}, "l": []} "#,
            "[0.1, 1E-7, 2.5e+10, 123456789012345678901234567890]",
            "-0",
        ] {
            let want: Value = serde_json::from_str(s).unwrap();
            assert_eq!(from_str(s).unwrap(), want, "{s}");
        }
    }

    #[test]
    fn floats_are_correctly_rounded() {
        // serde_json without float_roundtrip reads this one ulp below the nearest f64
        let x = from_str("0.10000000149011613").unwrap();
        assert_eq!(
            x.as_f64().unwrap().to_bits(),
            0.100_000_001_490_116_13_f64.to_bits()
        );
        assert_eq!(
            x.as_f64().unwrap().to_bits(),
            "0.10000000149011613".parse::<f64>().unwrap().to_bits()
        );
        assert_eq!(
            from_str("-0").unwrap().as_f64().unwrap().to_bits(),
            (-0.0f64).to_bits()
        );
        assert_eq!(from_str("[1e400]").ok(), None);
    }

    #[test]
    fn bad_input_is_an_error() {
        for s in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "-",
            "1e",
            "\"\\ud800\"",
            "\"a\nb\"",
            "nul",
            "[1] x",
            "{1: 2}",
            "\"\\x\"",
        ] {
            assert!(from_str(s).is_err(), "{s}");
        }
        let deep = "[".repeat(129) + &"]".repeat(129);
        assert!(from_str(&deep).is_err());
        // objects count towards the same limit
        let deep_objects = "{\"a\":".repeat(129) + "1" + &"}".repeat(129);
        assert!(from_str(&deep_objects).is_err());
        let objects = "{\"a\":".repeat(127) + "1" + &"}".repeat(127);
        assert!(from_str(&objects).is_ok());
        // an error says what and where
        assert_eq!(
            from_str("[1,]").unwrap_err(),
            "JSON: unexpected character at byte 3"
        );
        let ok = "[".repeat(128) + &"]".repeat(128);
        assert_eq!(
            from_str(&ok).is_ok(),
            serde_json::from_str::<Value>(&ok).is_ok()
        );
        assert_eq!(from_str("[]").unwrap(), json!([]));
    }
}
