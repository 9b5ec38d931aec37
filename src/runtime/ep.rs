//! How ONNX Runtime provides each execution provider a trial can run on ([`RunEp`]): the CPU EP
//! is part of every ONNX Runtime library; the CUDA EP is built into the `onnxruntime-gpu`
//! wheel's library; WebGPU, OpenVINO and TensorRT-RTX are plugin EPs, each in its own wheel
//! (`onnxruntime-ep-webgpu`, …), fetched into the cache as the runtime is, registered with the
//! environment and attached to sessions through the devices it reports. A plugin EP that reports
//! no device is an error naming the device that was not found; where a session put compute
//! nodes on the CPU EP although another EP was asked for, the session says so
//! ([`super::placement`]) and L1 reports it as a finding of the build on that EP.

use super::wheel::Wheel;
pub use crate::eps::{RunEp, UnknownEp, EP_VAR};

/// A plugin EP's wheel and the device kind it runs on (for "no device found").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub wheel: Wheel,
    /// What the EP needs (`WebGPU adapter (Vulkan on Linux)`).
    pub device: &'static str,
}

/// The ONNX Runtime wheel whose library a run of `eps` loads: the GPU wheel's when one of them is
/// CUDA (its library holds the CPU EP too), else the CPU wheel's (plugins load into it).
pub fn runtime_wheel_name(eps: &[RunEp]) -> &'static str {
    match eps.iter().any(|e| e.is_cuda()) {
        true => "onnxruntime-gpu",
        false => "onnxruntime",
    }
}

/// The plugin wheel of a plugin EP (pinned: a plugin is built against an ORT API version).
pub fn plugin(ep: RunEp) -> Option<Plugin> {
    let (name, version, dir, lib, device) = match ep {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the GPU wheel is loaded when CUDA is among the EPs (its library has the CPU EP
    /// too); plugin EPs name their pinned wheels; CPU and CUDA are no plugins.
    #[test]
    fn libraries_follow_the_selected_eps() {
        assert_eq!(runtime_wheel_name(&[RunEp::Cpu]), "onnxruntime");
        assert_eq!(runtime_wheel_name(&[RunEp::Cpu, RunEp::Cuda(0)]), "onnxruntime-gpu");
        assert_eq!(runtime_wheel_name(&[RunEp::Webgpu]), "onnxruntime");
        assert_eq!(plugin(RunEp::Webgpu).map(|p| p.wheel.spec()), Some("onnxruntime-ep-webgpu==0.4.0".into()));
        assert!(plugin(RunEp::Cpu).is_none() && plugin(RunEp::Cuda(0)).is_none());
    }
}
