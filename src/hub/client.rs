//! [`Hub`]: resolves `(model_id, revision, file)` to a path in the shared cache, from the cache
//! alone when it can, else through the hub (see the module doc of [`super`]).

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use super::cache::{cached_commit, link, lock, pointer_path, remove_stale_incomplete, repo_dir, unique_hex, write_ref, CACHEDIR_TAG};
use super::error::{Ctx, HubError};
use super::http::{Http, Meta};
use super::names::{is_commit_hash, validate_filename, validate_repo_id, validate_revision};
use super::settings::HubSettings;
use super::weights::{Weights, SAFETENSORS_INDEX, SAFETENSORS_SINGLE};

/// Resolves hub files to paths in the shared cache (see the module doc).
#[derive(Debug)]
pub struct Hub {
    settings: HubSettings,
    http: Http,
}

impl Hub {
    pub fn new(settings: HubSettings) -> Hub {
        Hub { http: Http::new(settings.clone()), settings }
    }

    /// `{cache}/models--{org}--{name}` (`repo_folder_name`).
    fn repo_dir(&self, repo: &str) -> PathBuf {
        repo_dir(&self.settings.cache, repo)
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
        match self.http.metadata(&ctx) {
            Ok(meta) => self.fetch(&ctx, &dir, meta),
            Err(HubError::EntryNotFound { at, commit: Some(sha) }) => {
                // Remembered under `.no_exist/` with the commit the hub named, as Python does.
                let marker = dir.join(".no_exist").join(&sha).join(ctx.file);
                let _ = marker.parent().map(fs::create_dir_all);
                let _ = OpenOptions::new().create(true).append(true).open(&marker);
                let _ = write_ref(&dir, ctx.revision, &sha);
                Err(HubError::EntryNotFound { at, commit: Some(sha) })
            }
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
            return Err(HubError::EntryNotFound { at: ctx.at(), commit: Some(sha) });
        }
        let reason = if p.symlink_metadata().is_ok() {
            "the snapshot link is dangling: its blob was deleted".to_string()
        } else {
            format!("snapshot {sha} has no such file")
        };
        Err(not_cached(p, reason))
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
            let result =
                self.http.download(ctx, &meta, &tmp).and_then(|()| fs::rename(&tmp, &blob).map_err(ctx.io("renaming into", &blob)));
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result?;
        }
        link(&blob, &pointer, ctx.file, &meta.etag).map_err(ctx.io("linking", &pointer))?;
        Ok(pointer)
    }
}
