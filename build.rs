//! The reference side's code version: a digest of every source file that decides what the
//! reference computes (the reference crate, the harness's reference back end, the evaluation that
//! drives it, the quantized-build reader whose weights it runs on, the cache's own codec) and of
//! Cargo.lock (candle's version). It is part of every reference-cache key
//! (`src/reference_cache`), so a changed reference build misses instead of reusing old results.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// What the digest covers, relative to the manifest.
const SOURCES: [&str; 8] = [
    "reference/src",
    "reference/Cargo.toml",
    "src/backend/reference.rs",
    "src/evaluation",
    "src/onnx/quantized",
    "src/runtime/kernels.rs",
    "src/reference_cache",
    "Cargo.lock",
];

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        for e in entries.flatten() {
            files(&e.path(), out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
        files(&root.join(s), &mut all);
    }
    all.sort();
    let mut h = Sha256::new();
    for f in &all {
        let rel = f.strip_prefix(&root).unwrap_or(f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(f).unwrap_or_default());
        h.update([0]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=ONNX_PARITY_REFERENCE_CODE={}", &hex[..16]);
}
