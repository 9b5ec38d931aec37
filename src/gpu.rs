//! GPU runs: where the reference computes (`ONNX_PARITY_DEVICE`), the TF32 policy of both back
//! ends, and the TF32 probe that proves the policy held.
//!
//! TF32 (tensor-core GEMMs with a 10-bit mantissa) is the best-known source of spurious f32
//! parity failures on GPUs (~1e-2 on Gemma logits). The policy:
//! - `NVIDIA_TF32_OVERRIDE=0` is set for the process before any CUDA context exists (cuBLAS and
//!   cuDNN read it once), *unless the user set it*: an explicit value is honoured, never
//!   overwritten, and reported ([`Tf32Env`]). [`decide`] is the pure rule, [`apply_policy`] runs
//!   it against an environment and calls the initialiser only after the variable is set.
//! - ONNX Runtime's CUDA EP: `use_tf32=0` and `error_on_failure` (no silent CPU fallback).
//! - candle's cuBLAS reduced-precision switches (f32 TF32, f16, bf16) off before the first kernel
//!   ([`onnx_parity_reference::device::DeviceSpec::open`]).
//! - The probe ([`probe_candle`], [`probe_ort`]) multiplies matrices whose exact product TF32
//!   cannot reach (every input is `1 + u·2⁻¹¹`, which a 10-bit mantissa rounds to 1) and compares
//!   with f64 on the CPU: f32 arithmetic errs ~1e-7 relative, TF32 ~5e-4; above
//!   [`PROBE_MAX_REL_ERR`] the run fails. [`judge`] is the decision, testable on the CPU.

use std::sync::OnceLock;

use candle_core::{Device, Tensor};
use onnx_parity_reference::device::{DeviceError, DeviceSpec, ReducedPrecision};
use serde::{Deserialize, Serialize};

/// Selects the reference's device: `cpu` (default), `cuda`, `cuda:N`.
pub const DEVICE_VAR: &str = "ONNX_PARITY_DEVICE";
/// NVIDIA's process-wide TF32 switch (`0` disables TF32 in cuBLAS/cuDNN whatever the API asks).
pub const TF32_OVERRIDE_VAR: &str = "NVIDIA_TF32_OVERRIDE";
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
    /// The device named by `ONNX_PARITY_DEVICE` is unknown or cannot be opened (the message, so
    /// the once-opened device's error can be returned again).
    #[error("{DEVICE_VAR}: {0}")]
    Device(String),
    #[error("TF32 probe ({backend}): {source}")]
    Candle {
        backend: &'static str,
        #[source]
        source: candle_core::Error,
    },
    #[error("TF32 probe (onnxruntime): {0}")]
    Ort(String),
    #[error(
        "TF32 probe: {backend} computes TF32-like (max relative error {max_rel_err:.3e} > {PROBE_MAX_REL_ERR:e}; \
         f32 gives ~1e-7). {TF32_OVERRIDE_VAR}={override_value}"
    )]
    Tf32Like { backend: String, max_rel_err: f64, override_value: String },
}

// ---------------------------------------------------------------------------------------------
// The TF32 environment policy.

/// Who chose the process's `NVIDIA_TF32_OVERRIDE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverrideSource {
    /// onnx-parity set it to `0` (a CUDA build, the user had not set it).
    Harness,
    /// The user's explicit value, honoured as is.
    User,
    /// Not set (a build without CUDA: nothing reads it).
    Unset,
}

/// The TF32 environment a run had (report metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tf32Env {
    /// `NVIDIA_TF32_OVERRIDE` as the CUDA libraries of this process see it.
    pub nvidia_tf32_override: Option<String>,
    pub set_by: OverrideSource,
}

impl OverrideSource {
    pub fn as_str(self) -> &'static str {
        match self {
            OverrideSource::Harness => "harness",
            OverrideSource::User => "user",
            OverrideSource::Unset => "unset",
        }
    }
}

impl std::fmt::Display for OverrideSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Tf32Env {
    /// Whether the override disables TF32 process-wide (`0`). Otherwise only the programmatic
    /// switches (ORT `use_tf32=0`, candle's flags) keep it off, and the probe checks they do.
    pub fn forces_off(&self) -> bool {
        self.nvidia_tf32_override.as_deref().map(str::trim) == Some("0")
    }
}

/// The pure rule: given the variable's current value and whether this build can touch CUDA,
/// what to set (if anything) and what to report. A set-but-empty variable counts as unset.
pub fn decide(current: Option<&str>, cuda: bool) -> (Option<&'static str>, Tf32Env) {
    match current.filter(|v| !v.trim().is_empty()) {
        Some(v) => (None, Tf32Env { nvidia_tf32_override: Some(v.to_string()), set_by: OverrideSource::User }),
        None if cuda => (Some("0"), Tf32Env { nvidia_tf32_override: Some("0".into()), set_by: OverrideSource::Harness }),
        None => (None, Tf32Env { nvidia_tf32_override: None, set_by: OverrideSource::Unset }),
    }
}

/// The process environment as [`apply_policy`] needs it (a fake in tests).
pub trait EnvAccess {
    fn get(&self, key: &str) -> Option<String>;
    fn set(&mut self, key: &str, value: &str);
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvAccess for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }

    fn set(&mut self, key: &str, value: &str) {
        // Called once, from `tf32_env`'s OnceLock, at startup (main, the test harness) or at the
        // latest right before the first CUDA context: no other thread reads the environment then.
        std::env::set_var(key, value);
    }
}

/// Applies [`decide`] to `env`, then runs `init` (which may create CUDA contexts) with the
/// result and the environment as it then is: the variable is always in place before `init` runs.
pub fn apply_policy<T>(env: &mut dyn EnvAccess, cuda: bool, init: impl FnOnce(&Tf32Env, &dyn EnvAccess) -> T) -> T {
    let current = env.get(TF32_OVERRIDE_VAR);
    let (set, report) = decide(current.as_deref(), cuda);
    if let Some(v) = set {
        env.set(TF32_OVERRIDE_VAR, v);
    }
    if report.set_by == OverrideSource::User && !report.forces_off() {
        tracing::warn!(
            "{TF32_OVERRIDE_VAR}={} (set by you, honoured): TF32 is not disabled process-wide; the TF32 probe checks each back end",
            report.nvidia_tf32_override.as_deref().unwrap_or_default()
        );
    }
    init(&report, &*env)
}

static TF32_ENV: OnceLock<Tf32Env> = OnceLock::new();

/// The process's TF32 environment, applying the policy on first call. Call it before anything
/// that may create a CUDA context: `main` and the test harness call it first thing, ORT's
/// environment and the reference's device open call it again (a no-op then).
pub fn tf32_env() -> &'static Tf32Env {
    TF32_ENV.get_or_init(|| apply_policy(&mut ProcessEnv, cfg!(feature = "cuda"), |r, _| r.clone()))
}

// ---------------------------------------------------------------------------------------------
// The reference's device.

/// `ONNX_PARITY_DEVICE` parsed (unset: the CPU).
pub fn device_spec() -> Result<DeviceSpec, DeviceError> {
    match std::env::var(DEVICE_VAR) {
        Ok(v) => v.parse(),
        Err(_) => Ok(DeviceSpec::Cpu),
    }
}

impl From<DeviceError> for GpuError {
    fn from(e: DeviceError) -> Self {
        GpuError::Device(e.to_string())
    }
}

static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();

/// The reference's device, opened once per process (a CUDA device holds a context and a cuBLAS
/// handle; every model of the run shares it). TF32 policy first, then the device.
pub fn reference_device() -> Result<Device, GpuError> {
    let spec = device_spec()?;
    if spec == DeviceSpec::Cpu {
        return Ok(Device::Cpu);
    }
    tf32_env();
    DEVICE.get_or_init(|| spec.open().map_err(|e| e.to_string())).clone().map_err(GpuError::Device)
}

/// What the report records about devices and TF32.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuMetadata {
    /// The reference's device (`cpu`, `cuda:N`).
    pub reference_device: String,
    /// candle's cuBLAS reduced-precision switches (all false is the policy; None: no CUDA build).
    pub reference_reduced_precision: Option<ReducedPrecision>,
    /// ORT CUDA EP `use_tf32` (None: a CPU build).
    pub ort_cuda_use_tf32: Option<bool>,
    pub tf32_env: Tf32Env,
    /// The probe's results, when a GPU run ran it.
    pub tf32_probe: Vec<ProbeResult>,
}

impl GpuMetadata {
    /// The current state (probe results added by the caller).
    pub fn current() -> Self {
        GpuMetadata {
            reference_device: device_spec().map_or_else(|e| format!("invalid ({e})"), |s| s.to_string()),
            reference_reduced_precision: onnx_parity_reference::device::reduced_precision(),
            ort_cuda_use_tf32: cfg!(feature = "cuda").then_some(false),
            tf32_env: tf32_env().clone(),
            tf32_probe: Vec::new(),
        }
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
    ProbeResult { backend: backend.to_string(), max_rel_err, tf32_like: !(max_rel_err <= PROBE_MAX_REL_ERR) }
}

/// A probe result as the run's verdict: an error when TF32-like.
pub fn require_f32(r: &ProbeResult) -> Result<(), GpuError> {
    if r.tf32_like {
        let override_value = tf32_env().nvidia_tf32_override.clone().unwrap_or_else(|| "(unset)".into());
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

/// The probe through ONNX Runtime with this build's execution provider (CUDA with `use_tf32=0`
/// and `error_on_failure` in a cuda build, as every parity session; the CPU EP otherwise).
pub fn probe_ort() -> Result<ProbeResult, GpuError> {
    use ort::session::Session;
    use ort::value::Tensor as OrtTensor;
    let e = |m: &dyn std::fmt::Display| GpuError::Ort(m.to_string());
    let env = crate::onnx::runtime::environment().map_err(|x| e(&x))?;
    #[allow(unused_mut)]
    let mut builder = Session::builder(env).map_err(|x| e(&x))?;
    #[cfg(feature = "cuda")]
    {
        // The same EP settings as `onnx::pipeline::open_session`.
        builder =
            builder.with_execution_providers([ort::ep::CUDA::default().with_tf32(false).build().error_on_failure()]).map_err(|x| e(&x))?;
    }
    let mut session = builder.commit_from_memory(&matmul_model()).map_err(|x| e(&x))?;
    let (a, b) = probe_inputs();
    let ta = OrtTensor::from_array((vec![PROBE_M, PROBE_K], a.clone())).map_err(|x| e(&x))?;
    let tb = OrtTensor::from_array((vec![PROBE_K, PROBE_N], b.clone())).map_err(|x| e(&x))?;
    let out = session.run(ort::inputs! { "A" => ta, "B" => tb }).map_err(|x| e(&x))?;
    let y = out.get("Y").ok_or_else(|| e(&"no output Y"))?;
    let (_, got) = y.try_extract_tensor::<f32>().map_err(|x| e(&x))?;
    Ok(judge(&format!("onnxruntime {}", crate::onnx::runtime::execution_provider()), &a, &b, got))
}

/// The probe a GPU run starts with: candle on the reference's device when it is not the CPU,
/// ORT when this is a CUDA build; an error when either is TF32-like. Returns what it measured
/// (empty on a CPU-only run, which has nothing to probe).
pub fn probe_gpu_run() -> Result<Vec<ProbeResult>, GpuError> {
    tf32_env();
    let mut results = Vec::new();
    let device = reference_device()?;
    if !device.is_cpu() {
        results.push(probe_candle(&device)?);
    }
    if cfg!(feature = "cuda") {
        results.push(probe_ort()?);
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
    use std::collections::HashMap;

    /// A recording fake environment.
    #[derive(Default)]
    struct FakeEnv {
        vars: HashMap<String, String>,
        log: Vec<String>,
    }

    impl EnvAccess for FakeEnv {
        fn get(&self, key: &str) -> Option<String> {
            self.vars.get(key).cloned()
        }
        fn set(&mut self, key: &str, value: &str) {
            self.log.push(format!("set {key}={value}"));
            self.vars.insert(key.into(), value.into());
        }
    }

    /// Guards: in a CUDA build the override is set to 0 before the initialiser (the first CUDA
    /// context) runs — the initialiser reads it already set — and the report says the harness
    /// set it.
    #[test]
    fn override_set_before_init() {
        let mut env = FakeEnv::default();
        let (report, seen_by_init) = apply_policy(&mut env, true, |r, e| (r.clone(), e.get(TF32_OVERRIDE_VAR)));
        assert_eq!(seen_by_init.as_deref(), Some("0"));
        assert_eq!(env.log, vec!["set NVIDIA_TF32_OVERRIDE=0".to_string()]);
        assert_eq!(report, Tf32Env { nvidia_tf32_override: Some("0".into()), set_by: OverrideSource::Harness });
        assert!(report.forces_off());
        assert_eq!(serde_json::to_value(&report).expect("serialise")["set_by"], "harness");
    }

    /// Guards: a user's explicit value (opting in to TF32, or an explicit 0) is never overwritten
    /// and is reported as theirs.
    #[test]
    fn user_override_respected_and_reported() {
        for v in ["1", "0"] {
            let mut env = FakeEnv::default();
            env.vars.insert(TF32_OVERRIDE_VAR.into(), v.into());
            let report = apply_policy(&mut env, true, |r, _| r.clone());
            assert!(env.log.is_empty(), "the user's {v} must not be touched: {:?}", env.log);
            assert_eq!(env.vars.get(TF32_OVERRIDE_VAR).map(String::as_str), Some(v));
            assert_eq!(report, Tf32Env { nvidia_tf32_override: Some(v.into()), set_by: OverrideSource::User });
            assert_eq!(report.forces_off(), v == "0");
            let json = serde_json::to_value(&report).expect("serialise");
            assert_eq!(json["set_by"], "user");
            assert_eq!(json["nvidia_tf32_override"], v);
        }
    }

    /// Guards: a build without CUDA sets nothing (and says so); an empty value counts as unset.
    #[test]
    fn cpu_build_sets_nothing() {
        let mut env = FakeEnv::default();
        let report = apply_policy(&mut env, false, |r, _| r.clone());
        assert!(env.log.is_empty());
        assert_eq!(report.set_by, OverrideSource::Unset);
        assert_eq!(decide(Some(" "), true).0, Some("0"));
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
