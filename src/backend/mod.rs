//! One interface for every implementation a case compares: the candle reference (both Gemma 4
//! families) and the exported graphs in ONNX Runtime. Tiers, logits dumps and golden
//! regeneration see only [`Backend`], [`ModelInputs`] in and [`Run`] out, so a further
//! implementation (ORT-CUDA against ORT-CPU, a recorded HF oracle, another runtime) is its module
//! (an `impl Backend`, its error converted into [`BackendError::Implementation`]) and one entry in
//! [`crate::evaluation::implementations::REGISTRY`] (its name, label, artifact, what it cannot
//! run, its opener): the names a case may list, the CLI's `--implementation` values, the skips
//! and the trials all come from the registry (candle-transformers' own gemma4 is one:
//! [`candle_transformers`]; onnxruntime-genai another: [`ort_genai`]).

pub mod candle_transformers;
pub mod onnx;
pub mod ort_genai;
pub mod reference;

use crate::inputs::ModelInputs;
use crate::outputs::{Isolation, NonFinite, Run};
use onnx_parity_reference::BidirectionalScope;

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

/// Why a back end could not run.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Reference(#[from] onnx_parity_reference::Error),
    #[error(transparent)]
    Onnx(#[from] crate::runtime::pipeline::PipelineError),
    /// Boxed: candle's error is large, and every back end's `Result` carries this type.
    #[error(transparent)]
    CandleTransformers(Box<crate::candle_gemma4::CandleTransformersError>),
    /// An implementation's own error (its module converts into this: adding an implementation
    /// needs no variant here). ORT GenAI's [`crate::ort_genai::GenaiError`] is one.
    #[error(transparent)]
    Implementation(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    NonFinite(#[from] NonFinite),
    /// The reference's device (`ONNX_PARITY_DEVICE`) cannot be used.
    #[error(transparent)]
    Device(#[from] crate::gpu::GpuError),
    /// A quantized build's weights, read for the reference, cannot be read.
    #[error("the quantized build's weights: {0}")]
    Quantized(#[from] crate::onnx::quantized::QuantizedError),
}

impl From<crate::candle_gemma4::CandleTransformersError> for BackendError {
    fn from(e: crate::candle_gemma4::CandleTransformersError) -> Self {
        BackendError::CandleTransformers(Box::new(e))
    }
}

/// An implementation of the model function.
pub trait Backend {
    /// What this is, for reports ("candle reference f32 (gemma4_text, scope none)", "ONNX Runtime 1.31.1 CPU …").
    fn describe(&self) -> String;

    /// Prefill with logits and components, then greedy generation as `request` says.
    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError>;

    /// Where its numbers come from when the EP asked for did not compute all of them
    /// (`partitioned: 6 compute nodes on the CPU …`); `None` when it did.
    fn partitioned(&self) -> Option<String> {
        None
    }

    /// Whether its free run is its own search (a runtime's generator), which a teacher-forced
    /// run whose argmax agrees at every step must not stand in for.
    fn searches_itself(&self) -> bool {
        false
    }

    /// Which layers see an image block bidirectionally, when the implementation chooses it (the
    /// reference does, per case); `None` for an export, whose mask is built into its graph.
    fn bidirectional_scope(&self) -> Option<BidirectionalScope> {
        None
    }

    /// [`Backend::isolated`] will be called after this back end's runs: it may start preparing
    /// what that needs (the ONNX pipeline's decoder cut, when small) beside them.
    fn will_isolate(&mut self) {}

    /// Each sub-model judged on the reference's own inputs for it (`reference`: the
    /// reference's run of `inputs`, with layer outputs; `own`: this back end's teacher-forced
    /// run of them, reused where the isolated run would be the same), so L3 blames the component
    /// that diverges, not its downstream. The last call on a back end (it may release
    /// sessions). Implementations without sub-models keep the default.
    fn isolated(&mut self, _inputs: &ModelInputs, _oracle: &Run, _own: &Run) -> Result<Isolation, BackendError> {
        Ok(Isolation::NotRun)
    }
}
