//! Reading a graph's quantized weights: each quantized matmul and gathered table, the parameter
//! it stands for, and what the graph does to the matmul's activations ([`super::activations`]).

use std::collections::BTreeSet;
use std::path::Path;

use super::activations::{self, IntType, MatmulRounding, QuantizedActivation, Rounding};
use super::error::QuantizedError;
use super::fused::unfused_keys;
use super::graph::{attr, PayloadGraph};
use super::names::{dq_fused_accuracy_level, key_of, key_of_node};
use super::payload_proto::{PayloadNode, PayloadTensor};
use super::weight::{Parts, QuantOp, QuantizedWeight, INT4, INT8, UINT4, UINT8};

impl PayloadGraph {
    /// The quantized weights of this graph, with what the graph does to each matmul's
    /// activations; a quantization node no modelled pattern accounts for is an error naming it.
    pub(super) fn quantized(&self, role: &str, path: &Path) -> Result<Vec<QuantizedWeight>, QuantizedError> {
        let mut walk = activations::Walk { graph: self, path, explained: BTreeSet::new() };
        let mut out = Vec::new();
        for n in &self.nodes {
            let bad = |message: String| QuantizedError::Node { path: path.into(), node: n.name.clone(), op: n.op_type.clone(), message };
            let input = |i: usize, what: &str| -> Result<&PayloadTensor, QuantizedError> {
                let name = n.input.get(i).filter(|s| !s.is_empty()).ok_or_else(|| bad(format!("no input {i} ({what})")))?;
                self.init(name).ok_or_else(|| bad(format!("input {i} ({what}) `{name}` is not an initializer")))
            };
            let scale_type = |t: &PayloadTensor| crate::onnx::proto::elem_type_name(t.data_type);
            // A `[K, N]` code matrix `b` of an integer matmul, its scale and zero point by name.
            let integer_weight = |op: QuantOp, b: &PayloadTensor, scale: &str, zp: Option<&String>, rounding: MatmulRounding| {
                let scale_t = self.init(scale).ok_or_else(|| bad(format!("the weight scale `{scale}` is not an initializer")))?;
                self.kn_weight(role, n, op, b, scale_t, zp.filter(|z| !z.is_empty()).cloned(), 1, 0, rounding, path)
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
                    let mut w = self.kn_weight(
                        role,
                        n,
                        QuantOp::DequantizeLinear,
                        x,
                        scales,
                        n.input.get(2).filter(|z| !z.is_empty()).cloned(),
                        axis,
                        block,
                        rounding,
                        path,
                    )?;
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
                    let mut w =
                        self.kn_weight(role, n, QuantOp::GatherDequantize, data, scale, zp, 1, 0, MatmulRounding::default(), path)?;
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
        path: &Path,
    ) -> Result<QuantizedWeight, QuantizedError> {
        let bad = |message: String| QuantizedError::Node { path: path.into(), node: node.name.clone(), op: node.op_type.clone(), message };
        let bits = match x.data_type {
            UINT4 | INT4 => 4,
            UINT8 | INT8 => 8,
            t => {
                return Err(bad(format!(
                    "`{}` of type {}: expected (u)int4 or (u)int8 codes",
                    x.name,
                    crate::onnx::proto::elem_type_name(t)
                )))
            }
        };
        let [k, n] = x.dims[..] else { return Err(bad(format!("`{}` has shape {:?}: expected a matrix", x.name, x.dims))) };
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
            scale_type: crate::onnx::proto::elem_type_name(scales.data_type),
            first_row: None,
            activation: rounding.input.as_ref().and_then(|i| i.tensor.clone()),
            signed: x.data_type == INT4 || x.data_type == INT8,
            per_tensor,
            rounding,
            parts: Some(Parts { q: x.name.clone(), scale: scales.name.clone(), zero_point, axis, block: block as usize, transposed: true }),
        })
    }
}
