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
    Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .args(args)
        .current_dir(root())
        .env("ONNX_PARITY_LOG", "warn")
        .output()
        .expect("runs the onnx-parity binary")
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
