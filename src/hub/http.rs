//! The hub's HTTP side, as `huggingface_hub` speaks it (see the module doc of [`super`]): the
//! HEAD on `resolve/` that names a file's commit, blob and size, redirects that keep the token
//! only on the hub's origin, and a download that resumes after a dropped connection.

use std::fs::OpenOptions;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::{Ctx, HubError};
use super::names::{is_safe_component, normalize_etag};
use super::settings::{HubSettings, DEFAULT_ENDPOINT};

const MAX_REDIRECTS: usize = 10;
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A request that got no response; the text of the cause, scrubbed of the token (it comes from
/// a library that may quote the request).
#[derive(Debug)]
pub(super) struct Unreachable(pub(super) String);

/// What a HEAD on `resolve/` says about a file (`HfFileMetadata`).
pub(super) struct Meta {
    pub(super) commit: String,
    pub(super) etag: String,
    pub(super) size: Option<u64>,
    pub(super) url: String,
    pub(super) auth: bool,
}

/// The HTTP client of one [`super::Hub`].
#[derive(Debug)]
pub(super) struct Http {
    settings: HubSettings,
    agent: ureq::Agent,
}

impl Http {
    pub(super) fn new(settings: HubSettings) -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(settings.etag_timeout))
            .timeout_recv_response(Some(settings.etag_timeout))
            .timeout_per_read(Some(settings.download_timeout))
            .user_agent(format!("onnx-parity/{}", env!("CARGO_PKG_VERSION")))
            .proxy(if settings.proxy_from_env { ureq::Proxy::try_from_env() } else { None })
            .build();
        Http { agent: config.new_agent(), settings }
    }

    fn resolve_url(&self, ctx: &Ctx) -> String {
        format!("{}/{}/resolve/{}/{}", self.settings.endpoint, ctx.repo, quote(ctx.revision, ""), quote(ctx.file, "/"))
    }

    /// Whether the token may go to `target` when coming from `from` (`_is_same_or_hub_host`).
    fn keeps_auth(&self, from: &str, target: &str) -> bool {
        let t = origin(target);
        t.is_some() && (t == origin(from) || t == origin(&self.settings.endpoint) || t == origin(DEFAULT_ENDPOINT))
    }

    fn request(&self, method: &str, url: &str, auth: bool, range_from: u64) -> Result<ureq::http::Response<ureq::Body>, Unreachable> {
        let mut req = ureq::http::Request::builder().method(method).uri(url).header("Accept-Encoding", "identity");
        if let (true, Some(t)) = (auth, &self.settings.token) {
            req = req.header("Authorization", format!("Bearer {}", t.expose()));
        }
        if range_from > 0 {
            req = req.header("Range", format!("bytes={range_from}-"));
        }
        let req = req.body(()).map_err(|e| Unreachable(self.scrub(&e.to_string())))?;
        self.agent.run(req).map_err(|e| Unreachable(self.scrub(&e.to_string())))
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

    /// Maps a failed status to an error (`hf_raise_for_status`); a missing file carries the
    /// commit the hub named, so the cache can remember the absence.
    fn status_error(&self, ctx: &Ctx, url: &str, status: u16, headers: &ureq::http::HeaderMap) -> HubError {
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
                HubError::EntryNotFound { at, commit: header(headers, "x-repo-commit").filter(|s| is_safe_component(s)).map(String::from) }
            }
            (404, _) => HubError::NotFound { at, url: url.into() },
            _ => HubError::Http { at, url: url.into(), status, server: self.server_message(headers) },
        }
    }

    /// `get_hf_file_metadata`: HEAD, following on-hub redirects only.
    pub(super) fn metadata(&self, ctx: &Ctx) -> Result<Meta, HubError> {
        let mut url = self.resolve_url(ctx);
        let conn = |cause: String| HubError::Connection {
            at: ctx.at(),
            endpoint: self.settings.endpoint.clone(),
            cause,
            cache: self.settings.cache.clone(),
        };
        for _ in 0..MAX_REDIRECTS {
            let resp = self.request("HEAD", &url, self.keeps_auth(&self.settings.endpoint, &url), 0).map_err(|e| conn(e.0))?;
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
                return Err(self.status_error(ctx, &url, status, h));
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

    /// `http_get`: streams `meta.url` into `tmp`, resuming with `Range` after a dropped
    /// connection, and checks the final size.
    pub(super) fn download(&self, ctx: &Ctx, meta: &Meta, tmp: &Path) -> Result<(), HubError> {
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
                    let r = self.request("GET", &url, auth, done).map_err(|e| (e.0, true))?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
