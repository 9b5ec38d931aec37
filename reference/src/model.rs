//! `Gemma4`: the top level the harness calls, for both families and all four model types
//! (load, components, prefill, greedy generation).
//!
//! Mirrors `Gemma4ForConditionalGeneration.forward` / `Gemma4Model.forward` (modeling_gemma4.py)
//! and their unified twins: placeholders (image, video, audio ids) are embedded as
//! `pad_token_id`, the image features of the non-padding soft tokens replace the image
//! placeholders in order, PLE decoders get their per-layer inputs (token part from the
//! placeholder-free ids, projection part from the merged embeddings), the masks get the
//! image-block overlay in the caller's [`BidirectionalScope`], and the decoder returns softcapped
//! logits for every position. Text-only types (`*ForCausalLM`) have no placeholder handling.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::config::{Family, ModelConfig, VisionConfig};
use crate::error::{Error, Result};
use crate::io::{Dense, GeneratedTokens, ModelInputs};
use crate::mask::{block_ids, BidirectionalScope, MaskRule};
use crate::text::TextModel;
use crate::vision::{UnifiedEmbedder, VisionPath, VisionTower};
use crate::weights::{Overrides, Weights, UNIFIED_RENAMES};

/// What the decoder stack starts from, for one prompt: the components a divergence is
/// localised by.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Token ids as given (placeholders included).
    pub input_ids: Vec<i64>,
    /// `mm_token_type_ids` as given (decides the image blocks).
    pub mm_token_type_ids: Option<Vec<i64>>,
    /// Vision output `[n_tokens, hidden]`, when the prompt has images.
    pub image_features: Option<Tensor>,
    /// `[1, S, hidden]`: embeddings × √hidden with the image features scattered in.
    pub inputs_embeds: Tensor,
    /// `[1, S, L, P]` for PLE decoders (gemma4 with `hidden_size_per_layer_input` > 0).
    pub per_layer_inputs: Option<Tensor>,
}

/// What [`Gemma4::check_headers`] found.
#[derive(Debug)]
pub struct HeaderCheck {
    /// The model built on placeholders (its manifest is what it asked for).
    pub model: Gemma4,
    /// Requested tensors the checkpoint lacks or has mis-shaped.
    pub problems: Vec<crate::weights::Problem>,
    /// Checkpoint tensors the model did not ask for, with their stored shapes.
    pub unread: BTreeMap<String, Vec<usize>>,
}

/// How [`Gemma4::generate`] runs.
#[derive(Debug, Clone, Copy)]
pub struct GenerateOptions<'a> {
    pub scope: BidirectionalScope,
    /// New tokens to produce (0: prefill only).
    pub max_new_tokens: usize,
    /// Free-running decoding stops after the first of these (which is returned).
    pub eos: &'a [i64],
    /// Teacher forcing: feed these tokens instead of the argmax (at most `max_new_tokens`; no
    /// EOS stop), so another implementation's step logits can be compared on the same history.
    pub forced: Option<&'a [i64]>,
    /// Logits for every prompt position (L3); else only the last position's.
    pub all_position_logits: bool,
    /// Keep every decoder layer's prefill output (L3 localises a divergence to a layer).
    pub layer_outputs: bool,
    /// With `all_position_logits`: keep the final normed hidden state (`Run::final_hidden`)
    /// instead of the all-position logits, which [`Gemma4::logits_head`] makes slice by slice
    /// when they are read (`Run::logits` is then the last position's).
    pub final_hidden: bool,
}

/// Everything one prefill + generation produced.
#[derive(Debug, Clone)]
pub struct Run {
    pub prepared: Prepared,
    /// `[1, S, vocab]` with `all_position_logits`, else `[1, 1, vocab]` (the last position).
    pub logits: Tensor,
    /// Each decoder layer's prefill output `[S, hidden]` (empty unless asked for).
    pub layers: Vec<Tensor>,
    /// With the layer outputs: each layer's module outputs `[S, hidden]` (HF names, forward order).
    pub modules: Vec<crate::text::ModuleOutputs>,
    /// With the layer outputs: what the decoder received at the first cached decode step, the
    /// embeddings `[1, hidden]` and PLE inputs `[1, L, P]` of the first generated token (an
    /// export's decoder is judged on them in isolation).
    pub step_inputs: Option<(Tensor, Option<Tensor>)>,
    pub generation: GeneratedTokens,
    /// With `final_hidden`: the final normed hidden state `[S, hidden]` in the compute dtype.
    pub final_hidden: Option<Tensor>,
}

/// A loaded Gemma 4 checkpoint of any supported model type.
#[derive(Debug)]
pub struct Gemma4 {
    config: ModelConfig,
    text: TextModel,
    vision: Option<VisionPath>,
    manifest: BTreeMap<String, Vec<usize>>,
    /// Manifest tensors kept in the checkpoint's mapping (gathered by row, never upcast).
    row_tables: std::collections::BTreeSet<String>,
}

impl Gemma4 {
    /// Keeps collected layer and module outputs and all-position logits in `dtype` as they are
    /// made ([`TextModel::keep_outputs_in`]): the harness keeps an f64 arbiter's in f32.
    pub fn keep_outputs_in(&mut self, dtype: DType) {
        self.text.keep_outputs_in(dtype);
    }

    /// Loads `config.json` and the safetensors weights (single file or sharded) of an HF
    /// checkpoint directory; weights are upcast once to f32.
    pub fn load(checkpoint_dir: &Path) -> Result<Self> {
        Self::load_with_dtype(checkpoint_dir, DType::F32)
    }

    /// Like [`Gemma4::load`] with compute dtype `dtype`: F32 (the reference) or F64 (a precision
    /// reference with every op in f64 — unlike an HF `.double()` model, whose RMSNorms drop to
    /// f32 through `.float()` and whose RoPE cos/sin are forced to f32).
    pub fn load_with_dtype(checkpoint_dir: &Path, dtype: DType) -> Result<Self> {
        Self::load_on(checkpoint_dir, dtype, &Device::Cpu)
    }

    /// Like [`Gemma4::load_with_dtype`], with every weight uploaded once to `device` (open it with
    /// [`crate::device::DeviceSpec::open`], which switches cuBLAS's TF32 off first); the whole
    /// forward then runs there, inputs included.
    pub fn load_on(checkpoint_dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let config = ModelConfig::from_file(&checkpoint_dir.join("config.json"))?;
        Ok(Self::build(config, Weights::open_with_dtype(checkpoint_dir, dtype)?.with_device(device.clone()))?.0)
    }

    /// Like [`Gemma4::load_on`], taking the f32 matrices another model of this checkpoint loaded
    /// through `shared` and leaving its own there (see [`crate::weights::SharedMatrices`]): the
    /// f64 arbiter and the f32 floor after the f32 reference read no matrix again.
    pub fn load_shared(checkpoint_dir: &Path, dtype: DType, device: &Device, shared: &crate::weights::SharedMatrices) -> Result<Self> {
        let config = ModelConfig::from_file(&checkpoint_dir.join("config.json"))?;
        let w = Weights::open_with_dtype(checkpoint_dir, dtype)?.with_device(device.clone()).with_shared_matrices(shared.clone());
        Ok(Self::build(config, w)?.0)
    }

    /// Like [`Gemma4::load_on`], reading `overrides` in place of the checkpoint's tensors they
    /// stand for (a quantized export's dequantized weights, see [`Overrides`]); every override
    /// must be read by the model, or loading fails naming those that were not.
    pub fn load_with_overrides(checkpoint_dir: &Path, dtype: DType, device: &Device, overrides: Overrides) -> Result<Self> {
        Self::load_with_overrides_shared(checkpoint_dir, dtype, device, overrides, None)
    }

    /// [`Gemma4::load_with_overrides`] taking the matrices of models loaded on the same build
    /// through `shared` and leaving its own there (see [`crate::weights::SharedMatrices`]; only
    /// a handle for this checkpoint and the overrides' build is used).
    pub fn load_with_overrides_shared(
        checkpoint_dir: &Path,
        dtype: DType,
        device: &Device,
        overrides: Overrides,
        shared: Option<&crate::weights::SharedMatrices>,
    ) -> Result<Self> {
        let config = ModelConfig::from_file(&checkpoint_dir.join("config.json"))?;
        let mut w = Weights::open_with_dtype(checkpoint_dir, dtype)?.with_device(device.clone()).with_overrides(overrides);
        if let Some(s) = shared {
            w = w.with_shared_matrices(s.clone());
        }
        let (model, w) = Self::build(config, w)?;
        let unused = w.unused_overrides();
        if !unused.is_empty() {
            return Err(Error::input(format!(
                "{} of the export's quantized weights stand for no tensor the reference reads: {}",
                unused.len(),
                unused.join(", ")
            )));
        }
        let unmodelled = w.unmodelled_activations();
        if !unmodelled.is_empty() {
            return Err(Error::input(format!(
                "the export rounds the activations of {} matmuls the reference does not compute as linear layers, so it cannot round them as the export does: {}",
                unmodelled.len(),
                unmodelled.join(", ")
            )));
        }
        Ok(model)
    }

    /// The device the model computes on.
    pub fn device(&self) -> &Device {
        self.text.device()
    }

    /// The model `config` describes, built without weights (zero-stride placeholders, no
    /// memory): its [`Gemma4::weight_manifest`] is every tensor the reference reads, at full size.
    pub fn dry(config: ModelConfig) -> Result<Self> {
        Ok(Self::build(config, Weights::dry())?.0)
    }

    /// Like [`Gemma4::dry`], checking every tensor against the safetensors headers of
    /// `checkpoint_dir` (data never read): returns the model and what the checkpoint lacks or has
    /// mis-shaped, plus the checkpoint's tensor names (with their shapes) that the model did not
    /// ask for.
    pub fn check_headers(config: ModelConfig, checkpoint_dir: &Path) -> Result<HeaderCheck> {
        let (model, w) = Self::build(config, Weights::headers(checkpoint_dir)?)?;
        let unread = w
            .names()
            .filter(|n| !model.manifest.contains_key(*n))
            .map(|n| (n.to_string(), w.shape_of(n).map(<[usize]>::to_vec).unwrap_or_default()))
            .collect();
        Ok(HeaderCheck { problems: w.problems(), unread, model })
    }

    /// Builds the model from `w`, returning the weights source too (its manifest, problems).
    fn build(config: ModelConfig, w: Weights) -> Result<(Self, Weights)> {
        let renames = match config.family() {
            Family::Unified => UNIFIED_RENAMES,
            Family::Gemma4 => &[],
        };
        let w = w.with_renames(renames);
        let text = TextModel::load(config.text(), &w, config.text_prefix(), config.tie_word_embeddings())?;
        let hidden = config.text().hidden_size;
        let vision = match config.vision() {
            None => None,
            Some(VisionConfig::Unified(v)) => Some(VisionPath::Unified(UnifiedEmbedder::load(v, hidden, &w, "model.embed_vision")?)),
            Some(VisionConfig::Tower(v)) => {
                Some(VisionPath::Tower(VisionTower::load(v, hidden, &w, "model.vision_tower", "model.embed_vision")?))
            }
        };
        let manifest = w.manifest();
        tracing::debug!(tensors = manifest.len(), unused = w.names().filter(|n| !manifest.contains_key(*n)).count(), "checkpoint loaded");
        let row_tables = w.row_tables();
        Ok((Self { config, text, vision, manifest, row_tables }, w))
    }

    /// The parsed, post-initialised config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The compute dtype (f32, or f64 in precision mode).
    pub fn dtype(&self) -> DType {
        self.text.dtype()
    }

    /// Every tensor the reference read, with its shape (for the L2 contract).
    pub fn weight_manifest(&self) -> &BTreeMap<String, Vec<usize>> {
        &self.manifest
    }

    /// The manifest tensors the reference gathers rows from through the checkpoint's mapping
    /// (not upcast, not resident: the PLE table).
    pub fn row_tables(&self) -> &std::collections::BTreeSet<String> {
        &self.row_tables
    }

    /// The scope HF's own `forward` applies to this checkpoint: the model type's default when the
    /// text config has `use_bidirectional_attention: "vision"` (unified: all-layers; gemma4:
    /// sliding-windowed; text-only types: none), none when it is null.
    pub fn hf_forward_scope(&self) -> BidirectionalScope {
        match self.config.text().use_bidirectional_attention {
            Some(_) => BidirectionalScope::default_for(self.config.model_type()),
            None => BidirectionalScope::None,
        }
    }

    /// Vision output `[n_tokens, hidden]` for the prompt's images (`None` without images).
    pub fn image_features(&self, inputs: &ModelInputs) -> Result<Option<Tensor>> {
        let (px, pos) = match (&inputs.pixel_values, &inputs.image_position_ids) {
            (Some(px), Some(pos)) => (px, pos),
            (None, None) => return Ok(None),
            (Some(_), None) => return Err(Error::input("pixel_values given without image_position_ids")),
            (None, Some(_)) => return Err(Error::input("image_position_ids given without pixel_values")),
        };
        let vision = self.vision.as_ref().ok_or_else(|| Error::input("image inputs given but the checkpoint has no vision_config"))?;
        let px = tensor_f32(px, "pixel_values", self.device())?;
        let pos = tensor_i64(pos, "image_position_ids", self.device())?;
        vision.forward(&px, &pos).map(Some)
    }

    /// `input_ids` with the multimodal placeholders replaced by `pad_token_id` (HF's
    /// `llm_input_ids`); unchanged for the text-only types.
    fn llm_ids(&self, input_ids: &[i64]) -> Result<Vec<i64>> {
        let placeholders = self.config.placeholder_ids();
        let pad = self.config.text().pad_token_id;
        input_ids
            .iter()
            .map(|&id| {
                if placeholders.contains(&id) {
                    pad.ok_or_else(|| Error::input("placeholder token present but pad_token_id is null"))
                } else {
                    Ok(id)
                }
            })
            .collect()
    }

    /// Token embeddings × √hidden with placeholders embedded as `pad_token_id`, and
    /// `image_features` rows scattered into the image-token positions in order: `[S, hidden]`.
    fn merged_embeds(&self, input_ids: &[i64], llm_ids: &[i64], image_features: Option<&Tensor>) -> Result<Tensor> {
        let embeds = self.text.embed(llm_ids)?;
        let Some(features) = image_features else {
            return Ok(embeds);
        };
        let image_id = self.config.image_token_id().ok_or_else(|| Error::input("image features given to a text-only model"))?;
        let hidden = self.config.text().hidden_size;
        if features.dims() != [features.dim(0)?, hidden] {
            return Err(Error::input(format!("image_features must be [n, {hidden}], got {:?}", features.dims())));
        }
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
        Ok(all.index_select(&index, 0)?)
    }

    /// Everything the decoder stack starts from: image features, merged embeddings and (PLE)
    /// per-layer inputs.
    pub fn embed(&self, inputs: &ModelInputs) -> Result<Prepared> {
        let _reuse = crate::nn::upcast::reuse();
        let seq = inputs.input_ids.len();
        if seq == 0 {
            return Err(Error::input("empty prompt"));
        }
        if let Some(t) = &inputs.mm_token_type_ids {
            if t.len() != seq {
                return Err(Error::input(format!("mm_token_type_ids has {} entries for {seq} tokens", t.len())));
            }
        }
        let image_features = self.image_features(inputs)?;
        let llm_ids = self.llm_ids(&inputs.input_ids)?;
        let embeds = self.merged_embeds(&inputs.input_ids, &llm_ids, image_features.as_ref())?;
        let ple = self.text.per_layer_inputs(&llm_ids, &embeds)?;
        Ok(Prepared {
            input_ids: inputs.input_ids.clone(),
            mm_token_type_ids: inputs.mm_token_type_ids.clone(),
            image_features,
            inputs_embeds: embeds.unsqueeze(0)?,
            per_layer_inputs: ple.map(|p| p.unsqueeze(0)).transpose()?,
        })
    }

    fn mask_rule(&self, prepared: &Prepared, scope: BidirectionalScope) -> MaskRule {
        let block_ids = match &prepared.mm_token_type_ids {
            Some(t) if scope != BidirectionalScope::None => block_ids(t),
            _ => Vec::new(),
        };
        MaskRule { scope, sliding_window: self.text.sliding_window(), block_ids }
    }

    /// Logits `[1, S, vocab]` for every position of a prepared prompt.
    pub fn forward(&self, prepared: &Prepared, scope: BidirectionalScope) -> Result<Tensor> {
        let _reuse = crate::nn::upcast::reuse();
        let (embeds, ple) = squeeze_batch(prepared)?;
        let seq = embeds.dim(0)?;
        let rule = self.mask_rule(prepared, scope);
        let mut cache = self.text.new_cache(seq)?;
        Ok(self.text.forward(&embeds, ple.as_ref(), &rule, &mut cache)?.unsqueeze(0)?)
    }

    /// Every decoder layer's output `[1, S, hidden]` (HF `output_hidden_states` without the
    /// leading embeddings), for localising a divergence.
    pub fn layer_outputs(&self, prepared: &Prepared, scope: BidirectionalScope) -> Result<Vec<Tensor>> {
        let _reuse = crate::nn::upcast::reuse();
        let (embeds, ple) = squeeze_batch(prepared)?;
        let rule = self.mask_rule(prepared, scope);
        let mut cache = self.text.new_cache(embeds.dim(0)?)?;
        let (_, states) = self.text.forward_collect(&embeds, ple.as_ref(), &rule, &mut cache)?;
        states.into_iter().map(|s| Ok(s.unsqueeze(0)?)).collect()
    }

    /// Each decoder layer run locally on `streams` (`[1, S, hidden]` per layer: the residual
    /// stream entering it in another run — the precision arbiter's), with `prepared`'s per-layer
    /// inputs: each layer's output `[S, hidden]` and its modules' (see
    /// [`TextModel::forward_local`]). At f32 this is the local error floor an export's layer is
    /// judged against.
    pub fn local_layers(
        &self,
        prepared: &Prepared,
        scope: BidirectionalScope,
        streams: &[Tensor],
        ple_source: LocalPle,
    ) -> Result<(Vec<Tensor>, Vec<crate::text::ModuleOutputs>)> {
        let _reuse = crate::nn::upcast::reuse();
        let (embeds, ple) = squeeze_batch(prepared)?;
        let rule = self.mask_rule(prepared, scope);
        let mut cache = self.text.new_cache(embeds.dim(0)?)?;
        let streams = streams.iter().map(|s| Ok(s.squeeze(0)?)).collect::<Result<Vec<_>>>()?;
        let ple = match (ple_source, streams.first()) {
            (LocalPle::FromStream, Some(first)) => {
                self.text.per_layer_inputs(&self.llm_ids(&prepared.input_ids)?, &first.to_dtype(self.dtype())?)?
            }
            _ => ple.map(|p| p.to_dtype(self.dtype())).transpose()?,
        };
        let c = self.text.forward_local(&streams, ple.as_ref(), &rule, &mut cache)?;
        Ok((c.states, c.modules))
    }

    /// The lm_head and final softcapping, usable after this model is dropped (see
    /// [`crate::text::LogitsHead`]).
    pub fn logits_head(&self) -> crate::text::LogitsHead {
        self.text.logits_head()
    }

    /// Logits `[1, S, vocab]` for every prompt position (HF `model(**inputs).logits`).
    pub fn prefill(&self, inputs: &ModelInputs, scope: BidirectionalScope) -> Result<Tensor> {
        self.forward(&self.embed(inputs)?, scope)
    }

    /// Greedy decoding with a KV cache: up to `max_new_tokens` new tokens, stopping after the
    /// first token in `eos_ids` (which is returned). Ties pick the lowest id (`torch.argmax`).
    pub fn greedy(
        &self,
        inputs: &ModelInputs,
        max_new_tokens: usize,
        eos_ids: &[i64],
        scope: BidirectionalScope,
    ) -> Result<GeneratedTokens> {
        let opts = GenerateOptions {
            scope,
            max_new_tokens,
            eos: eos_ids,
            forced: None,
            all_position_logits: false,
            layer_outputs: false,
            final_hidden: false,
        };
        Ok(self.generate(inputs, &opts)?.generation)
    }

    /// One vision pass, one prefill (components and logits) and the KV-cache decode that
    /// continues from it.
    pub fn generate(&self, inputs: &ModelInputs, opts: &GenerateOptions<'_>) -> Result<Run> {
        let _reuse = crate::nn::upcast::reuse();
        let prepared = self.embed(inputs)?;
        let (embeds, ple) = squeeze_batch(&prepared)?;
        let seq = embeds.dim(0)?;
        let rule = self.mask_rule(&prepared, opts.scope);
        let mut cache = self.text.new_cache(seq + opts.max_new_tokens)?;
        let (hidden, layers, modules) = if opts.layer_outputs {
            let (h, c) = self.text.forward_collect_modules(&embeds, ple.as_ref(), &rule, &mut cache)?;
            (h, c.states, c.modules)
        } else {
            (self.text.forward_hidden(&embeds, ple.as_ref(), &rule, &mut cache)?, Vec::new(), Vec::new())
        };
        let mut step_inputs = None;
        let keep_hidden = opts.all_position_logits && opts.final_hidden;
        let logits = if opts.all_position_logits && !keep_hidden {
            self.text.logits(&hidden)?
        } else {
            self.text.logits(&hidden.narrow(0, seq - 1, 1)?)?
        };
        let row: Vec<f32> = logits.get(logits.dim(0)? - 1)?.to_dtype(DType::F32)?.to_vec1()?;
        let generation = GeneratedTokens::decode(
            row,
            opts.max_new_tokens,
            opts.eos,
            opts.forced,
            |_, row| argmax(row),
            |step, next| {
                let ids = self.llm_ids(&[next])?;
                let e = self.text.embed(&ids)?;
                let p = self.text.per_layer_inputs(&ids, &e)?;
                if opts.layer_outputs && step == 0 {
                    step_inputs = Some((e.clone(), p.clone()));
                }
                let l = self.text.forward(&e, p.as_ref(), &rule, &mut cache)?;
                Ok(l.get(0)?.to_dtype(DType::F32)?.to_vec1()?)
            },
        )?;
        let final_hidden = keep_hidden.then_some(hidden);
        Ok(Run { prepared, logits: logits.unsqueeze(0)?, layers, modules, step_inputs, generation, final_hidden })
    }
}

/// Where a layer run locally gets its per-layer inputs (PLE) from: what the export under test
/// does, so that the floor computes what the candidate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPle {
    /// Given with the streams (`prepared.per_layer_inputs`): a package whose decoder is fed them
    /// by its embedding model.
    Given,
    /// Computed at this model's precision from the token ids and the stream entering layer 0:
    /// a text-only graph, which computes them from `input_ids` and its own embeddings (an
    /// int8-quantized projection rounds them as the candidate does, not as the arbiter did).
    FromStream,
}

/// The prepared embeddings `[S, hidden]` and PLE inputs `[S, L, P]` without the batch axis.
fn squeeze_batch(p: &Prepared) -> Result<(Tensor, Option<Tensor>)> {
    Ok((p.inputs_embeds.squeeze(0)?, p.per_layer_inputs.as_ref().map(|t| t.squeeze(0)).transpose()?))
}

/// A harness tensor as a candle tensor, checking the shape is consistent.
fn tensor_f32(d: &Dense<f32>, name: &str, device: &Device) -> Result<Tensor> {
    if !d.is_consistent() {
        return Err(Error::input(format!("{name}: shape {:?} does not hold {} values", d.shape, d.data.len())));
    }
    Ok(Tensor::from_slice(&d.data, d.shape.as_slice(), device)?)
}

fn tensor_i64(d: &Dense<i64>, name: &str, device: &Device) -> Result<Tensor> {
    if !d.is_consistent() {
        return Err(Error::input(format!("{name}: shape {:?} does not hold {} values", d.shape, d.data.len())));
    }
    Ok(Tensor::from_slice(&d.data, d.shape.as_slice(), device)?)
}

/// First index of the maximum (`torch.argmax`); NaN logits are an error.
///
/// The harness's `compare::argmax` skips NaN instead (it judges an export, whose NaN logits are
/// a verdict, not an error); here a NaN means the reference itself broke.
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
