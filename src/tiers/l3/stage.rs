//! One stage of an L3 comparison (a component, the logits, a layer's output) against the
//! reference, and how it is described in the verdict's message.

use super::allclose::{allclose, AllcloseReport};
use crate::inputs::Dense;
use crate::metrics::MetricError;
use crate::tolerance::L3Tolerance;

/// Why one stage could not be compared: itself a divergence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageError {
    #[error("{stage}: shape {actual:?} from ONNX vs {expected:?} from the reference")]
    Shape { stage: String, actual: Vec<usize>, expected: Vec<usize> },
    #[error("{stage}: {source}")]
    Metric { stage: String, source: MetricError },
}

/// Compares one stage (`name` for messages).
pub(crate) fn stage(name: &str, actual: &Dense<f32>, expected: &Dense<f32>, tol: &L3Tolerance) -> Result<AllcloseReport, StageError> {
    if actual.shape != expected.shape {
        return Err(StageError::Shape { stage: name.into(), actual: actual.shape.clone(), expected: expected.shape.clone() });
    }
    allclose(&actual.data, &expected.data, &actual.shape, tol.atol, tol.rtol)
        .map_err(|source| StageError::Metric { stage: name.into(), source })
}

pub(crate) fn describe(name: &str, r: &AllcloseReport) -> String {
    format!(
        "{name}: max_abs_diff {:.3e} at {:?} (candidate {} vs ref {}), {} of {} outside atol {:.0e} + rtol {:.0e}·|ref|{}",
        r.max_abs_diff,
        r.worst_index,
        r.worst_actual,
        r.worst_expected,
        r.n_violations,
        r.numel,
        r.atol,
        r.rtol,
        if r.nonfinite_mismatch > 0 { format!(", {} non-finite", r.nonfinite_mismatch) } else { String::new() }
    )
}
