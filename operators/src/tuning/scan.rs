//! Tuned constants and switches of prefix sums, stream compaction and the CPU scan.
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).
//! [`crate::scan::ScanOptions`] and [`crate::compact::CompactOptions`] take their
//! defaults from here. The GPU scan and compaction read no switches.

super::switches! {}

/// Invocations per workgroup of the scans: 1024 (where the adapter allows fewer,
/// its largest power of two is used instead; other sizes must fit as given).
pub const SCAN_WORKGROUP: u32 = 1024;

/// 16-byte vectors each scan invocation loads per tile: 4, so a tile is 16384
/// 32-bit or 8192 64-bit elements. On the H100 at 2^28 `u32` (fresh processes, one
/// run, 2026-11-22; docs/benchmarks/history/round-1.md) 1024 x 4 with striped tiles
/// was the fastest single-pass tuning: 1.05 ms, against 1.19 ms for 1024 x 2, 1.20
/// ms for 512 x 4, 1.41-1.48 ms with 8 vectors, and 1.38 ms for the blocked layout
/// at 512 x 4.
pub const SCAN_VECTORS_PER_THREAD: u32 = 4;

/// Look-back steps of the single-pass scan on a not-ready predecessor before it
/// reduces that tile itself (the decoupled fallback): 64.
pub const LOOKBACK_SPINS: u32 = 64;

/// Invocations per workgroup of the compaction kernels: 256, and
/// [`COMPACT_BLOCK_ROWS`] rows a block: the best tuning of the u32-flag stable
/// compaction on the H100 at 2^28 rows (1.19 ms, count 0.39 + scatter 0.80;
/// docs/benchmarks/history/round-1.md, stream compaction, against 8192- and
/// 16384-row blocks and 128 or 512 invocations).
pub const COMPACT_WORKGROUP: u32 = 256;

/// Rows per compaction block (one workgroup): 4096 (see [`COMPACT_WORKGROUP`]).
pub const COMPACT_BLOCK_ROWS: u32 = 4096;

/// Auto's lower selectivity bound for Jumping Jack (fraction of rows selected) in
/// the default options: infinite, so Auto runs Stable unless
/// [`crate::compact::CompactOptions`] asks otherwise.
///
/// History, measured on lavapipe (Mesa's CPU Vulkan, 2 cores shared with other
/// builds, so +-10% noise) with `bench_compact` and the per-row kernels
/// (`CompactPath::PerRow`): 2^22 rows of one `u32` column, 0/1 flags, default
/// options, GPU time of the count + scan pass plus the scatter pass, in ms:
///
/// | selectivity | 0.01 | 0.1 | 0.3 | 0.5 | 0.7 | 0.8 | 0.85 | 0.9 | 0.95 | 1.0 |
/// | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
/// | Stable | 249 | 386 | 348 | 381 | 418 | 384 | 396 | 359 | 368 | 354 |
/// | Jumping Jack | 375 | 498 | 464 | 478 | 422 | 394 | 376 | 364 | 344 | 323 |
///
/// There Stable won clearly below 0.7 (a sparse block makes Jumping Jack's slots
/// jump long chains, and its reads are gathers), the two crossed between 0.8 and
/// 0.95, and Jumping Jack won above that, where most slots take their own row;
/// Auto then used 0.9 ([`LAVAPIPE_JJ_MIN_SELECTIVITY`]).
///
/// On the H100 (2^28 rows, BENCHMARKS.md) Stable won at every selectivity: Jumping
/// Jack took roughly 1.4-2x Stable's time (e.g. 6.29 vs 4.33 ms at 50%, 5.35 vs
/// 4.42 ms at 90% with the per-row kernels; equal only at 100%), hence the default.
/// Pass `jj_min_selectivity` (e.g. [`LAVAPIPE_JJ_MIN_SELECTIVITY`]) to use Jumping
/// Jack where the order of the output does not matter and it measured faster.
pub const AUTO_JJ_MIN_SELECTIVITY: f64 = f64::INFINITY;

/// Auto's upper selectivity bound for Jumping Jack (inclusive): 1.0.
pub const AUTO_JJ_MAX_SELECTIVITY: f64 = 1.0;

/// The Stable / Jumping Jack crossover measured on lavapipe: 0.9 (see
/// [`AUTO_JJ_MIN_SELECTIVITY`]).
pub const LAVAPIPE_JJ_MIN_SELECTIVITY: f64 = 0.9;
