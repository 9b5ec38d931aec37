//! Where the reference computes: the CPU (the default, the numerics every committed bound was
//! measured on) or a CUDA device (`--features cuda`), chosen once before the weights load; every
//! tensor of a model lives on that device.
//!
//! On CUDA the compute stays f32 and cuBLAS's reduced-precision modes are switched off before the
//! first kernel ([`DeviceSpec::open`]): TF32 tensor-core GEMMs (10-bit mantissa) alone move
//! Gemma logits by ~1e-2, far above the f32 rounding the parity bounds are set at.
//!
//! Where the CUDA path rounds differently from the CPU path (documented, not hidden):
//! - matmuls run in cuBLAS (`CUBLAS_COMPUTE_32F`, f32 accumulate) in its own summation order,
//!   not the `gemm` crate's: results differ from the CPU's by f32 rounding (~1e-7 relative);
//! - RMSNorm / LayerNorm use candle's composite ops (square, mean, sqrt, recip) instead of the
//!   fused CPU kernels that sum in PyTorch's pairwise order;
//! - GELU-tanh, SiLU and softcapping use candle's CUDA unary kernels (`tanhf`, `expf`) instead of
//!   the CPU's branch-free f64-evaluated `tanh` ([`crate::nn::ops`]);
//! - MoE accumulation, vision pooling and PLE row lookups compute on the host exactly as on the
//!   CPU (their inputs are copied back), so those steps add no difference of their own.
//!
//! `scripts/gpu-check.sh` bounds the sum of these on every fixture (logits ≤ 1e-5 apart).

use candle_core::Device;

/// A device as the harness names it: `cpu`, `cuda` (ordinal 0) or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    Cuda(usize),
}

/// Why a device could not be named or opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("unknown device {0:?}: expected cpu, cuda or cuda:N")]
    Unknown(String),
    #[error("device {0}: this build has no CUDA support (rebuild with `--features cuda`)")]
    NotCompiled(DeviceSpec),
    #[error("cannot open {spec}: {source}")]
    Open {
        spec: DeviceSpec,
        #[source]
        source: candle_core::Error,
    },
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "" | "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| DeviceError::Unknown(s.to_string())),
        }
    }
}

/// cuBLAS's reduced-precision switches as candle holds them (all `false` is the reference's
/// policy; reported in the run's metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReducedPrecision {
    /// f32 GEMMs may use TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    pub f32_tf32: bool,
    /// f16 GEMMs may accumulate in f16.
    pub f16: bool,
    /// bf16 GEMMs may accumulate in reduced precision.
    pub bf16: bool,
}

/// Turns every cuBLAS reduced-precision mode off (a no-op without the cuda feature).
pub fn disable_reduced_precision() {
    candle_core::cuda::set_gemm_reduced_precision_f32(false);
    candle_core::cuda::set_gemm_reduced_precision_f16(false);
    candle_core::cuda::set_gemm_reduced_precision_bf16(false);
}

/// The current reduced-precision switches; `None` in a build without CUDA (candle's stand-in
/// back end answers `true` for all three, which would misreport a CPU run).
pub fn reduced_precision() -> Option<ReducedPrecision> {
    CUDA_COMPILED.then(|| ReducedPrecision {
        f32_tf32: candle_core::cuda::gemm_reduced_precision_f32(),
        f16: candle_core::cuda::gemm_reduced_precision_f16(),
        bf16: candle_core::cuda::gemm_reduced_precision_bf16(),
    })
}

/// Whether this build can open CUDA devices.
pub const CUDA_COMPILED: bool = cfg!(feature = "cuda");

impl DeviceSpec {
    /// Opens the device. For CUDA, reduced precision is switched off first, so no kernel of this
    /// process runs a TF32 GEMM through candle.
    pub fn open(self) -> Result<Device, DeviceError> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(_) if !CUDA_COMPILED => Err(DeviceError::NotCompiled(self)),
            DeviceSpec::Cuda(n) => {
                disable_reduced_precision();
                Device::new_cuda(n).map_err(|source| DeviceError::Open { spec: self, source })
            }
        }
    }

    /// The spec of an open device.
    pub fn of(device: &Device) -> Self {
        match device.location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => DeviceSpec::Cuda(gpu_id),
            _ => DeviceSpec::Cpu,
        }
    }
}

/// Device memory in use and in all (bytes), as the driver counts it (every process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub used: u64,
    pub total: u64,
}

/// Hands what models dropped on `device` freed back to the driver, and says how much of the
/// device is in use afterwards (`None` on the CPU). candle allocates through cudarc's
/// stream-ordered allocator (`cuMemAllocAsync` where the device has memory pools), whose pool
/// keeps freed blocks until the next synchronisation (release threshold 0): without one, the
/// reference's weights stay reserved while ONNX Runtime's session allocates beside them and the
/// GPU's peak is the sum of both sides, not the larger.
pub fn release(device: &Device) -> Result<Option<DeviceMemory>, candle_core::Error> {
    device.synchronize()?;
    memory_in_use(device)
}

#[cfg(feature = "cuda")]
fn memory_in_use(device: &Device) -> Result<Option<DeviceMemory>, candle_core::Error> {
    let Device::Cuda(cuda) = device else { return Ok(None) };
    let (free, total) = cuda.cuda_stream().context().mem_get_info().map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    Ok(Some(DeviceMemory { used: (total - free) as u64, total: total as u64 }))
}

#[cfg(not(feature = "cuda"))]
fn memory_in_use(_device: &Device) -> Result<Option<DeviceMemory>, candle_core::Error> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the `ONNX_PARITY_DEVICE` grammar: cpu (default), cuda = cuda:0, cuda:N; others named.
    #[test]
    fn parse_device_specs() {
        assert_eq!("cpu".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cpu));
        assert_eq!("".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cpu));
        assert_eq!("CUDA".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:3".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cuda(3)));
        assert!(matches!("cuda:x".parse::<DeviceSpec>(), Err(DeviceError::Unknown(_))));
        assert!(matches!("metal".parse::<DeviceSpec>(), Err(DeviceError::Unknown(_))));
        assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
    }

    /// Guards the policy: opening a device leaves every reduced-precision mode off, and a build
    /// without CUDA says so instead of falling back to the CPU.
    #[test]
    fn open_keeps_reduced_precision_off() {
        assert!(matches!(DeviceSpec::Cpu.open(), Ok(Device::Cpu)));
        if !CUDA_COMPILED {
            assert!(matches!(DeviceSpec::Cuda(0).open(), Err(DeviceError::NotCompiled(_))));
        }
        assert_eq!(release(&Device::Cpu).ok(), Some(None), "the CPU has no device memory to release");
        disable_reduced_precision();
        let expected = CUDA_COMPILED.then_some(ReducedPrecision { f32_tf32: false, f16: false, bf16: false });
        assert_eq!(reduced_precision(), expected);
    }
}
