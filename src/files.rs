//! Recursive listing of the files under a folder: case discovery and the trial records a test
//! run wrote both search folders the same way.

use std::path::{Path, PathBuf};

/// A folder that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct Unreadable {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Every file under `dir` (recursively) that `keep` accepts, and each folder that could not be
/// read, sorted by path (so a run lists and reports in a stable order).
pub fn walk(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<Result<PathBuf, Unreadable>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(source) => {
                out.push(Err(Unreadable { path: d, source }));
                continue;
            }
        };
        for entry in entries {
            match entry {
                Ok(entry) => {
                    let p = entry.path();
                    if p.is_dir() {
                        pending.push(p);
                    } else if keep(&p) {
                        out.push(Ok(p));
                    }
                }
                Err(source) => out.push(Err(Unreadable { path: d.clone(), source })),
            }
        }
    }
    out.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.cmp(b),
        (Err(a), Err(b)) => a.path.cmp(&b.path),
        (Ok(a), Err(b)) => a.cmp(&b.path),
        (Err(a), Ok(b)) => a.path.cmp(b),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: files in nested folders are found, filtered and sorted; an unreadable root is an
    /// entry naming it, never an empty (and so silently green) listing.
    #[test]
    fn walks_filters_and_reports() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        for f in ["z.json", "a/b/y.json", "a/x.txt", "a/w.json"] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        let found: Vec<String> = walk(dir.path(), &|p| p.extension().is_some_and(|e| e == "json"))
            .into_iter()
            .map(|r| r.expect("readable").strip_prefix(dir.path()).expect("under").display().to_string())
            .collect();
        assert_eq!(found, ["a/b/y.json", "a/w.json", "z.json"]);
        let missing = walk(&dir.path().join("nope"), &|_| true);
        assert!(matches!(missing.as_slice(), [Err(e)] if e.to_string().contains("nope")), "{missing:?}");
    }
}
