//! A quantized build's weights against the checkpoint's (L3's weights check): each dequantized
//! weight's relative error, and its error in units of its quantization step.

use std::sync::Arc;

use rayon::prelude::*;

use super::error::{EvalError, SharedError};
use crate::metrics::{RelativeError, WeightError};
use crate::onnx::quantized::{QuantizedBuild, QuantizedWeight};
use onnx_parity_reference::weights::{name_for, Override, Overrides};

/// Each of `build`'s dequantized `weights` against the checkpoint tensor it stands for (a tied
/// `lm_head` against the token embedding), read one at a time. The weights are spread over the
/// reference's thread pool, each weight's error one sequential pass (so the same bits): at full
/// E2B size 4.6 G elements took 35 s on one core.
pub(super) fn weight_errors(
    build: &QuantizedBuild,
    weights: &Overrides,
    checkpoint: &std::path::Path,
) -> Result<Vec<WeightError>, SharedError> {
    let err = |m: String| Arc::new(EvalError::Quantized(m));
    let w = onnx_parity_reference::weights::Weights::open(checkpoint).map_err(|e| err(e.to_string()))?;
    let names: Vec<String> = w.names().map(str::to_string).collect();
    let steps = build.step_rms().map_err(|e| err(e.to_string()))?;
    let mut jobs = Vec::new();
    for q in &build.weights {
        let Some(o) = weights.get(&q.key) else { continue };
        let name = name_for(&q.key, names.iter().map(String::as_str)).ok_or_else(|| {
            let why = crate::onnx::quantized::not_a_parameter(&q.key).map(|why| format!(": {why}")).unwrap_or_default();
            err(format!("`{}` (node `{}`) stands for `{}`, which the checkpoint does not hold{why}", q.initializer, q.node, q.key))
        })?;
        jobs.push((q, o, name));
    }
    let one = |&(q, o, name): &(&QuantizedWeight, &Override, &str)| {
        // A band of rows at a time on both sides: the checkpoint's from its mapping, the build's
        // dequantized from its payload (a 262144-row table is never whole in memory).
        let (rows, cols) = (o.shape.first().copied().unwrap_or(0), o.cols());
        let checkpoint_rows = w.matrix_rows(name, [rows, cols]).map_err(|e| err(e.to_string()))?;
        let mut error = RelativeError::default();
        const BAND: usize = 1024;
        for start in (0..rows).step_by(BAND) {
            let n = BAND.min(rows - start);
            error.add(
                &o.rows(start, n).map_err(|e| err(e.to_string()))?,
                &checkpoint_rows.read_rows(start, n).map_err(|e| err(e.to_string()))?,
            );
        }
        let rounding_error = steps.get(&q.key).filter(|s| **s > 0.0).map(|s| error.rms_error() / (s / 12f64.sqrt()));
        Ok(WeightError { key: q.key.clone(), node: q.node.clone(), bits: q.bits, relative_error: error.value(), rounding_error })
    };
    // In the build's order, and its first error in that order.
    let done: Vec<Result<WeightError, SharedError>> = jobs.par_iter().map(one).collect();
    done.into_iter().collect()
}
