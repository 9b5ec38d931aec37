//! candle-transformers' own gemma4 ([`crate::candle_gemma4`]) as a [`Backend`]: the prefill at
//! every position, greedy or teacher-forced decoding through the crate's KV cache. It exposes no
//! layer outputs (the crate keeps its layers private), so L3 does not localise inside it; the
//! localisation of its divergences is tests/candle_transformers.rs's.

pub use crate::candle_gemma4::{read_config, unsupported, CandleTransformersError, CandleTransformersGemma4, VERSION};

use super::{Backend, BackendError, GenerationRequest};
use crate::inputs::ModelInputs;
use crate::metrics::greedy_token;
use crate::outputs::{Component, GeneratedTokens, LayerOutputs, Prefill, Run};

impl Backend for CandleTransformersGemma4 {
    fn describe(&self) -> String {
        CandleTransformersGemma4::describe(self)
    }

    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError> {
        if inputs.has_images() {
            return Err(CandleTransformersError::Unsupported(vec!["image prompts (see `unsupported`)".into()]).into());
        }
        let ids = &inputs.input_ids;
        let (logits, embeds) = self.prefill(ids, request.all_position_logits)?;
        let vocab = logits.shape.last().copied().unwrap_or(0);
        let last = logits.data[logits.data.len() - vocab..].to_vec();
        let mut prefill = Prefill { logits, ..Default::default() };
        prefill.components.insert(Component::InputsEmbeds, embeds);
        if request.layer_outputs {
            prefill.layers = LayerOutputs::Unavailable(format!(
                "candle-transformers {VERSION}'s TextModel keeps its layers private and returns logits only"
            ));
        }
        // Step k feeds the k-th token at position S + k, through the crate's KV cache.
        let choose = |k: usize, logits: &[f32]| {
            greedy_token(logits)
                .ok_or_else(|| CandleTransformersError::Run(candle_core::Error::Msg(format!("decode step {k}: every logit is NaN"))))
        };
        let generation = GeneratedTokens::decode(last, request.max_new_tokens, request.eos, request.forced, choose, |k, token| {
            self.step(token, ids.len() + k)
        })?;
        let run = Run { prefill, generation, step_inputs: Default::default() };
        run.require_finite("candle-transformers")?;
        Ok(run)
    }
}
