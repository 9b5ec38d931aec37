//! Shared by the test targets (`mod support;`): the repository root, a recursive file listing,
//! and running one tier through the `onnx-parity` binary. Each target uses part of it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Makes this test binary a driver (as `onnx-parity` and the parity target are): the run
/// context installed and the variables the libraries read set (ORT GenAI's `ORT_LIB_PATH`), once,
/// before the first test that needs them loads anything.
pub fn driver() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let context = onnx_parity::context::RunContext::from_env();
        let vars = onnx_parity::driver::variables_to_set(&context, false);
        for (k, v) in &vars {
            std::env::set_var(k, v);
        }
        onnx_parity::context::install(context.with_set(&vars));
    });
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `onnx-parity` binary run in the repository root with `args` (warnings-only logs).
pub fn cli(args: &[&str]) -> std::process::Output {
    cli_with(args, &[])
}

/// [`cli`] with variables `env` set for the child (a hub cache, a reference cache of the test's
/// own), over this process's environment.
pub fn cli_with(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onnx-parity"));
    c.args(args).current_dir(root()).env("ONNX_PARITY_LOG", "warn");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("runs the onnx-parity binary")
}

/// A run's stdout and stderr together, for assertion messages.
pub fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Files under `dir` (recursively) whose name ends with `suffix` (`""`: every file), sorted.
pub fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Runs L3 of `case` (report written in `dir`) and returns its verdict: status, message, metrics.
pub fn run_l3(case: &Path, dir: &Path) -> (String, String, Value) {
    let report = dir.join("report.json");
    let o = Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .args(["run", "--levels", "L3", "--report"])
        .arg(&report)
        .arg(case)
        .current_dir(root())
        .env("ONNX_PARITY_LOG", "warn")
        .output()
        .expect("runs the onnx-parity binary");
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&fs::read(&report).unwrap_or_else(|e| panic!("no report ({e}): {out}"))).expect("report json");
    let l3 = r["cases"][0]["levels"].as_array().expect("levels").iter().find(|l| l["level"] == "L3").cloned().expect("an L3 verdict");
    (l3["status"].as_str().unwrap_or_default().to_string(), l3["message"].as_str().unwrap_or_default().to_string(), l3["metrics"].clone())
}

/// A copy of the graph files of the export at `onnx` in a temporary folder (same layout, no
/// weights), each passed through `edit(role, model)` first. Re-encoded through the crate's
/// partial ONNX schema: fit for the interface checks, not for ONNX Runtime.
pub fn edited_export(onnx: &Path, edit: impl Fn(&str, &mut onnx_parity::onnx::proto::ModelProto)) -> tempfile::TempDir {
    use prost::Message;
    let dir = tempfile::tempdir().expect("temp dir");
    for (role, file) in onnx_parity::onnx::package::OnnxPackage::open(onnx).expect("package").submodels {
        let mut model = onnx_parity::onnx::proto::ModelProto::decode(fs::read(&file).expect("read").as_slice()).expect("decode");
        edit(&role, &mut model);
        let out = dir.path().join(file.strip_prefix(onnx).expect("inside the export"));
        fs::create_dir_all(out.parent().expect("parent")).expect("mkdir");
        fs::write(out, model.encode_to_vec()).expect("write");
    }
    dir
}

/// One f32 tensor of a safetensors file: its shape and its values.
pub fn read_f32(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = fs::read(path).expect("read safetensors");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name} in {}", path.display()));
    (t.shape().to_vec(), t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Largest |a − b|; a non-finite value or a length mismatch is infinite, so it never passes a bound.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| if x.is_finite() && y.is_finite() { (x - y).abs() } else { f32::INFINITY }).fold(0.0, f32::max)
}

/// The near-tie rule on a variant of `gemma4-text-ple` whose floors are conditioned on its steps:
/// its whole L3; its layers judged against the hinted local floors; the same with one value of
/// `layer`'s local output moved by `delta` (a layer computed wrong); and against the plain floors.
pub struct NearTies {
    pub l3: onnx_parity::tiers::outcome::TierOutcome,
    pub hinted: onnx_parity::tiers::outcome::TierOutcome,
    pub broken: onnx_parity::tiers::outcome::TierOutcome,
    pub plain: onnx_parity::tiers::outcome::TierOutcome,
}

pub fn near_ties(variant: &str, layer: usize, delta: f32) -> NearTies {
    use onnx_parity::case::{Candidate, Case, Level};
    use onnx_parity::evaluation::CaseEvaluations;
    use onnx_parity::outputs::Isolation;
    use onnx_parity::tiers::l3::{self, Calibration};
    use onnx_parity::tiers::{run_level, RunOptions};
    use onnx_parity::tolerance::Tolerances;
    let case = Case::load(&root().join("cases/causal-lm/gemma4-text-ple.yaml")).expect("case").for_variant(variant).expect("variant");
    let candidate = Candidate::variant(variant);
    let evals = CaseEvaluations::for_build(&case, Some(variant));
    let l3 = run_level(&case, &candidate, Level::L3, &RunOptions::with_goldens(root().join("goldens")), &evals);
    let eval = evals.for_level(Level::L3, &case);
    let reference = eval.reference(&case).expect("reference");
    let run = eval.candidates(&case, &candidate).into_iter().next().expect("one candidate").expect("ran");
    let hinted = run.hinted.as_ref().expect("a build whose activations are rounded is judged with hints");
    let hinted = hinted.local.as_ref().expect("its local run gave hints");
    let plain = eval.calibration(&case).expect("calibrated rule").expect("calibration");
    let tol = case.thresholds(&Tolerances::defaults()).expect("tolerances").require_l3().expect("L3 row");
    let judge = |isolation: &Isolation, cal: &Calibration<'_>| {
        l3::compare(&reference.run, &run.forced, isolation, reference.scope, &tol, Some(cal))
    };
    let (floor, truth) = hinted.read().expect("the conditioned local floors read");
    let with_hints = Calibration { local: &floor.output, local_truth: Some(&truth.output), ..plain };
    let Isolation::Done(iso) = &run.isolation else { panic!("isolation ran") };
    let mut broken = iso.clone();
    let onnx_parity::outputs::LayerOutputs::Tensors(local) = &mut broken.local else { panic!("local layers ran") };
    local[layer].data[64 * 13 + 7] += delta;
    NearTies {
        l3,
        hinted: judge(&run.isolation, &with_hints),
        broken: judge(&Isolation::Done(broken), &with_hints),
        plain: judge(&run.isolation, &plain),
    }
}

/// A `tracing` writer into a shared buffer (what a test's subscriber printed).
#[derive(Clone, Default)]
pub struct Capture(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Capture {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
