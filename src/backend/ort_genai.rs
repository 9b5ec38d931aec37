//! An export package run by onnxruntime-genai ([`crate::ort_genai`]) as a [`Backend`]: the
//! package as users deploy it, through its `genai_config.json`. The prefill's logits are the
//! model's `logits` output of the prompt's run (every position the graph returns); each
//! teacher-forced step appends one token and reads the logits ORT GenAI's search would see;
//! the free run is ORT GenAI's own greedy search. It exposes no layer outputs.

use std::path::{Path, PathBuf};

use super::{Backend, BackendError, GenerationRequest};
use crate::inputs::ModelInputs;
use crate::onnx::protocol;
use crate::ort_genai::ffi::{Api, Floats, Model};
use crate::ort_genai::{GenaiConfig, GenaiError, GENAI_ORT_VERSION, GENAI_VERSION};
use crate::outputs::{Dense, GeneratedTokens, LayerOutputs, Prefill, Run};

impl From<GenaiError> for BackendError {
    fn from(e: GenaiError) -> Self {
        BackendError::Implementation(Box::new(e))
    }
}

/// A package opened in ORT GenAI.
pub struct OrtGenai {
    api: &'static Api,
    dir: PathBuf,
    config: GenaiConfig,
    /// Loaded once; generators are made per run.
    model: Model<'static>,
}

impl OrtGenai {
    /// Opens the package in `dir` (fetching and loading the library on first use).
    pub fn open(dir: &Path) -> Result<OrtGenai, GenaiError> {
        let config = GenaiConfig::of_package(dir)?.ok_or_else(|| {
            GenaiError::Unsupported(crate::ort_genai::unsupported(dir, false).unwrap_or_else(|| "no genai_config.json".into()))
        })?;
        let api = crate::ort_genai::api()?;
        let model = Model::open(api, dir)?;
        Ok(OrtGenai { api, dir: dir.to_path_buf(), config, model })
    }

    /// The last position's row of `[1, S, vocab]` logits.
    fn last_row(f: &Floats) -> Result<Vec<f32>, GenaiError> {
        let vocab = f.shape.last().copied().unwrap_or(0);
        if vocab == 0 || f.data.len() < vocab {
            return Err(GenaiError::Call { call: protocol::LOGITS, message: format!("logits of shape {:?}", f.shape) });
        }
        Ok(f.data[f.data.len() - vocab..].to_vec())
    }
}

impl Backend for OrtGenai {
    fn describe(&self) -> String {
        let _ = self.api;
        format!(
            "ONNX Runtime GenAI {GENAI_VERSION} on ONNX Runtime {GENAI_ORT_VERSION} CPUExecutionProvider ({}, model type {})",
            self.dir.display(),
            self.config.model_type
        )
    }

    fn run(&mut self, inputs: &ModelInputs, request: &GenerationRequest<'_>) -> Result<Run, BackendError> {
        if inputs.has_images() {
            let reason = crate::ort_genai::unsupported(&self.dir, true).unwrap_or_else(|| "image prompts".into());
            return Err(GenaiError::Unsupported(reason).into());
        }
        let ids = &inputs.input_ids;
        // The generator holds the prompt and every new token; one more position of slack, as
        // ORT GenAI's search stops at max_length.
        let max_length = ids.len() + request.max_new_tokens + 1;
        let mut generator = self.model.generator(max_length)?;
        generator.append(ids)?;
        let logits = generator.output(&self.config.logits_output)?;
        let last = Self::last_row(&logits)?;
        let mut prefill = Prefill { logits: Dense::new(logits.shape.clone(), logits.data), ..Default::default() };
        if request.layer_outputs {
            prefill.layers = LayerOutputs::Unavailable("ORT GenAI returns the package's declared outputs only".into());
        }
        let generation = match request.forced {
            // Teacher forcing: each token appended, the logits its search would see read back.
            Some(forced) => {
                let choose = |_: usize, _: &[f32]| -> Result<i64, GenaiError> { Ok(0) };
                GeneratedTokens::decode(last, request.max_new_tokens, request.eos, Some(forced), choose, |_, token| {
                    generator.append(&[token])?;
                    Ok(generator.logits()?.data)
                })?
            }
            // Its own greedy search (`do_sample` false), stopping at an EOS as the others do.
            None => {
                let mut out = GeneratedTokens::default();
                for _ in 0..request.max_new_tokens {
                    out.step_logits.push(generator.logits()?.data);
                    let token = generator.generate_next()?;
                    out.tokens.push(token);
                    if request.eos.contains(&token) {
                        break;
                    }
                }
                out
            }
        };
        let run = Run { prefill, generation, step_inputs: Default::default() };
        run.require_finite("ORT GenAI")?;
        Ok(run)
    }

    /// Its free run is ORT GenAI's own search, which the harness does not replace by a forced
    /// run whose argmax agrees.
    fn searches_itself(&self) -> bool {
        true
    }
}
