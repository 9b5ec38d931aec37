//! The reference side's models of a case sharing the checkpoint's f32 matrices
//! ([`crate::backend::reference::MatrixScope`]): the reference, then the f64 arbiter and an f32
//! build's f32 floor take the matrices the first of them loaded, instead of reading and
//! transposing them again (E2B width 2.3 s a load, 12B width 5 s); a quantized case's models
//! share its build's dequantized matrices. The sharing starts when the first of them is computed
//! (not when read from the reference cache) and ends before the case's candidates run, so the
//! matrices never sit beside ONNX Runtime's sessions; it starts again for the floors conditioned
//! on a candidate's int8 steps (four models of one build, run after the candidate's session is
//! gone) and ends with them.

use super::{local_ple, precision, CaseEvaluation};
use crate::artifacts::Artifacts;
use crate::case::Case;

impl CaseEvaluation {
    /// Starts sharing `case`'s checkpoint matrices (on a quantized case's build, the build's),
    /// when not already.
    pub(super) fn share_matrices(&self, case: &Case) {
        let build = self.build(case).ok().flatten().map(|b| b.root.as_path());
        let mut m = self.matrices.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.is_none() {
            *m = Artifacts::of(case).checkpoint.as_deref().map(|c| crate::backend::reference::share_matrices(c, build));
        }
    }

    /// Ends the sharing: the matrices go with the last model holding them.
    pub(super) fn end_sharing(&self) {
        self.matrices.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    }

    /// The f32 floor of an f32 build, computed now when it is not in the reference cache: its
    /// model then takes the shared matrices instead of loading them after the candidates (its
    /// layers are held through the candidates' runs: 258 MB at E2B width), and it is cached for
    /// the next export even when this one's graphs do not load. A stored floor, any other
    /// precision or a quantized build's is left to L3, and so is any error (L3 reports it; the
    /// candidates' runs do not depend on it).
    pub(super) fn floor_while_shared(&self, case: &Case) {
        if self.floor_made_with_the_reference(case) {
            let _ = self.calibration(case);
        }
    }

    /// Whether [`CaseEvaluation::floor_while_shared`] makes the floor: an f32 build's (a float
    /// dtype: a quantized one's floor is conditioned or made by L3) not in the reference cache.
    pub(super) fn floor_made_with_the_reference(&self, case: &Case) -> bool {
        let f32_floor = precision::slot(case.dtype).is_some_and(|(_, compute)| compute == candle_core::DType::F32);
        f32_floor && !case.dtype.is_quantized() && !precision::floor_stored(self.identity(case), case.dtype, local_ple(case))
    }
}
