//! A quantized build's weights against the checkpoint's (L3's weights check): each dequantized
//! weight's relative error, and its error in units of its quantization step.

use std::sync::Arc;

use super::error::{EvalError, SharedError};
use crate::metrics::{RelativeError, WeightError};
use crate::onnx::quantized::{QuantizedBuild, QuantizedWeight};
use onnx_parity_reference::weights::{name_for, Override, Overrides};

/// Each of `build`'s dequantized `weights` against the checkpoint tensor it stands for (a tied
/// `lm_head` against the token embedding), read one at a time. The weights are shared between
/// threads, largest first (each weight's error is one sequential pass, so the same bits): at full
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
    for (i, q) in build.weights.iter().enumerate() {
        let Some(o) = weights.get(&q.key) else { continue };
        let name = name_for(&q.key, names.iter().map(String::as_str)).ok_or_else(|| {
            let why = crate::onnx::quantized::not_a_parameter(&q.key).map(|why| format!(": {why}")).unwrap_or_default();
            err(format!("`{}` (node `{}`) stands for `{}`, which the checkpoint does not hold{why}", q.initializer, q.node, q.key))
        })?;
        jobs.push((i, q, o, name));
    }
    jobs.sort_by_key(|(i, _, o, _)| (std::cmp::Reverse(o.shape.iter().product::<usize>()), *i));
    let one = |(_, q, o, name): &(usize, &QuantizedWeight, &Override, &str)| {
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
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len()).max(1);
    let mut done: Vec<(usize, Result<WeightError, SharedError>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(job) = jobs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        out.push((job.0, one(job)));
                    }
                    out
                })
            })
            .collect();
        workers.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    // The build's order, and its first error in that order.
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}
