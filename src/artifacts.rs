//! Where a case's real artifacts are, resolved once for every tier: its checkpoint
//! (`checkpoint:`, else the HF cache's snapshot of `model_id`/`revision`), its export (`onnx:`,
//! else `$ONNX_PARITY_EXPORTS/<model_id>/<dtype>/`) and the real config L2 reads. Resolution never
//! touches the network: fetching is an explicit step (`onnx-parity fetch`), so a test run never
//! starts a 24 GB download.

use std::path::{Path, PathBuf};

use crate::case::Case;

/// `ONNX_PARITY_EXPORTS`: a folder of exports laid out `<model_id>/<dtype>/` (e.g.
/// `google/gemma-4-12B/float32/`), what `python -m mobius build` writes per model and dtype.
pub use crate::context::EXPORTS_ENV;

/// A case's artifacts as every tier sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    /// `checkpoint:` if given (whether or not it is complete, so messages can say what it lacks),
    /// else a complete snapshot (config.json present) of `model_id`@`revision` in the HF cache.
    pub checkpoint: Option<PathBuf>,
    /// `onnx:` if given, else `$ONNX_PARITY_EXPORTS/<model_id>/<dtype>/` when it exists.
    pub export: Option<PathBuf>,
    /// The real config L2 reads: the checkpoint's `config.json`, else the case's `config:`.
    pub config: Option<PathBuf>,
}

impl Artifacts {
    /// Resolves `case`'s artifacts (for a synthetic tier, pass the stand-in case: its
    /// `checkpoint:` and `onnx:` are set).
    pub fn of(case: &Case) -> Artifacts {
        let checkpoint = case.checkpoint.clone().or_else(|| {
            crate::hub::Hub::new(crate::context::current().hub.clone())
                .cached_snapshot_dir(&case.model_id, case.revision.as_deref().unwrap_or(crate::hub::DEFAULT_REVISION))
                .filter(|d| d.join("config.json").is_file())
        });
        let export = case.onnx.clone().or_else(|| {
            let root = crate::context::current().exports_root.as_ref()?;
            Some(root.join(&case.model_id).join(case.dtype.as_str())).filter(|d| d.is_dir())
        });
        let config = checkpoint.as_ref().map(|d| d.join("config.json")).filter(|p| p.is_file()).or_else(|| case.config.clone());
        Artifacts { checkpoint, export, config }
    }

    /// The checkpoint when it has weights (L2 reads their headers; L4/L5 run the reference).
    pub fn checkpoint_with_weights(&self) -> Option<&Path> {
        self.checkpoint.as_deref().filter(|d| has_weights(d))
    }
}

/// Where the export would be looked for, for messages.
pub fn export_hint(case: &Case) -> String {
    match &crate::context::current().exports_root {
        Some(root) => format!("{}", root.join(&case.model_id).join(case.dtype.as_str()).display()),
        None => format!("${EXPORTS_ENV}/{}/{}", case.model_id, case.dtype.as_str()),
    }
}

/// Whether the checkpoint folder has weights (a safetensors file or index), not only a config.
pub fn has_weights(dir: &Path) -> bool {
    dir.join(crate::hub::SAFETENSORS_SINGLE).is_file() || dir.join(crate::hub::SAFETENSORS_INDEX).is_file()
}
