//! Python `float.hex()` / `float.fromhex()` for `f64`.
//!
//! Golden files store every float as the string Python's `float.hex()` prints, so a golden written
//! by mobius (Python) and one written here are byte-identical, and no precision is lost either way
//! (docs/design.md §4). [`to_hex`] reproduces CPython's `float_hex` exactly:
//!
//! - normal numbers: `[-]0x1.<13 hex digits>p<sign><exponent>` (`0x1.8dfae80000000p+4`);
//! - subnormals keep the exponent at −1022 with a leading `0` (`0x0.0000000000001p-1022`);
//! - zeros: `0x0.0p+0` / `-0x0.0p+0`;
//! - non-finite values print as Python's `repr`: `inf`, `-inf`, `nan` (a NaN's sign is dropped).
//!
//! [`from_hex`] accepts what `float.fromhex` accepts (optional sign, optional `0x`, optional
//! fraction and `p` exponent, `inf`/`infinity`/`nan` in any case, surrounding whitespace) and rounds
//! extra mantissa digits half-to-even like CPython; values too large for an `f64` are an error
//! (Python raises `OverflowError`), never silently infinite.

use thiserror::Error;

/// Why a string is not a Python hex float.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HexFloatError {
    /// The text does not follow `float.fromhex` syntax.
    #[error("invalid hexadecimal float literal {text:?}: {why}")]
    Syntax { text: String, why: &'static str },
    /// The value is finite but beyond `f64::MAX` after rounding.
    #[error("hexadecimal value too large to represent as a float: {text:?}")]
    Overflow { text: String },
}

const MANT_BITS: u32 = 52;
const EXP_BIAS: i64 = 1023;
/// Exponent of the lowest bit of the smallest subnormal (2^-1074).
const MIN_LSB_EXP: i64 = -1074;

/// Formats `x` exactly as Python's `float.hex(x)` does.
pub fn to_hex(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0x0.0p+0");
    }
    let bits = x.to_bits();
    let exp_field = ((bits >> MANT_BITS) & 0x7ff) as i64;
    let mant = bits & ((1u64 << MANT_BITS) - 1);
    if exp_field == 0 {
        // Subnormal: CPython keeps the minimum normal exponent and a leading 0.
        format!("{sign}0x0.{mant:013x}p-1022")
    } else {
        let e = exp_field - EXP_BIAS;
        format!("{sign}0x1.{mant:013x}p{e:+}")
    }
}

fn syntax(text: &str, why: &'static str) -> HexFloatError {
    HexFloatError::Syntax { text: text.to_string(), why }
}

/// Parses a string the way Python's `float.fromhex` does.
pub fn from_hex(text: &str) -> Result<f64, HexFloatError> {
    let s = text.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let signed = |v: f64| if negative { -v } else { v };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Ok(signed(f64::INFINITY));
    }
    if lower == "nan" {
        return Ok(f64::NAN);
    }
    let digits_part = lower.strip_prefix("0x").unwrap_or(&lower);
    let (mantissa, exp_text) = match digits_part.split_once('p') {
        Some((m, e)) => (m, Some(e)),
        None => (digits_part, None),
    };
    let (int_digits, frac_digits) = match mantissa.split_once('.') {
        Some((i, f)) => (i, f),
        None => (mantissa, ""),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(syntax(text, "no hexadecimal digits"));
    }
    let exp = match exp_text {
        Some(e) => parse_exponent(e).ok_or_else(|| syntax(text, "bad exponent after 'p'"))?,
        None => 0,
    };

    // Keep the first 16 significant hex digits (64 bits) exactly; later digits only matter
    // through whether any of them is non-zero (the sticky bit for rounding).
    let mut m: u64 = 0;
    let mut kept = 0u32;
    let mut dropped_int_digits: i64 = 0;
    let mut used_frac_digits: i64 = 0;
    let mut sticky = false;
    for (is_frac, c) in int_digits.chars().map(|c| (false, c)).chain(frac_digits.chars().map(|c| (true, c))) {
        let d = c.to_digit(16).ok_or_else(|| syntax(text, "not a hexadecimal digit"))? as u64;
        if m == 0 && d == 0 {
            // Leading zero: no significance, only shifts the scale of fraction digits.
            if is_frac {
                used_frac_digits += 1;
            }
            continue;
        }
        if kept < 16 {
            m = (m << 4) | d;
            kept += 1;
            if is_frac {
                used_frac_digits += 1;
            }
        } else {
            sticky |= d != 0;
            if !is_frac {
                dropped_int_digits += 1;
            }
        }
    }
    if m == 0 {
        return Ok(signed(0.0));
    }
    // value = (m + sticky fraction) * 2^b
    let b = exp.saturating_add(4 * (dropped_int_digits - used_frac_digits));
    let nbits = 64 - i64::from(m.leading_zeros());
    let lead_exp = b.saturating_add(nbits - 1);
    if lead_exp > EXP_BIAS {
        return Err(HexFloatError::Overflow { text: text.to_string() });
    }
    let mut lsb_exp = (lead_exp - MANT_BITS as i64).max(MIN_LSB_EXP);
    let shift = lsb_exp - b;
    let mut q: u64 = if shift <= 0 {
        // Exact: fewer than 53 significant bits; shift left into place.
        m << (-shift)
    } else if shift > 64 {
        // Far below half an ulp of the smallest subnormal.
        0
    } else {
        let wide = u128::from(m);
        let q = (wide >> shift) as u64;
        let rem = wide & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        // Half-to-even; `sticky` (non-zero digits past the kept 64 bits) only matters at an
        // exact half, where it means "above half". It can only be set when shift ≥ 8.
        let round_up = rem > half || (rem == half && (sticky || q & 1 == 1));
        q + u64::from(round_up)
    };
    if q == 1u64 << (MANT_BITS + 1) {
        q >>= 1;
        lsb_exp += 1;
    }
    let bits = if q < (1u64 << MANT_BITS) {
        // Subnormal (or zero after rounding): lsb_exp is the minimum.
        q
    } else {
        let exp_field = lsb_exp + MANT_BITS as i64 + EXP_BIAS;
        if exp_field >= 0x7ff {
            return Err(HexFloatError::Overflow { text: text.to_string() });
        }
        ((exp_field as u64) << MANT_BITS) | (q & ((1u64 << MANT_BITS) - 1))
    };
    Ok(signed(f64::from_bits(bits)))
}

/// Decimal exponent with optional sign, saturated far outside the `f64` range (any larger
/// magnitude gives the same result: zero or overflow).
fn parse_exponent(e: &str) -> Option<i64> {
    let (neg, digits) = match e.as_bytes().first() {
        Some(b'-') => (true, &e[1..]),
        Some(b'+') => (false, &e[1..]),
        _ => (false, e),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut v: i64 = 0;
    for c in digits.bytes() {
        v = (v * 10 + i64::from(c - b'0')).min(1 << 40);
    }
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the formatter prints what CPython prints (strings checked with `python3 -c
    /// 'print(float.hex(x))'`), and parsing gives back the same bits.
    #[test]
    fn formats_like_python_and_round_trips() {
        let cases: &[(f64, &str)] = &[
            (24.873756408691406, "0x1.8dfae80000000p+4"),
            (-4.045587062835693, "-0x1.02eae60000000p+2"),
            (0.0, "0x0.0p+0"),
            (-0.0, "-0x0.0p+0"),
            (1.0, "0x1.0000000000000p+0"),
            (0.5, "0x1.0000000000000p-1"),
            (0.1, "0x1.999999999999ap-4"),
            (f64::from_bits(1), "0x0.0000000000001p-1022"),
            (f64::from_bits(0x000f_ffff_ffff_ffff), "0x0.fffffffffffffp-1022"),
            (f64::MIN_POSITIVE, "0x1.0000000000000p-1022"),
            (f64::MAX, "0x1.fffffffffffffp+1023"),
            (-f64::MAX, "-0x1.fffffffffffffp+1023"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for &(x, s) in cases {
            assert_eq!(to_hex(x), s, "to_hex({x:e})");
            let back = from_hex(s).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "from_hex({s})");
        }
    }

    /// Guards: NaN prints as Python's repr (`nan`, sign dropped) and parses back to a NaN.
    #[test]
    fn nan_prints_and_parses() {
        assert_eq!(to_hex(f64::NAN), "nan");
        assert_eq!(to_hex(-f64::NAN), "nan");
        assert!(from_hex("nan").unwrap().is_nan());
        assert!(from_hex("-NaN").unwrap().is_nan());
    }

    /// Guards: every f32 widened to f64 (what goldens hold for f32 logits) survives the round trip.
    #[test]
    fn f32_values_round_trip_bit_exactly() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from(f32::from_bits(state as u32));
            if x.is_nan() {
                continue;
            }
            let y = f64::from_bits(state);
            for v in [x, y] {
                if v.is_nan() {
                    continue;
                }
                assert_eq!(from_hex(&to_hex(v)).unwrap().to_bits(), v.to_bits(), "{}", to_hex(v));
            }
        }
    }

    /// Guards: the non-canonical spellings `float.fromhex` accepts parse to the right value.
    #[test]
    fn accepts_python_fromhex_spellings() {
        assert_eq!(from_hex("0x1p3").unwrap(), 8.0);
        assert_eq!(from_hex("1p3").unwrap(), 8.0);
        assert_eq!(from_hex("0X1.8P+1").unwrap(), 3.0);
        assert_eq!(from_hex("  -0x.8  ").unwrap(), -0.5);
        assert_eq!(from_hex("0x10").unwrap(), 16.0);
        assert_eq!(from_hex("1.5e3").unwrap(), 1.367919921875); // `e` is a hex digit
        assert_eq!(from_hex("0x1.").unwrap(), 1.0);
        assert_eq!(from_hex("+Infinity").unwrap(), f64::INFINITY);
        assert_eq!(from_hex("-inf").unwrap(), f64::NEG_INFINITY);
        assert_eq!(from_hex("0x0p+99999999999999").unwrap(), 0.0);
        assert_eq!(from_hex("0x1p-99999999999999").unwrap(), 0.0);
        assert_eq!(from_hex("0x0.00000000000000000000001p+92").unwrap(), 1.0);
        assert_eq!(from_hex("0x1000000000000000000000p-84").unwrap(), 1.0);
    }

    /// Guards: digits beyond 53 bits round half-to-even like CPython, subnormals included.
    #[test]
    fn rounds_half_to_even() {
        // 1 + 2^-53 is exactly half an ulp above 1.0: ties to even (1.0).
        assert_eq!(from_hex("0x1.00000000000008p+0").unwrap(), 1.0);
        // 1 + 3·2^-53 is half an ulp above 1 + 2^-52 (odd): ties to even (1 + 2^-51).
        assert_eq!(from_hex("0x1.00000000000018p+0").unwrap(), 1.0 + 2f64.powi(-51));
        // Just above half: rounds up; the deciding digit sits past the 16 kept digits.
        assert_eq!(from_hex("0x1.000000000000080000001p+0").unwrap(), 1.0 + 2f64.powi(-52));
        // Half of the smallest subnormal ties to zero (even); anything above rounds up.
        assert_eq!(from_hex("0x1p-1075").unwrap().to_bits(), 0);
        assert_eq!(from_hex("0x1.0000001p-1075").unwrap().to_bits(), 1);
        assert_eq!(from_hex("0x3p-1076").unwrap().to_bits(), 1); // 0.75 of the smallest → 1
                                                                 // Rounding a subnormal up into the smallest normal.
        assert_eq!(from_hex("0x0.fffffffffffff8p-1022").unwrap(), f64::MIN_POSITIVE);
        // Carry out of the mantissa bumps the exponent.
        assert_eq!(from_hex("0x1.fffffffffffff8p+0").unwrap(), 2.0);
    }

    /// Guards: finite values beyond f64::MAX are an error (Python: OverflowError), not `inf`.
    #[test]
    fn overflow_is_an_error() {
        assert!(matches!(from_hex("0x1p+1024"), Err(HexFloatError::Overflow { .. })));
        assert!(matches!(from_hex("0x1.fffffffffffff8p+1023"), Err(HexFloatError::Overflow { .. })));
        assert_eq!(from_hex("0x1.fffffffffffff7p+1023").unwrap(), f64::MAX);
    }

    /// Guards: malformed text is rejected, not read as zero.
    #[test]
    fn rejects_malformed_text() {
        for bad in ["", "0x", "0x.p1", "0x1p", "0x1g", "0x1p+", "--0x1", "0x1 2", "- 0x1", "infinit"] {
            assert!(from_hex(bad).is_err(), "{bad:?} should not parse");
        }
    }

    // ----- killers of mutants that survived `cargo mutants` (docs/mutation-testing.md) -----

    /// Guards: only *non-zero* digits past the 16 kept ones make an exact half round up; zeros
    /// there leave the tie to even.
    #[test]
    fn dropped_zero_digits_are_not_sticky() {
        // 1 + 2^-53 (exact half an ulp above 1.0) with zeros beyond the kept digits: ties to 1.0.
        assert_eq!(from_hex("0x1.00000000000008000p+0").unwrap(), 1.0);
        assert_eq!(from_hex("0x1.000000000000080000000000p+0").unwrap(), 1.0);
    }

    /// Guards: a shift of exactly 64 bits below the smallest subnormal still rounds (0.75 of
    /// 2^-1074 → 2^-1074); only shifts beyond 64 flush to zero without rounding.
    #[test]
    fn shift_of_64_bits_still_rounds() {
        // 0xc000000000000000 · 2^-1138 = 0.75 · 2^-1074 (Python: float.fromhex gives 5e-324).
        assert_eq!(from_hex("0xc000000000000000p-1138").unwrap().to_bits(), 1);
        assert_eq!(from_hex("0x4000000000000000p-1138").unwrap().to_bits(), 0);
    }
}
