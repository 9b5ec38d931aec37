//! Peak resident memory of this process, per stage: a case's reference and ONNX runs are
//! sequenced so that its peak is the larger of the two, and the log says what each took. Linux
//! only (`/proc/self`); elsewhere the numbers are absent, never made up.

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
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
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
        }
        assert_eq!(gib(3 << 29), "1.50 GiB");
    }
}
