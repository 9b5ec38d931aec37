//! `onnx-parity repro`: a failing verdict as something the exporter's developers can run. The
//! case's L3 evaluation (reference, export, isolation and local layer runs) names the first
//! divergence; the bundle holds only the blamed part — decoder layer k cut out of the decoder
//! ([`crate::onnx::cut`], its weights only), or the sub-model that differs in isolation when no
//! layer is identifiable — with the reference's values for its inputs and outputs, in the
//! spirit of Polygraphy's `debug reduce` and torch.onnx's `export_repro`.

pub mod bundle;
mod error;

pub use error::ReproError;

use std::path::{Path, PathBuf};

use crate::artifacts::Artifacts;
use crate::case::{Candidate, Case, Level};
use crate::evaluation::CaseEvaluation;
use crate::inputs::Dense;
use crate::onnx::feed::FeedTensor;
use crate::onnx::package::{OnnxPackage, EMBEDDING, VISION_ENCODER};
use crate::onnx::protocol;
use crate::outputs::{Component, Isolation, LayerOutputs};
use crate::runtime::pipeline::OnnxPipeline;
use crate::runtime::session::{self, ModelSource, SessionOptions};
use crate::tier_metrics::MODULE_NOT_IDENTIFIABLE;
use crate::tiers::l3;
use crate::tiers::l3::allclose::allclose;
use crate::tiers::outcome::{Status, TierOutcome};
use crate::tolerance::{L3Tolerance, Tolerances};
use bundle::Bundle;

/// What `repro` did.
#[derive(Debug)]
pub enum ReproOutcome {
    /// The case passes L3: nothing was written.
    Passes(TierOutcome),
    Written {
        dir: PathBuf,
        /// The blamed part ("decoder layer 3 (layer 3 mlp)", "vision_encoder").
        part: String,
        /// Per output, measured through ONNX Runtime here: max abs diff, values outside the
        /// tolerance, values.
        measured: Vec<(String, f64, usize, usize)>,
        reproduces: bool,
    },
}

/// Runs `case`'s L3 and writes the bundle of its first divergence to `out`; `command` is the
/// command line recorded in the bundle's README.
pub fn make(case: &Case, candidate: &Candidate, level: Level, out: &Path, command: &str) -> Result<ReproOutcome, ReproError> {
    if level != Level::L3 {
        return Err(ReproError::Level(level));
    }
    let ep = candidate.ep;
    let mut case = case.for_synthetic_tiers().into_owned();
    case.levels = [Level::L3].into();
    let tol = case.thresholds(&Tolerances::defaults()).and_then(|t| t.require_l3()).map_err(|e| ReproError::Tolerance(e.to_string()))?;
    let eval = CaseEvaluation::for_case(&case, candidate.variant.as_deref());
    let reference = eval.reference(&case)?;
    let id = candidate.id(&case);
    let candidate = eval.candidates(&case, candidate).into_iter().find_map(Result::ok).ok_or(ReproError::NoCandidate)?;
    let calibration = eval.calibration(&case).transpose()?;
    let outcome = l3::compare(&reference.run, &candidate.forced, &candidate.isolation, reference.scope, &tol, calibration.as_ref());
    if outcome.status == Status::Pass {
        return Ok(ReproOutcome::Passes(outcome));
    }
    let inputs = eval.inputs(&case)?;
    let dir = Artifacts::of(&case).export.ok_or(ReproError::NoCandidate)?;
    let pipeline = OnnxPipeline::open(&dir, &SessionOptions::on(ep))?;
    let ty = pipeline.float_type();
    let float = |t: &Dense<f32>| FeedTensor::float(t.shape.clone(), &t.data, ty);
    let expected = |name: &str, t: &Dense<f32>| (name.to_string(), FeedTensor::f32(t.shape.clone(), t.data.clone()));
    let layer = outcome.metrics.l3.first_divergent_layer;
    let local = matches!(&candidate.isolation, Isolation::Done(i) if matches!(i.local, LayerOutputs::Tensors(_)));
    let first = outcome.metrics.l3.first_divergence.clone().unwrap_or_else(|| protocol::LOGITS.to_string());

    // (part, model bytes with external data in `src_dir`, src_dir, inputs, expected outputs)
    let (part, model, src_dir, feed, outputs) = match (layer, local) {
        (Some(k), true) => {
            let cut = pipeline.cut(Some(k)).map_err(ReproError::Cut)?;
            let feed = pipeline.local_feed(&cut.inputs, &cut.stream_types, &inputs.input_ids, &reference.run)?;
            let LayerOutputs::Tensors(ref_layers) = &reference.run.prefill.layers else { return Err(ReproError::NoCandidate) };
            let mut outputs = vec![expected(&cut.layers[0].tensor, &ref_layers[k])];
            for m in &cut.modules {
                if let Some(t) = reference.run.prefill.modules.get(k).and_then(|ms| ms.get(m.module)) {
                    outputs.push(expected(&m.tensor, t));
                }
            }
            // "layer 3 mlp", or why the layer's modules cannot be told apart.
            let module = match outcome.metrics.l3.divergent_module.as_deref() {
                Some(MODULE_NOT_IDENTIFIABLE) => " (its modules not identifiable)".to_string(),
                Some(m) => format!(" ({m})"),
                None => String::new(),
            };
            (format!("decoder layer {k}{module}"), cut.bytes, parent(pipeline.decoder_path()), feed, outputs)
        }
        _ => {
            let package = OnnxPackage::open(&dir).map_err(|e| ReproError::Model(e.to_string()))?;
            let read = |p: &Path| std::fs::read(p).map_err(|source| ReproError::Io { path: p.into(), source });
            let ref_component = |c: Component| reference.run.prefill.components.get(&c);
            match (first.as_str(), &inputs.pixel_values, &inputs.image_position_ids, package.submodel(VISION_ENCODER)) {
                (protocol::IMAGE_FEATURES, Some(px), Some(pos), Some(path)) => {
                    let feed = vec![
                        (protocol::PIXEL_VALUES.to_string(), float(px)),
                        (
                            protocol::PIXEL_POSITION_IDS.to_string(),
                            FeedTensor { shape: pos.shape.clone(), data: crate::onnx::feed::FeedData::I64(pos.data.clone()) },
                        ),
                    ];
                    let e = ref_component(Component::ImageFeatures).ok_or(ReproError::NoCandidate)?;
                    (VISION_ENCODER.to_string(), read(path)?, parent(path), feed, vec![expected(protocol::IMAGE_FEATURES, e)])
                }
                (protocol::INPUTS_EMBEDS | protocol::PER_LAYER_INPUTS, _, _, _) if package.submodel(EMBEDDING).is_some() => {
                    let path = package.submodel(EMBEDDING).unwrap_or(Path::new(""));
                    let ids = FeedTensor {
                        shape: vec![1, inputs.input_ids.len()],
                        data: crate::onnx::feed::FeedData::I64(inputs.input_ids.clone()),
                    };
                    let mut feed = vec![(protocol::INPUT_IDS.to_string(), ids)];
                    if let Some(f) = ref_component(Component::ImageFeatures) {
                        feed.push((protocol::IMAGE_FEATURES.to_string(), float(f)));
                    }
                    let outputs = [Component::InputsEmbeds, Component::PerLayerInputs]
                        .into_iter()
                        .filter_map(|c| ref_component(c).map(|t| expected(c.as_str(), t)))
                        .collect();
                    (EMBEDDING.to_string(), read(path)?, parent(path), feed, outputs)
                }
                _ => {
                    let path = pipeline.decoder_path().to_path_buf();
                    let bytes = read(&path)?;
                    let names = session_inputs(&bytes)?;
                    let feed = pipeline.local_feed(&names, &Default::default(), &inputs.input_ids, &reference.run)?;
                    ("decoder".to_string(), bytes, parent(&path), feed, vec![expected(protocol::LOGITS, &reference.run.prefill.logits)])
                }
            }
        }
    };
    drop(pipeline);
    let (measured, reproduces) = check(&model, &src_dir, &feed, &outputs, &tol, ep)?;
    let (bundled, data) = bundle::relocate_external_data(&model, &src_dir)?;
    let readme = readme(&case, &id, &outcome, &part, &tol, &measured, reproduces, command, &model, &dir, ep);
    let b = Bundle { model: bundled, data, inputs: feed, outputs, reproduce_py: bundle::reproduce_py(tol.atol, tol.rtol), readme };
    bundle::write(out, &b)?;
    Ok(ReproOutcome::Written { dir: out.into(), part, measured, reproduces })
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A model's graph input names.
fn session_inputs(model: &[u8]) -> Result<Vec<String>, ReproError> {
    use prost::Message;
    let m = crate::onnx::proto::ModelProto::decode(model).map_err(|e| ReproError::Model(e.to_string()))?;
    let g = m.graph.ok_or_else(|| ReproError::Model("the model has no graph".into()))?;
    let initializers: std::collections::BTreeSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    Ok(g.input.iter().map(|i| i.name.clone()).filter(|n| !initializers.contains(n.as_str())).collect())
}

/// Runs the bundle's model (with its external data still in `src_dir`) through ONNX Runtime on
/// `feed` and compares each output with `outputs`.
#[allow(clippy::type_complexity)]
fn check(
    model: &[u8],
    src_dir: &Path,
    feed: &[(String, FeedTensor)],
    outputs: &[(String, FeedTensor)],
    tol: &L3Tolerance,
    ep: crate::eps::RunEp,
) -> Result<(Vec<(String, f64, usize, usize)>, bool), ReproError> {
    let fail = |e: &dyn std::fmt::Display| ReproError::Check(e.to_string());
    let mut session =
        session::open(ModelSource::Memory { path: src_dir, bytes: model, external_data_dir: src_dir }, &SessionOptions::on(ep))
            .map_err(|e| fail(&e))?;
    let values = feed.iter().map(|(n, t)| t.to_value().map(|v| (n.clone(), v))).collect::<Result<Vec<_>, _>>().map_err(|e| fail(&e))?;
    let got = session.run(values).map_err(|e| fail(&e))?;
    let mut measured = Vec::new();
    let mut reproduces = false;
    for (name, e) in outputs {
        let v = got.get(name.as_str()).ok_or_else(|| ReproError::Check(format!("no output `{name}`")))?;
        let a: Vec<f32> = match v.try_extract_tensor::<f32>() {
            Ok((_, d)) => d.to_vec(),
            Err(_) => v.try_extract_tensor::<half::f16>().map_err(|e| fail(&e))?.1.iter().map(|x| x.to_f32()).collect(),
        };
        let e = e.to_f32();
        if a.len() != e.len() {
            return Err(ReproError::Check(format!("`{name}`: {} values, the reference has {}", a.len(), e.len())));
        }
        let r = allclose(&a, &e, &[a.len()], tol.atol, tol.rtol).map_err(|e| fail(&e))?;
        reproduces |= !r.pass;
        measured.push((name.clone(), r.max_abs_diff, r.n_violations, r.numel));
    }
    Ok((measured, reproduces))
}

#[allow(clippy::too_many_arguments)]
fn readme(
    case: &Case,
    id: &str,
    outcome: &TierOutcome,
    part: &str,
    tol: &L3Tolerance,
    measured: &[(String, f64, usize, usize)],
    reproduces: bool,
    command: &str,
    model: &[u8],
    export: &Path,
    ep: crate::eps::RunEp,
) -> String {
    use prost::Message;
    let producer = crate::onnx::proto::ModelProto::decode(model)
        .map(|m| format!("{} {}", m.producer_name, m.producer_version).trim().to_string())
        .unwrap_or_default();
    let transformers = Artifacts::of(case)
        .checkpoint
        .and_then(|c| std::fs::read_to_string(c.join("config.json")).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("transformers_version").and_then(|s| s.as_str()).map(String::from))
        .unwrap_or_else(|| "not recorded in the checkpoint's config.json".into());
    let first = outcome.metrics.l3.first_divergence.as_deref().unwrap_or("none named");
    let rows: String = measured.iter().map(|(n, d, bad, all)| format!("| `{n}` | {d:.3e} | {bad} of {all} |\n")).collect();
    let xfail = match case.xfail_for(Level::L3) {
        Some(x) => format!("expected failure: {}\n\nsignature: `{:?}`", x.reason, x.signature),
        None => "none (the case does not expect this failure)".into(),
    };
    format!(
        "# Reproducer: {id} L3\n\n\
The blamed part: **{part}** (first divergence: `{first}`). `model.onnx` holds only it and its weights\n\
(`model.onnx.data`); `test_data_set_0/input_*.pb` are its inputs as the harness fed them (the\n\
reference's values where they come from upstream), `output_*.pb` the reference's outputs.\n\n\
```sh\npip install onnxruntime=={ort} onnx numpy\npython3 reproduce.py   # exit 1: the mismatch reproduces; 0: it does not\n```\n\n\
Tolerance: `|onnx - ref| <= {atol:e} + {rtol:e}·|ref|` (the case's L3 row).\n\n\
Measured here through ONNX Runtime {ort} ({ep}): {verdict}.\n\n| output | max abs diff | outside the tolerance |\n|---|---|---|\n{rows}\n\
| | |\n|---|---|\n| case | `{id}` |\n| export | `{export}` (producer: {producer}) |\n| transformers | {transformers} |\n| onnx-parity | {tool} |\n| ONNX Runtime | {ort} |\n| command | `{command}` |\n\n\
{xfail}\n\nThe verdict: {message}\n",
        id = id,
        ort = crate::runtime::provision::ORT_VERSION,
        ep = ep.label(),
        atol = tol.atol,
        rtol = tol.rtol,
        verdict = if reproduces { "the mismatch reproduces" } else { "the mismatch does not reproduce in the cut part alone" },
        export = export.display(),
        tool = env!("CARGO_PKG_VERSION"),
        message = outcome.message,
    )
}
