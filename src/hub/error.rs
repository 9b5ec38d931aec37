//! Why a hub file could not be resolved, and the (repo, revision, file) every error names.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::weights::{SAFETENSORS_INDEX, SAFETENSORS_SINGLE};

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
    /// The hub says the file is absent; `commit` is the revision's commit when the hub named
    /// it (the cache then remembers the absence, as Python does).
    #[error("{} not found in {} at revision {}", at.file, at.repo, at.revision)]
    EntryNotFound { at: Box<Target>, commit: Option<String> },
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
    pub(super) fn allows_cache_fallback(&self) -> bool {
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

/// The (repo, revision, file) a request is about, validated; carried into every error.
pub(super) struct Ctx<'a> {
    pub(super) repo: &'a str,
    pub(super) revision: &'a str,
    pub(super) file: &'a str,
}

impl Ctx<'_> {
    pub(super) fn at(&self) -> Box<Target> {
        Box::new(Target { repo: self.repo.into(), revision: self.revision.into(), file: self.file.into() })
    }

    pub(super) fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> HubError {
        let (at, path) = (self.at(), path.to_path_buf());
        move |source| HubError::Io { at, action, path, source }
    }
}
