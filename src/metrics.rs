//! Pure metrics over two implementations' outputs: slices in, numbers out, in f64. Nothing here
//! knows candle, ort or file formats, so every rule built on them can be unit-tested with a
//! handful of hand-written numbers.
//!
//! Ordering convention everywhere: value descending, then index ascending (the golden format's),
//! NaN below every number. `-0.0` and `0.0` are equal (they tie and the lower index wins, like
//! numpy's `argmax`).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use thiserror::Error;

/// Inputs a metric or rule cannot judge. These are harness bugs or malformed data, never verdicts.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MetricError {
    #[error("shape {shape:?} holds {numel} values but the {side} slice has {len}")]
    ShapeMismatch { shape: Vec<usize>, numel: usize, side: &'static str, len: usize },
    #[error("the two slices differ in length: actual {actual}, expected {expected}")]
    LengthMismatch { actual: usize, expected: usize },
    #[error("nothing to compare: {what} is empty")]
    Empty { what: &'static str },
    #[error("invalid threshold {name} = {value}: {why}")]
    BadThreshold { name: &'static str, value: f64, why: &'static str },
    /// The reference side of a calibrated comparison (its f64 run or its run at the candidate's
    /// precision) is NaN or ±Inf at this flat index: nothing can be judged against it.
    #[error("the reference is not finite at flat index {index}")]
    NonFiniteReference { index: usize },
}

/// A threshold a rule is given: finite, ≥ 0, and at most `max` when there is one.
pub fn check_threshold(name: &'static str, value: f64, max: Option<f64>) -> Result<(), MetricError> {
    if !value.is_finite() || value < 0.0 {
        return Err(MetricError::BadThreshold { name, value, why: "must be finite and ≥ 0" });
    }
    if let Some(m) = max {
        if value > m {
            return Err(MetricError::BadThreshold { name, value, why: "must be ≤ 1" });
        }
    }
    Ok(())
}

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

/// The greedy choice: [`argmax`] (first maximum, NaN never wins) as a token id; `None` when no
/// logit is a number.
pub fn greedy_token(logits: &[f32]) -> Option<i64> {
    argmax(logits).map(|i| i as i64)
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
/// counted separately by L3's `allclose`). 0 for empty input.
pub fn max_abs_diff(actual: &[f32], expected: &[f32]) -> Result<f64, MetricError> {
    same_len(actual, expected)?;
    Ok(finite_pairs(actual, expected).map(|(a, e)| (a - e).abs()).fold(0.0, f64::max))
}

/// Mean `|a − e|` in f64 over positions where both are finite; 0 when there are none.
pub fn mean_abs_diff(actual: &[f32], expected: &[f32]) -> Result<f64, MetricError> {
    same_len(actual, expected)?;
    let (sum, n) = finite_pairs(actual, expected).fold((0.0, 0usize), |(s, n), (a, e)| (s + (a - e).abs(), n + 1));
    Ok(if n == 0 { 0.0 } else { sum / n as f64 })
}

/// Cosine similarity in f64 over positions where both are finite. Two all-zero vectors are
/// identical (1.0); one zero vector against a non-zero one gives 0.0 (mobius gives 0.0 for both).
pub fn cosine_similarity(a: &[f32], b: &[f32]) -> Result<f64, MetricError> {
    same_len(a, b)?;
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in finite_pairs(a, b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    Ok(cosine_of(dot, na, nb))
}

/// The cosine from the sums over finite pairs, accumulated in order: `Σxy`, `Σx²`, `Σy²` (one
/// formula for [`cosine_similarity`] and the passes that fold these sums into theirs).
pub fn cosine_of(dot: f64, na: f64, nb: f64) -> f64 {
    match (na == 0.0, nb == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        (false, false) => dot / (na.sqrt() * nb.sqrt()),
    }
}

fn same_len(a: &[f32], b: &[f32]) -> Result<(), MetricError> {
    if a.len() != b.len() {
        return Err(MetricError::LengthMismatch { actual: a.len(), expected: b.len() });
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

/// One quantized weight against the checkpoint's.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightError {
    /// The reference parameter (`layers.1.mlp.gate_proj.weight`).
    pub key: String,
    /// The export's node.
    pub node: String,
    pub bits: u32,
    /// `rms(W_deq − W) / rms(W)`.
    pub relative_error: f64,
    /// `rms(W_deq − W)` over what rounding to nearest on the build's own grid gives,
    /// `rms(step) / √12`: ≈ 1 for a faithful round-to-nearest quantization whatever its granularity
    /// (per tensor, per channel, in blocks), so weights quantized differently compare with one
    /// another. `None` where the steps are not read (MatMulNBits, GatherBlockQuantized: those are
    /// compared with their bit width's median relative error).
    pub rounding_error: Option<f64>,
}

/// `rms(a − b) / rms(b)`; NaN when a value is not finite or the shapes differ.
pub fn relative_error(dequantized: &[f32], checkpoint: &[f32]) -> f64 {
    if dequantized.len() != checkpoint.len() {
        return f64::NAN;
    }
    let mut r = RelativeError::default();
    r.add(dequantized, checkpoint);
    r.value()
}

/// [`relative_error`] accumulated over bands of rows (a table is never dequantized whole).
#[derive(Debug, Default, Clone, Copy)]
pub struct RelativeError {
    /// Σ(a − b)², Σb², and how many values.
    e: f64,
    s: f64,
    n: usize,
}

impl RelativeError {
    /// One band: equal-length slices of the dequantized weight and the checkpoint's.
    pub fn add(&mut self, dequantized: &[f32], checkpoint: &[f32]) {
        for (&a, &b) in dequantized.iter().zip(checkpoint) {
            let d = a as f64 - b as f64;
            self.e += d * d;
            self.s += (b as f64) * (b as f64);
        }
        self.n += dequantized.len().min(checkpoint.len());
    }

    /// `rms(a − b)`.
    pub fn rms_error(&self) -> f64 {
        (self.e / self.n.max(1) as f64).sqrt()
    }

    /// `rms(a − b) / rms(b)`: 0 when both are zero, ∞ for a non-zero error on a zero weight.
    pub fn value(&self) -> f64 {
        if self.s == 0.0 {
            return if self.e == 0.0 { 0.0 } else { f64::INFINITY };
        }
        (self.e / self.s).sqrt()
    }
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

    // ----- killers of mutants that survived `cargo mutants` (docs/mutation-testing.md) -----

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
}
