//! Where a case's real artifacts are: its checkpoint (`checkpoint:`, else the HF cache for
//! `model_id`/`revision`), its export (`onnx:`, else `$ONNX_PARITY_EXPORTS/<model_id>/<dtype>/`)
//! and the real config L2 reads. Resolution never touches the network: fetching is an explicit
//! step (`onnx-parity fetch`), so a test run never starts a 24 GB download.

use std::path::PathBuf;

use crate::case::Case;

/// `ONNX_PARITY_EXPORTS`: a folder of exports laid out `<model_id>/<dtype>/` (e.g.
/// `google/gemma-4-12B/float32/`), what `python -m mobius build` writes per model and dtype.
pub const EXPORTS_ENV: &str = "ONNX_PARITY_EXPORTS";

/// The real checkpoint folder: `checkpoint:` if given, else a complete snapshot of
/// `model_id`@`revision` in the HF cache (config.json present).
pub fn checkpoint(case: &Case) -> Option<PathBuf> {
    if let Some(dir) = &case.checkpoint {
        return Some(dir.clone());
    }
    crate::hub::Hub::from_env()
        .cached_snapshot_dir(&case.model_id, case.revision.as_deref().unwrap_or("main"))
        .filter(|d| d.join("config.json").is_file())
}

/// The export folder: `onnx:` if given, else `$ONNX_PARITY_EXPORTS/<model_id>/<dtype>/` when it
/// exists.
pub fn export(case: &Case) -> Option<PathBuf> {
    if let Some(dir) = &case.onnx {
        return Some(dir.clone());
    }
    let root = std::env::var_os(EXPORTS_ENV)?;
    Some(PathBuf::from(root).join(&case.model_id).join(case.dtype.as_str())).filter(|d| d.is_dir())
}

/// Where `export` would look, for messages.
pub fn export_hint(case: &Case) -> String {
    match std::env::var_os(EXPORTS_ENV) {
        Some(root) => format!("{}", PathBuf::from(root).join(&case.model_id).join(case.dtype.as_str()).display()),
        None => format!("${EXPORTS_ENV}/{}/{}", case.model_id, case.dtype.as_str()),
    }
}

/// The real config L2 reads: the checkpoint's `config.json`, else the case's `config:`.
pub fn config(case: &Case) -> Option<PathBuf> {
    checkpoint(case).map(|d| d.join("config.json")).filter(|p| p.is_file()).or_else(|| case.config.clone())
}

/// Whether the checkpoint folder has weights (a safetensors file or index), not only a config.
pub fn has_weights(dir: &std::path::Path) -> bool {
    dir.join("model.safetensors").is_file() || dir.join("model.safetensors.index.json").is_file()
}
