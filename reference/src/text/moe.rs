//! The routed-experts block of gemma4 MoE decoders (`Gemma4TextRouter`, `Gemma4TextExperts`,
//! the MoE branch of `Gemma4TextDecoderLayer.forward`; modeling_gemma4.py M:1299-1450).
//!
//! It runs *beside* the dense MLP, on the same post-attention residual `r`:
//! ```text
//! z   = RMSNorm_noscale(r) · router.scale · H^-0.5          two multiplies, left to right
//! p   = softmax(z @ router.projᵀ)                            over all experts, f32
//! w,e = topk(p, k);  w = w / Σw;  w = w · per_expert_scale[e]
//! y   = Σ_{e ascending} w_e · down_e(act(gate_e(x)) · up_e(x))   x = pre_feedforward_layernorm_2(r)
//! out = post_feedforward_layernorm_1(mlp) + post_feedforward_layernorm_2(y)
//! ```
//! The sum over experts follows HF's *eager* experts (`experts_implementation="eager"`): starting
//! from zeros, expert by expert in ascending id, each contribution rounded before it is added.
//! HF's default `grouped_mm` adds the k contributions in rank order in f32 and rounds its matmuls
//! differently; the fixtures' oracles use eager, the order this reproduces.

use candle_core::{DType, Tensor};

use crate::config::{Activation, MoeSpec, TextConfig};
use crate::error::{Error, Result};
use crate::nn::linear::Linear;
use crate::nn::norm::RmsNorm;
use crate::nn::ops::gated_activation;
use crate::nn::reduce::torch_sum;
use crate::weights::Weights;

/// `Gemma4TextRouter`.
#[derive(Debug)]
struct Router {
    norm: RmsNorm,
    /// `router.scale` `[hidden]`.
    scale: Tensor,
    proj: Linear,
    /// `router.per_expert_scale` `[experts]`, as exact f64 values of the stored weights.
    per_expert_scale: Vec<f64>,
    /// `hidden_size**-0.5` (a Python float: applied as the dtype's scalar).
    root: f64,
    top_k: usize,
}

/// Which experts each token goes to, with which weights (rank order, as `topk` returns them).
#[derive(Debug, Clone, PartialEq)]
struct Routing {
    /// `[tokens][k]` expert ids.
    experts: Vec<Vec<usize>>,
    /// `[tokens][k]` final weights, exact values of the compute dtype.
    weights: Vec<Vec<f64>>,
}

/// Rounds host-side arithmetic to the compute dtype: each f32 operation is an f64 operation
/// rounded once to f32, which for a single +, −, ×, ÷ of f32 operands is exactly the f32
/// operation (53 ≥ 2·24 + 2 bits: double rounding is innocuous).
#[derive(Debug, Clone, Copy)]
enum Precision {
    F32,
    F64,
}

impl Precision {
    fn of(dtype: DType) -> Self {
        if dtype == DType::F64 {
            Precision::F64
        } else {
            Precision::F32
        }
    }
    fn round(self, x: f64) -> f64 {
        match self {
            Precision::F32 => x as f32 as f64,
            Precision::F64 => x,
        }
    }
    /// `tensor.sum(-1)` over a short row, in torch's order for f32.
    fn sum(self, xs: &[f64]) -> f64 {
        match self {
            Precision::F32 => torch_sum(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>()) as f64,
            Precision::F64 => xs.iter().sum(),
        }
    }
}

/// Values of a 1-D or 2-D float tensor as f64 (exact for f32).
fn host_f64(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?)
}

impl Router {
    fn load(cfg: &TextConfig, moe: MoeSpec, w: &Weights, prefix: &str) -> Result<Self> {
        let (h, e) = (cfg.hidden_size, moe.num_experts);
        Ok(Self {
            norm: RmsNorm::scale_free(cfg.rms_norm_eps),
            scale: w.get(&format!("{prefix}.scale"), &[h])?,
            proj: Linear::load(w, &format!("{prefix}.proj"), h, e, false)?,
            per_expert_scale: host_f64(&w.get(&format!("{prefix}.per_expert_scale"), &[e])?)?,
            root: (h as f64).powf(-0.5),
            top_k: moe.top_k,
        })
    }

    /// Routes every row of the residual `r` `[T, hidden]`.
    fn route(&self, r: &Tensor) -> Result<Routing> {
        let prec = Precision::of(r.dtype());
        let z = self.norm.forward(r)?.broadcast_mul(&self.scale)?.affine(self.root, 0.0)?;
        let scores = self.proj.forward(&z)?;
        let probs = crate::nn::ops::softmax_last_dim(&scores)?;
        let (t, e) = probs.dims2()?;
        let probs = host_f64(&probs)?;
        let mut routing = Routing { experts: Vec::with_capacity(t), weights: Vec::with_capacity(t) };
        for row in probs.chunks(e) {
            if row.iter().any(|p| !p.is_finite()) {
                return Err(Error::input("router probabilities are not finite (NaN or Inf in the residual stream)"));
            }
            // topk: value descending; equal values keep the lower expert id first.
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            order.truncate(self.top_k);
            let picked: Vec<f64> = order.iter().map(|&i| row[i]).collect();
            let total = prec.sum(&picked);
            let weights = order.iter().zip(&picked).map(|(&i, &p)| prec.round(prec.round(p / total) * self.per_expert_scale[i])).collect();
            routing.experts.push(order);
            routing.weights.push(weights);
        }
        Ok(routing)
    }
}

/// `Gemma4TextExperts`: `gate_up_proj [E, 2I, H]` (gate rows first, then up) and
/// `down_proj [E, H, I]`, stored without a `.weight` suffix, kept as stored.
///
/// Each expert sees only the few tokens routed to it (T·k/E rows), a shape at which the gemm
/// kernel is much faster as `W · xᵀ` (M = 2I or H large, N = the tokens) than as `x · Wᵀ`; the
/// stored layout is exactly that `W`, and the gate and up halves of `W · xᵀ` are contiguous row
/// blocks.
#[derive(Debug)]
struct Experts {
    /// `[E, 2I, H]`.
    gate_up: Tensor,
    /// `[E, H, I]`.
    down: Tensor,
    intermediate: usize,
    act: Activation,
}

impl Experts {
    fn load(cfg: &TextConfig, moe: MoeSpec, w: &Weights, prefix: &str) -> Result<Self> {
        let (e, h, i) = (moe.num_experts, cfg.hidden_size, moe.intermediate_size);
        Ok(Self {
            gate_up: w.get(&format!("{prefix}.gate_up_proj"), &[e, 2 * i, h])?,
            down: w.get(&format!("{prefix}.down_proj"), &[e, h, i])?,
            intermediate: i,
            act: cfg.activation()?,
        })
    }

    /// `x` `[T, hidden]` → `[T, hidden]`: HF's eager loop (see the module doc).
    fn forward(&self, x: &Tensor, routing: &Routing) -> Result<Tensor> {
        let (t, h) = x.dims2()?;
        let n_experts = self.gate_up.dim(0)?;
        let i = self.intermediate;
        let mut out = Accumulator::new(x.dtype(), t * h);
        for e in 0..n_experts {
            // Rows in HF's `torch.where(expert_mask[e])` order: rank k, then token.
            let mut rows: Vec<(usize, f64)> = Vec::new();
            for k in 0..routing.experts.first().map_or(0, Vec::len) {
                for (tok, (ids, ws)) in routing.experts.iter().zip(&routing.weights).enumerate() {
                    if ids[k] == e {
                        rows.push((tok, ws[k]));
                    }
                }
            }
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let tokens = Tensor::from_vec(rows.iter().map(|&(tok, _)| tok as u32).collect::<Vec<_>>(), n, x.device())?;
            let xs_t = x.index_select(&tokens, 0)?.t()?.contiguous()?; // [H, n]
            let gate_up = self.gate_up.get(e)?.matmul(&xs_t)?; // [2I, n]
                                                               // An owned copy: the in-place kernel must not alias `up`'s buffer.
            let gate = gate_up.narrow(0, 0, i)?.copy()?;
            let up = gate_up.narrow(0, i, i)?.contiguous()?;
            let hidden = gated_activation(self.act, gate, &up)?; // [I, n]
            let y_t = self.down.get(e)?.matmul(&hidden)?; // [H, n]
            let w = Tensor::from_vec(rows.iter().map(|&(_, w)| w).collect::<Vec<_>>(), (1, n), x.device())?.to_dtype(x.dtype())?;
            out.add_columns(&y_t.broadcast_mul(&w)?, rows.iter().map(|&(tok, _)| tok), h)?;
        }
        Ok(out.into_tensor((t, h), x.device())?.to_dtype(x.dtype())?)
    }
}

/// `out[tok] += rows[j]` for the j-th token, rows of width `h`.
fn add_rows<T: Copy + std::ops::AddAssign>(out: &mut [T], rows: &[T], tokens: impl Iterator<Item = usize>, h: usize) {
    for (row, tok) in rows.chunks(h).zip(tokens) {
        for (o, &v) in out[tok * h..(tok + 1) * h].iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// The experts' output buffer, summed in the compute dtype like HF's `index_add_`.
enum Accumulator {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Accumulator {
    fn new(dtype: DType, len: usize) -> Self {
        if dtype == DType::F64 {
            Accumulator::F64(vec![0.0; len])
        } else {
            Accumulator::F32(vec![0.0; len])
        }
    }

    /// `out[tok] += y_t[:, j]` for the j-th token of `tokens` (`y_t`: `[hidden, n]`).
    fn add_columns(&mut self, y_t: &Tensor, tokens: impl Iterator<Item = usize>, h: usize) -> Result<()> {
        // One transposing copy, then contiguous row additions.
        let y = y_t.t()?.contiguous()?;
        match self {
            Accumulator::F32(out) => add_rows(out, &y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?, tokens, h),
            Accumulator::F64(out) => add_rows(out, &y.flatten_all()?.to_vec1::<f64>()?, tokens, h),
        }
        Ok(())
    }

    fn into_tensor(self, shape: (usize, usize), device: &candle_core::Device) -> Result<Tensor> {
        Ok(match self {
            Accumulator::F32(v) => Tensor::from_vec(v, shape, device)?,
            Accumulator::F64(v) => Tensor::from_vec(v, shape, device)?,
        })
    }
}

/// The MoE branch of one decoder layer with its three extra norms.
#[derive(Debug)]
pub(crate) struct MoeBlock {
    router: Router,
    experts: Experts,
    pre_feedforward_layernorm_2: RmsNorm,
    post_feedforward_layernorm_1: RmsNorm,
    post_feedforward_layernorm_2: RmsNorm,
}

impl MoeBlock {
    pub(crate) fn load(cfg: &TextConfig, moe: MoeSpec, w: &Weights, prefix: &str) -> Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let norm = |name: &str| RmsNorm::load(w, &format!("{prefix}.{name}"), h, eps);
        Ok(Self {
            router: Router::load(cfg, moe, w, &format!("{prefix}.router"))?,
            experts: Experts::load(cfg, moe, w, &format!("{prefix}.experts"))?,
            pre_feedforward_layernorm_2: norm("pre_feedforward_layernorm_2")?,
            post_feedforward_layernorm_1: norm("post_feedforward_layernorm_1")?,
            post_feedforward_layernorm_2: norm("post_feedforward_layernorm_2")?,
        })
    }

    /// `residual` `[T, hidden]` (the post-attention stream) and the dense MLP's output `mlp` →
    /// `post_ff_1(mlp) + post_ff_2(experts(pre_ff_2(residual)))`.
    /// With `keep`, the block's norm outputs by HF name (where a divergence inside it shows).
    pub(crate) fn forward(&self, residual: &Tensor, mlp: &Tensor, mut keep: impl FnMut(&'static str, &Tensor)) -> Result<Tensor> {
        let h1 = self.post_feedforward_layernorm_1.forward(mlp)?;
        keep("post_feedforward_layernorm_1", &h1);
        let routing = self.router.route(residual)?;
        let x = self.pre_feedforward_layernorm_2.forward(residual)?;
        keep("pre_feedforward_layernorm_2", &x);
        let h2 = self.post_feedforward_layernorm_2.forward(&self.experts.forward(&x, &routing)?)?;
        keep("post_feedforward_layernorm_2", &h2);
        Ok((h1 + h2)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: f32 host arithmetic through f64 rounds exactly like f32 (one rounding per op).
    #[test]
    fn precision_rounds_like_f32() {
        let (a, b) = (0.1f32, 0.7f32);
        assert_eq!(Precision::F32.round(a as f64 / b as f64) as f32, a / b);
        assert_eq!(Precision::F32.round(a as f64 * b as f64) as f32, a * b);
        assert_ne!(Precision::F64.round(a as f64 / b as f64), (a / b) as f64);
    }
}
