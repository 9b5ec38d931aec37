//! Peak resident memory of this process, per stage: a case's reference and ONNX runs are
//! sequenced so that its peak is the larger of the two, and the log says what each took. Linux
//! only (`/proc/self`); elsewhere the numbers are absent, never made up.
//!
//! A stage's peak is measured by resetting the kernel's high-water mark, which is also what
//! `getrusage`'s `ru_maxrss` reports of the process: after a reset neither says the process's own
//! peak any more. So each reset first folds the mark into [`process_peak_bytes`], the number a
//! run's report gives (a benchmark reading `ru_maxrss` saw only the last stage's peak).

/// The peak resident set size since the process started or since [`reset_peak`] (`VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Starts a new peak measurement (`echo 5 > /proc/self/clear_refs` resets `VmHWM` to the current
/// RSS); `false` where the kernel does not allow it.
pub fn reset_peak() -> bool {
    if let Some(b) = peak_rss_bytes() {
        PROCESS_PEAK.fetch_max(b, std::sync::atomic::Ordering::Relaxed);
    }
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The marks folded in at each [`reset_peak`].
static PROCESS_PEAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The peak resident set size since the process started, across every [`reset_peak`].
pub fn process_peak_bytes() -> Option<u64> {
    let folded = PROCESS_PEAK.load(std::sync::atomic::Ordering::Relaxed);
    peak_rss_bytes().map(|b| b.max(folded)).or((folded > 0).then_some(folded))
}

/// `MemAvailable` of `/proc/meminfo` (Linux), in bytes.
pub fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.trim_start_matches("MemAvailable:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Bytes as GiB with two decimals, for logs.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// "peak RSS 1.23 GiB" of the stage that began at the last [`reset_peak`], or an empty string.
pub fn stage_peak() -> String {
    peak_rss_bytes().map(|b| format!(", peak RSS {}", gib(b))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: on Linux the peak is readable, at least what a fresh 64 MiB allocation adds, and a
    /// reset brings it back below that allocation's high-water mark once it is freed.
    #[test]
    #[cfg(target_os = "linux")]
    fn peak_follows_allocations() {
        let before = peak_rss_bytes().expect("VmHWM");
        // black_box: an optimised build may otherwise never write (or keep) the block.
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let during = peak_rss_bytes().expect("VmHWM");
        assert!(during >= before && during >= 64 << 20, "{before} {during} {}", block.len());
        drop(block);
        if reset_peak() {
            let after = peak_rss_bytes().expect("VmHWM");
            assert!(after < during, "{after} < {during}");
            // The process's own peak is kept across the reset (the kernel's counters are per-CPU
            // approximations: the mark folded after the drop can read a few pages below `during`).
            let kept = process_peak_bytes().expect("folded");
            assert!(kept >= 64 << 20 && kept > after, "{kept} {during} {after}");
        }
        assert_eq!(gib(3 << 29), "1.50 GiB");
    }
}
