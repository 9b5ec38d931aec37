//! The execution providers an export can be built for ([`Ep`]: what mobius's build for each one
//! looks like, its `EpCapabilities` table, `mobius/_execution_providers.py` in mobius-onnx 0.1.0)
//! and the ones a run executes trials on ([`RunEp`], selected by `ONNX_PARITY_EP`, a list). A
//! trial's EP is a value of its plan ([`crate::case::Candidate::ep`]), passed to the session it
//! opens; [`BuildTarget`] says which EPs a build is for, from what its exporter or case wrote.
//! How ONNX Runtime provides each EP (a library, a plugin wheel) is `crate::runtime::ep`'s.

use std::fmt;
use std::str::FromStr;

use crate::names::named_enum;

named_enum! {
    /// An execution provider, by mobius's `--ep` name.
    #[derive(PartialOrd, Ord)]
    pub enum Ep("execution provider") {
        /// mobius's portable build (`--ep default`): standard ONNX, no vendor fusions.
        Default = "default",
        Cpu = "cpu",
        Cuda = "cuda",
        Dml = "dml",
        Webgpu = "webgpu",
        Openvino = "openvino",
        Qnn = "qnn",
        TrtRtx = "trt-rtx",
        Mlx = "mlx",
    }
}

/// What mobius's build for an EP looks like (the fields of its `EpCapabilities` the harness can
/// see in a graph).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpBuild {
    /// Activation dtypes for which the build fuses attention into `GroupQueryAttention`.
    pub gqa_dtypes: &'static [&'static str],
    /// Largest single weight buffer the EP allows (WebGPU: the W3C default `maxBufferSize`).
    pub max_buffer_size: Option<u64>,
    /// Graph capture that cannot execute `Shape` / `ConstantOfShape` (`requires_graph_capture_rewrite`).
    pub shape_free_capture: bool,
    /// The EP runs `GroupQueryAttention` only up to this head_dim (ORT's CUDA kernel: 256).
    pub gqa_max_head_dim: Option<i64>,
    /// Highest default-domain opset the EP's kernels cover on older ONNX Runtime releases.
    pub max_opset: Option<OpsetCeiling>,
    /// A boolean `attn_mask` on the standard `Attention` op is unsafe (ORT's CUDA mask
    /// conversion turns it into NaN); the build must pass an additive float mask.
    pub needs_float_attention_mask: bool,
}

/// ONNX Runtime up to `through_ort` registers this EP's kernels only up to opset `max`: an
/// opset-24 graph there lands its Reshape / Squeeze / … on the CPU. mobius 0.1.0 documents it
/// for CUDA ("ORT <=1.24.x EPs didn't register kernels for opset 24 standard ops",
/// `mobius/_flags.py`, `ort_lower_opset_for_ep`) and lowers the declaration only on request
/// (`MOBIUS_ORT_LOWER_OPSET_FOR_EP=1`), so whether an opset-24 build is valid depends on the ORT
/// it is deployed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsetCeiling {
    pub max: i64,
    /// The last ORT release (major, minor) with the ceiling.
    pub through_ort: (u32, u32),
}

impl OpsetCeiling {
    /// Whether the ceiling holds for ORT `version` (`1.24.4`); an unreadable version is taken
    /// as an old one (the check then errs on the side of reporting).
    pub fn holds_for(&self, version: &str) -> bool {
        let mut parts = version.split('.').map(|p| p.parse::<u32>());
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => (major, minor) <= self.through_ort,
            _ => true,
        }
    }
}

/// WebGPU's `maxBufferSize` default (W3C WebGPU spec), mobius's `max_buffer_size` for `webgpu`.
pub const WEBGPU_MAX_BUFFER: u64 = 268_435_456;

impl Ep {
    /// mobius's build for this EP.
    pub fn build(self) -> EpBuild {
        let none = EpBuild {
            gqa_dtypes: &[],
            max_buffer_size: None,
            shape_free_capture: false,
            gqa_max_head_dim: None,
            max_opset: None,
            needs_float_attention_mask: false,
        };
        match self {
            Ep::Default | Ep::Openvino | Ep::Qnn => none,
            Ep::Cpu => EpBuild { gqa_dtypes: &["float32"], ..none },
            Ep::Cuda => EpBuild {
                gqa_dtypes: &["float16", "bfloat16"],
                gqa_max_head_dim: Some(256),
                max_opset: Some(OpsetCeiling { max: 23, through_ort: (1, 24) }),
                needs_float_attention_mask: true,
                ..none
            },
            Ep::Dml => EpBuild { gqa_dtypes: &["float16"], ..none },
            Ep::Webgpu => {
                EpBuild { gqa_dtypes: &["float32", "float16"], max_buffer_size: Some(WEBGPU_MAX_BUFFER), shape_free_capture: true, ..none }
            }
            Ep::Mlx => EpBuild { gqa_dtypes: &["float32", "float16", "bfloat16"], ..none },
            Ep::TrtRtx => EpBuild { gqa_dtypes: &["float16", "bfloat16"], ..none },
        }
    }

    /// Whether mobius's build for this EP at `dtype` uses `GroupQueryAttention`.
    pub fn fuses_gqa(self, dtype: &str) -> bool {
        self.build().gqa_dtypes.contains(&dtype)
    }
}

/// An execution provider a trial runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RunEp {
    /// ONNX Runtime's CPU EP: it runs every graph it has kernels for, whatever EP the graph was
    /// built for, so it judges the graph's function apart from any device's kernels.
    #[default]
    Cpu,
    /// The CUDA EP on device `N` (TF32 off).
    Cuda(u32),
    Webgpu,
    Openvino,
    TensorrtRtx,
}

/// The variable that selects the EPs of a run (`crate::context` reads it).
pub const EP_VAR: &str = "ONNX_PARITY_EP";

/// What an EP list may name (the variable's and `--ep`'s error messages).
pub const EXPECTED_EPS: &str = "expected a comma-separated list of cpu, cuda, cuda:N, webgpu, openvino, tensorrt-rtx";

/// `ONNX_PARITY_EP` names no execution provider this harness knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{EP_VAR}={value}: {EXPECTED_EPS}")]
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

/// The EPs `value` selects (`ONNX_PARITY_EP`): a comma-separated list, in the order given,
/// duplicates dropped; empty or unset is the CPU alone.
pub fn parse_selection(value: &str) -> Result<Vec<RunEp>, UnknownEp> {
    let mut out: Vec<RunEp> = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ep: RunEp = part.parse().map_err(|_| UnknownEp { value: value.to_string() })?;
        if !out.contains(&ep) {
            out.push(ep);
        }
    }
    if out.is_empty() {
        out.push(RunEp::Cpu);
    }
    Ok(out)
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

    /// What reports call it: `CPUExecutionProvider`, `CUDAExecutionProvider:0 (TF32 off)`.
    pub fn label(self) -> String {
        match self {
            RunEp::Cuda(n) => format!("CUDAExecutionProvider:{n} (TF32 off)"),
            ep => ep.ort_name().to_string(),
        }
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

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, RunEp::Cuda(_))
    }

    /// The suffix a trial on this EP carries after its name: nothing on the CPU (so a CPU-only
    /// run keeps its trial names), ` on cuda:0` elsewhere.
    pub fn trial_suffix(self) -> String {
        match self {
            RunEp::Cpu => String::new(),
            ep => format!(" on {ep}"),
        }
    }
}

/// Which EPs a build is for, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildTarget {
    /// The EP it was built for; `None` or [`Ep::Default`]: a portable build, for every EP.
    pub ep: Option<Ep>,
    /// Where that was read (`export.ep in the case`, `genai_config.json's provider_options`).
    pub source: &'static str,
}

impl BuildTarget {
    /// A portable build (nothing says otherwise).
    pub const PORTABLE: BuildTarget = BuildTarget { ep: None, source: "nothing names an EP: a portable build" };

    /// Why the build does not run on `run`, or `None` when it does: the CPU EP runs every build
    /// (what the graph computes, judged apart from a device's kernels; a build whose ops have no
    /// CPU kernel is skipped there naming them); another EP runs the portable builds and those
    /// built for it.
    pub fn not_for(&self, run: RunEp) -> Option<String> {
        let ep = match self.ep {
            None | Some(Ep::Default) => return None,
            Some(ep) => ep,
        };
        if run.is_cpu() || RunEp::for_build(ep).is_some_and(|r| std::mem::discriminant(&r) == std::mem::discriminant(&run)) {
            return None;
        }
        let its = match RunEp::for_build(ep) {
            Some(r) => format!("select {EP_VAR}={r} (or cpu) to judge it"),
            None => format!("this harness runs it on the CPU EP ({EP_VAR}=cpu)"),
        };
        Some(format!("a {ep} build ({}), not one for {}: {its}", self.source, run.ort_name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the table against mobius's own: which builds fuse GQA at which dtype.
    #[test]
    fn gqa_follows_mobius_capabilities() {
        assert!(Ep::Cpu.fuses_gqa("float32") && !Ep::Cpu.fuses_gqa("float16"));
        assert!(Ep::Cuda.fuses_gqa("float16") && Ep::Cuda.fuses_gqa("bfloat16") && !Ep::Cuda.fuses_gqa("float32"));
        assert!(Ep::Webgpu.fuses_gqa("float32") && Ep::Webgpu.fuses_gqa("float16"));
        assert!(!Ep::Default.fuses_gqa("float32") && !Ep::Openvino.fuses_gqa("float16"));
        assert_eq!(Ep::Webgpu.build().max_buffer_size, Some(256 << 20));
        assert_eq!("trt-rtx".parse::<Ep>(), Ok(Ep::TrtRtx));
    }

    /// Guards the variable's grammar (a list) and that an unknown value is an error naming it.
    #[test]
    fn parses_the_documented_values() {
        assert_eq!("".parse(), Ok(RunEp::Cpu));
        assert_eq!("cuda".parse(), Ok(RunEp::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(RunEp::Cuda(3)));
        assert_eq!("WebGPU".parse(), Ok(RunEp::Webgpu));
        assert_eq!("trt-rtx".parse(), Ok(RunEp::TensorrtRtx));
        assert!("rocm".parse::<RunEp>().is_err());
        assert_eq!(RunEp::Cuda(1).to_string(), "cuda:1");
        assert_eq!(parse_selection(""), Ok(vec![RunEp::Cpu]));
        assert_eq!(parse_selection("cpu, cuda,cpu"), Ok(vec![RunEp::Cpu, RunEp::Cuda(0)]));
        assert_eq!(parse_selection("cuda:1"), Ok(vec![RunEp::Cuda(1)]));
        let e = parse_selection("cpu,cuda:x").expect_err("bad device").to_string();
        assert!(e.starts_with("ONNX_PARITY_EP=cpu,cuda:x: expected a comma-separated list"), "{e}");
        assert_eq!((RunEp::Cpu.trial_suffix(), RunEp::Cuda(0).trial_suffix()), (String::new(), " on cuda:0".to_string()));
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

    /// Guards the routing rule: the CPU runs every build; another EP the portable ones and its
    /// own (any CUDA device for a CUDA build), and a refusal names the build's EP and the source.
    #[test]
    fn builds_run_on_the_eps_they_target() {
        let target = |ep| BuildTarget { ep: Some(ep), source: "export.ep in the case" };
        for run in [RunEp::Cpu, RunEp::Cuda(0), RunEp::Webgpu] {
            assert_eq!(BuildTarget::PORTABLE.not_for(run), None);
            assert_eq!(target(Ep::Default).not_for(run), None);
            assert_eq!(target(Ep::Webgpu).not_for(RunEp::Cpu), None);
        }
        assert_eq!(target(Ep::Cuda).not_for(RunEp::Cuda(1)), None);
        let why = target(Ep::Webgpu).not_for(RunEp::Cuda(0)).expect("a webgpu build is not for cuda");
        assert!(why.contains("webgpu build (export.ep in the case)") && why.contains("ONNX_PARITY_EP=webgpu"), "{why}");
        let why = target(Ep::Cpu).not_for(RunEp::Cuda(0)).expect("a cpu build is not for cuda");
        assert!(why.contains("cpu build") && why.contains("CUDAExecutionProvider"), "{why}");
        assert!(target(Ep::Dml).not_for(RunEp::Webgpu).is_some());
    }

    /// Guards the ORT version comparison of the opset ceiling.
    #[test]
    fn opset_ceiling_follows_the_runtime_version() {
        let c = Ep::Cuda.build().max_opset.expect("CUDA has one");
        assert!(c.holds_for("1.24.4") && c.holds_for("1.9.0") && c.holds_for("garbage"));
        assert!(!c.holds_for("1.25.0") && !c.holds_for("1.31.1") && !c.holds_for("2.0"));
    }
}
