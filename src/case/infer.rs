//! A case built from what an export and its checkpoint say, for `onnx-parity check EXPORT
//! --model DIR|HF_ID` (the exporter's inner loop: no YAML to write by hand). The model type,
//! vocabulary and EOS ids come from the checkpoint's `config.json`; the dtype from the export's
//! graphs (a quantized weight's bit width, else the KV cache's or the logits' element type); the
//! task from its sub-models (a vision encoder: image-text-to-text). What cannot be inferred —
//! expected failures, the export pin (`export:`), goldens for L4/L5, a prompt without a tokenizer,
//! an image for a vision export given none — is listed in [`Inferred::not_inferred`], printed and
//! written above the case, never guessed. A vision export given neither prompt nor image is fed a
//! test pattern the harness draws ([`TEST_IMAGE`], written beside the case) so that L3 judges its
//! vision encoder too; given a prompt alone, it is judged on the text path and told so.

use std::path::{Path, PathBuf};

use crate::level::{Dtype, Level};
use crate::onnx::graph::{Dim, GraphSummary};
use crate::onnx::package::{Layout, OnnxPackage, DECODER, TEXT_MODEL, VISION_ENCODER};
use crate::onnx::protocol;

/// Why no case could be built (`check` exits 2 naming it).
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    #[error("{}: not an ONNX export: {source}", path.display())]
    NotAnExport {
        path: PathBuf,
        #[source]
        source: crate::onnx::package::PackageError,
    },
    #[error("{}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("--model {model}: {why}")]
    Model { model: String, why: String },
    #[error("{export} is not an export of {model}: {why}")]
    OtherModel { export: String, model: String, why: String },
}

/// The text fed where no prompt is given and the checkpoint has a tokenizer, repeated until it
/// passes the sliding window ([`default_text`]).
const DEFAULT_PASSAGE: &str = "Rivers carry sediment from the mountains to the sea, where a delta grows by a few metres each \
    year. In 1869 a periodic table arranged the elements by atomic weight; later tables used the atomic number. Bread \
    rises because yeast turns sugar into carbon dioxide and alcohol. Seven bridges crossed the river at Königsberg, \
    and no walk could cross each of them exactly once. ";
/// What the prompt fed with the test pattern to a vision export given no image begins with.
const DEFAULT_IMAGE_PROMPT: &str = "Describe this image.";
/// How far past the sliding window a default prompt reaches, in tokens: enough positions that
/// attend to a window which no longer starts at the first token.
pub const PAST_THE_WINDOW: usize = 64;

/// The default text: [`DEFAULT_PASSAGE`] repeated until its words alone (each at least one
/// token) number `tokens`, so that the sliding layers are judged on keys their window no longer
/// reaches; a prompt within the window computes what full attention would, and a wrong window (or
/// none) would pass. `most`: the positions a static KV cache holds for the prompt, where the
/// export has one: the repeats are then kept to at most two tokens a word.
fn default_text(tokens: usize, most: Option<usize>) -> String {
    let words = DEFAULT_PASSAGE.split_whitespace().count();
    let mut repeats = tokens.div_ceil(words).max(1);
    if let Some(most) = most {
        repeats = repeats.min((most / (2 * words)).max(1));
    }
    DEFAULT_PASSAGE.repeat(repeats).trim_end().to_string()
}

/// The positions a static KV cache (`key_cache.<i>` `[1, capacity, …]`) holds, where the decoder
/// has one.
fn static_capacity(decoder: &GraphSummary) -> Option<usize> {
    let input = decoder.inputs.iter().find(|t| t.name.starts_with("key_cache."))?;
    match input.dims.as_ref()?.get(1)? {
        Dim::Static(c) => usize::try_from(*c).ok(),
        _ => None,
    }
}

/// The test pattern's file name beside the case.
pub const TEST_IMAGE: &str = "onnx-parity-test-pattern.png";

/// What the case is fed.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text through the checkpoint's tokenizer and chat template (with `images`).
    Text { text: String, images: Vec<PathBuf> },
    /// `n` token ids drawn from the vocabulary (a checkpoint without a tokenizer).
    Tokens(usize),
    /// A safetensors file of the processor's tensors.
    Tensors(PathBuf),
}

/// What `check` was asked.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    pub export: PathBuf,
    /// A checkpoint folder, or a model id in the HF cache.
    pub model: String,
    pub prompt: Option<Prompt>,
    pub levels: Vec<Level>,
    pub max_new_tokens: usize,
}

/// The case `check` runs.
#[derive(Debug, Clone)]
pub struct Inferred {
    /// The YAML, paths absolute or relative to `relative_to`.
    pub yaml: String,
    /// What it could not infer, one line each.
    pub not_inferred: Vec<String>,
    /// Where the case reads the harness's test pattern (`crate::inputs::image::test_pattern_png`),
    /// to be written there before it runs: a vision export given neither prompt nor image.
    pub test_pattern: Option<PathBuf>,
    /// The text model's sliding window, where its config has one: a prompt that does not pass
    /// it judges the sliding layers as full-attention ones, which `check` says.
    pub sliding_window: Option<usize>,
}

/// The tokens `--tokens N` feeds: BOS (2) then ids drawn from `3..vocab` by a fixed generator,
/// the same on every machine, leaving out `special` ids (the config's placeholders for media,
/// their delimiters, EOS): drawn ids stand for text, and a media placeholder without its media
/// takes another path through the model (HF embeds it as the pad token; the placeholder cases
/// judge that path).
pub fn token_ids(n: usize, vocab: usize, special: &[i64]) -> Vec<i64> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let span = vocab.saturating_sub(3).max(1) as u64;
    // Guards a vocabulary of special ids alone: the draw then keeps what it finds.
    let text_ids = (3..vocab.max(4) as i64).any(|id| !special.contains(&id));
    let mut ids = vec![2i64];
    while ids.len() < n {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let id = 3 + ((state >> 33) % span) as i64;
        if !text_ids || !special.contains(&id) {
            ids.push(id);
        }
    }
    ids.truncate(n.max(1));
    ids
}

/// Every id the config names a special token with (`…_token_id`, `…_token_index`, lists of
/// them), at its top level and in its `text_config`.
fn special_ids(config: &serde_json::Value) -> Vec<i64> {
    let mut out = Vec::new();
    for level in [Some(config), config.get("text_config")].into_iter().flatten() {
        let Some(map) = level.as_object() else { continue };
        for (key, value) in map {
            if key.ends_with("_token_id") || key.ends_with("_token_index") || key.ends_with("_token_ids") {
                match value {
                    serde_json::Value::Array(a) => out.extend(a.iter().filter_map(|v| v.as_i64())),
                    v => out.extend(v.as_i64()),
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The checkpoint folder `model` names: a folder, else a snapshot in the HF cache (never
/// downloaded here); and the model id the case is written under.
pub fn resolve_model(model: &str) -> Result<(PathBuf, String, Option<String>), InferError> {
    let dir = Path::new(model);
    if dir.is_dir() {
        // `…/tiny-model/checkpoint` is `local/tiny-model`.
        let id = dir.canonicalize().ok().and_then(|d| {
            let named = if d.file_name().is_some_and(|n| n == "checkpoint") { d.parent()?.to_path_buf() } else { d };
            named.file_name().map(|n| n.to_string_lossy().into_owned())
        });
        return Ok((dir.to_path_buf(), format!("local/{}", id.unwrap_or_else(|| "checkpoint".into())), None));
    }
    if dir.exists() || model.starts_with('.') || model.starts_with('/') || model.split('/').count() != 2 {
        let why = if dir.exists() { "is not a folder" } else { "is neither a checkpoint folder nor an `owner/name` model id" };
        return Err(InferError::Model { model: model.into(), why: why.into() });
    }
    let hub = crate::hub::Hub::new(crate::context::current().hub.clone());
    let revision = crate::hub::DEFAULT_REVISION;
    match hub.cached_snapshot_dir(model, revision).filter(|d| d.join("config.json").is_file()) {
        Some(d) => Ok((d, model.to_string(), Some(revision.to_string()))),
        None => Err(InferError::Model {
            model: model.into(),
            why: "not in the HF cache (HF_HOME / HF_HUB_CACHE) and `check` does not download: download it first (e.g. \
                  write the case with a checkpoint folder, or `onnx-parity fetch --weights` a case naming it), or pass its folder"
                .into(),
        }),
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value, InferError> {
    let text = std::fs::read_to_string(path).map_err(|e| InferError::Unreadable { path: path.into(), why: e.to_string() })?;
    serde_json::from_str(&text).map_err(|e| InferError::Unreadable { path: path.into(), why: format!("not JSON: {e}") })
}

/// The text model's sliding window (`sliding_window`; 0 where the config has none).
fn sliding_window(config: &serde_json::Value) -> usize {
    text_field(config, "sliding_window").and_then(|v| v.as_u64()).unwrap_or(0) as usize
}

/// `key` from the text config (`text_config.key`, else `key`).
fn text_field<'a>(config: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    config.get("text_config").and_then(|t| t.get(key)).or_else(|| config.get(key))
}

/// The build's dtype from its graphs: a quantized weight's bits, else the decoder's KV cache or
/// logits element type.
fn export_dtype(export: &Path, decoder: &GraphSummary) -> Result<Dtype, InferError> {
    let build = crate::onnx::quantized::QuantizedBuild::read(export)
        .map_err(|e| InferError::Unreadable { path: export.into(), why: e.to_string() })?;
    if let Some(b) = build {
        return Ok(if b.weights.iter().any(|w| w.bits <= 4) { Dtype::Int4 } else { Dtype::Int8 });
    }
    let typed = decoder
        .inputs
        .iter()
        .find(|i| i.name.starts_with("past_key_values"))
        .or_else(|| decoder.outputs.iter().find(|o| o.name == protocol::LOGITS));
    match typed.map(|t| t.dtype) {
        Some("float16") => Ok(Dtype::Float16),
        Some("bfloat16") => Ok(Dtype::Bfloat16),
        Some("float32") => Ok(Dtype::Float32),
        other => Err(InferError::Unreadable {
            path: decoder.path.clone(),
            why: format!("no KV cache input or logits output of a float type to take the dtype from (found {other:?})"),
        }),
    }
}

/// Whether the export is of this checkpoint: its logits' vocabulary, its KV pairs and its
/// sub-models are what the checkpoint's config says (L1 checks every tensor; this catches the
/// wrong `--model` before anything runs).
fn check_same_model(req: &CheckRequest, package: &OnnxPackage, decoder: &GraphSummary, config: &Path) -> Result<(), InferError> {
    let other = |why: String| InferError::OtherModel { export: req.export.display().to_string(), model: req.model.clone(), why };
    let contract = crate::onnx::contract::ExportContract::from_config_file(config)
        .map_err(|e| InferError::Unreadable { path: config.into(), why: e.to_string() })?;
    let graph_vocab = decoder.outputs.iter().find(|o| o.name == protocol::LOGITS).and_then(|o| o.dims.as_ref()?.last().cloned());
    if let Some(Dim::Static(v)) = graph_vocab {
        if v != contract.vocab_size {
            return Err(other(format!("its logits have {v} vocabulary entries, the checkpoint's config.json {}", contract.vocab_size)));
        }
    }
    let pairs = decoder.inputs.iter().filter(|i| i.name.starts_with("past_key_values.") && i.name.ends_with(".key")).count();
    if pairs > 0 && pairs != contract.kv.len() {
        return Err(other(format!(
            "its decoder has {pairs} KV cache pairs, the checkpoint's config.json {} layers with their own KV",
            contract.kv.len()
        )));
    }
    // Each pair's heads and head width (`[batch, heads, seq, head_dim]`) where the graph states them.
    for (i, kv) in contract.kv.iter().enumerate() {
        let Some(dims) = decoder.inputs.iter().find(|t| t.name == format!("past_key_values.{i}.key")).and_then(|t| t.dims.clone()) else {
            continue;
        };
        if let (Some(Dim::Static(h)), Some(Dim::Static(d))) = (dims.get(1), dims.get(3)) {
            if (*h, *d) != (kv.heads, kv.head_dim) {
                return Err(other(format!(
                    "its KV pair {i} has {h} heads of width {d}, the checkpoint's layer {} has {} of width {}",
                    kv.layer, kv.heads, kv.head_dim
                )));
            }
        }
    }
    let expected: Vec<&str> = contract.submodels.iter().map(|s| s.role).collect();
    let text_only_config = expected == [TEXT_MODEL];
    if text_only_config && package.layout == Layout::Multimodal {
        let found: Vec<&String> = package.submodels.keys().collect();
        return Err(other(format!("it has the sub-models {found:?}, the checkpoint's config.json describes a text-only model")));
    }
    Ok(())
}

/// A relative path from `base` to `path` when both are absolute, else `path`.
fn relative(path: &Path, base: Option<&Path>) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let Some(base) = base else { return abs(path).display().to_string() };
    let (p, b) = (abs(path), abs(base));
    let (pc, bc): (Vec<_>, Vec<_>) = (p.components().collect(), b.components().collect());
    let common = pc.iter().zip(&bc).take_while(|(a, b)| a == b).count();
    // Nothing in common but the root: the absolute path says more.
    if common <= 1 {
        return p.display().to_string();
    }
    let mut out = PathBuf::new();
    for _ in common..bc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c.as_os_str());
    }
    out.display().to_string()
}

/// The case for `req`, its paths relative to `case_dir` (the folder the YAML is written to).
pub fn infer(req: &CheckRequest, case_dir: Option<&Path>) -> Result<Inferred, InferError> {
    let package = OnnxPackage::open(&req.export).map_err(|source| InferError::NotAnExport { path: req.export.clone(), source })?;
    let (checkpoint, model_id, revision) = resolve_model(&req.model)?;
    let config = read_json(&checkpoint.join("config.json"))?;
    let model_type = config.get("model_type").and_then(|v| v.as_str()).unwrap_or_default().to_string();
    if !model_type.starts_with("gemma4") {
        return Err(InferError::Model { model: req.model.clone(), why: format!("model_type `{model_type}` is not a Gemma 4 model") });
    }
    let role = if package.layout == Layout::TextOnly { TEXT_MODEL } else { DECODER };
    let decoder_path = package.submodel(role).ok_or_else(|| InferError::Unreadable {
        path: req.export.clone(),
        why: format!("no `{role}` sub-model (found {:?})", package.submodels.keys().collect::<Vec<_>>()),
    })?;
    let decoder = GraphSummary::load(decoder_path).map_err(|e| InferError::Unreadable { path: decoder_path.into(), why: e.to_string() })?;
    check_same_model(req, &package, &decoder, &checkpoint.join("config.json"))?;
    let vocab = text_field(&config, "vocab_size").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
    let dtype = export_dtype(&req.export, &decoder)?;
    let vision = package.submodel(VISION_ENCODER).is_some();
    let mut not_inferred = vec![
        "expected failures (`xfail:`): none; a failing tier fails".to_string(),
        "the export pin (`export: {ep, dtype, static_cache}`): not written, so L1 checks no EP contract".to_string(),
    ];
    if req.levels.iter().any(|l| matches!(l, Level::L4 | Level::L5)) {
        not_inferred.push("goldens for L4/L5: none are looked for beside a written case until `onnx-parity golden` writes them".into());
    }
    // The case's fields; the header naming what was not inferred is put above them at the end,
    // once the prompt has added its own.
    let mut y = String::new();
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    y.push_str(&format!("model_id: {}\nmodel_type: {}\n", q(&model_id), q(&model_type)));
    if let Some(r) = &revision {
        y.push_str(&format!("revision: {}\n", q(r)));
    }
    let task = if vision { "image-text-to-text" } else { "text-generation" };
    y.push_str(&format!("task_type: {}\ndtype: {}\n", q(task), q(dtype.as_str())));
    if revision.is_none() {
        y.push_str(&format!("checkpoint: {}\n", q(&relative(&checkpoint, case_dir))));
    }
    y.push_str(&format!("onnx: {}\n", q(&relative(&req.export, case_dir))));
    let has_tokenizer = checkpoint.join("tokenizer.json").is_file();
    let window = sliding_window(&config);
    // How many prompt tokens pass the window by [`PAST_THE_WINDOW`], within what a static cache
    // holds beside the new tokens (and a chat template's few).
    let room = static_capacity(&decoder).map(|c| c.saturating_sub(req.max_new_tokens + 32));
    let tokens = room.map_or(window + PAST_THE_WINDOW, |r| r.min(window + PAST_THE_WINDOW)).max(1);
    // The test pattern a vision export is fed when given no image and no prompt.
    let mut test_pattern = None;
    let prompt = match &req.prompt {
        Some(p) => p.clone(),
        None if has_tokenizer && vision => {
            let path = case_dir.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir).join(TEST_IMAGE);
            not_inferred.push(format!(
                "an image: none given (`--image FILE`), so the harness's test pattern (`{TEST_IMAGE}`, written beside the case) is fed with a prompt beginning \"{DEFAULT_IMAGE_PROMPT}\""
            ));
            test_pattern = Some(path.clone());
            Prompt::Text { text: format!("{DEFAULT_IMAGE_PROMPT} {}", default_text(tokens, room)), images: vec![path] }
        }
        None if has_tokenizer => Prompt::Text { text: default_text(tokens, room), images: vec![] },
        None => {
            not_inferred.push(format!(
                "a prompt: the checkpoint has no tokenizer.json, so {tokens} token ids drawn from its vocabulary (no special or media placeholder id) are fed"
            ));
            Prompt::Tokens(tokens)
        }
    };
    let no_image = match &prompt {
        Prompt::Text { images, .. } => images.is_empty(),
        Prompt::Tokens(_) => true,
        // The processor's tensors may hold pixels: what they hold is read when the case runs.
        Prompt::Tensors(_) => false,
    };
    if vision && no_image {
        not_inferred.push(
            "an image: none given (`--image FILE`), so L3 feeds text alone and judges neither the vision encoder nor the image \
             path through the embedding (L1 still checks their graphs)"
                .into(),
        );
    }
    match &prompt {
        Prompt::Text { text, images } => {
            if !has_tokenizer {
                return Err(InferError::Model {
                    model: req.model.clone(),
                    why: "--prompt needs the checkpoint's tokenizer.json, which it lacks (use --tokens N)".into(),
                });
            }
            y.push_str(&format!("inputs:\n  prompts: [{}]\n", q(text)));
            if !images.is_empty() {
                let list: Vec<String> = images.iter().map(|i| q(&relative(i, case_dir))).collect();
                y.push_str(&format!("  images: [{}]\n", list.join(", ")));
            }
        }
        Prompt::Tokens(n) => {
            let ids: Vec<String> = token_ids(*n, vocab, &special_ids(&config)).iter().map(|i| i.to_string()).collect();
            y.push_str(&format!("inputs:\n  input_ids: [{}]\n", ids.join(", ")));
        }
        Prompt::Tensors(p) => y.push_str(&format!("inputs:\n  tensors: {}\n", q(&relative(p, case_dir)))),
    }
    let levels: Vec<String> = req.levels.iter().map(|l| l.to_string()).collect();
    y.push_str(&format!("levels: [{}]\n", levels.join(", ")));
    let eos = match text_field(&config, "eos_token_id").or_else(|| config.get("eos_token_id")) {
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_i64()).collect(),
        Some(v) => v.as_i64().into_iter().collect(),
        None => vec![1],
    };
    let eos: Vec<String> = eos.iter().map(|e| e.to_string()).collect();
    y.push_str(&format!(
        "generation:\n  max_new_tokens: {}\n  do_sample: false\n  eos_token_id: [{}]\n",
        req.max_new_tokens,
        eos.join(", ")
    ));
    let mut header =
        format!("# Written by `onnx-parity check` from the export {} and the checkpoint {}.\n", req.export.display(), req.model);
    for n in &not_inferred {
        header.push_str(&format!("# Not inferred: {n}\n"));
    }
    Ok(Inferred { yaml: header + &y, not_inferred, test_pattern, sliding_window: (window > 0).then_some(window) })
}
