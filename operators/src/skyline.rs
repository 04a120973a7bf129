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

use crate::context::GpuContext;
use crate::error::GpuResult;

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
        assert_eq!(ranks.len(), rows * dims, "rank matrix has rows * dims entries");
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

/// The CPU skyline (multithreaded; `threads` = 0 means rayon's pool size).
/// PLACEHOLDER until the CPU algorithm lands: delegates to the reference.
pub fn skyline_cpu(m: RankMatrix<'_>, threads: usize) -> (Vec<u32>, SkylineStats) {
    let _ = threads;
    let n = m.rows as u64;
    (skyline_reference(m), SkylineStats { dominance_tests: n * n, algorithm: "reference", ..Default::default() })
}

/// SkyAlign on the GPU. PLACEHOLDER until the kernels land: runs the CPU path.
pub fn skyline_gpu(ctx: &GpuContext, m: RankMatrix<'_>) -> GpuResult<(Vec<u32>, SkylineStats)> {
    let _ = ctx;
    Ok(skyline_cpu(m, 0))
}
