//! Activation-quantization dialects read from tiny hand-made graphs: what each pattern is read as,
//! and what is refused (naming the node and why) rather than judged as float.

use prost::Message;

use super::payload_proto::{PayloadAttribute, PayloadGraphProto, PayloadModel, PayloadNode, PayloadTensor, PayloadValueInfo};
use super::*;

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> PayloadNode {
    PayloadNode {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op.into(),
        ..Default::default()
    }
}

fn with_int(mut n: PayloadNode, name: &str, i: i64) -> PayloadNode {
    n.attribute.push(PayloadAttribute { name: name.into(), i, t: None });
    n
}

fn f32s(name: &str, dims: &[i64], v: &[f32]) -> PayloadTensor {
    PayloadTensor {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        raw_data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn bytes(name: &str, dims: &[i64], data_type: i32, v: &[u8]) -> PayloadTensor {
    PayloadTensor { name: name.into(), dims: dims.to_vec(), data_type, raw_data: v.to_vec(), ..Default::default() }
}

/// A package folder holding one `model.onnx` of these nodes and initializers.
fn package(nodes: Vec<PayloadNode>, inits: Vec<PayloadTensor>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = PayloadModel {
        graph: Some(PayloadGraphProto { node: nodes, initializer: inits, output: vec![PayloadValueInfo { name: "out".into() }] }),
    };
    std::fs::write(dir.path().join("model.onnx"), model.encode_to_vec()).expect("write");
    dir
}

const W: &str = "model.layers.0.mlp.up_proj.weight_t_quantized";

/// The int8 `[K 2, N 2]` weight with per-channel scales and zero points, and the activation grids.
fn inits(dq_scale: f32) -> Vec<PayloadTensor> {
    vec![
        bytes(W, &[2, 2], 3, &[1, 2, 3, 4]),
        f32s("w_scale", &[2], &[0.5, 0.25]),
        bytes("w_zp", &[2], 3, &[0, 0]),
        f32s("x_scale", &[], &[0.1]),
        bytes("x_zp", &[], 2, &[128]),
        f32s("x_scale_dq", &[], &[dq_scale]),
        f32s("y_scale", &[], &[0.2]),
        bytes("y_zp", &[], 2, &[120]),
    ]
}

/// `x → Q → DQ → MatMul(·, DQ(W)) → Q → DQ → out`: a static QDQ node unit (uint8 activations).
fn qdq(dq_scale: &str, extra: Vec<PayloadNode>) -> Vec<PayloadNode> {
    let mut n = vec![
        node("QuantizeLinear", "x_q", &["x", "x_scale", "x_zp"], &["x_codes"]),
        node("DequantizeLinear", "x_dq", &["x_codes", dq_scale, "x_zp"], &["x_rounded"]),
        with_int(node("DequantizeLinear", "w_dq", &[W, "w_scale", "w_zp"], &["w"]), "axis", 1),
        node("MatMul", "model/layers.0/mlp/up_proj/MatMul", &["x_rounded", "w"], &["y"]),
        node("QuantizeLinear", "y_q", &["y", "y_scale", "y_zp"], &["y_codes"]),
        node("DequantizeLinear", "y_dq", &["y_codes", "y_scale", "y_zp"], &["out"]),
    ];
    n.extend(extra);
    n
}

/// Guards the QDQ reading: the input and output grids (uint8, per tensor, static, their scale and
/// zero point), the weight per channel and signed, ORT's fusion of the 8-bit unit into
/// QLinearMatMul (an integer GEMM, no MLAS int8 blocks), a pair read only by the matmul not
/// shared, and the dequantized weight `(q − zp) · scale` transposed to `[N, K]`.
#[test]
fn a_qdq_node_unit_is_read_as_rounded_input_and_output() {
    let dir = package(qdq("x_scale", vec![]), inits(0.1));
    let q = QuantizedBuild::read(dir.path()).expect("read").expect("quantized");
    let [w] = q.weights.as_slice() else { panic!("one weight: {:?}", q.weights) };
    assert_eq!(
        (w.op, w.key.as_str(), w.bits, w.signed, w.per_tensor, w.accuracy_level),
        (QuantOp::DequantizeLinear, "layers.0.mlp.up_proj.weight", 8, true, false, 0)
    );
    let input = w.rounding.input.as_ref().expect("input rounded");
    assert_eq!(
        (input.tensor.as_deref(), input.rounding, input.ty.name()),
        (Some("x"), Rounding::Static { scale: 0.1, zero_point: 128 }, "uint8")
    );
    assert_eq!(w.rounding.output.as_ref().map(|o| o.rounding), Some(Rounding::Static { scale: 0.2, zero_point: 120 }));
    assert!(!w.rounding.shared_input && w.rounding.mismatches().is_empty());
    assert!(w.requantizes_from_integer_gemm());
    assert_eq!(w.activation.as_deref(), Some("x"), "the hint is the float tensor before the pair");
    let o = q.dequantize().expect("dequantize");
    let o = o.get("layers.0.mlp.up_proj.weight").expect("override");
    assert_eq!(o.rows(0, 2).expect("rows"), vec![0.5, 1.5, 0.5, 1.0]);
    let a = &o.activations;
    assert!(a.integer_output.is_some() && a.output.is_some() && a.input.is_some());
    assert!(q.summary().contains("1 inputs uint8 per tensor, static; 1 outputs uint8 per tensor, static"), "{}", q.summary());
    assert_eq!(q.activation_table()["x"].matmuls[0], "layers.0.mlp.up_proj.weight (input)");
}

/// Guards the mis-scaled activation: a DequantizeLinear reading another scale than its
/// QuantizeLinear is recorded (both scales, the node) and named by the summary; the reference is
/// given the grid the tensor is quantized with. And a pair the rest of the graph reads too
/// replaces the tensor for every reader (shared).
#[test]
fn a_pair_dequantized_with_another_scale_is_recorded() {
    let dir = package(qdq("x_scale_dq", vec![]), inits(0.125));
    let q = QuantizedBuild::read(dir.path()).expect("read").expect("quantized");
    let m = q.weights[0].rounding.mismatches();
    let [(which, mismatch, quantized)] = m.as_slice() else { panic!("one mismatch: {m:?}") };
    assert_eq!((*which, mismatch.node.as_str(), mismatch.scale, *quantized), ("input", "x_dq", 0.125, 0.1));
    assert!(q.summary().contains("dequantized with another scale than quantized"), "{}", q.summary());
    let o = q.dequantize().expect("dequantize");
    assert_eq!(o.get("layers.0.mlp.up_proj.weight").and_then(|o| o.activations.input_grid()).map(|g| g.scale), Some(0.1));

    let shared = package(qdq("x_scale", vec![node("Add", "residual", &["x_rounded", "out"], &["sum"])]), inits(0.1));
    let q = QuantizedBuild::read(shared.path()).expect("read").expect("quantized");
    assert!(q.weights[0].rounding.shared_input, "the Add reads the rounded tensor too");
}

/// Guards the dynamic dialect: DynamicQuantizeLinear → MatMulInteger → Cast → Mul(·, Mul(x_scale,
/// w_scale)) is a uint8 per-tensor dynamic input, the weight scale found through the Mul chain.
#[test]
fn a_dynamic_matmul_is_read_with_its_weight_scale() {
    let nodes = vec![
        node("DynamicQuantizeLinear", "x_dql", &["x"], &["xq", "xs", "xz"]),
        node("MatMulInteger", "model/layers.0/mlp/up_proj/MatMul_quant", &["xq", W, "xz", "w_zp0"], &["acc"]),
        with_int(node("Cast", "acc_cast", &["acc"], &["accf"]), "to", 1),
        node("Mul", "scales_mul", &["xs", "w_scale0"], &["s"]),
        node("Mul", "out_mul", &["accf", "s"], &["out"]),
    ];
    let dir = package(nodes, vec![bytes(W, &[2, 2], 3, &[1, 2, 3, 4]), f32s("w_scale0", &[], &[0.5]), bytes("w_zp0", &[], 3, &[0])]);
    let q = QuantizedBuild::read(dir.path()).expect("read").expect("quantized");
    let w = &q.weights[0];
    assert_eq!((w.op, w.per_tensor), (QuantOp::MatMulInteger, true));
    assert_eq!(
        w.rounding.input.as_ref().map(|a| (a.rounding, a.ty.name(), a.tensor.as_deref())),
        Some((Rounding::Dynamic, "uint8", Some("x")))
    );
    assert!(!w.requantizes_from_integer_gemm());
    let o = q.dequantize().expect("dequantize");
    assert_eq!(o.get("layers.0.mlp.up_proj.weight").expect("override").rows(0, 2).expect("rows"), vec![0.5, 1.5, 1.0, 2.0]);
}

/// Guards the refusals: what the harness cannot model is an error naming the node and why, never
/// a build judged as float — a pair around an Add, an operator on quantized values (QLinearAdd), a
/// per-axis activation scale, a constant dequantized into something other than a MatMul or a
/// gather, and a tensor read both rounded and in float.
#[test]
fn unmodelled_quantization_is_refused_naming_the_node() {
    let refused = |nodes: Vec<PayloadNode>, inits: Vec<PayloadTensor>| {
        QuantizedBuild::read(package(nodes, inits).path()).expect_err("refused").to_string()
    };
    let pair_around_add = vec![
        node("QuantizeLinear", "h_q", &["h", "x_scale", "x_zp"], &["hq"]),
        node("DequantizeLinear", "h_dq", &["hq", "x_scale", "x_zp"], &["hr"]),
        node("Add", "add", &["hr", "h"], &["sum"]),
    ];
    let e = refused(pair_around_add.clone(), inits(0.1));
    assert!(e.contains("`h_q`") && e.contains("only a MatMul's input and output are modelled") && e.contains("Add `add`"), "{e}");
    let qlinear_add = vec![node("QLinearAdd", "qadd", &["a", "s", "z", "b", "s", "z", "s", "z"], &["c"])];
    let e = refused(qlinear_add, vec![]);
    assert!(e.contains("`qadd`") && e.contains("an operator on quantized values"), "{e}");
    let mut per_axis = inits(0.1);
    per_axis[3] = f32s("x_scale", &[2], &[0.1, 0.2]);
    let e = refused(qdq("x_scale", vec![]), per_axis);
    assert!(e.contains("`x_q`") && e.contains("only per-tensor activation scales are modelled"), "{e}");
    let constant = vec![node("DequantizeLinear", "c_dq", &["c", "x_scale", "x_zp"], &["cf"]), node("Mul", "scale", &["h", "cf"], &["o"])];
    let e = refused(constant, vec![bytes("c", &[], 2, &[3]), f32s("x_scale", &[], &[0.1]), bytes("x_zp", &[], 2, &[0])]);
    assert!(e.contains("`c_dq`") && e.contains("dequantizes the constant `c`"), "{e}");
    let e = refused(qdq("x_scale", vec![node("Add", "both", &["x_rounded", "x"], &["z"])]), inits(0.1));
    assert!(e.contains("read rounded") && e.contains("and in float"), "{e}");
}
