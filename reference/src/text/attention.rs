//! Decoder self-attention (`Gemma4TextAttention`, identical in both families).
//!
//! Attention scaling is 1.0 (q and k are RMS-normed); full layers have their own head dim / KV
//! heads and, with `attention_k_eq_v`, take values from the raw `k_proj` output; KV-shared layers
//! read the K/V of the last non-shared layer of their type.

use candle_core::Tensor;

use crate::config::TextConfig;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::nn::linear::Linear;
use crate::nn::norm::RmsNorm;
use crate::nn::rope::Rope;
use crate::weights::Weights;

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
pub(crate) struct Attention {
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
    pub(crate) fn load(cfg: &TextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
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
    pub(crate) fn forward(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mask: Option<&Tensor>, cache: &mut KvCache) -> Result<Tensor> {
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
        let out = grouped_attention(&q, &k, &v, mask, nh, nkv)?;
        self.o_proj.forward(&out)
    }
}

/// Eager attention with scaling 1.0 (both Gemma 4 attentions: q/k are normed): `q` `[heads, seq,
/// hd]` (contiguous), `k`/`v` `[kv_heads, kv_len, hd]`, additive `mask` `[seq, kv_len]` →
/// `[seq, heads·hd]`. Grouped-query attention without materialising `repeat_kv`: query head h
/// uses KV head h / n_rep, so the heads of one group are stacked along the row axis.
pub(crate) fn grouped_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, nh: usize, nkv: usize) -> Result<Tensor> {
    let (_, seq, hd) = q.dims3()?;
    let kv_len = k.dim(1)?;
    let n_rep = nh / nkv;
    let q = q.reshape((nkv, n_rep * seq, hd))?;
    let scores = q.matmul(&k.t()?)?.reshape((nh, seq, kv_len))?;
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?,
        None => scores,
    };
    let probs = crate::nn::ops::softmax_last_dim(&scores)?;
    Ok(probs.reshape((nkv, n_rep * seq, kv_len))?.matmul(v)?.reshape((nh, seq, hd))?.transpose(0, 1)?.reshape((seq, nh * hd))?)
}
