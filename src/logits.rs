//! `onnx-parity logits`: run one back end (the reference on a checkpoint, or ORT on an export) on
//! an inputs file and write `logits` `[1,S,V]` f32 (all positions), every component it produced
//! (`image_features`, `inputs_embeds`, `per_layer_inputs`) and `greedy_tokens` i64 `[1,N]` when
//! asked, as safetensors — the same names the fixture oracles use, so any two dumps compare
//! directly.

use std::path::{Path, PathBuf};

use crate::backend::{Backend, BackendError, GenerationRequest};
use crate::inputs::ModelInputs;
use crate::onnx::protocol;
use crate::outputs::{LayerOutputs, Run};
use crate::tensor_file::TensorFile;

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{backend}: {source}")]
    Backend {
        backend: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("writing {}: {source}", path.display())]
    Serialize {
        path: PathBuf,
        #[source]
        source: crate::tensor_file::TensorFileError,
    },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a dump holds: the run, and whether greedy tokens were asked for.
#[derive(Debug)]
pub struct Dump {
    pub run: Run,
    pub with_tokens: bool,
}

/// Runs `backend` on `inputs` with all-position logits; `greedy` new tokens when > 0; each
/// decoder layer's output with `layers`.
pub fn run(backend: &mut dyn Backend, inputs: &ModelInputs, greedy: usize, eos: &[i64], layers: bool) -> Result<Dump, DumpError> {
    let request = GenerationRequest { max_new_tokens: greedy, eos, forced: None, all_position_logits: true, layer_outputs: layers };
    let run =
        backend.run(inputs, &request).map_err(|source| DumpError::Backend { backend: backend.describe(), source: Box::new(source) })?;
    Ok(Dump { run, with_tokens: greedy > 0 })
}

impl Dump {
    /// Writes the tensors as safetensors (temp file + rename).
    pub fn save(&self, path: &Path) -> Result<(), DumpError> {
        let l = &self.run.prefill.logits;
        let mut file = TensorFile::new().f32(protocol::LOGITS, l.shape.clone(), &l.data);
        for (c, d) in &self.run.prefill.components {
            file = file.f32(c.as_str(), d.shape.clone(), &d.data);
        }
        if let LayerOutputs::Tensors(layers) = &self.run.prefill.layers {
            for (i, d) in layers.iter().enumerate() {
                file = file.f32(&format!("layer.{i}"), d.shape.clone(), &d.data);
            }
        }
        if self.with_tokens {
            let t = &self.run.generation.tokens;
            file = file.i64("greedy_tokens", vec![1, t.len()], t);
        }
        let bytes = file.to_bytes().map_err(|source| DumpError::Serialize { path: path.into(), source })?;
        crate::atomic::write_atomic(path, &bytes).map_err(|source| DumpError::Write { path: path.into(), source })
    }
}
