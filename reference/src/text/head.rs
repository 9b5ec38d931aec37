//! The lm_head and the final logit softcapping as a value that outlives the model: it reads the
//! head's `[vocab, hidden]` rows again, one vocabulary slice at a time, for a final hidden state
//! kept instead of the all-position logits.
//!
//! Why: at real width the logits are the largest tensor of a run (`[S, 262144]`: 600 positions
//! are 629 MB in f32). The calibrated L3 rule compares a candidate's logits with the reference's
//! and with a float64 run's; keeping the f64 run's final hidden state (`[S, hidden]`, a few MB)
//! and making its logits slice by slice while judging spares one such tensor. The rows are the
//! checkpoint's mapping (pages released as read: never resident all at once) or a quantized
//! build's dequantized matrix (shared, not copied).

use std::sync::Arc;

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
use crate::nn::linear::rounded_input;
use crate::nn::ops::softcap;
use crate::nn::upcast;
use crate::weights::RowTable;
use crate::weights::{ActivationQuant, MatmulActivations};

/// `softcap(x · Wᵀ)` for any vocabulary slice of `W` (`[vocab, hidden]`).
#[derive(Debug, Clone)]
pub struct LogitsHead {
    rows: Arc<RowTable>,
    softcap: Option<f64>,
    /// How a quantized export rounds the head's input and output.
    activations: MatmulActivations,
}

impl LogitsHead {
    pub(crate) fn new(rows: RowTable, softcap: Option<f64>, activations: MatmulActivations) -> Self {
        Self { rows: Arc::new(rows), softcap, activations }
    }

    pub fn vocab(&self) -> usize {
        self.rows.rows()
    }

    /// Logits columns `start..start + cols` of `hidden` (`[S, hidden]`, the final normed state),
    /// `[S, cols]` in `hidden`'s dtype: the weight rows are upcast to it, so an f64 state gives
    /// the f64 run's logits.
    pub fn columns(&self, hidden: &Tensor, start: usize, cols: usize) -> Result<Tensor> {
        let h = self.rows.cols();
        if hidden.dim(1)? != h {
            return Err(Error::Internal(format!("logits head: hidden width {} for a head of width {h}", hidden.dim(1)?)));
        }
        let x = match &self.activations.input {
            Some(quant) => rounded_input(hidden, quant)?,
            None => hidden.clone(),
        };
        let w = Tensor::from_vec(self.rows.read_rows(start, cols)?, (cols, h), &Device::Cpu)?;
        let w = if x.device().is_cpu() { w } else { w.to_device(x.device())? };
        let y = upcast::matmul(&x, &w.t()?)?;
        let y = match self.activations.output {
            Some(grid) => rounded_input(&y, &ActivationQuant::Static(grid))?,
            None => y,
        };
        match self.softcap {
            Some(c) => softcap(y, c),
            None => Ok(y),
        }
    }
}
