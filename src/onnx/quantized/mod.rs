//! A quantized build's weights, read from its graphs: which matmuls and gathers are quantized
//! and how (MatMulNBits, GatherBlockQuantized, DequantizeLinear → MatMul), the checkpoint tensor
//! each stands for, and that tensor dequantized — so the reference can compute the function the
//! build claims to compute ([`onnx_parity_reference::weights::Overrides`]) and L3 judges the
//! export's arithmetic, not the quantization's cost (reported apart,
//! [`crate::tiers::l3::quantization`]).
//!
//! Layouts (ONNX Runtime's contrib ops, `docs/ContribOperators.md`; MLAS):
//! - **MatMulNBits** `Y = A · Bᵀ`: `B` uint8 `[N, n_blocks, block·bits/8]`, element `2i` in the
//!   low nibble (4 bits; 2 bits: lowest pair first); `scales` `[N·n_blocks]` in the float type;
//!   `zero_points` absent (= 2^(bits−1)) or uint8 packed like `B`, each row padded to whole
//!   bytes; `W[n, k] = (q − zp) · scale[n, k / block]`, HF's `[out, in]`.
//! - **GatherBlockQuantized** (an embedding table): `data` uint8 (two 4-bit values a byte, low
//!   first) or (u)int4 `[rows, cols]`, quantized along `quantize_axis` 1 in blocks;
//!   `W[r, c] = (q − zp) · scale[r, c / block]` (zp absent: 8 for uint8-packed data, 0 for int4).
//! - **DequantizeLinear → MatMul**: `B = (x − zp) · scale` along `axis` (per channel or in
//!   `block_size` blocks); `B` is `[K, N]`, so the checkpoint's tensor is its transpose.
//!
//! Names: a quantizer keeps the float initializer's name with a suffix (`…weight_t_Q4`,
//! `…weight_t_scales`); mobius names its matmul weights `<module>.weight_t` and its tables
//! `<module>.weight`. The key is the text model's parameter name below its prefix
//! (`layers.3.mlp.up_proj.weight`, `embed_tokens.weight`, `lm_head.weight`).

//!
//! Builds that quantize activations too (dynamic, static QDQ, QOperator) are read by
//! [`activations`]: what the graph does to each matmul's input and output rides on its weight.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_parity_reference::weights::{MatmulActivations, Override, Overrides};

use super::package::OnnxPackage;

mod activations;
mod content;
mod dequant;
mod error;
mod external;
mod fused;
mod graph;
mod names;
mod payload;
mod payload_proto;
mod reader;
#[cfg(test)]
mod tests;
mod weight;
pub use activations::{IntType, MatmulRounding, QuantizedActivation, Rounding, ScaleMismatch};
pub use content::{BuildContent, StoredBytes};
pub use error::QuantizedError;
use external::ExternalData;
use graph::PayloadGraph;
pub use names::{key_of, key_of_node, not_a_parameter};
use payload::decode_floats;
use weight::FLOAT16;
pub use weight::{QuantOp, QuantizedWeight};

/// A package's quantized weights, read from its graphs (payloads not yet read).
#[derive(Debug, Clone)]
pub struct QuantizedBuild {
    pub root: PathBuf,
    pub weights: Vec<QuantizedWeight>,
    /// MatMuls on a float initializer the quantizer left (too small, or excluded).
    pub float_matmuls: usize,
    /// The `accuracy_level` at which the kernel that runs the build quantizes a MatMulNBits'
    /// activations to int8: `Some(4)` for the CPU EP's MLAS (what a build read here assumes),
    /// `None` for a kernel that never does (CUDA's: `crate::runtime::kernels::MatMulNBitsModel`).
    pub int8_activations_at: Option<i64>,
}

impl QuantizedBuild {
    /// The quantized weights of the package at `root`; `None` when no graph has any.
    pub fn read(root: &Path) -> Result<Option<Self>, QuantizedError> {
        let package = OnnxPackage::open(root).map_err(|e| QuantizedError::Package { path: root.into(), message: e.to_string() })?;
        let mut weights = Vec::new();
        let mut float_matmuls = 0;
        for (role, path) in &package.submodels {
            let graph = PayloadGraph::load(path)?;
            let found = graph.quantized(role, path)?;
            if role.contains("vision") && !found.is_empty() {
                return Err(QuantizedError::Package {
                    path: path.clone(),
                    message: format!("{} quantized weights in the vision encoder: only the text model's are judged", found.len()),
                });
            }
            weights.extend(found);
            float_matmuls += graph.float_matmuls();
        }
        Ok((!weights.is_empty()).then(|| QuantizedBuild { root: root.into(), weights, float_matmuls, int8_activations_at: Some(4) }))
    }

    /// What of the package at `root` its reference side reads ([`BuildContent`]: the quantized
    /// weights as read, their nodes, the initializers they read), for the reference cache's key;
    /// `None` when no graph has a quantized weight.
    pub fn content(root: &Path) -> Result<Option<BuildContent>, QuantizedError> {
        let package = OnnxPackage::open(root).map_err(|e| QuantizedError::Package { path: root.into(), message: e.to_string() })?;
        let mut out = BuildContent::default();
        for (role, path) in &package.submodels {
            let graph = PayloadGraph::load(path)?;
            content::describe(&mut out, role, &graph, &graph.quantized(role, path)?, path)?;
        }
        Ok((!out.weights.is_empty()).then_some(out))
    }

    /// `n MatMulNBits (int4, block 32, symmetric, accuracy_level 4), m GatherBlockQuantized …`,
    /// then the activations the graph rounds (`62 inputs uint8 per tensor, dynamic
    /// (DynamicQuantizeLinear)`): the protocol line's account of the quantization.
    pub fn summary(&self) -> String {
        let mut groups: BTreeMap<String, usize> = BTreeMap::new();
        for w in &self.weights {
            let zp = if w.zero_points { "zero points" } else { "symmetric" };
            let acc = match (w.op, w.accuracy_level) {
                (QuantOp::MatMulNBits, level) => format!(", accuracy_level {level}"),
                (QuantOp::DequantizeLinear, 4) => ", fused by ONNX Runtime into MatMulNBits at accuracy_level 4".to_string(),
                _ => String::new(),
            };
            let block = if w.block_size > 0 { format!("block {}", w.block_size) } else { "per channel".into() };
            let block = if w.per_tensor { "per tensor".into() } else { block };
            let ty = if w.signed || w.op == QuantOp::MatMulNBits { format!("int{}", w.bits) } else { format!("uint{}", w.bits) };
            *groups.entry(format!("{} ({ty}, {block}, {zp}{acc}, scales {})", w.op.as_str(), w.scale_type)).or_default() += 1;
        }
        let mut parts: Vec<String> = groups.into_iter().map(|(g, n)| format!("{n} {g}")).collect();
        if self.float_matmuls > 0 {
            parts.push(format!("{} MatMul left in float", self.float_matmuls));
        }
        let activations = self.activation_summary();
        let dialects: std::collections::BTreeSet<&str> = self.weights.iter().map(|w| names::dialect_of(&w.initializer)).collect();
        let dialects: Vec<&str> = dialects.into_iter().collect();
        let activations = if activations.is_empty() { String::new() } else { format!("; activations: {activations}") };
        format!("{}{activations}; names: {}", parts.join(", "), dialects.join(" and "))
    }

    /// The activations the graph rounds, grouped: `46 inputs uint8 per tensor, dynamic
    /// (DynamicQuantizeLinear); 84 outputs uint16 per tensor, static (QuantizeLinear)`, how ORT's
    /// CPU EP runs them, and the tensors whose dequantization reads another scale.
    pub fn activation_summary(&self) -> String {
        let mut groups: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for w in &self.weights {
            for (which, a) in w.rounding.rounded() {
                let kind = match a.rounding {
                    Rounding::Dynamic => "dynamic",
                    Rounding::Static { .. } => "static",
                };
                groups.entry(format!("{which}s {} per tensor, {kind}", a.ty.name())).or_default().insert(a.node.as_str());
            }
        }
        let mut parts: Vec<String> = groups.into_iter().map(|(g, nodes)| format!("{} {g}", nodes.len())).collect();
        if let Some(kernels) = self.fused_kernels() {
            parts.push(kernels);
        }
        let mismatched: Vec<String> = self
            .weights
            .iter()
            .flat_map(|w| {
                w.rounding.mismatches().into_iter().map(move |(which, m, s)| format!("`{}`'s {which} (×{:.4})", w.key, m.scale / s))
            })
            .collect();
        if !mismatched.is_empty() {
            parts.push(format!("dequantized with another scale than quantized: {}", mismatched.join(", ")));
        }
        parts.join("; ")
    }

    /// Each activation tensor the graph rounds, by name: its integer type, per tensor, static (with
    /// its scale and zero point) or dynamic, the node that quantizes it, and the matmuls whose
    /// input or output it is (`layers.0.self_attn.q_proj.weight (input)`).
    pub fn activation_table(&self) -> BTreeMap<String, RoundedActivation> {
        let mut table: BTreeMap<String, RoundedActivation> = BTreeMap::new();
        for w in &self.weights {
            for (which, a) in w.rounding.rounded() {
                let name = a.tensor.clone().unwrap_or_else(|| format!("{} (requantized output)", a.node));
                let entry = table.entry(name).or_insert_with(|| RoundedActivation {
                    quantization: a.describe(),
                    node: a.node.clone(),
                    bits: a.ty.bits,
                    signed: a.ty.signed,
                    matmuls: Vec::new(),
                });
                entry.matmuls.push(format!("{} ({which})", w.key));
            }
        }
        table
    }

    /// What ONNX Runtime's CPU EP runs for the graph's integer matmuls after its fusions.
    fn fused_kernels(&self) -> Option<String> {
        let dynamic = self.weights.iter().any(|w| matches!(w.rounding.input.as_ref().map(|a| a.rounding), Some(Rounding::Dynamic)));
        let qdq = |bits: u32| {
            self.weights.iter().any(|w| {
                w.op == QuantOp::DequantizeLinear
                    && w.rounding.input.as_ref().is_some_and(|a| a.ty.bits == bits && matches!(a.rounding, Rounding::Static { .. }))
            })
        };
        let mut out = Vec::new();
        if dynamic {
            out.push("dynamic ones run as DynamicQuantizeMatMul / MatMulIntegerToFloat (an exact integer GEMM scaled once)");
        }
        if qdq(8) {
            out.push("8-bit QDQ MatMuls fused into QLinearMatMul (an exact integer GEMM, the output requantized)");
        }
        if qdq(16) {
            out.push("16-bit QDQ MatMuls left as float MatMuls between their pairs (ORT fuses no 16-bit node unit)");
        }
        (!out.is_empty()).then(|| format!("on the CPU EP {}", out.join("; ")))
    }

    /// The widest weight bit count (8 for an int8 build, 4 for int4).
    pub fn bits(&self) -> u32 {
        self.weights.iter().map(|w| w.bits).max().unwrap_or(0)
    }

    /// Settles which model parameter each weight stands for, given `resolves` (whether a key names
    /// a tensor of the model: the checkpoint's names, or the config's manifest): the initializer's
    /// name when it resolves, else the node's module path ([`key_of_node`]), the two cross-checked
    /// — a name and a path that resolve to two different parameters are an error naming both. A
    /// weight neither resolves keeps its name's key (the checks that look it up name it).
    pub fn resolve_keys(&mut self, resolves: impl Fn(&str) -> Option<String>) -> Result<(), QuantizedError> {
        for w in &mut self.weights {
            let by_name = resolves(&w.key);
            let by_node = w.node_key.as_deref().and_then(&resolves);
            match (by_name, by_node) {
                (Some(a), Some(b)) if a != b => {
                    return Err(QuantizedError::Node {
                        path: self.root.clone(),
                        node: w.node.clone(),
                        op: w.op.as_str().to_string(),
                        message: format!(
                            "its initializer `{}` names `{a}` and its module path names `{b}`: which parameter it replaced is ambiguous",
                            w.initializer
                        ),
                    })
                }
                (None, Some(_)) => {
                    if let Some(k) = w.node_key.clone() {
                        w.key = k;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether some matmul computes at `accuracy_level` 4 (where the CPU's kernel quantizes its
    /// activations): a MatMulNBits at that level, or a DequantizeLinear weight ORT fuses into one.
    pub fn at_level_4(&self) -> bool {
        self.weights.iter().any(|w| !w.op.is_table() && w.accuracy_level == 4)
    }

    /// Whether some matmul's activations are rounded: by the graph (dynamic or static
    /// quantization), or by the kernel that runs the build
    /// ([`QuantizedBuild::int8_activations_at`]).
    pub fn quantizes_activations(&self) -> bool {
        self.weights.iter().any(|w| w.rounding.any() || (!w.op.is_table() && Some(w.accuracy_level) == self.int8_activations_at))
    }

    /// The root mean square of each weight's quantization step over its elements (its scales'
    /// when every scale covers as many elements: per tensor, per channel, in whole blocks), by
    /// key, for the code matrices read from several nodes (not MatMulNBits, GatherBlockQuantized).
    pub fn step_rms(&self) -> Result<HashMap<String, f64>, QuantizedError> {
        let package =
            OnnxPackage::open(&self.root).map_err(|e| QuantizedError::Package { path: self.root.clone(), message: e.to_string() })?;
        let mut out = HashMap::new();
        for (role, path) in &package.submodels {
            let mine: Vec<&QuantizedWeight> = self.weights.iter().filter(|w| &w.submodel == role && w.parts.is_some()).collect();
            if mine.is_empty() {
                continue;
            }
            let graph = PayloadGraph::load(path)?;
            let mut data = ExternalData::new(path);
            for w in mine {
                let Some(parts) = &w.parts else { continue };
                let t = graph.init(&parts.scale).ok_or_else(|| QuantizedError::Node {
                    path: path.clone(),
                    node: w.node.clone(),
                    op: w.op.as_str().into(),
                    message: format!("`{}` is not an initializer", parts.scale),
                })?;
                let scales = decode_floats(&data.bytes(t, path)?, t.data_type == FLOAT16);
                if !scales.is_empty() {
                    out.insert(w.key.clone(), (scales.iter().map(|&s| (s as f64) * (s as f64)).sum::<f64>() / scales.len() as f64).sqrt());
                }
            }
        }
        Ok(out)
    }

    /// Whether the graph itself rounds some matmul's activations (dynamic or static quantization).
    pub fn rounds_activations(&self) -> bool {
        self.weights.iter().any(|w| w.rounding.any())
    }

    /// Every quantized weight dequantized, keyed for the reference, with int8 activation blocks
    /// where the kernel that runs the build quantizes them ([`QuantizedBuild::int8_activations_at`]).
    pub fn dequantize(&self) -> Result<Overrides, QuantizedError> {
        self.dequantize_with(|level| Some(level) == self.int8_activations_at)
    }

    /// Every quantized weight dequantized, keyed for the reference; `int8_activations(level)`
    /// says whether the kernel that runs a MatMulNBits at `accuracy_level` quantizes its
    /// activations (an EP's, `crate::runtime::kernels::MatMulNBitsModel`). A key two weights
    /// claim is an error, except a tied `lm_head` also read as the embedding (kept apart by its key).
    pub fn dequantize_with(&self, int8_activations: impl Fn(i64) -> bool) -> Result<Overrides, QuantizedError> {
        let package =
            OnnxPackage::open(&self.root).map_err(|e| QuantizedError::Package { path: self.root.clone(), message: e.to_string() })?;
        let mut out = Overrides::default().with_origin(&self.root);
        for (role, path) in &package.submodels {
            let mine: Vec<&QuantizedWeight> = self.weights.iter().filter(|w| &w.submodel == role).collect();
            if mine.is_empty() {
                continue;
            }
            let t = std::time::Instant::now();
            let graph = PayloadGraph::load(path)?;
            let mut data = ExternalData::new(path);
            let mut k_parts: HashMap<&str, Override> = HashMap::new();
            for w in mine {
                let values = graph.dequantize(w, path, &mut data)?;
                let activations = if w.rounding.any() {
                    let mut a = w.rounding.to_reference();
                    if w.requantizes_from_integer_gemm() {
                        a.integer_output = Some(Arc::new(graph.weight_scales(w, path, &mut data)?));
                    }
                    a
                } else if !w.op.is_table() && int8_activations(w.accuracy_level) {
                    MatmulActivations::blocks(w.block_size)
                } else {
                    MatmulActivations::default()
                };
                let o = Override { shape: w.shape.to_vec(), data: values, activations, source: format!("{role}: {}", w.initializer) };
                // A k_eq_v layer has no v_proj: the builder fills the fused matrix's v rows with
                // k's, and the reference reads k for both. Equal rows are that copy.
                if w.first_row.is_some() && w.key.ends_with("k_proj.weight") {
                    k_parts.insert(w.node.as_str(), o.clone());
                }
                if let Some(k) = k_parts.get(w.node.as_str()).filter(|_| w.key.ends_with("v_proj.weight")) {
                    let read = |o: &Override| {
                        o.rows(0, o.shape[0]).map_err(|e| QuantizedError::Overrides { path: path.clone(), message: e.to_string() })
                    };
                    if k.shape == o.shape && read(k)? == read(&o)? {
                        tracing::debug!(
                            "{}: the v rows of `{}` repeat its k rows (k_eq_v): not a parameter of their own",
                            path.display(),
                            w.initializer
                        );
                        continue;
                    }
                }
                out.insert(&w.key, o).map_err(|e| QuantizedError::Overrides { path: path.clone(), message: e.to_string() })?;
            }
            tracing::info!("{}: dequantized {} weights in {:.2} s", path.display(), out.len(), t.elapsed().as_secs_f64());
        }
        Ok(out)
    }
}

/// One activation tensor a build rounds ([`QuantizedBuild::activation_table`]; L1 reports them).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoundedActivation {
    /// Its integer type, per tensor, static (with its scale and zero point) or dynamic.
    pub quantization: String,
    /// The node that quantizes it.
    pub node: String,
    pub bits: u32,
    pub signed: bool,
    /// The matmuls whose input or output it is (`layers.0.self_attn.q_proj.weight (input)`).
    pub matmuls: Vec<String>,
}
