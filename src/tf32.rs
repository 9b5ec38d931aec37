//! The TF32 policy of a GPU run, decided before anything can create a CUDA context.
//!
//! TF32 (tensor-core GEMMs with a 10-bit mantissa) is the best-known source of spurious f32
//! parity failures on GPUs (~1e-2 on Gemma logits). `NVIDIA_TF32_OVERRIDE=0` is set for the
//! process before any CUDA context exists (cuBLAS and cuDNN read it once), *unless the user set
//! it*: an explicit value is honoured, never overwritten, and reported ([`Tf32Env`]). [`decide`]
//! is the pure rule; the drivers set what it decides while the process has one thread
//! (`crate::context::RunContext::variables_to_set`), and the run context reports it
//! (`RunContext::tf32`). The probe that checks the policy held is [`crate::gpu`].

use serde::{Deserialize, Serialize};

use crate::names::named_enum;

/// NVIDIA's process-wide TF32 switch (`0` disables TF32 in cuBLAS/cuDNN whatever the API asks).
pub const TF32_OVERRIDE_VAR: &str = "NVIDIA_TF32_OVERRIDE";

named_enum! {
    /// Who chose the process's `NVIDIA_TF32_OVERRIDE`.
    pub enum OverrideSource("override source") {
        /// onnx-parity set it to `0` (a CUDA build, the user had not set it).
        Harness = "harness",
        /// The user's explicit value, honoured as is.
        User = "user",
        /// Not set (a build without CUDA: nothing reads it).
        Unset = "unset",
    }
}

/// The TF32 environment a run had (report metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tf32Env {
    /// `NVIDIA_TF32_OVERRIDE` as the CUDA libraries of this process see it.
    pub nvidia_tf32_override: Option<String>,
    pub set_by: OverrideSource,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: when CUDA may run and the variable is unset, the rule sets it to 0 and reports the
    /// harness as the setter.
    #[test]
    fn override_set_when_cuda_may_run() {
        let (set, report) = decide(None, true);
        assert_eq!(set, Some("0"));
        assert_eq!(report, Tf32Env { nvidia_tf32_override: Some("0".into()), set_by: OverrideSource::Harness });
        assert!(report.forces_off());
        assert_eq!(serde_json::to_value(&report).expect("serialise")["set_by"], "harness");
    }

    /// Guards: a user's explicit value (opting in to TF32, or an explicit 0) is never overwritten
    /// and is reported as theirs.
    #[test]
    fn user_override_respected_and_reported() {
        for v in ["1", "0"] {
            let (set, report) = decide(Some(v), true);
            assert_eq!(set, None, "the user's {v} must not be touched");
            assert_eq!(report, Tf32Env { nvidia_tf32_override: Some(v.into()), set_by: OverrideSource::User });
            assert_eq!(report.forces_off(), v == "0");
            let json = serde_json::to_value(&report).expect("serialise");
            assert_eq!(json["set_by"], "user");
            assert_eq!(json["nvidia_tf32_override"], v);
        }
    }

    /// Guards: without CUDA nothing is set (and the report says so); an empty value counts as unset.
    #[test]
    fn cpu_run_sets_nothing() {
        let (set, report) = decide(None, false);
        assert_eq!((set, report.set_by), (None, OverrideSource::Unset));
        assert_eq!(decide(Some(" "), true).0, Some("0"));
    }
}
