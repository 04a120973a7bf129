//! The CPU skyline: SkyAlign's pre-filter, then the sorted grid ([`grid`]) for
//! d <= 16 while its lists fit [`SORTED_GRID_MAX_BYTES`], else the blocked
//! Hybrid-style algorithm ([`hybrid`]); see the module docs of `skyline` and of
//! either file.
mod grid;
mod hybrid;

use super::masks::{cpu_quartiles, prefilter_keeps};
use super::{RankMatrix, SkylineStats};
use crate::tuning::skyline::{PROFILE, SG_GROUP_BITS, SORTED_GRID_MAX_BYTES};
use crate::tuning::{self, profiling};
use rayon::prelude::*;
use std::time::Instant;

/// Which CPU skyline algorithm [`skyline_cpu`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuSkylineAlgorithm {
    /// The sorted grid for d <= 16 when its lists fit
    /// [`SORTED_GRID_MAX_BYTES`], else the blocked algorithm.
    #[default]
    Auto,
    /// The sorted grid where it applies (d <= 16, lists within the budget).
    SortedGrid,
    /// The blocked Hybrid-style algorithm (every width).
    Blocked,
}

/// Options of [`skyline_cpu`].
#[derive(Clone, Debug)]
pub struct CpuSkylineOptions {
    /// Threads (0: rayon's pool size).
    pub threads: usize,
    /// The algorithm ([`SkylineStats::algorithm`] says which one ran).
    pub algorithm: CpuSkylineAlgorithm,
    /// Median-mask bits that group rows in the sorted grid (at most; clamped to
    /// 1..=d): [`SG_GROUP_BITS`], or `RIDGELINE_SKYLINE_GROUP_BITS`.
    pub group_bits: usize,
}

impl Default for CpuSkylineOptions {
    fn default() -> Self {
        CpuSkylineOptions {
            threads: 0,
            algorithm: CpuSkylineAlgorithm::Auto,
            group_bits: tuning::parse("RIDGELINE_SKYLINE_GROUP_BITS").unwrap_or(SG_GROUP_BITS),
        }
    }
}

/// The CPU skyline (multithreaded; `opts.threads` = 0 means rayon's pool size): the
/// sorted grid (`grid`) for d <= 16 while its lists fit [`SORTED_GRID_MAX_BYTES`],
/// else the blocked algorithm (`hybrid`), or the one `opts.algorithm` names.
/// `dominance_tests` and `mask_tests` count every test done.
pub fn skyline_cpu(m: RankMatrix<'_>, opts: &CpuSkylineOptions) -> (Vec<u32>, SkylineStats) {
    let t0 = Instant::now();
    let (ids, mut st) = if opts.threads == 0 {
        cpu_skyline(m, opts)
    } else {
        match rayon::ThreadPoolBuilder::new().num_threads(opts.threads).build() {
            Ok(pool) => pool.install(|| cpu_skyline(m, opts)),
            Err(_) => cpu_skyline(m, opts),
        }
    };
    st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    (ids, st)
}

/// Step 1 of both algorithms (SkyAlign's pre-filter: tau = min over rows of the row
/// maximum; the rows the tau row dominates go, in parallel), then either one.
fn cpu_skyline(m: RankMatrix<'_>, opts: &CpuSkylineOptions) -> (Vec<u32>, SkylineStats) {
    let (n, d) = (m.rows, m.dims);
    let mut st = SkylineStats {
        algorithm: "cpu-hybrid",
        ..Default::default()
    };
    if n == 0 {
        return (Vec::new(), st);
    }
    if d == 0 {
        return ((0..n as u32).collect(), st);
    }
    let profile = profiling!("ridgeline::profile::skyline");
    let tp = Instant::now();
    let tau = (0..n)
        .into_par_iter()
        .map(|r| *m.row(r).iter().max().unwrap())
        .min()
        .unwrap();
    let kept: Vec<u32> = (0..n as u32)
        .into_par_iter()
        .filter(|&r| prefilter_keeps(m.row(r as usize), tau))
        .collect();
    if opts.algorithm != CpuSkylineAlgorithm::Blocked
        && d <= 16
        && kept.len().saturating_mul(d).saturating_mul(12) <= SORTED_GRID_MAX_BYTES
    {
        let quart = cpu_quartiles(m, &kept);
        st.algorithm = "cpu-sorted-grid";
        if profile {
            log::debug!(
                target: PROFILE,
                "cpu skyline profile: pre-filter and quartiles {:.1} ms",
                tp.elapsed().as_secs_f64() * 1e3
            );
        }
        let gbits = opts.group_bits.clamp(1, d);
        return (grid::sorted_grid(m, &kept, &quart, gbits, &mut st, profile), st);
    }
    (hybrid::blocked(m, &kept, tp, &mut st, profile), st)
}
