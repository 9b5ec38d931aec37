//! L4's rule: mobius's PASS / AMBIGUOUS / FAIL (`compare_golden`) on the export's last-position
//! logits against a golden's top-k ids.

use std::collections::BTreeSet;

use crate::golden::GoldenTopIds;
use crate::metrics::{check_threshold, jaccard, top_k, MetricError};
use crate::tiers::outcome::Status;

/// How many of the golden top-10 must be in the export's top-10 for the tie-break branch.
/// A count, not a Jaccard ratio (9 shared of 10 is Jaccard 0.818), as in mobius.
pub const AMBIGUOUS_TOP10_OVERLAP: usize = 9;

/// Result of [`l4_verdict`].
#[derive(Debug, Clone, PartialEq)]
pub struct L4Verdict {
    /// PASS, AMBIGUOUS or FAIL (mobius's `ParityResult`).
    pub status: Status,
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
) -> Result<L4Verdict, MetricError> {
    check_threshold("near_tie_margin", near_tie_margin, None)?;
    check_threshold("top10_jaccard_warn", jaccard_warn, Some(1.0))?;
    if onnx_logits.is_empty() {
        return Err(MetricError::Empty { what: "the logits" });
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
        (Status::Fail, format!("{nonfinite} non-finite logits (NaN/Inf)"))
    } else if top1 == golden.top1 {
        (Status::Pass, format!("argmax {top1} = golden top-1"))
    } else if near_tie && top1 == golden.top2 {
        (
            Status::Ambiguous,
            format!("argmax {top1} ≠ golden top-1 {} but = golden top-2, near tie (gap {gap:.4} < {near_tie_margin})", golden.top1),
        )
    } else if top10_overlap >= AMBIGUOUS_TOP10_OVERLAP && golden_set.contains(&top1) && top10.iter().take(2).any(|&t| t == golden.top1) {
        (
            Status::Ambiguous,
            format!("argmax {top1} ≠ golden top-1 {} but {top10_overlap}/10 of the top-10 agree and golden top-1 is the export's #2: a tie-break swap", golden.top1),
        )
    } else {
        (Status::Fail, format!("argmax {top1} ≠ golden top-1 {} (gap {gap:.4}, top-10 overlap {top10_overlap})", golden.top1))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(v.status, Status::Pass);
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
        assert_eq!(v.status, Status::Ambiguous, "{}", v.reason);
        assert!(v.near_tie);
        assert!((v.gap - 0.005).abs() < 1e-6);
        // Same tokens without the near tie: FAIL.
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, Status::Fail);
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
        assert_eq!(v.status, Status::Fail, "{}", v.reason);
        // Gap exactly at the margin: not a near tie, and rule 3 does not apply (golden top-10
        // misses 0 and 1 → overlap 8) → FAIL.
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 98, 99] };
        let v = l4_verdict(&[10.0, 9.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], &g, 0.5, 0.0).unwrap();
        assert!(!v.near_tie, "gap 0.5 = margin 0.5 is not < margin");
        assert_eq!(v.status, Status::Fail, "{}", v.reason);
    }

    /// Guards: rule 3, no near tie, but ≥9 of the top-10 shared, export top-1 in the golden
    /// top-10, and golden top-1 the export's #2: AMBIGUOUS.
    #[test]
    fn l4_ambiguous_top10_swap() {
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 8, 99] };
        let v = l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.7).unwrap();
        assert!(!v.near_tie);
        assert_eq!(v.top10_overlap, 9);
        assert_eq!(v.status, Status::Ambiguous, "{}", v.reason);
    }

    /// Guards: rule 3 needs each of its three conditions; removing any one gives FAIL.
    #[test]
    fn l4_top10_branch_needs_all_conditions() {
        // Only 8 shared.
        let g = GoldenTopIds { top1: 1, top2: 0, top10: &[1, 0, 2, 3, 4, 5, 6, 7, 98, 99] };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, Status::Fail);
        // 9 shared but the export's top-1 (0) is not in the golden top-10.
        let g = GoldenTopIds { top1: 1, top2: 2, top10: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10] };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, Status::Fail);
        // 10 shared but golden top-1 (2) is the export's #3.
        let g = GoldenTopIds { top1: 2, top2: 0, top10: &G10 };
        assert_eq!(l4_verdict(&ranked_logits(0.5), &g, 0.01, 0.0).unwrap().status, Status::Fail);
    }

    /// Guards: a plain argmax mismatch with no rescue is FAIL.
    #[test]
    fn l4_fail() {
        let g = GoldenTopIds { top1: 11, top2: 10, top10: &[11, 10, 20, 21, 22, 23, 24, 25, 26, 27] };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.7).unwrap();
        assert_eq!(v.status, Status::Fail);
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
            assert_eq!(v.status, Status::Fail, "{bad}");
        }
    }

    /// Guards: Jaccard below the warn threshold warns but does not change a PASS.
    #[test]
    fn l4_jaccard_warning() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &[0, 1, 2, 3, 4, 50, 51, 52, 53, 54] };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 0.7).unwrap();
        assert_eq!(v.status, Status::Pass);
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
        assert_eq!((v.status, v.top2, v.near_tie), (Status::Pass, None, false));
        assert!(l4_verdict(&[], &g, 0.01, 0.0).is_err());
    }

    // ----- killers of mutants that survived `cargo mutants` (docs/mutation-testing.md) -----

    /// Guards: the Jaccard warning is strict (`<`): a Jaccard equal to the threshold is fine.
    #[test]
    fn l4_jaccard_at_threshold_does_not_warn() {
        let g = GoldenTopIds { top1: 0, top2: 1, top10: &G10 };
        let v = l4_verdict(&ranked_logits(1.0), &g, 0.01, 1.0).unwrap();
        assert_eq!(v.jaccard, 1.0);
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    }
}
