//! The dense gated MLP (`Gemma4TextMLP`; the vision tower's MLP has the same shape over clippable
//! linears): `down(act(gate(x)) · up(x))`.

use candle_core::Tensor;

use crate::config::{Activation, TextConfig};
use crate::error::Result;
use crate::nn::linear::Linear;
use crate::nn::ops::gated_activation;
use crate::weights::Weights;

#[derive(Debug)]
pub(crate) struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    act: Activation,
}

impl Mlp {
    /// Layer `layer`'s MLP (double wide on KV-shared layers with `use_double_wide_mlp`).
    pub(crate) fn load(cfg: &TextConfig, w: &Weights, prefix: &str, layer: usize) -> Result<Self> {
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
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?;
        let up = self.up_proj.forward(x)?;
        let hidden = gated_activation(self.act, gate, &up)?;
        self.down_proj.forward(&hidden)
    }
}
