//! Matrices shared between models loaded from one checkpoint, so that loading the f64 arbiter
//! and the f32 floor after the f32 reference reads and transposes no matrix again.
//!
//! Why this is exact: the f64 precision mode keeps matrices in f32
//! ([`Weights::matrix_dtype`]), decoded and transposed by the same code as the f32 reference's,
//! so a matrix one model loaded is bit for bit the one another would load. Only f32 matrices on
//! the CPU from the checkpoint itself are shared (not a quantized build's overrides, not a
//! half-precision floor's rounded copies, not a device's uploads). The caller decides how long
//! the matrices live: they are freed when the last [`SharedMatrices`] handle and the last model
//! holding them are dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Tensor};

use super::Weights;
use crate::error::Result;

/// The f32 matrices models of the checkpoint at `dir` have loaded, by stored name.
#[derive(Debug, Clone)]
pub struct SharedMatrices {
    dir: PathBuf,
    matrices: Arc<Mutex<HashMap<String, Tensor>>>,
}

impl SharedMatrices {
    pub fn new(checkpoint_dir: &Path) -> Self {
        SharedMatrices { dir: checkpoint_dir.to_path_buf(), matrices: Arc::default() }
    }

    /// The checkpoint folder whose matrices these are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many matrices are held.
    pub fn len(&self) -> usize {
        self.matrices.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `other` is this handle (a clone of it), not merely one of the same folder.
    pub fn same(&self, other: &SharedMatrices) -> bool {
        Arc::ptr_eq(&self.matrices, &other.matrices)
    }
}

impl Weights {
    /// Shares f32 matrices with other models of the same checkpoint through `shared`.
    pub fn with_shared_matrices(mut self, shared: SharedMatrices) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The matrix `module_name` (stored `expected`) from the shared matrices when one was loaded
    /// there, else `load`ed and shared; `load` alone when these weights share nothing or this
    /// matrix cannot be shared (see the module doc).
    pub(super) fn through_shared(&self, module_name: &str, expected: [usize; 2], load: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
        let shareable = self.device.is_cpu() && self.matrix_dtype() == DType::F32 && self.overrides.is_empty();
        let Some(shared) = self.shared.as_ref().filter(|s| shareable && s.dir == self.dir) else { return load() };
        let (name, _, _) = self.entry(module_name, &expected)?;
        if let Some(t) = shared.matrices.lock().ok().and_then(|m| m.get(&name).cloned()) {
            self.record(&name, &expected);
            return Ok(t);
        }
        let t = load()?;
        if let Ok(mut m) = shared.matrices.lock() {
            m.insert(name, t.clone());
        }
        Ok(t)
    }
}
