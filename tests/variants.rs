//! Export variants (issue 18): each EP-contract check, the ORT type-check gate, the pin check,
//! the static cache's capacity and the run-time EP choice, each fed an export or a setting that
//! must fail, and the legitimate builds that must pass.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onnx_parity::case::{Candidate, ExportPin};
use onnx_parity::eps::Ep;
use onnx_parity::onnx::contract::ExportContract;
use onnx_parity::onnx::graph::GraphSummary;
use onnx_parity::onnx::package::OnnxPackage;
use onnx_parity::onnx::protocol::ExportProtocol;
use onnx_parity::tiers::l1::{self, ep, L1Inputs};
use onnx_parity::tiers::outcome::{Status, TierOutcome};

fn repo(rel: &str) -> PathBuf {
    support::root().join(rel)
}

fn config(fixture: &str) -> PathBuf {
    repo(&format!("fixtures/{fixture}/checkpoint/config.json"))
}

fn pin(ep: Option<Ep>, dtype: Option<&str>, static_cache: Option<bool>) -> ExportPin {
    ExportPin { ep, dtype: dtype.map(|d| d.parse().expect("dtype")), static_cache }
}

/// The interface check (no weights read) of `export` against `fixture`'s config, with `pin`.
fn interface(fixture: &str, export: &Path, dtype: &str, pin: Option<&ExportPin>) -> TierOutcome {
    l1::check_interface(L1Inputs { config: &config(fixture), export, float_dtype: dtype, pin })
}

fn assert_fails_with(out: &TierOutcome, needle: &str) {
    assert_eq!(out.status, Status::Fail, "{}", out.message);
    assert!(out.message.contains(needle), "`{needle}` not in: {}", out.message);
}

fn assert_passes(out: &TierOutcome) {
    assert_eq!(out.status, Status::Pass, "{}", out.message);
}

/// Kills: the WebGPU buffer limit never applied, or applied to the wrong size: the committed
/// WebGPU f16 build passes; the same graph with one weight declared 262144 × 1536 (E2B's
/// embed_tokens, 768 MiB in f16) fails naming the initialiser; without the pin (a CPU run) no EP
/// contract applies.
#[test]
fn webgpu_buffer_limit_names_the_oversized_initializer() {
    let good = repo("fixtures/unified-text-kvshare/variants/webgpu-f16");
    let webgpu = pin(Some(Ep::Webgpu), Some("float16"), Some(false));
    assert_passes(&interface("unified-text-kvshare", &good, "float16", Some(&webgpu)));
    let big = support::edited_export(&good, |_, m| {
        let g = m.graph.as_mut().expect("graph");
        let t = g.initializer.iter_mut().find(|t| t.name == "model.embed_tokens.weight").expect("embed_tokens");
        t.dims = vec![262_144, 1536];
    });
    let out = interface("unified-text-kvshare", big.path(), "float16", Some(&webgpu));
    assert_fails_with(&out, "webgpu: model: initializer `model.embed_tokens.weight` is 768.0 MiB, over the EP's 256 MiB buffer limit");
    let cpu = interface("unified-text-kvshare", big.path(), "float16", None);
    assert!(!cpu.message.contains("buffer limit"), "{}", cpu.message);
}

/// Kills: the graph-capture check not run, or run on the wrong ops: the f32 WebGPU build (whose
/// KV-shared layers keep Shape / ConstantOfShape, a mobius finding) fails naming them; the f16
/// build passes, and fails once a Shape node is added to it.
#[test]
fn graph_capture_builds_must_be_shape_free() {
    let webgpu = pin(Some(Ep::Webgpu), None, None);
    let f32_build = repo("fixtures/unified-text-kvshare/variants/webgpu");
    assert_fails_with(
        &interface("unified-text-kvshare", &f32_build, "float32", Some(&webgpu)),
        "webgpu: graph capture cannot execute Shape / ConstantOfShape, and the decoder has 4: model/layers.4/self_attn/Shape_node_181",
    );
    let f16_build = repo("fixtures/unified-text-kvshare/variants/webgpu-f16");
    let with_shape = support::edited_export(&f16_build, |_, m| {
        let g = m.graph.as_mut().expect("graph");
        let mut shape = g.node[0].clone();
        shape.op_type = "Shape".into();
        shape.domain = String::new();
        shape.name = "injected/Shape".into();
        shape.input = vec!["input_ids".into()];
        shape.output = vec!["injected_shape".into()];
        shape.attribute.clear();
        g.node.push(shape);
    });
    assert_fails_with(&interface("unified-text-kvshare", with_shape.path(), "float16", Some(&webgpu)), "the decoder has 1: injected/Shape");
}

/// Kills: index dtypes judged from a fixed int64, or not at all: a graph-capture build whose
/// `input_ids` is int32 (as mobius declares ids for WebGPU graph capture) must declare its mask
/// int32 too; a mixed build fails naming the mask.
#[test]
fn int32_indices_are_int32_throughout() {
    let f16_build = repo("fixtures/unified-text-kvshare/variants/webgpu-f16");
    let retyped = |names: &'static [&'static str]| {
        support::edited_export(&f16_build, move |_, m| {
            let g = m.graph.as_mut().expect("graph");
            for i in g.input.iter_mut().filter(|i| names.contains(&i.name.as_str())) {
                i.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()).expect("tensor").elem_type = 6;
            }
        })
    };
    let both = retyped(&["input_ids", "attention_mask"]);
    let out = interface("unified-text-kvshare", both.path(), "float16", None);
    assert!(!out.message.contains("has dtype int32"), "{}", out.message);
    assert!(out.message.contains("int32 ids"), "{}", out.message);
    let mixed = retyped(&["input_ids"]);
    assert_fails_with(
        &interface("unified-text-kvshare", mixed.path(), "float16", None),
        "model: input `attention_mask` has dtype int64, contract expects int32",
    );
}

/// The contract of `fixture` with its full-attention layers' head_dim set to `head_dim`.
fn contract_with_global_head_dim(fixture: &str, head_dim: i64) -> ExportContract {
    contract_with(fixture, "global_head_dim", head_dim)
}

/// The contract of `fixture` with one integer field of its config changed.
fn contract_with(fixture: &str, field: &str, value: i64) -> ExportContract {
    let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(config(fixture)).expect("config")).expect("json");
    cfg[field] = value.into();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), cfg.to_string()).expect("write");
    ExportContract::from_config_file(file.path()).expect("contract")
}

fn graphs(export: &Path) -> BTreeMap<String, GraphSummary> {
    OnnxPackage::open(export)
        .expect("package")
        .submodels
        .into_iter()
        .map(|(role, file)| (role, GraphSummary::load(&file).expect("graph")))
        .collect()
}

fn protocol_of(g: &BTreeMap<String, GraphSummary>) -> ExportProtocol {
    let decoder = g.get("decoder").or_else(|| g.get("model")).expect("decoder");
    ExportProtocol::read(decoder, g.get("embedding"))
}

/// Kills: the CUDA head_dim guard not applied or applied to every layer: the CUDA f16 build
/// passes with its own config (head_dim 16 / 32); with full layers of head_dim 512 (Gemma 4's)
/// its GroupQueryAttention on layers 2 and 5 breaks the 256 limit, each named.
#[test]
fn cuda_gqa_head_dim_over_256_is_a_violation() {
    let export = repo("fixtures/unified-text-kvshare/variants/cuda-f16");
    let g = graphs(&export);
    let p = protocol_of(&g);
    let own = contract_with_global_head_dim("unified-text-kvshare", 32).for_protocol(&p);
    assert!(ep::ep_violations(Ep::Cuda, &g, &own, &p, "1.31.1").violations.is_empty());
    let wide = contract_with_global_head_dim("unified-text-kvshare", 512).for_protocol(&p);
    let v = ep::ep_violations(Ep::Cuda, &g, &wide, &p, "1.31.1").violations;
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("runs a layer of head_dim 512, above the 256 ONNX Runtime's cuda GroupQueryAttention kernel supports"), "{v:?}");
    assert!(v.iter().any(|m| m.contains("layers.5")) && v.iter().any(|m| m.contains("layers.2")), "{v:?}");
}

/// Kills: the GroupQueryAttention head-size check never applied, or applied to standard
/// Attention: ORT's GQA kernels need head sizes that are multiples of 16 (measured: a GQA build of
/// a head_dim-8 fixture loads and fails at its first run); with the sliding layers' head_dim 8
/// the GQA build's four sliding layers are named, the portable build's Attention is not.
#[test]
fn gqa_head_size_must_be_a_multiple_of_16() {
    let gqa = graphs(&repo("fixtures/unified-text-kvshare/variants/gqa"));
    let narrow = contract_with("unified-text-kvshare", "head_dim", 8);
    let v = ep::gqa_kernel_violations(&gqa, &narrow);
    assert_eq!(v.len(), 4, "{v:?}");
    assert!(v[0].contains("runs a layer of head_dim 8; ONNX Runtime's GroupQueryAttention kernel needs a multiple of 16"), "{v:?}");
    let own = ExportContract::from_config_file(&config("unified-text-kvshare")).expect("contract");
    assert!(ep::gqa_kernel_violations(&gqa, &own).is_empty());
    let portable = graphs(&repo("fixtures/unified-text-kvshare/onnx"));
    assert!(ep::gqa_kernel_violations(&portable, &narrow).is_empty());
    // The same nodes without cos/sin caches (rotated before them, as ORT GenAI's builder does):
    // ORT checks the head size only when it rotates, so no violation.
    let mut unrotated = gqa.clone();
    for g in unrotated.values_mut() {
        for n in g.nodes.iter_mut().filter(|n| n.op == "com.microsoft::GroupQueryAttention") {
            n.inputs.truncate(7);
        }
    }
    assert!(ep::gqa_kernel_violations(&unrotated, &narrow).is_empty());
}

/// Kills: the opset ceiling applied for every ORT release, or for none: an opset-24 CUDA build
/// breaks it for ONNX Runtime 1.24 (mobius's MOBIUS_ORT_LOWER_OPSET_FOR_EP case) and is a note for
/// 1.31.1, the runtime this harness runs.
#[test]
fn cuda_opset_ceiling_depends_on_the_runtime() {
    let export = repo("fixtures/unified-text-kvshare/variants/cuda-f16");
    let g = graphs(&export);
    let p = protocol_of(&g);
    let c = ExportContract::from_config_file(&config("unified-text-kvshare")).expect("contract").for_protocol(&p);
    let old = ep::ep_violations(Ep::Cuda, &g, &c, &p, "1.24.4");
    assert_eq!(old.violations.len(), 1, "{old:?}");
    assert!(old.violations[0].contains("declares opset 24, and ONNX Runtime ≤ 1.24's cuda EP has kernels only up to opset 23"));
    let new = ep::ep_violations(Ep::Cuda, &g, &c, &p, "1.31.1");
    assert!(new.violations.is_empty() && new.notes.iter().any(|n| n.contains("not a violation with ONNX Runtime 1.31.1")), "{new:?}");
}

/// Kills: the bool-mask guard not applied: the portable build's Attention takes an additive
/// float mask (passes for CUDA); typed as bool, it is a violation naming the node and the mask.
#[test]
fn cuda_attention_needs_a_float_mask() {
    let export = repo("fixtures/unified-text-kvshare/onnx");
    let cuda = pin(Some(Ep::Cuda), Some("float32"), Some(false));
    assert_passes(&interface("unified-text-kvshare", &export, "float32", Some(&cuda)));
    let boolean = support::edited_export(&export, |_, m| {
        let g = m.graph.as_mut().expect("graph");
        let mask = g.node.iter().find(|n| n.op_type == "Attention").and_then(|n| n.input.get(3).cloned()).expect("a masked Attention");
        let info = g.value_info.iter_mut().find(|v| v.name == mask).expect("the mask is typed");
        info.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()).expect("tensor").elem_type = 9;
    });
    assert_fails_with(&interface("unified-text-kvshare", boolean.path(), "float32", Some(&cuda)), "takes a bool attn_mask");
}

/// Kills: a pin that is never compared: the GQA build pinned as mobius's portable one, as a
/// static-cache build or as f16 fails, each saying what differs; pinned as what it is, it passes.
#[test]
fn pins_are_compared_with_the_export() {
    let export = repo("fixtures/unified-text-kvshare/variants/gqa");
    let as_is = pin(Some(Ep::Cpu), Some("float32"), Some(false));
    assert_passes(&interface("unified-text-kvshare", &export, "float32", Some(&as_is)));
    let cases: [(ExportPin, &str, &str); 3] = [
        (pin(Some(Ep::Default), None, None), "float32", "the case pins ep default but this is not mobius's default build"),
        (pin(None, None, Some(true)), "float32", "the case pins static_cache: true but the export has a dynamic KV cache"),
        (pin(None, Some("float16"), None), "float16", "the case pins dtype float16 but the export's activations are float32"),
    ];
    for (p, dtype, needle) in cases {
        assert_fails_with(&interface("unified-text-kvshare", &export, dtype, Some(&p)), needle);
    }
}

/// Kills: the ORT load gate missing or misclassifying: a graph ORT's type check rejects (mobius's
/// portable bf16 build) is an L1 failure naming the node; a valid graph with no CPU kernel for
/// its dtype (the CUDA bf16 build) passes with the note; the GQA build loads.
#[test]
fn ort_load_gate_names_the_node() {
    let bf16 = l1::check_with(L1Inputs {
        config: &config("unified-text-kvshare"),
        export: &repo("fixtures/unified-text-kvshare/variants/bf16"),
        float_dtype: "bfloat16",
        pin: None,
    });
    assert_fails_with(&bf16, "ONNX Runtime rejects the graph at node `model/layers.0/Add_node_82` (Add of `val_2` untyped");
    assert_eq!(bf16.metrics.value("violations").as_ref().and_then(|v| v.as_u64()), Some(1), "{}", bf16.message);
    let cuda_bf16 = l1::check_with(L1Inputs {
        config: &config("unified-text-kvshare"),
        export: &repo("fixtures/unified-text-kvshare/variants/cuda-bf16"),
        float_dtype: "bfloat16",
        pin: None,
    });
    assert_passes(&cuda_bf16);
    assert!(cuda_bf16.message.contains("model: not runnable on the CPU EP: no bfloat16 kernel for"), "{}", cuda_bf16.message);
    assert!(!cuda_bf16.message.contains("loaded by ONNX Runtime"), "{}", cuda_bf16.message);
    let gqa = l1::check(&config("unified-text-kvshare"), &repo("fixtures/unified-text-kvshare/variants/gqa"), "float32");
    assert_passes(&gqa);
    assert!(gqa.message.contains("loaded by ONNX Runtime on CPUExecutionProvider"), "{}", gqa.message);
}

/// Kills: a build no EP of the pinned ONNX Runtime runs (MoE with `activation_type` geglu, what
/// ORT GenAI's builder writes for Gemma 4's experts) passed at L1, or L3–L5 skipped with advice to
/// run it on another EP: L1 fails naming each EP's kernel refusal (file:line) and the node, its
/// CPU load note still names ORT's message; L3–L5 are skipped on every EP saying no EP runs it;
/// the mobius build it was made from (swiglu) is not skipped.
#[test]
fn a_build_no_ep_runs_is_an_l1_finding() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::eps::RunEp;
    use onnx_parity::tiers::{static_skip, RunOptions};
    let geglu = repo("fixtures/gemma4-text-moe/variants/geglu");
    let l1 = l1::check_with(L1Inputs { config: &config("gemma4-text-moe"), export: &geglu, float_dtype: "float32", pin: None });
    assert_eq!(l1.status, onnx_parity::tiers::outcome::Status::Fail, "{}", l1.message);
    assert!(
        l1.message.contains("runs on no execution provider of ONNX Runtime 1.31.1")
            && l1.message.contains("onnxruntime/contrib_ops/cpu/moe/moe_base_cpu.h:56")
            && l1.message.contains("onnxruntime/contrib_ops/cuda/moe/moe_base.h:61")
            && l1.message.contains("node `model/layers.0/MoE_node_"),
        "{}",
        l1.message
    );
    assert!(
        l1.message.contains("model: not runnable on the CPU EP: the CPU kernel refuses the node's configuration")
            && l1.message.contains("Unsupported MoE activation type: geglu"),
        "ORT's own message, as loaded here: {}",
        l1.message
    );
    let case = Case::load(&repo("cases/causal-lm/gemma4-text-moe.yaml")).expect("case");
    let opts = RunOptions::with_goldens(repo("goldens"));
    let variant = case.for_variant("geglu").expect("geglu variant");
    for ep in [RunEp::Cpu, RunEp::Cuda(0)] {
        for level in [Level::L3, Level::L4, Level::L5] {
            let reason = static_skip(&variant, &Candidate::variant("geglu").on(ep), level, &opts)
                .unwrap_or_else(|| panic!("{level} of the geglu build is not skipped on {ep}"));
            assert!(
                reason.starts_with("no execution provider of ONNX Runtime 1.31.1 runs this build")
                    && reason.contains("moe_base.h:61")
                    && !reason.contains("ONNX_PARITY_EP="),
                "{reason}"
            );
        }
    }
    for level in [Level::L3, Level::L4, Level::L5] {
        assert_eq!(static_skip(&case, &Candidate::default(), level, &opts), None, "{level} of the swiglu build");
    }
}

/// Kills: the static-cache capacity taken from somewhere else than the graph, or checked after
/// running: the hybrid static build (capacity 64) refuses a prompt of 60 tokens with 10 new ones
/// before running, naming the numbers; 60 + 5 fits.
#[test]
fn static_cache_capacity_is_checked_before_running() {
    use onnx_parity::inputs::ModelInputs;
    use onnx_parity::runtime::pipeline::{DecoderGraph, OnnxPipeline};
    use onnx_parity::runtime::session::SessionOptions;
    let mut p =
        OnnxPipeline::open_with(&repo("fixtures/gemma4-text-moe/variants/static"), &SessionOptions::default(), DecoderGraph::Original)
            .expect("opens");
    let inputs = ModelInputs::from_ids((0..60).map(|i| 2 + i % 100).collect());
    let e = p.greedy(&inputs, 10, &[], None, false).map(drop).expect_err("over capacity").to_string();
    assert!(e.contains("the static KV cache holds 64 positions, and the prompt (60 tokens) with 10 new tokens needs 69"), "{e}");
    let (_, gen) = p.greedy(&inputs, 5, &[], None, false).expect("fits");
    assert_eq!(gen.tokens.len(), 5);
}

/// Kills: L2's WebGPU arithmetic missing or wrong: E2B's fused per-layer table, 262144 × 35·256
/// in bf16, is 4.7 GB and must be split; its embed_tokens (768 MiB) is over the limit too; an
/// E2B case pinned to the CPU EP has no buffer plan.
#[test]
fn l2_webgpu_buffer_arithmetic_at_full_size() {
    use onnx_parity::tiers::l2;
    let config = repo("cases/configs/gemma-4-E2B-it.json");
    let webgpu = pin(Some(Ep::Webgpu), Some("bfloat16"), None);
    let out = l2::check(l2::L2Inputs {
        config: &config,
        checkpoint: None,
        export: None,
        published_parameters: None,
        float_dtype: "float32",
        pin: Some(&webgpu),
    });
    assert!(
        out.message.contains("webgpu (256 MiB buffers) at bfloat16: `model.language_model.embed_tokens_per_layer.weight` [262144, 8960] is 4.38 GiB (4,697,620,480 bytes at bfloat16): must be split"),
        "{}",
        out.message
    );
    assert!(out.message.contains("`model.language_model.embed_tokens.weight` [262144, 1536] is 0.75 GiB"), "{}", out.message);
    assert_eq!(out.metrics.value("ep_oversize_tensors").as_ref().and_then(|v| v.as_u64()), Some(2), "{}", out.message);
    let cpu = pin(Some(Ep::Cpu), None, None);
    let out = l2::check(l2::L2Inputs {
        config: &config,
        checkpoint: None,
        export: None,
        published_parameters: None,
        float_dtype: "float32",
        pin: Some(&cpu),
    });
    assert!(out.metrics.value("ep_oversize_tensors").is_none(), "{}", out.message);
}

/// Runs `levels` of a case on the unified-text-kvshare fixture (`extra` appended to it) with
/// `ONNX_PARITY_EP=ep` in a fresh process (the EP is read once per process) and returns each
/// level's (status, message).
fn run_on_ep(ep: &str, onnx: &str, extra: &str, levels: &str) -> Vec<(String, String, String)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let fixture = repo("fixtures/unified-text-kvshare");
    let case = dir.path().join("unified-text.yaml");
    std::fs::write(
        &case,
        format!(
            "model_id: \"onnx-parity/tiny-gemma4-unified-text-kvshare\"\nmodel_type: \"gemma4_unified_text\"\ndtype: \"float32\"\n\
             checkpoint: {}\nonnx: {}\ninputs:\n  tensors: {}\nlevels: [L1, L3]\n{extra}",
            fixture.join("checkpoint").display(),
            fixture.join(onnx).display(),
            fixture.join("inputs.safetensors").display()
        ),
    )
    .expect("case");
    let report = dir.path().join("report.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .args(["run", "--levels", levels, "--report"])
        .arg(&report)
        .arg(&case)
        .current_dir(support::root())
        .env("ONNX_PARITY_LOG", "error")
        .env("ONNX_PARITY_EP", ep)
        .output()
        .expect("runs the onnx-parity binary");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap_or_else(|e| panic!("no report ({e}): {out}"))).expect("json");
    r["cases"][0]["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("level"), s("status"), s("message"))
        })
        .collect()
}

/// Kills: a silent CPU run when the asked-for EP has no device (ORT's own behaviour): with
/// ONNX_PARITY_EP=webgpu on this machine (no GPU) L3 fails saying which device was not found
/// and what ORT lists; L1, which loads on the trial's EP, checks the WebGPU contract implied by
/// the trial's EP and fails on the missing device too.
#[test]
fn webgpu_without_a_device_says_which_device_is_missing() {
    let levels = run_on_ep("webgpu", "variants/webgpu-f16", "", "L1,L3");
    let (_, status, message) = &levels[1];
    assert_eq!(status, "fail", "{message}");
    assert!(
        message.contains("ONNX_PARITY_EP=webgpu: no WebGPU adapter (Vulkan on Linux) found: ONNX Runtime lists no WebGpuExecutionProvider device on this machine (it lists: CPUExecutionProvider"),
        "{message}"
    );
    assert!(levels[0].2.contains("checked against the webgpu EP contract (the EP of this trial)"), "{}", levels[0].2);
    assert!(
        levels[0].2.contains("does not load it on WebGpuExecutionProvider") && levels[0].2.contains("no WebGPU adapter"),
        "{}",
        levels[0].2
    );
}

/// Kills: nodes that land on the CPU EP going unreported: OpenVINO's plugin EP (which runs on this
/// machine's CPU as an OpenVINO device) claims no RMSNormalization / RotaryEmbedding / opset-24
/// Attention; L1 fails listing them as the build's finding on that EP (with the kernel that is
/// missing), and L3 judges what ORT computes for a user of the build there, labelled partitioned,
/// instead of reporting CPU numbers as OpenVINO's.
///
/// OpenVINO offers its CPU device on Intel CPUs only: on another vendor's (machines here have
/// reported AuthenticAMD) ORT lists no OpenVINO device, and the same trials must fail saying so.
#[test]
fn nodes_falling_back_to_the_cpu_are_a_finding_listing_them() {
    let levels = run_on_ep("openvino", "onnx", "", "L1,L3");
    let (_, l1_status, l1) = &levels[0];
    let (_, l3_status, l3) = &levels[1];
    assert_eq!(l1_status, "fail", "{l1}");
    let intel =
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.lines().any(|l| l.starts_with("vendor_id") && l.contains("GenuineIntel")));
    if intel {
        assert!(
            l1.contains("partitioned on OpenVINOExecutionProvider")
                && l1.contains("RMSNormalization `model/layers.0/input_layernorm/RMSNormalization_node_37` (float32 RMSNormalization has no OpenVINOExecutionProvider kernel"),
            "{l1}"
        );
        assert!(l3.contains("partitioned: ") && l3.contains("compute nodes on the CPU instead of OpenVINOExecutionProvider"), "{l3}");
    } else {
        for (status, message) in [(l1_status, l1), (l3_status, l3)] {
            assert_eq!(status, "fail", "{message}");
            assert!(
                message.contains("ONNX_PARITY_EP=openvino: no OpenVINO device (Intel CPU, GPU or NPU) found: ONNX Runtime lists no OpenVINOExecutionProvider device on this machine"),
                "{message}"
            );
        }
    }
}

/// Kills: an unknown EP name taken for the CPU: the run refuses to start (exit 2), naming the
/// variable and the accepted values, and writes no report.
#[test]
fn unknown_ep_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .args(["run", "--levels", "L3", "--report"])
        .arg(&report)
        .arg("cases/causal-lm/unified-text-kvshare.yaml")
        .current_dir(support::root())
        .env("ONNX_PARITY_EP", "cpu,rocm")
        .output()
        .expect("runs the onnx-parity binary");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ONNX_PARITY_EP=cpu,rocm: expected a comma-separated list of cpu, cuda, cuda:N, webgpu, openvino, tensorrt-rtx"),
        "{err}"
    );
    assert!(!report.exists());
}

/// Kills: a reference run per variant: the unified-text-kvshare case and its builds run the
/// reference once, ORT GenAI once on the package that has a genai_config.json, and ONNX Runtime
/// once per build that can run here (the portable bf16 build fails at load, the CUDA bf16 build is
/// skipped on the CPU EP; the bf16-boundary build runs, judged against the bf16 floor), each build
/// its own export.
#[test]
fn one_reference_run_for_all_variants() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        // What one process computes: nothing read from the reference cache.
        .args(["run", "--no-cache", "--levels", "L3,L4,L5", "cases/causal-lm/unified-text-kvshare.yaml"])
        .current_dir(support::root())
        .env("ONNX_PARITY_LOG", "onnx_parity::evaluation=info")
        .env("NO_COLOR", "1")
        .output()
        .expect("runs the onnx-parity binary");
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    let runs: Vec<&str> = log.lines().filter(|l| l.contains(" ran in ")).collect();
    let reference = runs.iter().filter(|l| l.contains("candle reference") && !l.contains("(calibration)")).count();
    assert_eq!(reference, 1, "{log}");
    // The calibrated rule's runs: one f64 arbiter for the case, one floor per precision a build
    // that ran computes in (the f32 builds share the f32 one, the two f16 builds the f16 one, the
    // bf16-boundary build the bf16 one); the portable bf16 build fails at load and the CUDA one is
    // skipped, so they run none.
    let calibration: Vec<&str> = runs.iter().filter(|l| l.contains("(calibration)")).copied().collect();
    for (dtype, n) in [("F64", 1), ("F32", 1), ("F16", 1), ("BF16", 1)] {
        let got = calibration.iter().filter(|l| l.contains(&format!("candle reference {dtype} "))).count();
        assert_eq!(got, n, "{dtype}: {log}");
    }
    assert_eq!(calibration.len(), 4, "{log}");
    // ORT GenAI runs the mobius ort-genai package too (the variant lists it).
    let genai: Vec<&str> = runs.iter().filter(|l| l.contains("ONNX Runtime GenAI")).copied().collect();
    assert_eq!(genai.len(), 1, "{log}");
    assert!(genai[0].contains("fixtures/unified-text-kvshare/ort-genai"), "{log}");
    let exports: std::collections::BTreeSet<&str> = runs
        .iter()
        .filter(|l| l.contains("ONNX Runtime") && !l.contains("ONNX Runtime GenAI"))
        .filter_map(|l| l.split("fixtures/unified-text-kvshare/").nth(1)?.split(',').next())
        .collect();
    let expected = [
        "dynamo",
        "onnx",
        "ort-genai",
        "variants/bf16-boundary",
        "variants/cuda-f16",
        "variants/gqa",
        "variants/static",
        "variants/webgpu",
        "variants/webgpu-f16",
    ];
    assert_eq!(exports.into_iter().collect::<Vec<_>>(), expected, "{log}");
    assert_eq!(runs.len(), 1 + calibration.len() + expected.len() + genai.len(), "one run per build and runtime: {log}");
}

/// The CUDA bf16 build of unified-text-kvshare copied to a temporary folder (weights included,
/// so ORT loads it) with the first bfloat16 node output the graph declares (`value_info`)
/// re-declared float: a graph ORT's type check rejects on every EP. Returns the folder and the
/// value's name.
fn cuda_bf16_with_a_float_value() -> (tempfile::TempDir, String) {
    use onnx_parity::onnx::proto::ValueInfoProto;
    use onnx_parity::onnx::wire;
    use prost::Message;
    const VALUE_INFO: u64 = 13;
    let src = repo("fixtures/unified-text-kvshare/variants/cuda-bf16");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(src.join("model.onnx.data"), dir.path().join("model.onnx.data")).expect("copy the weights");
    let model = std::fs::read(src.join("model.onnx")).expect("read");
    let outputs: std::collections::HashSet<String> =
        GraphSummary::load(&src.join("model.onnx")).expect("graph").nodes.into_iter().flat_map(|n| n.outputs).collect();
    let (_, payload) = wire::graph_field(&model).expect("graph");
    let g = &model[payload];
    let (mut graph, mut edited) = (Vec::with_capacity(g.len()), None);
    for f in wire::fields(g).expect("graph fields") {
        if edited.is_none() && f.number == VALUE_INFO {
            let mut v = ValueInfoProto::decode(&g[f.payload.clone()]).expect("value_info");
            let output = outputs.contains(&v.name);
            if let Some(t) = v.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()).filter(|t| output && t.elem_type == 16) {
                t.elem_type = 1;
                wire::put_len_field(&mut graph, VALUE_INFO, &v.encode_to_vec());
                edited = Some(v.name);
                continue;
            }
        }
        graph.extend_from_slice(&g[f.all]);
    }
    let name = edited.expect("the graph declares a bfloat16 node output");
    std::fs::write(dir.path().join("model.onnx"), wire::with_graph(&model, &graph).expect("model")).expect("write");
    (dir, name)
}

/// Kills: a graph ORT rejects reported as a skip (a failure that happens on every EP hidden as
/// "run it where its EP is"), and a valid graph without kernels here run into a failure. On the
/// CPU EP: the portable bf16 build (its residual Add mixes bfloat16 and float) is not skipped at
/// L3–L5 and its L3 (its xfail set aside) fails carrying ORT's load error; the CUDA bf16 build
/// (valid, no bfloat16 Mul kernel on the CPU EP) is skipped at L3–L5 naming the node and the
/// CUDA EP; the same CUDA build with one value re-declared float (deliberately broken) is no
/// longer skipped, and its L3 fails with ORT's type error.
#[test]
fn rejected_graph_fails_and_a_kernel_less_graph_is_skipped() {
    use onnx_parity::case::{Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    use onnx_parity::tiers::{run_level, static_skip, RunOptions};
    let case = Case::load(&repo("cases/causal-lm/unified-text-kvshare.yaml")).expect("case");
    let opts = RunOptions::with_goldens(repo("goldens"));
    let computed = [Level::L3, Level::L4, Level::L5];
    let l3 = |c: &Case, v: &str| run_level(c, &Candidate::variant(v), Level::L3, &opts, &CaseEvaluations::for_build(c, Some(v)));

    let mut portable = case.for_variant("bf16").expect("bf16 variant");
    portable.xfail = None;
    for level in computed {
        assert_eq!(static_skip(&portable, &Candidate::variant("bf16"), level, &opts), None, "{level}");
    }
    assert_fails_with(
        &l3(&portable, "bf16"),
        "model.onnx: Type Error: Type parameter (T) of Optype (Add) bound to different types (tensor(bfloat16) and tensor(float)",
    );

    let mut cuda = case.for_variant("cuda-bf16").expect("cuda-bf16 variant");
    for level in computed {
        let reason = static_skip(&cuda, &Candidate::variant("cuda-bf16"), level, &opts)
            .unwrap_or_else(|| panic!("{level} of the CUDA bf16 build is not skipped"));
        assert!(
            reason.starts_with("not runnable on CPUExecutionProvider: ONNX Runtime 1.31.1 accepts the graph but has no kernel for it on this EP (model: no bfloat16 kernel for Mul (node `model/embed_tokens/Mul_node_1`)); it is judged on its EP when that is selected: ONNX_PARITY_EP=cpu,cuda:0 (CUDAExecutionProvider)"),
            "{reason}"
        );
    }

    let (broken, value) = cuda_bf16_with_a_float_value();
    cuda.onnx = Some(broken.path().to_path_buf());
    for level in computed {
        assert_eq!(static_skip(&cuda, &Candidate::variant("cuda-bf16"), level, &opts), None, "{level}");
    }
    assert_fails_with(&l3(&cuda, "cuda-bf16"), &format!("Type Error: Type (tensor(float)) of output arg ({value}) of node"));
}

/// Kills a bf16 build fed or read as another type (issue 37): the bf16-boundary build (the f32
/// export with bfloat16 KV caches and logits at its boundary) runs in the pipeline with its KV
/// caches fed and returned in bf16 and its logits read back to f32: within bf16's rounding of the
/// f32 export's logits (2⁻⁸ relative of the largest), the same greedy tokens, and the pipeline says
/// it drives bfloat16.
#[test]
fn a_bf16_build_is_fed_and_read_in_bf16() {
    use onnx_parity::backend::{Backend, GenerationRequest};
    use onnx_parity::runtime::pipeline::{DecoderGraph, OnnxPipeline};
    use onnx_parity::runtime::session::SessionOptions;
    let inputs = onnx_parity::inputs::load_safetensors(&repo("fixtures/unified-text-kvshare/inputs.safetensors")).expect("inputs");
    let request = GenerationRequest { max_new_tokens: 4, eos: &[], forced: None, all_position_logits: true, layer_outputs: false };
    let run = |dir: &str| {
        let mut p = OnnxPipeline::open_with(&repo(dir), &SessionOptions::default(), DecoderGraph::Original).expect("pipeline");
        let description = p.describe();
        (p.run(&inputs, &request).expect("runs"), description)
    };
    let (f32_run, _) = run("fixtures/unified-text-kvshare/onnx");
    let (bf16_run, description) = run("fixtures/unified-text-kvshare/variants/bf16-boundary");
    assert!(description.contains("bfloat16"), "{description}");
    let (a, b) = (&f32_run.prefill.logits.data, &bf16_run.prefill.logits.data);
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst > 0.0, "the logits were not rounded to bf16: the build's boundary was not exercised");
    assert!(worst <= scale / 256.0, "bf16 logits {worst} off the f32 export's (largest |logit| {scale})");
    assert_eq!(f32_run.generation.tokens, bf16_run.generation.tokens);
}
