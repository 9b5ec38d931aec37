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
//! Settings ([`HubSettings::from_lookup`] of the run context, mirroring `constants.py`): cache = `HF_HUB_CACHE`, else
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
//! hf-hub's blocking API wraps tokio + reqwest and always pulls `hf-xet` (docs/design.md: ~300 crates,
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

//! Modules: `settings` (the environment), `names` (what may become a path), `cache` (the
//! layout on disk), `http` (HEAD, redirects, resumable downloads), `client` ([`Hub`] itself),
//! `error`, `weights`.

mod cache;
mod client;
mod error;
mod http;
mod names;
mod settings;
mod weights;

pub use client::Hub;
pub use error::{HubError, Target};
pub use settings::{HubSettings, Secret, DEFAULT_ENDPOINT, DEFAULT_REVISION};
pub use weights::{Weights, SAFETENSORS_INDEX, SAFETENSORS_SINGLE};
