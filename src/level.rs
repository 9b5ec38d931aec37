//! The tiers (`L1` … `L5`, mobius's `level: "L4+L5"`) and the export dtypes a case names.

use std::collections::BTreeSet;

use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::names::{named_enum, UnknownName};

named_enum! {
    /// A tier. Ordered L1 < … < L5.
    #[derive(PartialOrd, Ord)]
    pub enum Level("level") {
        /// Graph: does the export honour the contract its config implies?
        L1 = "L1",
        /// Architecture: does a real full-size config agree with the checkpoint and export?
        L2 = "L2",
        /// Synthetic: the same function on the same random weights?
        L3 = "L3",
        /// Checkpoint: the golden next token?
        L4 = "L4",
        /// Generation: the golden greedy tokens?
        L5 = "L5",
    }
}

named_enum! {
    /// Weight dtype of the export; selects the tolerance row. The spelling is mobius's.
    #[derive(PartialOrd, Ord)]
    pub enum Dtype("dtype", serde_variant_error) {
        Float32 = "float32",
        Float16 = "float16",
        Bfloat16 = "bfloat16",
        /// Weight-only 4-bit quantisation (MatMulNBits, GatherBlockQuantized, 4-bit
        /// DequantizeLinear); its L3 is judged against the reference on the build's own
        /// dequantized weights, in its activations' precision ([`Dtype::compute`]).
        Int4 = "int4",
        /// Weight-only 8-bit quantisation, judged as int4 is.
        Int8 = "int8",
    }
}

named_enum! {
    /// Which rule decides a case's L3 (`l3_rule:`): the calibrated error budget against a float64
    /// run of the reference (the default), or mobius's fixed atol/rtol row.
    pub enum L3Rule("l3_rule", serde_variant_error) {
        Calibrated = "calibrated",
        Fixed = "fixed",
    }
}

impl Dtype {
    /// ONNX element type of the export's activations (as `onnx::proto::elem_type_name` prints
    /// it). int4 is weight-only (MatMulNBits); its activations stay float32.
    pub fn onnx_elem_type(self) -> &'static str {
        match self {
            Dtype::Float32 | Dtype::Int4 | Dtype::Int8 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
        }
    }
}

impl Dtype {
    /// Whether the weights are quantized (the build's graphs say how: `onnx::quantized`).
    pub fn is_quantized(self) -> bool {
        matches!(self, Dtype::Int4 | Dtype::Int8)
    }

    /// The precision the export computes in: its own for a float build; for a weight-only
    /// quantized one, its activations' (float32: the builds judged here quantize mobius's f32
    /// exports; a q4f16 build would compute in float16 and is not told apart yet).
    pub fn compute(self) -> Dtype {
        match self {
            Dtype::Int4 | Dtype::Int8 => Dtype::Float32,
            d => d,
        }
    }
}

/// A `level:` string that is not levels joined by `+`, each at most once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LevelExprError {
    #[error("in level {expr:?}: {source} (levels are joined by '+', e.g. \"L4+L5\")")]
    Unknown { expr: String, source: UnknownName },
    #[error("in level {expr:?}: {level} is listed twice")]
    Twice { expr: String, level: Level },
}

/// Parses mobius's `level:` string: levels joined by `+` (`"L4+L5"`), each at most once.
pub fn parse_level_expr(s: &str) -> Result<BTreeSet<Level>, LevelExprError> {
    let mut set = BTreeSet::new();
    for part in s.split('+') {
        let level: Level = part.trim().parse().map_err(|source| LevelExprError::Unknown { expr: s.to_string(), source })?;
        if !set.insert(level) {
            return Err(LevelExprError::Twice { expr: s.to_string(), level });
        }
    }
    Ok(set)
}

/// `level: "L4+L5"` as a set, validated while parsing so errors carry a line number.
#[derive(Debug, Clone)]
pub(crate) struct LevelExpr(pub(crate) BTreeSet<Level>);

impl<'de> Deserialize<'de> for LevelExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_level_expr(&s).map(LevelExpr).map_err(|e| de::Error::custom(format!("`level`: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_parity_reference::BidirectionalScope;

    /// Guards: Display spellings used in trial names and reports.
    #[test]
    fn display_spellings() {
        assert_eq!(Level::L3.to_string(), "L3");
        assert_eq!(Dtype::Bfloat16.to_string(), "bfloat16");
        assert_eq!("int4".parse::<Dtype>().unwrap(), Dtype::Int4);
        assert_eq!(BidirectionalScope::AllLayers.to_string(), "all-layers");
        assert_eq!(parse_level_expr("L1+L2+L3+L4+L5").unwrap().len(), 5);
    }
}
