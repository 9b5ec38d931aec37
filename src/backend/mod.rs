//! One interface for every implementation a case compares: the candle reference (both Gemma 4
//! families) and the exported graphs in ONNX Runtime. Tiers, logits dumps and golden
//! regeneration see only [`Backend`], [`ModelInputs`] in and [`Run`] out, so a further
//! implementation (ORT-CUDA against ORT-CPU, a recorded HF oracle, another runtime) is one more
//! `impl Backend`, not an edit of every tier.

pub mod onnx;
pub mod reference;

use std::collections::BTreeMap;

use crate::inputs::{Dense, ModelInputs};
pub use onnx_parity_reference::Generation;

/// A named intermediate tensor both back ends produce, in pipeline order: where a divergence
/// starts is the first component that differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// Vision output `[n_tokens, hidden]` (the soft tokens that replace the image placeholders).
    ImageFeatures,
    /// The decoder's input embeddings `[1, S, hidden]`.
    InputsEmbeds,
    /// gemma4 PLE: the per-layer inputs every decoder layer receives, `[1, S, layers·ple_dim]`.
    PerLayerInputs,
}

impl Component {
    /// Every component, in pipeline order.
    pub const ALL: [Component; 3] = [Component::ImageFeatures, Component::InputsEmbeds, Component::PerLayerInputs];

    /// The tensor name (HF's and the exports'), also used in reports and dumps.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::ImageFeatures => "image_features",
            Component::InputsEmbeds => "inputs_embeds",
            Component::PerLayerInputs => "per_layer_inputs",
        }
    }

    /// The component an export output or oracle tensor of this name holds.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// A prefill: logits and the components on the way to them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prefill {
    /// `[1, S, vocab]` when all positions were asked for, else at least the last position
    /// (`[1, 1, vocab]`).
    pub logits: Dense<f32>,
    pub components: BTreeMap<Component, Dense<f32>>,
    /// Each decoder layer's output, when asked for.
    pub layers: LayerOutputs,
}

/// Every decoder layer's prefill output `[1, S, hidden]` (the residual stream after the layer,
/// before the final norm), which localises a divergence inside the decoder.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum LayerOutputs {
    #[default]
    NotRequested,
    /// The back end could not expose them, and why (e.g. the graph's layer boundaries).
    Unavailable(String),
    /// In layer order.
    Tensors(Vec<Dense<f32>>),
}

impl Prefill {
    /// The last position's logits, or `None` when the logits have no vocabulary axis.
    pub fn last_logits(&self) -> Option<&[f32]> {
        let v = *self.logits.shape.last()?;
        (v > 0 && self.logits.data.len() >= v).then(|| &self.logits.data[self.logits.data.len() - v..])
    }
}

/// What to generate after the prefill.
#[derive(Debug, Clone, Copy)]
pub struct GenerationRequest<'a> {
    /// New tokens (0: prefill only).
    pub max_new_tokens: usize,
    /// Free-running decoding stops after the first of these (which is returned).
    pub eos: &'a [i64],
    /// Teacher forcing: feed these tokens instead of the argmax (at most `max_new_tokens`, no EOS
    /// stop), so two implementations' step logits compare on identical histories.
    pub forced: Option<&'a [i64]>,
    /// Logits for every prompt position (L3 needs them; L4/L5 only the last).
    pub all_position_logits: bool,
    /// Each decoder layer's prefill output (L3 names the first layer that differs).
    pub layer_outputs: bool,
}

/// One prefill and the generation that continued from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub prefill: Prefill,
    pub generation: Generation,
}

/// Why a back end could not run.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Reference(#[from] onnx_parity_reference::Error),
    #[error(transparent)]
    Onnx(#[from] crate::onnx::pipeline::PipelineError),
    /// The reference is the oracle: a NaN or infinity in what it computed is a broken checkpoint
    /// or a reference bug, never something an export may be compared against.
    #[error("{backend} produced a non-finite value in {tensor}: {value} at flat index {index} (a NaN or Inf in the oracle is never compared against)")]
    NonFinite { backend: &'static str, tensor: String, index: usize, value: f32 },
}

impl Run {
    /// The first NaN/Inf in the prefill logits, the components or the step logits, as an error.
    pub fn require_finite(&self, backend: &'static str) -> Result<(), BackendError> {
        let check = |tensor: &str, data: &[f32]| match data.iter().position(|v| !v.is_finite()) {
            Some(index) => Err(BackendError::NonFinite { backend, tensor: tensor.to_string(), index, value: data[index] }),
            None => Ok(()),
        };
        check("logits", &self.prefill.logits.data)?;
        for (c, t) in &self.prefill.components {
            check(c.as_str(), &t.data)?;
        }
        if let LayerOutputs::Tensors(layers) = &self.prefill.layers {
            for (i, t) in layers.iter().enumerate() {
                check(&format!("decoder layer {i} output"), &t.data)?;
            }
        }
        for (k, step) in self.generation.step_logits.iter().enumerate() {
            check(&format!("decode step {k} logits"), step)?;
        }
        Ok(())
    }
}

/// An implementation of the model function.
pub trait Backend {
    /// What this is, for reports ("candle reference f32 (gemma4_text, scope none)", "ONNX Runtime 1.31.1 CPU …").
    fn describe(&self) -> String;

    /// Prefill with logits and components, then greedy generation as `request` says.
    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(logits: Vec<f32>, component: Vec<f32>, step: Vec<f32>) -> Run {
        let mut prefill = Prefill { logits: Dense::new(vec![1, 1, logits.len()], logits), ..Default::default() };
        prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 1, component.len()], component));
        Run { prefill, generation: Generation { tokens: vec![0], step_logits: vec![step] } }
    }

    /// Guards: NaN or ±Inf anywhere in a run (logits, a component, a step) is an error naming it.
    #[test]
    fn non_finite_runs_are_errors() {
        assert!(run_with(vec![0.0, 1.0], vec![2.0], vec![3.0]).require_finite("r").is_ok());
        let named = |r: Run| r.require_finite("r").unwrap_err().to_string();
        assert!(named(run_with(vec![0.0, f32::NAN], vec![2.0], vec![3.0])).contains("in logits: NaN at flat index 1"));
        assert!(named(run_with(vec![0.0], vec![f32::INFINITY], vec![3.0])).contains("inputs_embeds"));
        assert!(named(run_with(vec![0.0], vec![1.0], vec![f32::NEG_INFINITY])).contains("decode step 0 logits"));
    }
}
