//! GPU runs: where the reference computes (`ONNX_PARITY_DEVICE`), and the TF32 probe that proves
//! the TF32 policy held on both back ends.
//!
//! The policy:
//! - `NVIDIA_TF32_OVERRIDE=0` for the process unless the user set it ([`crate::tf32`]);
//! - ONNX Runtime's CUDA EP: `use_tf32=0` and `error_on_failure` (no silent CPU fallback),
//!   configured once in [`crate::runtime::session::open`] for every session, the probe's too.
//! - candle's cuBLAS reduced-precision switches (f32 TF32, f16, bf16) off before the first kernel
//!   ([`onnx_parity_reference::device::DeviceSpec::open`]).
//! - The probe ([`probe_candle`], [`probe_ort`]) multiplies matrices whose exact product TF32
//!   cannot reach (every input is `1 + u·2⁻¹¹`, which a 10-bit mantissa rounds to 1) and compares
//!   with f64 on the CPU: f32 arithmetic errs ~1e-7 relative, TF32 ~5e-4; above
//!   [`PROBE_MAX_REL_ERR`] the run fails. [`judge`] is the decision, testable on the CPU.

use std::sync::{Arc, OnceLock};

use candle_core::{Device, Tensor};
use onnx_parity_reference::device::{DeviceError, DeviceSpec, ReducedPrecision};
use serde::{Deserialize, Serialize};

/// Selects the reference's device: `cpu` (default), `cuda`, `cuda:N`.
pub use crate::context::DEVICE_VAR;
use crate::eps::RunEp;
use crate::tf32::{Tf32Env, TF32_OVERRIDE_VAR};
/// Above this relative error (max over elements) a back end computes TF32-like.
pub const PROBE_MAX_REL_ERR: f64 = 1e-5;
/// Probe shapes: `[M, K] × [K, N]`. K = 64 keeps f32's worst-case accumulation error
/// (K·2⁻²⁴ ≈ 3.8e-6) below the threshold; TF32's is ~2⁻¹¹ ≈ 4.9e-4 at any K.
pub const PROBE_M: usize = 32;
pub const PROBE_K: usize = 64;
pub const PROBE_N: usize = 48;

/// Why a GPU run cannot start or failed its probe.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The device named by `ONNX_PARITY_DEVICE` is unknown or cannot be opened (shared, so the
    /// once-opened device's error can be returned again).
    #[error("{DEVICE_VAR}: {0}")]
    Device(#[source] Arc<DeviceError>),
    #[error("TF32 probe ({backend}): {source}")]
    Candle {
        backend: &'static str,
        #[source]
        source: candle_core::Error,
    },
    #[error("TF32 probe (onnxruntime): {0}")]
    Session(#[from] crate::runtime::session::SessionError),
    #[error("TF32 probe (onnxruntime): {source}")]
    Ort {
        #[source]
        source: ort::Error,
    },
    #[error("TF32 probe (onnxruntime): the probe model has no output `Y`")]
    NoOutput,
    #[error(
        "TF32 probe: {backend} computes TF32-like (max relative error {max_rel_err:.3e} > {PROBE_MAX_REL_ERR:e}; \
         f32 gives ~1e-7). {TF32_OVERRIDE_VAR}={override_value}"
    )]
    Tf32Like { backend: String, max_rel_err: f64, override_value: String },
}

// ---------------------------------------------------------------------------------------------
// The reference's device.

/// `ONNX_PARITY_DEVICE` parsed (unset: the CPU).
pub fn device_spec() -> Result<DeviceSpec, DeviceError> {
    match &crate::context::current().device {
        Some(v) => v.parse(),
        None => Ok(DeviceSpec::Cpu),
    }
}

impl From<DeviceError> for GpuError {
    fn from(e: DeviceError) -> Self {
        GpuError::Device(Arc::new(e))
    }
}

static DEVICE: OnceLock<Result<Device, Arc<DeviceError>>> = OnceLock::new();

/// The reference's device, opened once per process (a CUDA device holds a context and a cuBLAS
/// handle; every model of the run shares it). TF32 policy first, then the device.
pub fn reference_device() -> Result<Device, GpuError> {
    let spec = device_spec()?;
    if spec == DeviceSpec::Cpu {
        return Ok(Device::Cpu);
    }
    DEVICE.get_or_init(|| spec.open().map_err(Arc::new)).clone().map_err(GpuError::Device)
}

/// After a back end is dropped: the reference's freed device memory handed back to the driver
/// ([`onnx_parity_reference::device::release`]) before the next one (an ONNX Runtime session,
/// the f64 arbiter) allocates, and `, GPU in use X GiB of Y` for the stage's log line; empty when
/// no CUDA device was opened.
pub fn release_reference_memory() -> String {
    let Some(Ok(device)) = DEVICE.get() else { return String::new() };
    match onnx_parity_reference::device::release(device) {
        Ok(Some(m)) => format!(", GPU in use after release {} of {}", crate::memory::gib(m.used), crate::memory::gib(m.total)),
        Ok(None) => String::new(),
        Err(e) => {
            tracing::warn!("the reference's device could not be synchronised to release its memory: {e}");
            String::new()
        }
    }
}

/// What the report records about devices and TF32.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuMetadata {
    /// The reference's device (`cpu`, `cuda:N`).
    pub reference_device: String,
    /// candle's cuBLAS reduced-precision switches (all false is the policy; None: no CUDA build).
    pub reference_reduced_precision: Option<ReducedPrecision>,
    /// ORT CUDA EP `use_tf32` (None: the run's EP is not CUDA).
    pub ort_cuda_use_tf32: Option<bool>,
    pub tf32_env: Tf32Env,
    /// The probe's results, when a GPU run ran it.
    pub tf32_probe: Vec<ProbeResult>,
}

impl GpuMetadata {
    /// The state of a run on `eps` (probe results added by the caller).
    pub fn of(eps: &[RunEp]) -> Self {
        GpuMetadata {
            reference_device: device_spec().map_or_else(|e| format!("invalid ({e})"), |s| s.to_string()),
            reference_reduced_precision: onnx_parity_reference::device::reduced_precision(),
            ort_cuda_use_tf32: eps.iter().any(|e| e.is_cuda()).then_some(false),
            tf32_env: crate::context::current().tf32(),
            tf32_probe: Vec::new(),
        }
    }
}

impl GpuMetadata {
    /// Whether the run used a GPU (the reference on one, or a CUDA EP).
    pub fn used_gpu(&self) -> bool {
        self.reference_device != "cpu" || self.ort_cuda_use_tf32.is_some() || !self.tf32_probe.is_empty()
    }

    /// The report's TF32 line: on a CPU run that no GPU was used (TF32 does not apply); else the
    /// override and who set it.
    pub fn tf32_line(&self) -> String {
        if !self.used_gpu() {
            return "no GPU used (reference on the CPU, no CUDA EP): TF32 does not apply".into();
        }
        format!(
            "NVIDIA_TF32_OVERRIDE={} (set by {})",
            self.tf32_env.nvidia_tf32_override.as_deref().unwrap_or("unset"),
            self.tf32_env.set_by
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The TF32 probe.

/// One back end's probe outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub backend: String,
    /// `max |got − exact| / |exact|` over the product's elements (exact: f64 from the same f32 inputs).
    pub max_rel_err: f64,
    pub tf32_like: bool,
}

/// The probe's inputs `A [M, K]`, `B [K, N]` (row-major): `1 + u·2⁻¹¹`, `u ∈ (0, 1)` from a fixed
/// hash. Exact in f32 (12 significant bits); TF32 keeps 10 and rounds each to 1.
pub fn probe_inputs() -> (Vec<f32>, Vec<f32>) {
    let value = |i: usize, salt: u32| {
        let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt).rotate_left(13).wrapping_mul(2_246_822_519);
        // u in 1/16 .. 15/16 in steps of 1/16: 1 + u·2⁻¹¹ needs 15 bits, exact in f32.
        let u = ((h >> 28) % 15 + 1) as f32 / 16.0;
        1.0 + u * (1.0 / 2048.0)
    };
    let a = (0..PROBE_M * PROBE_K).map(|i| value(i, 0x9e37)).collect();
    let b = (0..PROBE_K * PROBE_N).map(|i| value(i, 0x7f4a)).collect();
    (a, b)
}

/// The exact product in f64 `[M, N]`.
pub fn exact_product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
        }
    }
    out
}

/// The decision: `got` (a back end's `[M, N]` product of the probe inputs) against the f64 product.
/// A wrong-sized or non-finite result counts as TF32-like (infinitely wrong).
pub fn judge(backend: &str, a: &[f32], b: &[f32], got: &[f32]) -> ProbeResult {
    let exact = exact_product(a, b, PROBE_M, PROBE_K, PROBE_N);
    let max_rel_err = if got.len() != exact.len() {
        f64::INFINITY
    } else {
        exact.iter().zip(got).map(|(&e, &g)| if g.is_finite() { (g as f64 - e).abs() / e.abs() } else { f64::INFINITY }).fold(0.0, f64::max)
    };
    // Negated on purpose: a NaN error (incomparable) must count as TF32-like, never as f32.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let tf32_like = !(max_rel_err <= PROBE_MAX_REL_ERR);
    ProbeResult { backend: backend.to_string(), max_rel_err, tf32_like }
}

/// A probe result as the run's verdict: an error when TF32-like.
pub fn require_f32(r: &ProbeResult) -> Result<(), GpuError> {
    if r.tf32_like {
        let override_value = crate::context::current().tf32().nvidia_tf32_override.unwrap_or_else(|| "(unset)".into());
        return Err(GpuError::Tf32Like { backend: r.backend.clone(), max_rel_err: r.max_rel_err, override_value });
    }
    Ok(())
}

/// The probe through candle on `device` (the reference's GEMM path: `Tensor::matmul`).
pub fn probe_candle(device: &Device) -> Result<ProbeResult, GpuError> {
    let backend = format!("candle {}", DeviceSpec::of(device));
    let err = |source| GpuError::Candle { backend: "candle", source };
    let (a, b) = probe_inputs();
    let ta = Tensor::from_slice(&a, (PROBE_M, PROBE_K), device).map_err(err)?;
    let tb = Tensor::from_slice(&b, (PROBE_K, PROBE_N), device).map_err(err)?;
    let got = ta.matmul(&tb).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).map_err(err)?;
    Ok(judge(&backend, &a, &b, &got))
}

/// A one-node ONNX model `Y = MatMul(A, B)`, f32, static shapes (opset 13).
pub fn matmul_model() -> Vec<u8> {
    use crate::onnx::proto::{
        DimValue, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TensorTypeProto, TypeProto,
        ValueInfoProto,
    };
    let value = |name: &str, dims: [usize; 2]| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: 1, // FLOAT
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { value: Some(DimValue::DimValue(d as i64)) }).collect(),
                }),
            }),
        }),
    };
    let model = ModelProto {
        ir_version: 8,
        producer_name: "onnx-parity tf32 probe".into(),
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: vec!["A".into(), "B".into()],
                output: vec!["Y".into()],
                name: "probe".into(),
                op_type: "MatMul".into(),
                ..Default::default()
            }],
            name: "tf32_probe".into(),
            input: vec![value("A", [PROBE_M, PROBE_K]), value("B", [PROBE_K, PROBE_N])],
            output: vec![value("Y", [PROBE_M, PROBE_N])],
            ..Default::default()
        }),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 13 }],
        ..Default::default()
    };
    prost::Message::encode_to_vec(&model)
}

/// The probe through ONNX Runtime on `ep` (CUDA with `use_tf32=0` and `error_on_failure`, as
/// every parity session on it: the same builder).
pub fn probe_ort(ep: RunEp) -> Result<ProbeResult, GpuError> {
    use ort::value::Tensor as OrtTensor;
    let e = |source: ort::Error| GpuError::Ort { source };
    use crate::runtime::session::{self, ModelSource, SessionOptions};
    let model = matmul_model();
    let source =
        ModelSource::Memory { path: std::path::Path::new("<TF32 probe>"), bytes: &model, external_data_dir: std::path::Path::new(".") };
    let mut session = session::open(source, &SessionOptions::on(ep))?;
    let (a, b) = probe_inputs();
    let ta = OrtTensor::from_array((vec![PROBE_M, PROBE_K], a.clone())).map_err(e)?;
    let tb = OrtTensor::from_array((vec![PROBE_K, PROBE_N], b.clone())).map_err(e)?;
    let out = session.run(ort::inputs! { "A" => ta, "B" => tb }).map_err(e)?;
    let y = out.get("Y").ok_or(GpuError::NoOutput)?;
    let (_, got) = y.try_extract_tensor::<f32>().map_err(e)?;
    Ok(judge(&format!("onnxruntime {}", ep.label()), &a, &b, got))
}

/// The probe a GPU run on `eps` starts with: candle on the reference's device when it is not the
/// CPU, ORT on each CUDA EP among `eps`; an error when either is TF32-like. Returns what it
/// measured (empty on a CPU-only run, which has nothing to probe).
pub fn probe_gpu_run(eps: &[RunEp]) -> Result<Vec<ProbeResult>, GpuError> {
    // The probe may open the process's ONNX Runtime: for the run's EPs.
    crate::runtime::provision::select(eps).map_err(crate::runtime::session::SessionError::from)?;
    let mut results = Vec::new();
    let device = reference_device()?;
    if !device.is_cpu() {
        results.push(probe_candle(&device)?);
    }
    for &ep in eps.iter().filter(|e| e.is_cuda()) {
        results.push(probe_ort(ep)?);
    }
    for r in &results {
        tracing::info!(backend = %r.backend, max_rel_err = r.max_rel_err, tf32_like = r.tf32_like, "TF32 probe");
        require_f32(r)?;
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the report's TF32 line (issue 39): a CPU run says no GPU was used, never "set by
    /// unset"; a GPU run names the override and who set it.
    #[test]
    fn tf32_line_says_whether_a_gpu_was_used() {
        let mut m = GpuMetadata::of(&[RunEp::Cpu]);
        m.reference_device = "cpu".into();
        m.ort_cuda_use_tf32 = None;
        m.tf32_probe.clear();
        assert!(m.tf32_line().starts_with("no GPU used"), "{}", m.tf32_line());
        m.reference_device = "cuda:0".into();
        m.tf32_env = crate::tf32::decide(None, true).1;
        assert_eq!(m.tf32_line(), "NVIDIA_TF32_OVERRIDE=0 (set by harness)");
    }

    /// Guards the probe's decision: the exact f32 product passes; a simulated TF32 product
    /// (inputs' mantissas rounded to 10 bits, then multiplied) is flagged, far above the bound.
    #[test]
    fn probe_flags_tf32_and_passes_f32() {
        let (a, b) = probe_inputs();
        let f32_product = matmul_f32(&a, &b);
        let ok = judge("f32", &a, &b, &f32_product);
        assert!(!ok.tf32_like && ok.max_rel_err < 1e-6, "{ok:?}");

        let (ta, tb): (Vec<f32>, Vec<f32>) = (a.iter().map(|&x| tf32_round(x)).collect(), b.iter().map(|&x| tf32_round(x)).collect());
        let tf32 = judge("tf32", &a, &b, &matmul_f32(&ta, &tb));
        assert!(tf32.tf32_like && tf32.max_rel_err > 10.0 * PROBE_MAX_REL_ERR, "{tf32:?}");
        assert!(require_f32(&tf32).is_err() && require_f32(&ok).is_ok());

        // Wrong size / NaN: never a pass.
        assert!(judge("short", &a, &b, &f32_product[1..]).tf32_like);
        let mut nan = f32_product.clone();
        nan[3] = f32::NAN;
        assert!(judge("nan", &a, &b, &nan).tf32_like);
    }

    /// Guards the candle probe end to end on the CPU device (f32 gemm: passes).
    #[test]
    fn candle_probe_on_cpu_passes() {
        let r = probe_candle(&Device::Cpu).expect("probe");
        assert!(!r.tf32_like, "{r:?}");
        assert_eq!(r.backend, "candle cpu");
    }

    /// Guards the probe's ONNX graph: it decodes with the project's own reader into one MatMul
    /// with the probe's static shapes.
    #[test]
    fn matmul_model_is_well_formed() {
        let bytes = matmul_model();
        let g = crate::onnx::graph::GraphSummary::from_bytes(&bytes, std::path::Path::new("probe.onnx")).expect("decodes");
        assert_eq!(g.input("A").map(|s| s.shape_string()), Some(format!("[{PROBE_M}, {PROBE_K}]")));
        assert_eq!(g.output("Y").map(|s| s.shape_string()), Some(format!("[{PROBE_M}, {PROBE_N}]")));
    }

    fn matmul_f32(a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; PROBE_M * PROBE_N];
        for i in 0..PROBE_M {
            for j in 0..PROBE_N {
                out[i * PROBE_N + j] = (0..PROBE_K).map(|p| a[i * PROBE_K + p] * b[p * PROBE_N + j]).sum();
            }
        }
        out
    }

    /// Round to nearest with a 10-bit mantissa (what TF32 tensor cores keep of an f32 input).
    fn tf32_round(x: f32) -> f32 {
        let bits = x.to_bits();
        let drop = 23 - 10;
        let half = 1u32 << (drop - 1);
        f32::from_bits((bits + half) & !((1u32 << drop) - 1))
    }
}
