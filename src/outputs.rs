//! What an implementation of the model function returns for one prompt: the logits, the named
//! components on the way to them, each decoder layer's output, and the generated tokens. Plain
//! data shared by every back end and every tier; it depends on nothing but the dense tensor type.

use std::collections::BTreeMap;

use crate::names::named_enum;
use crate::onnx::protocol;
pub use onnx_parity_reference::{Dense, GeneratedTokens};

named_enum! {
    /// A named intermediate tensor both back ends produce, in pipeline order: where a divergence
    /// starts is the first component that differs. The spelling is the tensor name (HF's and the
    /// exports'), also used in reports and dumps.
    #[derive(PartialOrd, Ord)]
    pub enum Component("component") {
        /// Vision output `[n_tokens, hidden]` (the soft tokens that replace the image placeholders).
        ImageFeatures = "image_features",
        /// The decoder's input embeddings `[1, S, hidden]`.
        InputsEmbeds = "inputs_embeds",
        /// gemma4 PLE: the per-layer inputs every decoder layer receives, `[1, S, layers·ple_dim]`.
        PerLayerInputs = "per_layer_inputs",
    }
}

/// Where in a run two implementations are compared, in pipeline order: a component (before the
/// decoder), the prefill logits, or a cached decode step (`decode step 3`). Its text is the
/// `first_divergence` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Component(Component),
    Logits,
    /// Step `k` ≥ 1 of the KV-cache decode (step 0 is the prefill's last position).
    DecodeStep(usize),
    /// Decoder layer `k` fed the reference's stream (the calibrated rule's local verdict).
    Layer(usize),
}

impl Stage {
    /// Whether the stage lies before the decoder: a difference there reaches every layer.
    pub fn is_before_decoder(self) -> bool {
        matches!(self, Stage::Component(_))
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stage::Component(c) => f.write_str(c.as_str()),
            Stage::Logits => f.write_str(protocol::LOGITS),
            Stage::DecodeStep(k) => write!(f, "decode step {k}"),
            Stage::Layer(k) => write!(f, "decoder layer {k}"),
        }
    }
}

/// A prefill: logits and the components on the way to them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prefill {
    /// `[1, S, vocab]` when all positions were asked for, else at least the last position
    /// (`[1, 1, vocab]`; also when `streamed` holds all of them).
    pub logits: Dense<f32>,
    /// All positions' logits, made slice by slice from the final hidden state (the arbiter's).
    pub streamed: Option<std::sync::Arc<StreamedLogits>>,
    pub components: BTreeMap<Component, Dense<f32>>,
    /// Each decoder layer's output, when asked for.
    pub layers: LayerOutputs,
    /// With the layer outputs (the reference): each layer's module outputs by HF module name
    /// (`self_attn`, `mlp`, the norms), which name the part of a blamed layer that differs.
    pub modules: Vec<ModuleOutputs>,
    /// With the layer outputs (a candidate whose EP's kernel quantizes its quantized matmuls'
    /// activations to int8): those activations (their `A`) by tensor name, the rounding hints
    /// of the floors at near-ties (`onnx_parity_reference::weights::rounding`), moved out into
    /// them once the run is over. Empty otherwise.
    pub activations: BTreeMap<String, Dense<f32>>,
}

/// All-position logits `[1, S, vocab]` made one vocabulary slice at a time when they are
/// compared (the f64 arbiter's: at real width a full `[S, 262144]` tensor beside the
/// reference's and the candidate's is 629 MB more for 600 positions): from the final normed
/// hidden state and the head (a few MB), or read slice by slice from a reference-cache entry.
#[derive(Clone)]
pub struct StreamedLogits {
    source: LogitsSource,
}

#[derive(Clone)]
enum LogitsSource {
    Head { hidden: candle_core::Tensor, head: onnx_parity_reference::text::LogitsHead },
    Stored(StoredSlices),
}

/// Logits stored slice-major in a file (`[S, cols]` blocks in vocabulary order, f32 little
/// endian, from `offset`): read one slice at a time, never whole in memory.
#[derive(Debug, Clone)]
pub struct StoredSlices {
    pub file: std::sync::Arc<std::sync::Mutex<std::fs::File>>,
    /// Where it is, for errors.
    pub path: std::path::PathBuf,
    pub offset: u64,
    pub rows: usize,
    pub vocab: usize,
    /// Columns per stored slice (the last may be narrower).
    pub slice: usize,
}

impl StreamedLogits {
    /// Columns per slice: the reference's own lm_head slice width.
    pub const SLICE: usize = onnx_parity_reference::text::VOCAB_SLICE;

    /// Made from `hidden` (`[S, hidden]`) by `head`.
    pub fn from_head(hidden: candle_core::Tensor, head: onnx_parity_reference::text::LogitsHead) -> Self {
        StreamedLogits { source: LogitsSource::Head { hidden, head } }
    }

    /// Read from a file (a reference-cache entry).
    pub fn stored(slices: StoredSlices) -> Self {
        StreamedLogits { source: LogitsSource::Stored(slices) }
    }

    /// Whether each slice is computed by the head (not read from a file).
    pub fn is_computed(&self) -> bool {
        matches!(self.source, LogitsSource::Head { .. })
    }

    /// `[1, S, vocab]`.
    pub fn shape(&self) -> Vec<usize> {
        match &self.source {
            LogitsSource::Head { hidden, head } => vec![1, hidden.dims().first().copied().unwrap_or(0), head.vocab()],
            LogitsSource::Stored(s) => vec![1, s.rows, s.vocab],
        }
    }

    /// `f(start, cols, values)` for each vocabulary slice in order, `values` the `[S, cols]`
    /// logits of columns `start..start + cols`, row-major, in f32.
    pub fn for_each_slice<E: From<onnx_parity_reference::Error>>(
        &self,
        mut f: impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
    ) -> Result<(), E> {
        match &self.source {
            LogitsSource::Head { hidden, head } => {
                let vocab = head.vocab();
                // One f64 copy of a weight slice reused across the slices (the f64 head's).
                let _reuse = onnx_parity_reference::nn::upcast::reuse();
                let values = |t: candle_core::Tensor| -> Result<Vec<f32>, onnx_parity_reference::Error> {
                    Ok(t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?)
                };
                for start in (0..vocab).step_by(Self::SLICE) {
                    let cols = Self::SLICE.min(vocab - start);
                    let slice = values(head.columns(hidden, start, cols)?)?;
                    f(start, cols, &slice)?;
                }
                Ok(())
            }
            LogitsSource::Stored(s) => s.for_each_slice(f),
        }
    }
}

impl StoredSlices {
    fn for_each_slice<E: From<onnx_parity_reference::Error>>(
        &self,
        mut f: impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
    ) -> Result<(), E> {
        use std::io::{Read, Seek, SeekFrom};
        let io = |source: std::io::Error| onnx_parity_reference::Error::Io { path: self.path.clone(), source };
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        // One buffer each for the whole pass: a fresh one per slice (144 MB at 12B width) was
        // faulted in and zeroed by the kernel every time.
        let (mut bytes, mut values) = (Vec::new(), Vec::new());
        for start in (0..self.vocab).step_by(self.slice.max(1)) {
            let cols = self.slice.min(self.vocab - start);
            bytes.resize(self.rows * cols * 4, 0);
            file.read_exact(&mut bytes).map_err(io)?;
            values.resize(self.rows * cols, 0.0f32);
            for (v, b) in values.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            f(start, cols, &values)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for StreamedLogits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            LogitsSource::Head { hidden, .. } => write!(f, "StreamedLogits({:?}, hidden {:?})", self.shape(), hidden.dtype()),
            LogitsSource::Stored(s) => write!(f, "StreamedLogits({:?}, stored in {})", self.shape(), s.path.display()),
        }
    }
}

/// The same streamed logits (one run's): their values are never compared element by element.
impl PartialEq for StreamedLogits {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

/// One layer's module outputs, by HF module name.
pub type ModuleOutputs = BTreeMap<String, Dense<f32>>;

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

/// One prefill and the generation that continued from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub prefill: Prefill,
    pub generation: GeneratedTokens,
    /// With the layer outputs (the reference): the decoder's inputs at the first cached decode
    /// step (`inputs_embeds`, `per_layer_inputs` of the first generated token, `[1, 1, …]`), on
    /// which an export's decoder is judged in isolation.
    pub step_inputs: BTreeMap<Component, Dense<f32>>,
}

/// A candidate's sub-models judged on the reference's own inputs (see
/// [`crate::backend::Backend::isolated`]): each output is what that sub-model alone computes,
/// free of upstream error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Isolated {
    /// The vision encoder on the pixel values (`image_features`), when the prompt has images.
    pub image_features: Option<Dense<f32>>,
    /// The embedding model on the ids and the reference's image features (multimodal packages).
    pub embedding: BTreeMap<Component, Dense<f32>>,
    /// The decoder on the reference's `inputs_embeds` (and `per_layer_inputs`): prefill logits
    /// `[1, S, V]`. `None` for a text-only package, whose isolated decoder run is its own forced
    /// run (the same ids, the same graph): that run's logits are judged, not a copy of them (at
    /// real width a copy is one more `[S, 262144]` tensor alive beside the reference's, the
    /// arbiter's and the candidate's).
    pub logits: Option<Dense<f32>>,
    /// The decoder's first cached decode step on the reference's inputs for it, when the
    /// reference generated one.
    pub step_logits: Option<Vec<f32>>,
    /// Each layer's output in the isolated decoder run (error propagated inside the decoder only).
    pub layers: LayerOutputs,
    /// The isolated decoder run's int8-quantized activations ([`Prefill::activations`]); empty
    /// for a text-only package (its forced run's are those).
    pub activations: BTreeMap<String, Dense<f32>>,
    /// Each layer's output when fed the reference's residual stream entering it (local error).
    pub local: LayerOutputs,
    /// The local run's module outputs per layer (those the export's node names identify).
    pub modules: Vec<ModuleOutputs>,
    /// `(layer, module)` pairs the export's node names do not identify, and why.
    pub unidentified: BTreeMap<(usize, String), String>,
    /// The activations the local run's quantized matmuls multiplied (their `A`), by tensor name,
    /// where the EP's kernel quantizes them to int8: the rounding hints the reference's local
    /// floors take at near-ties (`onnx_parity_reference::weights::rounding`).
    pub local_activations: BTreeMap<String, Dense<f32>>,
    /// The package is one text-only model (the decoder embeds the ids itself).
    pub text_only: bool,
}

/// The reference's decoder layers run locally at one precision: each fed the arbiter's (f64)
/// residual stream entering it. Against the arbiter's own layer outputs this is the local error
/// floor a candidate's layer, fed the same stream, is judged by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalLayers {
    /// Each layer's output `[1, S, hidden]`, in layer order.
    pub layers: Vec<Dense<f32>>,
    /// Each layer's module outputs (HF names).
    pub modules: Vec<ModuleOutputs>,
}

/// Whether a candidate's sub-models were judged in isolation.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Isolation {
    /// Not asked for (no L3), or the implementation has no sub-models.
    #[default]
    NotRun,
    /// It could not be done, and why (the verdict still stands on the whole pipeline).
    Failed(String),
    Done(Box<Isolated>),
}

/// A NaN or infinity in a run. In the reference, the oracle, it is a broken checkpoint or a
/// reference bug, never something an export may be compared against.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{backend} produced a non-finite value in {tensor}: {value} at flat index {index} (a NaN or Inf in the oracle is never compared against)")]
pub struct NonFinite {
    pub backend: &'static str,
    pub tensor: String,
    pub index: usize,
    pub value: f32,
}

impl Run {
    /// The first NaN/Inf in the prefill logits, the components, the layer outputs or the step
    /// logits, as an error naming `backend` and the tensor.
    pub fn require_finite(&self, backend: &'static str) -> Result<(), NonFinite> {
        let check = |tensor: &str, data: &[f32]| match data.iter().position(|v| !v.is_finite()) {
            Some(index) => Err(NonFinite { backend, tensor: tensor.to_string(), index, value: data[index] }),
            None => Ok(()),
        };
        check(protocol::LOGITS, &self.prefill.logits.data)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(logits: Vec<f32>, component: Vec<f32>, step: Vec<f32>) -> Run {
        let mut prefill = Prefill { logits: Dense::new(vec![1, 1, logits.len()], logits), ..Default::default() };
        prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 1, component.len()], component));
        Run { prefill, generation: GeneratedTokens { tokens: vec![0], step_logits: vec![step] }, ..Default::default() }
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

    /// Guards the `first_divergence` spellings expected-failure signatures are written in.
    #[test]
    fn stage_spellings() {
        assert_eq!(Stage::Component(Component::ImageFeatures).to_string(), "image_features");
        assert_eq!(Stage::Logits.to_string(), "logits");
        assert_eq!(Stage::DecodeStep(3).to_string(), "decode step 3");
        assert!(Stage::Component(Component::PerLayerInputs).is_before_decoder() && !Stage::DecodeStep(1).is_before_decoder());
        assert_eq!(Component::from_name("per_layer_inputs"), Some(Component::PerLayerInputs));
    }
}
