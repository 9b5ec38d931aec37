//! The TF32 policy of a GPU run, decided before anything can create a CUDA context.
//!
//! TF32 (tensor-core GEMMs with a 10-bit mantissa) is the best-known source of spurious f32
//! parity failures on GPUs (~1e-2 on Gemma logits). `NVIDIA_TF32_OVERRIDE=0` is set for the
//! process before any CUDA context exists (cuBLAS and cuDNN read it once), *unless the user set
//! it*: an explicit value is honoured, never overwritten, and reported ([`Tf32Env`]). [`decide`]
//! is the pure rule, [`apply_policy`] runs it against an environment and calls the initialiser
//! only after the variable is set. A leaf: ONNX Runtime's environment and the reference's device
//! both call [`tf32_env`] first; the probe that checks the policy held is [`crate::gpu`].

use std::sync::OnceLock;

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
    TF32_ENV.get_or_init(|| apply_policy(&mut ProcessEnv, cfg!(feature = "cuda") || crate::context::current().cuda_ep(), |r, _| r.clone()))
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
}
