//! L4 checkpoint tier: does the export give the golden next token? mobius's PASS / AMBIGUOUS /
//! FAIL rules on the export's last-position logits, against the golden file and, when the
//! reference can run, against the live reference too.

pub mod rule;

use super::outcome::TierOutcome;
use crate::golden::Golden;
use crate::metrics::cosine_similarity;
use crate::tier_metrics::Metrics;
use crate::tolerance::L4Tolerance;
use rule::l4_verdict;

/// L4 verdict. `live_logits` are the reference's last-position logits for the same inputs, when
/// the reference can run: the export is then also judged against them, and their cosine with
/// the export's logits is reported (a warning below `cosine_similarity_warn`).
pub fn compare(
    onnx_last_logits: &[f32],
    input_ids: &[i64],
    golden: &Golden,
    live_logits: Option<&[f32]>,
    tol: &L4Tolerance,
) -> TierOutcome {
    if golden.input_ids != input_ids {
        return TierOutcome::fail(format!(
            "the golden was made for other input_ids ({} tokens) than the case's inputs ({} tokens): regenerate it with `onnx-parity golden --force`",
            golden.input_ids.len(),
            input_ids.len()
        ));
    }
    let mut parts = Vec::new();
    let mut out_status;
    let mut metrics = Metrics::default();
    match l4_verdict(onnx_last_logits, &golden.top_ids(), tol.near_tie_margin, tol.top10_jaccard_warn) {
        Err(e) => return TierOutcome::fail(format!("golden comparison: {e}")),
        Ok(v) => {
            out_status = v.status;
            parts.push(format!("golden: {} ({})", v.status, v.reason));
            parts.extend(v.warnings.iter().map(|w| format!("warning: {w}")));
            let m = &mut metrics;
            (m.l4.top1, m.l4.golden_top1, m.l4.top1_gap) = (Some(v.top1), Some(v.golden_top1), Some(v.gap));
            m.compared.top10_jaccard = Some(v.jaccard);
            m.compared.argmax_match = Some(v.top1 == v.golden_top1);
            m.l4.golden_top10 = Some(golden.top10_ids.clone());
            if let Ok(own) = Golden::from_logits(onnx_last_logits, input_ids) {
                m.l4.top10 = Some(own.top10_ids);
            }
        }
    }
    if let Some(live_logits) = live_logits {
        let live = match Golden::from_logits(live_logits, input_ids) {
            Ok(g) => g,
            Err(e) => return TierOutcome::fail(format!("reference logits: {e}")),
        };
        match cosine_similarity(onnx_last_logits, live_logits) {
            Ok(c) => {
                metrics.compared.cosine = Some(c);
                // NaN cosine (non-finite logits) warns too.
                if c.is_nan() || c < tol.cosine_similarity_warn {
                    parts.push(format!(
                        "warning: cosine {c:.6} with the reference's logits < warn threshold {}",
                        tol.cosine_similarity_warn
                    ));
                }
            }
            Err(e) => return TierOutcome::fail(format!("live reference comparison: {e}")),
        }
        match l4_verdict(onnx_last_logits, &live.top_ids(), tol.near_tie_margin, tol.top10_jaccard_warn) {
            Err(e) => return TierOutcome::fail(format!("live reference comparison: {e}")),
            Ok(v) => {
                out_status = out_status.worse(v.status);
                parts.push(format!("live reference: {} ({})", v.status, v.reason));
                let l4 = &mut metrics.l4;
                (l4.reference_top1, l4.reference_top10_jaccard) = (Some(v.golden_top1), Some(v.jaccard));
                l4.reference_top10 = Some(live.top10_ids.clone());
            }
        }
        if live.top1_id != golden.top1_id {
            parts.push(format!("note: the reference's top-1 {} differs from the golden's {}", live.top1_id, golden.top1_id));
        }
    }
    TierOutcome::decided(out_status, parts.join("; "), metrics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::outcome::Status;

    fn golden(logits: &[f32], ids: &[i64]) -> Golden {
        Golden::from_logits(logits, ids).expect("golden")
    }

    const TOL: L4Tolerance = L4Tolerance { near_tie_margin: 0.01, top10_jaccard_warn: 0.7, cosine_similarity_warn: 0.999 };

    /// Guards: a golden made for other input_ids is a failure, never compared as if it fit.
    #[test]
    fn other_input_ids_fail() {
        let l = [0.0, 2.0, 1.0];
        let out = compare(&l, &[1, 2], &golden(&l, &[1, 3]), None, &TOL);
        assert_eq!(out.status, Status::Fail);
    }

    /// Guards: agreeing with the golden is not enough when the live reference disagrees, and a
    /// low cosine with the reference warns.
    #[test]
    fn live_reference_can_fail_the_tier() {
        let onnx = [0.0, 2.0, 1.0];
        let live = [5.0, 0.0, 1.0];
        let ok = compare(&onnx, &[1], &golden(&onnx, &[1]), None, &TOL);
        assert_eq!(ok.status, Status::Pass);
        let out = compare(&onnx, &[1], &golden(&onnx, &[1]), Some(&live), &TOL);
        assert_eq!(out.status, Status::Fail, "{}", out.message);
        assert!(out.message.contains("cosine"), "{}", out.message);
    }
}
