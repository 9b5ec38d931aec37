//! Options shared by all trials of a run.

use std::path::PathBuf;

/// `ONNX_PARITY_GOLDENS`: the goldens folder (mobius's `testdata/golden` has the same layout).
pub const GOLDENS_ENV: &str = "ONNX_PARITY_GOLDENS";

/// Options shared by all trials of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding `<category>/<case>.json` goldens.
    pub goldens_root: PathBuf,
    /// `true` when running under CI (`CI` set): `ci_skip_reason` applies.
    pub ci: bool,
}

impl RunOptions {
    /// Goldens from `ONNX_PARITY_GOLDENS`, else `goldens/` of this repository; CI from the
    /// environment.
    pub fn from_env() -> Self {
        RunOptions {
            goldens_root: std::env::var_os(GOLDENS_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("goldens")),
            ci: ci_enabled(std::env::var_os("CI").as_deref()),
        }
    }
}

/// Whether a value of `CI` means "running under CI": set, and not empty, `0`, `false`, `no` or `off` (any case).
fn ci_enabled(value: Option<&std::ffi::OsStr>) -> bool {
    // Any case: `CI=False` or `CI=no` is a person switching CI off, not a CI run.
    value.is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !matches!(v.as_str(), "" | "0" | "false" | "no" | "off")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// Guards: `CI` counts as set unless it is absent, empty, `0` or `false` (GitHub Actions and
    /// most CI systems set `CI=true`; `CI=0` / `CI=false` switch `ci_skip_reason` off).
    #[test]
    fn ci_values() {
        for on in ["true", "1", "yes", "TRUE", "00", "woodpecker"] {
            assert!(ci_enabled(Some(OsStr::new(on))), "{on}");
        }
        assert!(!ci_enabled(None));
        for off in ["", "0", "false", "False", "FALSE", "no", "Off", " false "] {
            assert!(!ci_enabled(Some(OsStr::new(off))), "{off:?}");
        }
    }
}
