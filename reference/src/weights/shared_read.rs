//! Which matrices a model's [`Weights`] take through the [`super::SharedMatrices`] handle they
//! were given, and under what name: kept apart from the handle itself, which knows nothing of
//! overrides or devices.

use candle_core::{DType, Tensor};

use super::Weights;
use crate::error::Result;

impl Weights {
    /// The matrix `module_name` (`expected` its stored shape) through the handle these weights
    /// share matrices with, when it is for them, else `load`ed. Only f32 matrices on the CPU, of
    /// the weights the handle is for, are shared: the checkpoint's own, or one build's overrides
    /// (overrides of no recorded build share nothing).
    pub(super) fn through_shared(&self, module_name: &str, expected: &[usize; 2], load: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
        let shareable = self.device.is_cpu() && self.matrix_dtype() == DType::F32;
        let build = if self.overrides.is_empty() { None } else { self.overrides.origin() };
        if !self.overrides.is_empty() && build.is_none() {
            return load();
        }
        let Some(shared) = self.shared.as_ref().filter(|s| shareable && s.is_for(&self.dir, build)) else { return load() };
        // An override is shared under its key (and recorded as used when taken), a checkpoint
        // tensor under its stored name.
        let (name, recorded) = match self.checked_override(module_name, expected)? {
            Some((key, _)) => (format!("override {key}"), key.to_string()),
            None => {
                let stored = self.entry(module_name, expected)?.0;
                (stored.clone(), stored)
            }
        };
        shared.get_or_load(name, |_| self.record(&recorded, expected), load)
    }
}
