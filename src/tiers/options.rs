//! Options shared by all trials of a run.

use std::path::PathBuf;

/// `ONNX_PARITY_GOLDENS`: the goldens folder (mobius's `testdata/golden` has the same layout).
pub use crate::context::GOLDENS_ENV;

/// Options shared by all trials of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding `<category>/<case>.json` goldens.
    pub goldens_root: PathBuf,
    /// `true` when running under CI (`CI` set): `ci_skip_reason` applies.
    pub ci: bool,
}

impl RunOptions {
    /// The run context's goldens folder and CI flag ([`crate::context`]).
    pub fn from_env() -> Self {
        let context = crate::context::current();
        RunOptions { goldens_root: context.goldens_root.clone(), ci: context.ci }
    }
}
