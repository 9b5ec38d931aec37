//! L1 graph tier: does the ONNX package honour the contract its config implies, for the
//! protocol its graphs declare (portable, GroupQueryAttention, static cache, …)? Then: does
//! ONNX Runtime accept each sub-model ([`load`]), and, where the case says which EP the export is
//! for, does it honour that EP's contract ([`ep`])?

pub mod ep;
pub mod load;
pub mod masks;
pub mod runtime_config;

use std::collections::BTreeMap;
use std::path::Path;

use super::outcome::{Status, TierOutcome};
use crate::case::ExportPin;
use crate::eps::RunEp;
use crate::onnx::contract::{ElemType, ExpectedDim, ExportContract};
use crate::onnx::genai_config::GenAiConfig;
use crate::onnx::graph::{Dim, GraphSummary, TensorSpec};
use crate::onnx::package::{Layout, OnnxPackage, DECODER, EMBEDDING, TEXT_MODEL};
use crate::onnx::protocol::{self, ExportProtocol, Feed};
use crate::onnx::quantized::QuantizedBuild;
use crate::runtime::provision::ORT_VERSION;
use crate::tier_metrics::L1Metrics;
use onnx_parity_reference::weights::name_for;

/// What L1 is asked to judge.
#[derive(Debug, Clone, Copy)]
pub struct L1Inputs<'a> {
    /// The checkpoint's `config.json` (or a full-size config at L2).
    pub config: &'a Path,
    pub export: &'a Path,
    /// The ONNX element type the export's activations must have (`float32` for an f32 export).
    pub float_dtype: &'a str,
    /// What the case says this export is (its EP, dtype, KV layout), when it says.
    pub pin: Option<&'a ExportPin>,
}

/// Checks the export at `onnx_dir` against the contract of `config_json` for the protocol it
/// declares, then loads every sub-model in ONNX Runtime on the CPU EP. `float_dtype` is the ONNX
/// element type the export's activations must have (`float32` for an f32 export).
pub fn check(config_json: &Path, onnx_dir: &Path, float_dtype: &str) -> TierOutcome {
    check_with(L1Inputs { config: config_json, export: onnx_dir, float_dtype, pin: None })
}

/// [`check`] with the case's pin, on the CPU EP.
pub fn check_with(inputs: L1Inputs<'_>) -> TierOutcome {
    check_on(inputs, RunEp::Cpu)
}

/// [`check_with`] for a trial on `ep`: the contract of the EP the case names (else `ep`'s
/// build), and each sub-model loaded on `ep`: a graph ORT rejects or a kernel that refuses a node
/// there fails, and so does a session that leaves float compute nodes to the CPU EP (an EP-contract
/// finding of the build on `ep`, naming the nodes; L3–L5 still judge what it computes).
pub fn check_on(inputs: L1Inputs<'_>, ep: RunEp) -> TierOutcome {
    let interface = match interface(inputs, ep) {
        Ok(i) => i,
        Err(outcome) => return outcome,
    };
    // Loaded whatever the interface check found: ORT's verdict names the node where a build
    // broke, which the interface violations may only hint at.
    let load = match ep {
        RunEp::Cpu => load::load_on_cpu(&interface.package, &interface.graphs),
        ep => load::load_on(ep, &interface.package, &interface.graphs),
    };
    interface.into_outcome(Some(load))
}

/// The interface check alone (no weights read): what L2 runs on a full-size export.
pub fn check_interface(inputs: L1Inputs<'_>) -> TierOutcome {
    match interface(inputs, RunEp::Cpu) {
        Ok(i) => i.into_outcome(None),
        Err(outcome) => outcome,
    }
}

/// What the interface check found.
struct Interface {
    contract: ExportContract,
    package: OnnxPackage,
    protocol: ExportProtocol,
    /// The sub-models' graphs, by role.
    graphs: BTreeMap<String, GraphSummary>,
    violations: Vec<String>,
    /// What the checks found that is not a violation (the EP checked, conditions of other deployments).
    notes: Vec<String>,
    ops: BTreeMap<String, usize>,
    n_initializers: usize,
    config: std::path::PathBuf,
    /// A build that quantizes activations: each tensor it rounds, how, and for which matmul.
    quantized_activations: Option<BTreeMap<String, crate::onnx::quantized::RoundedActivation>>,
}

fn interface(inputs: L1Inputs<'_>, ep: RunEp) -> Result<Interface, TierOutcome> {
    let L1Inputs { config: config_json, export: onnx_dir, float_dtype, pin } = inputs;
    let contract =
        ExportContract::from_config_file(config_json).map_err(|e| TierOutcome::fail(format!("cannot derive the contract: {e}")))?;
    let package = OnnxPackage::open(onnx_dir).map_err(|e| TierOutcome::fail(e.to_string()))?;
    let mut violations = Vec::new();
    let mut graphs = BTreeMap::new();
    for (role, file) in &package.submodels {
        match GraphSummary::load(file) {
            Ok(g) => {
                graphs.insert(role.clone(), g);
            }
            Err(e) => violations.push(e.to_string()),
        }
    }
    let decoder = graphs.get(DECODER).or_else(|| graphs.get(TEXT_MODEL));
    let runtime = GenAiConfig::read(onnx_dir).unwrap_or_else(|e| {
        violations.push(e.to_string());
        None
    });
    let protocol = match decoder {
        Some(d) => ExportProtocol::read(d, graphs.get(EMBEDDING)).with_runtime(runtime),
        None => return Err(TierOutcome::fail(format!("{} holds no decoder (decoder/ or model.onnx)", onnx_dir.display()))),
    };
    let mut notes = Vec::new();
    // One model.onnx from a composite checkpoint: its text component (ORT GenAI's builder).
    let contract = if package.layout == Layout::TextOnly && contract.is_composite() {
        notes.push("text component of a composite checkpoint: judged against its text path (no vision encoder exported)".to_string());
        contract.text_component()
    } else {
        contract
    };
    let contract = contract.for_protocol(&protocol);
    for input in protocol.decoder_inputs.iter().filter(|n| protocol.feed(n) == Feed::NoEmbeddingModel) {
        violations.push(format!(
            "input `{input}` has no embedding model to come from: the package cannot run alone (an ORT GenAI \
             `exclude_embeds` build leaves the embedding to a model it does not hold)"
        ));
    }
    if let Some(runtime) = &protocol.runtime {
        violations.extend(runtime_config::violations(runtime, &contract, &protocol));
    }
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    let mut n_initializers = 0;
    for sub in &contract.submodels {
        if package.submodel(sub.role).is_none() {
            violations.push(format!("sub-model `{}` is missing from {}", sub.role, onnx_dir.display()));
            continue;
        }
        let Some(graph) = graphs.get(sub.role) else { continue };
        n_initializers += graph.initializer_count;
        for (op, n) in &graph.op_inventory {
            *ops.entry(op.clone()).or_default() += n;
        }
        for (kind, expected, actual) in [("input", &sub.inputs, &graph.inputs), ("output", &sub.outputs, &graph.outputs)] {
            for e in expected.iter() {
                match actual.iter().find(|a| a.name == e.name) {
                    None if e.required => violations.push(match e.why {
                        None => format!("{}: {kind} `{}` is missing", sub.role, e.name),
                        Some(why) => format!("{}: {kind} `{}` is missing: {why}", sub.role, e.name),
                    }),
                    None => {}
                    Some(a) => violations.extend(tensor_violations(sub.role, kind, e, a, float_dtype, protocol.index)),
                }
            }
        }
        // An input the contract does not know is one the pipeline cannot feed (an extra KV pair,
        // a renamed tensor); extra outputs are harmless.
        for a in &graph.inputs {
            if !sub.inputs.iter().any(|e| e.name == a.name) {
                violations.push(format!("{}: unexpected input `{}` {} {}", sub.role, a.name, a.dtype, a.shape_string()));
            }
        }
        if !graph.dangling_initializers.is_empty() {
            let shown: Vec<_> = graph.dangling_initializers.iter().take(5).cloned().collect();
            violations.push(format!(
                "{}: {} initialisers are never used (e.g. {})",
                sub.role,
                graph.dangling_initializers.len(),
                shown.join(", ")
            ));
        }
    }
    violations.extend(masks::mask_violations(&graphs, &contract, &protocol));
    // A node no EP of the pinned ORT runs is the build's finding on every EP.
    violations.extend(crate::runtime::kernels::refused_everywhere(&graphs));
    violations.extend(ep::gqa_kernel_violations(&graphs, &contract));
    if let Some(pin) = pin {
        violations.extend(ep::pin_violations(pin, &protocol));
    }
    // The EP whose contract applies: the one the case names, else the one this run uses.
    // A quantized build: how, as its graphs say, and each quantized weight's shape against the
    // config's; a quantized dtype on a build without quantized weights is a float build.
    let mut quantized_activations = None;
    match QuantizedBuild::read(onnx_dir) {
        Ok(Some(q)) => {
            notes.push(format!("quantized: {}", q.summary()));
            violations.extend(quantized_shape_violations(&q, config_json));
            quantized_activations = q.rounds_activations().then(|| q.activation_table());
        }
        Ok(None) => {
            if let Some(d) = pin.and_then(|p| p.dtype).filter(|d| d.is_quantized()) {
                violations.push(format!(
                    "dtype {d}, but no graph has a quantized weight (MatMulNBits, GatherBlockQuantized, DequantizeLinear into a MatMul)"
                ));
            }
        }
        Err(e) => violations.push(e.to_string()),
    }
    let named = pin.and_then(|p| p.ep).map(|e| (e, "named by the case")).or_else(|| ep.mobius_ep().map(|e| (e, "the EP of this trial")));
    if let Some((e, whose)) = named {
        let findings = ep::ep_violations(e, &graphs, &contract, &protocol, ORT_VERSION);
        notes.push(format!("checked against the {e} EP contract ({whose})"));
        violations.extend(findings.violations);
        notes.extend(findings.notes);
    }
    Ok(Interface {
        contract,
        package,
        protocol,
        graphs,
        violations,
        notes,
        ops,
        n_initializers,
        config: config_json.into(),
        quantized_activations,
    })
}

impl Interface {
    fn into_outcome(self, load: Option<load::LoadReport>) -> TierOutcome {
        let Interface { contract, protocol, graphs, mut violations, mut notes, ops, n_initializers, config, quantized_activations, .. } =
            self;
        // Who made the export and which transformers wrote the checkpoint's config: what the
        // verdict's numbers depend on besides this tool and ORT (reports show them).
        let mut producers: Vec<&str> = graphs.values().map(|g| g.producer.as_str()).filter(|p| !p.is_empty()).collect();
        producers.sort();
        producers.dedup();
        let transformers = std::fs::read_to_string(&config)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("transformers_version").and_then(|s| s.as_str()).map(String::from));
        if let Some(load) = &load {
            violations.extend(load.failures.iter().cloned());
            notes.extend(load.notes());
        }
        let inventory = ops.iter().map(|(k, v)| format!("{k}×{v}")).collect::<Vec<_>>().join(" ");
        let status = if violations.is_empty() { Status::Pass } else { Status::Fail };
        let notes = if notes.is_empty() { String::new() } else { format!("; {}", notes.join("; ")) };
        let message = if violations.is_empty() {
            format!(
                "{} sub-models honour the contract of {} ({} KV pairs, hidden {}, vocab {}); {protocol}{}{notes}; ops: {inventory}",
                contract.submodels.len(),
                config.display(),
                contract.kv.len(),
                contract.hidden_size,
                contract.vocab_size,
                match &load {
                    Some(l) if l.failures.is_empty() && l.notes().is_empty() => format!("; loaded by ONNX Runtime on {}", l.ep.ort_name()),
                    _ => String::new(),
                }
            )
        } else {
            format!("{} contract violations: {}; {protocol}{notes}", violations.len(), violations.join("; "))
        };
        TierOutcome::new(status, message).with(|m| {
            m.l1 = L1Metrics {
                violations: Some(violations.len()),
                kv_pairs: Some(contract.kv.len()),
                initializers: Some(n_initializers),
                op_inventory: Some(ops),
                export_variant: Some(protocol.variant().to_string()),
                activations: Some(protocol.float.to_string()),
                exporter: Some(producers.join(", ")),
                transformers_version: Some(transformers.unwrap_or_else(|| "not recorded".into())),
                quantized_activations,
            }
        })
    }
}

/// Each quantized weight's `[rows, cols]` against the shape the config gives the checkpoint
/// tensor it stands for (a tied `lm_head` against the token embedding).
fn quantized_shape_violations(q: &QuantizedBuild, config_json: &std::path::Path) -> Vec<String> {
    let model = onnx_parity_reference::ModelConfig::from_file(config_json).and_then(onnx_parity_reference::Gemma4::dry);
    let model = match model {
        Ok(m) => m,
        Err(e) => return vec![format!("quantized weights: cannot build the model's manifest from the config: {e}")],
    };
    let manifest = model.weight_manifest();
    let mut out = Vec::new();
    let lookup = |key: &str| name_for(key, manifest.keys().map(String::as_str)).and_then(|n| manifest.get(n));
    // Each weight's parameter: its name, else its node's module path (cross-checked).
    let mut q = q.clone();
    if let Err(e) = q.resolve_keys(|k| name_for(k, manifest.keys().map(String::as_str)).map(str::to_string)) {
        return vec![e.to_string()];
    }
    for w in &q.weights {
        // A k_eq_v layer has no v_proj: a fused matrix's v rows are k's copy there (the
        // dequantization checks they are equal), shaped as k_proj.
        let k_eq_v_copy = w.first_row.is_some() && w.key.ends_with("v_proj.weight") && lookup(&w.key).is_none();
        let key = if k_eq_v_copy { w.key.replace("v_proj.weight", "k_proj.weight") } else { w.key.clone() };
        match lookup(&key) {
            None => out.push(format!(
                "{}: `{}` ({}) stands for `{}`, which the model has no tensor for{}",
                w.submodel,
                w.initializer,
                w.op.as_str(),
                w.key,
                crate::onnx::quantized::not_a_parameter(&w.key).map(|why| format!(": {why}")).unwrap_or_default()
            )),
            Some(s) if s.as_slice() != w.shape => out.push(format!(
                "{}: `{}` ({}) is [{}, {}]; the config makes `{}` {s:?}",
                w.submodel,
                w.initializer,
                w.op.as_str(),
                w.shape[0],
                w.shape[1],
                key
            )),
            Some(_) => {}
        }
    }
    out
}

fn tensor_violations(
    role: &str,
    kind: &str,
    e: &crate::onnx::contract::ExpectedTensor,
    a: &TensorSpec,
    float_dtype: &str,
    index_dtype: &str,
) -> Vec<String> {
    let mut v = Vec::new();
    let want_dtype = match e.elem {
        ElemType::Int64 => "int64",
        ElemType::Float => float_dtype,
        // int32 only where the export declares its ids int32 (graph-capture builds).
        ElemType::Index if index_dtype == "int32" => "int32",
        ElemType::Index => "int64",
    };
    // Logits cast up to float32 in a lower-precision build lose nothing (ORT GenAI's builder).
    let upcast_logits = e.name == protocol::LOGITS && a.dtype == "float32" && e.elem == ElemType::Float;
    if a.dtype != want_dtype && !upcast_logits {
        v.push(format!("{role}: {kind} `{}` has dtype {}, contract expects {want_dtype}", e.name, a.dtype));
    }
    let want_shape = format!(
        "[{}]",
        e.dims
            .iter()
            .map(|d| match d {
                ExpectedDim::Fixed(n) => n.to_string(),
                ExpectedDim::Any => "*".into(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    match &a.dims {
        None => v.push(format!("{role}: {kind} `{}` declares no shape, contract expects {want_shape}", e.name)),
        Some(dims) if dims.len() != e.dims.len() => {
            v.push(format!("{role}: {kind} `{}` has rank {} {}, contract expects {want_shape}", e.name, dims.len(), a.shape_string()))
        }
        Some(dims) => {
            for (axis, (got, want)) in dims.iter().zip(&e.dims).enumerate() {
                if let ExpectedDim::Fixed(n) = want {
                    if *got != Dim::Static(*n) {
                        v.push(format!(
                            "{role}: {kind} `{}` dim {axis} is {got}, contract expects {n} (shape {} vs {want_shape})",
                            e.name,
                            a.shape_string()
                        ));
                    }
                }
            }
        }
    }
    v
}
