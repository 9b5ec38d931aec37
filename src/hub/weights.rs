//! A checkpoint's weight files: one safetensors file, or an index and the shards it names.

use std::path::PathBuf;

/// Single-file safetensors weights, tried first as transformers does.
pub const SAFETENSORS_SINGLE: &str = "model.safetensors";
/// The index of sharded safetensors weights (`weight_map`: tensor → shard file).
pub const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

/// Weights of a checkpoint: one safetensors file, or an index and the shards it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    Single(PathBuf),
    Sharded { index: PathBuf, shards: Vec<PathBuf> },
}

impl Weights {
    /// The safetensors files to load, in shard order.
    pub fn files(&self) -> &[PathBuf] {
        match self {
            Weights::Single(p) => std::slice::from_ref(p),
            Weights::Sharded { shards, .. } => shards,
        }
    }
}
