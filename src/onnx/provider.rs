//! The execution provider every parity session runs on, chosen at run time:
//! `ONNX_PARITY_EP=cpu|cuda[:N]|webgpu|openvino|tensorrt-rtx` (default `cpu`).
//!
//! Where each comes from: the CPU EP is part of every ONNX Runtime library; the CUDA EP is built
//! into the `onnxruntime-gpu` wheel's library; WebGPU, OpenVINO and TensorRT-RTX are plugin EPs,
//! each in its own wheel (`onnxruntime-ep-webgpu`, …), fetched into the cache as the runtime is,
//! registered with the environment and attached to sessions through the devices it reports. A
//! plugin EP that reports no device is an error naming the device that was not found; a session
//! that puts compute nodes on the CPU EP although another EP was asked for is an error listing
//! them ([`super::placement`]), never a silent CPU run.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use super::wheel::Wheel;
use crate::eps::Ep;

/// The variable that selects the execution provider.
pub use crate::context::EP_VAR;

/// An execution provider a run can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEp {
    Cpu,
    /// The CUDA EP on device `N` (TF32 off).
    Cuda(u32),
    Webgpu,
    Openvino,
    TensorrtRtx,
}

/// `ONNX_PARITY_EP` names no execution provider this harness knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{EP_VAR}={value}: expected one of cpu, cuda, cuda:N, webgpu, openvino, tensorrt-rtx")]
pub struct UnknownEp {
    pub value: String,
}

impl FromStr for RunEp {
    type Err = UnknownEp;
    fn from_str(s: &str) -> Result<Self, UnknownEp> {
        let unknown = || UnknownEp { value: s.to_string() };
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "cpu" => Ok(RunEp::Cpu),
            "cuda" => Ok(RunEp::Cuda(0)),
            "webgpu" => Ok(RunEp::Webgpu),
            "openvino" => Ok(RunEp::Openvino),
            "tensorrt-rtx" | "trt-rtx" | "nvtensorrtrtx" => Ok(RunEp::TensorrtRtx),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n.parse().map(RunEp::Cuda).map_err(|_| unknown()),
                None => Err(unknown()),
            },
        }
    }
}

impl fmt::Display for RunEp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunEp::Cpu => f.write_str("cpu"),
            RunEp::Cuda(n) => write!(f, "cuda:{n}"),
            RunEp::Webgpu => f.write_str("webgpu"),
            RunEp::Openvino => f.write_str("openvino"),
            RunEp::TensorrtRtx => f.write_str("tensorrt-rtx"),
        }
    }
}

/// A plugin EP's wheel and the device kind it runs on (for "no device found").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub wheel: Wheel,
    /// What the EP needs (`WebGPU adapter (Vulkan on Linux)`).
    pub device: &'static str,
}

impl RunEp {
    /// ONNX Runtime's name for the EP (what node placements and devices report).
    pub fn ort_name(self) -> &'static str {
        match self {
            RunEp::Cpu => "CPUExecutionProvider",
            RunEp::Cuda(_) => "CUDAExecutionProvider",
            RunEp::Webgpu => "WebGpuExecutionProvider",
            RunEp::Openvino => "OpenVINOExecutionProvider",
            RunEp::TensorrtRtx => "NvTensorRTRTXExecutionProvider",
        }
    }

    /// The ONNX Runtime wheel whose library the run loads (the CUDA EP is built into the GPU
    /// wheel's; plugins load into the CPU wheel's).
    pub fn runtime_wheel(self) -> &'static str {
        match self {
            RunEp::Cuda(_) => "onnxruntime-gpu",
            _ => "onnxruntime",
        }
    }

    /// The plugin wheel of a plugin EP (pinned: a plugin is built against an ORT API version).
    pub fn plugin(self) -> Option<Plugin> {
        let (name, version, dir, lib, device) = match self {
            RunEp::Cpu | RunEp::Cuda(_) => return None,
            RunEp::Webgpu => (
                "onnxruntime-ep-webgpu",
                "0.4.0",
                "onnxruntime_ep_webgpu/",
                "libonnxruntime_providers_webgpu.so",
                "WebGPU adapter (Vulkan on Linux)",
            ),
            RunEp::Openvino => (
                "onnxruntime-ep-openvino",
                "1.8.1",
                "onnxruntime_ep_openvino/",
                "libonnxruntime_providers_openvino_plugin.so",
                "OpenVINO device (Intel CPU, GPU or NPU)",
            ),
            RunEp::TensorrtRtx => (
                "onnxruntime-ep-nv-tensorrt-rtx",
                "0.5.0",
                "onnxruntime_ep_nv_tensorrt_rtx/",
                "libonnxruntime_providers_nv_tensorrt_rtx.so",
                "NVIDIA RTX GPU",
            ),
        };
        Some(Plugin { wheel: Wheel { name, version, member_dir: dir, library: lib.into() }, device })
    }

    /// The mobius build this EP deploys (whose contract L1 checks when a case pins none).
    pub fn mobius_ep(self) -> Option<Ep> {
        match self {
            RunEp::Cpu => None,
            RunEp::Cuda(_) => Some(Ep::Cuda),
            RunEp::Webgpu => Some(Ep::Webgpu),
            RunEp::Openvino => Some(Ep::Openvino),
            RunEp::TensorrtRtx => Some(Ep::TrtRtx),
        }
    }

    /// The EP a run uses for mobius's build for `ep` (device 0 for CUDA); `None` for the builds
    /// that are for no EP in particular (`default`, `cpu`) or for one this harness cannot run
    /// (`dml`, `qnn`, `mlx`). The inverse of [`RunEp::mobius_ep`].
    pub fn for_build(ep: Ep) -> Option<RunEp> {
        match ep {
            Ep::Cuda => Some(RunEp::Cuda(0)),
            Ep::Webgpu => Some(RunEp::Webgpu),
            Ep::Openvino => Some(RunEp::Openvino),
            Ep::TrtRtx => Some(RunEp::TensorrtRtx),
            Ep::Default | Ep::Cpu | Ep::Dml | Ep::Qnn | Ep::Mlx => None,
        }
    }

    /// Whether this is the CPU EP (every node runs on the CPU by request).
    pub fn is_cpu(self) -> bool {
        self == RunEp::Cpu
    }
}

static RUN_EP: OnceLock<Result<RunEp, UnknownEp>> = OnceLock::new();

/// The run's execution provider (`ONNX_PARITY_EP`), read once per process.
pub fn run_ep() -> Result<RunEp, UnknownEp> {
    RUN_EP.get_or_init(|| crate::context::current().ep.parse()).clone()
}

/// The run's EP, or the CPU when `ONNX_PARITY_EP` is invalid (for reports and skip reasons:
/// the invalid value fails the first session with [`UnknownEp`]).
pub fn run_ep_or_cpu() -> RunEp {
    run_ep().unwrap_or(RunEp::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the variable's grammar and that an unknown value is an error naming it.
    #[test]
    fn parses_the_documented_values() {
        assert_eq!("".parse(), Ok(RunEp::Cpu));
        assert_eq!("cuda".parse(), Ok(RunEp::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(RunEp::Cuda(3)));
        assert_eq!("WebGPU".parse(), Ok(RunEp::Webgpu));
        assert_eq!("trt-rtx".parse(), Ok(RunEp::TensorrtRtx));
        let e = "cuda:x".parse::<RunEp>().expect_err("bad device").to_string();
        assert!(e.starts_with("ONNX_PARITY_EP=cuda:x: expected one of cpu"), "{e}");
        assert!("rocm".parse::<RunEp>().is_err());
        assert_eq!(RunEp::Cuda(1).to_string(), "cuda:1");
        assert_eq!(RunEp::Webgpu.plugin().map(|p| p.wheel.spec()), Some("onnxruntime-ep-webgpu==0.4.0".into()));
        assert!(RunEp::Cpu.plugin().is_none() && RunEp::Cuda(0).plugin().is_none());
    }

    /// Guards: the EP a build is run on is the one whose build it is (the inverse of `mobius_ep`).
    #[test]
    fn build_eps_map_back() {
        for run in [RunEp::Cuda(0), RunEp::Webgpu, RunEp::Openvino, RunEp::TensorrtRtx] {
            assert_eq!(run.mobius_ep().and_then(RunEp::for_build), Some(run));
        }
        assert_eq!(RunEp::for_build(Ep::Default), None);
        assert_eq!(RunEp::for_build(Ep::Dml), None);
    }
}
