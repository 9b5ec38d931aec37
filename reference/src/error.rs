//! Typed errors of the reference.
//!
//! Every way a checkpoint, a config or an input can be unusable has its own variant, so that a
//! harness verdict can say *what* is wrong (which field, which tensor, which file) instead of
//! surfacing a bare candle shape error from deep inside a forward pass.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while loading or running the reference.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A quantized build's weight whose payload could not be read.
    #[error(transparent)]
    Override(#[from] OverrideReadError),

    /// A file could not be opened, mapped or read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A JSON file (config, shard index) does not parse into the expected structure.
    #[error("cannot parse {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// A config file that parses but is rejected (unsupported model type or value, a KV-sharing
    /// layout HF cannot run, ...): the inner error, prefixed with the file it came from.
    #[error("{}: {source}", path.display())]
    InConfig {
        path: PathBuf,
        #[source]
        source: Box<Error>,
    },

    /// A safetensors file has a malformed header.
    #[error("malformed safetensors file {path}: {source}")]
    Safetensors {
        path: PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// `config.json` names a model type this crate does not implement.
    #[error("unsupported model_type {0:?}: expected gemma4_unified, gemma4_unified_text, gemma4 or gemma4_text")]
    UnsupportedModelType(String),

    /// A config field has a value that changes the computed function in a way this reference
    /// does not implement (or that HF itself cannot run). Rejected rather than silently ignored.
    #[error("config field `{field}` = {value}: {reason}")]
    UnsupportedConfig { field: &'static str, value: String, reason: String },

    /// `use_bidirectional_attention: "all"` turns the decoder into a bidirectional encoder
    /// (non-causal masks, halved sliding window); not a generative model this reference checks.
    #[error(
        "config field `use_bidirectional_attention` = \"all\": the decoder becomes non-causal \
         (HF sets is_causal=False and sliding_window = w//2+1); greedy decoding and KV caching \
         are meaningless for it, so the reference rejects it"
    )]
    BidirectionalAll,

    /// A KV-shared layer has no earlier non-shared layer of its attention type to borrow K/V
    /// from; HF fails with a `KeyError` on `shared_kv_states[layer_type]` for such a config.
    #[error(
        "layer {layer} ({layer_type}) is KV-shared (num_kv_shared_layers = {num_kv_shared_layers}) \
         but no non-shared {layer_type} layer precedes the shared block; HF cannot run this config"
    )]
    KvSharedLayerWithoutSource { layer: usize, layer_type: &'static str, num_kv_shared_layers: usize },

    /// A tensor the config requires is absent from the checkpoint.
    #[error("tensor `{name}` is missing from the checkpoint ({location})")]
    MissingTensor { name: String, location: String },

    /// A tensor exists but its shape disagrees with what the config implies.
    #[error("tensor `{name}` in {file} has shape {actual:?}, the config implies {expected:?}")]
    TensorShape { name: String, file: PathBuf, expected: Vec<usize>, actual: Vec<usize> },

    /// A tensor is stored in a dtype the reference cannot upcast to f32.
    #[error("tensor `{name}` in {file} has unsupported dtype {dtype}")]
    TensorDtype { name: String, file: PathBuf, dtype: String },

    /// The caller's inputs are inconsistent (wrong shapes, token/feature count mismatch, ...).
    #[error("invalid input: {0}")]
    Input(String),

    /// A broken internal invariant (a bug in the reference, never bad input).
    #[error("internal error: {0}")]
    Internal(String),

    /// An unknown bidirectional scope name or model type was given.
    #[error("unknown bidirectional scope {0:?}: expected all-layers, sliding-windowed or none")]
    UnknownScope(String),

    /// A failure inside candle (should not happen for validated inputs; kept for `?`).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl Error {
    /// Shorthand for an [`Error::Input`].
    pub(crate) fn input(msg: impl Into<String>) -> Self {
        Error::Input(msg.into())
    }

    /// Shorthand for an [`Error::UnsupportedConfig`].
    pub(crate) fn config(field: &'static str, value: impl std::fmt::Debug, reason: impl Into<String>) -> Self {
        Error::UnsupportedConfig { field, value: format!("{value:?}"), reason: reason.into() }
    }
}

/// A quantized build's weight whose payload could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the quantized weight `{source_name}`: {source}")]
pub struct OverrideReadError {
    pub source_name: String,
    #[source]
    pub source: std::io::Error,
}
