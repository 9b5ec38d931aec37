//! What a quantized build does to its matmuls' *activations*, read from its graph: the dialects
//! ONNX Runtime's tools write when they quantize activations too (and what ORT's graph optimizer
//! fuses them into, for a build saved after optimization):
//!
//! - **dynamic** (`quantize_dynamic`, Olive's dynamic pass): `DynamicQuantizeLinear(X)` →
//!   `MatMulInteger(X_q, W_q, X_zp, W_zp)` → `Cast` → `Mul(·, Mul(X_scale, W_scale))`, fused by
//!   ORT into `DynamicQuantizeMatMul` / `MatMulIntegerToFloat`: X to uint8 per tensor at run time;
//! - **static QDQ** (`quantize_static`, QDQ format): `QuantizeLinear → DequantizeLinear` pairs with
//!   constant per-tensor scales on a MatMul's input and output, its weight a `DequantizeLinear` of
//!   int8 codes; the pair sits on the tensor itself, so every reader of the input reads the
//!   rounded values. ORT fuses 8-bit node units into `QLinearMatMul` (an exact integer GEMM and a
//!   requantized output) and leaves 16-bit ones as float matmuls between the pairs;
//! - **QOperator** (`quantize_static`, QOperator format): `QuantizeLinear → QLinearMatMul →
//!   DequantizeLinear`.
//!
//! Each is the same function up to the order of f32 additions: the input rounded to its grid, a
//! float matmul with the dequantized weight, the output rounded to its grid (static builds), which
//! the reference computes ([`onnx_parity_reference::weights::activations`]). A quantized tensor is
//! rounded with the scale it is quantized with; a pair whose dequantization reads another scale (a
//! mis-scaled activation) is recorded ([`ScaleMismatch`]) and fails L3 on its layer. Whatever
//! quantizes activations otherwise (a QDQ pair around an Add, QLinearAdd, QAttention, per-axis
//! activation scales, a chain of integer ops) is refused naming the node: never judged as float.

use std::collections::BTreeSet;
use std::path::Path;

use onnx_parity_reference::weights::{ActivationQuant, MatmulActivations, StaticGrid};

use super::error::QuantizedError;
use super::graph::{attr, PayloadGraph};
use super::payload_proto::{PayloadNode, PayloadTensor};

/// The integer type activations are quantized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IntType {
    pub bits: u32,
    pub signed: bool,
}

impl IntType {
    /// The ONNX element type's (uint8, int8, uint16, int16).
    pub fn of(data_type: i32) -> Option<IntType> {
        match data_type {
            2 => Some(IntType { bits: 8, signed: false }),
            3 => Some(IntType { bits: 8, signed: true }),
            4 => Some(IntType { bits: 16, signed: false }),
            5 => Some(IntType { bits: 16, signed: true }),
            _ => None,
        }
    }

    /// `[qmin, qmax]`.
    pub fn range(self) -> (i32, i32) {
        if self.signed {
            (-(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1)
        } else {
            (0, (1 << self.bits) - 1)
        }
    }

    pub fn name(self) -> &'static str {
        match (self.bits, self.signed) {
            (8, false) => "uint8",
            (8, true) => "int8",
            (16, false) => "uint16",
            _ => "int16",
        }
    }
}

/// How a graph rounds one activation tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rounding {
    /// DynamicQuantizeLinear: uint8, scale and zero point from the tensor's range at run time.
    Dynamic,
    /// A constant per-tensor scale and zero point (a calibrated QuantizeLinear).
    Static { scale: f32, zero_point: i32 },
}

/// The scale a quantized tensor's values are dequantized with where it is not the one they were
/// quantized with: the values come out `scale / quantized_scale` times what was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleMismatch {
    /// The node that dequantizes (a DequantizeLinear, QLinearMatMul's `a_scale`).
    pub node: String,
    pub scale: f32,
    pub zero_point: i32,
}

/// One activation tensor the graph quantizes.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedActivation {
    /// The float tensor rounded (the value a run exposes as the candidate's, for rounding hints).
    /// `None` where the graph holds no float value of it (a QLinearMatMul's requantized output).
    pub tensor: Option<String>,
    /// The node that quantizes it.
    pub node: String,
    pub rounding: Rounding,
    pub ty: IntType,
    pub mismatch: Option<ScaleMismatch>,
}

impl QuantizedActivation {
    /// `uint8 per tensor, dynamic` / `uint16 per tensor, static (scale 0.0123, zero point 32768)`.
    pub fn describe(&self) -> String {
        match self.rounding {
            Rounding::Dynamic => format!("{} per tensor, dynamic", self.ty.name()),
            Rounding::Static { scale, zero_point } => {
                format!("{} per tensor, static (scale {scale:e}, zero point {zero_point})", self.ty.name())
            }
        }
    }

    /// What the reference does to the tensor.
    fn quant(&self) -> ActivationQuant {
        match self.rounding {
            Rounding::Dynamic => ActivationQuant::Dynamic,
            Rounding::Static { scale, zero_point } => {
                let (qmin, qmax) = self.ty.range();
                ActivationQuant::Static(StaticGrid { scale, zero_point, qmin, qmax })
            }
        }
    }
}

/// What the graph does to one matmul's activations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatmulRounding {
    pub input: Option<QuantizedActivation>,
    /// The rounded input replaces the tensor for its other readers too (a QDQ pair on it).
    pub shared_input: bool,
    pub output: Option<QuantizedActivation>,
}

impl MatmulRounding {
    pub fn any(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// What the reference does around the matmul.
    pub fn to_reference(&self) -> MatmulActivations {
        let output = self.output.as_ref().and_then(|o| match o.quant() {
            ActivationQuant::Static(g) => Some(g),
            _ => None,
        });
        MatmulActivations {
            input: self.input.as_ref().map(QuantizedActivation::quant),
            shared_input: self.shared_input,
            output,
            integer_output: None,
        }
    }

    /// The tensors rounded around the matmul: `("input", …)`, `("output", …)`.
    pub fn rounded(&self) -> impl Iterator<Item = (&'static str, &QuantizedActivation)> {
        [("input", &self.input), ("output", &self.output)].into_iter().filter_map(|(which, a)| Some((which, a.as_ref()?)))
    }

    /// The rounded tensors with a scale mismatch, as `(which, mismatch, quantized scale)`.
    pub fn mismatches(&self) -> Vec<(&'static str, &ScaleMismatch, f32)> {
        self.rounded()
            .filter_map(|(which, a)| {
                let Rounding::Static { scale, .. } = a.rounding else { return None };
                a.mismatch.as_ref().map(|m| (which, m, scale))
            })
            .collect()
    }
}

/// The ops that quantize or compute on quantized activations: each one in a build must be part of
/// a pattern this module models, or the build is refused naming it.
fn is_quantization_op(op: &str) -> bool {
    matches!(
        op,
        "QuantizeLinear"
            | "DequantizeLinear"
            | "DynamicQuantizeLinear"
            | "MatMulInteger"
            | "ConvInteger"
            | "MatMulIntegerToFloat"
            | "DynamicQuantizeMatMul"
            | "DynamicQuantizeLSTM"
            | "QGemm"
            | "QAttention"
            | "QEmbedLayerNormalization"
            | "QOrderedMatMul"
            | "QOrderedAttention"
            | "QuantizeBFP"
            | "DequantizeBFP"
    ) || op.starts_with("QLinear")
}

/// A walk over a graph's quantization patterns: each node a pattern accounts for is recorded, so
/// the rest can be refused ([`Walk::unexplained`]).
pub(super) struct Walk<'g> {
    pub(super) graph: &'g PayloadGraph,
    pub(super) path: &'g Path,
    pub(super) explained: BTreeSet<String>,
}

/// Little-endian values of an integer or float initializer as f64 (inline data only: scales and
/// zero points of activations are scalars, which ONNX keeps inline).
fn values(t: &PayloadTensor) -> Option<Vec<f64>> {
    let raw = &t.raw_data;
    if !raw.is_empty() {
        return Some(match t.data_type {
            1 => raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
            10 => raw.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            2 => raw.iter().map(|&b| b as f64).collect(),
            3 => raw.iter().map(|&b| b as i8 as f64).collect(),
            4 => raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as f64).collect(),
            5 => raw.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as f64).collect(),
            6 => raw.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
            _ => return None,
        });
    }
    match t.data_type {
        1 => Some(t.float_data.iter().map(|&v| v as f64).collect()),
        10 => Some(t.int32_data.iter().map(|&v| half::f16::from_bits(v as u16).to_f64()).collect()),
        2..=6 => Some(t.int32_data.iter().map(|&v| v as f64).collect()),
        _ => None,
    }
}

impl<'g> Walk<'g> {
    fn bad(&self, n: &PayloadNode, message: String) -> QuantizedError {
        QuantizedError::Node { path: self.path.into(), node: n.name.clone(), op: n.op_type.clone(), message }
    }

    fn explain(&mut self, n: &PayloadNode) {
        self.explained.insert(n.name.clone());
    }

    /// The node making `value`.
    pub(super) fn producer(&self, value: &str) -> Option<&'g PayloadNode> {
        self.graph.producers.get(value).map(|&i| &self.graph.nodes[i])
    }

    /// The nodes reading `value`.
    pub(super) fn readers(&self, value: &str) -> Vec<&'g PayloadNode> {
        self.graph.consumers.get(value).map(|c| c.iter().map(|&i| &self.graph.nodes[i]).collect()).unwrap_or_default()
    }

    /// A constant's values (an initializer, or a `Constant` node's tensor) with its element type.
    fn constant(&self, value: &str) -> Option<(Vec<f64>, i32)> {
        let t = self.graph.init(value).or_else(|| {
            let node = self.producer(value).filter(|n| n.op_type == "Constant")?;
            node.attribute.iter().find(|a| a.name == "value")?.t.as_ref()
        })?;
        Some((values(t)?, t.data_type))
    }

    /// A per-tensor scale and zero point read by `n` at inputs `scale` and `zp` (the zero point
    /// absent: 0 of `default_type`), with the integer type it quantizes to.
    fn scale_and_zero_point(
        &self,
        n: &PayloadNode,
        scale: usize,
        zp: usize,
        default_type: i32,
    ) -> Result<(f32, i32, IntType), QuantizedError> {
        let name = n.input.get(scale).filter(|s| !s.is_empty()).ok_or_else(|| self.bad(n, format!("no input {scale} (scale)")))?;
        let (s, _) = self.constant(name).ok_or_else(|| self.bad(n, format!("its scale `{name}` is not a constant: not modelled")))?;
        let [s] = s.as_slice() else {
            return Err(self
                .bad(n, format!("its activation scale `{name}` has {} values: only per-tensor activation scales are modelled", s.len())));
        };
        let (zp, ty) = match n.input.get(zp).filter(|s| !s.is_empty()) {
            Some(z) => {
                let (v, ty) =
                    self.constant(z).ok_or_else(|| self.bad(n, format!("its zero point `{z}` is not a constant: not modelled")))?;
                let [v] = v.as_slice() else {
                    return Err(self.bad(n, format!("its activation zero point `{z}` has {} values: only per-tensor is modelled", v.len())));
                };
                (*v as i32, ty)
            }
            None => (0, default_type),
        };
        let ty = IntType::of(ty).ok_or_else(|| {
            self.bad(
                n,
                format!("quantizes to {}: only (u)int8 and (u)int16 activations are modelled", crate::onnx::proto::elem_type_name(ty)),
            )
        })?;
        Ok((*s as f32, zp, ty))
    }

    /// `QuantizeLinear(X, scale, zp)`'s constant per-tensor grid.
    fn quantize_linear(&mut self, q: &PayloadNode) -> Result<QuantizedActivation, QuantizedError> {
        if attr(q, "block_size").is_some_and(|b| b != 0) {
            return Err(self.bad(q, "a blocked activation quantization: not modelled".into()));
        }
        let out_type = attr(q, "output_dtype").filter(|&t| t != 0).unwrap_or(2) as i32;
        let (scale, zero_point, ty) = self.scale_and_zero_point(q, 1, 2, out_type)?;
        let x = q.input.first().filter(|s| !s.is_empty()).cloned().ok_or_else(|| self.bad(q, "no input".into()))?;
        self.explain(q);
        Ok(QuantizedActivation {
            tensor: Some(x),
            node: q.name.clone(),
            rounding: Rounding::Static { scale, zero_point },
            ty,
            mismatch: None,
        })
    }

    /// Whether `d` dequantizes with `a`'s grid; the mismatch when it does not.
    fn dequantized_with(
        &self,
        d: &PayloadNode,
        scale_at: usize,
        zp_at: usize,
        a: &QuantizedActivation,
    ) -> Result<Option<ScaleMismatch>, QuantizedError> {
        let (s, zp, ty) = self.scale_and_zero_point(d, scale_at, zp_at, 2)?;
        let Rounding::Static { scale, zero_point } = a.rounding else { return Ok(None) };
        if ty != a.ty {
            return Err(self.bad(d, format!("dequantizes {} values that `{}` quantizes to {}", ty.name(), a.node, a.ty.name())));
        }
        Ok((s.to_bits() != scale.to_bits() || zp != zero_point).then(|| ScaleMismatch { node: d.name.clone(), scale: s, zero_point: zp }))
    }

    /// The rounding of the activation a matmul reads as `a` when `a` is a QDQ pair's output
    /// (`X → QuantizeLinear → DequantizeLinear → a`), and whether the pair replaces X for readers
    /// other than quantized matmuls; `None` when `a` is not such a pair's.
    pub(super) fn qdq_input(&mut self, matmul: &PayloadNode, a: &str) -> Result<Option<(QuantizedActivation, bool)>, QuantizedError> {
        let Some(dq) = self.producer(a).filter(|d| d.op_type == "DequantizeLinear") else { return Ok(None) };
        if self.graph.init(dq.input.first().map_or("", String::as_str)).is_some() {
            return Ok(None);
        }
        let q = match dq.input.first().and_then(|v| self.producer(v)) {
            Some(q) if q.op_type == "QuantizeLinear" => q,
            other => {
                return Err(self.bad(
                    dq,
                    format!(
                        "dequantizes `{}` (made by {}) into `{}`: only a QuantizeLinear → DequantizeLinear pair on a MatMul's input is modelled",
                        dq.input.first().map_or("", String::as_str),
                        other.map_or("no node".to_string(), |o| format!("{} `{}`", o.op_type, o.name)),
                        matmul.name
                    ),
                ))
            }
        };
        let mut a_q = self.quantize_linear(q)?;
        a_q.mismatch = self.dequantized_with(dq, 1, 2, &a_q)?;
        self.explain(dq);
        let x = a_q.tensor.clone().unwrap_or_default();
        // The pair's rounded values replace X for every reader of the DequantizeLinear's output;
        // X read beside them in float by another node as well is two tensors the reference
        // cannot hold as one.
        let other_readers = self.readers(a).into_iter().any(|r| !self.is_quantized_matmul(r));
        let float_readers: Vec<&PayloadNode> = self.readers(&x).into_iter().filter(|r| r.op_type != "QuantizeLinear").collect();
        if other_readers && !float_readers.is_empty() {
            return Err(self.bad(
                q,
                format!(
                    "`{x}` is read rounded (through `{}`) and in float (by `{}`): not modelled",
                    dq.name,
                    float_readers.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join("`, `")
                ),
            ));
        }
        Ok(Some((a_q, other_readers)))
    }

    /// A MatMul whose weight is a constant or a DequantizeLinear of one.
    fn is_quantized_matmul(&self, n: &PayloadNode) -> bool {
        n.op_type == "MatMul"
            && n.input.get(1).is_some_and(|b| {
                self.graph.init(b).is_some()
                    || self
                        .producer(b)
                        .is_some_and(|d| d.op_type == "DequantizeLinear" && d.input.first().is_some_and(|x| self.graph.init(x).is_some()))
            })
    }

    /// The static requantization of a MatMul's output `y`: `y → QuantizeLinear → DequantizeLinear`
    /// read by everything downstream; `None` when nothing quantizes it.
    pub(super) fn qdq_output(&mut self, matmul: &PayloadNode) -> Result<Option<QuantizedActivation>, QuantizedError> {
        let Some(y) = matmul.output.first() else { return Ok(None) };
        let readers = self.readers(y);
        let qs: Vec<&PayloadNode> = readers.iter().copied().filter(|r| r.op_type == "QuantizeLinear").collect();
        let [q] = qs.as_slice() else {
            if qs.len() > 1 {
                return Err(self.bad(matmul, format!("its output is quantized by {} QuantizeLinear nodes: not modelled", qs.len())));
            }
            return Ok(None);
        };
        if readers.len() > 1 || self.graph.outputs.contains(y) {
            return Err(self.bad(matmul, format!("its output `{y}` is read both quantized (by `{}`) and in float: not modelled", q.name)));
        }
        let mut out = self.quantize_linear(q)?;
        let q_out = q.output.first().cloned().unwrap_or_default();
        for r in self.readers(&q_out) {
            if r.op_type != "DequantizeLinear" {
                return Err(self.bad(
                    r,
                    format!("reads `{q_out}`, the quantized output of `{}`: only a DequantizeLinear after it is modelled", matmul.name),
                ));
            }
            if let Some(m) = self.dequantized_with(r, 1, 2, &out)? {
                out.mismatch.get_or_insert(m);
            }
            self.explain(r);
        }
        Ok(Some(out))
    }

    /// The activation an integer matmul reads as its quantized input `a_q` (MatMulInteger,
    /// MatMulIntegerToFloat, QLinearMatMul): made by a DynamicQuantizeLinear (whose scale and zero
    /// point outputs must be the ones the matmul reads, `a_scale_at`/`a_zp_at` where it reads
    /// them) or a QuantizeLinear with constant parameters (whose grid the matmul must read too:
    /// otherwise a mismatch).
    pub(super) fn integer_input(
        &mut self,
        n: &PayloadNode,
        a_q: usize,
        a_scale_at: Option<usize>,
        a_zp_at: Option<usize>,
    ) -> Result<QuantizedActivation, QuantizedError> {
        let name = n.input.get(a_q).cloned().unwrap_or_default();
        let producer = self.producer(&name);
        match producer.map(|p| p.op_type.as_str()) {
            Some("DynamicQuantizeLinear") => {
                let dql = producer.expect("matched");
                let reads = |at: Option<usize>, out: usize| at.is_none_or(|i| n.input.get(i) == dql.output.get(out));
                if !reads(a_scale_at, 1) || !reads(a_zp_at, 2) {
                    return Err(self.bad(n, format!("reads `{name}` from `{}` with another scale or zero point than it computed: not modelled", dql.name)));
                }
                self.explain(dql);
                let x = dql.input.first().cloned();
                Ok(QuantizedActivation {
                    tensor: x,
                    node: dql.name.clone(),
                    rounding: Rounding::Dynamic,
                    ty: IntType { bits: 8, signed: false },
                    mismatch: None,
                })
            }
            Some("QuantizeLinear") => {
                let q = producer.expect("matched");
                let mut a = self.quantize_linear(q)?;
                if let Some(s) = a_scale_at {
                    a.mismatch = self.dequantized_with(n, s, a_zp_at.unwrap_or(usize::MAX), &a)?;
                }
                Ok(a)
            }
            _ => Err(self.bad(
                n,
                format!(
                    "its quantized input `{name}` is made by {}: only a DynamicQuantizeLinear or a QuantizeLinear of a float tensor is modelled",
                    producer.map_or("no node".to_string(), |p| format!("{} `{}`", p.op_type, p.name))
                ),
            )),
        }
    }

    /// `MatMulInteger`'s float result: `Cast(to float)` → `Mul(·, S)`, `S` the product of the
    /// input's scale (`a_scale`, the DynamicQuantizeLinear's or a constant) and the weight's
    /// (a constant, returned by name).
    pub(super) fn integer_result_scale(&mut self, n: &PayloadNode, a_scale: Option<&str>) -> Result<String, QuantizedError> {
        let out = n.output.first().cloned().unwrap_or_default();
        let shape =
            |what: &str| self.bad(n, format!("{what}: only MatMulInteger → Cast(float) → Mul(·, input scale × weight scale) is modelled"));
        let [cast] = self.readers(&out)[..] else { return Err(shape("its output is not read by one Cast")) };
        if cast.op_type != "Cast" || attr(cast, "to") != Some(1) {
            return Err(shape("its output is not cast to float"));
        }
        let cast_out = cast.output.first().cloned().unwrap_or_default();
        let [mul] = self.readers(&cast_out)[..] else { return Err(shape("the cast is not read by one Mul")) };
        if mul.op_type != "Mul" {
            return Err(shape("the cast is not scaled by a Mul"));
        }
        let s = mul.input.iter().find(|i| **i != cast_out).cloned().unwrap_or_default();
        let scales = self.producer(&s).filter(|p| p.op_type == "Mul").ok_or_else(|| shape("the scale is not a Mul of two scales"))?;
        let weight_scale = scales
            .input
            .iter()
            .find(|i| Some(i.as_str()) != a_scale && self.graph.init(i).is_some())
            .cloned()
            .ok_or_else(|| shape("the scale's factors are not the input's scale and a constant weight scale"))?;
        if a_scale.is_some_and(|a| !scales.input.iter().any(|i| i == a)) {
            return Err(shape("the scale does not multiply the input's own scale"));
        }
        for node in [cast, mul, scales] {
            self.explain(node);
        }
        Ok(weight_scale)
    }

    /// A `QLinearMatMul`'s requantized output `y` (its `y_scale`, `y_zero_point`) and the
    /// DequantizeLinear nodes that read it.
    pub(super) fn qlinear_output(&mut self, n: &PayloadNode) -> Result<QuantizedActivation, QuantizedError> {
        let (scale, zero_point, ty) = self.scale_and_zero_point(n, 6, 7, 2)?;
        let mut out = QuantizedActivation {
            tensor: None,
            node: n.name.clone(),
            rounding: Rounding::Static { scale, zero_point },
            ty,
            mismatch: None,
        };
        let y = n.output.first().cloned().unwrap_or_default();
        for r in self.readers(&y) {
            if r.op_type != "DequantizeLinear" {
                return Err(self
                    .bad(r, format!("reads `{y}`, the requantized output of `{}`: only a DequantizeLinear after it is modelled", n.name)));
            }
            if let Some(m) = self.dequantized_with(r, 1, 2, &out)? {
                out.mismatch.get_or_insert(m);
            }
            self.explain(r);
        }
        Ok(out)
    }

    /// `n` accounted for by a pattern.
    pub(super) fn explain_node(&mut self, n: &PayloadNode) {
        self.explain(n);
    }

    /// The first quantization node no pattern accounts for, refused with why.
    pub(super) fn unexplained(&self) -> Result<(), QuantizedError> {
        let Some(n) = self.graph.nodes.iter().find(|n| is_quantization_op(&n.op_type) && !self.explained.contains(&n.name)) else {
            return Ok(());
        };
        let named = |nodes: &[&PayloadNode]| nodes.iter().map(|r| format!("{} `{}`", r.op_type, r.name)).collect::<Vec<_>>().join(", ");
        let out = n.output.first().cloned().unwrap_or_default();
        let readers = self.readers(&out);
        // A pair's values go on through its DequantizeLinear: say where.
        let downstream: Vec<&PayloadNode> = readers
            .iter()
            .filter(|r| r.op_type == "DequantizeLinear")
            .flat_map(|d| d.output.first().map(|o| self.readers(o)).unwrap_or_default())
            .collect();
        let x = n.input.first().map_or("", String::as_str);
        let why = match n.op_type.as_str() {
            "DequantizeLinear" if self.graph.init(x).is_some() => format!(
                "dequantizes the constant `{x}` into {}: only a MatMul's weight (B) and a gathered table are read as quantized weights",
                named(&readers)
            ),
            "QuantizeLinear" | "DequantizeLinear" if downstream.iter().chain(&readers).any(|r| r.op_type == "MatMul") => format!(
                "rounds `{x}` for {}: a MatMul whose weight is not a quantized constant (an activation × activation product, or a weight computed at run time) is not modelled",
                named(if downstream.is_empty() { &readers } else { &downstream })
            ),
            "QuantizeLinear" | "DequantizeLinear" => format!(
                "rounds `{x}` for {}: only a MatMul's input and output are modelled rounded (a QDQ build quantizing other ops: ask quantize_static for op_types_to_quantize=[\"MatMul\"])",
                named(if downstream.is_empty() { &readers } else { &downstream })
            ),
            _ => format!(
                "an operator on quantized values the harness does not model (it models DynamicQuantizeLinear into MatMulInteger and its fused forms, QuantizeLinear → DequantizeLinear pairs on a MatMul's input and output, QLinearMatMul, and quantized weights and tables); read by: {}",
                if readers.is_empty() { "nothing".into() } else { named(&readers) }
            ),
        };
        Err(self.bad(n, format!("refused, not judged as float: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the element types' ranges the grids clamp to.
    #[test]
    fn integer_ranges() {
        assert_eq!(IntType::of(2).map(IntType::range), Some((0, 255)));
        assert_eq!(IntType::of(3).map(IntType::range), Some((-128, 127)));
        assert_eq!(IntType::of(4).map(IntType::range), Some((0, 65535)));
        assert_eq!(IntType::of(5).map(IntType::range), Some((-32768, 32767)));
        assert_eq!(IntType::of(1), None);
        assert!(is_quantization_op("QLinearAdd") && is_quantization_op("DynamicQuantizeLinear") && !is_quantization_op("MatMulNBits"));
    }
}
