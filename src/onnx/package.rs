//! The layout of an exported ONNX package. mobius writes either one folder per sub-model
//! (`decoder/ embedding/ vision_encoder/ ...`, multimodal) or a single `model.onnx` (text-only).
//! Nothing here assumes layer counts or shapes: those are read from the graphs themselves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a folder is not a usable export package.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("ONNX package {0} does not exist or is not a folder")]
    Missing(PathBuf),
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("ONNX package {0} holds neither model.onnx nor sub-model folders (decoder/, embedding/, vision_encoder/)")]
    Empty(PathBuf),
    #[error("sub-model folder {path} holds {found} .onnx files; expected exactly one (or one named model.onnx)")]
    Ambiguous { path: PathBuf, found: usize },
}

/// Sub-model roles the harness knows how to drive.
pub const DECODER: &str = "decoder";
pub const EMBEDDING: &str = "embedding";
pub const VISION_ENCODER: &str = "vision_encoder";
/// The role name given to a single text-only `model.onnx`.
pub const TEXT_MODEL: &str = "model";

/// Which shape of package this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `decoder/`, `embedding/`, optional `vision_encoder/` (and possibly others we do not drive).
    Multimodal,
    /// One `model.onnx` taking `input_ids`.
    TextOnly,
}

/// An export package: its root and the `.onnx` file of every sub-model, by role.
#[derive(Debug, Clone)]
pub struct OnnxPackage {
    pub root: PathBuf,
    pub layout: Layout,
    pub submodels: BTreeMap<String, PathBuf>,
}

impl OnnxPackage {
    /// Detects the layout of the package at `root`.
    pub fn open(root: &Path) -> Result<Self, PackageError> {
        if !root.is_dir() {
            return Err(PackageError::Missing(root.into()));
        }
        let single = root.join("model.onnx");
        if single.is_file() {
            let submodels = BTreeMap::from([(TEXT_MODEL.to_string(), single)]);
            return Ok(OnnxPackage { root: root.into(), layout: Layout::TextOnly, submodels });
        }
        let mut submodels = BTreeMap::new();
        for entry in read_dir_sorted(root)? {
            if entry.is_dir() {
                if let Some(file) = onnx_file_in(&entry)? {
                    let role = entry.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    submodels.insert(role, file);
                }
            }
        }
        if submodels.is_empty() {
            return Err(PackageError::Empty(root.into()));
        }
        Ok(OnnxPackage { root: root.into(), layout: Layout::Multimodal, submodels })
    }

    pub fn submodel(&self, role: &str) -> Option<&Path> {
        self.submodels.get(role).map(|p| p.as_path())
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, PackageError> {
    let io = |source| PackageError::Io { path: dir.into(), source };
    let mut v = std::fs::read_dir(dir).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>().map_err(io)?;
    v.sort();
    Ok(v)
}

/// The graph file of a sub-model folder: `model.onnx`, else the only `*.onnx` present.
fn onnx_file_in(dir: &Path) -> Result<Option<PathBuf>, PackageError> {
    let preferred = dir.join("model.onnx");
    if preferred.is_file() {
        return Ok(Some(preferred));
    }
    let found: Vec<_> = read_dir_sorted(dir)?.into_iter().filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "onnx")).collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        n => Err(PackageError::Ambiguous { path: dir.into(), found: n }),
    }
}
