//! The `kill` test target: what a process SIGKILLed mid-write leaves behind.
//!
//! The binary re-executes itself as the child it kills: with `ONNX_PARITY_KILL_CHILD=<mode>` set,
//! `main` runs the child instead of the trials. Children write through the library's public paths
//! ([`Golden::save_atomic`], as `onnx-parity golden` does; [`runtime::locate_library`] extracting a
//! wheel given by `ONNX_PARITY_ORT_WHEEL` into the cache named by `ONNX_PARITY_CACHE`) and report
//! progress on stdout. The parent kills them at known points (as soon as the temp file of a given
//! target appears, i.e. between its creation and its rename) and after pseudo-random delays
//! (`ONNX_PARITY_KILL_SEED` replays a run's delays; the seed is printed on stderr). The checks hold
//! whenever the kill lands, so a trial cannot flake on timing; a known-point trial also asserts that
//! at least one of its kills really did land mid-write (a temp file was left behind).
//!
//! Guarantees checked:
//! - a golden's final name always holds a complete version, byte for byte, also for a reader
//!   reading it while the writer is killed; leftover temp files are hidden, never named `*.json`,
//!   ignored by the loaders, and do not block the next write (not even one by a process that got
//!   the dead writer's pid);
//! - the ONNX Runtime cache's libraries are absent or byte-identical to the wheel's members under
//!   their final names, the runtime library only once every provider library is in place; the next
//!   run completes the extraction and removes every leftover (temp files, a killed fetch's scratch
//!   folder).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use libtest_mimic::{Arguments, Failed, Trial};
use onnx_parity::golden::{golden_paths, Golden};
use onnx_parity::runtime::provision::{self as runtime, ORT_VERSION};

const CHILD_ENV: &str = "ONNX_PARITY_KILL_CHILD";
/// The file the golden child writes.
const TARGET_ENV: &str = "ONNX_PARITY_KILL_TARGET";
/// Versions the golden child cycles through (the parent writes version 0 first).
const VERSIONS: u32 = 3;
/// `input_ids` per golden: about 4 MB of JSON, so a write (serialise, write, fsync, rename) takes
/// long enough to be caught mid-way.
const GOLDEN_IDS: usize = 350_000;
/// How long any one wait may take before the trial fails (never hangs).
const PATIENCE: Duration = Duration::from_secs(20);

fn main() {
    if let Some(mode) = std::env::var_os(CHILD_ENV) {
        if let Err(e) = child(&mode.to_string_lossy()) {
            eprintln!("kill child: {e:#}");
            std::process::exit(2);
        }
        return;
    }
    let args = Arguments::from_args();
    let seed = std::env::var("ONNX_PARITY_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1);
    if !args.list {
        eprintln!("kill: ONNX_PARITY_KILL_SEED={seed}");
    }
    let trial = |name: &'static str, f: fn(u64) -> Result<()>| {
        Trial::test(name, move || {
            let start = Instant::now();
            let r = f(seed).map_err(|e| Failed::from(format!("{e:#} (ONNX_PARITY_KILL_SEED={seed})")));
            eprintln!("kill: {name}: {:.2} s", start.elapsed().as_secs_f64());
            r
        })
    };
    let trials = vec![
        trial("golden::killed_mid_write_leaves_a_complete_version", golden_killed_mid_write),
        trial("golden::killed_at_random_leaves_a_complete_version", golden_killed_at_random),
        trial("golden::dead_writers_temp_under_a_reused_pid_does_not_block", golden_reused_pid),
        trial("ort_cache::killed_mid_extraction_then_completed_and_cleaned", ort_killed_at_known_points),
        trial("ort_cache::killed_at_random_then_completed_and_cleaned", ort_killed_at_random),
    ];
    libtest_mimic::run(&args, trials).exit();
}

// ---------------------------------------------------------------------------------------------
// Children
// ---------------------------------------------------------------------------------------------

fn child(mode: &str) -> Result<()> {
    let out = |line: String| {
        // Stdout is line-buffered, so the parent reads each line as soon as it is printed.
        println!("{line}");
    };
    match mode {
        // Writes versions 1, 2, 3, 1, ... of the golden over the target until killed.
        "golden" => {
            let target = PathBuf::from(std::env::var_os(TARGET_ENV).context("no target")?);
            let goldens: Vec<Golden> = (1..=VERSIONS).map(make_golden).collect::<Result<_>>()?;
            out("started".into());
            for i in 0..1000 {
                let v = i % VERSIONS as usize;
                out(format!("writing {}", v + 1));
                let start = Instant::now();
                goldens[v].save_atomic(&target)?;
                out(format!("wrote {} in {:.1} ms", v + 1, start.elapsed().as_secs_f64() * 1e3));
            }
            Ok(())
        }
        // A killed writer with this process's pid left `.{name}.tmp-{pid}-0` (the temp name a fresh
        // process tries first); then this process writes the golden.
        "golden-reused-pid" => {
            let target = PathBuf::from(std::env::var_os(TARGET_ENV).context("no target")?);
            let name = target.file_name().context("no file name")?.to_string_lossy().into_owned();
            let leftover = target.with_file_name(format!(".{name}.tmp-{}-0", std::process::id()));
            std::fs::write(&leftover, b"torn golden from a writer killed earlier")?;
            make_golden(1)?.save_atomic(&target)?;
            out(format!("wrote 1 beside {}", leftover.display()));
            Ok(())
        }
        // Prints the cache folder (named after the build's wheel, CPU or GPU).
        "ort-dir" => {
            out(format!("dir {}", runtime::cache_dir().display()));
            Ok(())
        }
        // Finds (fetching into an empty cache) the ONNX Runtime library.
        "ort" => {
            out(format!("dir {}", runtime::cache_dir().display()));
            let lib = runtime::locate_library()?;
            out(format!("located {}", lib.display()));
            Ok(())
        }
        other => bail!("unknown {CHILD_ENV}={other}"),
    }
}

/// Version `v` of the test golden: built from logits the way `onnx-parity golden` builds one,
/// top-1 id `v`, so a file's version is its `top1_id`.
fn make_golden(v: u32) -> Result<Golden> {
    let mut logits: Vec<f32> = (0..4096u32).map(|k| ((k.wrapping_mul(2_654_435_761) >> 20) % 1000) as f32 / 100.0).collect();
    logits[v as usize] = 20.0;
    let ids: Vec<i64> = (0..GOLDEN_IDS as i64).map(|k| (k * 7919 + i64::from(v)) % 262_144).collect();
    Ok(Golden::from_logits(&logits, &ids)?)
}

/// A running child and its stdout lines.
struct Running {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    history: Vec<String>,
}

fn spawn(mode: &str, envs: &[(&str, OsString)]) -> Result<Running> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env(CHILD_ENV, mode).env_remove("ORT_DYLIB_PATH").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().context("spawning the child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Running { child, lines, history: Vec::new() })
}

/// A trial that fails part-way leaves no child running.
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line starting with `prefix`; `None` if the child closed its stdout first.
    fn line(&mut self, prefix: &str) -> Result<Option<String>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.history.push(l.clone());
                    if l.starts_with(prefix) {
                        return Ok(Some(l));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Timeout) => bail!("no `{prefix}` line from the child within {PATIENCE:?}"),
            }
        }
    }

    /// Polls `dir` until a temp file `.{name}.tmp-{pid}-*` of this child exists, then SIGKILLs the
    /// child at once. `Ok(false)`: the child exited before one was seen.
    fn kill_when_temp_appears(&mut self, dir: &Path, name: &str) -> Result<bool> {
        let prefix = format!(".{name}.tmp-{}-", self.pid());
        let deadline = Instant::now() + PATIENCE;
        loop {
            let seen = std::fs::read_dir(dir)
                .map(|entries| entries.filter_map(|e| e.ok()).any(|e| e.file_name().to_string_lossy().starts_with(&prefix)))
                .unwrap_or(false);
            if seen {
                self.child.kill()?;
                return Ok(true);
            }
            if self.child.try_wait()?.is_some() {
                return Ok(false);
            }
            ensure!(Instant::now() < deadline, "no temp file {prefix}* in {} within {PATIENCE:?}", dir.display());
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// SIGKILLs the child (if it still runs) and reaps it.
    fn kill(mut self) -> Result<ExitStatus> {
        Ok(self.kill_and_drain()?.0)
    }

    /// SIGKILLs the child (if it still runs), reaps it, and returns everything it printed.
    fn kill_and_drain(&mut self) -> Result<(ExitStatus, Vec<String>)> {
        let _ = self.child.kill();
        let status = self.child.wait()?;
        // The pipe is closed now: the reader thread sends what is left, then hangs up.
        while let Ok(l) = self.lines.recv_timeout(PATIENCE) {
            self.history.push(l);
        }
        Ok((status, std::mem::take(&mut self.history)))
    }

    /// Waits for the child to exit by itself.
    fn finish(mut self) -> Result<ExitStatus> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("the child did not finish within {PATIENCE:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn killed(status: ExitStatus) -> bool {
    status.signal() == Some(9)
}

/// xorshift64*: the delays of the random kills, replayable from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn scratch() -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("kill-").tempdir_in(env!("CARGO_TARGET_TMPDIR"))?)
}

fn names(dir: &Path) -> Result<BTreeSet<String>> {
    std::fs::read_dir(dir)?.map(|e| Ok(e?.file_name().to_string_lossy().into_owned())).collect()
}

// ---------------------------------------------------------------------------------------------
// Goldens
// ---------------------------------------------------------------------------------------------

/// A goldens folder with version 0 of `causal-lm/killed.json` written, and every version's bytes.
struct GoldenSetup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    target: PathBuf,
    versions: Arc<Vec<String>>,
}

fn golden_setup() -> Result<GoldenSetup> {
    let tmp = scratch()?;
    let root = tmp.path().join("goldens");
    let (target, _) = golden_paths(&root, "causal-lm", "killed");
    let versions: Vec<String> = (0..=VERSIONS).map(|v| make_golden(v).map(|g| g.to_json_string())).collect::<Result<_>>()?;
    std::fs::create_dir_all(target.parent().context("no parent")?)?;
    make_golden(0)?.save_atomic(&target)?;
    Ok(GoldenSetup { _tmp: tmp, root, target, versions: Arc::new(versions) })
}

/// Which version the file at `path` is, requiring its bytes to be exactly that version's.
fn version_of(path: &Path, versions: &[String]) -> Result<usize> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(v) = versions.iter().position(|want| want.as_bytes() == bytes.as_slice()) {
        return Ok(v);
    }
    let parsed = Golden::from_json_str(&String::from_utf8_lossy(&bytes), path).map(|g| g.top1_id);
    bail!("{} ({} bytes) is no complete version (torn?); parses as: {parsed:?}", path.display(), bytes.len())
}

/// A reader re-reading the golden's final name while the writer is killed: every read must be a
/// complete version. Returns the number of reads.
fn reader(target: PathBuf, versions: Arc<Vec<String>>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Result<usize>> {
    std::thread::spawn(move || {
        let mut reads = 0;
        while !stop.load(Ordering::Relaxed) {
            version_of(&target, &versions).context("a concurrent reader saw a torn golden")?;
            reads += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(reads)
    })
}

/// What the loaders see after the kills: the complete golden, not a leftover; leftovers are hidden
/// and not `*.json` (listing goldens, as tests/anchors.rs and the round-trip checks do, skips them).
fn check_leftovers_ignored(s: &GoldenSetup) -> Result<usize> {
    let (json, _) = golden_paths(&s.root, "causal-lm", "killed");
    let loaded = Golden::load(&json)?.context("the golden vanished")?;
    ensure!(s.versions.iter().any(|v| *v == loaded.to_json_string()), "loaded golden is no complete version");
    let dir = json.parent().context("no parent")?;
    let mut leftovers = 0;
    for name in names(dir)? {
        if name == "killed.json" {
            continue;
        }
        ensure!(
            name.starts_with(".killed.json.tmp-") && !name.ends_with(".json") && !name.ends_with(".yaml"),
            "unexpected file {name} beside the golden"
        );
        leftovers += 1;
    }
    Ok(leftovers)
}

/// Guards: a golden write SIGKILLed between its temp file's creation and its rename (the known
/// point) leaves the previous version byte-identical under the final name (or the new one
/// complete, if the rename won the race); a concurrent reader never sees a torn file; the torn
/// temp file is left hidden, ignored by the loaders, and the next write succeeds beside it.
fn golden_killed_mid_write(_seed: u64) -> Result<()> {
    let s = golden_setup()?;
    let dir = s.target.parent().context("no parent")?.to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = reader(s.target.clone(), Arc::clone(&s.versions), Arc::clone(&stop));
    let mut mid_write = 0;
    let mut last = 0;
    let mut write_ms = Vec::new();
    // Kill during the first, second and third write of a child (versions 1, 2, 3 over whatever
    // the previous child left).
    for round in 0..6 {
        let writes_before = round % 3;
        let on_disk = version_of(&s.target, &s.versions)?;
        let mut c = spawn("golden", &[(TARGET_ENV, s.target.clone().into())])?;
        for _ in 0..writes_before {
            let line = c.line("wrote")?.context("child ended early")?;
            write_ms.extend(line.rsplit(" in ").next().and_then(|t| t.trim_end_matches(" ms").parse::<f64>().ok()));
        }
        c.line("writing")?.context("child ended early")?;
        let temps_before = names(&dir)?.len();
        let caught = c.kill_when_temp_appears(&dir, "killed.json")?;
        let (_, lines) = c.kill_and_drain()?;
        // The child prints `writing v` before it calls save_atomic and `wrote v` after it returns,
        // so the final name may hold the last version it wrote or the one it was writing (if
        // killed between the rename and the print), nothing else.
        let version = |prefix: &str| lines.iter().rev().find_map(|l| l.strip_prefix(prefix)?.split(' ').next()?.parse::<usize>().ok());
        let before = version("wrote ").unwrap_or(on_disk);
        let writing = version("writing ").context("no `writing` line")?;
        let after = version_of(&s.target, &s.versions).with_context(|| format!("round {round}: after the kill"))?;
        ensure!(
            after == before || after == writing,
            "round {round}: version {after} is neither the previous {before} nor the one being written {writing}"
        );
        if caught && after == before && names(&dir)?.len() > temps_before {
            mid_write += 1;
        }
        last = after;
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reads.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
    ensure!(mid_write > 0, "no kill landed between a temp file's creation and its rename in 6 rounds");
    let leftovers = check_leftovers_ignored(&s)?;
    ensure!(leftovers >= mid_write, "{mid_write} kills mid-write but {leftovers} leftovers");
    // The next write succeeds beside the leftovers (they are not cleaned: see src/atomic.rs).
    let next = if last == VERSIONS as usize { 1 } else { last + 1 };
    make_golden(next as u32)?.save_atomic(&s.target)?;
    ensure!(version_of(&s.target, &s.versions)? == next, "the next write did not land");
    eprintln!(
        "kill: golden mid-write: {mid_write}/6 kills left a temp file, {leftovers} leftovers ignored, {reads} concurrent reads all \
         complete; uninterrupted writes took {write_ms:.0?} ms"
    );
    Ok(())
}

/// Guards: kills after pseudo-random delays (during serialisation, mid-write, between writes)
/// leave a complete version under the final name, every time.
fn golden_killed_at_random(seed: u64) -> Result<()> {
    let s = golden_setup()?;
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = reader(s.target.clone(), Arc::clone(&s.versions), Arc::clone(&stop));
    let mut delays = Vec::new();
    for round in 0..5 {
        let mut c = spawn("golden", &[(TARGET_ENV, s.target.clone().into())])?;
        c.line("started")?.context("child ended early")?;
        let delay = rng.below(300);
        delays.push(delay);
        std::thread::sleep(Duration::from_millis(delay));
        let status = c.kill()?;
        ensure!(killed(status), "round {round}: the child was not killed ({status})");
        version_of(&s.target, &s.versions).with_context(|| format!("round {round}: killed {delay} ms after start"))?;
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reads.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
    let leftovers = check_leftovers_ignored(&s)?;
    eprintln!("kill: golden random: delays {delays:?} ms, {leftovers} leftovers ignored, {reads} concurrent reads all complete");
    Ok(())
}

/// Guards: a fresh process whose pid equals a killed writer's, writing the same golden, steps over
/// the dead writer's temp file (`.{name}.tmp-{pid}-0`, the first name it tries) instead of failing,
/// and leaves that file alone.
fn golden_reused_pid(_seed: u64) -> Result<()> {
    let s = golden_setup()?;
    let c = spawn("golden-reused-pid", &[(TARGET_ENV, s.target.clone().into())])?;
    let status = c.finish()?;
    ensure!(status.success(), "the write failed beside a leftover with its own pid ({status})");
    ensure!(version_of(&s.target, &s.versions)? == 1, "the golden was not written");
    let dir = s.target.parent().context("no parent")?;
    let leftovers: Vec<String> = names(dir)?.into_iter().filter(|n| n.starts_with(".killed.json.tmp-")).collect();
    ensure!(leftovers.len() == 1, "leftovers {leftovers:?}");
    let kept = std::fs::read(dir.join(&leftovers[0]))?;
    ensure!(kept == b"torn golden from a writer killed earlier", "the other writer's temp file was touched");
    ensure!(check_leftovers_ignored(&s)? == 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ONNX Runtime cache
// ---------------------------------------------------------------------------------------------

fn runtime_name() -> String {
    format!("libonnxruntime.so.{ORT_VERSION}")
}

/// A fake wheel: the runtime library first in the archive (the extraction must put it last
/// itself), two provider libraries, and members that are not extracted. Contents are
/// pseudo-random (incompressible), stored.
struct Wheel {
    _tmp: tempfile::TempDir,
    path: PathBuf,
    /// (file name, bytes) of the members that must land in the cache.
    libraries: Vec<(String, Vec<u8>)>,
}

fn fake_wheel() -> Result<Wheel> {
    let tmp = scratch()?;
    let path = tmp.path().join(format!("onnxruntime-{ORT_VERSION}-cp312-cp312-manylinux_2_27_x86_64.whl"));
    let bytes = |n: usize, seed: u64| {
        let mut rng = Rng(seed);
        (0..n / 8).flat_map(|_| rng.below(u64::MAX).to_le_bytes()).collect::<Vec<u8>>()
    };
    let libraries = vec![
        (runtime_name(), bytes(24 << 20, 11)),
        ("libonnxruntime_providers_shared.so".to_string(), bytes(6 << 20, 12)),
        ("libonnxruntime_providers_extra.so".to_string(), bytes(6 << 20, 13)),
    ];
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path)?);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("onnxruntime/__init__.py", opts)?;
    zip.write_all(b"# not extracted\n")?;
    zip.start_file("onnxruntime/capi/onnxruntime_pybind11_state.so", opts)?;
    zip.write_all(b"not a lib* member: not extracted")?;
    for (name, data) in &libraries {
        zip.start_file(format!("onnxruntime/capi/{name}"), opts)?;
        zip.write_all(data)?;
    }
    zip.finish()?;
    Ok(Wheel { _tmp: tmp, path, libraries })
}

fn ort_envs(cache: &Path, wheel: &Wheel) -> Vec<(&'static str, OsString)> {
    vec![("ONNX_PARITY_CACHE", cache.into()), ("ONNX_PARITY_ORT_WHEEL", wheel.path.clone().into())]
}

/// The cache folder a child given `cache` uses (its name depends on the build's wheel).
fn ort_dir(cache: &Path) -> Result<PathBuf> {
    let mut c = spawn("ort-dir", &[("ONNX_PARITY_CACHE", cache.into())])?;
    let line = c.line("dir ")?.context("no dir line")?;
    ensure!(c.finish()?.success(), "the ort-dir child failed");
    Ok(PathBuf::from(&line[4..]))
}

/// After a kill: every library is absent or complete under its final name; the runtime library is
/// there only once all the others are, and then nothing else is left.
fn check_ort_after_kill(dir: &Path, wheel: &Wheel, what: &str) -> Result<bool> {
    let mut present = BTreeSet::new();
    for (name, want) in &wheel.libraries {
        let p = dir.join(name);
        if p.exists() {
            let got = std::fs::read(&p)?;
            ensure!(got == *want, "{what}: {name} is {} bytes under its final name, not the member's {} (torn)", got.len(), want.len());
            present.insert(name.clone());
        }
    }
    let runtime_present = present.contains(&runtime_name());
    if runtime_present {
        ensure!(present.len() == wheel.libraries.len(), "{what}: the runtime library is in place before {present:?} are all there");
        let others: Vec<String> = names(dir)?.into_iter().filter(|n| n != ".lock" && !present.contains(n)).collect();
        ensure!(others.is_empty(), "{what}: finished extraction left {others:?}");
    }
    Ok(runtime_present)
}

/// A run to completion: the extraction finishes, the libraries are byte-identical, and every
/// leftover (temp files, scratch folders) is gone.
fn complete_ort_run(cache: &Path, dir: &Path, wheel: &Wheel, what: &str) -> Result<()> {
    let mut c = spawn("ort", &ort_envs(cache, wheel))?;
    let located = c.line("located ")?.with_context(|| format!("{what}: the completing run found no library"))?;
    ensure!(c.finish()?.success(), "{what}: the completing run failed");
    ensure!(Path::new(&located[8..]) == dir.join(runtime_name()), "{what}: located {located}");
    ensure!(check_ort_after_kill(dir, wheel, what)?, "{what}: no runtime library after a completed run");
    let want: BTreeSet<String> = wheel.libraries.iter().map(|(n, _)| n.clone()).chain([".lock".to_string()]).collect();
    let got = names(dir)?;
    ensure!(got == want, "{what}: the cache holds {got:?}, expected exactly {want:?} (leftovers not removed)");
    Ok(())
}

/// Guards: an extraction SIGKILLed while a provider library is being written, then while the
/// runtime library is being written (the known points), leaves no library torn under its final
/// name and no runtime library at all; a killed pip fetch's scratch folder is planted too; the next
/// run completes the extraction and removes every leftover.
fn ort_killed_at_known_points(_seed: u64) -> Result<()> {
    let wheel = fake_wheel()?;
    let tmp = scratch()?;
    let mut cache = tmp.path().join("cache-0");
    let mut dir = ort_dir(&cache)?;
    let mut mid_write = 0;
    let mut rounds = 0;
    let mut completed = 0;
    // The extraction writes the providers (archive order), then the runtime library.
    let points =
        [runtime_name(), "libonnxruntime_providers_extra.so".to_string(), runtime_name(), "libonnxruntime_providers_shared.so".to_string()];
    while rounds < points.len() || (mid_write < 2 && rounds < 3 * points.len()) {
        let target = &points[rounds % points.len()];
        rounds += 1;
        let mut c = spawn("ort", &ort_envs(&cache, &wheel))?;
        let caught = c.kill_when_temp_appears(&dir, target)?;
        c.kill()?;
        let what = format!("killed while writing {target}");
        let runtime_present = check_ort_after_kill(&dir, &wheel, &what)?;
        if runtime_present {
            // The rename won the race (or the temp file was missed): the extraction is complete;
            // go on in a fresh cache.
            ensure!(!caught || target == &runtime_name(), "{what}: the runtime library is in place");
            completed += 1;
            cache = tmp.path().join(format!("cache-{completed}"));
            dir = cache.join(dir.file_name().context("no cache folder name")?);
            continue;
        }
        let temps = names(&dir)?.into_iter().filter(|n| n.contains(".tmp-")).count();
        if caught && temps > 0 {
            mid_write += 1;
        }
    }
    ensure!(mid_write > 0, "no kill landed between a temp file's creation and its rename");
    // What a fetch killed while pip was downloading leaves: another pid's scratch folder.
    let download = dir.join(".download-4194000");
    std::fs::create_dir_all(&download)?;
    std::fs::write(download.join("onnxruntime-partial.whl"), b"half a wheel")?;
    let leftovers = names(&dir)?.into_iter().filter(|n| n.starts_with('.') && n != ".lock").count();
    complete_ort_run(&cache, &dir, &wheel, "after the kills")?;
    eprintln!(
        "kill: ort known points: {mid_write}/{rounds} kills left temp files ({completed} extractions finished first); the next run removed all {leftovers} leftovers"
    );
    Ok(())
}

/// Guards: extractions SIGKILLed after pseudo-random delays leave every library absent or
/// complete, and the next run completes and cleans up.
fn ort_killed_at_random(seed: u64) -> Result<()> {
    let wheel = fake_wheel()?;
    let mut rng = Rng(seed ^ 0x2545_f491_4f6c_dd1d);
    let tmp = scratch()?;
    let mut outcomes = Vec::new();
    for round in 0..4 {
        let cache = tmp.path().join(format!("cache-{round}"));
        let dir = ort_dir(&cache)?;
        let mut c = spawn("ort", &ort_envs(&cache, &wheel))?;
        c.line("dir ")?.context("child ended early")?;
        let delay = rng.below(250);
        std::thread::sleep(Duration::from_millis(delay));
        let status = c.kill()?;
        let what = format!("round {round}: killed {delay} ms after start");
        let runtime_present = check_ort_after_kill(&dir, &wheel, &what)?;
        outcomes.push(format!(
            "{delay} ms: {}",
            if !killed(status) {
                "finished first"
            } else if runtime_present {
                "killed after the rename"
            } else {
                "killed mid-way"
            }
        ));
        complete_ort_run(&cache, &dir, &wheel, &what)?;
    }
    eprintln!("kill: ort random: {outcomes:?}");
    Ok(())
}
