//! `onnx_parity::hub` against a mock hub on 127.0.0.1: the cache layout huggingface_hub writes and
//! reads (refs/, blobs/, relative snapshot symlinks), offline resolution, gated repos and tokens,
//! not-found errors, dropped connections (no partial file ever in snapshots/), resumption, and the
//! token never reaching output or a CDN. No network, no process environment, a few seconds.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use onnx_parity::hub::{Hub, HubError, HubSettings, Secret, Weights};

mod support;
use support::Capture;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_TestTokenNeverShown1234567890";

/// A 40- (git) or 64-hex (LFS sha256) stand-in for a content hash.
fn fake_hash(data: &[u8], hex_len: usize) -> String {
    use std::hash::{Hash, Hasher};
    let mut out = String::new();
    let mut seed = 0u64;
    while out.len() < hex_len {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (seed, data).hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
        seed += 1;
    }
    out.truncate(hex_len);
    out
}

#[derive(Clone)]
struct MockFile {
    body: Vec<u8>,
    /// Served like an LFS file: HEAD/GET on resolve/ redirect to the CDN listener.
    lfs: bool,
}

impl MockFile {
    fn etag(&self) -> String {
        fake_hash(&self.body, if self.lfs { 64 } else { 40 })
    }
}

#[derive(Clone, Default)]
struct MockRepo {
    files: BTreeMap<String, MockFile>,
    /// When set, requests must carry `Authorization: Bearer {token}` (a gated repo).
    token: Option<String>,
}

#[derive(Debug, Clone)]
struct Seen {
    cdn: bool,
    authorization: Option<String>,
    range: Option<String>,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, MockRepo>,
    /// File name → how many more GETs of it send half the body and then close the connection.
    drops: HashMap<String, u32>,
    seen: Vec<Seen>,
}

/// A hub (resolve/ endpoint) and a CDN on two loopback ports, i.e. two origins.
struct MockHub {
    endpoint: String,
    state: Arc<Mutex<State>>,
}

impl MockHub {
    fn start(repos: &[(&str, MockRepo)]) -> MockHub {
        let state =
            Arc::new(Mutex::new(State { repos: repos.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), ..State::default() }));
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind hub");
        let cdn = TcpListener::bind("127.0.0.1:0").expect("bind cdn");
        let endpoint = format!("http://{}", hub.local_addr().expect("addr"));
        let cdn_base = format!("http://{}", cdn.local_addr().expect("addr"));
        for (listener, is_cdn) in [(hub, false), (cdn, true)] {
            let (state, cdn_base) = (state.clone(), cdn_base.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (state, cdn_base) = (state.clone(), cdn_base.clone());
                    std::thread::spawn(move || serve(stream, &state, is_cdn, &cdn_base));
                }
            });
        }
        MockHub { endpoint, state }
    }

    fn drop_next_gets(&self, file: &str, times: u32) {
        self.state.lock().unwrap().drops.insert(file.to_string(), times);
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
}

fn respond(s: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8], send_body: bool) {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    if send_body {
        let _ = s.write_all(body);
    }
}

fn serve(mut stream: TcpStream, state: &Mutex<State>, is_cdn: bool, cdn_base: &str) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let seen = Seen { cdn: is_cdn, authorization: headers.get("authorization").cloned(), range: headers.get("range").cloned() };
    let mut st = state.lock().unwrap();
    st.seen.push(seen);
    let head = method == "HEAD";
    let (file, mut extra): (MockFile, Vec<(&str, String)>) = if is_cdn {
        // /blob/{etag}?sig=…: any file of any repo with that etag.
        let etag = path.trim_start_matches("/blob/").split('?').next().unwrap_or("").to_string();
        match st.repos.values().flat_map(|r| r.files.values()).find(|f| f.etag() == etag) {
            Some(f) => (f.clone(), vec![]),
            None => return respond(&mut stream, "404 Not Found", &[], b"", false),
        }
    } else {
        // /{org}/{name}/resolve/{revision}/{file}
        let segs: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
        if segs.len() < 5 || segs[2] != "resolve" {
            return respond(&mut stream, "400 Bad Request", &[], b"", false);
        }
        let (repo_id, revision, name) = (format!("{}/{}", segs[0], segs[1]), segs[3].replace("%2F", "/"), segs[4].to_string());
        let Some(repo) = st.repos.get(&repo_id).cloned() else {
            return respond(&mut stream, "404 Not Found", &[("X-Error-Code", "RepoNotFound".into())], b"", !head);
        };
        if let Some(t) = &repo.token {
            match headers.get("authorization") {
                Some(a) if *a == format!("Bearer {t}") => {}
                Some(_) => {
                    let msg = ("X-Error-Message", "Invalid credentials in Authorization header".to_string());
                    return respond(&mut stream, "401 Unauthorized", &[msg], b"", !head);
                }
                None => {
                    let h = [
                        ("X-Error-Code", "GatedRepo".to_string()),
                        ("X-Error-Message", format!("Access to model {repo_id} is restricted.")),
                    ];
                    return respond(&mut stream, "401 Unauthorized", &h, b"", !head);
                }
            }
        }
        if revision != "main" && revision != COMMIT {
            return respond(&mut stream, "404 Not Found", &[("X-Error-Code", "RevisionNotFound".into())], b"", !head);
        }
        let Some(file) = repo.files.get(&name).cloned() else {
            let h = [("X-Error-Code", "EntryNotFound".to_string()), ("X-Repo-Commit", COMMIT.to_string())];
            return respond(&mut stream, "404 Not Found", &h, b"", !head);
        };
        let mut extra = vec![("X-Repo-Commit", COMMIT.to_string())];
        if file.lfs {
            extra.push(("X-Linked-Etag", format!("\"{}\"", file.etag())));
            extra.push(("X-Linked-Size", file.body.len().to_string()));
            extra.push(("Location", format!("{cdn_base}/blob/{}?sig=cdn-signature", file.etag())));
            return respond(&mut stream, "302 Found", &extra, b"", !head);
        }
        extra.push(("ETag", format!("\"{}\"", file.etag())));
        (file, extra)
    };
    let name =
        st.repos.values().flat_map(|r| r.files.iter()).find(|(_, f)| f.etag() == file.etag()).map(|(n, _)| n.clone()).unwrap_or_default();
    let drop_now = !head && st.drops.get(&name).is_some_and(|n| *n > 0);
    if drop_now {
        *st.drops.get_mut(&name).unwrap() -= 1;
    }
    drop(st);
    let start = headers.get("range").and_then(|r| r.strip_prefix("bytes=")?.trim_end_matches('-').parse::<usize>().ok()).unwrap_or(0);
    let (status, body) = if start > 0 {
        extra.push(("Content-Range", format!("bytes {start}-{}/{}", file.body.len() - 1, file.body.len())));
        ("206 Partial Content", &file.body[start..])
    } else {
        ("200 OK", &file.body[..])
    };
    if drop_now {
        respond(&mut stream, status, &extra, &body[..body.len() / 2], true);
        let _ = stream.flush();
        // A Content-Length promising the whole body, half of it sent, then the connection closed.
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    respond(&mut stream, status, &extra, body, !head);
}

/// The sample repo: a small git file, an LFS weight file behind the CDN, and a nested file.
fn sample_repo(token: Option<&str>) -> MockRepo {
    let mut files = BTreeMap::new();
    files.insert("config.json".into(), MockFile { body: br#"{"model_type":"gemma4_text"}"#.to_vec(), lfs: false });
    files.insert("model.safetensors".into(), MockFile { body: (0..300_000u32).map(|i| (i % 251) as u8).collect(), lfs: true });
    files.insert("sub/extra.json".into(), MockFile { body: b"{}".to_vec(), lfs: false });
    MockRepo { files, token: token.map(String::from) }
}

fn settings(cache: &Path, endpoint: &str) -> HubSettings {
    let mut s = HubSettings::new(cache, endpoint);
    s.etag_timeout = Duration::from_secs(5);
    s.download_timeout = Duration::from_secs(5);
    s
}

fn offline(cache: &Path) -> Hub {
    let mut s = settings(cache, "http://127.0.0.1:9");
    s.offline = true;
    Hub::new(s)
}

fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

/// Every file name under `dir`, recursively, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Guards: a download lands as huggingface_hub lays it out — refs/main holds the commit with no
/// newline, blobs/{etag} the bytes, snapshots/{commit}/{file} a relative symlink to the blob (one
/// more `../` per folder level), CACHEDIR.TAG at the root — and a second, offline Hub resolves
/// the same paths (and the weights) without a single request.
#[test]
fn download_lays_out_the_cache_like_huggingface_hub() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let repo = sample_repo(None);
    let mock = MockHub::start(&[("org/model", repo.clone())]);
    let hub = Hub::new(settings(tmp.path(), &mock.endpoint));
    let files = ["config.json", "model.safetensors", "sub/extra.json"];
    let paths = hub.snapshot_files("org/model", "main", &files).expect("downloads");
    let dir = repo_dir(tmp.path(), "org/model");
    assert_eq!(std::fs::read_to_string(dir.join("refs/main")).unwrap(), COMMIT);
    for (name, path) in files.iter().zip(&paths) {
        let f = &repo.files[*name];
        assert_eq!(*path, dir.join("snapshots").join(COMMIT).join(name));
        let depth = name.matches('/').count();
        let expect = format!("{}blobs/{}", "../".repeat(2 + depth), f.etag());
        assert_eq!(std::fs::read_link(path).unwrap(), PathBuf::from(expect), "{name}");
        assert_eq!(std::fs::read(dir.join("blobs").join(f.etag())).unwrap(), f.body, "{name}");
        assert_eq!(std::fs::read(path).unwrap(), f.body, "{name}");
    }
    assert!(tree(&dir.join("blobs")).iter().all(|n| !n.ends_with(".incomplete")));
    assert!(tmp.path().join("CACHEDIR.TAG").is_file());
    assert!(tmp.path().join(".locks/models--org--model").is_dir());
    assert_eq!(hub.cached_snapshot_dir("org/model", "main"), Some(dir.join("snapshots").join(COMMIT)));

    let requests = mock.seen().len();
    let off = offline(tmp.path());
    assert_eq!(off.snapshot_files("org/model", "main", &files).expect("offline"), paths);
    assert_eq!(off.snapshot_file("org/model", COMMIT, "config.json").expect("by sha"), paths[0]);
    assert_eq!(off.weights("org/model", "main").expect("weights"), Weights::Single(paths[1].clone()));
    // Online with a sha whose file is cached: no request either (the `REGEX_COMMIT_HASH` shortcut).
    assert_eq!(hub.snapshot_file("org/model", COMMIT, "config.json").unwrap(), paths[0]);
    assert_eq!(mock.seen().len(), requests);
}

/// Guards: sharded weights resolve to the index plus every shard it names, in shard order; the
/// 404 for model.safetensors is remembered under .no_exist/{commit}/ like huggingface_hub, and
/// the same weights then resolve offline.
#[test]
fn sharded_weights_resolve_index_and_shards() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mut repo = MockRepo::default();
    let index = r#"{"metadata":{},"weight_map":{"b":"model-00002-of-00002.safetensors","a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
    repo.files.insert("model.safetensors.index.json".into(), MockFile { body: index.into(), lfs: false });
    repo.files.insert("model-00001-of-00002.safetensors".into(), MockFile { body: vec![1; 1000], lfs: true });
    repo.files.insert("model-00002-of-00002.safetensors".into(), MockFile { body: vec![2; 1000], lfs: true });
    let mock = MockHub::start(&[("org/sharded", repo)]);
    let hub = Hub::new(settings(tmp.path(), &mock.endpoint));
    let w = hub.weights("org/sharded", "main").expect("sharded weights");
    let snap = repo_dir(tmp.path(), "org/sharded").join("snapshots").join(COMMIT);
    let shards = vec![snap.join("model-00001-of-00002.safetensors"), snap.join("model-00002-of-00002.safetensors")];
    assert_eq!(w, Weights::Sharded { index: snap.join("model.safetensors.index.json"), shards: shards.clone() });
    assert_eq!(w.files(), &shards[..]);
    assert!(repo_dir(tmp.path(), "org/sharded").join(".no_exist").join(COMMIT).join("model.safetensors").is_file());
    assert_eq!(offline(tmp.path()).weights("org/sharded", "main").expect("offline"), w);
    assert!(matches!(offline(tmp.path()).weights("org/none", "main"), Err(HubError::NoWeights { .. })));
}

/// Guards: a gated repo without a token is a clear error (gated or private, set HF_TOKEN, where
/// the token file is), a refused token says so, and the right token then downloads; the token
/// goes to the hub but never to the CDN a redirect points at.
#[test]
fn gated_repo_needs_a_token() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mock = MockHub::start(&[("google/gated", sample_repo(Some(TOKEN)))]);
    let e = Hub::new(settings(tmp.path(), &mock.endpoint)).snapshot_file("google/gated", "main", "config.json").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HubError::Unauthorized { status: 401, token_sent: false, .. }), "{e:?}");
    for part in ["google/gated", "config.json", "main", "gated", "HF_TOKEN", "hf auth login", "token"] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
    let mut wrong = settings(tmp.path(), &mock.endpoint);
    wrong.token = Secret::new("hf_wrong");
    let e = Hub::new(wrong).snapshot_file("google/gated", "main", "config.json").unwrap_err();
    assert!(matches!(e, HubError::Unauthorized { token_sent: true, .. }), "{e:?}");
    assert!(e.to_string().contains("refused"), "{e}");
    assert!(!repo_dir(tmp.path(), "google/gated").join("snapshots").exists());

    let mut good = settings(tmp.path(), &mock.endpoint);
    good.token = Secret::new(TOKEN);
    let p = Hub::new(good).snapshot_files("google/gated", "main", &["config.json", "model.safetensors"]).expect("with token");
    assert_eq!(std::fs::read(&p[1]).unwrap(), sample_repo(None).files["model.safetensors"].body);
    let seen = mock.seen();
    assert!(seen.iter().any(|s| !s.cdn && s.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))));
    assert!(seen.iter().any(|s| s.cdn), "the LFS file came from the CDN");
    assert!(seen.iter().filter(|s| s.cdn).all(|s| s.authorization.is_none()), "{seen:?}");
}

/// Guards: 404s name what is missing — the repo, the revision, or the file at that revision —
/// and leave nothing in snapshots/.
#[test]
fn not_found_names_repo_revision_and_file() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mock = MockHub::start(&[("org/model", sample_repo(None))]);
    let hub = Hub::new(settings(tmp.path(), &mock.endpoint));
    let e = hub.snapshot_file("org/missing", "main", "config.json").unwrap_err();
    assert!(matches!(e, HubError::RepoNotFound { .. }) && e.to_string().contains("org/missing"), "{e}");
    let e = hub.snapshot_file("org/model", "v9", "config.json").unwrap_err();
    assert!(matches!(e, HubError::RevisionNotFound { .. }) && e.to_string().contains("v9"), "{e}");
    let e = hub.snapshot_file("org/model", "main", "tokenizer.json").unwrap_err();
    assert!(matches!(e, HubError::EntryNotFound { .. }), "{e:?}");
    assert!(e.to_string().contains("tokenizer.json") && e.to_string().contains("org/model") && e.to_string().contains("main"), "{e}");
    assert!(!repo_dir(tmp.path(), "org/model").join("snapshots").exists());
    let e = hub.snapshot_file("org/model", "main", "../../etc/passwd").unwrap_err();
    assert!(matches!(e, HubError::InvalidFilename { .. }), "{e:?}");
    assert!(matches!(hub.snapshot_file("org/a/b", "main", "x"), Err(HubError::InvalidRepoId { .. })));
}

/// Guards: a connection dropped mid-file (Content-Length promised, half sent) is an error that
/// leaves no file in snapshots/, no complete blob and no .incomplete file; calling again succeeds.
#[test]
fn dropped_connection_leaves_nothing_half_written() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let repo = sample_repo(None);
    let mock = MockHub::start(&[("org/model", repo.clone())]);
    let mut s = settings(tmp.path(), &mock.endpoint);
    s.download_retries = 0;
    let hub = Hub::new(s);
    for name in ["model.safetensors", "config.json"] {
        mock.drop_next_gets(name, 1);
        let e = hub.snapshot_file("org/model", "main", name).unwrap_err();
        assert!(matches!(e, HubError::Interrupted { .. }), "{name}: {e:?}");
        assert!(e.to_string().contains(name) && e.to_string().contains("org/model"), "{e}");
        let dir = repo_dir(tmp.path(), "org/model");
        assert!(!dir.join("snapshots").join(COMMIT).join(name).exists(), "{name}");
        assert!(std::fs::symlink_metadata(dir.join("snapshots").join(COMMIT).join(name)).is_err(), "{name}");
        assert_eq!(tree(&dir.join("blobs")), Vec::<String>::new(), "{name}");
        let p = hub.snapshot_file("org/model", "main", name).expect("retry succeeds");
        assert_eq!(std::fs::read(&p).unwrap(), repo.files[name].body);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Guards: with retries allowed, a dropped connection resumes with `Range: bytes=N-` (as
/// `http_get`) and the blob is byte-identical.
#[test]
fn dropped_connection_resumes_with_range() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let repo = sample_repo(None);
    let mock = MockHub::start(&[("org/model", repo.clone())]);
    mock.drop_next_gets("model.safetensors", 1);
    let p = Hub::new(settings(tmp.path(), &mock.endpoint)).snapshot_file("org/model", "main", "model.safetensors").expect("resumes");
    assert_eq!(std::fs::read(&p).unwrap(), repo.files["model.safetensors"].body);
    let ranges: Vec<_> = mock.seen().into_iter().filter_map(|s| s.range).collect();
    assert_eq!(ranges, vec![format!("bytes={}-", 300_000 / 2)]);
}

/// Guards: a `.incomplete` file left by a crashed download is never used as the blob, and is
/// removed by the next download of that blob once stale; a fresh one (a live writer's) stays.
#[test]
fn leftover_incomplete_is_ignored_and_cleaned() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let repo = sample_repo(None);
    let mock = MockHub::start(&[("org/model", repo.clone())]);
    let etag = repo.files["model.safetensors"].etag();
    let blobs = repo_dir(tmp.path(), "org/model").join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let stale = blobs.join(format!("{etag}.deadbeef.incomplete"));
    let fresh = blobs.join(format!("{etag}.cafef00d.incomplete"));
    let legacy = blobs.join(format!("{etag}.incomplete"));
    for p in [&stale, &fresh, &legacy] {
        std::fs::write(p, b"garbage").unwrap();
    }
    let old = SystemTime::now() - Duration::from_secs(600);
    for p in [&stale, &legacy] {
        std::fs::File::options().write(true).open(p).unwrap().set_modified(old).unwrap();
    }
    let p = Hub::new(settings(tmp.path(), &mock.endpoint)).snapshot_file("org/model", "main", "model.safetensors").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), repo.files["model.safetensors"].body);
    assert!(!stale.exists() && !legacy.exists() && fresh.exists());
}

/// Guards: offline mode resolves a cache laid out by hand exactly as huggingface_hub writes it
/// (refs/main → sha without newline, snapshots/{sha}/… symlinks → ../../blobs/{etag}), by branch
/// and by sha; a missing file, an unknown ref and a dangling link are NotCached errors that say
/// what to download and where, and no request is made.
#[test]
fn offline_reads_a_hand_made_huggingface_hub_cache() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo_dir(tmp.path(), "google/gemma-4-12B");
    let sha = "fedcba9876543210fedcba9876543210fedcba98";
    for d in ["refs", "blobs", &format!("snapshots/{sha}/sub")] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("refs/main"), sha).unwrap();
    std::fs::write(dir.join("blobs/aaaa1111"), b"{\"vocab_size\":262144}").unwrap();
    std::fs::write(dir.join("blobs/bbbb2222"), b"nested").unwrap();
    std::os::unix::fs::symlink("../../blobs/aaaa1111", dir.join("snapshots").join(sha).join("config.json")).unwrap();
    std::os::unix::fs::symlink("../../../blobs/bbbb2222", dir.join("snapshots").join(sha).join("sub/x.json")).unwrap();
    std::os::unix::fs::symlink("../../blobs/gone", dir.join("snapshots").join(sha).join("tokenizer.json")).unwrap();

    let hub = offline(tmp.path());
    let snap = dir.join("snapshots").join(sha);
    let p = hub.snapshot_file("google/gemma-4-12B", "main", "config.json").expect("offline by branch");
    assert_eq!(p, snap.join("config.json"));
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"vocab_size\":262144}");
    assert_eq!(hub.snapshot_file("google/gemma-4-12B", sha, "sub/x.json").expect("by sha"), snap.join("sub/x.json"));
    assert_eq!(hub.cached_snapshot_dir("google/gemma-4-12B", "main"), Some(snap.clone()));
    assert_eq!(hub.cached_snapshot_dir("google/gemma-4-12B", "v2"), None);

    let e = hub.snapshot_file("google/gemma-4-12B", "main", "processor_config.json").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    let cmd = format!("HF_HUB_CACHE={} hf download google/gemma-4-12B processor_config.json --revision main", tmp.path().display());
    assert!(msg.contains(&cmd) && msg.contains("HF_HUB_OFFLINE"), "{msg}");
    let e = hub.snapshot_file("google/gemma-4-12B", "v2", "config.json").unwrap_err();
    assert!(matches!(e, HubError::NotCached { .. }) && e.to_string().contains("refs/v2"), "{e}");
    let e = hub.snapshot_file("google/gemma-4-12B", "main", "tokenizer.json").unwrap_err();
    assert!(e.to_string().contains("dangling"), "{e}");
}

/// Guards: online, an unreachable hub falls back to a cached copy (as huggingface_hub does after
/// a failed HEAD), and without one the error names the endpoint and the cache.
#[test]
fn unreachable_hub_falls_back_to_the_cache() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mock = MockHub::start(&[("org/model", sample_repo(None))]);
    let p = Hub::new(settings(tmp.path(), &mock.endpoint)).snapshot_file("org/model", "main", "config.json").unwrap();
    // A port nothing listens on: bind, read the port, close.
    let dead = format!("http://{}", TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let hub = Hub::new(settings(tmp.path(), &dead));
    assert_eq!(hub.snapshot_file("org/model", "main", "config.json").expect("cached copy"), p);
    let e = hub.snapshot_file("org/model", "main", "tokenizer.json").unwrap_err();
    assert!(matches!(e, HubError::Connection { .. }), "{e:?}");
    assert!(e.to_string().contains(&dead) && e.to_string().contains(&tmp.path().display().to_string()), "{e}");
}

/// Guards: environment resolution mirrors huggingface_hub's constants.py and get_token:
/// HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > $HF_HOME/hub > $XDG_CACHE_HOME/huggingface/hub >
/// ~/.cache/huggingface/hub; HF_HUB_OFFLINE truthy as `_is_true` (else TRANSFORMERS_OFFLINE);
/// HF_ENDPOINT without trailing '/'; HF_TOKEN before the token file (HF_TOKEN_PATH or
/// $HF_HOME/token), cleaned of newlines and blanks.
#[test]
fn settings_follow_huggingface_hub_environment() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().display().to_string();
    let from = |vars: &[(&str, &str)]| {
        let mut m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        m.entry("HOME".into()).or_insert(home.clone());
        HubSettings::from_lookup(move |k| m.get(k).cloned())
    };
    let root = tmp.path();
    assert_eq!(from(&[]).cache, root.join(".cache/huggingface/hub"));
    assert_eq!(from(&[]).token_path, root.join(".cache/huggingface/token"));
    assert_eq!(from(&[("XDG_CACHE_HOME", "/x")]).cache, PathBuf::from("/x/huggingface/hub"));
    assert_eq!(from(&[("HF_HOME", "~/hf")]).cache, root.join("hf/hub"));
    assert_eq!(from(&[("HF_HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "/legacy")]).cache, PathBuf::from("/legacy"));
    assert_eq!(from(&[("HF_HOME", "/h"), ("HF_HUB_CACHE", "$HOME/c"), ("HUGGINGFACE_HUB_CACHE", "/l")]).cache, root.join("c"));
    let s = from(&[]);
    assert!(!s.offline && s.token.is_none() && s.proxy_from_env);
    assert_eq!(s.endpoint, onnx_parity::hub::DEFAULT_ENDPOINT);
    assert_eq!(from(&[("HF_ENDPOINT", "http://mirror.test:8080/")]).endpoint, "http://mirror.test:8080");
    for v in ["1", "ON", "yes", "True"] {
        assert!(from(&[("HF_HUB_OFFLINE", v)]).offline, "{v}");
        assert!(from(&[("TRANSFORMERS_OFFLINE", v)]).offline, "{v}");
    }
    for v in ["0", "false", "no", "2"] {
        assert!(!from(&[("HF_HUB_OFFLINE", v)]).offline, "{v}");
    }
    // `HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE`: a set HF_HUB_OFFLINE decides, an empty one does not.
    assert!(!from(&[("HF_HUB_OFFLINE", "0"), ("TRANSFORMERS_OFFLINE", "1")]).offline);
    assert!(from(&[("HF_HUB_OFFLINE", ""), ("TRANSFORMERS_OFFLINE", "1")]).offline);

    std::fs::create_dir_all(root.join("h")).unwrap();
    std::fs::write(root.join("h/token"), "hf_from_file\n").unwrap();
    std::fs::write(root.join("other"), "  hf_other \r\n").unwrap();
    let h = root.join("h").display().to_string();
    assert_eq!(from(&[("HF_HOME", &h)]).token, Secret::new("hf_from_file"));
    assert_eq!(from(&[("HF_HOME", &h), ("HF_TOKEN", "hf_env")]).token, Secret::new("hf_env"));
    assert_eq!(from(&[("HF_HOME", &h), ("HUGGING_FACE_HUB_TOKEN", "hf_old")]).token, Secret::new("hf_old"));
    let other = root.join("other").display().to_string();
    assert_eq!(from(&[("HF_HOME", &h), ("HF_TOKEN_PATH", &other)]).token, Secret::new("hf_other"));
    assert_eq!(from(&[("HF_HOME", &h), ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")]).token, None);
    assert_eq!(Secret::new(" \n"), None);
}

/// Everything this test binary logs (TRACE, `log` records included). Installed as the global
/// subscriber before any test touches the hub, because a thread-scoped subscriber can miss a
/// callsite that another test thread registers at the same moment.
fn logs() -> &'static Capture {
    static LOGS: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let capture = Capture::default();
        let sink = capture.clone();
        let subscriber =
            tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_ansi(false).with_writer(move || sink.clone()).finish();
        tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
        tracing_log::LogTracer::init().expect("first logger");
        capture
    })
}

/// Guards: the token appears in no output — not in any error's Display or Debug (refused token,
/// dropped download, missing file), not in the Debug of the settings or the Hub, not in tracing
/// output at TRACE with `log` records forwarded (ureq's wire dumps are compiled out) — while the
/// progress lines (bytes done / total) are there.
#[test]
fn token_never_appears_in_output() {
    assert!(log::STATIC_MAX_LEVEL <= log::LevelFilter::Debug, "ureq-proto would hex-dump the Authorization header");
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mock = MockHub::start(&[("google/logged", sample_repo(Some(TOKEN)))]);
    let mut s = settings(tmp.path(), &mock.endpoint);
    s.token = Secret::new(TOKEN);
    s.download_retries = 0;
    let mut text = vec![format!("{s:?}")];
    let hub = Hub::new(s);
    text.push(format!("{hub:?}"));
    mock.drop_next_gets("model.safetensors", 1);
    let mut errors = vec![
        hub.snapshot_file("google/logged", "main", "model.safetensors").unwrap_err(),
        hub.snapshot_file("google/logged", "main", "missing.json").unwrap_err(),
        hub.snapshot_file("google/logged", "v9", "config.json").unwrap_err(),
    ];
    hub.snapshot_files("google/logged", "main", &["config.json", "model.safetensors"]).expect("downloads");
    let mut refused = settings(tmp.path(), &mock.endpoint);
    refused.token = Secret::new(&format!("{TOKEN}x"));
    errors.push(Hub::new(refused).snapshot_file("google/logged", "main", "tokenizer.json").unwrap_err());
    text.extend(errors.iter().map(|e| format!("{e} {e:?}")));
    let logged = logs().text();
    assert!(logged.contains("downloading google/logged@main model.safetensors (0.3 MiB)"), "{logged}");
    assert!(logged.contains("downloaded google/logged@main model.safetensors"), "{logged}");
    // Throttled to one line a second: a sub-second download logs only its start and end.
    assert!(logged.matches("google/logged@main model.safetensors: ").count() <= 1, "{logged}");
    for t in text.iter().chain([&logged]) {
        assert!(!t.contains(TOKEN), "token leaked: {t}");
    }
    assert!(mock.seen().iter().filter(|s| s.cdn).all(|s| s.authorization.is_none()));
}

/// Guards (fetch → prompt processing): `onnx-parity fetch` takes a checkpoint's chat template
/// (`chat_template.jinja`) with its tokenizer and processor files, and `onnx-parity inputs` on the
/// same case, resolved from the HF cache alone, renders through it — a template left behind
/// would silently change an `-it` model's input_ids.
#[test]
fn fetch_takes_the_chat_template_and_inputs_use_it_from_the_cache() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut files = BTreeMap::new();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json"] {
        let body = std::fs::read(fixtures.join("unified-vision/checkpoint").join(f)).expect("fixture file");
        files.insert(f.to_string(), MockFile { body, lfs: false });
    }
    let template = std::fs::read(fixtures.join("chat-template/chat_template.jinja")).expect("template");
    files.insert("chat_template.jinja".into(), MockFile { body: template, lfs: false });
    let hub = MockHub::start(&[("org/chat-it", MockRepo { files, token: None })]);
    let dir = tempfile::tempdir().expect("tmp");
    let cache = dir.path().join("hub");
    let case = dir.path().join("vl.yaml");
    std::fs::write(
        &case,
        format!(
            "model_id: org/chat-it\nmodel_type: gemma4_unified\nrevision: main\ntask_type: image-text-to-text\ndtype: float32\nlevel: L3\n\
             inputs:\n  prompts: [\"  dado bupa bipi  \"]\n  images: [{:?}]\n",
            fixtures.join("unified-vision/images/a.png")
        ),
    )
    .expect("case");
    let cli = |args: &[&str], offline: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"));
        c.args(args).env("HF_HUB_CACHE", &cache).env("HF_ENDPOINT", &hub.endpoint).env_remove("HF_TOKEN").env("ONNX_PARITY_LOG", "warn");
        if offline {
            c.env("HF_HUB_OFFLINE", "1");
        }
        let o = c.output().expect("run onnx-parity");
        (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let (ok, out) = cli(&["fetch", &case.display().to_string()], false);
    assert!(ok && out.contains("chat_template.jinja"), "{out}");
    let dump = dir.path().join("in.safetensors");
    let (ok, out) = cli(&["inputs", &case.display().to_string(), "--out", &dump.display().to_string()], true);
    assert!(ok, "{out}");
    assert!(out.contains("chat template") && out.contains("chat_template.jinja"), "{out}");
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("chat-template/hf.json")).expect("hf.json")).expect("json");
    let want: Vec<i64> = serde_json::from_value(hf["image_and_text"]["input_ids"].clone()).expect("ids");
    let bytes = std::fs::read(&dump).expect("dump");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let got: Vec<i64> =
        st.tensor("input_ids").expect("input_ids").data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, want);
}

/// Guards issue 17's bug: a case naming only `model_id`/`revision`, whose snapshot is in the HF
/// cache (filled through the mock hub by `onnx-parity fetch --weights`) and whose export is under
/// `ONNX_PARITY_EXPORTS`, runs L1 and L3 from there offline — every tier resolves artifacts the
/// same way (L1 and L3 used to skip with "no local checkpoint").
#[test]
fn model_id_only_case_runs_l1_and_l3_from_the_cache() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unified-text-kvshare");
    let mut files = BTreeMap::new();
    for (f, lfs) in [("config.json", false), ("model.safetensors", true)] {
        let body = std::fs::read(fixture.join("checkpoint").join(f)).expect("fixture file");
        files.insert(f.to_string(), MockFile { body, lfs });
    }
    let hub = MockHub::start(&[("org/unified-text", MockRepo { files, token: None })]);
    let dir = tempfile::tempdir().expect("tmp");
    let cache = dir.path().join("hub");
    let export = dir.path().join("exports/org/unified-text/float32");
    std::fs::create_dir_all(&export).expect("mkdir");
    for entry in std::fs::read_dir(fixture.join("onnx")).expect("export") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), export.join(entry.file_name())).expect("copy");
    }
    let case = dir.path().join("causal-lm/unified-text.yaml");
    std::fs::create_dir_all(case.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &case,
        format!(
            "model_id: org/unified-text\nrevision: main\nmodel_type: gemma4_unified_text\ndtype: float32\nlevels: [L1, L3]\n\
             inputs:\n  tensors: {:?}\n",
            fixture.join("inputs.safetensors")
        ),
    )
    .expect("case");
    let cli = |args: &[&str], offline: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-parity"));
        c.args(args)
            .env("HF_HUB_CACHE", &cache)
            .env("HF_ENDPOINT", &hub.endpoint)
            .env("ONNX_PARITY_EXPORTS", dir.path().join("exports"))
            .env_remove("HF_TOKEN")
            .env("ONNX_PARITY_LOG", "warn");
        if offline {
            c.env("HF_HUB_OFFLINE", "1");
        }
        let o = c.output().expect("run onnx-parity");
        (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let (ok, out) = cli(&["fetch", "--weights", &case.display().to_string()], false);
    assert!(ok && out.contains("weights (1 files)"), "{out}");
    let report = dir.path().join("report.json");
    let (ok, out) = cli(&["run", &case.display().to_string(), "--levels", "L1,L3", "--report", &report.display().to_string()], true);
    assert!(ok, "{out}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let status =
        |level: &str| r["cases"][0]["levels"].as_array().expect("levels").iter().find(|l| l["level"] == level).map(|l| l["status"].clone());
    assert_eq!(status("L1"), Some("pass".into()), "{out}");
    assert_eq!(status("L3"), Some("pass".into()), "{out}");
    // The checkpoint the reference ran on is the cache's snapshot, named in the message.
    assert!(out.contains("PASS") && !out.contains("no local checkpoint"), "{out}");
}
