//! What a candidate's runs wait for on the reference side: the reference's run (its tokens force
//! the candidate's decode) and, under the calibrated rule, the f64 arbiter's (the candidate's
//! sub-models and layers are judged on its inputs and streams), with an f32 build's floor made
//! while the checkpoint's matrices are shared ([`super::sharing`]).
//!
//! Computed, they run before the candidate loads, their models gone before its sessions open.
//! Found in the reference cache, they are read while the candidate's back end opens: reading
//! them (≈ 1 s at E2B width: 1.8 GB read and digested) and ONNX Runtime opening the decoder
//! (5–7 s, its weights prepacked) each keep one core busy, and the values read are held through
//! the candidate's runs either way, so the peak is the same. An entry found corrupt while it is
//! read is a miss ([`crate::reference_cache`]): its model then runs beside the opening session,
//! the one case where the two sides' memory adds up.

use super::{cached, precision, CaseEvaluation, SharedError};
use crate::case::Case;
use crate::outputs::Run;

/// The reference's run (`None`: it failed; the candidate then decodes freely and L3 reports
/// why) and the run the candidate's sub-models and layers are judged on (the arbiter's under the
/// calibrated rule, else the reference's).
pub(super) type ReferenceSide<'a> = (Option<&'a Run>, Option<&'a Run>);

impl CaseEvaluation {
    /// Whether every reference-side result a candidate waits for is in the reference cache, so
    /// that no reference model runs before the candidate ([module doc](self)).
    pub(super) fn reference_side_stored(&self, case: &Case) -> bool {
        let id = self.identity(case);
        if id.is_none() {
            return false;
        }
        let stored = |what: &str| cached::is_stored(id, what, |_| {});
        stored("reference")
            && (precision::calibrated_rule(case).is_none() || stored("arbiter"))
            && (!case.dtype.is_quantized() || stored("weight errors"))
            && !self.floor_made_with_the_reference(case)
    }

    /// The reference side a candidate waits for ([`ReferenceSide`]), computed or read; an
    /// arbiter that fails is an error (the candidate's runs are not judged without it).
    pub(super) fn reference_side(&self, case: &Case) -> Result<ReferenceSide<'_>, SharedError> {
        // The reference side first, its models sharing the checkpoint's matrices; all of them
        // gone before the candidate runs.
        self.share_matrices(case);
        let reference = self.reference(case).ok().map(|r| &r.run);
        // Under the calibrated rule the sub-models and layers are judged on the f64 arbiter's
        // inputs and streams (its floor is the reference fed the same).
        let oracle = match (reference, precision::calibrated_rule(case)) {
            (Some(_), Some(_)) => Some(self.arbiter(case)?),
            _ => reference,
        };
        self.floor_while_shared(case);
        self.end_sharing();
        Ok((reference, oracle))
    }
}
