//! Compares two `onnx-parity logits` dumps tensor by tensor (`onnx-parity compare`): the GPU
//! check runs the reference twice (`ONNX_PARITY_DEVICE=cpu` / `cuda`). With a third dump, the
//! reference in float64 (`logits --dtype f64`), the second is judged as L3 judges a candidate
//! ([`judge_against_arbiter`]): its error against f64 may be `k` times the first's (the f32
//! reference's own error, the floor) plus `δ` — a bound measured on each tensor, not a constant
//! (a hand-set 1e-5 failed correct GPU runs: cuBLAS sums in another order than the CPU's gemm).

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

/// One float tensor of the GPU dump judged against the f64 arbiter with the CPU dump as floor.
#[derive(Debug, Clone, PartialEq)]
pub struct ArbiterVerdict {
    pub name: String,
    /// The calibrated rule's measurement (`None` with `mismatch`).
    pub report: Option<crate::tiers::l3::calibrated::CalibratedReport>,
    /// Why the three tensors could not be compared.
    pub mismatch: Option<String>,
}

impl ArbiterVerdict {
    pub fn pass(&self) -> bool {
        self.mismatch.is_none() && self.report.as_ref().is_some_and(|r| r.pass)
    }
}

/// Every float tensor the f64 dump holds, in `candidate` (the GPU's) judged against `arbiter`
/// with `floor` (the CPU's f32 run) as the noise level under `rule` (the float32 row of
/// `L3_calibrated`). A tensor missing from a side, or of another shape, is a mismatch.
pub fn judge_against_arbiter(
    floor: &Path,
    candidate: &Path,
    arbiter: &Path,
    rule: &crate::tolerance::CalibratedRule,
) -> Result<Vec<ArbiterVerdict>, CompareError> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| CompareError::Io { path: p.into(), source });
    let (bf, bc, ba) = (read(floor)?, read(candidate)?, read(arbiter)?);
    let (sf, sc, sa) = (parse(floor, &bf)?, parse(candidate, &bc)?, parse(arbiter, &ba)?);
    let mut names: Vec<String> = sa.names().into_iter().map(str::to_string).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let (da, sha, va) = values(arbiter, &sa, &name)?;
        if !matches!(da, Dtype::F32 | Dtype::F64) {
            continue;
        }
        let missing = [(floor, &sf), (candidate, &sc)].into_iter().find(|(_, st)| !st.names().contains(&name.as_str()));
        if let Some((p, _)) = missing {
            out.push(ArbiterVerdict { name, report: None, mismatch: Some(format!("missing in {}", p.display())) });
            continue;
        }
        let (_, shf, vf) = values(floor, &sf, &name)?;
        let (_, shc, vc) = values(candidate, &sc, &name)?;
        if shf != sha || shc != sha {
            out.push(ArbiterVerdict { name, report: None, mismatch: Some(format!("shapes {shf:?} / {shc:?} / {sha:?}")) });
            continue;
        }
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let verdict = match crate::tiers::l3::calibrated::calibrated(&f32s(&vc), &f32s(&vf), &f32s(&va), &sha, rule) {
            Ok(r) => ArbiterVerdict { name, report: Some(r), mismatch: None },
            Err(e) => ArbiterVerdict { name, report: None, mismatch: Some(e.to_string()) },
        };
        out.push(verdict);
    }
    Ok(out)
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

    /// Guards the three-way judgement: a GPU tensor within k of the CPU floor against f64 passes,
    /// one ten times the floor's error fails, a NaN fails, and a tensor missing on one side is a
    /// mismatch (never a pass).
    #[test]
    fn arbiter_judges_the_gpu_run_by_the_cpu_run_s_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = |n: &str| dir.path().join(format!("{n}.safetensors"));
        let truth = [1.0f32, 2.0, 3.0, 4.0];
        write(&p("f64"), &[("logits", Dtype::F32, vec![1, 4], f32s(&truth)), ("only_here", Dtype::F32, vec![1], f32s(&[0.0]))]);
        write(&p("cpu"), &[("logits", Dtype::F32, vec![1, 4], f32s(&[1.0 + 1e-5, 2.0, 3.0 - 1e-5, 4.0]))]);
        let rule = crate::tolerance::CalibratedRule { k: 4.0, delta_ulps: 1.0, epsilon: 2f64.powi(-23) };
        for (gpu, pass) in [([1.0 - 2e-5, 2.0, 3.0, 4.0], true), ([1.0 + 1e-4, 2.0, 3.0, 4.0], false), ([f32::NAN, 2.0, 3.0, 4.0], false)] {
            write(&p("gpu"), &[("logits", Dtype::F32, vec![1, 4], f32s(&gpu))]);
            let v = judge_against_arbiter(&p("cpu"), &p("gpu"), &p("f64"), &rule).expect("judged");
            let logits = v.iter().find(|t| t.name == "logits").expect("logits");
            assert_eq!(logits.pass(), pass, "{gpu:?}: {logits:?}");
            let only = v.iter().find(|t| t.name == "only_here").expect("only_here");
            assert!(!only.pass() && only.mismatch.is_some());
        }
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
