//! SKYLINE (Pareto-optimal rows) over rank-encoded dimensions.
//!
//! CONTRACT (shared by the SQL layer in `src/` and the kernels here; keep these
//! signatures): the caller replaces every dimension's values by their dense rank in
//! the preferred direction (0 = best; MAX dimensions are ranked descending; NULL gets
//! the worst rank), handles DIFF groups (calls once per group) and DISTINCT (drops
//! rows equal on every rank after the skyline). Here, row `p` dominates row `q` iff
//! `p[j] <= q[j]` for every `j` and `p[j] < q[j]` for at least one `j`; rows equal on
//! every dimension never dominate each other, so all of them stay.
//!
//! Every function returns the skyline's row ids in ascending order.
//!
//! # Algorithms
//!
//! * [`skyline_reference`]: brute force, O(n^2) dominance tests (tests only).
//! * [`skyline_cpu`]: multithreaded (rayon), after SkyAlign's tau pre-filter and
//!   per-dimension quartiles:
//!   - for d <= 16, the **sorted grid** (`cpu::grid`): every row is tested on
//!     its own, in parallel, against the rows of its median-mask subset groups
//!     (Eq. 1), reading only the prefix of each group's list sorted by the row's
//!     best dimension up to the row's rank there (a dominator is no worse in that
//!     dimension: about a tenth of the group on anticorrelated data), with the
//!     mask tests (Eq. 1 on the remaining bits, Eq. 4/5) on packed masks, 8 at a
//!     time with AVX2, before dominance tests;
//!   - otherwise a Hybrid-style (Chester et al., ICDE 2015) **blocked** algorithm
//!     (`cpu::hybrid`):
//!     rows sorted by Manhattan norm (sum of ranks) so that only earlier rows can
//!     dominate, then blocks of rows tested in parallel first against the confirmed
//!     skyline (grouped by median mask, one mask test skips a whole group, quartile
//!     mask tests before dominance tests), then against the block's earlier
//!     survivors; survivors join the skyline.
//!   [`CpuSkylineOptions::algorithm`] picks either ([`CpuSkylineAlgorithm`]).
//! * [`skyline_gpu`]: SkyAlign (Bøgh, Chester & Assent, VLDB 2015) in WGSL
//!   (shaders/skyline/, one file per stage after the shared common.wgsl), per chunk
//!   of at most one storage binding, in the steps of `SkyAlign` (`gpu::skyalign`)
//!   (prefilter, quartiles, masks and sort, level plan, iterate, finish):
//!   1. `minmax`: tau = min over rows of the row maximum (atomic min). As Section
//!      5.1's text says, a row survives iff it has a rank below tau or all its ranks
//!      equal tau (Algorithm 1's line 2 keeps rows with a rank <= tau; the text also
//!      drops rows whose minimum is tau but not all ranks are: the tau row dominates
//!      those strictly too). The filter is applied inside every later kernel.
//!   2. `qhist` (1-4 passes): per-dimension quartiles q1, q2, q3 of the surviving
//!      rows by an MSD radix select (8-bit digits, histograms by atomics on the GPU,
//!      the host picks each digit from 3 * d * 256 counts).
//!   3. `mask_hist` + `scatter`: median mask M (rank > q2) and quartile mask Q (rank
//!      > q3 where M is set, else > q1) per surviving row, stored as M | Q << 16;
//!      a counting sort by (|M|, M): the GPU builds the histogram over M, the host
//!      turns its 2^d counts into each mask's first slot, the GPU scatters the row
//!      ids with atomic cursors, and each row's masks beside its id (`wq`), so the
//!      iteration reads its comparands' masks in order. The sorted ids are the
//!      working set; the rank matrix is not copied (the rows compared against are
//!      read through their ids, shared by the lanes testing one point).
//!   4. `iterate` for l = 0..=d: every point of the working set (|M| >= l, not yet
//!      dominated) compares against the level-l points: a point with |M| = l only
//!      against its own partition (Eq. 3), with the quartile test of Eq. 5 before each
//!      dominance test; a point with |M| > l walks the level-l partitions, skips every
//!      partition whose mask is not a subset of its own (Eq. 1, one mask test per
//!      partition) and inside the others runs Eq. 4 before a distinct-value dominance
//!      test. Dominated points are flagged dead; the level-l survivors are final
//!      (no point of a higher order can dominate them, Eq. 2). The working set is
//!      then repacked: the per-mask counts of the kept points (atomics in the
//!      same kernel, read back) give each mask's first slot in (|M|, M) order, and
//!      `repack` scatters the kept ids and masks there with atomic cursors, as the
//!      first sort did (no count pass, no second readback; the order inside a
//!      partition is free).
//!
//!      Two kernels do a level ([`SkylineKernel`]). `iterate` gives each point one
//!      invocation, as the paper does. A point's work grows with the number of
//!      level-l partitions below its mask, C(|M|, l), so the warps holding high-|M|
//!      points ran long after the rest: on the H100 at 1M anticorrelated d = 12
//!      rows, level 5 took 25.8 ms for 1.4G mask tests. `iterate_wide` gives each
//!      point a workgroup of 64 lanes: they find the candidate partitions 64 at a
//!      time (by Eq. 1 over every partition, or by looking up the level-l subsets
//!      of M in a mask -> partition table where that takes fewer rounds), then
//!      stride through the matching partitions' points as one range in steps
//!      (mask tests first, queueing the points that pass, then the queued
//!      dominance tests together), stopping after the step that finds a
//!      dominator. The low levels (below max(2, d / 4), unless the host's estimate
//!      of a level's work says otherwise, see `mixed_wide_from`) and levels of at
//!      most 16 partitions, where every point's work is small, keep `iterate`
//!      ([`SkylineKernel::Mixed`], the default on GPUs). At 1M
//!      anticorrelated d = 12 rows the whole skyline went from 99.6 to 21.9 ms on
//!      the H100, d = 16 from 130 to 38 ms (docs/benchmarks/history/session-15.md).
//!   5. The skyline: the rows not flagged dead (the pre-filter flags its drops),
//!      read back as a bitmap (`alive_bits`) and listed in parallel.
//!
//!   Mask tests and dominance tests are counted on the GPU (per-invocation counts
//!   added to 64-bit counters kept as two `u32` with an atomic carry).
//!   `device_bytes` is the peak of one chunk: the rank matrix, 1 `u32` per row (dead
//!   flag; the masks by row too until the sort), 5 per surviving row (ids and masks
//!   of the working set, keep flags, the repacked ids and masks; 2 more on CPU
//!   adapters for resuming, see below) plus three 2^d arrays (histogram, cursors,
//!   a level's partition table); pool size classes included. That
//!   is about 1 + 6/d times the matrix on GPUs (1 + 8/d on CPU adapters; measured on
//!   the H100: 1.88x at d = 6, 1.55x at d = 12, 1.45x at d = 16, 1M anticorrelated
//!   rows): at most 2x from d = 6 on (d = 8 on CPU adapters); small d and tiny
//!   inputs (where the 2^d arrays and 256-byte minimum buffers dominate) go above.
//!
//!   Measured on lavapipe (Mesa's CPU Vulkan driver, 2 shared cores, release
//!   build, `examples/skyline_bench`; ratios only, absolute times mean nothing
//!   there): the GPU path took 4-12x the CPU path's time on 2 threads (200k
//!   independent d=8: 12x; 200k correlated d=8: 3.9x; 50k anticorrelated d=8:
//!   8.6x; 100k anticorrelated d=12: 8.9x; 1M independent d=12: 8.6x), as expected
//!   when the "GPU" is the same two cores running SIMT code; it did 1.0-1.3x the
//!   CPU path's dominance tests and 0.45-1.4x its mask tests (the CPU path skips
//!   whole mask groups, the GPU path tests the paper's per-partition masks). The
//!   CPU path ran 1.95-2.1x faster
//!   on 2 threads than on 1 (1.2x on 50k anticorrelated d=8, where the serial
//!   joins of large blocks weigh more). llvmpipe ends every loop of a SIMD group
//!   for good once the group has taken 65535 loop back-edges in total
//!   (LP_MAX_TGSI_LOOP_ITERATIONS): at 1M independent d=12 rows a few long-running
//!   invocations then saw one dimension per dominance test, killing skyline rows
//!   and keeping dominated ones. On CPU adapters the iteration kernel therefore
//!   bounds its loop steps per launch and resumes (`resumed_launches`);
//!   `RIDGELINE_SKYLINE_CHECK=1` ([`SkylineGpuOptions::check`]) re-verifies the
//!   working set after every repacking.
//!
//!   Larger inputs: chunks of at most `max_storage_buffer_binding_size / (4 d)` rows
//!   get local skylines; the skyline of their union (gathered on the host) is the
//!   skyline of the whole, so the algorithm runs again on the union. If the union
//!   still needs several chunks and did not shrink below 90%, the call returns
//!   `Err` (the caller falls back to the CPU). Dimensions above [`GPU_MAX_DIMS`] (16)
//!   run the CPU path; `algorithm` says so.
//!
//! # Layout
//!
//! * `ranks`: [`dense_ranks_u64`], values to dense ranks.
//! * `masks`: what both placements share: the pre-filter test, the quartiles and a
//!   row's median and quartile masks.
//! * `simd`: the CPU's dominance lanes: branch-free mask scans (SSE2, AVX2) ahead of
//!   the dominance tests.
//! * `cpu`: [`skyline_cpu`] with `cpu::grid` (the sorted grid) and `cpu::hybrid`
//!   (the blocked algorithm).
//! * `gpu`: [`skyline_gpu`] (chunks and merge rounds) with `gpu::skyalign` (one
//!   chunk, a method per phase), `gpu::plan` (the host's per-level choices),
//!   `gpu::launch` (shader loading and dispatch), `gpu::check` (the device checks)
//!   and `gpu::bits` (the answer's bitmap).
//! * Tuned constants and switches: `crate::tuning::skyline`; profiling output goes
//!   to the log target `ridgeline::profile::skyline`.

mod cpu;
mod gpu;
mod masks;
mod ranks;
mod simd;

pub use cpu::{skyline_cpu, CpuSkylineAlgorithm, CpuSkylineOptions};
pub use gpu::{skyline_gpu, SkylineGpuOptions, SkylineKernel, GPU_MAX_DIMS};
pub use ranks::dense_ranks_u64;


/// A row-major matrix of dense ranks: `ranks[r * dims + j]` is row `r`'s rank in
/// dimension `j` (smaller is better).
#[derive(Clone, Copy, Debug)]
pub struct RankMatrix<'a> {
    pub rows: usize,
    pub dims: usize,
    pub ranks: &'a [u32],
}

impl<'a> RankMatrix<'a> {
    pub fn new(rows: usize, dims: usize, ranks: &'a [u32]) -> Self {
        assert_eq!(
            ranks.len(),
            rows * dims,
            "rank matrix has rows * dims entries"
        );
        RankMatrix { rows, dims, ranks }
    }
    pub fn row(&self, r: usize) -> &'a [u32] {
        &self.ranks[r * self.dims..(r + 1) * self.dims]
    }
}

/// Work counters (the paper's measure of work) and the device memory used.
#[derive(Clone, Debug, Default)]
pub struct SkylineStats {
    /// Full dominance tests (one per pair of rows compared on every dimension).
    pub dominance_tests: u64,
    /// Mask tests (SkyAlign's median/quartile bitmask tests), 0 on paths without masks.
    pub mask_tests: u64,
    /// Peak device bytes allocated by the GPU path (0 on the CPU).
    pub device_bytes: u64,
    /// Which algorithm ran ("gpu-skyalign", "cpu-hybrid", "reference", ...).
    pub algorithm: &'static str,
    /// Wall-clock time of the whole call in milliseconds (host view; on the GPU it
    /// includes uploads, readbacks and pipeline creation on first use).
    pub wall_ms: f64,
    /// GPU: chunk launches of the SkyAlign pipeline (1 when the rank matrix fits one
    /// binding; more when it is split, plus one per merge round). CPU: blocks.
    pub chunks: u32,
    /// GPU: extra launches of the iteration kernel because invocations ran out of
    /// their loop-step bound (CPU adapters only, see shaders/skyline/iterate.wgsl).
    pub resumed_launches: u32,
}

/// `true` iff row `p` dominates row `q` (see the module docs).
pub fn dominates(p: &[u32], q: &[u32]) -> bool {
    let mut strictly = false;
    for (a, b) in p.iter().zip(q) {
        if a > b {
            return false;
        }
        strictly |= a < b;
    }
    strictly
}

/// Brute-force reference: O(n^2) dominance tests. For tests only.
pub fn skyline_reference(m: RankMatrix<'_>) -> Vec<u32> {
    (0..m.rows)
        .filter(|&q| !(0..m.rows).any(|p| p != q && dominates(m.row(p), m.row(q))))
        .map(|q| q as u32)
        .collect()
}
