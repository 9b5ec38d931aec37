//! `onnx-parity logits`: run one back end (the reference on a checkpoint, or ORT on an export) on
//! an inputs file and write `logits` [1,S,V] f32 (all positions), `greedy_tokens` i64 [1,N] when
//! asked, and `image_features` [n,hidden] for image inputs, as safetensors — the same names the
//! fixture oracles use, so any two dumps compare directly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onnx_parity_reference::{BidirectionalScope as RefScope, Gemma4Unified};
use safetensors::tensor::{Dtype, TensorView};

use crate::evaluation::reference_run;
use crate::inputs::{Dense, ModelInputs};
use crate::onnx::pipeline::{OnnxPipeline, SessionOptions};

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("reference: {0}")]
    Reference(String),
    #[error("onnx: {0}")]
    Onnx(String),
    #[error("writing {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// Which back end to run.
pub enum Backend<'a> {
    Reference { checkpoint: &'a Path, scope: Option<RefScope> },
    Onnx { dir: &'a Path },
}

/// Tensors produced by a dump.
#[derive(Debug, Default)]
pub struct Dump {
    pub logits: Option<Dense<f32>>,
    pub image_features: Option<Dense<f32>>,
    pub greedy_tokens: Option<Vec<i64>>,
}

/// Runs `backend` on `inputs`; `greedy` new tokens when > 0 (EOS id 1 stops early).
pub fn run(backend: Backend<'_>, inputs: &ModelInputs, greedy: usize, eos: &[i64]) -> Result<Dump, DumpError> {
    match backend {
        Backend::Reference { checkpoint, scope } => {
            let model = Gemma4Unified::load(checkpoint).map_err(|e| DumpError::Reference(e.to_string()))?;
            let scope = scope.unwrap_or_else(|| model.hf_forward_scope());
            let run = reference_run(&model, inputs, scope, greedy, eos).map_err(DumpError::Reference)?;
            Ok(Dump { logits: Some(run.logits), image_features: run.image_features, greedy_tokens: (greedy > 0).then_some(run.tokens) })
        }
        Backend::Onnx { dir } => {
            let o = |e: crate::onnx::pipeline::PipelineError| DumpError::Onnx(e.to_string());
            let mut p = OnnxPipeline::open(dir, &SessionOptions::default()).map_err(o)?;
            let (prefill, gen) = p.greedy(inputs, greedy, eos, None).map_err(o)?;
            Ok(Dump {
                logits: Some(prefill.logits),
                image_features: prefill.image_features,
                greedy_tokens: (greedy > 0).then_some(gen.tokens),
            })
        }
    }
}

impl Dump {
    /// Writes the tensors as safetensors (temp file + rename).
    pub fn save(&self, path: &Path) -> Result<(), DumpError> {
        let werr = |m: String| DumpError::Write { path: path.into(), message: m };
        let mut bufs: BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> = BTreeMap::new();
        let f32_bytes = |d: &Dense<f32>| d.data.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        if let Some(l) = &self.logits {
            bufs.insert("logits".into(), (Dtype::F32, l.shape.clone(), f32_bytes(l)));
        }
        if let Some(f) = &self.image_features {
            bufs.insert("image_features".into(), (Dtype::F32, f.shape.clone(), f32_bytes(f)));
        }
        if let Some(t) = &self.greedy_tokens {
            bufs.insert("greedy_tokens".into(), (Dtype::I64, vec![1, t.len()], t.iter().flat_map(|x| x.to_le_bytes()).collect()));
        }
        let views = bufs
            .iter()
            .map(|(k, (dt, shape, bytes))| TensorView::new(*dt, shape.clone(), bytes).map(|v| (k.clone(), v)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| werr(e.to_string()))?;
        let bytes = safetensors::serialize(views, None).map_err(|e| werr(e.to_string()))?;
        crate::atomic::write_atomic(path, &bytes).map_err(|e| werr(e.to_string()))
    }
}
