//! The names the hub and the cache layout accept: repo ids, revisions and file names are
//! validated before any path is built from them (none may leave the cache folder), commits and
//! etags the server sends must be plain path components.

use super::error::{HubError, Target};

/// `REGEX_COMMIT_HASH`: a full lowercase commit sha.
pub(super) fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A name the server sent that becomes one path component (a commit or an etag).
pub(super) fn is_safe_component(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `_normalize_etag`: `etag.lstrip("W/").strip('"')` (lstrip drops any leading `W` and `/`).
pub(super) fn normalize_etag(e: &str) -> String {
    e.trim_start_matches(['W', '/']).trim_matches('"').to_string()
}

/// `validate_repo_id`: `name` or `namespace/name`, ASCII `[A-Za-z0-9_.-]`, each part 1–96
/// characters starting and ending with a word character, no `--` or `..`, no `.git` suffix.
pub(super) fn validate_repo_id(repo: &str) -> Result<(), HubError> {
    let bad = |reason| Err(HubError::InvalidRepoId { repo: repo.into(), reason });
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return bad("expected `name` or `namespace/name`");
    }
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    for p in parts {
        let b = p.as_bytes();
        if b.is_empty() || b.len() > 96 || !b.iter().all(|&c| word(c) || c == b'-' || c == b'.') || !word(b[0]) || !word(b[b.len() - 1]) {
            return bad("use 1-96 of [A-Za-z0-9_.-] per part, starting and ending with a letter, digit or `_`");
        }
    }
    if repo.contains("--") || repo.contains("..") {
        return bad("`--` and `..` are not allowed");
    }
    if repo.ends_with(".git") {
        return bad("cannot end with `.git`");
    }
    Ok(())
}

/// A revision becomes `refs/{revision}` (nested for `refs/pr/1`, as in Python) and a URL
/// component, so it must stay inside `refs/`.
pub(super) fn validate_revision(repo: &str, revision: &str) -> Result<(), HubError> {
    let bad = |reason| Err(HubError::InvalidRevision { repo: repo.into(), revision: revision.into(), reason });
    if revision.is_empty() || revision.starts_with('/') || revision.contains(['\\', '\0']) {
        return bad("must be a branch, tag or commit");
    }
    if revision.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return bad("empty, `.` and `..` path segments are not allowed");
    }
    Ok(())
}

/// `_validate_relative_filename`, stricter: a relative `/`-separated path with no empty, `.` or
/// `..` segment, no backslash and no drive prefix, so it cannot leave the snapshot folder.
pub(super) fn validate_filename(repo: &str, revision: &str, file: &str) -> Result<(), HubError> {
    let bad = |reason| {
        Err(HubError::InvalidFilename { at: Box::new(Target { repo: repo.into(), revision: revision.into(), file: file.into() }), reason })
    };
    if file.is_empty() || file.starts_with('/') || file.contains(['\\', '\0']) {
        return bad("must be a relative path inside the repository");
    }
    for seg in file.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return bad("empty, `.` and `..` path segments are not allowed");
        }
        if seg.len() >= 2 && seg.as_bytes()[1] == b':' && seg.as_bytes()[0].is_ascii_alphabetic() {
            return bad("cannot start with a drive letter");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the etag is normalised as Python's `lstrip("W/").strip('"')`, weak or not.
    #[test]
    fn etags_normalise_like_python() {
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("abc"), "abc");
    }

    /// Guards: repo ids follow `validate_repo_id`, and names that could leave the cache folder
    /// (`..`, absolute, drive) are refused before any path is built.
    #[test]
    fn names_are_validated() {
        for ok in ["gpt2", "google/gemma-4-12B", "a_b/c.d-e"] {
            assert!(validate_repo_id(ok).is_ok(), "{ok}");
        }
        for bad in ["a/b/c", "-a/b", "a/b.", "a--b", "a..b", "a/b.git", "", "a/", "é/b"] {
            assert!(validate_repo_id(bad).is_err(), "{bad}");
        }
        for bad in ["../x", "a/../b", "/etc/passwd", "C:x", "a\\b", "a//b", ""] {
            assert!(validate_filename("a/b", "main", bad).is_err(), "{bad}");
        }
        assert!(validate_filename("a/b", "main", "sub/model-00001-of-00002.safetensors").is_ok());
        assert!(validate_revision("a/b", "refs/pr/1").is_ok());
        assert!(validate_revision("a/b", "../../x").is_err());
    }
}
