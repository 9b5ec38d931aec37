//! Where the hub cache is and how to reach the hub, read from the environment as
//! `huggingface_hub.constants` reads it (see the module doc of [`super`]).

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// The hub used when `HF_ENDPOINT` is unset (`constants._HF_DEFAULT_ENDPOINT`).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The revision used when a case names none (`constants.DEFAULT_REVISION`).
pub const DEFAULT_REVISION: &str = "main";
/// A hub token: constructed from the environment or by a caller, sent as a bearer header, and
/// never formatted (its `Debug` is redacted and it has no `Display`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Cleans the token as `_clean_token` does; `None` when nothing is left.
    pub fn new(token: &str) -> Option<Secret> {
        let t = token.replace(['\r', '\n'], "");
        let t = t.trim();
        (!t.is_empty()).then(|| Secret(t.to_string()))
    }

    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Everything a [`super::Hub`] needs, explicit so tests never depend on the process environment.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// The hub cache root (`HF_HUB_CACHE`).
    pub cache: PathBuf,
    /// Base URL without a trailing slash (`HF_ENDPOINT`).
    pub endpoint: String,
    pub token: Option<Secret>,
    /// Where `hf auth login` keeps the token; only named in error messages.
    pub token_path: PathBuf,
    /// Use the cache only (`HF_HUB_OFFLINE`).
    pub offline: bool,
    /// Route requests through `HTTPS_PROXY`/`ALL_PROXY` (honouring `NO_PROXY`), as httpx does.
    pub proxy_from_env: bool,
    /// Connect and response-header timeout (`HF_HUB_ETAG_TIMEOUT`).
    pub etag_timeout: Duration,
    /// Longest wait for one read of a download (`HF_HUB_DOWNLOAD_TIMEOUT`).
    pub download_timeout: Duration,
    /// Resumptions after a dropped connection that brought no new bytes (`http_get`: 5).
    pub download_retries: u32,
}

impl HubSettings {
    /// Defaults for a given cache and endpoint: no token, online, no proxy, 10 s timeouts.
    pub fn new(cache: impl Into<PathBuf>, endpoint: &str) -> HubSettings {
        let cache = cache.into();
        let token_path = cache.parent().unwrap_or(&cache).join("token");
        HubSettings {
            cache,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: None,
            token_path,
            offline: false,
            proxy_from_env: false,
            etag_timeout: Duration::from_secs(10),
            download_timeout: Duration::from_secs(10),
            download_retries: 5,
        }
    }

    /// Settings from any variable lookup (the run context's, [`crate::context`], is the environment).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> HubSettings {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        let path = |v: String| PathBuf::from(expand_vars(&expand_user(&v, &var), &var));
        let home = set("HF_HOME").map(path).unwrap_or_else(|| {
            let xdg = set("XDG_CACHE_HOME").map(path).unwrap_or_else(|| PathBuf::from(expand_user("~/.cache", &var)));
            xdg.join("huggingface")
        });
        let cache = set("HF_HUB_CACHE").or_else(|| set("HUGGINGFACE_HUB_CACHE")).map(path).unwrap_or_else(|| home.join("hub"));
        let endpoint = set("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let mut s = HubSettings::new(cache, &endpoint);
        s.token_path = set("HF_TOKEN_PATH").map(path).unwrap_or_else(|| home.join("token"));
        s.offline = is_true(set("HF_HUB_OFFLINE").or_else(|| var("TRANSFORMERS_OFFLINE")).as_deref());
        s.proxy_from_env = true;
        if !is_true(var("HF_HUB_DISABLE_IMPLICIT_TOKEN").as_deref()) {
            // `os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")`, then cleaned.
            s.token = set("HF_TOKEN").or_else(|| set("HUGGING_FACE_HUB_TOKEN")).and_then(|t| Secret::new(&t));
            if s.token.is_none() {
                match fs::read_to_string(&s.token_path) {
                    Ok(t) => s.token = Secret::new(&t),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!("cannot read the hub token file {}: {}", s.token_path.display(), e.kind()),
                }
            }
        }
        let secs = |k: &str| set(k).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
        s.etag_timeout = secs("HF_HUB_ETAG_TIMEOUT").unwrap_or(s.etag_timeout);
        s.download_timeout = secs("HF_HUB_DOWNLOAD_TIMEOUT").unwrap_or(s.download_timeout);
        s
    }
}

/// `constants._is_true`.
fn is_true(v: Option<&str>) -> bool {
    v.is_some_and(|v| matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE"))
}

/// `os.path.expanduser` for a leading `~` or `~/` (HOME only).
fn expand_user(p: &str, var: &impl Fn(&str) -> Option<String>) -> String {
    match (p == "~" || p.starts_with("~/"), var("HOME")) {
        (true, Some(home)) => format!("{}{}", home.trim_end_matches('/'), &p[1..]),
        _ => p.to_string(),
    }
}

/// `os.path.expandvars`: `$NAME` and `${NAME}` of set variables; anything else stays as written.
fn expand_vars(p: &str, var: &impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = p;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(b) => match b.find('}') {
                Some(j) => (&b[..j], j + 2),
                None => ("", 0),
            },
            None => {
                let j = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..j], j)
            }
        };
        match (name.is_empty(), var(name)) {
            (false, Some(v)) => out.push_str(&v),
            _ => out.push_str(&rest[i..i + 1 + len]),
        }
        rest = &rest[i + 1 + len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: `$VAR`, `${VAR}` and `~` expand as `os.path.expandvars`/`expanduser`, unknown
    /// variables stay verbatim.
    #[test]
    fn paths_expand_like_python() {
        let var = |k: &str| match k {
            "HOME" => Some("/home/u".to_string()),
            "X" => Some("/x".to_string()),
            _ => None,
        };
        assert_eq!(expand_vars("$X/hub", &var), "/x/hub");
        assert_eq!(expand_vars("${X}/a/$NOPE/${NOPE}", &var), "/x/a/$NOPE/${NOPE}");
        assert_eq!(expand_user("~/c", &var), "/home/u/c");
        assert_eq!(expand_user("~other/c", &var), "~other/c");
    }
}
