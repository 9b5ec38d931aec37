//! One quantized weight of a build: how it is quantized, which parameter it stands for, where its
//! codes are, and what the graph does to its matmul's activations.

use super::activations::{IntType, MatmulRounding, QuantizedActivation, Rounding};

/// ONNX element types the dequantization reads.
pub(super) const FLOAT: i32 = 1;
pub(super) const UINT8: i32 = 2;
pub(super) const INT8: i32 = 3;
pub(super) const FLOAT16: i32 = 10;
pub(super) const UINT4: i32 = 21;
pub(super) const INT4: i32 = 22;

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
    pub(super) parts: Option<Parts>,
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
pub(super) struct Parts {
    pub(super) q: String,
    pub(super) scale: String,
    pub(super) zero_point: Option<String>,
    pub(super) axis: i64,
    pub(super) block: usize,
    /// `[K, N]`, the checkpoint's `[N, K]` transposed (a matmul's B); else the checkpoint's layout.
    pub(super) transposed: bool,
}
