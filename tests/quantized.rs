//! Quantized builds (issue 27): what is read from their graphs, and the gates that must fail —
//! a float build under a quantized dtype, a quantized weight whose shape is not the config's.
//! (The mutants and the correct builds are cases of the parity target: `gemma4-text-dense@int4*`.)

mod support;

use std::path::PathBuf;

use onnx_parity::case::ExportPin;
use onnx_parity::onnx::quantized::{QuantOp, QuantizedBuild};
use onnx_parity::tiers::l1::{self, L1Inputs};
use onnx_parity::tiers::outcome::Status;

fn repo(rel: &str) -> PathBuf {
    support::root().join(rel)
}

/// Guards the reading: ops, bits, blocks, zero points and accuracy level as the quantizer wrote
/// them, each weight named by the reference parameter it stands for, and the dequantized values
/// finite and of the checkpoint's shape.
#[test]
fn quantization_is_read_from_the_graph() {
    let q = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int4-acc4")).expect("read").expect("quantized");
    let matmuls: Vec<_> = q.weights.iter().filter(|w| w.op == QuantOp::MatMulNBits).collect();
    assert_eq!(matmuls.len(), 43);
    assert!(matmuls.iter().all(|w| w.bits == 4 && w.block_size == 32 && w.accuracy_level == 4 && !w.zero_points));
    let gather: Vec<_> = q.weights.iter().filter(|w| w.op == QuantOp::GatherBlockQuantized).collect();
    assert_eq!(gather.len(), 1);
    assert_eq!(gather[0].key, "embed_tokens.weight");
    assert!(q.weights.iter().any(|w| w.key == "lm_head.weight"));
    assert!(q.weights.iter().any(|w| w.key == "layers.2.self_attn.o_proj.weight"));
    assert!(q.summary().contains("43 MatMulNBits (int4, block 32, symmetric, accuracy_level 4"), "{}", q.summary());
    let w = q.dequantize().expect("dequantize");
    let o = w.get("layers.1.mlp.down_proj.weight").expect("down_proj");
    assert_eq!(o.shape.len(), 2);
    assert_eq!(o.activations, onnx_parity_reference::weights::MatmulActivations::blocks(32));
    assert!(o.rows(0, o.shape[0]).expect("rows").iter().all(|v| v.is_finite()));
    let asym = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int4-asym")).expect("read").expect("quantized");
    assert!(asym.weights.iter().all(|w| w.zero_points), "{}", asym.summary());
    let int8 = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int8")).expect("read").expect("quantized");
    assert_eq!(int8.bits(), 8);
    // A float build has none.
    assert!(QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/onnx")).expect("read").is_none());
}

/// Guards L1: a float build pinned `dtype: int4` fails (mobius once wrote a float model under
/// `--keep-quantized`); the quantized builds pass and name their quantization.
#[test]
fn a_float_build_under_a_quantized_dtype_fails_l1() {
    let config = repo("fixtures/gemma4-text-dense/checkpoint/config.json");
    let pin = ExportPin { ep: None, dtype: Some("int4".parse().expect("dtype")), static_cache: None };
    let float = repo("fixtures/gemma4-text-dense/onnx");
    let out = l1::check_interface(L1Inputs { config: &config, export: &float, float_dtype: "float32", pin: Some(&pin) });
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(out.message.contains("no graph has a quantized weight"), "{}", out.message);
    let int4 = repo("fixtures/gemma4-text-dense/variants/int4");
    let out = l1::check_interface(L1Inputs { config: &config, export: &int4, float_dtype: "float32", pin: Some(&pin) });
    assert_eq!(out.status, Status::Pass, "{}", out.message);
    assert!(out.message.contains("quantized: 1 GatherBlockQuantized"), "{}", out.message);
    // The same build against another model's config: its weights' shapes are not that config's.
    let other = repo("fixtures/gemma4-text-ple/checkpoint/config.json");
    let out = l1::check_interface(L1Inputs { config: &other, export: &int4, float_dtype: "float32", pin: Some(&pin) });
    assert_eq!(out.status, Status::Fail, "{}", out.message);
}

/// Guards the streamed quantization cost (the float reference's logits made one vocabulary slice
/// at a time, never whole): the same per-position KL and top-1 agreement as its held logits, for
/// the int4 build's reference as the candidate; and a candidate equal to the float reference
/// costs nothing.
#[test]
fn streamed_float_logits_give_the_same_cost() {
    use onnx_parity::backend::reference::ReferenceBackend;
    use onnx_parity::backend::{Backend, GenerationRequest};
    use onnx_parity::case::Case;
    use onnx_parity::tiers::l3::quantization::cost;
    let case = Case::load(&repo("cases/causal-lm/gemma4-text-dense.yaml")).expect("case");
    let inputs = onnx_parity::inputs::for_case(&case).expect("inputs");
    let dir = repo("fixtures/gemma4-text-dense/checkpoint");
    let request = GenerationRequest { max_new_tokens: 3, eos: &[], forced: None, all_position_logits: true, layer_outputs: false };
    let float = ReferenceBackend::load(&dir, None).expect("load").run(&inputs, &request).expect("run");
    let mut streaming = ReferenceBackend::load(&dir, None).expect("load");
    streaming.stream_logits();
    let streamed = streaming.run(&inputs, &request).expect("run");
    assert!(streamed.prefill.streamed.is_some() && float.prefill.streamed.is_none());
    let build = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int4")).expect("read").expect("quantized");
    let weights = build.dequantize().expect("dequantize");
    let int4 = ReferenceBackend::load_with_overrides(&dir, None, candle_core::DType::F32, Some(&weights))
        .expect("load")
        .run(&inputs, &request)
        .expect("run");
    let (mut held, mut made) = (Default::default(), Default::default());
    cost(&float, &int4, &mut held).expect("cost");
    cost(&streamed, &int4, &mut made).expect("cost");
    let kl = |m: &onnx_parity::tier_metrics::Metrics| -> Vec<f64> { m.quantized.quantization_kl.clone().expect("per position") };
    let (a, b) = (kl(&held), kl(&made));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-9 * x.abs().max(1e-6)), "{a:?} vs {b:?}");
    assert!(a.iter().any(|&k| k > 1e-3), "the int4 build costs something: {a:?}");
    assert_eq!(held.quantized.quantization_top1_agreement, made.quantized.quantization_top1_agreement);
    let mut none = Default::default();
    cost(&streamed, &float, &mut none).expect("cost");
    assert!(kl(&none).iter().all(|&k| k < 1e-9) && none.quantized.quantization_top1_agreement == Some(1.0), "{none:?}");
}

/// Guards issue 37's per-EP model of MatMulNBits: at accuracy_level 4 the CPU EP's MLAS quantizes
/// each block of activations to int8 and the reference on the build's weights does too; CUDA's
/// kernel never reads the level (dequantize, then a float GEMM), so a CUDA trial's reference
/// keeps its activations float. The tied table (GatherBlockQuantized) quantizes nothing either way.
#[test]
fn activation_quantization_follows_the_ep_s_kernel() {
    use onnx_parity::eps::RunEp;
    use onnx_parity::runtime::kernels::MatMulNBitsModel;
    let mut q = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int4-acc4")).expect("read").expect("quantized");
    assert!(q.at_level_4());
    let blocks = |q: &QuantizedBuild| {
        let o = q.dequantize().expect("dequantize");
        let with: Vec<&str> =
            q.weights.iter().filter(|w| o.get(&w.key).is_some_and(|o| o.activations.any())).map(|w| w.key.as_str()).collect();
        with.len()
    };
    for (ep, expected) in [(RunEp::Cpu, 43), (RunEp::Cuda(0), 0)] {
        q.int8_activations_at = MatMulNBitsModel::of(ep).quantizes_activations(4).then_some(4);
        assert_eq!(blocks(&q), expected, "{ep}");
        assert_eq!(q.quantizes_activations(), expected > 0, "{ep}");
    }
    // A build at accuracy_level 0 quantizes no activation on any EP.
    let q0 = QuantizedBuild::read(&repo("fixtures/gemma4-text-dense/variants/int4")).expect("read").expect("quantized");
    assert!(!q0.at_level_4() && !q0.quantizes_activations());
}

/// Guards issue 38's names: ONNX Runtime's RTN path (`…weight_t_Q4G32`, `…weight_t_scale`) and QDQ
/// path (`…weight_t_DQ_Q4` into a MatMul) are read as the parameters they replaced; which one comes
/// from the name and, where it names none, from the node's module path, the two cross-checked (a
/// name and a path naming two parameters is an error naming both); L1 holds every RTN weight's shape
/// to the config's.
#[test]
fn every_quantizer_dialect_names_its_parameters() {
    let config = repo("fixtures/gemma4-text-ple/checkpoint/config.json");
    let model =
        onnx_parity_reference::Gemma4::dry(onnx_parity_reference::ModelConfig::from_file(&config).expect("config")).expect("manifest");
    let manifest = model.weight_manifest();
    let resolves = |k: &str| onnx_parity_reference::weights::name_for(k, manifest.keys().map(String::as_str)).map(str::to_string);
    for (build, op, n) in [("rtn", QuantOp::MatMulNBits, 84), ("qdq", QuantOp::DequantizeLinear, 84)] {
        let mut q = QuantizedBuild::read(&repo(&format!("fixtures/gemma4-text-ple/variants/{build}"))).expect("read").expect("quantized");
        assert_eq!(q.weights.iter().filter(|w| w.op == op).count(), n, "{build}");
        q.resolve_keys(resolves).expect("names and paths agree");
        for w in &q.weights {
            assert!(resolves(&w.key).is_some(), "{build}: `{}` ({}) stands for `{}`, not a parameter", w.initializer, w.node, w.key);
            assert_eq!(w.node_key.as_deref(), Some(w.key.as_str()), "{build}: the node's path names its parameter too");
        }
        // ORT fuses a blocked int4 DequantizeLinear into MatMulNBits at level 4: modelled as such.
        assert_eq!(q.at_level_4(), build == "qdq", "{build}");
        // A name that names nothing: the node's path says what it replaced.
        let mut renamed = q.clone();
        renamed.weights[3].key = "unknown.weight".into();
        renamed.resolve_keys(resolves).expect("resolves by path");
        assert_eq!(renamed.weights[3].key, q.weights[3].key);
        // A name and a path naming two parameters: an error naming both.
        let mut crossed = q.clone();
        crossed.weights[3].node_key = Some(q.weights[4].key.clone());
        let e = crossed.resolve_keys(resolves).expect_err("ambiguous").to_string();
        assert!(e.contains(&q.weights[3].key) && e.contains(&q.weights[4].key) && e.contains("ambiguous"), "{e}");
        let pin = ExportPin { dtype: Some("int4".parse().expect("dtype")), ..Default::default() };
        let out = l1::check_interface(L1Inputs { config: &config, export: &q.root, float_dtype: "float32", pin: Some(&pin) });
        assert_eq!(out.status, Status::Pass, "{build}: {}", out.message);
    }
}

/// Guards issue 38's near-tie rule on a real build (ONNX Runtime's RTN at accuracy_level 4, whose
/// MLAS kernel rounds each activation to int8): judged with the plain local floors, one activation
/// of layer 5 that lies within f32 rounding of a half step rounds to the other step in ORT, and the
/// layer fails by ~1e4x; with the floors taking the candidate's step at such near-ties (and saying
/// how many) it passes; and a layer the candidate computes wrong (one value of layer 5's local
/// output off by 1e-4, far below the flip's effect) still fails under the hinted floors.
#[test]
fn int8_near_ties_take_the_candidate_s_step_and_nothing_else() {
    let t = support::near_ties("rtn-acc4", 5, 1e-4);
    assert_eq!(t.l3.status, Status::Pass, "{}", t.l3.message);
    let adopted = t.l3.metrics.value("int8_steps_adopted").as_ref().and_then(|v| v.as_u64()).expect("adoptions reported");
    assert!((1..=16).contains(&adopted), "{adopted} near-ties adopted");
    assert_eq!(t.hinted.status, Status::Pass);
    // The plain floors: the flip fails layer 5.
    assert_eq!(t.plain.status, Status::Fail, "{}", t.plain.message);
    assert_eq!(t.plain.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(5), "{}", t.plain.message);
    // A wrong value in layer 5 (1e-4, ~400x the floor's error there): no hint hides it.
    assert_eq!(t.broken.status, Status::Fail, "{}", t.broken.message);
    assert_eq!(t.broken.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(5), "{}", t.broken.message);
}
