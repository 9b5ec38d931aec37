//! Finding case files: each path is a case file or a folder searched recursively.

use std::path::{Path, PathBuf};

use super::definition::Case;
use super::error::CaseError;

fn is_case_file(path: &Path) -> bool {
    let yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    yaml && path.file_name().and_then(|n| n.to_str()) != Some("default_tolerances.yaml")
}

/// Finds and parses cases. Each path is a case file (taken as is) or a folder walked
/// recursively for `*.yaml` / `*.yml`, skipping `default_tolerances.yaml`. A path that does not
/// exist is an `Io` error entry, so a typo in a root is seen. Sorted by path, duplicates removed.
pub fn discover(paths: &[PathBuf]) -> Vec<(PathBuf, Result<Case, CaseError>)> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            for found in crate::files::walk(p, &is_case_file) {
                out.push(match found {
                    Ok(file) => {
                        let parsed = Case::load(&file);
                        (file, parsed)
                    }
                    Err(e) => (e.path.clone(), Err(CaseError::Io { path: e.path, source: e.source })),
                });
            }
        } else {
            out.push((p.clone(), Case::load(p)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "model_id: m\nmodel_type: gemma4_text\ndtype: float32\nlevel: \"L4+L5\"\n";

    /// Guards: every case this repository ships under `cases/` loads (a malformed one would
    /// otherwise only show up as a failing trial of the parity target).
    #[test]
    fn repository_cases_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
        // `cases/` is committed: its absence is a broken checkout, not a reason to pass.
        assert!(root.is_dir(), "{} is missing", root.display());
        let found = discover(&[root]);
        assert!(found.len() >= 20, "expected the committed cases, found {}", found.len());
        for (path, parsed) in found {
            if let Err(e) = parsed {
                panic!("{}: {e}", path.display());
            }
        }
    }

    /// Guards: discovery walks folders recursively, takes .yaml/.yml, skips
    /// default_tolerances.yaml, reports unreadable / malformed files as entries, and sorts.
    #[test]
    fn discover_walks_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("b-cat");
        std::fs::create_dir_all(sub.join("deeper")).unwrap();
        std::fs::write(dir.path().join("default_tolerances.yaml"), "L3: {}\n").unwrap();
        std::fs::write(sub.join("z.yaml"), MINIMAL).unwrap();
        std::fs::write(sub.join("a.yml"), MINIMAL).unwrap();
        std::fs::write(sub.join("deeper/bad.yaml"), "model_id: [\n").unwrap();
        std::fs::write(sub.join("notes.txt"), "x").unwrap();
        let missing = dir.path().join("nope.yaml");
        let found = discover(&[dir.path().to_path_buf(), missing.clone()]);
        let names: Vec<String> = found.iter().map(|(p, _)| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
        assert_eq!(names, vec!["b-cat/a.yml", "b-cat/deeper/bad.yaml", "b-cat/z.yaml", "nope.yaml"]);
        assert!(found[0].1.is_ok());
        assert!(matches!(found[1].1, Err(CaseError::Parse { .. })));
        assert!(matches!(found[3].1, Err(CaseError::Io { .. })));
        assert_eq!(found[2].1.as_ref().unwrap().category, "b-cat");
    }
}
