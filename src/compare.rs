//! Compares two `onnx-parity logits` dumps tensor by tensor (`onnx-parity compare`): the GPU
//! check runs the reference twice (`ONNX_PARITY_DEVICE=cpu` / `cuda`) and bounds the difference.

use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

/// Why two dumps could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
}

/// One tensor's difference.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDiff {
    pub name: String,
    /// `max |a − b|` (f32/f16/bf16/f64 tensors; ints: 0 if equal, infinity if not).
    pub max_abs_diff: f64,
    /// Why the tensors are not comparable (missing on one side, other shape or dtype).
    pub mismatch: Option<String>,
}

impl TensorDiff {
    /// Within `bound` and comparable.
    pub fn within(&self, bound: f64) -> bool {
        self.mismatch.is_none() && self.max_abs_diff <= bound
    }
}

fn values(path: &Path, st: &SafeTensors<'_>, name: &str) -> Result<(Dtype, Vec<usize>, Vec<f64>), CompareError> {
    let t = st.tensor(name).map_err(|e| CompareError::Format { path: path.into(), message: format!("{name}: {e}") })?;
    let b = t.data();
    let v: Vec<f64> = match t.dtype() {
        Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        Dtype::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        Dtype::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        Dtype::BF16 => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        Dtype::I64 => b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64).collect(),
        Dtype::I32 => b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        other => return Err(CompareError::Format { path: path.into(), message: format!("{name}: unsupported dtype {other:?}") }),
    };
    Ok((t.dtype(), t.shape().to_vec(), v))
}

fn parse<'a>(p: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, CompareError> {
    SafeTensors::deserialize(bytes).map_err(|e| CompareError::Format { path: p.into(), message: e.to_string() })
}

/// Every tensor of either dump, by name: its max abs difference, or why it cannot be compared.
/// Integer tensors (`greedy_tokens`) must be equal. A NaN on either side is an infinite difference.
pub fn compare_files(a: &Path, b: &Path) -> Result<Vec<TensorDiff>, CompareError> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| CompareError::Io { path: p.into(), source });
    let (ba, bb) = (read(a)?, read(b)?);
    let (sa, sb) = (parse(a, &ba)?, parse(b, &bb)?);
    let mut names: Vec<String> = sa.names().into_iter().chain(sb.names()).map(str::to_string).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let (ina, inb) = (sa.names().contains(&name.as_str()), sb.names().contains(&name.as_str()));
        if !(ina && inb) {
            let side = if ina { b } else { a };
            out.push(TensorDiff { mismatch: Some(format!("missing in {}", side.display())), max_abs_diff: f64::INFINITY, name });
            continue;
        }
        let (da, sha, va) = values(a, &sa, &name)?;
        let (db, shb, vb) = values(b, &sb, &name)?;
        let mismatch = if sha != shb {
            Some(format!("shape {sha:?} vs {shb:?}"))
        } else if da != db {
            Some(format!("dtype {da:?} vs {db:?}"))
        } else {
            None
        };
        let max_abs_diff = if mismatch.is_some() {
            f64::INFINITY
        } else {
            va.iter().zip(&vb).map(|(x, y)| if x.is_nan() || y.is_nan() { f64::INFINITY } else { (x - y).abs() }).fold(0.0, f64::max)
        };
        out.push(TensorDiff { name, max_abs_diff, mismatch });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views: Vec<(String, TensorView<'_>)> =
            tensors.iter().map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).expect("view"))).collect();
        std::fs::write(path, safetensors::serialize(views, None).expect("serialize")).expect("write");
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Guards: float tensors report their max abs difference, integer tensors must match, and a
    /// tensor present on one side or of another shape is a mismatch, never silently skipped.
    #[test]
    fn diffs_and_mismatches() {
        let dir = tempfile::tempdir().expect("tmp");
        let (a, b) = (dir.path().join("a.safetensors"), dir.path().join("b.safetensors"));
        let tok: Vec<u8> = [5i64, 7].iter().flat_map(|x| x.to_le_bytes()).collect();
        let tok2: Vec<u8> = [5i64, 8].iter().flat_map(|x| x.to_le_bytes()).collect();
        write(
            &a,
            &[
                ("logits", Dtype::F32, vec![1, 2], f32s(&[1.0, 2.0])),
                ("greedy_tokens", Dtype::I64, vec![2], tok.clone()),
                ("x", Dtype::F32, vec![1], f32s(&[0.0])),
            ],
        );
        write(
            &b,
            &[
                ("logits", Dtype::F32, vec![1, 2], f32s(&[1.0, 2.5])),
                ("greedy_tokens", Dtype::I64, vec![2], tok2),
                ("y", Dtype::F32, vec![1], f32s(&[0.0])),
            ],
        );
        let d = compare_files(&a, &b).expect("compare");
        let get = |n: &str| d.iter().find(|t| t.name == n).expect(n).clone();
        assert_eq!(get("logits").max_abs_diff, 0.5);
        assert!(get("logits").within(0.5) && !get("logits").within(0.4));
        assert!(!get("greedy_tokens").within(1e-5));
        assert!(get("x").mismatch.is_some() && get("y").mismatch.is_some());
        write(
            &b,
            &[
                ("logits", Dtype::F32, vec![2, 1], f32s(&[1.0, 2.0])),
                ("greedy_tokens", Dtype::I64, vec![2], tok),
                ("x", Dtype::F32, vec![1], f32s(&[f32::NAN])),
            ],
        );
        let d = compare_files(&a, &b).expect("compare");
        assert!(d.iter().find(|t| t.name == "logits").is_some_and(|t| t.mismatch.is_some()));
        assert!(d.iter().find(|t| t.name == "x").is_some_and(|t| t.max_abs_diff.is_infinite()));
        assert!(d.iter().find(|t| t.name == "greedy_tokens").is_some_and(|t| t.within(0.0)));
    }
}
