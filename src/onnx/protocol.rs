//! The protocol an export speaks, read from its graphs: mobius builds one export per EP, dtype
//! and KV-cache layout (`docs/design.md` §7), and each takes other inputs — `position_ids` or
//! not (GroupQueryAttention derives positions from the mask), `input_ids` in the decoder or not,
//! a growing `past_key_values` / `present` cache or pre-allocated `key_cache` / `value_cache`
//! buffers written at `write_indices`, per-layer inputs from the embedding model or computed in
//! the decoder, int64 or int32 indices. L1 checks an export against the contract its config
//! implies *for the protocol it declares*, and the pipeline drives whichever it is.

use std::fmt;

use super::genai_config::{GenAiConfig, GenAiConfigError};
use super::graph::{Dim, GraphError, GraphSummary};
use super::package::{OnnxPackage, DECODER, EMBEDDING, TEXT_MODEL};
use crate::eps::Ep;

/// The graphs' input and output names (HF's tensor names, which the inputs file and the dumps
/// use too): every spelling of them lives here.
pub const INPUT_IDS: &str = "input_ids";
pub const ATTENTION_MASK: &str = "attention_mask";
pub const POSITION_IDS: &str = "position_ids";
pub const INPUTS_EMBEDS: &str = "inputs_embeds";
pub const PER_LAYER_INPUTS: &str = "per_layer_inputs";
pub const PIXEL_VALUES: &str = "pixel_values";
/// The vision encoder's patch positions (HF's processor calls them `image_position_ids`).
pub const PIXEL_POSITION_IDS: &str = "pixel_position_ids";
pub const IMAGE_POSITION_IDS: &str = "image_position_ids";
pub const IMAGE_FEATURES: &str = "image_features";
pub const LOGITS: &str = "logits";

/// Inputs and outputs of a static-cache decoder (mobius `--static-cache`).
pub const KEY_CACHE: &str = "key_cache.";
pub const VALUE_CACHE: &str = "value_cache.";
pub const UPDATED_KEY_CACHE: &str = "updated_key_cache.";
pub const UPDATED_VALUE_CACHE: &str = "updated_value_cache.";
pub const WRITE_INDICES: &str = "write_indices";
pub const NONPAD_KV_SEQLEN: &str = "nonpad_kv_seqlen";
/// Inputs and outputs of a dynamic-cache decoder.
pub const PAST: &str = "past_key_values.";
pub const PRESENT: &str = "present.";

/// How the decoder carries its KV cache between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// `past_key_values.N.{key,value}` `[batch, heads, past, head_dim]` in, `present.N.*` (past
    /// + new) out.
    Dynamic { pairs: usize },
    /// Pre-allocated `key_cache.N` / `value_cache.N` `[batch, capacity, heads·head_dim]` the
    /// graph writes at `write_indices` (TensorScatter) and returns as `updated_*`;
    /// `nonpad_kv_seqlen` says how much is valid. `capacity` as the graph declares it.
    Static { pairs: usize, capacity: Option<i64> },
    /// Both: mobius's static-cache build of gemma4_text keeps the sliding layers' cache dynamic
    /// (their window needs the mask) and buffers only the full-attention layers'
    /// (`mobius/tasks/_gemma4.py`, `_make_gemma4_static_cache_inputs`).
    Hybrid { dynamic: usize, fixed: usize, capacity: Option<i64> },
    /// No cache inputs at all.
    None,
}

/// Which attention op the decoder uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionOp {
    /// `com.microsoft::GroupQueryAttention` (positions and causality from `attention_mask`).
    GroupQuery,
    /// The standard opset-24 `Attention`.
    Standard,
    /// Neither: attention decomposed into primitive ops.
    Decomposed,
}

/// Where the gemma4 per-layer inputs (PLE) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PleSource {
    /// No per-layer inputs (unified models, PLE-less configs) — or the text-only model computes
    /// them inside from `input_ids`.
    None,
    /// The embedding model outputs `per_layer_inputs`, the decoder takes them.
    Embedding,
    /// The decoder takes `input_ids` and computes them (mobius splits the PLE table when it
    /// exceeds an EP's buffer limit).
    Decoder,
}

/// How the gemma4 per-layer embedding table is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PleTables {
    /// No per-layer table in the package.
    None,
    /// One fused `[vocab, layers·ple_dim]` table.
    Fused,
    /// One `[vocab, ple_dim]` table per layer (mobius's `split_per_layer_embedding`, for EPs
    /// whose buffers cannot hold the fused table).
    Split(usize),
}

/// What an export's decoder (and embedding model) declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportProtocol {
    /// Element type of the logits (`float32`, `float16`, `bfloat16`).
    pub float: &'static str,
    /// Element type of the token ids (`int64`, or `int32` in graph-capture builds).
    pub index: &'static str,
    pub decoder_input_ids: bool,
    pub inputs_embeds: bool,
    pub attention_mask: bool,
    pub position_ids: bool,
    pub kv: KvLayout,
    pub attention: AttentionOp,
    pub ple: PleSource,
    pub ple_tables: PleTables,
    /// Element type of the KV cache (`float32`, `float16`, …; `none` without a cache).
    pub kv_dtype: &'static str,
    /// The decoder's fused contrib ops (`GroupQueryAttention`, `SkipSimplifiedLayerNormalization`,
    /// …), by name.
    pub fused: Vec<String>,
    /// The default-domain opset.
    pub opset: i64,
    /// Who made the graph (`producer_name producer_version`: `mobius 0.1.0`, `onnxruntime-genai
    /// 0.18.0…`, `pytorch 2.15.0`): the build rules of one exporter do not bind another's.
    pub producer: String,
    /// The package's `genai_config.json` (ORT GenAI packages): how the runtime sizes and passes
    /// the KV buffers, which the graph alone does not say.
    pub runtime: Option<GenAiConfig>,
    /// The decoder's KV inputs as `(pair, indexed)`, in input order: `indexed` for an indexed
    /// buffer (`key_cache.N`), not for `past_key_values.N.key`; the names are
    /// [`Self::kv_names`]. A pair declared both ways appears twice (the pipeline refuses it).
    pub kv_pairs: Vec<(usize, bool)>,
    /// The logits cover the last position only (`[batch, 1, vocab]` declared: ORT GenAI's
    /// `prune_lm_head`).
    pub last_position_logits: bool,
    /// The decoder's inputs in order: what the pipeline feeds, each by its [`Feed`].
    pub decoder_inputs: Vec<String>,
    /// The embedding model's outputs (none without one): a decoder input of the same name is
    /// routed from it.
    pub embedding_outputs: Vec<String>,
    /// Integer inputs (decoder's and embedding model's) declared `int32` (graph-capture builds):
    /// the pipeline builds those in int32, the others in int64.
    pub int32_inputs: Vec<String>,
}

/// What the pipeline puts into one decoder input: the role the input plays in the protocol,
/// whatever the exporter named it (a runtime config may rename the roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// The new positions' token ids.
    InputIds,
    /// Ones over every position so far (past and new).
    AttentionMask,
    /// The new positions' indices.
    PositionIds,
    /// Where an indexed buffer takes the new positions: the past length.
    WriteIndices,
    /// How many positions an indexed buffer holds after the call.
    NonpadKvSeqlen,
    /// KV pair `pair`'s past key (`value: false`) or value.
    Past { pair: usize, value: bool },
    /// The embedding model's output of the same name (`inputs_embeds`, `per_layer_inputs`, …).
    Embedding,
    /// `inputs_embeds` in a package without an embedding model (ORT GenAI's `exclude_embeds`
    /// builds the decoder for a runtime that embeds elsewhere): nothing here can make it.
    NoEmbeddingModel,
    /// None of the protocol's roles.
    Unknown,
}

impl Feed {
    /// The integer tensor (shape, values) this feed holds for a call over `ids` after `past`
    /// positions; `None` for the float and KV feeds.
    pub fn indices(self, ids: &[i64], past: usize) -> Option<(Vec<usize>, Vec<i64>)> {
        let (s, total) = (ids.len(), past + ids.len());
        Some(match self {
            Feed::InputIds => (vec![1, s], ids.to_vec()),
            Feed::AttentionMask => (vec![1, total], vec![1; total]),
            Feed::PositionIds => (vec![1, s], (past as i64..total as i64).collect()),
            Feed::WriteIndices => (vec![1], vec![past as i64]),
            Feed::NonpadKvSeqlen => (vec![1], vec![total as i64]),
            _ => return None,
        })
    }
}

/// The names of one KV pair's tensors: what the decoder takes and what it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvNames {
    /// `past_key_values.N.key` / `key_cache.N`.
    pub past_key: String,
    pub past_value: String,
    /// `present.N.key` / `updated_key_cache.N`.
    pub present_key: String,
    pub present_value: String,
}

/// How a KV pair's buffers are carried between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// `present` grows by the new positions and is fed back as the next `past`.
    Growing,
    /// A `[1, capacity, heads·head_dim]` buffer the graph writes at `write_indices` (mobius
    /// `--static-cache`; its capacity is the graph's).
    Indexed,
    /// ORT GenAI's shared buffer (`past_present_share_buffer`): `[1, heads, capacity, head_dim]`
    /// zeros at the start, written in place by GroupQueryAttention, `attention_mask` as long as
    /// the positions so far; a sliding layer's buffer holds its window plus slack.
    Shared { capacity: usize },
}

/// Why a package's protocol could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    GenAiConfig(#[from] GenAiConfigError),
    #[error("{0} holds no decoder (decoder/ or model.onnx)")]
    NoDecoder(std::path::PathBuf),
}

impl ExportProtocol {
    /// Reads the protocol from the decoder's (or text-only model's) graph and, for multimodal
    /// packages, the embedding model's.
    pub fn read(decoder: &GraphSummary, embedding: Option<&GraphSummary>) -> Self {
        let has = |name: &str| decoder.input(name).is_some();
        let count = |prefix: &str| decoder.inputs.iter().filter(|t| t.name.starts_with(prefix)).count();
        let (dynamic, fixed) = (count(PAST), count(KEY_CACHE) + count(VALUE_CACHE));
        let capacity = decoder.inputs.iter().find(|t| t.name.starts_with(KEY_CACHE)).and_then(|t| match t.dims.as_deref() {
            Some([_, Dim::Static(c), _]) => Some(*c),
            _ => None,
        });
        let kv = match (dynamic, fixed) {
            (0, 0) => KvLayout::None,
            (d, 0) => KvLayout::Dynamic { pairs: d / 2 },
            (0, f) => KvLayout::Static { pairs: f / 2, capacity },
            (d, f) => KvLayout::Hybrid { dynamic: d / 2, fixed: f / 2, capacity },
        };
        let attention = if decoder.op_inventory.contains_key("com.microsoft::GroupQueryAttention") {
            AttentionOp::GroupQuery
        } else if decoder.op_inventory.contains_key("Attention") {
            AttentionOp::Standard
        } else {
            AttentionOp::Decomposed
        };
        let embedding_ple = embedding.is_some_and(|e| e.output("per_layer_inputs").is_some());
        let ple = if has("per_layer_inputs") && embedding_ple {
            PleSource::Embedding
        } else if embedding.is_some()
            && has("input_ids")
            && decoder.initializer_bytes.iter().any(|(n, _)| n.contains("embed_tokens_per_layer"))
        {
            PleSource::Decoder
        } else {
            PleSource::None
        };
        let index = decoder.input("input_ids").or_else(|| embedding.and_then(|e| e.input("input_ids"))).map_or("int64", |t| t.dtype);
        let tables = decoder
            .initializer_bytes
            .iter()
            .chain(embedding.map_or(&[][..], |e| &e.initializer_bytes[..]))
            .filter(|(n, bytes)| is_ple_table(n, *bytes))
            .count();
        let ple_tables = match tables {
            0 => PleTables::None,
            1 => PleTables::Fused,
            n => PleTables::Split(n),
        };
        let kv_dtype =
            decoder.inputs.iter().find(|t| t.name.starts_with(PAST) || t.name.starts_with(KEY_CACHE)).map_or("none", |t| t.dtype);
        let kv_pairs = decoder.inputs.iter().filter_map(|t| kv_index(&t.name)).collect();
        let fused = decoder.op_inventory.keys().filter_map(|op| op.strip_prefix("com.microsoft::")).map(str::to_string).collect();
        // Activations: the KV cache's type where the decoder has one (ORT GenAI's builder casts the
        // logits of an fp16 / bf16 build up to float32), else the logits'.
        let logits = decoder.output("logits").map_or("unknown", |t| t.dtype);
        let int32_inputs = decoder
            .inputs
            .iter()
            .chain(embedding.map_or(&[][..], |e| &e.inputs[..]))
            .filter(|t| t.dtype == "int32")
            .map(|t| t.name.clone())
            .collect();
        let float = if kv_dtype.starts_with("float") || kv_dtype == "bfloat16" { kv_dtype } else { logits };
        ExportProtocol {
            float,
            producer: decoder.producer.clone(),
            index,
            decoder_input_ids: has("input_ids"),
            inputs_embeds: has("inputs_embeds"),
            attention_mask: has("attention_mask"),
            position_ids: has("position_ids"),
            kv,
            attention,
            ple,
            ple_tables,
            kv_dtype,
            fused,
            opset: decoder.opsets.get("").or_else(|| decoder.opsets.get("ai.onnx")).copied().unwrap_or(0),
            runtime: None,
            kv_pairs,
            last_position_logits: decoder
                .output("logits")
                .and_then(|t| t.dims.as_deref())
                .is_some_and(|d| matches!(d, [_, Dim::Static(1), _])),
            decoder_inputs: decoder.inputs.iter().map(|t| t.name.clone()).collect(),
            embedding_outputs: embedding.map_or_else(Vec::new, |e| e.outputs.iter().map(|t| t.name.clone()).collect()),
            int32_inputs,
        }
    }

    /// What decoder input `name` takes: its role under the runtime config's names (when the
    /// package has one), else under the protocol's own.
    pub fn feed(&self, name: &str) -> Feed {
        let runtime = self.runtime.as_ref().map(|r| &r.inputs);
        let role = match runtime.and_then(|inputs| inputs.iter().find(|(_, graph)| *graph == name)) {
            Some((role, _)) => role.as_str(),
            // A role the runtime config names otherwise is not this input's.
            None if runtime.is_some_and(|inputs| inputs.contains_key(name)) => return Feed::Unknown,
            None => name,
        };
        match role {
            "input_ids" => return Feed::InputIds,
            "attention_mask" => return Feed::AttentionMask,
            "position_ids" => return Feed::PositionIds,
            WRITE_INDICES => return Feed::WriteIndices,
            NONPAD_KV_SEQLEN => return Feed::NonpadKvSeqlen,
            _ => {}
        }
        if self.embedding_outputs.iter().any(|o| o == name) {
            return Feed::Embedding;
        }
        for &(pair, indexed) in &self.kv_pairs {
            let names = self.kv_names(pair, indexed);
            if names.past_key == name {
                return Feed::Past { pair, value: false };
            }
            if names.past_value == name {
                return Feed::Past { pair, value: true };
            }
        }
        if role == "inputs_embeds" {
            return Feed::NoEmbeddingModel;
        }
        Feed::Unknown
    }

    /// The element type the graph declares for integer input `name` (decoder's or embedding
    /// model's): `int32` or `int64`.
    pub fn index_dtype(&self, name: &str) -> &'static str {
        if self.int32_inputs.iter().any(|n| n == name) {
            "int32"
        } else {
            "int64"
        }
    }

    /// The protocol of a whole package: its decoder's (or text-only model's) and embedding
    /// model's graphs (the vision encoder's says nothing about it and is not read), and its
    /// `genai_config.json` when it has one. This is what the pipeline drives.
    pub fn of_package(package: &OnnxPackage) -> Result<Self, ProtocolError> {
        let load = |role: &str| package.submodel(role).map(GraphSummary::load).transpose();
        let decoder = match load(DECODER)? {
            Some(d) => d,
            None => load(TEXT_MODEL)?.ok_or_else(|| ProtocolError::NoDecoder(package.root.clone()))?,
        };
        let embedding = load(EMBEDDING)?;
        Ok(Self::read(&decoder, embedding.as_ref()).with_runtime(GenAiConfig::read(&package.root)?))
    }

    /// The protocol with the package's runtime config, whose name patterns (when it has them)
    /// say which inputs are the past KV pairs.
    pub fn with_runtime(mut self, runtime: Option<GenAiConfig>) -> Self {
        if let Some(pattern) = runtime.as_ref().and_then(|r| r.inputs.get("past_key_names")) {
            let pair = |name: &str| {
                let (head, tail) = pattern.split_once("%d")?;
                name.strip_prefix(head)?.strip_suffix(tail)?.parse::<usize>().ok()
            };
            self.kv_pairs = self
                .decoder_inputs
                .iter()
                .filter_map(|n| pair(n).map(|i| (i, false)).or_else(|| kv_index(n).filter(|&(_, indexed)| indexed)))
                .collect();
        }
        self.runtime = runtime;
        self
    }

    /// The names of KV pair `index` in `kind`'s layout (the runtime config's name patterns when
    /// the package has them).
    pub fn kv_names(&self, index: usize, indexed: bool) -> KvNames {
        if indexed {
            return KvNames {
                past_key: format!("{KEY_CACHE}{index}"),
                past_value: format!("{VALUE_CACHE}{index}"),
                present_key: format!("{UPDATED_KEY_CACHE}{index}"),
                present_value: format!("{UPDATED_VALUE_CACHE}{index}"),
            };
        }
        let named = |role: &str, default: String| self.runtime.as_ref().and_then(|r| r.name_of(role, index)).unwrap_or(default);
        KvNames {
            past_key: named("past_key_names", format!("{PAST}{index}.key")),
            past_value: named("past_value_names", format!("{PAST}{index}.value")),
            present_key: named("present_key_names", format!("{PRESENT}{index}.key")),
            present_value: named("present_value_names", format!("{PRESENT}{index}.value")),
        }
    }

    /// How KV pair `index` (in `past_key_values` layout unless `indexed`) is carried between
    /// steps; `cuda` picks ORT GenAI's EP default for a sliding buffer's slack.
    pub fn cache_kind(&self, index: usize, indexed: bool, cuda: bool) -> CacheKind {
        if indexed {
            return CacheKind::Indexed;
        }
        match &self.runtime {
            Some(r) if r.share_buffer => CacheKind::Shared { capacity: r.capacity(index, cuda) },
            _ => CacheKind::Growing,
        }
    }

    /// The most positions (prompt and generated) one sequence may reach, when the runtime
    /// bounds it.
    pub fn max_positions(&self) -> Option<usize> {
        self.runtime.as_ref().filter(|r| r.share_buffer).map(|r| r.max_length)
    }

    /// Whether mobius made the graph (its build rules, [`Self::compatible_eps`], apply).
    pub fn is_mobius(&self) -> bool {
        self.producer.starts_with("mobius")
    }

    /// The variant's short name: `static`, `gqa` or `portable` (the KV layout first, then the
    /// attention op).
    pub fn variant(&self) -> &'static str {
        match (self.kv, self.attention) {
            (KvLayout::Static { .. } | KvLayout::Hybrid { .. }, _) => "static",
            (_, AttentionOp::GroupQuery) => "gqa",
            _ => "portable",
        }
    }

    /// The EPs whose mobius build looks like this one (GroupQueryAttention exactly for the EPs
    /// and dtypes mobius fuses it for).
    pub fn compatible_eps(&self) -> Vec<Ep> {
        let gqa = self.attention == AttentionOp::GroupQuery;
        Ep::ALL.into_iter().filter(|ep| ep.fuses_gqa(self.float) == gqa).collect()
    }
}

impl fmt::Display for ExportProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attention = match self.attention {
            AttentionOp::GroupQuery => "GroupQueryAttention (positions from attention_mask)",
            AttentionOp::Standard => "opset-24 Attention",
            AttentionOp::Decomposed => "decomposed attention",
        };
        let kv = match self.kv {
            KvLayout::Dynamic { pairs } => format!("dynamic KV ({pairs} pairs)"),
            KvLayout::Static { pairs, capacity } => {
                format!("static KV ({pairs} pairs, capacity {})", capacity.map_or("dynamic".to_string(), |c| c.to_string()))
            }
            KvLayout::Hybrid { dynamic, fixed, capacity } => format!(
                "hybrid KV ({dynamic} dynamic pairs, {fixed} static pairs of capacity {})",
                capacity.map_or("dynamic".to_string(), |c| c.to_string())
            ),
            KvLayout::None => "no KV cache".into(),
        };
        let ple = match self.ple {
            PleSource::None => "",
            PleSource::Embedding => ", per-layer inputs from the embedding model",
            PleSource::Decoder => ", per-layer inputs computed in the decoder",
        };
        let tables = match self.ple_tables {
            PleTables::None => String::new(),
            PleTables::Fused => " (fused table)".to_string(),
            PleTables::Split(n) => format!(" ({n} split tables)"),
        };
        let kv_dtype =
            if self.kv_dtype == self.float || self.kv_dtype == "none" { String::new() } else { format!(", {} KV", self.kv_dtype) };
        let fused = if self.fused.is_empty() { String::new() } else { format!(", fused {}", self.fused.join("/")) };
        let runtime = match &self.runtime {
            Some(r) if r.share_buffer => {
                let window = r.window.as_ref().map_or(String::new(), |w| {
                    let layers = w.layers.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
                    format!(", sliding layers {layers} windowed to {}", w.window_size)
                });
                format!(", {} shared KV buffers of {} positions{window}", crate::onnx::genai_config::GENAI_CONFIG, r.max_length)
            }
            Some(_) => format!(", {}", crate::onnx::genai_config::GENAI_CONFIG),
            None => String::new(),
        };
        write!(
            f,
            "{} protocol: {attention}, {kv}, {} activations, {} ids, opset {}{ple}{tables}{kv_dtype}{fused}{runtime}",
            self.variant(),
            self.float,
            self.index,
            self.opset
        )
    }
}

/// The pair index of a KV input and whether it is an indexed buffer: `key_cache.N` →
/// `(N, true)`, `past_key_values.N.key` → `(N, false)` (value inputs name the same pairs).
pub fn kv_index(input: &str) -> Option<(usize, bool)> {
    if let Some(rest) = input.strip_prefix(KEY_CACHE) {
        return rest.parse().ok().map(|i| (i, true));
    }
    let rest = input.strip_prefix(PAST)?;
    rest.strip_suffix(".key").and_then(|i| i.parse().ok()).map(|i| (i, false))
}

/// Whether an initializer is (a split part of) the per-layer embedding table: named for it, not a
/// quantizer's scales or zero points beside the packed table (an int4 build's
/// `…embed_tokens_per_layer.weight_scales`), and not a scalar (torch.onnx's dynamo exports keep
/// the module's `embed_scale` as `…embed_tokens_per_layer.embed_scale`).
fn is_ple_table(name: &str, bytes: u64) -> bool {
    const SIDE: [&str; 3] = ["_scales", "_zero_points", "_zp"];
    name.contains("embed_tokens_per_layer") && !SIDE.iter().any(|s| name.ends_with(s)) && bytes > 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
    }

    fn protocol(rel: &str) -> ExportProtocol {
        let dir = root().join(rel);
        let single = dir.join("model.onnx");
        if single.is_file() {
            return ExportProtocol::read(&GraphSummary::load(&single).expect("graph"), None);
        }
        let decoder = GraphSummary::load(&dir.join("decoder/model.onnx")).expect("decoder");
        let embedding = GraphSummary::load(&dir.join("embedding/model.onnx")).expect("embedding");
        ExportProtocol::read(&decoder, Some(&embedding))
    }

    /// Guards the PLE table count: an int4 build's scales and zero points beside its packed table,
    /// and a scalar named for the table (dynamo's `embed_scale`), are not tables; a second table
    /// part is.
    #[test]
    fn ple_tables_count_tables_only() {
        for build in ["int4", "int4-asym"] {
            let p = protocol(&format!("gemma4-text-ple/variants/{build}"));
            assert_eq!(p.ple_tables, PleTables::Fused, "{build}: {p}");
        }
        let mut g = GraphSummary::load(&root().join("gemma4-text-ple/onnx/model.onnx")).expect("graph");
        g.initializer_bytes.push(("m.model.embed_tokens_per_layer.embed_scale".into(), 4));
        assert_eq!(ExportProtocol::read(&g, None).ple_tables, PleTables::Fused);
        g.initializer_bytes.push(("model.embed_tokens_per_layer.1.weight".into(), 4096));
        assert_eq!(ExportProtocol::read(&g, None).ple_tables, PleTables::Split(2));
    }

    /// Guards the one source of the feeds: every decoder input of each protocol has its role, the
    /// runtime config's names rename the roles, and a decoder wanting `inputs_embeds` with no
    /// embedding model is told apart from an unknown input.
    #[test]
    fn feeds_are_the_protocol_roles() {
        let package = |rel: &str| OnnxPackage::open(&root().join(rel)).expect("package");
        let builder = ExportProtocol::of_package(&package("unified-vision/builder/fp32")).expect("protocol");
        let roles: Vec<Feed> = builder.decoder_inputs.iter().map(|n| builder.feed(n)).collect();
        assert_eq!(&roles[..3], &[Feed::InputIds, Feed::AttentionMask, Feed::PositionIds]);
        for pair in 0..6 {
            for value in [false, true] {
                assert_eq!(roles.iter().filter(|&&f| f == Feed::Past { pair, value }).count(), 1, "{pair} {value}: {roles:?}");
            }
        }
        assert!(roles.iter().all(|f| !matches!(f, Feed::Unknown | Feed::NoEmbeddingModel)), "{roles:?}");
        let no_embeds = ExportProtocol::of_package(&package("unified-vision/builder/fp32-no-embeds")).expect("protocol");
        assert_eq!(no_embeds.feed("inputs_embeds"), Feed::NoEmbeddingModel);
        assert_eq!(no_embeds.feed("pixel_values"), Feed::Unknown);
        let mobius = ExportProtocol::of_package(&package("unified-vision/onnx")).expect("protocol");
        assert_eq!((mobius.feed("inputs_embeds"), mobius.feed("input_ids")), (Feed::Embedding, Feed::InputIds));
        let indexed = ExportProtocol::of_package(&package("unified-text-kvshare/variants/static")).expect("protocol");
        assert_eq!((indexed.feed(WRITE_INDICES), indexed.feed("key_cache.3")), (Feed::WriteIndices, Feed::Past { pair: 3, value: false }));
        // A runtime config that renames the roles: its names are the ones fed.
        let mut renamed = builder.clone();
        renamed.decoder_inputs = vec!["ids".into(), "mask".into(), "kv.0.k".into()];
        let mut runtime = renamed.runtime.take().expect("genai_config.json");
        runtime.inputs = [("input_ids", "ids"), ("attention_mask", "mask"), ("past_key_names", "kv.%d.k")]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let renamed = renamed.with_runtime(Some(runtime));
        assert_eq!(renamed.kv_pairs, vec![(0, false)]);
        assert_eq!(
            [renamed.feed("ids"), renamed.feed("mask"), renamed.feed("input_ids")],
            [Feed::InputIds, Feed::AttentionMask, Feed::Unknown]
        );
        assert_eq!(renamed.feed("kv.0.k"), Feed::Past { pair: 0, value: false });
    }

    /// Guards the integer feeds: a decode step after 5 positions, and the mask covering them all.
    #[test]
    fn feed_indices_count_the_past() {
        assert_eq!(Feed::InputIds.indices(&[7], 5), Some((vec![1, 1], vec![7])));
        assert_eq!(Feed::AttentionMask.indices(&[7], 5), Some((vec![1, 6], vec![1; 6])));
        assert_eq!(Feed::PositionIds.indices(&[7, 8], 5), Some((vec![1, 2], vec![5, 6])));
        assert_eq!(Feed::WriteIndices.indices(&[7], 5), Some((vec![1], vec![5])));
        assert_eq!(Feed::NonpadKvSeqlen.indices(&[7], 5), Some((vec![1], vec![6])));
        assert_eq!(Feed::Embedding.indices(&[7], 5), None);
    }

    /// Guards: each committed variant is read as the protocol it is (see
    /// fixtures/<fixture>/variants.json for the builds).
    #[test]
    fn variants_are_read_from_the_graphs() {
        let p = protocol("unified-text-kvshare/onnx");
        assert_eq!((p.variant(), p.position_ids, p.attention_mask, p.kv), ("portable", true, true, KvLayout::Dynamic { pairs: 4 }));
        let p = protocol("unified-text-kvshare/variants/gqa");
        assert_eq!((p.variant(), p.position_ids, p.float), ("gqa", false, "float32"));
        assert_eq!(p.compatible_eps(), vec![Ep::Cpu, Ep::Webgpu, Ep::Mlx]);
        let p = protocol("unified-text-kvshare/variants/cuda-f16");
        assert_eq!((p.variant(), p.float), ("gqa", "float16"));
        assert!(p.compatible_eps().contains(&Ep::Cuda) && !p.compatible_eps().contains(&Ep::Cpu));
        let p = protocol("unified-text-kvshare/variants/static");
        assert_eq!((p.variant(), p.kv, p.attention_mask), ("static", KvLayout::Static { pairs: 4, capacity: Some(64) }, false));
        let p = protocol("gemma4-text-ple/variants/static");
        assert_eq!(p.kv, KvLayout::Hybrid { dynamic: 5, fixed: 1, capacity: Some(64) }, "{p}");
        let p = protocol("unified-vision/variants/gqa");
        assert_eq!((p.variant(), p.decoder_input_ids, p.inputs_embeds), ("gqa", false, true));
        let p = protocol("unified-vision/onnx");
        assert_eq!((p.variant(), p.decoder_input_ids), ("portable", true));
        let p = protocol("gemma4-vision/onnx");
        assert_eq!((p.ple, p.ple_tables, p.kv_dtype), (PleSource::Embedding, PleTables::Fused, "float32"));
        assert!(p.to_string().starts_with("portable protocol: opset-24 Attention, dynamic KV"), "{p}");
        let p = protocol("unified-text-kvshare/variants/gqa");
        assert_eq!(p.fused, vec!["GroupQueryAttention".to_string(), "SkipSimplifiedLayerNormalization".to_string()]);
        assert!(p.to_string().ends_with("opset 24, fused GroupQueryAttention/SkipSimplifiedLayerNormalization"), "{p}");
    }
}
