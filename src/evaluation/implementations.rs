//! The implementations of the model function a case is judged with, in one list: the reference
//! first (its greedy tokens drive every other's teacher-forced decode, its outputs are what the
//! others are compared with), then the candidates. Adding an implementation (another runtime,
//! ORT on another execution provider, candle-transformers' own model) is one more entry here and
//! an `impl Backend`; no tier changes. Which of them a case judges is its `implementations:`;
//! [`REGISTRY`] is the list of candidates by name, which the YAML's and the CLI's names are
//! checked against.

use std::path::Path;

use crate::artifacts::Artifacts;
use crate::backend::candle_transformers::CandleTransformersGemma4;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Backend, BackendError};
use crate::case::{Case, ImplementationName, Level};
use crate::eps::RunEp;
use crate::runtime::pipeline::{DecoderGraph, OnnxPipeline};
use crate::runtime::session::SessionOptions;
use onnx_parity_reference::BidirectionalScope;

/// Loads an implementation from its artifact folder.
pub type Open = fn(&Path, &OpenOptions) -> Result<Box<dyn Backend>, BackendError>;

/// What an opener needs to know of the run (a case's, or the CLI's flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Expose each decoder layer's output (L3 names the first layer that differs).
    pub layer_outputs: bool,
    /// The reference's mask scope (`None`: what HF's own forward does for the model type).
    pub bidirectional: Option<BidirectionalScope>,
    /// The execution provider a runtime's sessions run on (the trial's).
    pub ep: RunEp,
}

impl OpenOptions {
    /// A case's on `ep`: layer outputs when it has an L3 tier, its `bidirectional:` scope.
    pub fn for_case(case: &Case, ep: RunEp) -> OpenOptions {
        OpenOptions { layer_outputs: case.levels.contains(&Level::L3), bidirectional: case.bidirectional, ep }
    }
}

/// One implementation a case can run.
#[derive(Clone, Copy)]
pub struct Implementation {
    /// Its name: what a case lists under `implementations:` and `logits --implementation`
    /// takes (`reference` for the reference, which every case runs and none lists).
    pub name: &'static str,
    /// Names it in messages: `<label> (<artifact folder>): <error>`.
    pub label: &'static str,
    /// The folder it loads (the checkpoint, the export), when the case has one.
    pub artifact: fn(&Artifacts) -> Option<&Path>,
    /// Why it cannot run when `artifact` is absent.
    pub missing: &'static str,
    /// Loads it from `artifact` for `case`.
    pub open: Open,
    /// Why it cannot judge `case` with its artifact at the given folder (a feature of the model
    /// or the prompt it lacks, a file it needs), known before loading; `None` when it can.
    pub unsupported: fn(&Case, &Path) -> Option<String>,
    /// Whether it runs an export, so it judges the case's own and each variant's (else it runs
    /// the checkpoint, once per case).
    pub per_export: bool,
    /// Why it cannot run a build on an execution provider (a runtime's trial on that EP is
    /// ignored naming it); `None` where it can. Only runtimes (`per_export`) run on an EP.
    pub not_on: fn(RunEp) -> Option<String>,
}

fn any_ep(_: RunEp) -> Option<String> {
    None
}

fn supported(_: &Case, _: &Path) -> Option<String> {
    None
}

impl std::fmt::Debug for Implementation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label)
    }
}

/// The candle reference on the case's checkpoint, in the case's `bidirectional:` scope (else
/// what HF's own forward does for the model type).
pub const REFERENCE: Implementation = Implementation {
    name: "reference",
    label: "reference",
    artifact: checkpoint,
    missing: "the case has no `checkpoint:` for the reference",
    open: open_reference,
    unsupported: supported,
    per_export: false,
    not_on: any_ep,
};

fn checkpoint(a: &Artifacts) -> Option<&Path> {
    a.checkpoint.as_deref()
}

fn open_reference(dir: &Path, options: &OpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(ReferenceBackend::load(dir, options.bidirectional)?))
}

/// The export in ONNX Runtime (this build's execution provider). With an L3 tier its decoder
/// runs with the layer outputs exposed, so L3 can name the first layer that differs.
pub const ONNX_RUNTIME: Implementation = Implementation {
    name: "onnx",
    label: "ONNX",
    artifact: export,
    missing: "the case has no `onnx:` export",
    open: open_onnx,
    unsupported: supported,
    per_export: true,
    not_on: any_ep,
};

fn export(a: &Artifacts) -> Option<&Path> {
    a.export.as_deref()
}

fn open_onnx(dir: &Path, options: &OpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    let graph = if options.layer_outputs { DecoderGraph::WithLayerOutputs } else { DecoderGraph::Original };
    Ok(Box::new(OnnxPipeline::open_with(dir, &SessionOptions::on(options.ep), graph)?))
}

/// candle-transformers' own gemma4 on the case's checkpoint (what it cannot run was a skip
/// before this loads; [`CandleTransformersGemma4::load`] checks again and says what is missing).
pub const CANDLE_TRANSFORMERS: Implementation = Implementation {
    name: "candle-transformers",
    label: "candle-transformers",
    artifact: checkpoint,
    missing: "the case has no `checkpoint:` for candle-transformers",
    open: open_candle_transformers,
    unsupported: candle_transformers_unsupported,
    per_export: false,
    not_on: any_ep,
};

/// What candle-transformers' gemma4 lacks for the checkpoint's config (and, on an image prompt,
/// for images); an unreadable config is not a skip (the run fails and says why).
fn candle_transformers_unsupported(case: &Case, dir: &Path) -> Option<String> {
    use crate::backend::candle_transformers::{read_config, unsupported, CandleTransformersError};
    let config = read_config(dir).ok()?;
    let mut missing = unsupported(&config, false);
    if missing.is_empty() && crate::inputs::for_case(case).is_ok_and(|i| i.has_images()) {
        missing = unsupported(&config, true);
    }
    (!missing.is_empty()).then(|| CandleTransformersError::Unsupported(missing).to_string())
}

/// The package in onnxruntime-genai (src/ort_genai/): the export as users deploy it, through
/// its `genai_config.json`.
pub const ORT_GENAI: Implementation = Implementation {
    name: "ort-genai",
    label: "ORT GenAI",
    artifact: export,
    missing: "the case has no `onnx:` export for ORT GenAI",
    open: open_ort_genai,
    unsupported: ort_genai_unsupported,
    per_export: true,
    not_on: crate::ort_genai::not_on,
};

fn open_ort_genai(dir: &Path, _: &OpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(crate::backend::ort_genai::OrtGenai::open(dir)?))
}

fn ort_genai_unsupported(case: &Case, dir: &Path) -> Option<String> {
    let images = crate::inputs::for_case(case).is_ok_and(|i| i.has_images());
    crate::ort_genai::unsupported(dir, images)
}

/// The candidates, one per `implementations:` name.
pub const REGISTRY: &[Implementation] = &[ONNX_RUNTIME, CANDLE_TRANSFORMERS, ORT_GENAI];

fn open_candle_transformers(dir: &Path, _: &OpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(CandleTransformersGemma4::load(dir)?))
}

/// The implementation named `name` on the command line: `reference` or a registry name.
pub fn by_name(name: &str) -> Option<Implementation> {
    match name {
        "reference" => Some(REFERENCE),
        _ => REGISTRY.iter().find(|i| i.name == name).copied(),
    }
}

/// Every name [`by_name`] takes, for the CLI's help and errors.
pub fn names() -> Vec<&'static str> {
    std::iter::once("reference").chain(REGISTRY.iter().map(|i| i.name)).collect()
}

/// The implementation judged against [`REFERENCE`] under `name`; `None` for a name the
/// registry does not hold.
pub fn candidate(name: &ImplementationName) -> Option<Implementation> {
    REGISTRY.iter().find(|i| i.name == name.as_str()).copied()
}

/// The first name `case` lists (in `implementations:`, its own or a variant's) that the
/// registry does not hold, as the error a planned trial fails with.
pub fn unknown_implementation(case: &Case) -> Option<String> {
    case.listed_implementations().map(|e| &e.name).find(|n| candidate(n).is_none()).map(|n| {
        let known: Vec<&str> = REGISTRY.iter().map(|i| i.name).collect();
        format!("{}: implementations: unknown implementation {:?}, expected one of {}", case.path.display(), n.as_str(), known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: each registry name is held once (and is not the reference's); the pipeline is
    /// the name a case's default list holds.
    #[test]
    fn every_name_is_registered_once() {
        for i in REGISTRY {
            assert_eq!(REGISTRY.iter().filter(|j| j.name == i.name).count(), 1, "{}", i.name);
            assert_ne!(i.name, REFERENCE.name);
        }
        assert_eq!(candidate(&ImplementationName::ONNX).map(|i| i.label), Some("ONNX"));
        assert!(candidate(&ImplementationName::from_static("candle")).is_none());
    }
}
