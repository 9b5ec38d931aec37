//! L3's rule: `|actual − expected| ≤ atol + rtol·|expected|` for every element, in f64, the
//! reference on the right; NaN or Inf never passes.

use crate::metrics::{check_threshold, cosine_of, unravel_index, MetricError};

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
pub fn allclose(actual: &[f32], expected: &[f32], shape: &[usize], atol: f64, rtol: f64) -> Result<AllcloseReport, MetricError> {
    check_threshold("atol", atol, None)?;
    check_threshold("rtol", rtol, None)?;
    let numel: usize = shape.iter().product();
    for (side, len) in [("actual", actual.len()), ("expected", expected.len())] {
        if len != numel {
            return Err(MetricError::ShapeMismatch { shape: shape.to_vec(), numel, side, len });
        }
    }
    if numel == 0 {
        return Err(MetricError::Empty { what: "the tensor" });
    }
    let mut s = Sums { worst: (0, f64::NEG_INFINITY), ..Sums::default() };
    for (k, (a, e)) in actual.chunks(RUN).zip(expected.chunks(RUN)).enumerate() {
        s.push_run(k * RUN, a, e, atol, rtol);
    }
    let Sums { n_violations, nonfinite, first_nonfinite, max_abs, sum_abs, n_finite, max_rel, dot, na, nb, worst } = s;
    let worst_flat = first_nonfinite.unwrap_or(worst.0);
    Ok(AllcloseReport {
        pass: n_violations == 0,
        numel,
        max_abs_diff: max_abs,
        mean_abs_diff: if n_finite == 0 { 0.0 } else { sum_abs / n_finite as f64 },
        max_rel_diff: max_rel,
        cosine: cosine_of(dot, na, nb),
        n_violations,
        nonfinite_mismatch: nonfinite,
        worst_index: unravel_index(worst_flat, shape),
        worst_actual: actual[worst_flat],
        worst_expected: expected[worst_flat],
        atol,
        rtol,
    })
}

/// Elements [`allclose`] takes at a time.
const RUN: usize = 4096;

/// What [`allclose`] sums and tracks, fed in index order.
#[derive(Debug, Default)]
struct Sums {
    n_violations: usize,
    nonfinite: usize,
    first_nonfinite: Option<usize>,
    max_abs: f64,
    sum_abs: f64,
    n_finite: usize,
    max_rel: f64,
    /// The cosine's sums, in the same pass (one read of two [S, vocab] tensors, not two).
    dot: f64,
    na: f64,
    nb: f64,
    /// (index, excess over the bound) of the worst finite position.
    worst: (usize, f64),
}

impl Sums {
    /// Elements `base..` of both sides: a run with no NaN or Inf (nearly always) in a loop
    /// without the per-element checks, the same sums in the same order (the same bits; at 12B
    /// width 288 M elements a tensor).
    fn push_run(&mut self, base: usize, actual: &[f32], expected: &[f32], atol: f64, rtol: f64) {
        let finite = |v: &[f32]| v.iter().fold(true, |ok, x| ok & x.is_finite());
        if finite(actual) && finite(expected) {
            // On a local copy (its fields kept in registers), the largest difference in four
            // lanes (order-free): only the sums chain.
            let mut s = std::mem::take(self);
            let mut lanes = [s.max_abs; 4];
            for (k, (&a, &e)) in actual.iter().zip(expected).enumerate() {
                s.push_finite(base + k, f64::from(a), f64::from(e), atol, rtol, &mut lanes[k % 4]);
            }
            s.max_abs = lanes.into_iter().fold(s.max_abs, f64::max);
            *self = s;
            return;
        }
        let mut max_abs = self.max_abs;
        for (k, (&a, &e)) in actual.iter().zip(expected).enumerate() {
            if !a.is_finite() || !e.is_finite() {
                self.nonfinite += 1;
                self.n_violations += 1;
                self.first_nonfinite.get_or_insert(base + k);
                continue;
            }
            self.push_finite(base + k, f64::from(a), f64::from(e), atol, rtol, &mut max_abs);
        }
        self.max_abs = max_abs;
    }

    /// Element `i`, finite on both sides; its difference raises `max_abs` (the caller's lane:
    /// a maximum does not depend on the order it is taken in).
    #[inline(always)]
    fn push_finite(&mut self, i: usize, a: f64, e: f64, atol: f64, rtol: f64, max_abs: &mut f64) {
        self.dot += a * e;
        self.na += a * a;
        self.nb += e * e;
        let diff = (a - e).abs();
        let bound = atol + rtol * e.abs();
        self.n_violations += usize::from(diff > bound);
        // Both finite: no NaN to order, so a plain comparison is the maximum.
        if diff > *max_abs {
            *max_abs = diff;
        }
        self.sum_abs += diff;
        self.n_finite += 1;
        // `diff / |e|` can exceed `max_rel` only where `diff` reaches `max_rel·|e|` (the product
        // rounded, so a margin of a few ulp): the division, exact, only there.
        let abs_e = e.abs();
        if e != 0.0 && diff >= self.max_rel * abs_e * (1.0 - 4.0 * f64::EPSILON) {
            self.max_rel = self.max_rel.max(diff / abs_e);
        }
        let excess = diff - bound;
        if excess > self.worst.1 {
            self.worst = (i, excess);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(allclose(&[1.0, 2.0], &[1.0, 2.0], &[3], 0.0, 0.0), Err(MetricError::ShapeMismatch { .. })));
        assert!(matches!(allclose(&[1.0, 2.0], &[1.0], &[2], 0.0, 0.0), Err(MetricError::ShapeMismatch { side: "expected", .. })));
        assert!(matches!(allclose(&[], &[], &[0, 4], 0.0, 0.0), Err(MetricError::Empty { .. })));
        assert!(matches!(allclose(&[1.0], &[1.0], &[1], -1.0, 0.0), Err(MetricError::BadThreshold { .. })));
        assert!(matches!(allclose(&[1.0], &[1.0], &[1], 0.0, f64::NAN), Err(MetricError::BadThreshold { .. })));
    }

    // ----- killers of mutants that survived `cargo mutants` (docs/mutation-testing.md) -----

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

    /// Guards the one-pass sums: the cosine is `cosine_similarity`'s to the bit, and the largest
    /// relative difference (divided only where it can grow) is the naive maximum to the bit, on
    /// values spanning magnitudes, zeros, near-equal pairs and non-finite positions.
    #[test]
    fn one_pass_sums_equal_the_separate_ones() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let n = 20_000;
        let mut e = Vec::with_capacity(n);
        let mut a = Vec::with_capacity(n);
        for i in 0..n {
            let r = next();
            let mag = 10f32.powi((r % 13) as i32 - 6);
            let x = ((r >> 16) as u32 as f32 / u32::MAX as f32 - 0.5) * mag;
            let x = if i % 97 == 0 { 0.0 } else { x };
            let delta = match r % 5 {
                0 => 0.0,
                1 => x * 1e-7,
                2 => f32::EPSILON * x.abs(),
                3 => ((r >> 40) as u32 as f32 / u32::MAX as f32) * mag * 1e-3,
                _ => -x * 0.5,
            };
            e.push(x);
            a.push(if i % 1013 == 0 { f32::NAN } else { x + delta });
        }
        let r = allclose(&a, &e, &[n], 1e-3, 1e-3).unwrap();
        assert_eq!(r.cosine.to_bits(), crate::metrics::cosine_similarity(&a, &e).unwrap().to_bits());
        let naive = a
            .iter()
            .zip(&e)
            .filter(|(x, y)| x.is_finite() && y.is_finite() && **y != 0.0)
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).abs() / f64::from(y).abs())
            .fold(0.0f64, f64::max);
        assert_eq!(r.max_rel_diff.to_bits(), naive.to_bits());
    }

    /// Guards the runs' fast path: over several runs, with the worst excess tied across runs
    /// (the first kept) and NaN or Inf in some runs, [`allclose`] gives the bits of the
    /// element-by-element loop it replaced.
    #[test]
    fn runs_give_the_element_by_element_loops_bits() {
        fn by_element(actual: &[f32], expected: &[f32], atol: f64, rtol: f64) -> Sums {
            let mut s = Sums { worst: (0, f64::NEG_INFINITY), ..Sums::default() };
            for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
                if !a.is_finite() || !e.is_finite() {
                    s.nonfinite += 1;
                    s.n_violations += 1;
                    s.first_nonfinite.get_or_insert(i);
                    continue;
                }
                let mut max_abs = s.max_abs;
                s.push_finite(i, f64::from(a), f64::from(e), atol, rtol, &mut max_abs);
                s.max_abs = max_abs;
            }
            s
        }
        let n = 3 * RUN + 777;
        let ties = [RUN + 5, 2 * RUN + 1, 17];
        let e: Vec<f32> = (0..n).map(|i| if ties.contains(&i) { 0.5 } else { ((i * 7919 % 10007) as f32 - 5000.0) / 977.0 }).collect();
        let mut a: Vec<f32> = e.iter().enumerate().map(|(i, v)| v + 1e-4 * ((i % 7) as f32 - 3.0)).collect();
        for i in ties {
            a[i] = 0.75;
        }
        let mut broken = a.clone();
        broken[2 * RUN + 9] = f32::NAN;
        broken[3 * RUN + 1] = f32::INFINITY;
        for a in [a, broken] {
            let r = allclose(&a, &e, &[n], 1e-3, 1e-3).unwrap();
            let s = by_element(&a, &e, 1e-3, 1e-3);
            let flat = s.first_nonfinite.unwrap_or(s.worst.0);
            assert_eq!(
                (r.max_abs_diff.to_bits(), r.n_violations, r.nonfinite_mismatch, r.worst_index, r.max_rel_diff.to_bits()),
                (s.max_abs.to_bits(), s.n_violations, s.nonfinite, vec![flat], s.max_rel.to_bits())
            );
            assert_eq!(r.mean_abs_diff.to_bits(), (s.sum_abs / s.n_finite as f64).to_bits());
            assert_eq!(r.cosine.to_bits(), cosine_of(s.dot, s.na, s.nb).to_bits());
        }
    }
}
