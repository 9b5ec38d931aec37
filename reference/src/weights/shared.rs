//! Matrices shared between models loaded from one checkpoint, so that loading the f64 arbiter
//! and the f32 floor after the f32 reference reads and transposes no matrix again — or from one
//! quantized build's overrides on it, so that the models of a build's reference side (its
//! reference and arbiter, then the floors conditioned on a candidate's int8 steps: six loads at
//! full E2B size) dequantize and transpose each matrix once.
//!
//! Why this is exact: the f64 precision mode keeps matrices in f32
//! ([`super::Weights::matrix_dtype`]), decoded and transposed by the same code as the f32 reference's,
//! so a matrix one model loaded is bit for bit the one another would load; a build's overrides
//! dequantize its payload the same way each time they are read (their activations' rounding,
//! which may differ between two reads, is not part of a matrix). Only f32 matrices on the CPU
//! are shared, and only between models of the same weights: the checkpoint's own, or one build's
//! overrides (not a half-precision floor's rounded copies, not a device's uploads). The caller
//! decides how long the matrices live: they are freed when the last [`SharedMatrices`] handle and
//! the last model holding them are dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::Tensor;

use crate::error::Result;

/// The f32 matrices models of the checkpoint at `dir` have loaded, by stored name.
#[derive(Debug, Clone)]
pub struct SharedMatrices {
    dir: PathBuf,
    /// The build whose overrides the models read (`None`: the checkpoint's own weights).
    build: Option<PathBuf>,
    matrices: Arc<Mutex<HashMap<String, Tensor>>>,
}

impl SharedMatrices {
    /// For models of the checkpoint at `checkpoint_dir` on its own weights.
    pub fn new(checkpoint_dir: &Path) -> Self {
        SharedMatrices { dir: checkpoint_dir.to_path_buf(), build: None, matrices: Arc::default() }
    }

    /// For models of the checkpoint at `checkpoint_dir` on the overrides of the build at
    /// `build_dir` ([`super::Overrides::origin`]).
    pub fn for_build(checkpoint_dir: &Path, build_dir: &Path) -> Self {
        SharedMatrices { dir: checkpoint_dir.to_path_buf(), build: Some(build_dir.to_path_buf()), matrices: Arc::default() }
    }

    /// How many matrices are held.
    pub fn len(&self) -> usize {
        self.matrices.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether these are the matrices of the checkpoint at `dir` on the overrides of the build
    /// at `build` (`None`: on its own weights).
    pub(super) fn is_for(&self, dir: &Path, build: Option<&Path>) -> bool {
        self.dir == dir && self.build.as_deref() == build
    }

    /// The matrix stored as `name`: the shared one when a model loaded it (`hit` is told its
    /// name), else `load`ed and shared.
    pub(super) fn get_or_load(&self, name: String, hit: impl FnOnce(&str), load: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
        if let Some(t) = self.matrices.lock().ok().and_then(|m| m.get(&name).cloned()) {
            hit(&name);
            return Ok(t);
        }
        let t = load()?;
        if let Ok(mut m) = self.matrices.lock() {
            m.insert(name, t.clone());
        }
        Ok(t)
    }

    /// Whether `other` is this handle (a clone of it), not merely one of the same folder.
    pub fn same(&self, other: &SharedMatrices) -> bool {
        Arc::ptr_eq(&self.matrices, &other.matrices)
    }
}
