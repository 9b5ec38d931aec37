//! What of a quantized build decides the reference side's results, for their cache key
//! (`crate::evaluation::cached`): the quantized weights as the graphs are read into them, the
//! node each one's payload is read through (its inputs and attributes), and every initializer
//! its dequantization reads, by content. Not the rest of a graph: an exporter's fix elsewhere
//! (an attention op, a norm's epsilon, a renamed node, another sub-model) keeps the reference
//! side it already paid for, while a changed code, scale or zero point, a rewired input or an
//! attribute of a quantized node misses. What the reference reads of the build is exactly this
//! ([`super::QuantizedBuild::dequantize_with`]: each weight's node found by name, its inputs by
//! position, the code matrices' parts by name; the activations' rounding, static scales
//! included, is in the weight as read).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use super::error::QuantizedError;
use super::graph::PayloadGraph;
use super::payload_proto::PayloadTensor;
use super::weight::QuantizedWeight;

/// Where an initializer's bytes are, as a key takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBytes {
    /// In the graph: the XXH3-128 digest of its data fields.
    Inline(u128),
    /// A range of an external-data file (`file`, named `location` in the graph); the key takes
    /// the whole file's digest, remembered by its metadata, so a multi-GB payload is not read
    /// again on every run.
    External { file: PathBuf, location: String, offset: u64, length: u64 },
}

/// What of a quantized build its reference side reads (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct BuildContent {
    /// Each quantized weight as read and the node its payload is read through, in graph order.
    pub weights: Vec<String>,
    /// Each initializer the weights read, by `sub-model/name`: its element type and dims, and
    /// where its bytes are.
    pub initializers: BTreeMap<String, (String, StoredBytes)>,
}

impl BuildContent {
    /// The external-data files the initializers are in, each once.
    pub fn external_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .initializers
            .values()
            .filter_map(|(_, b)| match b {
                StoredBytes::External { file, .. } => Some(file.clone()),
                StoredBytes::Inline(_) => None,
            })
            .collect();
        files.sort();
        files.dedup();
        files
    }
}

/// Adds `weights` of sub-model `role` (read from `graph`, the graph at `path`) to `out`.
pub(super) fn describe(
    out: &mut BuildContent,
    role: &str,
    graph: &PayloadGraph,
    weights: &[QuantizedWeight],
    path: &Path,
) -> Result<(), QuantizedError> {
    for w in weights {
        // The node the dequantization finds by name: the first of that name.
        let node = graph.nodes.iter().find(|n| n.name == w.node);
        out.weights.push(format!("{role}: {w:?}; node {node:?}"));
        let mut names: Vec<&str> = node.map(|n| n.input.iter().map(String::as_str).collect()).unwrap_or_default();
        names.push(&w.initializer);
        if let Some(p) = &w.parts {
            names.extend([p.q.as_str(), p.scale.as_str()]);
            names.extend(p.zero_point.as_deref());
        }
        for name in names {
            if let Some(t) = graph.init(name) {
                let stored = stored_bytes(t, path)?;
                out.initializers.insert(format!("{role}/{name}"), (format!("type {} dims {:?}", t.data_type, t.dims), stored));
            }
        }
    }
    Ok(())
}

/// Where `t`, an initializer of the graph at `path`, has its bytes: its inline data fields'
/// digest, or its range of an external file (beside the graph).
fn stored_bytes(t: &PayloadTensor, path: &Path) -> Result<StoredBytes, QuantizedError> {
    if t.data_location == 1 {
        let (location, offset, length) = super::external::location(t, path)?;
        let file = path.parent().unwrap_or(Path::new("")).join(location);
        return Ok(StoredBytes::External { file, location: location.to_string(), offset, length: length as u64 });
    }
    let mut h = Xxh3::new();
    // Each field with its length, so two fields cannot run into each other.
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&t.raw_data);
    field(&t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    field(&t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    field(&t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    Ok(StoredBytes::Inline(h.digest128()))
}
