//! Tuned constants and switches of the skyline (CPU grid and hybrid, SkyAlign on the GPU).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/). The options structs
//! (`CpuSkylineOptions`, `SkylineGpuOptions` in `crate::skyline`) start from these,
//! with the switches below read once per process overriding the tunable ones.
//! Profiling output goes to the log target [`PROFILE`].

super::switches! {
    "RIDGELINE_SKYLINE_GROUP_BITS", Tuning, "1 to 16 (default 8)", "Median-mask bits that group rows in the CPU sorted grid (clamped to the dimensions).";
    "RIDGELINE_SKYLINE_KERNEL", Tuning, "thread | wide | mixed (default mixed on GPUs, thread on CPU adapters)", "SkyAlign's iteration kernel on the GPU.";
    "RIDGELINE_SKYLINE_THREAD_PARTS", Tuning, "partitions (default 16)", "Under the mixed kernel, levels with at most this many partitions run the per-invocation kernel.";
    "RIDGELINE_SKYLINE_THREAD_LEVELS", Tuning, "level (default: chosen per input)", "Under the mixed kernel, the first level that runs the wide kernel.";
    "RIDGELINE_SKYLINE_WIDE_WG", Tuning, "32 | 64 | 128 | 256 (default 64)", "Lanes of the wide iteration kernel's workgroup.";
    "RIDGELINE_SKYLINE_WIDE_STEP", Tuning, "1 to 16 (default 4)", "Positions a lane of the wide kernel tests per step before the queued dominance tests.";
    "RIDGELINE_SKYLINE_CUT_MIN", Tuning, "points (default 64)", "Smallest average partition size at which a level is sorted for the key cut.";
    "RIDGELINE_SKYLINE_LAUNCH_ROWS", Tuning, "rows, at least 256 (default 32768 on CPU adapters, else unbounded)", "Working-set positions per launch of the GPU iteration kernels.";
    "RIDGELINE_SKYLINE_CHECK", Runtime, "0 | 1 (default 0)", "Checks the GPU skyline's intermediate results against the host's as it runs (slow; for debugging).";
}

/// The log target of the skyline's profiling output (`RUST_LOG=ridgeline::profile::skyline=debug`):
/// the CPU paths' step times and test counts, SkyAlign's setup, per-level and finish
/// lines (which wait for the device after every step), and the SQL node's times.
pub const PROFILE: &str = "ridgeline::profile::skyline";

// ---------------------------------------------------------------------------------
// CPU
// ---------------------------------------------------------------------------------

/// Rows per block of the CPU blocked (Hybrid-style) algorithm: 2048. (Measured on 2
/// shared cores at 200k anticorrelated d=12: step 3(a), the tests against the
/// confirmed skyline, is about 90% of the time; see `skyline/cpu/hybrid.rs`.)
pub const CPU_BLOCK: usize = 2048;

/// Most dimensions for the blocked algorithm's group-major step 3(a), which builds a
/// 2^d table per block: 14.
pub const GM_MAX_DIMS: usize = 14;

/// Most bytes of sorted per-dimension lists the sorted grid may allocate (12 bytes
/// per kept row and dimension): 1 GiB; larger inputs run the blocked algorithm.
pub const SORTED_GRID_MAX_BYTES: usize = 1 << 30;

/// Median-mask bits that group rows in the sorted grid (at most; all of them up to
/// d = 8): 8. More bits make smaller groups and more subset groups per row, whose
/// per-group overhead cost more than the extra mask tests save.
/// `RIDGELINE_SKYLINE_GROUP_BITS` overrides it.
pub const SG_GROUP_BITS: usize = 8;

/// Index bytes from which the sorted grid frees its index on another thread: 64 MiB
/// (unmapping a 1M-row d = 12 index took 15-20 ms, which the caller need not wait
/// for; below this a thread costs more than the drop).
pub const SG_FREE_ASIDE_BYTES: usize = 64 << 20;

/// Buckets of rank range per sorted-list directory in the sorted grid (at most):
/// 256, about one per 16 rows of a group.
pub const SG_BUCKETS: usize = 256;

// ---------------------------------------------------------------------------------
// GPU (SkyAlign)
// ---------------------------------------------------------------------------------

/// Invocations per workgroup of SkyAlign's per-row kernels and of `iterate`: 256.
pub const SKY_WG: u32 = 256;

/// Under the mixed kernel, levels with at most this many partitions run the
/// per-invocation kernel: 16 (a point's work there is small and a workgroup per
/// point costs more than it balances). `RIDGELINE_SKYLINE_THREAD_PARTS` overrides it.
pub const THREAD_PARTS: usize = 16;

/// Under the mixed kernel, a level below max(2, d / 4) with more than
/// [`THREAD_PARTS`] partitions still runs the wide kernel where its estimated work
/// a point (see `level_work` in `skyline/gpu/plan.rs`) reaches this: 900.
/// Per-invocation points then carry long and uneven work (warps wait for their
/// slowest point), which a workgroup per point spreads. H100, 1M rows (estimate,
/// faster kernel): anticorrelated d = 12 level 2 717 per invocation (1.46 against
/// 2.37 ms); independent d = 12 level 2 3895 wide (1.53 against 3.92 ms);
/// anticorrelated d = 16 levels 2, 3 87 and 253 per invocation; independent d = 16
/// level 2 457 per invocation, level 3 1080 wide (3.71 against 5.90 ms). A threshold
/// on work plus partitions instead sent 100k-row inputs' middle levels to the
/// per-invocation kernel, up to 1.6x slower (docs/benchmarks/history/session-19.md).
pub const WIDE_WORK: f64 = 900.0;

/// Lanes of `iterate_wide`'s workgroup: 64 (a power of two from 32 to 256;
/// `RIDGELINE_SKYLINE_WIDE_WG` overrides it).
pub const WIDE_WG: u32 = 64;

/// Positions of `iterate_wide`'s joint range a lane tests per step before the
/// workgroup runs the step's queued dominance tests together: 4 (1 to 16;
/// `RIDGELINE_SKYLINE_WIDE_STEP` overrides it). H100, 1M anticorrelated rows,
/// d = 12: 2 and 8 were slower than 4 (docs/benchmarks/history/session-19.md).
pub const WIDE_STEP: u32 = 4;

/// The smallest average partition size (points) at which a level is sorted for the
/// key cut: 64 (`RIDGELINE_SKYLINE_CUT_MIN` overrides it). Smaller partitions cost a
/// workgroup's sort each but hold few points to skip; on the H100 (1M rows, d = 12
/// and 16, two rounds of 0 / 32 / 64 / 128) 64 was best on anticorrelated data,
/// within the rounds' 10% noise elsewhere.
pub const CUT_MIN: usize = 64;

/// Working-set positions per launch of the iteration kernels on CPU adapters:
/// 32768 (llvmpipe; other adapters launch a level at once, sized on the device).
/// `RIDGELINE_SKYLINE_LAUNCH_ROWS` overrides it on every adapter.
pub const CPU_ADAPTER_LAUNCH_ROWS: usize = 1 << 15;

/// Loop back-edges one invocation of `iterate` may take per launch on CPU adapters,
/// divided by d + 2 (a SIMD group may take that many back-edges a step): 60000,
/// below llvmpipe's LP_MAX_TGSI_LOOP_ITERATIONS (65535), after which it ends every
/// loop of the group for good (see `iterate` in shaders/skyline/iterate.wgsl).
pub const CPU_ADAPTER_LOOP_EDGES: u32 = 60_000;

/// Most points of a partition `sort_level` sorts in workgroup memory (8 bytes a
/// point): 4096, or the largest power of two the adapter's workgroup storage holds
/// beside the iteration kernels' few arrays. Larger partitions are not cut.
pub const SORT_CAP: u32 = 4096;

/// `sort_level`'s lanes for a level: a quarter of the average partition size, from
/// this to [`SORT_LANES_MAX`]: 64 (H100, 1M anticorrelated rows: 64 lanes took twice
/// as long as 256 on d = 12's partitions of hundreds of points).
pub const SORT_LANES_MIN: u32 = 64;

/// The most lanes of `sort_level`: 256 (see [`SORT_LANES_MIN`]).
pub const SORT_LANES_MAX: u32 = 256;
