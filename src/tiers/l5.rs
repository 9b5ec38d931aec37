//! L5 generation tier: does greedy decoding reproduce the golden tokens? Gated on the match
//! ratio (equal tokens in the common prefix ÷ golden length) against the golden file and, when
//! the reference can run, against the reference's own greedy tokens.

use super::outcome::{Status, TierOutcome};
use crate::compare::token_match;

/// L5 verdict for the export's greedy tokens.
pub fn compare(onnx_tokens: &[i64], golden_tokens: &[i64], live_tokens: Option<&[i64]>, min_ratio: f64) -> TierOutcome {
    let mut parts = Vec::new();
    let mut pass = true;
    let mut out = TierOutcome::new(Status::Pass, "");
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
                    .map(|i| format!(", first mismatch at {i}: onnx {:?} vs golden {:?}", onnx_tokens.get(i), golden_tokens.get(i)))
                    .unwrap_or_default()
            ));
            parts.extend(v.warnings.iter().map(|w| format!("warning: {w}")));
            out = out.metric("token_match_ratio", v.ratio).metric("positional_ratio", v.positional_ratio).metric("generated", v.actual_len);
        }
    }
    if let Some(live) = live_tokens {
        match token_match(onnx_tokens, live, min_ratio) {
            Err(e) => return TierOutcome::fail(format!("live reference comparison: {e}")),
            Ok(v) => {
                pass &= v.pass;
                parts.push(format!("live reference: ratio {:.3} ({} of {})", v.ratio, v.matched_prefix, v.golden_len));
                out = out.metric("reference_token_match_ratio", v.ratio);
            }
        }
    }
    out.status = if pass { Status::Pass } else { Status::Fail };
    out.message = format!("onnx tokens {onnx_tokens:?}; {}", parts.join("; "));
    out
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
}
