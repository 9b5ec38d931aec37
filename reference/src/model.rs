//! `Gemma4Unified`: the top level the harness calls (load, image features, embeddings, prefill,
//! greedy generation).
//!
//! Mirrors `Gemma4UnifiedForConditionalGeneration.forward` / `Gemma4UnifiedModel.forward`:
//! placeholders (image, video, audio ids) are embedded as `pad_token_id`, the image features of
//! the non-padding patches replace the image placeholders in order, the masks get the image-block
//! overlay in the caller's [`BidirectionalScope`], and the decoder returns softcapped logits for
//! every position. `gemma4_unified_text` checkpoints (`Gemma4UnifiedForCausalLM`) load too:
//! same decoder, no vision, no placeholder handling.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Tensor};

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::mask::{block_ids, BidirectionalScope, MaskRule};
use crate::text::{expect_last_dim, TextModel};
use crate::vision::VisionEmbedder;
use crate::weights::Weights;

/// One prompt, in the HF processor's layout (batch 1).
#[derive(Debug, Clone, Default)]
pub struct ModelInputs {
    /// Token ids of the prompt, placeholders included.
    pub input_ids: Vec<i64>,
    /// `[n_img, max_patches, patch_dim]` f32 raw merged patches.
    pub pixel_values: Option<Tensor>,
    /// `[n_img, max_patches, 2]` i64 patch (x, y); (−1, −1) marks padding.
    pub image_position_ids: Option<Tensor>,
    /// Per-token modality (0 text, 1 image, 2 video, 3 audio); decides the bidirectional blocks.
    pub mm_token_type_ids: Option<Vec<i64>>,
}

/// Result of [`Gemma4Unified::greedy`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// New tokens only; ends with the EOS token if one was produced.
    pub tokens: Vec<i64>,
    /// Logits (softcapped, `[vocab]`) each token was chosen from: step 0 is the prefill's last
    /// position, step k the k-th cached decode step (HF `generate(output_logits=True)`).
    pub step_logits: Vec<Vec<f32>>,
}

/// A loaded Gemma4Unified (or Gemma4Unified text-only) checkpoint.
#[derive(Debug)]
pub struct Gemma4Unified {
    config: ModelConfig,
    text: TextModel,
    vision: Option<VisionEmbedder>,
    manifest: BTreeMap<String, Vec<usize>>,
}

impl Gemma4Unified {
    /// Loads `config.json` and the safetensors weights (single file or sharded) of an HF
    /// checkpoint directory; weights are upcast once to f32.
    pub fn load(checkpoint_dir: &Path) -> Result<Self> {
        Self::load_with_dtype(checkpoint_dir, DType::F32)
    }

    /// Like [`Gemma4Unified::load`] with compute dtype `dtype`: F32 (the reference) or F64 (a
    /// precision reference with every op in f64 — unlike an HF `.double()` model, whose RMSNorms
    /// drop to f32 through `.float()` and whose RoPE cos/sin are forced to f32).
    pub fn load_with_dtype(checkpoint_dir: &Path, dtype: DType) -> Result<Self> {
        let config = ModelConfig::from_file(&checkpoint_dir.join("config.json"))?;
        let w = Weights::open_with_dtype(checkpoint_dir, dtype)?;
        let text = TextModel::load(config.text(), &w, config.text_prefix(), config.tie_word_embeddings())?;
        let vision = match config.vision() {
            Some(v) => Some(VisionEmbedder::load(v, config.text(), &w, "model.embed_vision")?),
            None => None,
        };
        let manifest = w.manifest();
        tracing::debug!(tensors = manifest.len(), unused = w.names().filter(|n| !manifest.contains_key(*n)).count(), "checkpoint loaded");
        Ok(Self { config, text, vision, manifest })
    }

    /// The parsed, post-initialised config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Every tensor the reference read, with its shape (for the L2 contract).
    pub fn weight_manifest(&self) -> &BTreeMap<String, Vec<usize>> {
        &self.manifest
    }

    /// The scope HF's own `forward` applies to this checkpoint: the model type's default when the
    /// text config has `use_bidirectional_attention: "vision"`, none when it is null.
    pub fn hf_forward_scope(&self) -> BidirectionalScope {
        match self.config.text().use_bidirectional_attention {
            Some(_) => BidirectionalScope::default_for(self.config.model_type()).unwrap_or(BidirectionalScope::None),
            None => BidirectionalScope::None,
        }
    }

    /// Vision embedder output for the non-padding patches: `[n_tokens, hidden]`.
    pub fn image_features(&self, pixel_values: &Tensor, image_position_ids: &Tensor) -> Result<Tensor> {
        let vision = self.vision.as_ref().ok_or_else(|| Error::input("image inputs given but the checkpoint has no vision_config"))?;
        vision.forward(pixel_values, image_position_ids)
    }

    /// Token embeddings × √hidden with placeholders embedded as `pad_token_id`, and
    /// `image_features` rows scattered into the image-token positions in order: `[1, S, hidden]`.
    pub fn inputs_embeds(&self, input_ids: &[i64], image_features: Option<&Tensor>) -> Result<Tensor> {
        let placeholders = self.config.placeholder_ids();
        let pad = self.config.text().pad_token_id;
        let llm_ids = input_ids
            .iter()
            .map(|&id| {
                if placeholders.contains(&id) {
                    pad.ok_or_else(|| Error::input("placeholder token present but pad_token_id is null"))
                } else {
                    Ok(id)
                }
            })
            .collect::<Result<Vec<i64>>>()?;
        let embeds = self.text.embed(&llm_ids)?;
        let Some(features) = image_features else {
            return Ok(embeds.unsqueeze(0)?);
        };
        let image_id = self.config.image_token_id().ok_or_else(|| Error::input("image features given to a text-only model"))?;
        let hidden = self.config.text().hidden_size;
        expect_last_dim(features, hidden, "image_features")?;
        let n_feat = features.dim(0)?;
        let slots: Vec<usize> = (0..input_ids.len()).filter(|&i| input_ids[i] == image_id).collect();
        if slots.len() != n_feat {
            return Err(Error::input(format!("Image features and image tokens do not match, tokens: {}, features: {n_feat}", slots.len())));
        }
        // masked_scatter as one gather over [embeds; features].
        let seq = input_ids.len();
        let mut index: Vec<u32> = (0..seq as u32).collect();
        for (j, &pos) in slots.iter().enumerate() {
            index[pos] = (seq + j) as u32;
        }
        let all = Tensor::cat(&[&embeds, &features.to_dtype(embeds.dtype())?], 0)?;
        let index = Tensor::from_vec(index, seq, all.device())?;
        Ok(all.index_select(&index, 0)?.unsqueeze(0)?)
    }

    /// `inputs_embeds` for a full prompt, computing image features when pixels are given.
    pub fn embed(&self, inputs: &ModelInputs) -> Result<Tensor> {
        let features = match (&inputs.pixel_values, &inputs.image_position_ids) {
            (Some(px), Some(pos)) => Some(self.image_features(px, pos)?),
            (Some(_), None) => return Err(Error::input("pixel_values given without image_position_ids")),
            (None, _) => None,
        };
        self.inputs_embeds(&inputs.input_ids, features.as_ref())
    }

    fn mask_rule(&self, inputs_len: usize, mm_token_type_ids: Option<&[i64]>, scope: BidirectionalScope) -> Result<MaskRule> {
        let block_ids = match mm_token_type_ids {
            Some(t) if t.len() != inputs_len => {
                return Err(Error::input(format!("mm_token_type_ids has {} entries for {inputs_len} tokens", t.len())))
            }
            Some(t) if scope != BidirectionalScope::None => block_ids(t),
            _ => Vec::new(),
        };
        Ok(MaskRule { scope, sliding_window: self.text.sliding_window(), block_ids })
    }

    /// Logits `[1, S, vocab]` for every position of `inputs_embeds` `[1, S, hidden]`.
    pub fn forward_embeds(&self, inputs_embeds: &Tensor, mm_token_type_ids: Option<&[i64]>, scope: BidirectionalScope) -> Result<Tensor> {
        let embeds = inputs_embeds.squeeze(0)?;
        let seq = embeds.dim(0)?;
        if seq == 0 {
            return Err(Error::input("empty prompt"));
        }
        let rule = self.mask_rule(seq, mm_token_type_ids, scope)?;
        let mut cache = self.text.new_cache(seq)?;
        Ok(self.text.forward(&embeds, &rule, &mut cache)?.unsqueeze(0)?)
    }

    /// Every decoder layer's output `[1, S, hidden]` for `inputs_embeds` (HF
    /// `output_hidden_states` without the leading embeddings), for localising a divergence.
    pub fn layer_outputs(
        &self,
        inputs_embeds: &Tensor,
        mm_token_type_ids: Option<&[i64]>,
        scope: BidirectionalScope,
    ) -> Result<Vec<Tensor>> {
        let embeds = inputs_embeds.squeeze(0)?;
        let seq = embeds.dim(0)?;
        let rule = self.mask_rule(seq, mm_token_type_ids, scope)?;
        let mut cache = self.text.new_cache(seq)?;
        let (_, states) = self.text.forward_collect(&embeds, &rule, &mut cache)?;
        states.into_iter().map(|s| Ok(s.unsqueeze(0)?)).collect()
    }

    /// Logits `[1, S, vocab]` for every prompt position (HF `model(**inputs).logits`).
    pub fn prefill(&self, inputs: &ModelInputs, scope: BidirectionalScope) -> Result<Tensor> {
        let embeds = self.embed(inputs)?;
        self.forward_embeds(&embeds, inputs.mm_token_type_ids.as_deref(), scope)
    }

    /// Greedy decoding with a KV cache: up to `max_new_tokens` new tokens, stopping after the
    /// first token in `eos_ids` (which is returned). Ties pick the lowest id (`torch.argmax`).
    pub fn greedy(&self, inputs: &ModelInputs, max_new_tokens: usize, eos_ids: &[i64], scope: BidirectionalScope) -> Result<Generation> {
        let mut out = Generation { tokens: Vec::new(), step_logits: Vec::new() };
        if max_new_tokens == 0 {
            return Ok(out);
        }
        let embeds = self.embed(inputs)?.squeeze(0)?;
        let seq = embeds.dim(0)?;
        if seq == 0 {
            return Err(Error::input("empty prompt"));
        }
        let rule = self.mask_rule(seq, inputs.mm_token_type_ids.as_deref(), scope)?;
        let mut cache = self.text.new_cache(seq + max_new_tokens)?;
        // Only the last position's logits are needed to choose the first token.
        let hidden = self.text.forward_hidden(&embeds, &rule, &mut cache)?;
        let mut logits = self.text.logits(&hidden.narrow(0, seq - 1, 1)?)?;
        loop {
            let row: Vec<f32> = logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
            let next = argmax(&row)?;
            out.tokens.push(next);
            out.step_logits.push(row);
            if eos_ids.contains(&next) || out.tokens.len() == max_new_tokens {
                return Ok(out);
            }
            let e = self.inputs_embeds(&[next], None)?.squeeze(0)?;
            logits = self.text.forward(&e, &rule, &mut cache)?;
        }
    }
}

/// First index of the maximum (`torch.argmax`); NaN logits are an error.
fn argmax(row: &[f32]) -> Result<i64> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return Err(Error::input(format!("NaN logit at vocabulary index {i}")));
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as i64).ok_or_else(|| Error::input("empty logits"))
}

#[cfg(test)]
mod tests {
    use super::argmax;

    /// Guards torch.argmax's tie rule (first maximum wins) and NaN rejection.
    #[test]
    fn argmax_ties_and_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]).ok(), Some(1));
        assert!(argmax(&[1.0, f32::NAN]).is_err());
        assert!(argmax(&[]).is_err());
    }
}
