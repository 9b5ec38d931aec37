//! Writing a reproducer bundle: a model whose external data holds only its own weights, its
//! inputs and expected outputs in ONNX's backend-test layout (`test_data_set_0/input_N.pb`,
//! `output_N.pb`), a `reproduce.py` that needs only `onnxruntime`, `onnx` and numpy, and a
//! README. The bundle is written into a scratch folder beside the target and renamed into place,
//! so an interrupted run leaves no half bundle.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use prost::Message;

use super::error::ReproError;
use crate::onnx::feed::FeedTensor;
use crate::onnx::proto::TensorProto;
use crate::onnx::wire;

/// The external data file of a bundle's model.
pub const DATA_FILE: &str = "model.onnx.data";

/// Payload alignment in the data file (what `onnx.save` uses for mmap-friendly offsets).
const ALIGN: usize = 4096;

/// `model` with every external initializer's bytes copied from `src_dir` into a new data
/// buffer, its `external_data` entries pointing there ([`DATA_FILE`]); inline ones are kept.
pub fn relocate_external_data(model: &[u8], src_dir: &Path) -> Result<(Vec<u8>, Vec<u8>), ReproError> {
    const INITIALIZER: u64 = 5;
    const EXTERNAL_DATA: u64 = 13;
    const DATA_LOCATION: u64 = 14;
    let wire_err = |e: wire::WireError| ReproError::Model(e.to_string());
    let (_, payload) = wire::graph_field(model).map_err(wire_err)?;
    let g = &model[payload];
    let mut graph = Vec::with_capacity(g.len());
    let mut data = Vec::new();
    let mut files: HashMap<String, File> = HashMap::new();
    for f in wire::fields(g).map_err(wire_err)? {
        let body = &g[f.payload.clone()];
        if f.number != INITIALIZER {
            graph.extend_from_slice(&g[f.all.clone()]);
            continue;
        }
        let t = TensorProto::decode(body).map_err(|e| ReproError::Model(e.to_string()))?;
        if t.data_location != 1 {
            graph.extend_from_slice(&g[f.all.clone()]);
            continue;
        }
        let entry = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.clone());
        let location =
            entry("location").ok_or_else(|| ReproError::Model(format!("initializer `{}`: external data without a location", t.name)))?;
        let number = |k: &str| entry(k).map(|v| v.parse::<u64>()).transpose();
        let (offset, length) = match (number("offset"), number("length")) {
            (Ok(o), Ok(Some(l))) => (o.unwrap_or(0), l as usize),
            _ => return Err(ReproError::Model(format!("initializer `{}`: external data without a readable length", t.name))),
        };
        let path = src_dir.join(&location);
        if !files.contains_key(&location) {
            let file = File::open(&path).map_err(|source| ReproError::Io { path: path.clone(), source })?;
            files.insert(location.clone(), file);
        }
        let mut bytes = vec![0u8; length];
        files[&location].read_exact_at(&mut bytes, offset).map_err(|source| ReproError::Io { path: path.clone(), source })?;
        data.resize(data.len().div_ceil(ALIGN) * ALIGN, 0);
        let at = data.len();
        data.extend_from_slice(&bytes);
        // The tensor's own fields but its external-data ones, then the new location.
        let mut tensor = Vec::with_capacity(body.len());
        for tf in wire::fields(body).map_err(wire_err)? {
            if tf.number != EXTERNAL_DATA && tf.number != DATA_LOCATION {
                tensor.extend_from_slice(&body[tf.all]);
            }
        }
        for (k, v) in [("location", DATA_FILE.to_string()), ("offset", at.to_string()), ("length", length.to_string())] {
            let entry = crate::onnx::proto::StringStringEntryProto { key: k.into(), value: v };
            wire::put_len_field(&mut tensor, EXTERNAL_DATA, &entry.encode_to_vec());
        }
        wire::put_varint(&mut tensor, DATA_LOCATION << 3);
        wire::put_varint(&mut tensor, 1);
        wire::put_len_field(&mut graph, INITIALIZER, &tensor);
    }
    Ok((wire::with_graph(model, &graph).map_err(wire_err)?, data))
}

/// Everything a bundle holds.
pub struct Bundle {
    pub model: Vec<u8>,
    pub data: Vec<u8>,
    pub inputs: Vec<(String, FeedTensor)>,
    pub outputs: Vec<(String, FeedTensor)>,
    pub reproduce_py: String,
    pub readme: String,
}

/// Writes `bundle` as the folder `out` (which must not exist, or be empty).
pub fn write(out: &Path, bundle: &Bundle) -> Result<(), ReproError> {
    if out.exists() && std::fs::read_dir(out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(ReproError::OutExists(out.into()));
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReproError::Io { path, source }
    };
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "repro".into());
    let scratch: PathBuf = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let data_dir = scratch.join("test_data_set_0");
    std::fs::create_dir_all(&data_dir).map_err(io(&data_dir))?;
    let put = |path: PathBuf, bytes: &[u8]| std::fs::write(&path, bytes).map_err(io(&path));
    put(scratch.join("model.onnx"), &bundle.model)?;
    if !bundle.data.is_empty() {
        put(scratch.join(DATA_FILE), &bundle.data)?;
    }
    for (i, (name, t)) in bundle.inputs.iter().enumerate() {
        put(data_dir.join(format!("input_{i}.pb")), &t.tensor_proto(name))?;
    }
    for (i, (name, t)) in bundle.outputs.iter().enumerate() {
        put(data_dir.join(format!("output_{i}.pb")), &t.tensor_proto(name))?;
    }
    put(scratch.join("reproduce.py"), bundle.reproduce_py.as_bytes())?;
    put(scratch.join("README.md"), bundle.readme.as_bytes())?;
    if out.exists() {
        std::fs::remove_dir(out).map_err(io(out))?;
    }
    std::fs::rename(&scratch, out).map_err(io(out))
}

/// The bundle's `reproduce.py`, with the tolerance it judges by.
pub fn reproduce_py(atol: f64, rtol: f64) -> String {
    REPRODUCE_PY.replace("{ATOL}", &format!("{atol:e}")).replace("{RTOL}", &format!("{rtol:e}"))
}

const REPRODUCE_PY: &str = r#"#!/usr/bin/env python3
"""Reproduces an onnx-parity mismatch with plain onnxruntime, onnx and numpy.

Runs model.onnx (CPU) on test_data_set_0/input_*.pb and compares every output with
output_*.pb, the reference's values, by |onnx - ref| <= atol + rtol * |ref| (NaN never passes).
Exit status: 1 when the mismatch reproduces, 0 when it does not.
"""
import glob
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort

ATOL = {ATOL}
RTOL = {RTOL}
HERE = os.path.dirname(os.path.abspath(__file__))


def load(pattern):
    paths = glob.glob(os.path.join(HERE, "test_data_set_0", pattern))
    paths.sort(key=lambda p: int(os.path.basename(p).split("_")[1].split(".")[0]))
    tensors = []
    for path in paths:
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        tensors.append((t.name, numpy_helper.to_array(t)))
    return tensors


def main():
    inputs = load("input_*.pb")
    expected = load("output_*.pb")
    options = ort.SessionOptions()
    session = ort.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
    got = session.run([name for name, _ in expected], dict(inputs))
    reproduced = False
    for (name, ref), actual in zip(expected, got):
        a = np.asarray(actual, dtype=np.float64).reshape(-1)
        r = np.asarray(ref, dtype=np.float64).reshape(-1)
        if a.size != r.size:
            print(f"{name}: {a.size} values from onnxruntime, {r.size} expected")
            reproduced = True
            continue
        diff = np.abs(a - r)
        bad = ~(diff <= ATOL + RTOL * np.abs(r))
        worst = float(np.max(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
        print(f"{name}: max_abs_diff {worst:.3e}, {int(bad.sum())} of {bad.size} outside atol {ATOL:g} + rtol {RTOL:g}*|ref|")
        reproduced |= bool(bad.any())
    print(f"onnxruntime {ort.__version__}: " + ("the mismatch reproduces" if reproduced else "the mismatch does not reproduce"))
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())
"#;
