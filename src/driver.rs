//! What a driver (`onnx-parity`, the `parity` test target, a benchmark, a test binary that runs
//! ORT GenAI) does first, while its process has one thread: resolve the run context and set the
//! variables the libraries it will load read once at load time. Library modules never read or
//! set the environment; the drivers set exactly what [`variables_to_set`] returns, then install
//! `context.with_set(&vars)` ([`crate::context::install`]).

use std::ffi::OsString;

use crate::context::{RunContext, CUDA_CACHE_MAXSIZE_VAR, CUDA_CACHE_PATH_VAR, ORT_LIB_PATH_VAR, TF32_OVERRIDE_VAR};

/// The CUDA driver's JIT cache folder under the cache root.
pub const CUDA_JIT_CACHE_DIR: &str = "cuda-jit-cache";
/// Its size limit: the driver's maximum (4 GiB), so candle's kernels for every GPU a runner has
/// seen stay cached instead of being evicted by the default limit.
const CUDA_JIT_CACHE_MAX_BYTES: &str = "4294967296";

/// The variables a driver sets: `NVIDIA_TF32_OVERRIDE=0` when CUDA may run (a CUDA EP selected,
/// or `cuda_build`: the reference may open a device) and the user did not set it
/// ([`crate::tf32::decide`]: cuBLAS and cuDNN read it once, before the first CUDA context), and
/// `ORT_LIB_PATH`, the ONNX Runtime onnxruntime-genai binds when its library loads (its own, in
/// the cache: [`crate::ort_genai::ort_library`]). When CUDA may run and the user named no JIT
/// cache: `CUDA_CACHE_PATH` under the cache root (and its limit at the driver's maximum), so the
/// PTX the CUDA driver compiles at a process's first kernel is compiled once per machine and
/// GPU, where the runtimes are kept (a runner's cache folder persists across nights; `~/.nv`
/// may not), not once per process.
pub fn variables_to_set(context: &RunContext, cuda_build: bool) -> Vec<(&'static str, OsString)> {
    let mut out = Vec::new();
    let cuda = cuda_build || context.cuda_ep();
    if let (Some(v), _) = crate::tf32::decide(context.tf32_override.as_deref(), cuda) {
        out.push((TF32_OVERRIDE_VAR, OsString::from(v)));
    }
    if cuda && context.cuda_jit_cache.0.is_none() {
        out.push((CUDA_CACHE_PATH_VAR, context.cache_root.join(CUDA_JIT_CACHE_DIR).into_os_string()));
        if context.cuda_jit_cache.1.is_none() {
            out.push((CUDA_CACHE_MAXSIZE_VAR, OsString::from(CUDA_JIT_CACHE_MAX_BYTES)));
        }
    }
    out.push((ORT_LIB_PATH_VAR, crate::ort_genai::ort_library(&context.cache_root).into_os_string()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{CACHE_ENV, EP_VAR};

    fn lookup(pairs: &[(&str, &str)]) -> RunContext {
        RunContext::from_pairs(pairs)
    }

    /// Guards: the driver sets TF32 off only when CUDA may run and the user left it unset, and
    /// always ORT GenAI's library path under the cache.
    #[test]
    fn variables_the_driver_sets() {
        let names = |c: &RunContext, cuda_build| {
            variables_to_set(c, cuda_build).into_iter().map(|(k, v)| format!("{k}={}", v.to_string_lossy())).collect::<Vec<_>>()
        };
        let cpu = lookup(&[(CACHE_ENV, "/c")]);
        let set = names(&cpu, false);
        assert_eq!(set.len(), 1, "{set:?}");
        assert!(set[0].starts_with("ORT_LIB_PATH=/c/"), "{set:?}");
        assert!(names(&cpu, true).contains(&"NVIDIA_TF32_OVERRIDE=0".to_string()));
        assert!(names(&lookup(&[(EP_VAR, "cpu,cuda")]), false).contains(&"NVIDIA_TF32_OVERRIDE=0".to_string()));
        assert!(!set.iter().any(|v| v.starts_with("CUDA_CACHE")), "no JIT cache where CUDA cannot run: {set:?}");
        let cuda = names(&lookup(&[(CACHE_ENV, "/c"), (EP_VAR, "cuda")]), false);
        assert!(cuda.contains(&"CUDA_CACHE_PATH=/c/cuda-jit-cache".to_string()), "{cuda:?}");
        assert!(cuda.contains(&"CUDA_CACHE_MAXSIZE=4294967296".to_string()), "{cuda:?}");
        let user = lookup(&[(EP_VAR, "cuda"), (TF32_OVERRIDE_VAR, "1"), (CUDA_CACHE_PATH_VAR, "/mine")]);
        assert!(!names(&user, true).iter().any(|v| v.starts_with("NVIDIA")), "the user's value is never overwritten");
        assert!(!names(&user, true).iter().any(|v| v.starts_with("CUDA_CACHE")), "the user's JIT cache is theirs, limit included");
        // The context the driver installs reads what it set; the override keeps who set it.
        let vars = variables_to_set(&user, true);
        let after = user.clone().with_set(&vars);
        assert!(after.ort_lib_path.is_some() && after.tf32().set_by == crate::tf32::OverrideSource::User);
    }
}
