//! Cache sizes of this machine, detected once: the fast path's partitions follow the
//! per-core L2 ([`default_partition_bytes`]), and its streaming stores the last-level
//! cache.
use std::sync::OnceLock;

use crate::tuning::cpu_scan::{
    DEFAULT_L2_BYTES, DEFAULT_LLC_BYTES, MAX_PARTITION_BYTES, MIN_PARTITION_BYTES, PARTITION_L2_DIVISOR,
};

/// Per-core L2 cache size in bytes: on Linux read from
/// `/sys/devices/system/cpu/cpu0/cache/index*/` (the level-2 data or unified cache),
/// divided by the number of logical CPUs sharing it (hyperthreads); elsewhere, or if
/// that fails, [`DEFAULT_L2_BYTES`]. Detected once and cached.
pub fn l2_cache_bytes() -> usize {
    static L2: OnceLock<usize> = OnceLock::new();
    *L2.get_or_init(|| match detect_cache(CacheWanted::Level(2)) {
        Some((size, sharers)) => (size / sharers.max(1)).max(16 << 10),
        None => DEFAULT_L2_BYTES,
    })
}

/// Size in bytes of the last-level cache seen by CPU 0 (whole, not per core), detected
/// like [`l2_cache_bytes`]; [`DEFAULT_LLC_BYTES`] if unknown. Out-of-place scans whose
/// input and output together exceed it write the output with streaming stores.
pub fn last_level_cache_bytes() -> usize {
    static LLC: OnceLock<usize> = OnceLock::new();
    *LLC.get_or_init(|| match detect_cache(CacheWanted::Last) {
        Some((size, _)) => size.max(64 << 10),
        None => DEFAULT_LLC_BYTES,
    })
}

/// The default partition size: half of [`l2_cache_bytes`] ([`PARTITION_L2_DIVISOR`]),
/// clamped to 8 KiB ..= 8 MiB ([`MIN_PARTITION_BYTES`], [`MAX_PARTITION_BYTES`]).
pub fn default_partition_bytes() -> usize {
    (l2_cache_bytes() / PARTITION_L2_DIVISOR).clamp(MIN_PARTITION_BYTES, MAX_PARTITION_BYTES)
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Clone, Copy)]
enum CacheWanted {
    Level(u32),
    Last,
}

/// `(size in bytes, number of logical CPUs sharing it)` of a data or unified cache of
/// CPU 0.
#[cfg(target_os = "linux")]
fn detect_cache(wanted: CacheWanted) -> Option<(usize, usize)> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, usize, usize)> = None;
    for entry in dir.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let path = entry.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).ok();
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        if read("type").as_deref().map(str::trim) == Some("Instruction") {
            continue;
        }
        let Some(size) = read("size").as_deref().and_then(parse_cache_size) else {
            continue;
        };
        let sharers = read("shared_cpu_list")
            .as_deref()
            .and_then(count_cpu_list)
            .unwrap_or(1);
        let better = match wanted {
            CacheWanted::Level(l) => level == l,
            CacheWanted::Last => best.is_none_or(|(b, _, _)| level > b),
        };
        if better {
            best = Some((level, size, sharers));
        }
    }
    best.map(|(_, size, sharers)| (size, sharers))
}

#[cfg(not(target_os = "linux"))]
fn detect_cache(_wanted: CacheWanted) -> Option<(usize, usize)> {
    None
}

/// Parses sysfs cache sizes such as `512K`, `1M`, `1024`, `2 MiB`.
#[cfg_attr(not(any(test, target_os = "linux")), allow(dead_code))]
pub(super) fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let value: usize = s[..digits_end].parse().ok()?;
    let unit = s[digits_end..].trim().to_ascii_uppercase();
    let mult = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    let bytes = value.checked_mul(mult)?;
    (bytes > 0).then_some(bytes)
}

/// Counts the CPUs in a sysfs CPU list such as `0-3,8,10-11`.
#[cfg_attr(not(any(test, target_os = "linux")), allow(dead_code))]
pub(super) fn count_cpu_list(s: &str) -> Option<usize> {
    let mut count = 0usize;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                count += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                count += 1;
            }
        }
    }
    (count > 0).then_some(count)
}

