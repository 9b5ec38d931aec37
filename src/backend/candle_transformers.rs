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
        let generation = decode(self, last, ids.len(), request)?;
        let run = Run { prefill, generation, step_inputs: Default::default() };
        run.require_finite("candle-transformers")?;
        Ok(run)
    }
}

/// Greedy (or teacher-forced) decoding from the prefill's last-position logits: step 0 is the
/// prefill's, step k the k-th cached step (as the other back ends count them).
fn decode(
    model: &mut CandleTransformersGemma4,
    mut logits: Vec<f32>,
    prompt_len: usize,
    request: &GenerationRequest<'_>,
) -> Result<GeneratedTokens, CandleTransformersError> {
    let mut out = GeneratedTokens::default();
    for i in 0..request.max_new_tokens {
        let token = match request.forced {
            Some(forced) => match forced.get(i) {
                Some(&t) => t,
                None => break,
            },
            None => match greedy_token(&logits) {
                Some(t) => t,
                None => break,
            },
        };
        out.step_logits.push(std::mem::take(&mut logits));
        out.tokens.push(token);
        if (request.forced.is_none() && request.eos.contains(&token)) || i + 1 == request.max_new_tokens {
            break;
        }
        logits = model.step(token, prompt_len + i)?;
    }
    Ok(out)
}
