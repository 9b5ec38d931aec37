//! L4 checkpoint tier: does the export give the golden next token? mobius's PASS / AMBIGUOUS /
//! FAIL rules on the export's last-position logits, against the golden file and, when the
//! reference can run, against the live reference too.

use super::outcome::{Status, TierOutcome};
use crate::compare::{l4_verdict, L4Status, L4Verdict};
use crate::golden::Golden;
use crate::tolerance::L4Tolerance;

fn status(v: &L4Verdict) -> Status {
    match v.status {
        L4Status::Pass => Status::Pass,
        L4Status::Ambiguous => Status::Ambiguous,
        L4Status::Fail => Status::Fail,
    }
}

/// The worse of two statuses (fail > ambiguous > pass).
fn worse(a: Status, b: Status) -> Status {
    let rank = |s| match s {
        Status::Fail => 3,
        Status::Ambiguous => 2,
        _ => 1,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// L4 verdict. `live` is the reference's own golden for the same inputs, when available.
pub fn compare(onnx_last_logits: &[f32], input_ids: &[i64], golden: &Golden, live: Option<&Golden>, tol: &L4Tolerance) -> TierOutcome {
    if golden.input_ids != input_ids {
        return TierOutcome::fail(format!(
            "the golden was made for other input_ids ({} tokens) than the case's inputs ({} tokens): regenerate it with `onnx-parity golden --force`",
            golden.input_ids.len(),
            input_ids.len()
        ));
    }
    let mut parts = Vec::new();
    let mut out_status;
    let mut out = TierOutcome::new(Status::Pass, "");
    match l4_verdict(onnx_last_logits, &golden.top_ids(), tol.near_tie_margin, tol.top10_jaccard_warn) {
        Err(e) => return TierOutcome::fail(format!("golden comparison: {e}")),
        Ok(v) => {
            out_status = status(&v);
            parts.push(format!("golden: {} ({})", status(&v), v.reason));
            parts.extend(v.warnings.iter().map(|w| format!("warning: {w}")));
            out = out
                .metric("top1", v.top1)
                .metric("golden_top1", v.golden_top1)
                .metric("top1_gap", v.gap)
                .metric("top10_jaccard", v.jaccard)
                .metric("argmax_match", v.top1 == v.golden_top1);
        }
    }
    if let Some(live) = live {
        match l4_verdict(onnx_last_logits, &live.top_ids(), tol.near_tie_margin, tol.top10_jaccard_warn) {
            Err(e) => return TierOutcome::fail(format!("live reference comparison: {e}")),
            Ok(v) => {
                out_status = worse(out_status, status(&v));
                parts.push(format!("live reference: {} ({})", status(&v), v.reason));
                out = out.metric("reference_top1", v.golden_top1).metric("reference_top10_jaccard", v.jaccard);
            }
        }
        if live.top1_id != golden.top1_id {
            parts.push(format!("note: the reference's top-1 {} differs from the golden's {}", live.top1_id, golden.top1_id));
        }
    }
    out.status = out_status;
    out.message = parts.join("; ");
    out
}
