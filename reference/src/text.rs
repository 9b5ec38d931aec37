//! The Gemma4Unified text decoder (`Gemma4UnifiedTextModel` + `lm_head` + softcapping).
//!
//! Follows `modeling_gemma4_unified.py` line by line; the points that differ from Gemma 1–3
//! and from candle-transformers' `gemma4` module are called out where they happen:
//! RMSNorm weight multiplies as is, attention scaling is 1.0 (q and k are RMS-normed), full
//! layers have their own head dim / KV heads and (with `attention_k_eq_v`) take values from the
//! raw `k_proj` output, KV-shared layers read the K/V of the last non-shared layer of their type,
//! every layer ends with `× layer_scalar`.
//!
//! Activations are kept 2-D (`[seq, hidden]`): the reference runs one sequence (batch 1).

use candle_core::{DType, Device, Tensor, D};

use crate::config::{Activation, Gemma4UnifiedTextConfig, LayerType};
use crate::error::{Error, Result};
use crate::kv_cache::{CacheLayout, KvCache};
use crate::mask::MaskRule;
use crate::norm::RmsNorm;
use crate::ops::{gated_activation, SoftCap};
use crate::rope::Rope;
use crate::weights::Weights;

/// `nn.Linear`: `x · Wᵀ (+ b)`. `W` is stored `[out, in]` in the checkpoint and kept
/// transposed, `weight_t = Wᵀ` (`[in, out]`, contiguous), so the matmul reads a row-major
/// right-hand side (see [`Weights::get_t`]).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    weight_t: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub(crate) fn load(w: &Weights, prefix: &str, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        Ok(Self {
            weight_t: w.get_t(&format!("{prefix}.weight"), [out_dim, in_dim])?,
            bias: if bias { Some(w.get(&format!("{prefix}.bias"), &[out_dim])?) } else { None },
        })
    }

    /// A bias-free Linear from an already transposed weight `[in, out]`.
    pub(crate) fn from_weight_t(weight_t: Tensor) -> Self {
        Self { weight_t, bias: None }
    }

    /// Output columns `start..start + cols` only (no bias): `[n, cols]`.
    pub(crate) fn forward_columns(&self, x: &Tensor, start: usize, cols: usize) -> Result<Tensor> {
        Ok(x.matmul(&self.weight_t.narrow(1, start, cols)?)?)
    }

    /// `x`: `[n, in]` → `[n, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul(&self.weight_t)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// Where a layer's keys and values come from.
#[derive(Debug)]
enum KvSource {
    /// Own projections. `v_proj = None` means `attention_k_eq_v`: values are the raw `k_proj`
    /// output (before `k_norm`), normed by the scale-free `v_norm`.
    Own { k_proj: Linear, v_proj: Option<Linear>, k_norm: RmsNorm, v_norm: RmsNorm },
    /// KV-shared layer: reads layer `source`'s cache.
    Shared { source: usize },
}

#[derive(Debug)]
struct Attention {
    layer: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    q_proj: Linear,
    q_norm: RmsNorm,
    kv: KvSource,
    o_proj: Linear,
}

impl Attention {
    fn load(cfg: &Gemma4UnifiedTextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
        let lt = cfg.layer_type(layer);
        let hd = cfg.head_dim(lt);
        let nh = cfg.num_attention_heads;
        let nkv = cfg.num_kv_heads(lt)?;
        let hidden = cfg.hidden_size;
        let bias = cfg.attention_bias;
        let eps = cfg.rms_norm_eps;
        let kv = match cfg.kv_source_layer(layer)? {
            Some(source) => KvSource::Shared { source },
            None => KvSource::Own {
                k_proj: Linear::load(w, &format!("{prefix}.k_proj"), hidden, nkv * hd, bias)?,
                v_proj: if cfg.uses_k_eq_v(lt) {
                    None
                } else {
                    Some(Linear::load(w, &format!("{prefix}.v_proj"), hidden, nkv * hd, bias)?)
                },
                k_norm: RmsNorm::load(w, &format!("{prefix}.k_norm"), hd, eps)?,
                v_norm: RmsNorm::scale_free(eps),
            },
        };
        Ok(Self {
            layer,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
            q_proj: Linear::load(w, &format!("{prefix}.q_proj"), hidden, nh * hd, bias)?,
            q_norm: RmsNorm::load(w, &format!("{prefix}.q_norm"), hd, eps)?,
            kv,
            o_proj: Linear::load(w, &format!("{prefix}.o_proj"), nh * hd, hidden, bias)?,
        })
    }

    /// `x`: `[seq, hidden]` at positions `cache.len()..`; `mask`: additive `[seq, kv_len]`.
    fn forward(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mask: Option<&Tensor>, cache: &mut KvCache) -> Result<Tensor> {
        let seq = x.dim(0)?;
        let (nh, nkv, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);

        // q: proj → view [seq, heads, hd] → q_norm → RoPE → [heads, seq, hd]
        let q = self.q_proj.forward(x)?.reshape((1, seq, nh, hd))?;
        let q = self.q_norm.forward(&q)?;
        let q = Rope::apply(&q, cos, sin)?.squeeze(0)?.transpose(0, 1)?.contiguous()?;

        let (k, v) = match &self.kv {
            KvSource::Shared { source } => cache.view(*source, cache.len() + seq)?,
            KvSource::Own { k_proj, v_proj, k_norm, v_norm } => {
                let k_raw = k_proj.forward(x)?.reshape((1, seq, nkv, hd))?;
                let v_raw = match v_proj {
                    Some(p) => p.forward(x)?.reshape((1, seq, nkv, hd))?,
                    None => k_raw.clone(),
                };
                let k = k_norm.forward(&k_raw)?;
                let k = Rope::apply(&k, cos, sin)?.squeeze(0)?.transpose(0, 1)?;
                let v = v_norm.forward(&v_raw)?.squeeze(0)?.transpose(0, 1)?;
                cache.append(self.layer, &k, &v)?
            }
        };
        let kv_len = k.dim(1)?;

        // Grouped-query attention without materialising repeat_kv: query head h uses KV head
        // h / n_rep, so the heads of one group are stacked along the row axis.
        let n_rep = nh / nkv;
        let q = q.reshape((nkv, n_rep * seq, hd))?;
        // scaling = 1.0 (q and k are normed); no attention softcapping in Gemma 4.
        let scores = q.matmul(&k.t()?)?.reshape((nh, seq, kv_len))?;
        let scores = match mask {
            Some(m) => scores.broadcast_add(m)?,
            None => scores,
        };
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let out =
            probs.reshape((nkv, n_rep * seq, kv_len))?.matmul(&v)?.reshape((nh, seq, hd))?.transpose(0, 1)?.reshape((seq, nh * hd))?;
        self.o_proj.forward(&out)
    }
}

#[derive(Debug)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    act: Activation,
}

impl Mlp {
    fn load(cfg: &Gemma4UnifiedTextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
        let h = cfg.hidden_size;
        let i = cfg.intermediate_size_for(layer);
        Ok(Self {
            gate_proj: Linear::load(w, &format!("{prefix}.gate_proj"), h, i, false)?,
            up_proj: Linear::load(w, &format!("{prefix}.up_proj"), h, i, false)?,
            down_proj: Linear::load(w, &format!("{prefix}.down_proj"), i, h, false)?,
            act: cfg.activation()?,
        })
    }

    /// `down(act(gate(x)) · up(x))`; `act(gate)·up` is fused in place into the gate output.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?;
        let up = self.up_proj.forward(x)?;
        let hidden = gated_activation(self.act, gate, &up)?;
        self.down_proj.forward(&hidden)
    }
}

#[derive(Debug)]
struct DecoderLayer {
    attn: Attention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
    /// Stored buffer `[1]`, multiplied into the layer output.
    layer_scalar: Tensor,
}

impl DecoderLayer {
    fn load(cfg: &Gemma4UnifiedTextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
        let h = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let norm = |name: &str| RmsNorm::load(w, &format!("{prefix}.{name}"), h, eps);
        Ok(Self {
            attn: Attention::load(cfg, w, &format!("{prefix}.self_attn"), layer)?,
            mlp: Mlp::load(cfg, w, &format!("{prefix}.mlp"), layer)?,
            input_layernorm: norm("input_layernorm")?,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            pre_feedforward_layernorm: norm("pre_feedforward_layernorm")?,
            post_feedforward_layernorm: norm("post_feedforward_layernorm")?,
            layer_scalar: w.get(&format!("{prefix}.layer_scalar"), &[1])?,
        })
    }

    fn forward(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mask: Option<&Tensor>, cache: &mut KvCache) -> Result<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let h = self.attn.forward(&h, cos, sin, mask, cache)?;
        let h = self.post_attention_layernorm.forward(&h)?;
        let x = (x + h)?;
        let h = self.pre_feedforward_layernorm.forward(&x)?;
        let h = self.mlp.forward(&h)?;
        let h = self.post_feedforward_layernorm.forward(&h)?;
        let x = (x + h)?;
        Ok(x.broadcast_mul(&self.layer_scalar)?)
    }
}

/// Vocabulary columns per `lm_head` call in a prefill (see [`TextModel::logits`]).
const VOCAB_SLICE: usize = 4096;

/// Embedding, decoder stack, final norm, tied `lm_head`, final logit softcapping.
#[derive(Debug)]
pub struct TextModel {
    /// `embed_tokens.weight` transposed, `[hidden, vocab]`: shared with a tied `lm_head`
    /// (whose matmul wants this layout); token lookups gather columns.
    embed_t: Tensor,
    embed_scale: f32,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    softcap: Option<f64>,
    ropes: Vec<(LayerType, Rope)>,
    layer_types: Vec<LayerType>,
    sliding_window: usize,
    cache_layout: CacheLayout,
    vocab_size: usize,
    dtype: DType,
    device: Device,
}

impl TextModel {
    /// Loads the decoder under `prefix` (`model.language_model` or `model`). `lm_head.weight`
    /// is used when present; otherwise, when `tie_word_embeddings`, the token embedding (HF
    /// ties symmetrically and skips tying when both exist with different values).
    pub fn load(cfg: &Gemma4UnifiedTextConfig, w: &Weights, prefix: &str, tie: bool) -> Result<Self> {
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let embed_t = w.get_t(&format!("{prefix}.embed_tokens.weight"), [v, h])?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::load(cfg, w, &format!("{prefix}.layers.{i}"), i))
            .collect::<Result<Vec<_>>>()?;
        let lm_head = match w.get_opt_t("lm_head.weight", [v, h])? {
            Some(t) => Linear::from_weight_t(t),
            None if tie => Linear::from_weight_t(embed_t.clone()),
            None => {
                return Err(Error::MissingTensor {
                    name: "lm_head.weight".into(),
                    location: "checkpoint (tie_word_embeddings is false)".into(),
                })
            }
        };
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
            embed_t,
            embed_scale: cfg.embed_scale(),
            layers,
            norm: RmsNorm::load(w, &format!("{prefix}.norm"), h, cfg.rms_norm_eps)?,
            lm_head,
            softcap: cfg.final_logit_softcapping,
            ropes,
            layer_types,
            sliding_window: cfg.sliding_window,
            cache_layout,
            vocab_size: v,
            dtype: w.dtype(),
            device: Device::Cpu,
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
        let idx = Tensor::from_vec(idx, ids.len(), &self.device)?;
        let rows = self.embed_t.index_select(&idx, 1)?.t()?.contiguous()?;
        Ok(rows.affine(self.embed_scale as f64, 0.0)?)
    }

    /// An empty cache sized for `capacity` positions.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        KvCache::new(&self.cache_layout, capacity, self.dtype, &self.device)
    }

    /// Runs `embeds` (`[seq, hidden]`, positions `cache.len()..`) through the decoder, extends
    /// the cache, and returns logits `[seq, vocab]` (after softcapping) for every position.
    pub fn forward(&self, embeds: &Tensor, mask_rule: &MaskRule, cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.forward_hidden(embeds, mask_rule, cache)?;
        self.logits(&hidden)
    }

    /// Decoder stack plus final norm: `[seq, hidden]`.
    pub fn forward_hidden(&self, embeds: &Tensor, mask_rule: &MaskRule, cache: &mut KvCache) -> Result<Tensor> {
        self.forward_layers(embeds, mask_rule, cache, None)
    }

    /// Like [`Self::forward_hidden`], also collecting every decoder layer's output (HF
    /// `output_hidden_states` order: layer 0 … layer L−1, before the final norm).
    pub fn forward_collect(&self, embeds: &Tensor, mask_rule: &MaskRule, cache: &mut KvCache) -> Result<(Tensor, Vec<Tensor>)> {
        let mut states = Vec::with_capacity(self.layers.len());
        let h = self.forward_layers(embeds, mask_rule, cache, Some(&mut states))?;
        Ok((h, states))
    }

    fn forward_layers(
        &self,
        embeds: &Tensor,
        mask_rule: &MaskRule,
        cache: &mut KvCache,
        mut collect: Option<&mut Vec<Tensor>>,
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
        let mut x = embeds.clone();
        for (layer, lt) in self.layers.iter().zip(&self.layer_types) {
            let (_, cos, sin, mask) =
                per_type.iter().find(|(t, ..)| t == lt).ok_or_else(|| Error::input(format!("no RoPE for {}", lt.as_str())))?;
            x = layer.forward(&x, cos, sin, mask.as_ref(), cache)?;
            if let Some(states) = collect.as_deref_mut() {
                states.push(x.clone());
            }
        }
        cache.advance();
        self.norm.forward(&x)
    }

    /// `lm_head` and final logit softcapping `tanh(x / c) · c`: `[seq, vocab]`.
    ///
    /// The logits are the largest activation of a prefill (`seq × vocab`). For more than a few
    /// rows they are computed in vocabulary slices of [`VOCAB_SLICE`] columns written into one
    /// preallocated output: the gemm kernel's packing buffer scales with the columns of a call
    /// (a full-vocabulary call packs as much as the logits themselves), and each slice is
    /// softcapped in place while it is hot in cache. Slicing columns does not change any
    /// element's accumulation order, so the result is identical.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let seq = hidden.dim(0)?;
        let vocab = self.vocab_size;
        if seq < 16 || vocab <= VOCAB_SLICE {
            let logits = self.lm_head.forward(hidden)?;
            if let Some(c) = self.softcap {
                logits.inplace_op1(&SoftCap(c))?;
            }
            return Ok(logits);
        }
        let out = Tensor::zeros((seq, vocab), self.dtype, &self.device)?;
        for start in (0..vocab).step_by(VOCAB_SLICE) {
            let cols = VOCAB_SLICE.min(vocab - start);
            let part = self.lm_head.forward_columns(hidden, start, cols)?;
            if let Some(c) = self.softcap {
                part.inplace_op1(&SoftCap(c))?;
            }
            out.slice_set(&part, 1, start)?;
        }
        Ok(out)
    }

    /// The sliding window the masks must use.
    pub fn sliding_window(&self) -> usize {
        self.sliding_window
    }

    /// The compute dtype (f32, or f64 in precision mode).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on (CPU).
    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// Helper: `[seq, d]` last-dim size check with a named error.
pub(crate) fn expect_last_dim(t: &Tensor, want: usize, what: &str) -> Result<()> {
    let got = t.dim(D::Minus1)?;
    if got != want {
        return Err(Error::input(format!("{what}: last dim {got}, expected {want}")));
    }
    Ok(())
}
