//! Per-layer embeddings (PLE, gemma4 only): a second, per-layer token embedding mixed with a
//! projection of the input embeddings, fed to every decoder layer through a gate
//! (`Gemma4TextModel.get_per_layer_inputs` / `project_per_layer_inputs`, modeling_gemma4.py
//! M:1741-1821, and the per-layer branch of `Gemma4TextDecoderLayer.forward`, M:1452-1460).
//!
//! Model level, for S positions, L layers, width P:
//! ```text
//! tok  = E_ple[ids] · f32(√P)                     reshaped [S, L, P]
//! proj = (x @ W_plmpᵀ) · H^-0.5                   x = the decoder's input embeddings
//! proj = RMSNorm_P(proj.reshape(S, L, P))
//! ple  = (proj + tok) · 2^-0.5
//! ```
//! Each scalar multiply is its own rounding, in this order (a fused or reassociated form rounds
//! differently). In a multimodal prompt the token part reads the ids with placeholders replaced by
//! `pad_token_id` while the projection sees the merged embeddings (vision soft tokens included),
//! so the two parts see different inputs at image positions: the caller passes both.

use candle_core::Tensor;

use crate::config::{Activation, PleSpec, TextConfig};
use crate::error::{Error, Result};
use crate::nn::linear::Linear;
use crate::nn::norm::RmsNorm;
use crate::nn::ops::gated_activation;
use crate::weights::{RowTable, Weights};

/// The model-level PLE weights.
#[derive(Debug)]
pub(crate) struct PerLayerEmbedding {
    /// `embed_tokens_per_layer.weight` `[vocab, L·P]`, left in the checkpoint's mapping (2.35 G
    /// elements on E2B): lookups decode the rows they need.
    table: RowTable,
    /// `f32(√P)` as HF's `embed_scale` buffer holds it (an f32 buffer, also in f64 mode).
    table_scale: f32,
    projection: Linear,
    projection_norm: RmsNorm,
    layers: usize,
    spec: PleSpec,
    hidden: usize,
}

/// `per_layer_model_projection_scale = hidden_size**-0.5` and `per_layer_input_scale = 2**-0.5`:
/// Python floats, applied as the compute dtype's scalar.
fn projection_scale(hidden: usize) -> f64 {
    (hidden as f64).powf(-0.5)
}
const INPUT_SCALE: f64 = std::f64::consts::FRAC_1_SQRT_2;

impl PerLayerEmbedding {
    pub(crate) fn load(cfg: &TextConfig, spec: PleSpec, w: &Weights, prefix: &str) -> Result<Self> {
        let (l, p, h) = (cfg.num_hidden_layers, spec.dim, cfg.hidden_size);
        Ok(Self {
            table: w.get_rows(&format!("{prefix}.embed_tokens_per_layer.weight"), [spec.vocab, l * p])?,
            table_scale: (p as f64).sqrt() as f32,
            projection: Linear::load(w, &format!("{prefix}.per_layer_model_projection"), h, l * p, false)?,
            projection_norm: RmsNorm::load(w, &format!("{prefix}.per_layer_projection_norm"), p, cfg.rms_norm_eps)?,
            layers: l,
            spec,
            hidden: h,
        })
    }

    /// The input embeddings as the decoder reads them: rounded where a QDQ build's quantization of
    /// the projection's input replaces the tensor for every reader ([`Linear::shares_input`]).
    pub(crate) fn stream(&self, embeds: &Tensor) -> Result<Tensor> {
        Ok(if self.projection.shares_input() { self.projection.input(embeds)?.x } else { embeds.clone() })
    }

    /// The combined per-layer inputs `[S, L, P]` for `table_ids` (the token part) and `embeds`
    /// `[S, hidden]` (the projection part).
    pub(crate) fn forward(&self, table_ids: &[i64], embeds: &Tensor) -> Result<Tensor> {
        let s = table_ids.len();
        if embeds.dim(0)? != s {
            return Err(Error::Internal(format!("PLE: {s} ids for {} embeddings", embeds.dim(0)?)));
        }
        let idx = table_ids
            .iter()
            .map(|&id| {
                u32::try_from(id).ok().filter(|&i| (i as usize) < self.spec.vocab).ok_or_else(|| {
                    Error::input(format!(
                        "token id {id} outside the per-layer embedding table 0..{} (vocab_size_per_layer_input; HF fails with an IndexError)",
                        self.spec.vocab
                    ))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        let (l, p) = (self.layers, self.spec.dim);
        let tok = self.table.gather(&idx)?.affine(self.table_scale as f64, 0.0)?.reshape((s, l, p))?;
        let proj = self.projection.forward(embeds)?.affine(projection_scale(self.hidden), 0.0)?.reshape((s, l, p))?;
        let proj = self.projection_norm.forward(&proj)?;
        Ok((proj + tok)?.affine(INPUT_SCALE, 0.0)?)
    }
}

/// A decoder layer's PLE branch: `x + norm(proj(act(gate(x)) · ple_i))`.
#[derive(Debug)]
pub(crate) struct PerLayerGate {
    gate: Linear,
    projection: Linear,
    norm: RmsNorm,
    act: Activation,
}

impl PerLayerGate {
    pub(crate) fn load(cfg: &TextConfig, spec: PleSpec, w: &Weights, prefix: &str) -> Result<Self> {
        let (h, p) = (cfg.hidden_size, spec.dim);
        Ok(Self {
            gate: Linear::load(w, &format!("{prefix}.per_layer_input_gate"), h, p, false)?,
            projection: Linear::load(w, &format!("{prefix}.per_layer_projection"), p, h, false)?,
            norm: RmsNorm::load(w, &format!("{prefix}.post_per_layer_input_norm"), h, cfg.rms_norm_eps)?,
            act: cfg.activation()?,
        })
    }

    /// `x` `[S, hidden]`, `ple_i` `[S, P]` (contiguous) → `x + norm(proj(act(gate(x)) · ple_i))`.
    /// `act(g)·ple_i` has the shape of the MLP's `act(gate)·up` and shares its fused kernel (same
    /// roundings as HF's separate activation and multiply).
    /// A QDQ build whose gate input is quantized for every reader adds the rounded stream too.
    pub(crate) fn forward(&self, x: &Tensor, ple_i: &Tensor) -> Result<Tensor> {
        let input = self.gate.input(x)?;
        let x = if self.gate.shares_input() { &input.x } else { x };
        let g = gated_activation(self.act, self.gate.apply(&input)?, ple_i)?;
        let g = self.norm.forward(&self.projection.forward(&g)?)?;
        Ok((x + g)?)
    }
}
