//! The exported graphs in ONNX Runtime as a [`Backend`].

use super::{Backend, BackendError, GenerationRequest};
use crate::inputs::ModelInputs;
use crate::outputs::{Isolation, Run};
use crate::runtime::pipeline::OnnxPipeline;

impl Backend for OnnxPipeline {
    fn describe(&self) -> String {
        format!(
            "ONNX Runtime {} {} ({}, {} KV pairs, {})",
            crate::runtime::provision::ORT_VERSION,
            self.ep().label(),
            self.root().display(),
            self.kv_pairs(),
            self.float_type().name()
        )
    }

    /// The export always returns logits for every prompt position (`all_position_logits` is
    /// moot here). Layer outputs come from the same prefill when the pipeline's decoder exposes
    /// them ([`crate::runtime::pipeline::DecoderGraph::WithLayerOutputs`]).
    fn partitioned(&self) -> Option<String> {
        OnnxPipeline::partitioned(self)
    }

    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError> {
        let (prefill, generation) = self.greedy(inputs, request.max_new_tokens, request.eos, request.forced, request.layer_outputs)?;
        Ok(Run { prefill, generation, step_inputs: Default::default() })
    }

    fn will_isolate(&mut self) {
        self.prepare_local_layers();
    }

    fn isolated(&mut self, inputs: &ModelInputs, reference: &Run, own: &Run) -> Result<Isolation, BackendError> {
        Ok(Isolation::Done(Box::new(self.isolate(inputs, reference, Some(own))?)))
    }
}
