//! `genai_config.json`: the runtime contract an ONNX Runtime GenAI package declares beside its
//! graph (onnxruntime-genai's model builder writes it; mobius writes it with `--runtime ort-genai`).
//! It says what the graph alone does not: how long the KV buffers are (`search.max_length`), that
//! past and present share one buffer written in place (`past_present_share_buffer`), and which
//! layers keep only a window of it (`decoder.sliding_window`). A graph built for those buffers
//! does not run on the growing cache a plain decode loop feeds it (GroupQueryAttention with
//! `sliding_window_cache=1` refuses a past shorter than its window), so the pipeline drives the
//! cache the way ORT GenAI does, from this file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file's name in a package folder.
pub const GENAI_CONFIG: &str = "genai_config.json";

/// The KV rows ORT GenAI adds to a sliding layer's buffer beyond its window when the config's
/// `cache_slack` is 0 ("the EP's default"): 16 on the CPU EP, 0 on CUDA (onnxruntime-genai
/// `src/models/windowed_kv_cache.cpp`, the EP default of the sliding cache's capacity). With
/// them the kernel compacts the window less often; any capacity ≥ the window computes the same
/// attention (GroupQueryAttention's `sliding_window_cache` keeps the latest positions in order).
pub fn default_cache_slack(cuda: bool) -> usize {
    if cuda {
        0
    } else {
        16
    }
}

/// Why a `genai_config.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GenAiConfigError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: field `{field}`: {message}")]
    Field { path: PathBuf, field: String, message: String },
}

/// What the decode loop needs from a `genai_config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenAiConfig {
    pub path: PathBuf,
    /// `model.type` (`gemma4_text` for the builder's Gemma 4 text component).
    pub model_type: String,
    /// `model.decoder.filename`: the graph the runtime opens.
    pub decoder_file: String,
    /// `model.context_length`.
    pub context_length: usize,
    /// `search.max_length` (defaults to the context length): the full layers' buffer length and
    /// the most positions one sequence may reach.
    pub max_length: usize,
    /// `search.past_present_share_buffer`: one buffer per KV tensor, written in place.
    pub share_buffer: bool,
    /// `model.decoder.sliding_window`, when the sliding layers keep only a window.
    pub window: Option<SlidingWindowCache>,
    /// `model.decoder.inputs` / `outputs`: the graph's names for the runtime's roles
    /// (`input_ids`, `past_key_names` = `past_key_values.%d.key`, …).
    pub inputs: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    /// `model.decoder.session_options.provider_options`: EP name → its options.
    pub provider_options: BTreeMap<String, BTreeMap<String, String>>,
}

/// The provider options that turn graph capture on, by EP (onnxruntime-genai's names).
const GRAPH_CAPTURE: [&str; 3] = ["enableGraphCapture", "enable_graph_capture", "enable_cuda_graph"];

/// `model.decoder.sliding_window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindowCache {
    pub window_size: usize,
    /// The layers (KV pairs) whose buffer holds a window; the others hold `max_length`.
    pub layers: Vec<usize>,
    /// Rows beyond the window; 0 means the EP's default ([`default_cache_slack`]).
    pub cache_slack: usize,
    /// ORT GenAI's QNN ring cache (uint8 KV, slid by the runtime): not driven here.
    pub slide_key_value_cache: bool,
}

#[derive(Deserialize)]
struct Raw {
    model: RawModel,
    #[serde(default)]
    search: RawSearch,
}

#[derive(Deserialize)]
struct RawModel {
    #[serde(rename = "type")]
    model_type: String,
    context_length: usize,
    decoder: RawDecoder,
}

#[derive(Deserialize)]
struct RawDecoder {
    filename: String,
    #[serde(default)]
    inputs: BTreeMap<String, String>,
    #[serde(default)]
    outputs: BTreeMap<String, String>,
    sliding_window: Option<RawWindow>,
    #[serde(default)]
    session_options: RawSessionOptions,
}

#[derive(Deserialize, Default)]
struct RawSessionOptions {
    #[serde(default)]
    provider_options: Vec<BTreeMap<String, BTreeMap<String, String>>>,
}

#[derive(Deserialize)]
struct RawWindow {
    window_size: usize,
    #[serde(default)]
    layers: Vec<usize>,
    #[serde(default)]
    cache_slack: usize,
    #[serde(default)]
    slide_key_value_cache: bool,
}

#[derive(Deserialize, Default)]
struct RawSearch {
    max_length: Option<usize>,
    #[serde(default)]
    past_present_share_buffer: bool,
}

impl GenAiConfig {
    /// The EP the package is built to run on, as its provider options say: their first provider
    /// (`cuda`, `dml`, `webgpu`, …), or the CPU when they name none (ORT GenAI then runs it on
    /// the CPU EP: the builder's `-e cpu` writes an empty list); `None` for a provider mobius's
    /// table does not name.
    pub fn target_ep(&self) -> Option<crate::eps::Ep> {
        use crate::eps::Ep;
        let Some(name) = self.provider_options.keys().next() else { return Some(Ep::Cpu) };
        match name.to_ascii_lowercase().as_str() {
            "nvtensorrtrtx" | "tensorrt-rtx" => Some(Ep::TrtRtx),
            other => other.parse().ok(),
        }
    }

    /// Reads `dir/genai_config.json`; `None` when the package has none.
    pub fn read(dir: &Path) -> Result<Option<Self>, GenAiConfigError> {
        let path = dir.join(GENAI_CONFIG);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|source| GenAiConfigError::Read { path: path.clone(), source })?;
        Self::parse(&text, &path).map(Some)
    }

    /// Parses the text of a `genai_config.json` read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self, GenAiConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: Raw = serde_path_to_error::deserialize(de).map_err(|e| GenAiConfigError::Field {
            path: path.into(),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
        let field = |field: &str, message: String| GenAiConfigError::Field { path: path.into(), field: field.into(), message };
        let max_length = raw.search.max_length.unwrap_or(raw.model.context_length);
        if max_length == 0 {
            return Err(field("search.max_length", "a positive length, found 0".into()));
        }
        let window = raw.model.decoder.sliding_window.map(|w| SlidingWindowCache {
            window_size: w.window_size,
            layers: w.layers,
            cache_slack: w.cache_slack,
            slide_key_value_cache: w.slide_key_value_cache,
        });
        if let Some(w) = &window {
            if w.window_size == 0 {
                return Err(field("model.decoder.sliding_window.window_size", "a positive window, found 0".into()));
            }
        }
        Ok(GenAiConfig {
            path: path.into(),
            model_type: raw.model.model_type,
            decoder_file: raw.model.decoder.filename,
            context_length: raw.model.context_length,
            max_length,
            share_buffer: raw.search.past_present_share_buffer,
            window,
            inputs: raw.model.decoder.inputs,
            outputs: raw.model.decoder.outputs,
            provider_options: raw.model.decoder.session_options.provider_options.into_iter().flatten().collect(),
        })
    }

    /// The rows ORT GenAI allocates for KV pair `pair`'s buffers: `max_length`, or for a layer of
    /// the sliding window `min(max_length, window + slack)`.
    pub fn capacity(&self, pair: usize, cuda: bool) -> usize {
        match &self.window {
            Some(w) if w.layers.contains(&pair) => {
                let slack = if w.cache_slack > 0 { w.cache_slack } else { default_cache_slack(cuda) };
                self.max_length.min(w.window_size + slack)
            }
            _ => self.max_length,
        }
    }

    /// Whether the runtime captures the decoder's graph on some EP (`enableGraphCapture` and its
    /// siblings set to "1"): then the graph must run without shape-dependent ops.
    pub fn graph_capture(&self) -> bool {
        self.provider_options.values().any(|o| GRAPH_CAPTURE.iter().any(|k| o.get(*k).is_some_and(|v| v == "1" || v == "true")))
    }

    /// The graph's name for the runtime's role `role` (`past_key_names` → `past_key_values.%d.key`),
    /// with `%d` replaced by `index`.
    pub fn name_of(&self, role: &str, index: usize) -> Option<String> {
        self.inputs.get(role).or_else(|| self.outputs.get(role)).map(|p| p.replace("%d", &index.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder_fp32() -> GenAiConfig {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision/builder/fp32");
        GenAiConfig::read(&dir).expect("parses").expect("present")
    }

    /// Guards the reading of the builder's file and the capacities ORT GenAI gives each buffer.
    #[test]
    fn builder_config_and_capacities() {
        let c = builder_fp32();
        assert_eq!((c.model_type.as_str(), c.context_length, c.max_length, c.share_buffer), ("gemma4_text", 256, 256, true));
        let w = c.window.as_ref().expect("window");
        assert_eq!((w.window_size, w.layers.clone(), w.cache_slack), (8, vec![0, 1, 3, 4], 0));
        assert_eq!((c.capacity(0, false), c.capacity(2, false), c.capacity(0, true)), (24, 256, 8));
        assert_eq!(c.name_of("past_key_names", 3).as_deref(), Some("past_key_values.3.key"));
        assert_eq!(c.name_of("present_value_names", 5).as_deref(), Some("present.5.value"));
        assert!(!c.graph_capture());
        let text = r#"{"model": {"type": "t", "context_length": 8, "decoder": {"filename": "m",
            "session_options": {"provider_options": [{"webgpu": {"enableGraphCapture": "1"}}]}}}}"#;
        assert!(GenAiConfig::parse(text, Path::new("g.json")).expect("parses").graph_capture());
        let dense = GenAiConfig::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision/builder/fp32-dense"))
            .expect("parses")
            .expect("present");
        assert!(dense.window.is_none() && dense.share_buffer);
        assert_eq!(dense.capacity(0, false), 256);
        assert!(GenAiConfig::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-vision/onnx")).expect("ok").is_none());
    }

    /// Guards the errors: a wrong type or a zero length is named by its field.
    #[test]
    fn bad_fields_are_named() {
        let p = Path::new("x/genai_config.json");
        let e = GenAiConfig::parse(r#"{"model": {"type": "t", "context_length": "long", "decoder": {"filename": "m"}}}"#, p).unwrap_err();
        assert!(e.to_string().contains("model.context_length"), "{e}");
        let e = GenAiConfig::parse(r#"{"model": {"type": "t", "context_length": 0, "decoder": {"filename": "m"}}}"#, p).unwrap_err();
        assert!(e.to_string().contains("search.max_length"), "{e}");
        let text = r#"{"model": {"type": "t", "context_length": 8, "decoder": {"filename": "m", "sliding_window": {"window_size": 0}}}}"#;
        let e = GenAiConfig::parse(text, p).unwrap_err();
        assert!(e.to_string().contains("window_size"), "{e}");
    }
}
