//! L5 generation tier: does greedy decoding reproduce the golden tokens? Gated on the match
//! ratio (equal tokens in the common prefix ÷ golden length) against the golden file and, when
//! the reference can run, against the reference's own greedy tokens.

use super::outcome::{Status, TierOutcome};
use crate::metrics::{check_threshold, MetricError};
use crate::tier_metrics::Metrics;

/// L5 verdict for the export's greedy tokens.
pub fn compare(onnx_tokens: &[i64], golden_tokens: &[i64], live_tokens: Option<&[i64]>, min_ratio: f64) -> TierOutcome {
    let mut parts = Vec::new();
    let mut pass = true;
    let mut metrics = Metrics::default();
    match token_match(onnx_tokens, golden_tokens, min_ratio) {
        Err(e) => return TierOutcome::fail(format!("golden comparison: {e}")),
        Ok(v) => {
            pass &= v.pass;
            parts.push(format!(
                "golden: {} of {} tokens match before the first difference (ratio {:.3}, need ≥ {}){}",
                v.matched_prefix,
                v.golden_len,
                v.ratio,
                min_ratio,
                v.first_mismatch
                    .map(|i| format!(", first mismatch at {i}: candidate {:?} vs golden {:?}", onnx_tokens.get(i), golden_tokens.get(i)))
                    .unwrap_or_default()
            ));
            parts.extend(v.warnings.iter().map(|w| format!("warning: {w}")));
            metrics.compared.token_match_ratio = Some(v.ratio);
            (metrics.l5.positional_ratio, metrics.l5.generated) = (Some(v.positional_ratio), Some(v.actual_len));
        }
    }
    if let Some(live) = live_tokens {
        match token_match(onnx_tokens, live, min_ratio) {
            Err(e) => return TierOutcome::fail(format!("live reference comparison: {e}")),
            Ok(v) => {
                pass &= v.pass;
                parts.push(format!("live reference: ratio {:.3} ({} of {})", v.ratio, v.matched_prefix, v.golden_len));
                metrics.l5.reference_token_match_ratio = Some(v.ratio);
            }
        }
    }
    metrics.l5.tokens = Some(onnx_tokens.to_vec());
    metrics.l5.golden_tokens = Some(golden_tokens.to_vec());
    metrics.l5.reference_tokens = live_tokens.map(<[i64]>::to_vec);
    let status = if pass { Status::Pass } else { Status::Fail };
    TierOutcome::decided(status, format!("candidate tokens {onnx_tokens:?}; {}", parts.join("; ")), metrics)
}

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
/// Choice (docs/design.md §2 "equal tokens in the common prefix ÷ golden length"): only the leading run
/// counts. After the first mismatch the two greedy decodes condition on different text, so later
/// coincidences are not agreement. mobius counts equal positions over the whole common length;
/// that number is reported as `positional_ratio`. A shorter output (e.g. an early EOS) lowers the
/// ratio because the denominator is the golden length. An empty golden proves nothing: error.
pub fn token_match(actual: &[i64], golden: &[i64], min_ratio: f64) -> Result<L5Verdict, MetricError> {
    check_threshold("min_token_match_ratio", min_ratio, Some(1.0))?;
    if golden.is_empty() {
        return Err(MetricError::Empty { what: "the golden token sequence" });
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

    /// Guards: equal tokens pass; one wrong token at f32's ratio 1.0 fails; the live reference
    /// is a second gate.
    #[test]
    fn token_gates() {
        assert_eq!(compare(&[5, 6, 7], &[5, 6, 7], None, 1.0).status, Status::Pass);
        assert_eq!(compare(&[5, 6, 8], &[5, 6, 7], None, 1.0).status, Status::Fail);
        assert_eq!(compare(&[5, 6, 7], &[5, 6, 7], Some(&[5, 9, 7]), 1.0).status, Status::Fail);
    }

    /// Guards: an empty golden is an error, never a pass.
    #[test]
    fn empty_golden_fails() {
        assert_eq!(compare(&[1], &[], None, 1.0).status, Status::Fail);
    }

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
        assert!(matches!(token_match(&[1], &[], 0.5), Err(MetricError::Empty { .. })));
        assert!(token_match(&[1], &[1], 1.5).is_err());
        assert!(token_match(&[1], &[1], -0.1).is_err());
    }
}
