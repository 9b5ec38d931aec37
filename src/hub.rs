//! Model hub access: resolves `(model_id, revision, file)` to a local path in the cache that
//! Python's `huggingface_hub` uses, downloading only the files asked for.
//!
//! Users name checkpoints by hub id (`google/gemma-4-12B`, with a `revision:`) and already have
//! Python's cache filled, so this module reads and writes that cache byte for byte the way
//! `huggingface_hub` (2.4, `file_download.py`) does; both tools then share one copy of every
//! weight file. Layout, per `repo_folder_name` and `_hf_hub_download_to_cache_dir`:
//!
//! ```text
//! {cache}/models--{org}--{name}/refs/{revision}           the commit sha, no newline
//!                              /blobs/{etag}               file contents (etag: git sha1, or LFS sha256)
//!                              /snapshots/{sha}/{file}     symlink ../../blobs/{etag} (relative, per level)
//!                              /.no_exist/{sha}/{file}     empty: the hub said {file} is absent at {sha}
//! {cache}/.locks/models--{org}--{name}/{etag}.lock         flock held while a blob is written
//! {cache}/CACHEDIR.TAG
//! ```
//!
//! Settings ([`HubSettings::from_env`], mirroring `constants.py`): cache = `HF_HUB_CACHE`, else
//! `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub` (`HF_HOME` defaulting to
//! `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`); endpoint = `HF_ENDPOINT` without a
//! trailing `/`; offline = `HF_HUB_OFFLINE` (else `TRANSFORMERS_OFFLINE`) upper-cased in
//! `{1, ON, YES, TRUE}` (`_is_true`); token = `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the
//! file `HF_TOKEN_PATH` (default `$HF_HOME/token`), with `\r`/`\n` removed and blanks trimmed
//! (`utils/_auth.py::get_token`, `_clean_token`), none when `HF_HUB_DISABLE_IMPLICIT_TOKEN` is true;
//! timeouts `HF_HUB_ETAG_TIMEOUT` / `HF_HUB_DOWNLOAD_TIMEOUT` (10 s). `~` and `$VAR` expand as
//! `expanduser` + `expandvars`. One deliberate difference: an empty `HF_HOME`, `HF_HUB_CACHE` or
//! `HF_ENDPOINT` counts as unset (Python would use the current folder or an empty URL).
//!
//! Resolution ([`Hub::snapshot_file`]), as `_hf_hub_download_to_cache_dir`:
//! 1. a 40-hex revision whose snapshot file exists is returned without any request;
//! 2. offline, the revision goes through `refs/` to a sha (`try_to_load_from_cache`) and the
//!    snapshot link must exist, else [`HubError::NotCached`] says what to download and where;
//! 3. online, `HEAD {endpoint}/{repo}/resolve/{revision}/{file}` (`get_hf_file_metadata`) with
//!    `Accept-Encoding: identity`, following redirects only while they stay on the hub origin
//!    (`_httpx2_follow_hub_redirects_with_backoff`), gives the commit (`X-Repo-Commit`), the
//!    blob name (`X-Linked-Etag`, else `ETag`, normalised by `_normalize_etag`), the size
//!    (`X-Linked-Size`, else `Content-Length` of a non-redirect) and the download URL (the
//!    `Location` of an off-hub redirect, fetched without the token);
//! 4. `refs/{revision}` is written (atomically, only if changed:
//!    `_cache_commit_hash_for_specific_revision`), the blob is downloaded under the lock into a
//!    process-unique `blobs/{etag}.{8 hex}.incomplete` and renamed only once its size checks
//!    (`_download_to_tmp_and_move`), then the snapshot symlink is made (`_create_symlink`). An
//!    interrupted download therefore leaves nothing in `snapshots/` and no blob; its
//!    `.incomplete` file is deleted on error, and one left by a crash is never read (fresh names)
//!    and is removed by the next download of that blob once it is a minute old.
//!    A dropped connection resumes with `Range` up to [`HubSettings::download_retries`] times
//!    without progress, as `http_get` does.
//! 5. On a connection failure, a 5xx, a 401/403 or an unknown repo (everything but "revision" or
//!    "file not found"), a copy already in the cache is used with a warning, as Python does.
//!
//! Why a direct `ureq` client and not the `hf-hub` crate (1.0, where a reader looks first):
//! hf-hub's blocking API wraps tokio + reqwest and always pulls `hf-xet` (DESIGN §7: ~300 crates,
//! +3.5 min debug build, against ~15 new crates here); it does not read `HF_HUB_OFFLINE` (only a
//! per-call `local_files_only`); and it writes every download to one shared `{blob}.incomplete`
//! path (`repository/download.rs`), which two processes sharing Python's cache can interleave —
//! `huggingface_hub` moved to per-process names for exactly that (its PR 4228). Xet-backed files
//! are fetched over plain HTTP, which the hub serves for every file (Python's fallback without
//! `hf_xet`).
//!
//! The token is a [`Secret`]: sent only as `Authorization: Bearer` to the endpoint's origin (and
//! the default hub's; Python's `_HUB_ORIGINS` also lists its short and staging hosts), never to a CDN a redirect points at, and never shown by `Display`,
//! `Debug` or `tracing`; any text taken from the network is scrubbed of it before it reaches an
//! error. `ureq-proto` hex-dumps raw requests at `log` trace level, which the `log` features in
//! Cargo.toml compile out.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The hub used when `HF_ENDPOINT` is unset (`constants._HF_DEFAULT_ENDPOINT`).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The revision used when a case names none (`constants.DEFAULT_REVISION`).
pub const DEFAULT_REVISION: &str = "main";
/// Single-file safetensors weights, tried first as transformers does.
pub const SAFETENSORS_SINGLE: &str = "model.safetensors";
/// The index of sharded safetensors weights (`weight_map`: tensor → shard file).
pub const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

const MAX_REDIRECTS: usize = 10;
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
const LOCK_LOG_EVERY: Duration = Duration::from_secs(10);
/// A `.incomplete` file untouched this long belongs to no live download.
const STALE_INCOMPLETE: Duration = Duration::from_secs(60);
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by huggingface_hub.\n# For information about cache directory tags, see:\n#\thttps://bford.info/cachedir/\n";

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

    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Everything a [`Hub`] needs, explicit so tests never depend on the process environment.
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

    /// Settings from the process environment, as `huggingface_hub.constants` reads it.
    pub fn from_env() -> HubSettings {
        HubSettings::from_lookup(|k| std::env::var(k).ok())
    }

    /// Settings from any variable lookup (the environment in [`HubSettings::from_env`]).
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

/// The file a [`HubError`] is about (boxed in the error, to keep `Result`s small).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub repo: String,
    pub revision: String,
    pub file: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {}@{}", self.file, self.repo, self.revision)
    }
}

/// Why a file could not be resolved. Every variant names the repo and revision, and the file
/// where there is one ([`Target`]); none carries the token.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("invalid model id {repo:?}: {reason}")]
    InvalidRepoId { repo: String, reason: &'static str },
    #[error("invalid revision {revision:?} for {repo}: {reason}")]
    InvalidRevision { repo: String, revision: String, reason: &'static str },
    #[error("invalid file name {:?} in {}@{}: {reason}", at.file, at.repo, at.revision)]
    InvalidFilename { at: Box<Target>, reason: &'static str },
    #[error(
        "{at} is not in the hub cache and HF_HUB_OFFLINE is set ({reason}; looked for {path}). Download it with network \
         access into the same cache, e.g. `HF_HUB_CACHE={cache} hf download {} {} --revision {}`, or unset HF_HUB_OFFLINE",
        at.repo, at.file, at.revision
    )]
    NotCached { at: Box<Target>, path: PathBuf, cache: PathBuf, reason: String },
    #[error(
        "{at}: the hub answered {status}{server}: {} (the token is read from HF_TOKEN, else from {})",
        if *token_sent {
            "the token was refused: it is invalid or expired, or its account has not been granted access (for a gated \
             model, accept its terms on the model's hub page with that account)"
        } else {
            "no token was sent, and the repo is gated or private (or does not exist). Accept the model's terms on its hub \
             page, then set HF_TOKEN to an access token, or run `hf auth login`"
        },
        token_path.display()
    )]
    Unauthorized { at: Box<Target>, status: u16, token_sent: bool, server: String, token_path: PathBuf },
    #[error("repository {} not found at {endpoint} (asked for {at}; a private repo also needs HF_TOKEN)", at.repo)]
    RepoNotFound { at: Box<Target>, endpoint: String },
    #[error("revision {} not found in {} (asked for {})", at.revision, at.repo, at.file)]
    RevisionNotFound { at: Box<Target> },
    #[error("{} not found in {} at revision {}", at.file, at.repo, at.revision)]
    EntryNotFound { at: Box<Target> },
    #[error("{at}: 404 from {url} (repository, revision or file not found)")]
    NotFound { at: Box<Target>, url: String },
    #[error("{at}: HTTP {status} from {url}{server}")]
    Http { at: Box<Target>, url: String, status: u16, server: String },
    #[error("{at}: {url} answered without {missing}, so it is not a hub endpoint (check HF_ENDPOINT, proxies)")]
    NotAHub { at: Box<Target>, url: String, missing: &'static str },
    #[error("{at}: cannot reach {endpoint} ({cause}) and the file is not in the cache {cache}")]
    Connection { at: Box<Target>, endpoint: String, cause: String, cache: PathBuf },
    #[error(
        "{at}: download interrupted after {received} of {} bytes ({cause}); nothing was added to the cache, run again to \
         retry",
        expected.map_or("?".to_string(), |e| e.to_string())
    )]
    Interrupted { at: Box<Target>, received: u64, expected: Option<u64>, cause: String },
    #[error("{at}: {action} {path}: {source}")]
    Io { at: Box<Target>, action: &'static str, path: PathBuf, source: io::Error },
    #[error("{repo}@{revision}: bad {path}: {message}")]
    BadIndex { repo: String, revision: String, path: PathBuf, message: String },
    #[error("{repo}@{revision} has no safetensors weights: {SAFETENSORS_SINGLE}: {single}; {SAFETENSORS_INDEX}: {index}")]
    NoWeights { repo: String, revision: String, single: Box<HubError>, index: Box<HubError> },
}

impl HubError {
    /// Errors after which `huggingface_hub` still serves a cached copy (`_get_metadata_or_catch_error`:
    /// everything but a missing revision or file).
    fn allows_cache_fallback(&self) -> bool {
        match self {
            HubError::Connection { .. } | HubError::Unauthorized { .. } | HubError::RepoNotFound { .. } => true,
            HubError::NotAHub { .. } => true,
            HubError::Http { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// True when the hub (or the cache offline) says the file is not there, so a caller may try
    /// an alternative (the sharded index after `model.safetensors`).
    pub fn is_missing_file(&self) -> bool {
        matches!(self, HubError::EntryNotFound { .. } | HubError::NotFound { .. } | HubError::NotCached { .. })
    }
}

/// Weights of a checkpoint: one safetensors file, or an index and the shards it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    Single(PathBuf),
    Sharded { index: PathBuf, shards: Vec<PathBuf> },
}

impl Weights {
    /// The safetensors files to load, in shard order.
    pub fn files(&self) -> &[PathBuf] {
        match self {
            Weights::Single(p) => std::slice::from_ref(p),
            Weights::Sharded { shards, .. } => shards,
        }
    }
}

/// Resolves hub files to paths in the shared cache (see the module doc).
#[derive(Debug)]
pub struct Hub {
    settings: HubSettings,
    agent: ureq::Agent,
}

/// The (repo, revision, file) a request is about, validated; carried into every error.
struct Ctx<'a> {
    repo: &'a str,
    revision: &'a str,
    file: &'a str,
}

impl Ctx<'_> {
    fn at(&self) -> Box<Target> {
        Box::new(Target { repo: self.repo.into(), revision: self.revision.into(), file: self.file.into() })
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> HubError {
        let (at, path) = (self.at(), path.to_path_buf());
        move |source| HubError::Io { at, action, path, source }
    }
}

/// What a HEAD on `resolve/` says about a file (`HfFileMetadata`).
struct Meta {
    commit: String,
    etag: String,
    size: Option<u64>,
    url: String,
    auth: bool,
}

impl Hub {
    pub fn new(settings: HubSettings) -> Hub {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(settings.etag_timeout))
            .timeout_recv_response(Some(settings.etag_timeout))
            .timeout_per_read(Some(settings.download_timeout))
            .user_agent(format!("onnx-parity/{}", env!("CARGO_PKG_VERSION")))
            .proxy(if settings.proxy_from_env { ureq::Proxy::try_from_env() } else { None })
            .build();
        Hub { agent: config.new_agent(), settings }
    }

    /// A hub configured from the environment ([`HubSettings::from_env`]).
    pub fn from_env() -> Hub {
        Hub::new(HubSettings::from_env())
    }

    pub fn settings(&self) -> &HubSettings {
        &self.settings
    }

    /// `{cache}/models--{org}--{name}` (`repo_folder_name`).
    fn repo_dir(&self, repo: &str) -> PathBuf {
        self.settings.cache.join(format!("models--{}", repo.replace('/', "--")))
    }

    /// The snapshot folder a revision points at in the cache, without any request.
    pub fn cached_snapshot_dir(&self, model_id: &str, revision: &str) -> Option<PathBuf> {
        validate_repo_id(model_id).ok()?;
        validate_revision(model_id, revision).ok()?;
        let dir = self.repo_dir(model_id);
        let sha = cached_commit(&dir, revision)?;
        Some(dir.join("snapshots").join(sha)).filter(|d| d.is_dir())
    }

    /// Several files of one revision, in order (each as [`Hub::snapshot_file`]).
    pub fn snapshot_files(&self, model_id: &str, revision: &str, files: &[&str]) -> Result<Vec<PathBuf>, HubError> {
        files.iter().map(|f| self.snapshot_file(model_id, revision, f)).collect()
    }

    /// The local path of `filename` in `model_id` at `revision`, downloading it if needed.
    pub fn snapshot_file(&self, model_id: &str, revision: &str, filename: &str) -> Result<PathBuf, HubError> {
        validate_repo_id(model_id)?;
        validate_revision(model_id, revision)?;
        validate_filename(model_id, revision, filename)?;
        let ctx = Ctx { repo: model_id, revision, file: filename };
        let dir = self.repo_dir(model_id);
        if is_commit_hash(revision) {
            let p = pointer_path(&dir, revision, filename);
            if p.exists() {
                return Ok(p);
            }
        }
        if self.settings.offline {
            return self.cached(&ctx, &dir);
        }
        match self.metadata(&ctx, &dir) {
            Ok(meta) => self.fetch(&ctx, &dir, meta),
            Err(e) if e.allows_cache_fallback() => match self.cached(&ctx, &dir) {
                Ok(p) => {
                    tracing::warn!("{e}; using the cached {}", p.display());
                    Ok(p)
                }
                Err(_) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Safetensors weights: `model.safetensors`, else the index and every shard it names.
    pub fn weights(&self, model_id: &str, revision: &str) -> Result<Weights, HubError> {
        let single = match self.snapshot_file(model_id, revision, SAFETENSORS_SINGLE) {
            Ok(p) => return Ok(Weights::Single(p)),
            Err(e) if e.is_missing_file() => e,
            Err(e) => return Err(e),
        };
        let index = match self.snapshot_file(model_id, revision, SAFETENSORS_INDEX) {
            Ok(p) => p,
            Err(e) if e.is_missing_file() => {
                return Err(HubError::NoWeights {
                    repo: model_id.into(),
                    revision: revision.into(),
                    single: single.into(),
                    index: e.into(),
                });
            }
            Err(e) => return Err(e),
        };
        let bad = |message: String| HubError::BadIndex { repo: model_id.into(), revision: revision.into(), path: index.clone(), message };
        let text = fs::read_to_string(&index).map_err(|e| bad(e.to_string()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("no \"weight_map\" object".into()))?;
        let mut names = std::collections::BTreeSet::new();
        for (tensor, shard) in map {
            names.insert(shard.as_str().ok_or_else(|| bad(format!("shard of {tensor} is not a string")))?);
        }
        if names.is_empty() {
            return Err(bad("\"weight_map\" is empty".into()));
        }
        let names: Vec<&str> = names.into_iter().collect();
        let shards = self.snapshot_files(model_id, revision, &names)?;
        Ok(Weights::Sharded { index, shards })
    }

    /// The cached copy of a file, or why there is none (`try_to_load_from_cache`).
    fn cached(&self, ctx: &Ctx, dir: &Path) -> Result<PathBuf, HubError> {
        let not_cached =
            |path: PathBuf, reason: String| HubError::NotCached { at: ctx.at(), path, cache: self.settings.cache.clone(), reason };
        let Some(sha) = cached_commit(dir, ctx.revision) else {
            return Err(not_cached(dir.join("refs").join(ctx.revision), format!("no refs/{} for this repo", ctx.revision)));
        };
        let p = pointer_path(dir, &sha, ctx.file);
        if p.exists() {
            return Ok(p);
        }
        if dir.join(".no_exist").join(&sha).join(ctx.file).is_file() {
            return Err(HubError::EntryNotFound { at: ctx.at() });
        }
        let reason = if p.symlink_metadata().is_ok() {
            "the snapshot link is dangling: its blob was deleted".to_string()
        } else {
            format!("snapshot {sha} has no such file")
        };
        Err(not_cached(p, reason))
    }

    fn resolve_url(&self, ctx: &Ctx) -> String {
        format!("{}/{}/resolve/{}/{}", self.settings.endpoint, ctx.repo, quote(ctx.revision, ""), quote(ctx.file, "/"))
    }

    /// Whether the token may go to `target` when coming from `from` (`_is_same_or_hub_host`).
    fn keeps_auth(&self, from: &str, target: &str) -> bool {
        let t = origin(target);
        t.is_some() && (t == origin(from) || t == origin(&self.settings.endpoint) || t == origin(DEFAULT_ENDPOINT))
    }

    fn request(&self, method: &str, url: &str, auth: bool, range_from: u64) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut req = ureq::http::Request::builder().method(method).uri(url).header("Accept-Encoding", "identity");
        if let (true, Some(t)) = (auth, &self.settings.token) {
            req = req.header("Authorization", format!("Bearer {}", t.expose()));
        }
        if range_from > 0 {
            req = req.header("Range", format!("bytes={range_from}-"));
        }
        let req = req.body(()).map_err(|e| self.scrub(&e.to_string()))?;
        self.agent.run(req).map_err(|e| self.scrub(&e.to_string()))
    }

    /// Removes the token from text that came from the network or a library before it can be shown.
    fn scrub(&self, text: &str) -> String {
        match &self.settings.token {
            Some(t) => text.replace(t.expose(), "<redacted>"),
            None => text.to_string(),
        }
    }

    fn server_message(&self, headers: &ureq::http::HeaderMap) -> String {
        let m = header(headers, "x-error-message").unwrap_or_default();
        let m: String = self.scrub(m).chars().take(300).collect();
        if m.is_empty() {
            m
        } else {
            format!(" ({m})")
        }
    }

    /// Maps a failed status to an error (`hf_raise_for_status`); a 404 for a missing file is
    /// remembered under `.no_exist/` with the commit the hub named, as Python does.
    fn status_error(&self, ctx: &Ctx, dir: &Path, url: &str, status: u16, headers: &ureq::http::HeaderMap) -> HubError {
        let at = ctx.at();
        match (status, header(headers, "x-error-code")) {
            (401 | 403, _) => HubError::Unauthorized {
                at,
                status,
                token_sent: self.settings.token.is_some() && self.keeps_auth(&self.settings.endpoint, url),
                server: self.server_message(headers),
                token_path: self.settings.token_path.clone(),
            },
            (_, Some("RepoNotFound")) => HubError::RepoNotFound { at, endpoint: self.settings.endpoint.clone() },
            (_, Some("RevisionNotFound")) => HubError::RevisionNotFound { at },
            (_, Some("EntryNotFound")) => {
                if let Some(sha) = header(headers, "x-repo-commit").filter(|s| is_safe_component(s)) {
                    let marker = dir.join(".no_exist").join(sha).join(ctx.file);
                    let _ = marker.parent().map(fs::create_dir_all);
                    let _ = OpenOptions::new().create(true).append(true).open(&marker);
                    let _ = write_ref(dir, ctx.revision, sha);
                }
                HubError::EntryNotFound { at }
            }
            (404, _) => HubError::NotFound { at, url: url.into() },
            _ => HubError::Http { at, url: url.into(), status, server: self.server_message(headers) },
        }
    }

    /// `get_hf_file_metadata`: HEAD, following on-hub redirects only.
    fn metadata(&self, ctx: &Ctx, dir: &Path) -> Result<Meta, HubError> {
        let mut url = self.resolve_url(ctx);
        let conn = |cause: String| HubError::Connection {
            at: ctx.at(),
            endpoint: self.settings.endpoint.clone(),
            cause,
            cache: self.settings.cache.clone(),
        };
        for _ in 0..MAX_REDIRECTS {
            let resp = self.request("HEAD", &url, self.keeps_auth(&self.settings.endpoint, &url), 0).map_err(conn)?;
            let (status, h) = (resp.status().as_u16(), resp.headers());
            let location = header(h, "location").map(|l| join_url(&url, l));
            let redirect = (300..400).contains(&status) && location.is_some();
            if redirect {
                let target = location.clone().unwrap_or_default();
                if self.keeps_auth(&url, &target) {
                    url = target;
                    continue;
                }
            } else if status >= 300 {
                return Err(self.status_error(ctx, dir, &url, status, h));
            }
            let missing = |missing| HubError::NotAHub { at: ctx.at(), url: url.clone(), missing };
            let commit = header(h, "x-repo-commit").ok_or_else(|| missing("an X-Repo-Commit header"))?;
            let etag = header(h, "x-linked-etag").or_else(|| header(h, "etag")).map(normalize_etag).ok_or_else(|| missing("an ETag"))?;
            if !is_safe_component(commit) || !is_safe_component(&etag) {
                return Err(missing("a usable commit and ETag (they must be plain file names)"));
            }
            let size =
                header(h, "x-linked-size").or(if redirect { None } else { header(h, "content-length") }).and_then(|s| s.parse().ok());
            let auth = !redirect || self.keeps_auth(&url, location.as_deref().unwrap_or_default());
            let url = if redirect { location.unwrap_or_default() } else { url.clone() };
            return Ok(Meta { commit: commit.to_string(), etag, size, url, auth });
        }
        Err(conn(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// Places the blob and the snapshot link (`_hf_hub_download_to_cache_dir` after the HEAD).
    fn fetch(&self, ctx: &Ctx, dir: &Path, meta: Meta) -> Result<PathBuf, HubError> {
        let blobs = dir.join("blobs");
        let blob = blobs.join(&meta.etag);
        let pointer = pointer_path(dir, &meta.commit, ctx.file);
        if pointer.exists() {
            let _ = write_ref(dir, ctx.revision, &meta.commit);
            return Ok(pointer);
        }
        let pointer_dir = pointer.parent().unwrap_or(dir);
        fs::create_dir_all(&blobs).map_err(ctx.io("creating", &blobs))?;
        fs::create_dir_all(pointer_dir).map_err(ctx.io("creating", pointer_dir))?;
        let tag = self.settings.cache.join("CACHEDIR.TAG");
        if !tag.exists() {
            let _ = fs::write(&tag, CACHEDIR_TAG);
        }
        write_ref(dir, ctx.revision, &meta.commit).map_err(ctx.io("writing", &dir.join("refs").join(ctx.revision)))?;
        let lock_path = self.settings.cache.join(".locks").join(dir.file_name().unwrap_or_default()).join(format!("{}.lock", meta.etag));
        let _lock = lock(&lock_path).map_err(ctx.io("locking", &lock_path))?;
        if !blob.exists() {
            remove_stale_incomplete(&blobs, &meta.etag);
            let tmp = blobs.join(format!("{}.{}.incomplete", meta.etag, unique_hex()));
            let result = self.download(ctx, &meta, &tmp).and_then(|()| fs::rename(&tmp, &blob).map_err(ctx.io("renaming into", &blob)));
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result?;
        }
        link(&blob, &pointer, ctx.file, &meta.etag).map_err(ctx.io("linking", &pointer))?;
        Ok(pointer)
    }

    /// `http_get`: streams `meta.url` into `tmp`, resuming with `Range` after a dropped
    /// connection, and checks the final size.
    fn download(&self, ctx: &Ctx, meta: &Meta, tmp: &Path) -> Result<(), HubError> {
        let mut file = OpenOptions::new().write(true).create_new(true).open(tmp).map_err(ctx.io("creating", tmp))?;
        let mut expected = meta.size;
        let mut progress = Progress::new(ctx, expected);
        let (mut done, mut retries) = (0u64, self.settings.download_retries);
        let mut buf = vec![0u8; 1 << 20];
        let interrupted =
            |done: u64, expected: Option<u64>, cause: String| HubError::Interrupted { at: ctx.at(), received: done, expected, cause };
        loop {
            let before = done;
            // Err((cause, whether resuming can help)): only transport failures are retried.
            let attempt: Result<(), (String, bool)> = (|| {
                let (mut url, mut auth) = (meta.url.clone(), meta.auth);
                let mut resp = None;
                for _ in 0..MAX_REDIRECTS {
                    let r = self.request("GET", &url, auth, done).map_err(|e| (e, true))?;
                    match (r.status().as_u16(), header(r.headers(), "location")) {
                        (300..=399, Some(l)) => {
                            let target = join_url(&url, l);
                            auth = auth && self.keeps_auth(&url, &target);
                            url = target;
                        }
                        _ => {
                            resp = Some(r);
                            break;
                        }
                    }
                }
                let r = resp.ok_or_else(|| (format!("more than {MAX_REDIRECTS} redirects"), false))?;
                let status = r.status().as_u16();
                match status {
                    206 if done > 0 => {
                        let start = header(r.headers(), "content-range")
                            .and_then(|c| c.strip_prefix("bytes ")?.split('-').next()?.parse::<u64>().ok());
                        if start != Some(done) {
                            return Err((format!("resumed at the wrong offset (wanted {done})"), false));
                        }
                    }
                    200 | 206 => {
                        if done > 0 {
                            file.set_len(0).and_then(|()| file.seek(SeekFrom::Start(0)).map(drop)).map_err(|e| (e.to_string(), false))?;
                            done = 0;
                        }
                    }
                    _ => return Err((format!("HTTP {status}{}", self.server_message(r.headers())), false)),
                }
                let total = header(r.headers(), "content-range")
                    .and_then(|c| c.rsplit('/').next()?.parse().ok())
                    .or_else(|| header(r.headers(), "content-length").and_then(|l| l.parse::<u64>().ok()).map(|l| l + done));
                if expected.is_none() {
                    expected = total;
                    progress.total = total;
                }
                let mut body = r.into_body().into_reader();
                loop {
                    let n = match body.read(&mut buf) {
                        // A close before the announced size is a dropped connection (ureq reports EOF).
                        Ok(0) if expected.is_some_and(|e| done < e) => return Err((format!("connection closed after {done} bytes"), true)),
                        Ok(0) => return Ok(()),
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err((self.scrub(&e.to_string()), true)),
                    };
                    file.write_all(&buf[..n]).map_err(|e| (format!("writing {}: {e}", tmp.display()), false))?;
                    done += n as u64;
                    progress.update(done);
                }
            })();
            match attempt {
                Ok(()) if expected.is_none_or(|e| e == done) => break,
                Ok(()) => return Err(interrupted(done, expected, "the server sent more bytes than it announced".into())),
                Err((cause, transient)) => {
                    if done > before {
                        retries = self.settings.download_retries;
                    }
                    if retries == 0 || !transient {
                        return Err(interrupted(done, expected, cause));
                    }
                    retries -= 1;
                    tracing::warn!("{} of {}@{}: {cause}; resuming at byte {done}", ctx.file, ctx.repo, ctx.revision);
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        file.sync_all().map_err(ctx.io("syncing", tmp))?;
        progress.finish(done);
        Ok(())
    }
}

/// Throttled `tracing` progress of one download (bytes done / total, at most once a second).
struct Progress {
    label: String,
    total: Option<u64>,
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new(ctx: &Ctx, total: Option<u64>) -> Progress {
        let label = format!("{}@{} {}", ctx.repo, ctx.revision, ctx.file);
        tracing::info!("downloading {label} ({})", total.map_or("size unknown".to_string(), mib));
        let now = Instant::now();
        Progress { label, total, start: now, last: now }
    }

    fn update(&mut self, done: u64) {
        if self.last.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last = Instant::now();
        match self.total.filter(|t| *t > 0) {
            Some(t) => tracing::info!("{}: {} / {} ({:.0}%)", self.label, mib(done), mib(t), 100.0 * done as f64 / t as f64),
            None => tracing::info!("{}: {}", self.label, mib(done)),
        }
    }

    fn finish(&self, done: u64) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        tracing::info!("downloaded {} ({} in {:.1} s, {:.1} MiB/s)", self.label, mib(done), secs, done as f64 / secs / 1048576.0);
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

fn header<'h>(h: &'h ureq::http::HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `REGEX_COMMIT_HASH`: a full lowercase commit sha.
fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A name the server sent that becomes one path component (a commit or an etag).
fn is_safe_component(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `_normalize_etag`: `etag.lstrip("W/").strip('"')` (lstrip drops any leading `W` and `/`).
fn normalize_etag(e: &str) -> String {
    e.trim_start_matches(['W', '/']).trim_matches('"').to_string()
}

/// `validate_repo_id`: `name` or `namespace/name`, ASCII `[A-Za-z0-9_.-]`, each part 1–96
/// characters starting and ending with a word character, no `--` or `..`, no `.git` suffix.
fn validate_repo_id(repo: &str) -> Result<(), HubError> {
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
fn validate_revision(repo: &str, revision: &str) -> Result<(), HubError> {
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
fn validate_filename(repo: &str, revision: &str, file: &str) -> Result<(), HubError> {
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

/// `urllib.parse.quote(s, safe)`: percent-encodes all but `A-Za-z0-9_.-~` and `safe`.
fn quote(s: &str, safe: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) || safe.as_bytes().contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `(scheme, host, port)` of an absolute URL, with the scheme's default port.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit('@').next()?;
    let (host, port) = match hostport.rfind(':') {
        Some(i) if !hostport[i..].contains(']') => (&hostport[..i], hostport[i + 1..].parse().ok()?),
        _ => (hostport, if scheme == "https" { 443 } else { 80 }),
    };
    Some((scheme, host.to_ascii_lowercase(), port))
}

/// `urljoin(base, location)` for the forms redirects use: absolute, `//host/..`, `/path`, `rel`.
fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(l) = location.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = rest[authority.len()..].split(['?', '#']).next().unwrap_or_default();
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{scheme}://{authority}{}{location}", if dir.is_empty() { "/" } else { dir })
}

/// `_get_pointer_path`: `snapshots/{sha}/{file}` (file already validated).
fn pointer_path(dir: &Path, sha: &str, file: &str) -> PathBuf {
    file.split('/').fold(dir.join("snapshots").join(sha), |p, s| p.join(s))
}

/// The commit a revision names in the cache: itself when it is a sha, else `refs/{revision}`
/// (surrounding blanks ignored, for hand-written refs).
fn cached_commit(dir: &Path, revision: &str) -> Option<String> {
    if is_commit_hash(revision) {
        return Some(revision.to_string());
    }
    let sha = fs::read_to_string(dir.join("refs").join(revision)).ok()?;
    Some(sha.trim().to_string()).filter(|s| is_safe_component(s))
}

/// `_cache_commit_hash_for_specific_revision`: atomic, and only when the ref changes.
fn write_ref(dir: &Path, revision: &str, commit: &str) -> io::Result<()> {
    if revision == commit {
        return Ok(());
    }
    let path = dir.join("refs").join(revision);
    if fs::read_to_string(&path).is_ok_and(|c| c == commit) {
        return Ok(());
    }
    crate::atomic::write_atomic(&path, commit.as_bytes())
}

/// `_create_symlink`: a relative link `../../blobs/{etag}` (one more `../` per folder level of
/// the file), replacing a stale or dangling entry.
fn link(blob: &Path, pointer: &Path, file: &str, etag: &str) -> io::Result<()> {
    let _ = fs::remove_file(pointer);
    #[cfg(unix)]
    {
        let rel: PathBuf = vec![".."; 1 + file.split('/').count()].join("/").into();
        match std::os::unix::fs::symlink(rel.join("blobs").join(etag), pointer) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && fs::canonicalize(pointer)? == fs::canonicalize(blob)? => Ok(()),
            r => r,
        }
    }
    #[cfg(not(unix))]
    {
        // No symlinks: a copy, as huggingface_hub does where they are unsupported.
        let _ = (file, etag);
        fs::copy(blob, pointer).map(drop)
    }
}

/// An exclusive `flock` on the lock file Python's `WeakFileLock` uses, logging while it waits.
fn lock(path: &Path) -> io::Result<File> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o664);
    let f = opts.open(path)?;
    let start = Instant::now();
    let mut logged = start;
    while f.try_lock().is_err() {
        if logged.elapsed() >= LOCK_LOG_EVERY {
            tracing::info!("still waiting for {} ({:.0} s)", path.display(), start.elapsed().as_secs_f64());
            logged = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(f)
}

/// Deletes `{etag}.*.incomplete` (and the older `{etag}.incomplete`) left by a crashed download,
/// once untouched long enough that no live writer owns it.
fn remove_stale_incomplete(blobs: &Path, etag: &str) {
    let Ok(entries) = fs::read_dir(blobs) else { return };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(&format!("{etag}.")) && name.ends_with(".incomplete")) {
            continue;
        }
        let old = e.metadata().and_then(|m| m.modified()).is_ok_and(|m| now.duration_since(m).unwrap_or_default() >= STALE_INCOMPLETE);
        if old && fs::remove_file(e.path()).is_ok() {
            tracing::info!("removed a leftover partial download {}", e.path().display());
        }
    }
}

/// Eight hex digits, unique per process and call (`uuid4().hex[:8]` in Python).
fn unique_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{:08x}", h.finish() as u32)
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

    /// Guards: URLs percent-encode the revision fully and the file name except `/`, as `hf_hub_url`.
    #[test]
    fn urls_quote_like_hf_hub_url() {
        assert_eq!(quote("refs/pr/1", ""), "refs%2Fpr%2F1");
        assert_eq!(quote("sub dir/a+b.json", "/"), "sub%20dir/a%2Bb.json");
        assert_eq!(quote("v1.0_x-y~", ""), "v1.0_x-y~");
    }

    /// Guards: redirect targets join like `urljoin`, and origins include the default port, so the
    /// token follows only same-origin hops.
    #[test]
    fn redirects_join_and_compare_origins() {
        let base = "http://127.0.0.1:9/org/m/resolve/main/config.json";
        assert_eq!(join_url(base, "/api/x"), "http://127.0.0.1:9/api/x");
        assert_eq!(join_url(base, "other.json"), "http://127.0.0.1:9/org/m/resolve/main/other.json");
        assert_eq!(join_url(base, "//cdn.test/a"), "http://cdn.test/a");
        assert_eq!(join_url(base, "https://cdn.test/a?sig=1"), "https://cdn.test/a?sig=1");
        assert_eq!(origin("https://Hub.Test/x"), Some(("https".into(), "hub.test".into(), 443)));
        assert_eq!(origin("http://u@127.0.0.1:8080/x"), Some(("http".into(), "127.0.0.1".into(), 8080)));
        assert_eq!(origin("http://[::1]/x"), Some(("http".into(), "[::1]".into(), 80)));
        assert_ne!(origin("http://127.0.0.1:1/"), origin("http://127.0.0.1:2/"));
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
