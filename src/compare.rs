//! The comparison rules of the tiers (DESIGN §2), pure: slices and shapes in, verdicts and
//! metrics out. Nothing here knows candle, ort or file formats, so every rule can be unit-tested
//! with a handful of hand-written numbers.
//!
//! - L3: [`allclose`], `|actual − expected| ≤ atol + rtol·|expected|` in f64, reference on the right.
//! - L4: [`l4_verdict`], mobius's argmax rules (PASS / AMBIGUOUS / FAIL).
//! - L5: [`token_match`], greedy-token agreement with the golden sequence.
//! - Metrics shared by reports: [`max_abs_diff`], [`mean_abs_diff`], [`cosine_similarity`],
//!   [`top_k`], [`jaccard`], [`argmax`].
//!
//! Ordering convention everywhere: value descending, then index ascending (DESIGN §4), NaN below
//! every number. `-0.0` and `0.0` are equal (they tie and the lower index wins, like numpy's
//! `argmax`).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use thiserror::Error;

/// Inputs the rules cannot judge. These are harness bugs or malformed data, never verdicts.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CompareError {
    #[error("shape {shape:?} holds {numel} values but the {side} slice has {len}")]
    ShapeMismatch { shape: Vec<usize>, numel: usize, side: &'static str, len: usize },
    #[error("the two slices differ in length: actual {actual}, expected {expected}")]
    LengthMismatch { actual: usize, expected: usize },
    #[error("nothing to compare: {what} is empty")]
    Empty { what: &'static str },
    #[error("invalid threshold {name} = {value}: {why}")]
    BadThreshold { name: &'static str, value: f64, why: &'static str },
}

fn check_threshold(name: &'static str, value: f64, max: Option<f64>) -> Result<(), CompareError> {
    if !value.is_finite() || value < 0.0 {
        return Err(CompareError::BadThreshold { name, value, why: "must be finite and ≥ 0" });
    }
    if let Some(m) = max {
        if value > m {
            return Err(CompareError::BadThreshold { name, value, why: "must be ≤ 1" });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/// Ranking order: `a` before `b` when its value is larger, NaN last, ties by lower index.
fn rank_cmp(values: &[f32], a: usize, b: usize) -> Ordering {
    let (va, vb) = (values[a], values[b]);
    let by_value = match (va.is_nan(), vb.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        // Neither is NaN, so partial_cmp is total here; -0.0 == 0.0 ties.
        (false, false) => vb.partial_cmp(&va).unwrap_or(Ordering::Equal),
    };
    by_value.then(a.cmp(&b))
}

/// Indices of the `k` largest values, value descending then index ascending; NaN ranks last.
/// Returns fewer than `k` when the slice is shorter. O(n) selection, then a sort of `k` items.
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    let mut idx: Vec<usize> = (0..values.len()).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| rank_cmp(values, a, b));
        idx.truncate(k);
    }
    idx.sort_unstable_by(|&a, &b| rank_cmp(values, a, b));
    idx
}

/// Index of the largest value, the first one on ties (numpy's `argmax` on finite data); NaN is
/// never chosen over a number. `None` for an empty slice. Same order as [`top_k`]'s first entry,
/// in one pass without allocating (it runs once per decode step over the whole vocabulary).
pub fn argmax(values: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in values.iter().enumerate() {
        match best {
            Some(b) if !(x > values[b] || (values[b].is_nan() && !x.is_nan())) => {}
            _ => best = Some(i),
        }
    }
    best
}

/// `|A ∩ B| / |A ∪ B|` of two id sets (duplicates ignored); 0 when both are empty.
pub fn jaccard(a: &[i64], b: &[i64]) -> f64 {
    let a: BTreeSet<i64> = a.iter().copied().collect();
    let b: BTreeSet<i64> = b.iter().copied().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// Largest `|a − e|` in f64 over positions where both are finite (non-finite positions are
/// counted separately by [`allclose`]). 0 for empty input.
pub fn max_abs_diff(actual: &[f32], expected: &[f32]) -> Result<f64, CompareError> {
    same_len(actual, expected)?;
    Ok(finite_pairs(actual, expected).map(|(a, e)| (a - e).abs()).fold(0.0, f64::max))
}

/// Mean `|a − e|` in f64 over positions where both are finite; 0 when there are none.
pub fn mean_abs_diff(actual: &[f32], expected: &[f32]) -> Result<f64, CompareError> {
    same_len(actual, expected)?;
    let (sum, n) = finite_pairs(actual, expected).fold((0.0, 0usize), |(s, n), (a, e)| (s + (a - e).abs(), n + 1));
    Ok(if n == 0 { 0.0 } else { sum / n as f64 })
}

/// Cosine similarity in f64 over positions where both are finite. Two all-zero vectors are
/// identical (1.0); one zero vector against a non-zero one gives 0.0 (mobius gives 0.0 for both).
pub fn cosine_similarity(a: &[f32], b: &[f32]) -> Result<f64, CompareError> {
    same_len(a, b)?;
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in finite_pairs(a, b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    Ok(match (na == 0.0, nb == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        (false, false) => dot / (na.sqrt() * nb.sqrt()),
    })
}

fn same_len(a: &[f32], b: &[f32]) -> Result<(), CompareError> {
    if a.len() != b.len() {
        return Err(CompareError::LengthMismatch { actual: a.len(), expected: b.len() });
    }
    Ok(())
}

fn finite_pairs<'a>(a: &'a [f32], b: &'a [f32]) -> impl Iterator<Item = (f64, f64)> + 'a {
    a.iter().zip(b).filter(|(x, y)| x.is_finite() && y.is_finite()).map(|(&x, &y)| (f64::from(x), f64::from(y)))
}

/// Row-major flat index → multi-index for `shape`.
pub fn unravel_index(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut out = vec![0; shape.len()];
    for (slot, &dim) in out.iter_mut().zip(shape).rev() {
        if dim > 0 {
            *slot = flat % dim;
            flat /= dim;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// L3
// ---------------------------------------------------------------------------------------------

/// Result of [`allclose`]. Differences are over positions where both values are finite.
#[derive(Debug, Clone, PartialEq)]
pub struct AllcloseReport {
    /// Every position within tolerance and no NaN/Inf on either side.
    pub pass: bool,
    pub numel: usize,
    pub max_abs_diff: f64,
    pub mean_abs_diff: f64,
    /// Largest `|a − e| / |e|` over finite positions with `e ≠ 0`; 0 when there are none.
    pub max_rel_diff: f64,
    pub cosine: f64,
    /// Positions failing `|a − e| ≤ atol + rtol·|e|`, non-finite positions included.
    pub n_violations: usize,
    /// Positions where either side is NaN or ±Inf (each one is also a violation).
    pub nonfinite_mismatch: usize,
    /// The worst position: the first non-finite one if any, else the largest excess over the
    /// allowed bound (the largest `|a − e|` when everything passes). Multi-index into `shape`.
    pub worst_index: Vec<usize>,
    pub worst_actual: f32,
    pub worst_expected: f32,
    pub atol: f64,
    pub rtol: f64,
}

/// L3 gate: `|actual − expected| ≤ atol + rtol·|expected|` for every element, computed in f64.
///
/// The rule is asymmetric on purpose (numpy's `allclose(actual, expected)`): `expected` is the
/// reference, so the relative allowance scales with the reference value, not the export's. Unlike
/// numpy, any NaN or ±Inf on either side fails, even the same infinity on both: Gemma's logits are
/// soft-capped, so a non-finite value is a bug in whichever side produced it, never agreement.
/// Shape/length mismatches and empty input are errors (nothing was compared), not failures.
pub fn allclose(actual: &[f32], expected: &[f32], shape: &[usize], atol: f64, rtol: f64) -> Result<AllcloseReport, CompareError> {
    check_threshold("atol", atol, None)?;
    check_threshold("rtol", rtol, None)?;
    let numel: usize = shape.iter().product();
    for (side, len) in [("actual", actual.len()), ("expected", expected.len())] {
        if len != numel {
            return Err(CompareError::ShapeMismatch { shape: shape.to_vec(), numel, side, len });
        }
    }
    if numel == 0 {
        return Err(CompareError::Empty { what: "the tensor" });
    }
    let mut n_violations = 0usize;
    let mut nonfinite = 0usize;
    let mut first_nonfinite: Option<usize> = None;
    let (mut max_abs, mut sum_abs, mut n_finite, mut max_rel) = (0.0f64, 0.0f64, 0usize, 0.0f64);
    let mut worst = (0usize, f64::NEG_INFINITY); // (index, excess over the bound)
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        if !a.is_finite() || !e.is_finite() {
            nonfinite += 1;
            n_violations += 1;
            first_nonfinite.get_or_insert(i);
            continue;
        }
        let (a, e) = (f64::from(a), f64::from(e));
        let diff = (a - e).abs();
        let bound = atol + rtol * e.abs();
        if diff > bound {
            n_violations += 1;
        }
        max_abs = max_abs.max(diff);
        sum_abs += diff;
        n_finite += 1;
        if e != 0.0 {
            max_rel = max_rel.max(diff / e.abs());
        }
        let excess = diff - bound;
        if excess > worst.1 {
            worst = (i, excess);
        }
    }
    let worst_flat = first_nonfinite.unwrap_or(worst.0);
    Ok(AllcloseReport {
        pass: n_violations == 0,
        numel,
        max_abs_diff: max_abs,
        mean_abs_diff: if n_finite == 0 { 0.0 } else { sum_abs / n_finite as f64 },
        max_rel_diff: max_rel,
        cosine: cosine_similarity(actual, expected)?,
        n_violations,
        nonfinite_mismatch: nonfinite,
        worst_index: unravel_index(worst_flat, shape),
        worst_actual: actual[worst_flat],
        worst_expected: expected[worst_flat],
        atol,
        rtol,
    })
}

// ---------------------------------------------------------------------------------------------
// L4
// ---------------------------------------------------------------------------------------------

/// The golden side of L4: token ids only, so this module does not depend on the golden format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoldenTopIds<'a> {
    pub top1: i64,
    pub top2: i64,
    pub top10: &'a [i64],
}

/// L4 outcome (mobius's `ParityResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Status {
    Pass,
    Ambiguous,
    Fail,
}

/// How many of the golden top-10 must be in the export's top-10 for the tie-break branch.
/// A count, not a Jaccard ratio (9 shared of 10 is Jaccard 0.818), as in mobius.
pub const AMBIGUOUS_TOP10_OVERLAP: usize = 9;

/// Result of [`l4_verdict`].
#[derive(Debug, Clone, PartialEq)]
pub struct L4Verdict {
    pub status: L4Status,
    /// The export's argmax (first index on ties).
    pub top1: i64,
    /// The export's second-ranked token (`None` for a one-entry vocabulary).
    pub top2: Option<i64>,
    pub golden_top1: i64,
    /// `top1 − top2` of the export's logits (f64; +∞ when there is no second logit).
    pub gap: f64,
    pub near_tie_margin: f64,
    /// `gap < near_tie_margin`.
    pub near_tie: bool,
    /// Tokens shared by the export's and the golden top-10.
    pub top10_overlap: usize,
    pub jaccard: f64,
    /// The export's top-10 ids, value descending then index ascending.
    pub top10: Vec<i64>,
    /// One line saying which rule decided.
    pub reason: String,
    /// Diagnostics that do not change the status (low Jaccard).
    pub warnings: Vec<String>,
}

/// L4 gate with mobius's rules (`compare_golden`), on the export's last-position logits:
///
/// 1. PASS if the export's top-1 is the golden top-1;
/// 2. AMBIGUOUS if near-tie (`top1 − top2 < margin` on the export's logits) and the export's
///    top-1 is the golden top-2;
/// 3. AMBIGUOUS if ≥ 9 of the golden top-10 are in the export's top-10, the export's top-1 is in
///    the golden top-10, and the golden top-1 is in the export's top-2;
/// 4. FAIL otherwise.
///
/// Any NaN/Inf logit is a FAIL before the rules run (softcapped logits are finite; a non-finite
/// one is a broken export, whatever its argmax). Jaccard below `jaccard_warn` adds a warning.
pub fn l4_verdict(
    onnx_logits: &[f32],
    golden: &GoldenTopIds<'_>,
    near_tie_margin: f64,
    jaccard_warn: f64,
) -> Result<L4Verdict, CompareError> {
    check_threshold("near_tie_margin", near_tie_margin, None)?;
    check_threshold("top10_jaccard_warn", jaccard_warn, Some(1.0))?;
    if onnx_logits.is_empty() {
        return Err(CompareError::Empty { what: "the logits" });
    }
    let ranked = top_k(onnx_logits, 10);
    let id = |i: usize| i as i64;
    let top10: Vec<i64> = ranked.iter().map(|&i| id(i)).collect();
    let top1 = top10[0];
    let top2 = top10.get(1).copied();
    let gap = match ranked.get(1) {
        Some(&j) => f64::from(onnx_logits[ranked[0]]) - f64::from(onnx_logits[j]),
        None => f64::INFINITY,
    };
    let near_tie = gap < near_tie_margin;
    let golden_set: BTreeSet<i64> = golden.top10.iter().copied().collect();
    let top10_overlap = top10.iter().filter(|t| golden_set.contains(t)).count();
    let jaccard = jaccard(&top10, golden.top10);
    let mut warnings = Vec::new();
    if jaccard < jaccard_warn {
        warnings.push(format!("top-10 Jaccard {jaccard:.3} < warn threshold {jaccard_warn}"));
    }

    let nonfinite = onnx_logits.iter().filter(|v| !v.is_finite()).count();
    let (status, reason) = if nonfinite > 0 {
        (L4Status::Fail, format!("{nonfinite} non-finite logits (NaN/Inf)"))
    } else if top1 == golden.top1 {
        (L4Status::Pass, format!("argmax {top1} = golden top-1"))
    } else if near_tie && top1 == golden.top2 {
        (
            L4Status::Ambiguous,
            format!("argmax {top1} ≠ golden top-1 {} but = golden top-2, near tie (gap {gap:.4} < {near_tie_margin})", golden.top1),
        )
    } else if top10_overlap >= AMBIGUOUS_TOP10_OVERLAP && golden_set.contains(&top1) && top10.iter().take(2).any(|&t| t == golden.top1) {
        (
            L4Status::Ambiguous,
            format!("argmax {top1} ≠ golden top-1 {} but {top10_overlap}/10 of the top-10 agree and golden top-1 is the export's #2: a tie-break swap", golden.top1),
        )
    } else {
        (L4Status::Fail, format!("argmax {top1} ≠ golden top-1 {} (gap {gap:.4}, top-10 overlap {top10_overlap})", golden.top1))
    };
    Ok(L4Verdict {
        status,
        top1,
        top2,
        golden_top1: golden.top1,
        gap,
        near_tie_margin,
        near_tie,
        top10_overlap,
        jaccard,
        top10,
        reason,
        warnings,
    })
}

// ---------------------------------------------------------------------------------------------
// L5
// ---------------------------------------------------------------------------------------------

/// Result of [`token_match`].
#[derive(Debug, Clone, PartialEq)]
pub struct L5Verdict {
    /// Gate value: length of the leading run of equal tokens ÷ golden length.
    pub ratio: f64,
    /// Leading positions equal before the first mismatch.
    pub matched_prefix: usize,
    /// First position that differs within the common length (`None` if the common part agrees).
    pub first_mismatch: Option<usize>,
    /// mobius's `_token_match_ratio` for comparison: equal positions anywhere in the common
    /// length ÷ golden length (≥ `ratio`). Reported, not gated on.
    pub positional_ratio: f64,
    pub actual_len: usize,
    pub golden_len: usize,
    pub min_ratio: f64,
    pub pass: bool,
    /// Length mismatch and other diagnostics that do not decide the verdict by themselves.
    pub warnings: Vec<String>,
}

/// L5 gate: `ratio = (leading positions where actual == golden) ÷ golden length ≥ min_ratio`.
///
/// Choice (DESIGN §2 "equal tokens in the common prefix ÷ golden length"): only the leading run
/// counts. After the first mismatch the two greedy decodes condition on different text, so later
/// coincidences are not agreement. mobius counts equal positions over the whole common length;
/// that number is reported as `positional_ratio`. A shorter output (e.g. an early EOS) lowers the
/// ratio because the denominator is the golden length. An empty golden proves nothing: error.
pub fn token_match(actual: &[i64], golden: &[i64], min_ratio: f64) -> Result<L5Verdict, CompareError> {
    check_threshold("min_token_match_ratio", min_ratio, Some(1.0))?;
    if golden.is_empty() {
        return Err(CompareError::Empty { what: "the golden token sequence" });
    }
    let common = actual.len().min(golden.len());
    let first_mismatch = (0..common).find(|&i| actual[i] != golden[i]);
    let matched_prefix = first_mismatch.unwrap_or(common);
    let positional = (0..common).filter(|&i| actual[i] == golden[i]).count();
    let ratio = matched_prefix as f64 / golden.len() as f64;
    let mut warnings = Vec::new();
    if actual.len() != golden.len() {
        warnings.push(format!("length mismatch: generated {} tokens, golden has {}", actual.len(), golden.len()));
    }
    Ok(L5Verdict {
        ratio,
        matched_prefix,
        first_mismatch,
        positional_ratio: positional as f64 / golden.len() as f64,
        actual_len: actual.len(),
        golden_len: golden.len(),
        min_ratio,
        pass: ratio >= min_ratio,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the one-pass argmax agrees with top_k's first entry (first maximum, -0.0 ties
    /// 0.0, NaN never chosen over a number, all-NaN gives index 0, empty gives None).
    #[test]
    fn argmax_agrees_with_top_k() {
        let cases: [&[f32]; 7] = [
            &[1.0, 3.0, 3.0, -1.0],
            &[f32::NAN, 2.0, 5.0, f32::NAN],
            &[-0.0, 0.0],
            &[0.0, -0.0],
            &[f32::NAN, f32::NAN],
            &[f32::NEG_INFINITY, f32::INFINITY, f32::INFINITY],
            &[],
        ];
        for v in cases {
            assert_eq!(argmax(v), top_k(v, 1).first().copied(), "{v:?}");
        }
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), Some(1));
    }

    // ----- L3 -----

    /// Guards: values exactly on the bound pass, values just beyond it fail (≤, not <).
    #[test]
    fn allclose_bound_is_inclusive() {
        let r = allclose(&[1.5], &[1.0], &[1], 0.5, 0.0).unwrap();
        assert!(r.pass, "|1.5 − 1.0| = 0.5 ≤ 0.5 must pass");
        let r = allclose(&[1.5001], &[1.0], &[1], 0.5, 0.0).unwrap();
        assert!(!r.pass);
        assert_eq!(r.n_violations, 1);
    }

    /// Guards: rtol scales with the reference (right-hand) value only, so swapping sides changes
    /// the verdict: |10 − 5| = 5 ≤ 0.5·10 passes with e = 10, fails with e = 5 (bound 2.5).
    #[test]
    fn allclose_rtol_is_asymmetric() {
        assert!(allclose(&[5.0], &[10.0], &[1], 0.0, 0.5).unwrap().pass);
        assert!(!allclose(&[10.0], &[5.0], &[1], 0.0, 0.5).unwrap().pass);
    }

    /// Guards: atol and rtol add up (bound = atol + rtol·|e|), neither alone suffices here.
    #[test]
    fn allclose_atol_plus_rtol() {
        // |e| = 100, diff = 1.5: atol 1 alone fails, rtol 0.01 alone (1.0) fails, sum (2.0) passes.
        assert!(!allclose(&[101.5], &[100.0], &[1], 1.0, 0.0).unwrap().pass);
        assert!(!allclose(&[101.5], &[100.0], &[1], 0.0, 0.01).unwrap().pass);
        assert!(allclose(&[101.5], &[100.0], &[1], 1.0, 0.01).unwrap().pass);
    }

    /// Guards: the difference is taken in f64 so f32 cancellation cannot hide a difference, and
    /// metrics / worst index are reported in the tensor's shape.
    #[test]
    fn allclose_metrics_and_worst_index() {
        let e = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
        let a = [0.0f32, 1.0, 2.5, 3.0, 4.0, 5.1];
        let r = allclose(&a, &e, &[2, 3], 0.1, 0.0).unwrap();
        assert!(!r.pass);
        assert_eq!(r.n_violations, 1, "only 2.5 vs 2.0 is beyond atol 0.1");
        assert_eq!(r.worst_index, vec![0, 2]);
        assert_eq!((r.worst_actual, r.worst_expected), (2.5, 2.0));
        assert!((r.max_abs_diff - 0.5).abs() < 1e-12);
        let mean = (0.5 + (5.1f32 as f64 - 5.0)) / 6.0;
        assert!((r.mean_abs_diff - mean).abs() < 1e-12);
        assert!((r.max_rel_diff - 0.25).abs() < 1e-12);
        assert!(r.cosine > 0.99 && r.cosine < 1.0);
        // f32 1e8 + 8 vs 1e8: f64 sees the 8.
        let r = allclose(&[100_000_008.0], &[100_000_000.0], &[1], 1.0, 0.0).unwrap();
        assert!(!r.pass);
        assert_eq!(r.max_abs_diff, 8.0);
    }

    /// Guards: NaN never passes, on either side, even against NaN.
    #[test]
    fn allclose_nan_fails() {
        for (a, e) in [(f32::NAN, 1.0), (1.0, f32::NAN), (f32::NAN, f32::NAN)] {
            let r = allclose(&[0.0, a], &[0.0, e], &[2], 1e9, 1e9).unwrap();
            assert!(!r.pass, "{a} vs {e}");
            assert_eq!(r.nonfinite_mismatch, 1);
            assert_eq!(r.worst_index, vec![1]);
        }
    }

    /// Guards: ±Inf fails, even the same infinity on both sides (numpy would call that close).
    #[test]
    fn allclose_inf_fails() {
        for (a, e) in [(f32::INFINITY, f32::INFINITY), (f32::NEG_INFINITY, 0.0), (0.0, f32::INFINITY)] {
            let r = allclose(&[a], &[e], &[1], 1e9, 1e9).unwrap();
            assert!(!r.pass, "{a} vs {e}");
            assert_eq!(r.nonfinite_mismatch, 1);
        }
    }

    /// Guards: a shape that does not match the data, unequal lengths and empty tensors are
    /// errors, never a (vacuous) pass.
    #[test]
    fn allclose_rejects_bad_shapes() {
        assert!(matches!(allclose(&[1.0, 2.0], &[1.0, 2.0], &[3], 0.0, 0.0), Err(CompareError::ShapeMismatch { .. })));
        assert!(matches!(allclose(&[1.0, 2.0], &[1.0], &[2], 0.0, 0.0), Err(CompareError::ShapeMismatch { side: "expected", .. })));
        assert!(matches!(allclose(&[], &[], &[0, 4], 0.0, 0.0), Err(CompareError::Empty { .. })));
        assert!(matches!(allclose(&[1.0], &[1.0], &[1], -1.0, 0.0), Err(CompareError::BadThreshold { .. })));
        assert!(matches!(allclose(&[1.0], &[1.0], &[1], 0.0, f64::NAN), Err(CompareError::BadThreshold { .. })));
    }

    // ----- metrics -----

    /// Guards: top-k orders by value descending and breaks ties by the lower index; NaN ranks
    /// below every number; -0.0 ties with 0.0.
    #[test]
    fn top_k_tie_order() {
        let v = [1.0f32, 3.0, 3.0, f32::NAN, 2.0, 3.0, -0.0, 0.0];
        assert_eq!(top_k(&v, 4), vec![1, 2, 5, 4]);
        assert_eq!(top_k(&v, 8), vec![1, 2, 5, 4, 0, 6, 7, 3]);
        assert_eq!(top_k(&v, 100).len(), 8);
        assert_eq!(argmax(&v), Some(1));
        assert_eq!(argmax(&[0.0, -0.0]), Some(0));
        assert_eq!(argmax(&[-0.0, 0.0]), Some(0));
        assert_eq!(argmax(&[]), None);
        assert_eq!(argmax(&[f32::NAN, -1.0]), Some(1));
    }

    /// Guards: selection (partial sort) gives the same answer as a full sort on a large vector.
    #[test]
    fn top_k_matches_full_sort() {
        let v: Vec<f32> = (0..5000u32).map(|i| ((i.wrapping_mul(2_654_435_761) >> 20) % 97) as f32).collect();
        let mut all: Vec<usize> = (0..v.len()).collect();
        all.sort_by(|&a, &b| v[b].partial_cmp(&v[a]).unwrap().then(a.cmp(&b)));
        assert_eq!(top_k(&v, 10), all[..10].to_vec());
    }

    /// Guards: Jaccard is |∩|/|∪| of sets: 9 of 10 shared is 9/11, not 0.9.
    #[test]
    fn jaccard_of_sets() {
        let a: Vec<i64> = (0..10).collect();
        let mut b: Vec<i64> = (0..9).collect();
        b.push(99);
        assert!((jaccard(&a, &b) - 9.0 / 11.0).abs() < 1e-12);
        assert_eq!(jaccard(&a, &a), 1.0);
        assert_eq!(jaccard(&[], &[]), 0.0);
        assert_eq!(jaccard(&[1, 1, 2], &[2, 1]), 1.0);
    }

    /// Guards: cosine is 1 for parallel, -1 for opposite, and defined for zero vectors.
    #[test]
    fn cosine_cases() {
        assert!((cosine_similarity(&[1.0, 2.0], &[2.0, 4.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((cosine_similarity(&[1.0, 2.0], &[-1.0, -2.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(cosine_similarity(&[0.0, 0.0], &[0.0, 0.0]).unwrap(), 1.0);
        assert_eq!(cosine_similarity(&[0.0, 0.0], &[1.0, 0.0]).unwrap(), 0.0);
        assert!(cosine_similarity(&[1.0], &[1.0, 2.0]).is_err());
        assert!((max_abs_diff(&[1.0, 5.0], &[1.5, 4.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((mean_abs_diff(&[1.0, 5.0], &[1.5, 4.0]).unwrap() - 0.75).abs() < 1e-12);
    }

    /// Guards: multi-indices are row-major.
    #[test]
    fn unravel_is_row_major() {
        assert_eq!(unravel_index(5, &[2, 3]), vec![1, 2]);
        assert_eq!(unravel_index(7, &[2, 2, 2]), vec![1, 1, 1]);
        assert_eq!(unravel_index(0, &[]), Vec::<usize>::new());
    }

    // ----- L4 -----

    /// Logits over 12 tokens whose ranking is 0 > 1 > ... > 11 with the given top-2 gap.
    fn ranked_logits(gap: f32) -> Vec<f32> {
        let mut v: Vec<f32> = (0..12).map(|i| 10.0 - i as f32).collect();
        v[1] = v[0] - gap;
        v
    }

    const G10: [i64; 10] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

    /// Guards: rule 1, export top-1 = golden top-1 passes.
    #[test]
    fn l4_pass() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &G10 };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.7).unwrap();
        assert_eq!(v.status, L4Status::Pass);
        assert_eq!(v.top1, 0);
        assert_eq!(v.top2, Some(1));
        assert_eq!(v.top10_overlap, 10);
        assert!(v.warnings.is_empty());
    }

    /// Guards: rule 2, a near tie (gap < margin on the export's logits) where the export picked
    /// the golden top-2 is AMBIGUOUS.
    #[test]
    fn l4_ambiguous_near_tie_golden_top2() {
        // Top-10 overlap is 2, so the top-10 branch cannot be what rescues it.
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 50, 51, 52, 53, 54, 55, 56, 57] };
        let v = l4_verdict(&ranked_logits(0.005), &g, 0.01, 0.0).unwrap();
        assert_eq!(v.status, L4Status::Ambiguous, "{}", v.reason);
        assert!(v.near_tie);
        assert!((v.gap - 0.005).abs() < 1e-6);
        // Same tokens without the near tie: FAIL.
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, L4Status::Fail);
    }

    /// Guards: the near-tie test is strict (gap = margin is not a near tie) and needs the
    /// export's top-1 to be the golden top-2: a near tie onto another token is FAIL.
    #[test]
    fn l4_near_tie_but_wrong_token_fails() {
        // Golden top-1 is 5 (export rank 6), golden top-2 is 7: export top-1 (0) is neither;
        // all 10 shared, but golden top-1 is not in the export's top-2.
        let g = GoldenTopIds { top1: 5, top2: 7, top10: &[5, 7, 1, 2, 3, 4, 6, 8, 9, 0] };
        let v = l4_verdict(&ranked_logits(0.001), &g, 0.01, 0.7).unwrap();
        assert!(v.near_tie);
        assert_eq!(v.status, L4Status::Fail, "{}", v.reason);
        // Gap exactly at the margin: not a near tie, and rule 3 does not apply (golden top-10
        // misses 0 and 1 → overlap 8) → FAIL.
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 98, 99] };
        let v = l4_verdict(&[10.0, 9.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], &g, 0.5, 0.0).unwrap();
        assert!(!v.near_tie, "gap 0.5 = margin 0.5 is not < margin");
        assert_eq!(v.status, L4Status::Fail, "{}", v.reason);
    }

    /// Guards: rule 3, no near tie, but ≥9 of the top-10 shared, export top-1 in the golden
    /// top-10, and golden top-1 the export's #2: AMBIGUOUS.
    #[test]
    fn l4_ambiguous_top10_swap() {
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 8, 99] };
        let v = l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.7).unwrap();
        assert!(!v.near_tie);
        assert_eq!(v.top10_overlap, 9);
        assert_eq!(v.status, L4Status::Ambiguous, "{}", v.reason);
    }

    /// Guards: rule 3 needs each of its three conditions; removing any one gives FAIL.
    #[test]
    fn l4_top10_branch_needs_all_conditions() {
        // Only 8 shared.
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 98, 99] };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, L4Status::Fail);
        // 9 shared but the export's top-1 (0) is not in the golden top-10.
        let g = GoldenTopIds { top1: 1, top2: 2, top10: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10] };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, L4Status::Fail);
        // 10 shared but golden top-1 (2) is the export's #3.
        let g = GoldenTopIds { top1: 2, top2: 0, top10: &G10 };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, L4Status::Fail);
    }

    /// Guards: a plain argmax mismatch with no rescue is FAIL.
    #[test]
    fn l4_fail() {
        let g = GoldenTopIds { top1: 11, top2: 10, top10: &[11, 10, 20, 21, 22, 23, 24, 25, 26, 27] };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.7).unwrap();
        assert_eq!(v.status, L4Status::Fail);
        assert_eq!(v.golden_top1, 11);
    }

    /// Guards: NaN or Inf anywhere in the logits is FAIL even when the argmax matches.
    #[test]
    fn l4_nonfinite_fails() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &G10 };
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut logits = ranked_logits(1.0);
            logits[11] = bad;
            let v = l4_verdict(&logits, &g, 0.01, 0.7).unwrap();
            assert_eq!(v.status, L4Status::Fail, "{bad}");
        }
    }

    /// Guards: Jaccard below the warn threshold warns but does not change a PASS.
    #[test]
    fn l4_jaccard_warning() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &[0, 1, 2, 3, 4, 50, 51, 52, 53, 54] };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.7).unwrap();
        assert_eq!(v.status, L4Status::Pass);
        assert!((v.jaccard - 5.0 / 15.0).abs() < 1e-12);
        assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.3).unwrap();
        assert!(v.warnings.is_empty());
    }

    /// Guards: tiny vocabularies and empty logits are handled (no panic, empty is an error).
    #[test]
    fn l4_edge_sizes() {
        let g = GoldenTopIds { top1: 0, top2: 0, top10: &[0] };
        let v = l4_verdict(&[1.0], &g, 0.01, 0.0).unwrap();
        assert_eq!((v.status, v.top2, v.near_tie), (L4Status::Pass, None, false));
        assert!(l4_verdict(&[], &g, 0.01, 0.0).is_err());
    }

    // ----- L5 -----

    /// Guards: the ratio counts the leading run only and divides by the golden length; the
    /// positional (mobius) count is reported beside it.
    #[test]
    fn l5_ratio_is_leading_run_over_golden_len() {
        let golden = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let actual = [1, 2, 3, 4, 5, 6, 7, 0, 9, 10];
        let v = token_match(&actual, &golden, 0.7).unwrap();
        assert_eq!(v.matched_prefix, 7);
        assert_eq!(v.first_mismatch, Some(7));
        assert!((v.ratio - 0.7).abs() < 1e-12);
        assert!((v.positional_ratio - 0.9).abs() < 1e-12);
        assert!(v.pass, "0.7 ≥ 0.7");
        assert!(!token_match(&actual, &golden, 0.8).unwrap().pass, "later coincidences do not count");
        let v = token_match(&golden, &golden, 1.0).unwrap();
        assert!(v.pass && v.ratio == 1.0 && v.first_mismatch.is_none() && v.warnings.is_empty());
    }

    /// Guards: a length mismatch warns; a shorter output is penalised through the golden-length
    /// denominator; a longer one cannot exceed 1.
    #[test]
    fn l5_length_mismatch() {
        let golden = [1, 2, 3, 4];
        let v = token_match(&[1, 2], &golden, 1.0).unwrap();
        assert!(!v.pass);
        assert_eq!(v.ratio, 0.5);
        assert_eq!(v.first_mismatch, None);
        assert_eq!(v.warnings.len(), 1);
        let v = token_match(&[1, 2, 3, 4, 5], &golden, 1.0).unwrap();
        assert!(v.pass, "all golden tokens reproduced");
        assert_eq!(v.warnings.len(), 1);
    }

    /// Guards: an empty golden is an error (nothing was checked), not a pass; bad ratios too.
    #[test]
    fn l5_empty_golden_is_error() {
        assert!(matches!(token_match(&[1], &[], 0.5), Err(CompareError::Empty { .. })));
        assert!(token_match(&[1], &[1], 1.5).is_err());
        assert!(token_match(&[1], &[1], -0.1).is_err());
    }

    // ----- killers of mutants that survived `cargo mutants` (docs/mutation-testing.md) -----

    /// Guards: the metrics skip a position where *either* side is NaN/Inf (not only where both
    /// are), and max_abs_diff is the real maximum (not a constant).
    #[test]
    fn metrics_skip_any_nonfinite_position() {
        assert_eq!(max_abs_diff(&[1.0, f32::INFINITY, 5.0], &[1.0, 2.0, 3.0]).unwrap(), 2.0);
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.0, f32::NEG_INFINITY]).unwrap(), 0.0);
        assert_eq!(mean_abs_diff(&[1.0, f32::NAN, 3.0], &[2.0, 0.0, 3.0]).unwrap(), 0.5);
        assert_eq!(cosine_similarity(&[1.0, f32::NAN], &[1.0, 5.0]).unwrap(), 1.0);
        assert!(max_abs_diff(&[1.0], &[1.0, 2.0]).is_err());
    }

    /// Guards: a zero-length dimension is skipped by unravel_index (no `% 0`).
    #[test]
    fn unravel_skips_zero_dims() {
        assert_eq!(unravel_index(2, &[0, 3]), vec![0, 2]);
        assert_eq!(unravel_index(4, &[2, 0, 3]), vec![1, 0, 1]);
    }

    /// Guards: the worst position is the largest *excess over the bound* `|a − e| − bound`, not
    /// the largest sum or ratio of the two: with rtol the bound differs per position.
    #[test]
    fn allclose_worst_is_largest_excess() {
        // bounds [1.0, 0.01], diffs [0.5, 0.4]: excess [-0.5, 0.39] (sum would pick 0).
        let r = allclose(&[100.5, 1.4], &[100.0, 1.0], &[2], 0.0, 0.01).unwrap();
        assert_eq!(r.worst_index, vec![1]);
        // bounds [5, 0.05], diffs [10, 0.5]: excess [5, 0.45] (ratio would pick 1).
        let r = allclose(&[110.0, 1.5], &[100.0, 1.0], &[2], 0.0, 0.05).unwrap();
        assert_eq!(r.worst_index, vec![0]);
        assert_eq!((r.worst_actual, r.worst_expected), (110.0, 100.0));
        // Equal excess: the first position is the worst (strict >).
        let r = allclose(&[1.5, 2.5, 0.0], &[1.0, 2.0, 0.0], &[3], 0.0, 0.0).unwrap();
        assert_eq!(r.worst_index, vec![0]);
    }

    /// Guards: the Jaccard warning is strict (`<`): a Jaccard equal to the threshold is fine.
    #[test]
    fn l4_jaccard_at_threshold_does_not_warn() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &G10 };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 1.0).unwrap();
        assert_eq!(v.jaccard, 1.0);
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    }
}
