//! Why `onnx-parity repro` could not make a bundle.

use std::path::PathBuf;

use crate::case::Level;
use crate::evaluation::SharedError;
use crate::onnx::cut::CutUnavailable;
use crate::runtime::pipeline::PipelineError;

/// Why no bundle could be made.
#[derive(Debug, thiserror::Error)]
pub enum ReproError {
    #[error("repro bundles an L3 divergence (the first divergence L4 and L5 inherit); {0} is not supported: use --level L3")]
    Level(Level),
    #[error("tolerances: {0}")]
    Tolerance(String),
    #[error(transparent)]
    Eval(#[from] SharedError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("the case has no candidate implementation that ran")]
    NoCandidate,
    #[error("the blamed part cannot be cut out: {0}")]
    Cut(#[from] CutUnavailable),
    #[error("{0}")]
    Model(String),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} exists and is not empty: give a new folder", .0.display())]
    OutExists(PathBuf),
    #[error("checking the bundle through ONNX Runtime: {0}")]
    Check(String),
}
