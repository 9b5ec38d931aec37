//! The execution providers an export can be built for and run on: what mobius's build for each
//! one looks like (its `EpCapabilities` table, `mobius/_execution_providers.py` in mobius-onnx
//! 0.1.0), and how ONNX Runtime provides it here (built into the runtime library, or a plugin EP
//! from its own wheel).

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

    /// Guards the ORT version comparison of the opset ceiling.
    #[test]
    fn opset_ceiling_follows_the_runtime_version() {
        let c = Ep::Cuda.build().max_opset.expect("CUDA has one");
        assert!(c.holds_for("1.24.4") && c.holds_for("1.9.0") && c.holds_for("garbage"));
        assert!(!c.holds_for("1.25.0") && !c.holds_for("1.31.1") && !c.holds_for("2.0"));
    }
}
