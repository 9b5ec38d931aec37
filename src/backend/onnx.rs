//! The exported graphs in ONNX Runtime as a [`Backend`].

use super::{Backend, BackendError, GenerationRequest, Run};
use crate::inputs::ModelInputs;
use crate::onnx::pipeline::OnnxPipeline;

impl Backend for OnnxPipeline {
    fn describe(&self) -> String {
        format!(
            "ONNX Runtime {} {} ({}, {} KV pairs, {})",
            crate::onnx::runtime::ORT_VERSION,
            crate::onnx::runtime::execution_provider(),
            self.root().display(),
            self.kv_pairs(),
            if self.is_f16() { "float16" } else { "float32" }
        )
    }

    /// The export always returns logits for every prompt position (`all_position_logits` is
    /// moot here).
    ///
    /// Layer outputs come from a separate prefill of an instrumented copy of the decoder, so the
    /// logits compared are always the original graph's.
    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError> {
        let (mut prefill, generation) = self.greedy(inputs, request.max_new_tokens, request.eos, request.forced)?;
        if request.layer_outputs {
            let t = std::time::Instant::now();
            let (layers, probe_logits) = self.layer_outputs(inputs)?;
            if let Some(l) = probe_logits.filter(|l| l.shape == prefill.logits.shape) {
                let moved = l.data.iter().zip(&prefill.logits.data).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                tracing::info!(
                    "layer outputs of {} in {:.2} s (the instrumented graph's logits are within {moved:e} of the original's)",
                    self.root().display(),
                    t.elapsed().as_secs_f64()
                );
            }
            prefill.layers = layers;
        }
        Ok(Run { prefill, generation })
    }
}
