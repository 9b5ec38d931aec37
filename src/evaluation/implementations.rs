//! The implementations of the model function a case is judged with, in one list: the reference
//! first (its greedy tokens drive every other's teacher-forced decode, its outputs are what the
//! others are compared with), then the candidates. Adding an implementation (another runtime,
//! ORT on another execution provider, candle-transformers' own model) is one more entry here and
//! an `impl Backend`; no tier changes. Which of them a case judges is its `implementations:`.

use std::path::Path;

use crate::artifacts::Artifacts;
use crate::backend::candle_transformers::CandleTransformersGemma4;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Backend, BackendError};
use crate::case::{Case, ImplementationName, Level};
use crate::onnx::pipeline::{DecoderGraph, OnnxPipeline};
use crate::onnx::session::SessionOptions;

/// Loads an implementation from its artifact folder for a case.
pub type Open = fn(&Path, &Case) -> Result<Box<dyn Backend>, BackendError>;

/// One implementation a case can run.
#[derive(Clone, Copy)]
pub struct Implementation {
    /// Names it in messages: `<label> (<artifact folder>): <error>`.
    pub label: &'static str,
    /// The folder it loads (the checkpoint, the export), when the case has one.
    pub artifact: fn(&Artifacts) -> Option<&Path>,
    /// Why it cannot run when `artifact` is absent.
    pub missing: &'static str,
    /// Loads it from `artifact` for `case`.
    pub open: Open,
}

impl std::fmt::Debug for Implementation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label)
    }
}

/// The candle reference on the case's checkpoint, in the case's `bidirectional:` scope (else
/// what HF's own forward does for the model type).
pub const REFERENCE: Implementation = Implementation {
    label: "reference",
    artifact: checkpoint,
    missing: "the case has no `checkpoint:` for the reference",
    open: open_reference,
};

fn checkpoint(a: &Artifacts) -> Option<&Path> {
    a.checkpoint.as_deref()
}

fn open_reference(dir: &Path, case: &Case) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(ReferenceBackend::load(dir, case.bidirectional)?))
}

/// The export in ONNX Runtime (this build's execution provider). With an L3 tier its decoder
/// runs with the layer outputs exposed, so L3 can name the first layer that differs.
pub const ONNX_RUNTIME: Implementation =
    Implementation { label: "ONNX", artifact: export, missing: "the case has no `onnx:` export", open: open_onnx };

fn export(a: &Artifacts) -> Option<&Path> {
    a.export.as_deref()
}

fn open_onnx(dir: &Path, case: &Case) -> Result<Box<dyn Backend>, BackendError> {
    let graph = if case.levels.contains(&Level::L3) { DecoderGraph::WithLayerOutputs } else { DecoderGraph::Original };
    Ok(Box::new(OnnxPipeline::open_with(dir, &SessionOptions::from_env(), graph)?))
}

/// candle-transformers' own gemma4 on the case's checkpoint (what it cannot run was a skip
/// before this loads; [`CandleTransformersGemma4::load`] checks again and says what is missing).
pub const CANDLE_TRANSFORMERS: Implementation = Implementation {
    label: "candle-transformers",
    artifact: checkpoint,
    missing: "the case has no `checkpoint:` for candle-transformers",
    open: open_candle_transformers,
};

fn open_candle_transformers(dir: &Path, _case: &Case) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(CandleTransformersGemma4::load(dir)?))
}

/// The implementation judged against [`REFERENCE`] under `name`.
pub fn candidate(name: ImplementationName) -> Implementation {
    match name {
        ImplementationName::Onnx => ONNX_RUNTIME,
        ImplementationName::CandleTransformers => CANDLE_TRANSFORMERS,
    }
}
