//! onnxruntime-genai, the runtime the exports are deployed on (mobius writes its
//! `genai_config.json` with `--runtime ort-genai`; ORT GenAI's model builder targets it), as a
//! second way to run a package: what breaks in the runtime contract (the config's KV layout,
//! share-buffer mode, inputs it binds) shows here and not in the harness's own decode loop.
//!
//! The library comes from its PyPI wheel (pinned [`GENAI_VERSION`]) and runs the ONNX Runtime
//! its wheel requires ([`GENAI_ORT_VERSION`], also from its wheel), both fetched once into the
//! per-user cache beside the harness's own ORT ([`crate::runtime::wheel`]). The two ORT releases
//! live in one process as two separate libraries: ORT GenAI is told which one is its own through
//! `ORT_LIB_PATH`, the only way it offers (it has no C call for it, and without the variable it
//! would bind whichever `libonnxruntime.so.1` the process loaded first: the harness's).

mod error;
pub mod ffi;
mod version;

pub use error::GenaiError;
pub use version::{GENAI_ORT_VERSION, GENAI_VERSION};

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::onnx::protocol;
use crate::runtime::wheel::{self, Wheel, WheelSource};

/// onnxruntime-genai's wheel: its one native library (the Python extension beside it is not
/// taken).
fn genai_wheel() -> Wheel {
    Wheel { name: "onnxruntime-genai", version: GENAI_VERSION, member_dir: "onnxruntime_genai/", library: "libonnxruntime-genai.so".into() }
}

/// The ONNX Runtime wheel ORT GenAI runs on (CPU).
fn ort_wheel() -> Wheel {
    Wheel {
        name: "onnxruntime",
        version: GENAI_ORT_VERSION,
        member_dir: "onnxruntime/capi/",
        library: format!("libonnxruntime.so.{GENAI_ORT_VERSION}"),
    }
}

/// Both libraries in the cache under `root`, fetched on first use: (ORT GenAI, its ORT).
pub fn install(root: &Path, source: &WheelSource) -> Result<(PathBuf, PathBuf), GenaiError> {
    let get = |w: Wheel| w.install(&w.cache_dir(root), source).map_err(|source| GenaiError::Fetch { spec: w.spec(), source });
    Ok((get(genai_wheel())?, get(ort_wheel())?))
}

/// Where ORT GenAI's ONNX Runtime lies in the cache under `root` (fetched or not): the drivers
/// point `ORT_LIB_PATH` at it (`crate::context::RunContext::variables_to_set`).
pub fn ort_library(root: &Path) -> PathBuf {
    let w = ort_wheel();
    w.cache_dir(root).join(&w.library)
}

static API: OnceLock<Result<ffi::Api, Arc<GenaiError>>> = OnceLock::new();

/// The loaded library (fetched and loaded on first use, then kept for the process).
pub fn api() -> Result<&'static ffi::Api, GenaiError> {
    let api = API.get_or_init(|| {
        let load = || {
            let (genai, ort) = install(&wheel::cache_root(), &WheelSource::Pip)?;
            tracing::info!(
                "loading onnxruntime-genai {GENAI_VERSION} from {} on ONNX Runtime {GENAI_ORT_VERSION} ({})",
                genai.display(),
                ort.display()
            );
            // ORT GenAI reads ORT_LIB_PATH once, in the static initialiser that `Api::load` runs:
            // the driver set it at start (crate::context::RunContext::variables_to_set). Without
            // it ORT GenAI would bind the harness's ONNX Runtime, or abort.
            let set = crate::context::current().ort_lib_path.as_deref() == Some(ort.as_os_str());
            if !set {
                return Err(GenaiError::OrtLibPath { expected: ort });
            }
            // SAFETY: ORT_LIB_PATH names a file that exists (just installed), so the library's
            // initialiser finds its ONNX Runtime instead of aborting.
            unsafe { ffi::Api::load(&genai) }
        };
        load().map_err(Arc::new)
    });
    api.as_ref().map_err(|e| GenaiError::Once(Arc::clone(e)))
}

/// What the harness reads of a package's `genai_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct GenaiConfig {
    /// `model.type` (`gemma4_text`: text only; `gemma4`: with vision sub-models).
    pub model_type: String,
    /// `model.context_length`: the longest sequence a generator may hold.
    pub context_length: Option<usize>,
    /// The decoder's logits output (`model.decoder.outputs.logits`, `logits` by default).
    pub logits_output: String,
}

impl GenaiConfig {
    /// The config of the package in `dir`; `Ok(None)` when it has no `genai_config.json`.
    pub fn of_package(dir: &Path) -> Result<Option<GenaiConfig>, GenaiError> {
        let path = dir.join("genai_config.json");
        if !path.is_file() {
            return Ok(None);
        }
        let bad = |message: String| GenaiError::Config { path: path.clone(), message };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let model = json.get("model").ok_or_else(|| bad("no `model` object".into()))?;
        let model_type = model.get("type").and_then(|t| t.as_str()).ok_or_else(|| bad("no string `model.type`".into()))?.to_string();
        let context_length = model.get("context_length").and_then(|c| c.as_u64()).map(|c| c as usize);
        let logits_output = model
            .pointer("/decoder/outputs/logits")
            .map(|l| l.as_str().map(str::to_string).ok_or_else(|| bad("`model.decoder.outputs.logits` is not a string".into())))
            .transpose()?
            .unwrap_or_else(|| protocol::LOGITS.into());
        Ok(Some(GenaiConfig { model_type, context_length, logits_output }))
    }

    /// Whether ORT GenAI runs this model type on a text prompt alone (its LLM types).
    pub fn is_text_only(&self) -> bool {
        self.model_type.ends_with("_text")
            || !matches!(self.model_type.as_str(), "gemma4" | "gemma4_unified" | "gemma3" | "phi3v" | "qwen2_5_vl")
    }
}

/// Why ORT GenAI cannot run a package on `ep`: the harness loads its CPU build
/// (`onnxruntime-genai`, on the CPU `onnxruntime` its wheel requires). Its CUDA build exists for
/// the pinned version (`onnxruntime-genai-cuda` 0.18.0, on `onnxruntime-gpu` 1.32.0) but one
/// process holds one ORT GenAI library, so a CUDA trial needs the CUDA build for the CPU trials
/// too (with the package's providers replaced per trial): not driven yet.
pub fn not_on(ep: crate::eps::RunEp) -> Option<String> {
    (!ep.is_cpu()).then(|| {
        format!(
            "ORT GenAI on {}: the harness drives onnxruntime-genai {GENAI_VERSION}'s CPU build only; its CUDA build \
             (onnxruntime-genai-cuda=={GENAI_VERSION} on onnxruntime-gpu=={GENAI_ORT_VERSION}) is not driven yet. The package's \
             CPU trial judges it in ORT GenAI; the pipeline judges it on {ep}",
            ep.ort_name()
        )
    })
}

/// Why ORT GenAI cannot judge the package in `dir` on a prompt (`with_images`), or `None`.
pub fn unsupported(dir: &Path, with_images: bool) -> Option<String> {
    match GenaiConfig::of_package(dir) {
        Ok(None) => Some(format!(
            "ORT GenAI runs a package through its genai_config.json, and {} has none (mobius writes one with \
             `--runtime ort-genai`; ORT GenAI's model builder always does)",
            dir.display()
        )),
        // An unreadable config is not a skip: the run fails and says why.
        Err(_) => None,
        Ok(Some(c)) if with_images && c.is_text_only() => Some(format!(
            "ORT GenAI's `{}` model type (genai_config.json's model.type) takes text only, whatever sub-models the \
             package holds; the prompt has images",
            c.model_type
        )),
        Ok(Some(_)) if with_images => {
            Some("ORT GenAI's multimodal processor is not driven by the harness yet (image prompts judged by the ONNX pipeline)".into())
        }
        Ok(Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: a package without genai_config.json is named as missing it; a text-only type on
    /// an image prompt names the type; a malformed config is an error naming the file.
    #[test]
    fn config_and_skips() {
        let dir = tempfile::tempdir().expect("temp dir");
        let reason = unsupported(dir.path(), false).expect("no config is a skip");
        assert!(reason.contains("genai_config.json") && reason.contains("--runtime ort-genai"), "{reason}");
        std::fs::write(dir.path().join("genai_config.json"), r#"{"model": {"type": "gemma4_text", "context_length": 64}}"#).expect("write");
        assert_eq!(unsupported(dir.path(), false), None);
        assert!(unsupported(dir.path(), true).expect("images").contains("`gemma4_text`"));
        let c = GenaiConfig::of_package(dir.path()).expect("reads").expect("present");
        assert_eq!(c.context_length, Some(64));
        std::fs::write(dir.path().join("genai_config.json"), r#"{"model": {}}"#).expect("write");
        let e = GenaiConfig::of_package(dir.path()).expect_err("no type").to_string();
        assert!(e.contains("genai_config.json") && e.contains("model.type"), "{e}");
    }
}
