//! SkyAlign on the GPU (Bøgh, Chester & Assent, VLDB 2015): [`skyline_gpu`] splits
//! the rank matrix into chunks of one storage binding, runs [`skyalign::SkyAlign`]
//! on each and merges the chunks' skylines; see the module docs of `skyline`.
mod bits;
mod check;
mod launch;
mod plan;
mod skyalign;

use super::cpu::{skyline_cpu, CpuSkylineOptions};
use super::{RankMatrix, SkylineStats};
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::tuning;
use crate::tuning::skyline::{CPU_ADAPTER_LAUNCH_ROWS, CUT_MIN, SKY_WG, THREAD_PARTS, WIDE_STEP, WIDE_WG};
use rayon::prelude::*;
use skyalign::{ChunkConfig, SkyAlign};
use std::time::Instant;

/// Most dimensions the GPU path handles (M and Q share one `u32`); wider inputs run
/// [`skyline_cpu`] and say so in [`SkylineStats::algorithm`].
pub const GPU_MAX_DIMS: usize = 16;

/// Options of [`skyline_gpu`]. `Default` starts from the tuned constants of
/// `crate::tuning::skyline` and the `RIDGELINE_SKYLINE_*` switches there.
#[derive(Clone, Debug)]
pub struct SkylineGpuOptions {
    /// Most rows per chunk (0: as many as one storage binding holds). Tests use
    /// small chunks to exercise the chunked path cheaply.
    pub max_chunk_rows: usize,
    /// Loop steps per invocation and launch of the iteration kernel (`Some(0)`: no
    /// bound; `None`: bounded on CPU adapters only, see
    /// shaders/skyline/iterate.wgsl). Tests use tiny bounds to exercise resuming.
    pub step_limit: Option<u32>,
    /// The iteration kernel (default: `RIDGELINE_SKYLINE_KERNEL=thread|wide|mixed`
    /// if set; `None`: [`SkylineKernel::Mixed`] on GPUs and [`SkylineKernel::Thread`]
    /// on CPU adapters, where only the per-invocation kernel can bound its loop
    /// steps, and [`SkylineKernel::Thread`] wherever `step_limit` sets a bound).
    pub kernel: Option<SkylineKernel>,
    /// `iterate_wide` finds a point's candidate partitions by looking up the
    /// level-l subsets of its mask where that takes fewer rounds (of one candidate a
    /// lane) than testing every partition (Eq. 1), else by testing every
    /// partition (`None`). `Some(true)` / `Some(false)` force one way (tests).
    pub subset_lookup: Option<bool>,
    /// Sort each level's partitions by key (the sum of ranks over the partition's
    /// mask) so that a point scans only the prefix of each partition that can hold
    /// a dominator (`sort_level` in shaders/skyline/sort_level.wgsl). `None`: on for
    /// levels whose partitions average at least `cut_min` points; `Some(true)`:
    /// every level; `Some(false)`: none. Tests compare all three.
    pub key_cut: Option<bool>,
    /// The smallest average partition size (points) at which a level is sorted for
    /// the key cut where `key_cut` is `None` ([`CUT_MIN`],
    /// `RIDGELINE_SKYLINE_CUT_MIN`).
    pub cut_min: usize,
    /// Working-set positions per launch of the iteration kernels (default:
    /// `RIDGELINE_SKYLINE_LAUNCH_ROWS` if set, at least 256; `None`:
    /// [`CPU_ADAPTER_LAUNCH_ROWS`] on CPU adapters, else unbounded; `Some(0)`:
    /// unbounded). Unbounded launches without a step bound are sized on the device
    /// (indirect dispatch from the level table `plan` writes), so the levels run
    /// without a readback; bounded ones read each level's size back.
    pub launch_rows: Option<usize>,
    /// Under [`SkylineKernel::Mixed`], levels with at most this many partitions run
    /// the per-invocation kernel ([`THREAD_PARTS`], `RIDGELINE_SKYLINE_THREAD_PARTS`).
    pub thread_parts: usize,
    /// Under [`SkylineKernel::Mixed`], the first level of the wide kernel (`None`:
    /// chosen per input, see `plan::mixed_wide_from`;
    /// `RIDGELINE_SKYLINE_THREAD_LEVELS`).
    pub thread_levels: Option<usize>,
    /// Lanes of `iterate_wide`'s workgroup, a power of two from 32 to 256
    /// ([`WIDE_WG`], `RIDGELINE_SKYLINE_WIDE_WG`).
    pub wide_wg: u32,
    /// Positions a lane of `iterate_wide` tests per step, 1 to 16 ([`WIDE_STEP`],
    /// `RIDGELINE_SKYLINE_WIDE_STEP`).
    pub wide_step: u32,
    /// Check the device's intermediate results against host computations as the
    /// algorithm runs (quartiles, working set after every sort and repacking, key
    /// directories); slow, for tests. Default: `RIDGELINE_SKYLINE_CHECK`.
    pub check: bool,
}

impl Default for SkylineGpuOptions {
    fn default() -> Self {
        let kernel = match tuning::get("RIDGELINE_SKYLINE_KERNEL") {
            Some("thread") => Some(SkylineKernel::Thread),
            Some("wide") => Some(SkylineKernel::Wide),
            Some("mixed") => Some(SkylineKernel::Mixed),
            _ => None,
        };
        SkylineGpuOptions {
            max_chunk_rows: 0,
            step_limit: None,
            kernel,
            subset_lookup: None,
            key_cut: None,
            cut_min: tuning::parse("RIDGELINE_SKYLINE_CUT_MIN").unwrap_or(CUT_MIN),
            launch_rows: tuning::parse::<usize>("RIDGELINE_SKYLINE_LAUNCH_ROWS").map(|v| v.max(SKY_WG as usize)),
            thread_parts: tuning::parse("RIDGELINE_SKYLINE_THREAD_PARTS").unwrap_or(THREAD_PARTS),
            thread_levels: tuning::parse("RIDGELINE_SKYLINE_THREAD_LEVELS"),
            wide_wg: tuning::parse::<u32>("RIDGELINE_SKYLINE_WIDE_WG")
                .filter(|v| v.is_power_of_two() && (32..=256).contains(v))
                .unwrap_or(WIDE_WG),
            wide_step: tuning::parse::<u32>("RIDGELINE_SKYLINE_WIDE_STEP")
                .filter(|v| (1..=16).contains(v))
                .unwrap_or(WIDE_STEP),
            check: tuning::flag("RIDGELINE_SKYLINE_CHECK").unwrap_or(false),
        }
    }
}

/// SkyAlign's iteration kernel (shaders/skyline/iterate.wgsl, iterate_wide.wgsl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkylineKernel {
    /// `iterate`: one invocation per working-set point (the paper's layout);
    /// resumable under a loop-step bound (CPU adapters).
    Thread,
    /// `iterate_wide`: one workgroup per point; its lanes share the partition walk
    /// and the points of each matching partition, so points below many partitions
    /// (high |M|) no longer hold up their warps. No step bound.
    Wide,
    /// `iterate` for the low levels (below max(2, d / 4), or below an earlier
    /// level whose estimated work a point is large) and levels of at most 16
    /// partitions, where a point's work is small and a workgroup per point costs
    /// more than it balances; `iterate_wide` for the rest. No step bound.
    Mixed,
}

impl SkylineKernel {
    /// The kernel of a call: the one asked for, else the per-invocation one where a
    /// step bound asks for it or on CPU adapters, else [`SkylineKernel::Mixed`].
    fn choose(opts: &SkylineGpuOptions, ctx: &GpuContext) -> SkylineKernel {
        match (opts.kernel, opts.step_limit) {
            (Some(k), _) => k,
            // A step bound asks for the kernel that has one.
            (None, Some(l)) if l > 0 => SkylineKernel::Thread,
            _ if ctx.is_cpu_adapter() => SkylineKernel::Thread,
            _ => SkylineKernel::Mixed,
        }
    }
}

/// SkyAlign on the GPU; see the module docs. Rank matrices larger than one storage
/// binding (or than `opts.max_chunk_rows` rows) are split into chunks: the skyline
/// of the union of the chunks' skylines is the skyline of the whole, so the union
/// is gathered on the host and the algorithm runs again on it. If a round does not
/// shrink the candidates below 90% while they still need several chunks, the call
/// fails with [`GpuError::OutOfMemory`] (the caller falls back to the CPU).
pub fn skyline_gpu(
    ctx: &GpuContext,
    m: RankMatrix<'_>,
    opts: &SkylineGpuOptions,
) -> GpuResult<(Vec<u32>, SkylineStats)> {
    let t0 = Instant::now();
    let (n, d) = (m.rows, m.dims);
    let mut st = SkylineStats {
        algorithm: "gpu-skyalign",
        ..Default::default()
    };
    if n == 0 || d == 0 {
        st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        return Ok(((0..n as u32).collect(), st));
    }
    if d > GPU_MAX_DIMS {
        let (ids, mut st) = skyline_cpu(m, &CpuSkylineOptions::default());
        st.algorithm = "cpu-hybrid (dims > 16, GPU path not used)";
        return Ok((ids, st));
    }
    if n > u32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "skyline of {n} rows: row ids are u32"
        )));
    }
    let lim = ctx.limits();
    let max_bind = (lim.max_storage_buffer_binding_size as u64)
        .min(lim.max_buffer_size)
        .min((1 << 31) - 1);
    let max_words = ((max_bind / 4) / 4 * 4) as usize;
    let mut chunk = (max_words / d).min(ctx.segment_rows());
    if opts.max_chunk_rows > 0 {
        chunk = chunk.min(opts.max_chunk_rows);
    }
    let chunk = chunk.max(1);
    let order = plan::mask_order(d);
    let cfg = ChunkConfig {
        step_limit: opts.step_limit,
        kernel: SkylineKernel::choose(opts, ctx),
        subset_lookup: opts.subset_lookup,
        // The smallest average partition size of a sorted level (usize::MAX: none).
        key_cut: match opts.key_cut {
            Some(true) => 0,
            Some(false) => usize::MAX,
            None => opts.cut_min,
        },
        // Working-set positions per launch (usize::MAX: unbounded).
        launch_rows: match opts.launch_rows {
            Some(0) => usize::MAX,
            Some(r) => r.max(SKY_WG as usize),
            None if ctx.is_cpu_adapter() => CPU_ADAPTER_LAUNCH_ROWS,
            None => usize::MAX,
        },
        check: opts.check,
        thread_parts: opts.thread_parts,
        thread_levels: opts.thread_levels,
        wide_wg: opts.wide_wg,
        wide_step: opts.wide_step,
    };
    // Candidates: None = every row of `m`; Some((global ids, their rows)).
    let mut cand: Option<(Vec<u32>, Vec<u32>)> = None;
    loop {
        let (ranks, cn): (&[u32], usize) = match &cand {
            None => (m.ranks, n),
            Some((ids, rows)) => (rows.as_slice(), ids.len()),
        };
        let global = |local: usize| -> u32 {
            match &cand {
                None => local as u32,
                Some((ids, _)) => ids[local],
            }
        };
        let mut next = Vec::new();
        for c in (0..cn).step_by(chunk) {
            let e = (c + chunk).min(cn);
            let out = SkyAlign::new(ctx, &ranks[c * d..e * d], e - c, d, &order, &cfg).run()?;
            st.dominance_tests += out.dominance_tests;
            st.mask_tests += out.mask_tests;
            st.device_bytes = st.device_bytes.max(out.device_bytes);
            st.chunks += 1;
            st.resumed_launches += out.resumed;
            if cand.is_none() && cn <= chunk {
                // One chunk of the whole input: its rows are the answer, ascending.
                st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
                return Ok((out.rows, st));
            }
            next.extend(out.rows.iter().map(|&r| global(c + r as usize)));
        }
        next.sort_unstable();
        if cn <= chunk {
            st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok((next, st));
        }
        if next.len() > chunk && next.len() * 10 > cn * 9 {
            return Err(GpuError::OutOfMemory(format!(
                "skyline: {} candidates of {cn} rows after chunk-local skylines still exceed one chunk of {chunk} rows",
                next.len()
            )));
        }
        let mut rows = vec![0u32; next.len() * d];
        rows.par_chunks_mut(d)
            .zip(next.par_iter())
            .for_each(|(dst, &g)| dst.copy_from_slice(m.row(g as usize)));
        cand = Some((next, rows));
    }
}
