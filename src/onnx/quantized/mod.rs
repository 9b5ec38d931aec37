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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::BTreeSet;

use onnx_parity_reference::weights::{MatmulActivations, Override, OverrideData, Overrides};
use prost::Message;

use super::package::OnnxPackage;

mod activations;
mod error;
mod external;
mod fused;
mod names;
mod payload;
mod payload_proto;
pub use activations::{IntType, MatmulRounding, QuantizedActivation, Rounding, ScaleMismatch};
pub use error::QuantizedError;
use external::{ExternalData, Payload};
use fused::{int64s, unfused_keys, RowRange};
use names::dq_fused_accuracy_level;
pub use names::{key_of, key_of_node, not_a_parameter};
use payload::{decode_floats, element, GatherRows, MatMulNBitsRows, Stored};
use payload_proto::{PayloadModel, PayloadNode, PayloadTensor};

/// How one weight is quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantOp {
    MatMulNBits,
    GatherBlockQuantized,
    DequantizeLinear,
    /// `quantize_dynamic`'s integer matmul (its float result through Cast → Mul).
    MatMulInteger,
    /// ORT's fusions of DynamicQuantizeLinear and MatMulInteger (a build saved optimized).
    DynamicQuantizeMatMul,
    MatMulIntegerToFloat,
    /// QOperator's integer matmul with a requantized output.
    QLinearMatMul,
    /// A table of integer codes gathered, then a DequantizeLinear (`quantize_dynamic`'s Gather).
    GatherDequantize,
}

impl QuantOp {
    pub fn as_str(self) -> &'static str {
        match self {
            QuantOp::MatMulNBits => "MatMulNBits",
            QuantOp::GatherBlockQuantized => "GatherBlockQuantized",
            QuantOp::DequantizeLinear => "DequantizeLinear",
            QuantOp::MatMulInteger => "MatMulInteger",
            QuantOp::DynamicQuantizeMatMul => "DynamicQuantizeMatMul",
            QuantOp::MatMulIntegerToFloat => "MatMulIntegerToFloat",
            QuantOp::QLinearMatMul => "QLinearMatMul",
            QuantOp::GatherDequantize => "Gather → DequantizeLinear",
        }
    }

    /// Whether the weight is a gathered table (no activations).
    pub fn is_table(self) -> bool {
        matches!(self, QuantOp::GatherBlockQuantized | QuantOp::GatherDequantize)
    }
}

/// One quantized weight of the build.
#[derive(Debug, Clone)]
pub struct QuantizedWeight {
    /// The sub-model (`model`, `decoder`, `embedding`).
    pub submodel: String,
    pub node: String,
    pub op: QuantOp,
    /// The quantized initializer (`B`, `data`, `x`).
    pub initializer: String,
    /// The reference's parameter it stands for: from the initializer's name ([`key_of`]), or,
    /// when that names no tensor of the model, from the node's module path
    /// ([`QuantizedBuild::resolve_keys`]).
    pub key: String,
    /// The parameter the node's module path names (`model/layers.0/self_attn/q_proj/MatMul_…`
    /// → `layers.0.self_attn.q_proj.weight`; [`key_of_node`]), when the name has one: what the
    /// graph says the node replaced, the cross-check of the initializer's name.
    pub node_key: Option<String>,
    pub bits: u32,
    /// Elements per scale along the quantized axis (0: one scale per channel).
    pub block_size: usize,
    /// MatMulNBits' `accuracy_level` (4: MLAS quantizes the activations to int8 per block).
    pub accuracy_level: i64,
    /// Whether the build stores zero points (asymmetric) or uses the default.
    pub zero_points: bool,
    /// `[rows, cols]` of the dequantized tensor in the checkpoint's layout.
    pub shape: [usize; 2],
    /// The scales' element type (`float32`, `float16`).
    pub scale_type: &'static str,
    /// A part of a fused matrix (ORT GenAI's `qkv_proj`): its first row in the node's `B`.
    pub first_row: Option<usize>,
    /// The value the matmul multiplies the weight with (its activations, `A`): MatMulNBits'
    /// input 0, the MatMul's input 0 for a DequantizeLinear weight, the float tensor the graph
    /// rounds for an integer matmul or a QDQ pair; `None` for a gathered table.
    pub activation: Option<String>,
    /// Whether the weight's codes are signed.
    pub signed: bool,
    /// One scale for the whole matrix.
    pub per_tensor: bool,
    /// What the graph does to the matmul's activations (dynamic or static rounding of its input,
    /// requantization of its output); nothing for a weight-only build.
    pub rounding: MatmulRounding,
    /// Where a `[K, N]` (or a gathered `[rows, cols]`) code matrix's parts are, for the ops that
    /// read them from several nodes (DequantizeLinear, the integer matmuls, a dequantized table).
    parts: Option<Parts>,
}

impl QuantizedWeight {
    /// Whether ONNX Runtime's CPU EP computes this matmul's requantized output from an integer
    /// GEMM: a QLinearMatMul, or a QDQ node unit it fuses into one (8-bit weight, uint8 input and
    /// output; it fuses no 16-bit unit, and int8 activations only where int8 is allowed, not on
    /// x86: research §3).
    pub fn requantizes_from_integer_gemm(&self) -> bool {
        let uint8 = |a: &Option<QuantizedActivation>| {
            a.as_ref().is_some_and(|a| a.ty == IntType { bits: 8, signed: false } && matches!(a.rounding, Rounding::Static { .. }))
        };
        match self.op {
            QuantOp::QLinearMatMul => true,
            QuantOp::DequantizeLinear => self.bits == 8 && uint8(&self.rounding.input) && uint8(&self.rounding.output),
            _ => false,
        }
    }
}

/// A code matrix dequantized as `(q − zp) · scale` along `axis` (per tensor, per channel, or in
/// blocks of `block`): the initializers' names.
#[derive(Debug, Clone)]
struct Parts {
    q: String,
    scale: String,
    zero_point: Option<String>,
    axis: i64,
    block: usize,
    /// `[K, N]`, the checkpoint's `[N, K]` transposed (a matmul's B); else the checkpoint's layout.
    transposed: bool,
}

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
            for (which, a) in [("inputs", &w.rounding.input), ("outputs", &w.rounding.output)] {
                let Some(a) = a else { continue };
                let kind = match a.rounding {
                    Rounding::Dynamic => "dynamic",
                    Rounding::Static { .. } => "static",
                };
                groups.entry(format!("{which} {} per tensor, {kind}", a.ty.name())).or_default().insert(a.node.as_str());
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
        let mut out = Overrides::default();
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

/// ONNX element types the dequantization reads.
const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const FLOAT16: i32 = 10;
const UINT4: i32 = 21;
const INT4: i32 = 22;

struct PayloadGraph {
    nodes: Vec<PayloadNode>,
    inits: HashMap<String, PayloadTensor>,
    /// Which node consumes each value.
    consumers: HashMap<String, Vec<usize>>,
    /// Which node makes each value.
    producers: HashMap<String, usize>,
    /// The graph's outputs.
    outputs: BTreeSet<String>,
}

fn attr(node: &PayloadNode, name: &str) -> Option<i64> {
    node.attribute.iter().find(|a| a.name == name).map(|a| a.i)
}

impl PayloadGraph {
    fn load(path: &Path) -> Result<Self, QuantizedError> {
        let bytes = std::fs::read(path).map_err(|source| QuantizedError::Io { path: path.into(), source })?;
        let model = PayloadModel::decode(bytes.as_slice()).map_err(|source| QuantizedError::Decode { path: path.into(), source })?;
        let g = model.graph.unwrap_or_default();
        let mut consumers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut producers: HashMap<String, usize> = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            for input in &n.input {
                consumers.entry(input.clone()).or_default().push(i);
            }
            for output in n.output.iter().filter(|o| !o.is_empty()) {
                producers.insert(output.clone(), i);
            }
        }
        let outputs = g.output.into_iter().map(|o| o.name).collect();
        Ok(PayloadGraph {
            nodes: g.node,
            inits: g.initializer.into_iter().map(|t| (t.name.clone(), t)).collect(),
            consumers,
            producers,
            outputs,
        })
    }

    fn init(&self, name: &str) -> Option<&PayloadTensor> {
        self.inits.get(name)
    }

    /// A gathered table: an initializer, or one reshaped by a `Reshape` (the builder's tied
    /// table, the lm_head's `[vocab, blocks, bytes]` payload as `[vocab, blocks·bytes]`), with
    /// the dims the gather sees.
    fn table(&self, name: &str) -> Option<(&PayloadTensor, Vec<i64>)> {
        if let Some(t) = self.init(name) {
            return Some((t, t.dims.clone()));
        }
        let reshape = self.nodes.iter().find(|n| n.op_type == "Reshape" && n.output.first().is_some_and(|o| o == name))?;
        let t = self.init(reshape.input.first()?)?;
        let flat = [*t.dims.first()?, t.dims.iter().skip(1).product()];
        let target = self.int64_constant(reshape.input.get(1)?)?;
        (target == flat).then_some((t, flat.to_vec()))
    }

    /// The sizes of the constant `Split` a MatMul's output alone feeds (a fused projection's parts).
    fn split_sizes(&self, n: &PayloadNode) -> Option<Vec<usize>> {
        let consumers = self.consumers.get(n.output.first()?)?;
        let [only] = consumers.as_slice() else { return None };
        let split = self.nodes.get(*only).filter(|s| s.op_type == "Split")?;
        self.int64_constant(split.input.get(1)?)?.into_iter().map(|v| usize::try_from(v).ok()).collect()
    }

    /// An int64 constant's values: an initializer's, or a `Constant` node's `value`.
    fn int64_constant(&self, name: &str) -> Option<Vec<i64>> {
        let t = self.init(name).or_else(|| {
            let node = self.nodes.iter().find(|n| n.op_type == "Constant" && n.output.first().is_some_and(|o| o == name))?;
            node.attribute.iter().find(|a| a.name == "value")?.t.as_ref()
        })?;
        (t.data_type == 7).then(|| int64s(&t.raw_data, &t.int64_data))
    }

    fn float_matmuls(&self) -> usize {
        self.nodes.iter().filter(|n| n.op_type == "MatMul" && n.input.get(1).is_some_and(|b| self.inits.contains_key(b))).count()
    }

    /// The quantized weights of this graph, with what the graph does to each matmul's
    /// activations; a quantization node no modelled pattern accounts for is an error naming it.
    fn quantized(&self, role: &str, path: &Path) -> Result<Vec<QuantizedWeight>, QuantizedError> {
        let mut walk = activations::Walk { graph: self, path, explained: BTreeSet::new() };
        let mut out = Vec::new();
        for n in &self.nodes {
            let bad = |message: String| QuantizedError::Node { path: path.into(), node: n.name.clone(), op: n.op_type.clone(), message };
            let input = |i: usize, what: &str| -> Result<&PayloadTensor, QuantizedError> {
                let name = n.input.get(i).filter(|s| !s.is_empty()).ok_or_else(|| bad(format!("no input {i} ({what})")))?;
                self.init(name).ok_or_else(|| bad(format!("input {i} ({what}) `{name}` is not an initializer")))
            };
            let scale_type = |t: &PayloadTensor| super::proto::elem_type_name(t.data_type);
            // A `[K, N]` code matrix `b` of an integer matmul, its scale and zero point by name.
            let integer_weight = |op: QuantOp, b: &PayloadTensor, scale: &str, zp: Option<&String>, rounding: MatmulRounding| {
                let scale_t = self.init(scale).ok_or_else(|| bad(format!("the weight scale `{scale}` is not an initializer")))?;
                self.kn_weight(role, n, op, b, scale_t, zp.filter(|z| !z.is_empty()).cloned(), 1, 0, rounding).map_err(&bad)
            };
            match n.op_type.as_str() {
                "MatMulNBits" => {
                    let b = input(1, "B")?;
                    let scales = input(2, "scales")?;
                    let (k, nn) = (attr(n, "K").unwrap_or(0), attr(n, "N").unwrap_or(0));
                    let bits = attr(n, "bits").unwrap_or(4);
                    let block = attr(n, "block_size").unwrap_or(0);
                    let zp = n.input.get(3).is_some_and(|s| !s.is_empty());
                    if !(2..=8).contains(&bits) || block < 16 || k <= 0 || nn <= 0 {
                        return Err(bad(format!(
                            "attributes K {k} N {nn} bits {bits} block_size {block}: not a MatMulNBits this reader knows"
                        )));
                    }
                    let expected = vec![nn, (k + block - 1) / block, block * bits / 8];
                    if b.dims != expected {
                        return Err(bad(format!(
                            "B `{}` has shape {:?}, K {k} N {nn} bits {bits} block {block} imply {expected:?}",
                            b.name, b.dims
                        )));
                    }
                    let whole = QuantizedWeight {
                        submodel: role.into(),
                        node: n.name.clone(),
                        op: QuantOp::MatMulNBits,
                        initializer: b.name.clone(),
                        key: key_of(&b.name),
                        node_key: key_of_node(&n.name),
                        bits: bits as u32,
                        block_size: block as usize,
                        accuracy_level: attr(n, "accuracy_level").unwrap_or(0),
                        zero_points: zp,
                        shape: [nn as usize, k as usize],
                        scale_type: scale_type(scales),
                        first_row: None,
                        activation: n.input.first().filter(|a| !a.is_empty()).cloned(),
                        signed: false,
                        per_tensor: false,
                        rounding: MatmulRounding::default(),
                        parts: None,
                    };
                    match (unfused_keys(&whole.key), self.split_sizes(n)) {
                        (Some(keys), Some(sizes)) if sizes.len() == 3 && sizes.iter().sum::<usize>() == nn as usize => {
                            let mut first = 0;
                            let node_keys = whole.node_key.as_deref().and_then(unfused_keys).map(|k| k.map(Some)).unwrap_or_default();
                            for ((key, node_key), rows) in keys.into_iter().zip(node_keys).zip(sizes) {
                                let shape = [rows, k as usize];
                                out.push(QuantizedWeight { key, node_key, shape, first_row: Some(first), ..whole.clone() });
                                first += rows;
                            }
                        }
                        (Some(_), _) => return Err(bad(format!("fused `{}` is not split into q, k and v by a constant Split", b.name))),
                        _ => out.push(whole),
                    }
                }
                "GatherBlockQuantized" => {
                    let name = n.input.first().map_or("", String::as_str);
                    let (data, dims) = self.table(name).ok_or_else(|| bad(format!("input 0 (data) `{name}` is not an initializer")))?;
                    let scales = input(2, "scales")?;
                    let bits = attr(n, "bits").unwrap_or(4);
                    let block = attr(n, "block_size").unwrap_or(128);
                    let (gather_axis, quantize_axis) = (attr(n, "gather_axis").unwrap_or(0), attr(n, "quantize_axis").unwrap_or(1));
                    if gather_axis != 0 || quantize_axis != 1 || dims.len() != 2 {
                        return Err(bad(format!(
                            "gather_axis {gather_axis}, quantize_axis {quantize_axis}, data rank {}: only a [rows, cols] table gathered by row and quantized along its columns is read",
                            dims.len()
                        )));
                    }
                    let packed = data.data_type == UINT8 && bits == 4;
                    let cols = dims[1] as usize * if packed { 2 } else { 1 };
                    // The builder gathers tokens from the tied lm_head's payload: the table.
                    let key = Some(key_of(&data.name)).filter(|k| k != "lm_head.weight").unwrap_or_else(|| "embed_tokens.weight".into());
                    out.push(QuantizedWeight {
                        submodel: role.into(),
                        node: n.name.clone(),
                        op: QuantOp::GatherBlockQuantized,
                        initializer: data.name.clone(),
                        key,
                        node_key: None,
                        bits: bits as u32,
                        block_size: block as usize,
                        accuracy_level: 0,
                        zero_points: n.input.get(3).is_some_and(|s| !s.is_empty()),
                        shape: [dims[0] as usize, cols],
                        scale_type: scale_type(scales),
                        first_row: None,
                        activation: None,
                        signed: data.data_type == INT4 || data.data_type == INT8,
                        per_tensor: false,
                        rounding: MatmulRounding::default(),
                        parts: None,
                    });
                }
                "DequantizeLinear" => {
                    // A weight: an initializer dequantized straight into a MatMul's B (the
                    // activations' pairs are read from the MatMul's side).
                    let Some(x) = n.input.first().and_then(|x| self.init(x)) else { continue };
                    let out_name = n.output.first().cloned().unwrap_or_default();
                    let Some(matmul) = self.consumers.get(&out_name).and_then(|c| {
                        c.iter().map(|&i| &self.nodes[i]).find(|m| m.op_type == "MatMul" && m.input.get(1) == Some(&out_name))
                    }) else {
                        continue;
                    };
                    if x.dims.len() != 2 {
                        continue;
                    }
                    let scales = input(1, "x_scale")?;
                    let a = matmul.input.first().cloned().unwrap_or_default();
                    let mut rounding = MatmulRounding::default();
                    if let Some((input, shared)) = walk.qdq_input(matmul, &a)? {
                        rounding.input = Some(input);
                        rounding.shared_input = shared;
                    }
                    rounding.output = walk.qdq_output(matmul)?;
                    walk.explain_node(n);
                    let axis = attr(n, "axis").unwrap_or(1);
                    let block = attr(n, "block_size").unwrap_or(0);
                    let mut w = self
                        .kn_weight(
                            role,
                            n,
                            QuantOp::DequantizeLinear,
                            x,
                            scales,
                            n.input.get(2).filter(|z| !z.is_empty()).cloned(),
                            axis,
                            block,
                            rounding,
                        )
                        .map_err(bad)?;
                    // Read where the pair's float input is (the candidate's, for rounding hints).
                    w.activation = w.rounding.input.as_ref().and_then(|i| i.tensor.clone()).or(Some(a)).filter(|a| !a.is_empty());
                    out.push(w);
                }
                "MatMulInteger" => {
                    let b = input(1, "B")?;
                    let a = walk.integer_input(n, 0, None, Some(2))?;
                    let Rounding::Dynamic = a.rounding else {
                        return Err(bad("a MatMulInteger on a statically quantized input: not modelled (its scale reaches the result through a chain this reader does not follow)".into()));
                    };
                    let a_scale = walk.producer(n.input.first().map_or("", String::as_str)).and_then(|d| d.output.get(1).cloned());
                    let w_scale = walk.integer_result_scale(n, a_scale.as_deref())?;
                    walk.explain_node(n);
                    let rounding = MatmulRounding { input: Some(a), ..Default::default() };
                    out.push(integer_weight(QuantOp::MatMulInteger, b, &w_scale, n.input.get(3), rounding)?);
                }
                "DynamicQuantizeMatMul" | "MatMulIntegerToFloat" => {
                    let dynamic = n.op_type == "DynamicQuantizeMatMul";
                    let (b_scale, b_zp, bias) = if dynamic { (2, 3, 4) } else { (3, 5, 6) };
                    if n.input.get(bias).is_some_and(|s| !s.is_empty()) {
                        return Err(bad("a bias input: not modelled (Gemma 4's projections have none)".into()));
                    }
                    let b = input(1, "B")?;
                    let a = if dynamic {
                        let x = n.input.first().cloned();
                        QuantizedActivation {
                            tensor: x,
                            node: n.name.clone(),
                            rounding: Rounding::Dynamic,
                            ty: IntType { bits: 8, signed: false },
                            mismatch: None,
                        }
                    } else {
                        walk.integer_input(n, 0, Some(2), Some(4))?
                    };
                    walk.explain_node(n);
                    let scale = n.input.get(b_scale).cloned().unwrap_or_default();
                    let op = if dynamic { QuantOp::DynamicQuantizeMatMul } else { QuantOp::MatMulIntegerToFloat };
                    out.push(integer_weight(op, b, &scale, n.input.get(b_zp), MatmulRounding { input: Some(a), ..Default::default() })?);
                }
                "QLinearMatMul" => {
                    let b = input(3, "b")?;
                    let a = walk.integer_input(n, 0, Some(1), Some(2))?;
                    let output = walk.qlinear_output(n)?;
                    walk.explain_node(n);
                    let scale = n.input.get(4).cloned().unwrap_or_default();
                    let rounding = MatmulRounding { input: Some(a), shared_input: false, output: Some(output) };
                    out.push(integer_weight(QuantOp::QLinearMatMul, b, &scale, n.input.get(5), rounding)?);
                }
                "Gather" => {
                    // A table of integer codes whose gathered rows one DequantizeLinear reads.
                    let Some(data) = n.input.first().and_then(|d| self.init(d)).filter(|d| IntType::of(d.data_type).is_some()) else {
                        continue;
                    };
                    let gathered = n.output.first().cloned().unwrap_or_default();
                    let readers = walk.readers(&gathered);
                    let [dq] = readers.as_slice() else {
                        return Err(bad(format!(
                            "gathers integer codes from `{}` that are not read by one DequantizeLinear: not modelled",
                            data.name
                        )));
                    };
                    if dq.op_type != "DequantizeLinear" || data.dims.len() != 2 {
                        return Err(bad(format!(
                            "gathers integer codes from `{}` into {} `{}`: not modelled",
                            data.name, dq.op_type, dq.name
                        )));
                    }
                    let scale = dq
                        .input
                        .get(1)
                        .and_then(|s| self.init(s))
                        .ok_or_else(|| bad("its DequantizeLinear's scale is not an initializer".into()))?;
                    if scale.dims.iter().product::<i64>() != 1 {
                        return Err(bad("its table's DequantizeLinear has a per-axis scale: only a per-tensor one is modelled".into()));
                    }
                    walk.explain_node(dq);
                    let zp = dq.input.get(2).filter(|z| !z.is_empty()).cloned();
                    let mut w = self
                        .kn_weight(role, n, QuantOp::GatherDequantize, data, scale, zp, 1, 0, MatmulRounding::default())
                        .map_err(bad)?;
                    w.shape = [data.dims[0] as usize, data.dims[1] as usize];
                    w.key = Some(w.key).filter(|k| k != "lm_head.weight").unwrap_or_else(|| "embed_tokens.weight".into());
                    w.node_key = None;
                    w.activation = None;
                    if let Some(p) = w.parts.as_mut() {
                        p.transposed = false;
                    }
                    out.push(w);
                }
                _ => {}
            }
        }
        walk.unexplained()?;
        Ok(out)
    }

    /// A code matrix `x` (`[K, N]`) dequantized by `(q − zp) · scale` along `axis` (or in
    /// `block`s), as the weight of `node`'s matmul.
    #[allow(clippy::too_many_arguments)]
    fn kn_weight(
        &self,
        role: &str,
        node: &PayloadNode,
        op: QuantOp,
        x: &PayloadTensor,
        scales: &PayloadTensor,
        zero_point: Option<String>,
        axis: i64,
        block: i64,
        rounding: MatmulRounding,
    ) -> Result<QuantizedWeight, String> {
        let bits = match x.data_type {
            UINT4 | INT4 => 4,
            UINT8 | INT8 => 8,
            t => return Err(format!("`{}` of type {}: expected (u)int4 or (u)int8 codes", x.name, super::proto::elem_type_name(t))),
        };
        let [k, n] = x.dims[..] else { return Err(format!("`{}` has shape {:?}: expected a matrix", x.name, x.dims)) };
        let per_tensor = scales.dims.iter().product::<i64>() == 1;
        // An input rounded by the graph: the MatMul is not the weight-only form ORT fuses into
        // MatMulNBits (its activations are the graph's, not MLAS's blocks).
        let accuracy_level =
            if op == QuantOp::DequantizeLinear && !rounding.any() { dq_fused_accuracy_level(bits, block, axis) } else { 0 };
        Ok(QuantizedWeight {
            submodel: role.into(),
            node: node.name.clone(),
            op,
            initializer: x.name.clone(),
            key: key_of(&x.name),
            node_key: key_of_node(&node.name),
            bits,
            block_size: block as usize,
            accuracy_level,
            zero_points: zero_point.is_some(),
            shape: [n as usize, k as usize],
            scale_type: super::proto::elem_type_name(scales.data_type),
            first_row: None,
            activation: rounding.input.as_ref().and_then(|i| i.tensor.clone()),
            signed: x.data_type == INT4 || x.data_type == INT8,
            per_tensor,
            rounding,
            parts: Some(Parts { q: x.name.clone(), scale: scales.name.clone(), zero_point, axis, block: block as usize, transposed: true }),
        })
    }

    /// A `[K, N]` code matrix's scales, one per output column (or one for the whole matrix).
    fn weight_scales(&self, w: &QuantizedWeight, path: &Path, data: &mut ExternalData) -> Result<Vec<f32>, QuantizedError> {
        let bad = |message: String| QuantizedError::Node { path: path.into(), node: w.node.clone(), op: w.op.as_str().into(), message };
        let parts = w.parts.as_ref().ok_or_else(|| bad("no code matrix recorded".into()))?;
        let t = self.init(&parts.scale).ok_or_else(|| bad(format!("`{}` is not an initializer", parts.scale)))?;
        let scales = decode_floats(&data.bytes(t, path)?, t.data_type == FLOAT16);
        if scales.len() != 1 && (parts.axis != 1 || parts.block != 0 || scales.len() != w.shape[0]) {
            return Err(bad(format!(
                "{} weight scales along axis {}: an integer GEMM's weight has one per output column or one",
                scales.len(),
                parts.axis
            )));
        }
        Ok(scales)
    }

    /// `w`'s values in the checkpoint's layout: its packed payload, dequantized by row when read
    /// (MatMulNBits, GatherBlockQuantized), or dequantized now (DequantizeLinear, transposed).
    fn dequantize(&self, w: &QuantizedWeight, path: &Path, data: &mut ExternalData) -> Result<OverrideData, QuantizedError> {
        let node = self.nodes.iter().find(|n| n.name == w.node).ok_or_else(|| QuantizedError::Node {
            path: path.into(),
            node: w.node.clone(),
            op: w.op.as_str().into(),
            message: "gone from the graph".into(),
        })?;
        let bad = |message: String| QuantizedError::Node { path: path.into(), node: w.node.clone(), op: w.op.as_str().into(), message };
        let payload = |i: usize, data: &mut ExternalData| -> Result<Option<Payload>, QuantizedError> {
            let Some(name) = node.input.get(i).filter(|s| !s.is_empty()) else { return Ok(None) };
            let t = self.init(name).ok_or_else(|| bad(format!("input {i} `{name}` is not an initializer")))?;
            Ok(Some((data.bytes(t, path)?, t.data_type, t.dims.clone())))
        };
        // MatMulNBits matrices and GatherBlockQuantized tables are read by row from where they
        // are stored (the external-data file) when a model dequantizes them: never whole in memory.
        let stored = |i: usize, data: &mut ExternalData| -> Result<Option<(Stored, i32)>, QuantizedError> {
            let Some(name) = node.input.get(i).filter(|s| !s.is_empty()) else { return Ok(None) };
            let t = self.init(name).ok_or_else(|| bad(format!("input {i} `{name}` is not an initializer")))?;
            Ok(Some((data.stored(t, path)?, t.data_type)))
        };
        // Scales are float32 or float16: the bytes of one.
        let scale_width = |ty: i32, what: &str| -> Result<usize, QuantizedError> {
            match ty {
                FLOAT => Ok(4),
                FLOAT16 => Ok(2),
                t => Err(bad(format!("{what} of type {}: expected float32 or float16", super::proto::elem_type_name(t)))),
            }
        };
        let [rows, cols] = w.shape;
        // A fused matrix is read whole and this part taken as its rows.
        let rows = if w.first_row.is_some() { attr(node, "N").unwrap_or(0) as usize } else { rows };
        match w.op {
            QuantOp::MatMulNBits => {
                let (b, _) = stored(1, data)?.ok_or_else(|| bad("no B".into()))?;
                let (scales, sty) = stored(2, data)?.ok_or_else(|| bad("no scales".into()))?;
                let scale_bytes = scale_width(sty, "scales")?;
                let (bits, block) = (w.bits as usize, w.block_size);
                let n_blocks = cols.div_ceil(block);
                let blob = block * bits / 8;
                if b.len() != rows * n_blocks * blob || scales.len() != rows * n_blocks * scale_bytes {
                    return Err(bad(format!(
                        "B has {} bytes and scales {} bytes; [N {rows}, K {cols}] in blocks of {block} at {bits} bits needs {} and {} values",
                        b.len(),
                        scales.len(),
                        rows * n_blocks * blob,
                        rows * n_blocks
                    )));
                }
                let zp_row = (n_blocks * bits).div_ceil(8);
                let zps = match stored(3, data)? {
                    Some((z, _)) if z.len() == rows * zp_row => Some(z),
                    Some((z, _)) => return Err(bad(format!("zero_points has {} bytes; {rows} rows of {zp_row} expected", z.len()))),
                    None => None,
                };
                let whole = Arc::new(MatMulNBitsRows { b, scales, scale_f16: sty == FLOAT16, zps, cols, bits, block });
                Ok(OverrideData::Packed(match w.first_row {
                    Some(start) => Arc::new(RowRange { inner: whole, start }),
                    None => whole,
                }))
            }
            QuantOp::GatherBlockQuantized => {
                let name = node.input.first().map_or("", String::as_str);
                let (table, _) = self.table(name).ok_or_else(|| bad(format!("input 0 (data) `{name}` is not an initializer")))?;
                let (q, qty) = (data.stored(table, path)?, table.data_type);
                let (scales, sty) = stored(2, data)?.ok_or_else(|| bad("no scales".into()))?;
                let scale_bytes = scale_width(sty, "scales")?;
                let block = w.block_size;
                let n_blocks = cols.div_ceil(block);
                if scales.len() != rows * n_blocks * scale_bytes {
                    return Err(bad(format!(
                        "scales has {} bytes; [{rows}, {cols}] in blocks of {block} needs {} values",
                        scales.len(),
                        rows * n_blocks
                    )));
                }
                let signed = qty == INT4 || qty == INT8;
                let zps = payload(3, data)?.map(|(z, _, _)| z);
                if let Some(z) = &zps {
                    let need = (rows * n_blocks * w.bits as usize).div_ceil(8);
                    if z.len() != need {
                        return Err(bad(format!(
                            "zero_points has {} bytes; {} blocks at {} bits need {need}",
                            z.len(),
                            rows * n_blocks,
                            w.bits
                        )));
                    }
                }
                let need = (rows * cols * w.bits as usize).div_ceil(8);
                if q.len() != need {
                    return Err(bad(format!("data has {} bytes; [{rows}, {cols}] at {} bits needs {need}", q.len(), w.bits)));
                }
                Ok(OverrideData::Packed(Arc::new(GatherRows {
                    q,
                    signed,
                    bits: w.bits as usize,
                    scales,
                    scale_f16: sty == FLOAT16,
                    zps,
                    cols,
                    block,
                })))
            }
            QuantOp::DequantizeLinear
            | QuantOp::MatMulInteger
            | QuantOp::DynamicQuantizeMatMul
            | QuantOp::MatMulIntegerToFloat
            | QuantOp::QLinearMatMul
            | QuantOp::GatherDequantize => {
                let parts = w.parts.as_ref().ok_or_else(|| bad("no code matrix recorded".into()))?;
                let named = |name: &str, data: &mut ExternalData| -> Result<Payload, QuantizedError> {
                    let t = self.init(name).ok_or_else(|| bad(format!("`{name}` is not an initializer")))?;
                    Ok((data.bytes(t, path)?, t.data_type, t.dims.clone()))
                };
                let (q, qty, _) = named(&parts.q, data)?;
                let (s, sty, sdims) = named(&parts.scale, data)?;
                scale_width(sty, "the scale")?;
                let scales = decode_floats(&s, sty == FLOAT16);
                let zps = parts.zero_point.as_deref().map(|z| named(z, data)).transpose()?.map(|(z, _, _)| z);
                // Stored `[K, N]` for a matmul (the checkpoint's `[N, K]` transposed), else as is.
                let (k_dim, n_dim) = if parts.transposed { (cols, rows) } else { (rows, cols) };
                let axis = parts.axis;
                let signed = qty == INT4 || qty == INT8;
                let bits = w.bits as usize;
                let q_at = |i: usize| element(&q, bits, signed, i);
                let zp_at = |i: usize| zps.as_ref().map_or(0, |z| element(z, bits, signed, i));
                let block = parts.block;
                let per_tensor = sdims.iter().product::<i64>() == 1;
                let scale_index = |k: usize, n: usize| -> Option<usize> {
                    match (sdims.len(), axis, block) {
                        _ if per_tensor => Some(0),
                        (1, 1, 0) => Some(n),
                        (1, 0, 0) => Some(k),
                        (2, 0, b) if b > 0 => Some((k / b) * n_dim + n),
                        (2, 1, b) if b > 0 => Some(k * n_dim.div_ceil(b) + n / b),
                        _ => None,
                    }
                };
                let mut out = vec![0f32; rows * cols];
                for k in 0..k_dim {
                    for n in 0..n_dim {
                        let si = scale_index(k, n).filter(|&i| i < scales.len()).ok_or_else(|| {
                            bad(format!("scale of shape {sdims:?} with axis {axis}, block_size {block} for codes [{k_dim}, {n_dim}]"))
                        })?;
                        let i = k * n_dim + n;
                        let v = (q_at(i) - zp_at(si)) as f32 * scales[si];
                        if parts.transposed {
                            out[n * cols + k] = v;
                        } else {
                            out[i] = v;
                        }
                    }
                }
                Ok(OverrideData::Dense(Arc::new(out)))
            }
        }
    }
}
