//! The decoder cut at its layers for the local layer runs ([`crate::onnx::cut`]), with the
//! quantized activations it computes exposed: made after the decoder session is released, or
//! beside the runs for a small decoder ([`super::OnnxPipeline::prepare_local_layers`]).

use std::path::{Path, PathBuf};

use crate::onnx::cut::{self, CutModel, CutUnavailable};
use crate::runtime::pipeline::activations;
use crate::runtime::session::{ModelSource, SessionError};

/// Why the decoder cut is not run: unavailable (the reason, reported), or its quantized matmuls'
/// inputs could not be exposed (an error).
#[derive(Debug)]
pub(crate) enum CutFailure {
    Unavailable(String),
    Expose(String),
}

/// The decoder cut at its layers and the quantized activations it exposes ([`local_cut`]).
pub(crate) type LocalCut = (CutModel, Vec<(String, i32)>);

/// A [`LocalCut`] and its session, opened ahead ([`super::OnnxPipeline::prepare_local_layers`]).
pub(crate) type OpenedCut = (LocalCut, Result<ort::session::Session, SessionError>);

/// The decoder at `path` cut at its layers, with those of `activations` (the quantized matmuls'
/// inputs the instrumented decoder exposes, whose kernel rounds them to int8 here) that it computes
/// exposed as outputs: the reference takes the candidate's step at their near-ties.
pub(super) fn local_cut(path: &Path, activations: &[(String, i32)]) -> Result<LocalCut, CutFailure> {
    let mut cut = decoder_cut(path, None).map_err(|why| CutFailure::Unavailable(why.to_string()))?;
    let activations = activations::computed_by(activations.to_vec(), path, &cut.bytes);
    if !activations.is_empty() {
        cut.bytes = activations::expose(&cut.bytes, &activations).map_err(|e| CutFailure::Expose(e.to_string()))?;
    }
    Ok((cut, activations))
}

/// The folder a decoder's external data is resolved in.
pub(super) fn cut_dir(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A cut of the decoder at `path`, in memory, its external data in `dir`.
pub(super) fn cut_source<'a>(path: &'a Path, bytes: &'a [u8], dir: &'a Path) -> ModelSource<'a> {
    ModelSource::Memory { path, bytes, external_data_dir: dir }
}

/// The decoder at `path` cut at its layers ([`cut::local_model`]: all of them, or `only`), or why
/// not.
pub(super) fn decoder_cut(path: &Path, only: Option<usize>) -> Result<CutModel, CutUnavailable> {
    let bytes = std::fs::read(path).map_err(|source| CutUnavailable::Read { path: path.to_path_buf(), source })?;
    // Named as in the instrumented decoder, so the layers found are the same.
    let bytes = crate::onnx::layers::with_fused_sums_named(&bytes)
        .map_err(|e| CutUnavailable::Cut { path: path.to_path_buf(), source: e.into() })?;
    cut::local_model(&bytes, only).map_err(|source| CutUnavailable::Cut { path: path.to_path_buf(), source })
}
