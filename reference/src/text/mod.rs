//! The Gemma 4 text decoder (`Gemma4TextModel` / `Gemma4UnifiedTextModel` + `lm_head` +
//! softcapping), one implementation for both families.
//!
//! Follows `modeling_gemma4.py` / `modeling_gemma4_unified.py` line by line (their attention,
//! norms, RoPE and dense MLP are textually identical); the points that differ from Gemma 1–3 and
//! from candle-transformers' `gemma4` module are called out where they happen: RMSNorm weight
//! multiplies as is, attention scaling is 1.0, full layers have their own head dim / KV heads,
//! every layer ends with `× layer_scalar`. The gemma4 family adds two optional per-layer
//! branches: a routed-experts block beside the dense MLP ([`moe`]) and per-layer embeddings
//! ([`ple`]), whose model-level inputs the caller computes once per forward
//! ([`TextModel::per_layer_inputs`]).
//!
//! Activations are kept 2-D (`[seq, hidden]`): the reference runs one sequence (batch 1).

mod attention;
mod head;
mod mlp;
mod moe;
mod ple;

pub(crate) use attention::grouped_attention;
pub(crate) use mlp::Mlp;

use candle_core::{DType, Device, Tensor};

use crate::config::{LayerType, TextConfig};
use crate::error::{Error, Result};
use crate::kv_cache::{CacheLayout, KvCache};
use crate::mask::MaskRule;
use crate::nn::linear::Linear;
use crate::nn::norm::RmsNorm;
use crate::nn::ops::softcap;
use crate::nn::rope::Rope;
use crate::weights::Weights;
use attention::Attention;
use moe::MoeBlock;
use ple::{PerLayerEmbedding, PerLayerGate};

pub use head::LogitsHead;

#[derive(Debug)]
struct DecoderLayer {
    attn: Attention,
    mlp: Mlp,
    /// gemma4 MoE: experts beside the dense MLP.
    moe: Option<MoeBlock>,
    /// gemma4 PLE: the per-layer input gate after the feed-forward residual.
    per_layer: Option<PerLayerGate>,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
    /// Stored buffer `[1]`, multiplied into the layer output.
    layer_scalar: Tensor,
}

impl DecoderLayer {
    fn load(cfg: &TextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
        let h = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let norm = |name: &str| RmsNorm::load(w, &format!("{prefix}.{name}"), h, eps);
        Ok(Self {
            attn: Attention::load(cfg, w, &format!("{prefix}.self_attn"), layer)?,
            mlp: Mlp::load(cfg, w, &format!("{prefix}.mlp"), layer)?,
            moe: cfg.moe().map(|m| MoeBlock::load(cfg, m, w, prefix)).transpose()?,
            per_layer: cfg.ple().map(|p| PerLayerGate::load(cfg, p, w, prefix)).transpose()?,
            input_layernorm: norm("input_layernorm")?,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            pre_feedforward_layernorm: norm("pre_feedforward_layernorm")?,
            post_feedforward_layernorm: norm("post_feedforward_layernorm")?,
            layer_scalar: w.get(&format!("{prefix}.layer_scalar"), &[1])?,
        })
    }

    /// `per_layer_input`: this layer's slice `[seq, P]` of the PLE inputs (PLE models only).
    fn forward(
        &self,
        x: &Tensor,
        per_layer_input: Option<&Tensor>,
        rope: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: &mut KvCache,
        mut modules: Option<&mut ModuleOutputs>,
    ) -> Result<Tensor> {
        let mut keep = |name: &'static str, t: &Tensor| {
            if let Some(m) = modules.as_deref_mut() {
                m.push((name, t.clone()));
            }
        };
        let h = self.input_layernorm.forward(x)?;
        keep("input_layernorm", &h);
        let h = self.attn.forward(&h, rope.0, rope.1, mask, cache)?;
        keep("self_attn", &h);
        let h = self.post_attention_layernorm.forward(&h)?;
        keep("post_attention_layernorm", &h);
        let x = (x + h)?;
        let h = self.pre_feedforward_layernorm.forward(&x)?;
        keep("pre_feedforward_layernorm", &h);
        let h = self.mlp.forward(&h)?;
        keep("mlp", &h);
        // The experts read the residual itself, not the dense MLP's pre-norm input.
        let h = match &self.moe {
            Some(moe) => moe.forward(&x, &h, &mut keep)?,
            None => h,
        };
        let h = self.post_feedforward_layernorm.forward(&h)?;
        keep("post_feedforward_layernorm", &h);
        let mut x = (x + h)?;
        match (&self.per_layer, per_layer_input) {
            (Some(gate), Some(p)) => x = gate.forward(&x, p)?,
            (None, None) => {}
            (Some(_), None) => return Err(Error::Internal("PLE layer called without per-layer inputs".into())),
            (None, Some(_)) => return Err(Error::Internal("per-layer inputs given to a layer without PLE".into())),
        }
        Ok(x.broadcast_mul(&self.layer_scalar)?)
    }
}

/// One layer's module outputs `[seq, hidden]`, by HF module name, in forward order.
pub type ModuleOutputs = Vec<(&'static str, Tensor)>;

/// What a collecting forward kept: each layer's output, and with `keep_modules` its modules'.
#[derive(Debug, Default)]
pub struct Collected {
    pub states: Vec<Tensor>,
    pub modules: Vec<ModuleOutputs>,
    keep_modules: bool,
}

/// Vocabulary columns per `lm_head` call in a prefill (see [`TextModel::logits`]).
pub const VOCAB_SLICE: usize = 32_768;

/// Where token lookups read `embed_tokens.weight` from.
#[derive(Debug)]
enum TokenEmbedding {
    /// Transposed, `[hidden, vocab]`, shared with a tied `lm_head` (whose matmul wants this
    /// layout); lookups gather columns.
    Transposed(Tensor),
    /// Rows of the checkpoint's mapping or of a quantized build's payload, when the `lm_head` is
    /// a matrix of its own (a quantized build's MatMulNBits head beside its GatherBlockQuantized
    /// table, an untied checkpoint): no second `[vocab, hidden]` copy for a few dozen lookups.
    Rows(crate::weights::RowTable),
}

/// Embedding, per-layer embeddings (gemma4 PLE), decoder stack, final norm, tied `lm_head`,
/// final logit softcapping.
#[derive(Debug)]
pub struct TextModel {
    /// The token embedding the lookups read (see [`TokenEmbedding`]).
    embedding: TokenEmbedding,
    embed_scale: f32,
    per_layer_embedding: Option<PerLayerEmbedding>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    /// The rows `lm_head` was made from, for [`TextModel::logits_head`].
    head_rows: crate::weights::RowTable,
    softcap: Option<f64>,
    ropes: Vec<(LayerType, Rope)>,
    layer_types: Vec<LayerType>,
    sliding_window: usize,
    cache_layout: CacheLayout,
    vocab_size: usize,
    dtype: DType,
    device: Device,
    /// The dtype collected layer and module outputs and all-position logits are kept in, when
    /// not the compute dtype ([`TextModel::keep_outputs_in`]).
    outputs_dtype: Option<DType>,
}

impl TextModel {
    /// Loads the decoder under `prefix` (`model.language_model` or `model`). `lm_head.weight`
    /// is used when present; otherwise, when `tie_word_embeddings`, the token embedding (HF
    /// ties symmetrically and skips tying when both exist with different values).
    pub fn load(cfg: &TextConfig, w: &Weights, prefix: &str, tie: bool) -> Result<Self> {
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::load(cfg, w, &format!("{prefix}.layers.{i}"), i))
            .collect::<Result<Vec<_>>>()?;
        // HF ties `lm_head.weight ← embed_tokens.weight` unless the checkpoint has its own
        // (it skips tying when both exist with different values); untied, it is required. A
        // quantized build's head equal to its embedding is tied too: one copy serves both.
        let embed_name = format!("{prefix}.embed_tokens.weight");
        let equal_head = tie && w.overrides_equal("lm_head.weight", &embed_name);
        let shares_head = equal_head || (tie && !w.provides("lm_head.weight"));
        let (lm_head, embedding, head_name) = if shares_head {
            let embed_t = w.get_t(&embed_name, [v, h])?;
            let head = if equal_head { w.activations("lm_head.weight") } else { Default::default() };
            let lm_head = Linear::from_weight_t(embed_t.clone()).with_activations(head, w.activation_key("lm_head.weight"));
            (lm_head, TokenEmbedding::Transposed(embed_t), embed_name.as_str())
        } else {
            let t = w.get_t("lm_head.weight", [v, h])?;
            let lm_head = Linear::from_weight_t(t).with_activations(w.activations("lm_head.weight"), w.activation_key("lm_head.weight"));
            (lm_head, TokenEmbedding::Rows(w.get_rows(&embed_name, [v, h])?), "lm_head.weight")
        };
        let head_rows = w.matrix_rows(head_name, [v, h])?;
        let layer_types = cfg.layer_types()?.to_vec();
        let mut ropes = Vec::new();
        for lt in LayerType::ALL {
            if layer_types.contains(&lt) {
                ropes.push((lt, Rope::new(&cfg.rope(lt)?)));
            }
        }
        let cache_layout = (0..cfg.num_hidden_layers)
            .map(|i| -> Result<Option<(usize, usize)>> {
                let lt = cfg.layer_type(i);
                Ok(if cfg.is_kv_shared(i) { None } else { Some((cfg.num_kv_heads(lt)?, cfg.head_dim(lt))) })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            embedding,
            embed_scale: cfg.embed_scale(),
            per_layer_embedding: cfg.ple().map(|p| PerLayerEmbedding::load(cfg, p, w, prefix)).transpose()?,
            layers,
            norm: RmsNorm::load(w, &format!("{prefix}.norm"), h, cfg.rms_norm_eps)?,
            lm_head,
            head_rows,
            softcap: cfg.final_logit_softcapping,
            ropes,
            layer_types,
            sliding_window: cfg.sliding_window,
            cache_layout,
            vocab_size: v,
            dtype: w.dtype(),
            device: w.device().clone(),
            outputs_dtype: None,
        })
    }

    /// Keeps collected layer and module outputs and all-position logits in `dtype` as they are
    /// made, not in the compute dtype: an f64 run whose caller keeps f32 copies of them (the
    /// harness) otherwise holds the f64 tensors and the f32 copies at once (at full E2B size and
    /// 600 positions 1.3 GB of f64 logits and 1.9 GB of module outputs). The values are the same
    /// bits as converting afterwards.
    pub fn keep_outputs_in(&mut self, dtype: DType) {
        self.outputs_dtype = (dtype != self.dtype).then_some(dtype);
    }

    /// `t` in the dtype outputs are kept in.
    fn kept(&self, t: Tensor) -> Result<Tensor> {
        Ok(match self.outputs_dtype {
            Some(d) => t.to_dtype(d)?,
            None => t,
        })
    }

    /// Vocabulary size (rows of the embedding).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// `Gemma4UnifiedTextScaledWordEmbedding`: rows × `embed_scale` (f32). `[n, hidden]`.
    pub fn embed(&self, ids: &[i64]) -> Result<Tensor> {
        let idx = ids
            .iter()
            .map(|&id| {
                u32::try_from(id)
                    .ok()
                    .filter(|&i| (i as usize) < self.vocab_size)
                    .ok_or_else(|| Error::input(format!("token id {id} outside vocabulary 0..{}", self.vocab_size)))
            })
            .collect::<Result<Vec<u32>>>()?;
        let rows = match &self.embedding {
            TokenEmbedding::Transposed(embed_t) => {
                let idx = Tensor::from_vec(idx, ids.len(), &self.device)?;
                // Gathered in the matrix dtype (f32 in the f64 mode), then in the compute dtype.
                embed_t.index_select(&idx, 1)?.t()?.to_dtype(self.dtype)?.contiguous()?
            }
            TokenEmbedding::Rows(table) => table.gather(&idx)?.to_dtype(self.dtype)?,
        };
        Ok(rows.affine(self.embed_scale as f64, 0.0)?)
    }

    /// Whether the decoder takes per-layer inputs (gemma4 PLE).
    pub fn has_per_layer_inputs(&self) -> bool {
        self.per_layer_embedding.is_some()
    }

    /// The PLE inputs `[S, L, P]` of a forward: token part from `table_ids` (placeholders already
    /// replaced by pad), projection part from the decoder's input embeddings `embeds`
    /// `[S, hidden]`. `None` for decoders without PLE.
    pub fn per_layer_inputs(&self, table_ids: &[i64], embeds: &Tensor) -> Result<Option<Tensor>> {
        self.per_layer_embedding.as_ref().map(|p| p.forward(table_ids, embeds)).transpose()
    }

    /// An empty cache sized for `capacity` positions.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        KvCache::new(&self.cache_layout, capacity, self.dtype, &self.device)
    }

    /// Runs `embeds` (`[seq, hidden]`, positions `cache.len()..`) with their PLE inputs (`[seq,
    /// L, P]`, PLE decoders only) through the decoder, extends the cache, and returns logits
    /// `[seq, vocab]` (after softcapping) for every position.
    pub fn forward(&self, embeds: &Tensor, per_layer_inputs: Option<&Tensor>, mask_rule: &MaskRule, cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.forward_hidden(embeds, per_layer_inputs, mask_rule, cache)?;
        self.logits(&hidden)
    }

    /// Decoder stack plus final norm: `[seq, hidden]`.
    pub fn forward_hidden(
        &self,
        embeds: &Tensor,
        per_layer_inputs: Option<&Tensor>,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        self.forward_layers(embeds, per_layer_inputs, mask_rule, cache, None, None)
    }

    /// Like [`Self::forward_hidden`], also collecting every decoder layer's output (HF
    /// `output_hidden_states` order: layer 0 … layer L−1, before the final norm).
    pub fn forward_collect(
        &self,
        embeds: &Tensor,
        per_layer_inputs: Option<&Tensor>,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mut c = Collected::default();
        let h = self.forward_layers(embeds, per_layer_inputs, mask_rule, cache, Some(&mut c), None)?;
        Ok((h, c.states))
    }

    /// Like [`Self::forward_collect`], also keeping each layer's module outputs (HF names, in
    /// forward order: `input_layernorm`, `self_attn`, … `post_feedforward_layernorm`), which
    /// name the part of a layer where a divergence starts.
    pub fn forward_collect_modules(
        &self,
        embeds: &Tensor,
        per_layer_inputs: Option<&Tensor>,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
    ) -> Result<(Tensor, Collected)> {
        let mut c = Collected { keep_modules: true, ..Default::default() };
        let h = self.forward_layers(embeds, per_layer_inputs, mask_rule, cache, Some(&mut c), None)?;
        Ok((h, c))
    }

    /// Each layer run **locally**: layer `i` is fed `streams[i]` (`[seq, hidden]`, the residual
    /// stream entering it in another run, cast to the compute dtype) instead of the previous
    /// layer's output; a KV-shared layer reads the keys/values its source layer computed from
    /// the stream fed to the source. Collects each layer's output and its modules' — what a
    /// layer alone does at this precision on another run's inputs (the local error floor).
    pub fn forward_local(
        &self,
        streams: &[Tensor],
        per_layer_inputs: Option<&Tensor>,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
    ) -> Result<Collected> {
        if streams.len() != self.layers.len() {
            return Err(Error::Internal(format!("{} streams for {} layers", streams.len(), self.layers.len())));
        }
        let mut c = Collected { keep_modules: true, ..Default::default() };
        self.forward_layers(&streams[0], per_layer_inputs, mask_rule, cache, Some(&mut c), Some(streams))?;
        Ok(c)
    }

    fn forward_layers(
        &self,
        embeds: &Tensor,
        per_layer_inputs: Option<&Tensor>,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
        mut collect: Option<&mut Collected>,
        feed: Option<&[Tensor]>,
    ) -> Result<Tensor> {
        let seq = embeds.dim(0)?;
        let start = cache.len();
        let positions: Vec<usize> = (start..start + seq).collect();
        let kv_len = start + seq;
        debug_assert_eq!(mask_rule.sliding_window, self.sliding_window);

        let mut per_type = Vec::with_capacity(self.ropes.len());
        for (lt, rope) in &self.ropes {
            let (cos, sin) = rope.cos_sin(&positions, self.dtype, &self.device)?;
            let mask = mask_rule.bias(*lt, start, seq, kv_len, self.dtype, &self.device)?;
            per_type.push((*lt, cos, sin, mask));
        }
        if self.has_per_layer_inputs() != per_layer_inputs.is_some() {
            return Err(Error::Internal(format!(
                "decoder {} per-layer inputs but was {} them",
                if self.has_per_layer_inputs() { "takes" } else { "takes no" },
                if per_layer_inputs.is_some() { "given" } else { "not given" }
            )));
        }
        let mut x = embeds.clone();
        for (i, (layer, lt)) in self.layers.iter().zip(&self.layer_types).enumerate() {
            let (_, cos, sin, mask) =
                per_type.iter().find(|(t, ..)| t == lt).ok_or_else(|| Error::Internal(format!("no RoPE for {}", lt.as_str())))?;
            // `per_layer_inputs[:, :, i, :]`, contiguous for the fused gate kernel.
            let ple_i = per_layer_inputs.map(|p| p.narrow(1, i, 1).and_then(|t| t.squeeze(1)?.contiguous())).transpose()?;
            let mut modules = collect.as_ref().filter(|c| c.keep_modules).map(|_| ModuleOutputs::new());
            if let Some(stream) = feed.and_then(|f| f.get(i)) {
                x = stream.to_dtype(self.dtype)?;
            }
            if i == 0 {
                x = self.entering_layer0(&x)?;
            }
            x = layer.forward(&x, ple_i.as_ref(), (cos, sin), mask.as_ref(), cache, modules.as_mut())?;
            if let Some(c) = collect.as_deref_mut() {
                c.states.push(self.kept(x.clone())?);
                if let Some(m) = modules {
                    c.modules.push(m.into_iter().map(|(name, t)| Ok((name, self.kept(t)?))).collect::<Result<_>>()?);
                }
            }
        }
        cache.advance();
        self.norm.forward(&x)
    }

    /// The stream entering layer 0 as the layer reads it: the input embeddings, or, where a QDQ
    /// build quantizes them for the per-layer projection and so for every reader (its QuantizeLinear
    /// → DequantizeLinear pair sits on the tensor itself), their rounded values.
    fn entering_layer0(&self, x: &Tensor) -> Result<Tensor> {
        match &self.per_layer_embedding {
            Some(p) => p.stream(x),
            None => Ok(x.clone()),
        }
    }

    /// `lm_head` and final logit softcapping `tanh(x / c) · c`: `[seq, vocab]` (in the dtype
    /// outputs are kept in, [`TextModel::keep_outputs_in`]).
    ///
    /// The logits are the largest activation of a prefill (`seq × vocab`). For more than a few
    /// rows they are computed in vocabulary slices of [`VOCAB_SLICE`] columns written into one
    /// preallocated output: the gemm kernel's packing buffer scales with the columns of a call
    /// (a full-vocabulary call packs as much as the logits themselves), and each slice is
    /// softcapped in place. The slice is wide because narrower calls are slower (measured on
    /// the 256-token benchmark, vocab 32768: 4096-column slices 250-280 ms, one call 200-210 ms,
    /// the same peak RSS). Slicing columns does not change any element's accumulation order, so
    /// the result is identical.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let seq = hidden.dim(0)?;
        let vocab = self.vocab_size;
        // Off the CPU one call: cuBLAS cannot take a column slice of the weight as its operand
        // (candle's CUDA matmul wants a leading dimension equal to the columns). A weight held in
        // another dtype (f32 in the f64 mode) is sliced whatever the rows, so that only one
        // slice is ever upcast (the whole vocabulary would be an f64 copy of the embedding).
        let upcast = self.lm_head.weight_dtype() != hidden.dtype();
        if (seq < 16 && !upcast) || vocab <= VOCAB_SLICE || !self.device.is_cpu() {
            let logits = self.lm_head.forward(hidden)?;
            return self.kept(match self.softcap {
                Some(c) => softcap(logits, c)?,
                None => logits,
            });
        }
        let out = Tensor::zeros((seq, vocab), self.outputs_dtype.unwrap_or(self.dtype), &self.device)?;
        let x = self.lm_head.input(hidden)?;
        for start in (0..vocab).step_by(VOCAB_SLICE) {
            let cols = VOCAB_SLICE.min(vocab - start);
            let part = self.lm_head.forward_columns(&x, start, cols)?;
            let part = match self.softcap {
                Some(c) => softcap(part, c)?,
                None => part,
            };
            out.slice_set(&self.kept(part)?, 1, start)?;
        }
        Ok(out)
    }

    /// The lm_head and softcapping as a value that outlives this model (see [`LogitsHead`]).
    pub fn logits_head(&self) -> LogitsHead {
        LogitsHead::new(self.head_rows.clone(), self.softcap, self.lm_head.activations())
    }

    /// The sliding window the masks must use.
    pub fn sliding_window(&self) -> usize {
        self.sliding_window
    }

    /// The compute dtype (f32, or f64 in precision mode).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on (the one [`Weights::with_device`] chose; CPU by default).
    pub fn device(&self) -> &Device {
        &self.device
    }
}
