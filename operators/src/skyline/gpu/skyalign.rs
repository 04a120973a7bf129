//! SkyAlign (Bøgh, Chester & Assent, VLDB 2015) on one chunk whose rank matrix fits
//! one storage binding, one method per phase of the `skyline` module docs:
//! [`SkyAlign::prefilter`] (tau), [`SkyAlign::quartiles`],
//! [`SkyAlign::masks_and_sort`] (the first working set), [`SkyAlign::level_plan`]
//! (the per-level tables and buffers), [`SkyAlign::iterate`] (the levels: sort,
//! iteration, plan and repacking) and [`SkyAlign::finish`] (the skyline's bitmap).
//!
//! With `RUST_LOG=ridgeline::profile::skyline=debug` each chunk logs a line for the
//! setup, one per level (working set, partitions, wall times of preparation,
//! iteration and repacking, its tests) and one for the finish; every step then
//! waits for the device.
use super::bits::bits_to_rows_into;
use super::check::{check_keys, check_live, check_plan, check_quartiles, check_working_set};
use super::launch::{buf, one_seg, upload_one, Groups, Launcher, Mem, SkyParams, CSTRIPES, KDIR, LVW};
use super::plan::{
    binomials, key_shift, level_work, mask_starts, mixed_wide_from, ncur_level, packed_slots, part_bounds, sort_cap,
    sort_lanes, sum_counters,
};
use super::SkylineKernel;
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::tuning::profiling;
use crate::tuning::skyline::{CPU_ADAPTER_LOOP_EDGES, PROFILE, SKY_WG};
use rayon::prelude::*;
use std::time::Instant;

/// A call's settings, resolved from [`super::SkylineGpuOptions`] and the adapter.
pub(super) struct ChunkConfig {
    pub step_limit: Option<u32>,
    pub kernel: SkylineKernel,
    pub subset_lookup: Option<bool>,
    /// The smallest average partition size of a sorted level (usize::MAX: none).
    pub key_cut: usize,
    /// Working-set positions per launch (usize::MAX: unbounded).
    pub launch_rows: usize,
    pub check: bool,
    pub thread_parts: usize,
    pub thread_levels: Option<usize>,
    pub wide_wg: u32,
    pub wide_step: u32,
}

/// One chunk's skyline and counters.
pub(super) struct ChunkOut {
    /// Local row indices of the chunk's skyline (any order).
    pub rows: Vec<u32>,
    pub dominance_tests: u64,
    pub mask_tests: u64,
    pub device_bytes: u64,
    pub resumed: u32,
}

/// The rank matrix on the device and the pre-filter's tau (Algorithm 1, line 1).
struct Prefiltered {
    r: DeviceArray,
    tau: u32,
    /// The largest rank (the quartile selection's digits).
    gmax: u32,
}

/// The first working set: rows sorted by (|M|, M), their masks beside them.
struct WorkingSet {
    /// qpick's state (the quartiles); kept for the chunk.
    _quart: DeviceArray,
    /// 1 per row the pre-filter or an iteration drops.
    dead: DeviceArray,
    /// The working set's row ids and masks (wq[i] = mq[idx[i]]).
    idx: DeviceArray,
    wq: DeviceArray,
    /// The masks by row (kept for the checks only).
    mq: Option<DeviceArray>,
    /// Per-mask counts of the working set (of the first one until the levels read
    /// them back) and each mask's first slot in it.
    counts: Vec<u32>,
    starts: Vec<u32>,
    /// Rows after the pre-filter.
    n1: usize,
}

/// The level plan, fixed from the first working set, and the buffers of the levels.
struct LevelPlan {
    binoms: Vec<u32>,
    /// Loop steps per invocation and launch of `iterate` (0: no bound).
    step_limit: u32,
    /// Per level, its partitions as (mask, start, end) triples; the levels that
    /// hold points.
    level_parts: Vec<Vec<u32>>,
    levels: Vec<usize>,
    /// The first level of the wide kernel under Mixed (see `mixed_wide_from`).
    wide_from: usize,
    /// Launches sized on the host (they read each level's size back), and their
    /// working-set positions.
    host_sized: bool,
    step: usize,
    max_dim: u32,
    /// stats[4]: unfinished invocations; stats[5..]: per-mask counts of kept points.
    stats: DeviceArray,
    /// Mask -> partition index + 1 in its level, then the binomials.
    ptab: DeviceArray,
    /// Each level's partition table.
    auxs: Vec<DeviceArray>,
    /// The masks in (|M|, M) order.
    ordm: DeviceArray,
    /// Each mask's first slot in the next working set.
    cur: DeviceArray,
    /// The level table (LVW words a level, see `plan`).
    lvl: DeviceArray,
    /// The next working set's ids and masks (the repacking writes them; then the
    /// pairs swap with the working set's).
    idx2: DeviceArray,
    wq2: DeviceArray,
    /// Each partition's key directory (KDIR keys).
    kdir: DeviceArray,
    /// The resume state (2 words a point) where the iteration has a step bound, else
    /// a stand-in.
    res: DeviceArray,
    /// The striped test counters (see `add64` in shaders/skyline/common.wgsl).
    ctr: DeviceArray,
}

/// What the levels carry from one to the next on the host.
struct LevelState {
    /// The working set's size (host copies for the checks and the profile).
    ncur: usize,
    /// The counters after the previous level (profile, checks).
    last: (u64, u64),
    resumed: u32,
    /// The first counts, for the profile's work estimates.
    counts0: Vec<u32>,
}

/// The profile's clock (see the module docs).
struct Profile {
    on: bool,
    t_chunk: Instant,
    t_mark: Instant,
    /// The setup's steps (each waits for the device).
    steps: String,
}

/// SkyAlign on one chunk.
pub(super) struct SkyAlign<'a> {
    ctx: &'a GpuContext,
    k: Launcher<'a>,
    ranks: &'a [u32],
    n: usize,
    d: usize,
    /// Masks `0..2^d` in (|M|, M) order.
    order: &'a [u32],
    cfg: &'a ChunkConfig,
    mem: Mem,
    base: SkyParams,
    prof: Profile,
}

impl<'a> SkyAlign<'a> {
    pub fn new(
        ctx: &'a GpuContext,
        ranks: &'a [u32],
        n: usize,
        d: usize,
        order: &'a [u32],
        cfg: &'a ChunkConfig,
    ) -> Self {
        let now = Instant::now();
        SkyAlign {
            ctx,
            k: Launcher {
                ctx,
                wide_wg: cfg.wide_wg,
                wide_step: cfg.wide_step,
                sort_cap: sort_cap(ctx),
            },
            ranks,
            n,
            d,
            order,
            cfg,
            mem: Mem::default(),
            base: SkyParams {
                n: n as u32,
                d: d as u32,
                ..Default::default()
            },
            prof: Profile {
                on: profiling!("ridgeline::profile::skyline"),
                t_chunk: now,
                t_mark: now,
                steps: String::new(),
            },
        }
    }

    /// Every phase in turn.
    pub fn run(mut self) -> GpuResult<ChunkOut> {
        let pre = self.prefilter()?;
        let quart = self.quartiles(&pre)?;
        let mut ws = self.masks_and_sort(&pre, quart)?;
        let mut plan = self.level_plan(&ws)?;
        let resumed = self.iterate(&pre, &mut ws, &mut plan)?;
        self.finish(&ws, &plan, resumed)
    }

    /// The profile's setup step `what` ends (waits for the device when profiling).
    fn mark(&mut self, what: &str) -> GpuResult<()> {
        if self.prof.on {
            self.ctx.wait()?;
            let now = Instant::now();
            self.prof.steps += &format!("{what} {:.3}, ", (now - self.prof.t_mark).as_secs_f64() * 1e3);
            self.prof.t_mark = now;
        }
        Ok(())
    }

    /// Step 1: the upload and the pre-filter's tau (Algorithm 1, line 1) with the
    /// largest rank, which sets the keys' shift.
    fn prefilter(&mut self) -> GpuResult<Prefiltered> {
        let (ctx, n, d) = (self.ctx, self.n, self.d);
        let r = DeviceArray::upload_segmented(ctx, self.ranks, one_seg(self.ranks.len()))?;
        self.mem.add(&r);
        self.mark("upload")?;
        let mm = upload_one(ctx, &[u32::MAX, 0])?;
        self.k.launch("minmax", self.base, &[(1, buf(&r)), (2, buf(&mm))], n)?;
        let v = mm.download::<u32>(ctx)?;
        let (tau, gmax) = (v[0], v[1]);
        self.mark("minmax")?;
        self.base.kshift = key_shift(gmax, d);
        Ok(Prefiltered { r, tau, gmax })
    }

    /// Step 2: the quartiles of the surviving rows (line 2 filters inside every
    /// kernel below): an MSD radix select, 8 bits a pass, over every (dimension,
    /// quartile) at once. The state (prefixes, ranks sought, surviving rows, error
    /// flag) stays on the device: qpick chooses each pass's digits there, so the
    /// passes run without a readback; mask_hist appends the row count and the flag
    /// to its histogram. Returns qpick's state.
    fn quartiles(&mut self, pre: &Prefiltered) -> GpuResult<DeviceArray> {
        let (ctx, n, d) = (self.ctx, self.n, self.d);
        let (r, tau) = (&pre.r, pre.tau);
        let bits = 32 - pre.gmax.leading_zeros();
        let passes = bits.div_ceil(8).max(1);
        let quart = upload_one(ctx, &vec![0u32; 6 * d + 2])?;
        let hist = upload_one(ctx, &vec![0u32; 1 + 3 * d * 256])?;
        self.mem.spike(hist.device_bytes() + quart.device_bytes());
        // qhist's first pass strides over the rows with a few hundred workgroups (see
        // there); later passes take a row per invocation.
        let qgroups = (n as u64).div_ceil(SKY_WG as u64);
        let mut enc = ctx.encoder("skyline-quartiles");
        for pass in 0..passes {
            let shift = 8 * (passes - 1 - pass);
            if pass > 0 {
                enc.clear_buffer(buf(&hist), 0, None);
            }
            let p = SkyParams {
                tau,
                shift,
                full: (pass == 0) as u32,
                ..self.base
            };
            let binds = [(1, buf(r)), (2, buf(&hist)), (3, buf(&quart))];
            let g = if pass == 0 { qgroups.min(512) } else { qgroups };
            self.k.record(&mut enc, "qhist", p, &binds, Groups::Direct(g))?;
            let binds = [(2, buf(&hist)), (16, buf(&quart))];
            self.k.record(&mut enc, "qpick", p, &binds, Groups::Direct(3 * d as u64))?;
        }
        ctx.submit(enc)?;
        drop(hist);
        self.mark("quartiles")?;
        Ok(quart)
    }

    /// Step 3: median and quartile masks of every surviving row (mq[r] = M | Q << 16;
    /// dead[r] = 1 for the rows the pre-filter drops), the histogram over M, the
    /// (|M|, M) order's partition starts, then the sort by (|M|, M): a counting-sort
    /// scatter of the surviving rows' ids (atomic cursors, one per mask) gives the
    /// initial working set.
    fn masks_and_sort(&mut self, pre: &Prefiltered, quart: DeviceArray) -> GpuResult<WorkingSet> {
        let (ctx, n, d) = (self.ctx, self.n, self.d);
        let (r, tau) = (&pre.r, pre.tau);
        let masks = 1usize << d;
        let mh = upload_one(ctx, &vec![0u32; masks + 2])?;
        self.mem.add(&mh);
        let mq = DeviceArray::alloc_segmented(ctx, n, 4, one_seg(n))?;
        self.mem.add(&mq);
        let dead = DeviceArray::alloc_segmented(ctx, n, 4, one_seg(n))?;
        self.mem.add(&dead);
        let p = SkyParams { tau, ..self.base };
        self.k.launch(
            "mask_hist",
            p,
            &[
                (1, buf(r)),
                (2, buf(&mh)),
                (3, buf(&quart)),
                (5, buf(&mq)),
                (8, buf(&dead)),
            ],
            n,
        )?;
        let mut counts = mh.download::<u32>(ctx)?;
        self.mark("masks")?;
        let (n1, qerr) = (counts[masks], counts[masks + 1]);
        counts.truncate(masks);
        if n1 == 0 {
            return Err(GpuError::Invalid("skyline pre-filter kept no row".into()));
        }
        if qerr != 0 {
            return Err(GpuError::Invalid(
                "skyline quartile selection lost its rank".into(),
            ));
        }
        if self.cfg.check {
            check_quartiles(ctx, self.ranks, n, d, tau, n1, &quart)?;
        }
        let (starts, acc) = mask_starts(&counts, self.order);
        if acc != n1 {
            return Err(GpuError::Invalid(format!(
                "skyline mask histogram counts {acc} of {n1} rows"
            )));
        }
        let n1 = n1 as usize;
        let cursors = upload_one(ctx, &starts)?;
        self.mem.add(&cursors);
        let idx = DeviceArray::alloc(ctx, n1, 4)?;
        self.mem.add(&idx);
        if idx.num_segments() != 1 {
            return Err(GpuError::Invalid(
                "skyline working set spans segments".into(),
            ));
        }
        // The masks in working-set order beside the row ids (wq[i] = mq[idx[i]]): the
        // iteration reads its comparands' masks in order, and mq is no longer needed.
        let wq = DeviceArray::alloc(ctx, n1, 4)?;
        self.mem.add(&wq);
        self.k.launch(
            "scatter",
            p,
            &[
                (2, buf(&cursors)),
                (5, buf(&mq)),
                (6, buf(&wq)),
                (8, buf(&dead)),
                (9, buf(&idx)),
            ],
            n,
        )?;
        self.mark("scatter")?;
        // (Back to the pool; later work on the queue runs after the scatter.)
        self.mem.sub(&cursors);
        drop(cursors);
        self.mem.sub(&mh);
        drop(mh);
        let mq = if self.cfg.check {
            Some(mq)
        } else {
            self.mem.sub(&mq);
            None
        };
        Ok(WorkingSet {
            _quart: quart,
            dead,
            idx,
            wq,
            mq,
            counts,
            starts,
            n1,
        })
    }

    /// Step 4's plan, fixed here from the first working set: a level's partitions
    /// are its masks that hold points now (a partition may empty later, never
    /// appear). Their bounds move as points leave: the device's `plan` kernel
    /// rewrites them after every level, with the next working set's size and
    /// dispatch sizes, so the levels run back to back with no readback. The
    /// per-level choices (kernel, key cut, packed offsets) use these first counts.
    fn level_plan(&mut self, ws: &WorkingSet) -> GpuResult<LevelPlan> {
        let (ctx, n, d) = (self.ctx, self.n, self.d);
        let (counts, starts, n1) = (&ws.counts, &ws.starts, ws.n1);
        let masks = 1usize << d;
        // C(n, k) for n, k <= 16, appended to the partition lookup table (ptab).
        let binoms = binomials();
        let stats = upload_one(ctx, &vec![0u32; 5 + masks])?;
        self.mem.add(&stats);
        // Loop steps per invocation and launch on llvmpipe (see `iterate` in
        // shaders/skyline/iterate.wgsl): its SIMD group may take (d + 2) back-edges
        // a step.
        let kernel = self.cfg.kernel;
        let step_limit = match kernel {
            SkylineKernel::Wide | SkylineKernel::Mixed => 0,
            SkylineKernel::Thread => self.cfg.step_limit.unwrap_or(if ctx.is_cpu_adapter() {
                (CPU_ADAPTER_LOOP_EDGES / (d as u32 + 2)).max(1)
            } else {
                0
            }),
        };
        if self.prof.on {
            log::debug!(
                target: PROFILE,
                "skyline profile: n {n} d {d} kernel {kernel:?}: setup {:.3} ms ({}ms), {n1} rows after the pre-filter",
                self.prof.t_chunk.elapsed().as_secs_f64() * 1e3,
                self.prof.steps
            );
        }
        let mut level_parts: Vec<Vec<u32>> = vec![Vec::new(); d + 1];
        for &mk in self.order {
            if counts[mk as usize] > 0 {
                level_parts[mk.count_ones() as usize].extend_from_slice(&part_bounds(mk, starts, counts));
            }
        }
        let levels: Vec<usize> = (0..=d).filter(|&l| !level_parts[l].is_empty()).collect();
        // Mask -> its partition's index in its level + 1 (0: no partition), then the
        // binomial table (iterate_wide enumerates subsets of a mask).
        let mut tab = vec![0u32; masks];
        for parts in &level_parts {
            for (k, t) in parts.chunks_exact(3).enumerate() {
                tab[t[0] as usize] = k as u32 + 1;
            }
        }
        tab.extend_from_slice(&binoms);
        let ptab = upload_one(ctx, &tab)?;
        self.mem.add(&ptab);
        let mut auxs = Vec::with_capacity(d + 1);
        for parts in &level_parts {
            let a = upload_one(ctx, parts)?;
            self.mem.add(&a);
            auxs.push(a);
        }
        let ordm = upload_one(ctx, self.order)?;
        self.mem.add(&ordm);
        let cur = DeviceArray::alloc(ctx, masks, 4)?;
        self.mem.add(&cur);
        // The level table (LVW words a level, see `plan`): the first level's entry here.
        let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
        let mut lv = vec![0u32; LVW * (d + 1)];
        let first = levels[0] * LVW;
        let (x, y, z) = dispatch_dims((n1 as u64).div_ceil(SKY_WG as u64), max_dim);
        lv[first..first + 3].copy_from_slice(&[x, y, z]);
        let (x, y, z) = dispatch_dims(n1 as u64, max_dim);
        lv[first + 3..first + 6].copy_from_slice(&[x, y, z]);
        lv[first + 9] = n1 as u32;
        let lvl = upload_one(ctx, &lv)?;
        self.mem.add(&lvl);
        let idx2 = DeviceArray::alloc(ctx, n1, 4)?;
        self.mem.add(&idx2);
        let wq2 = DeviceArray::alloc(ctx, n1, 4)?;
        self.mem.add(&wq2);
        let max_parts = level_parts.iter().map(|p| p.len() / 3).max().unwrap_or(1);
        let kdir = DeviceArray::alloc(ctx, max_parts.max(1) * KDIR, 4)?;
        self.mem.add(&kdir);
        let res = upload_one(ctx, &vec![0u32; if step_limit > 0 { 2 * n1 } else { 4 }])?;
        self.mem.add(&res);
        // Launches sized on the host (CPU adapters: bounded launches; step bounds: the
        // resume loop) read each level's working-set size back; otherwise the
        // iterations are dispatched indirectly from the level table.
        let step = self.cfg.launch_rows;
        let host_sized = step_limit > 0 || step != usize::MAX;
        let step = step.max(1);
        let ctr = upload_one(ctx, &vec![0u32; 4 * CSTRIPES])?;
        self.mem.add(&ctr);
        let wide_from = match kernel {
            SkylineKernel::Mixed => {
                let lv: Vec<(usize, usize)> = levels.iter().map(|&l| (l, level_parts[l].len() / 3)).collect();
                mixed_wide_from(counts, d, &lv, self.cfg.thread_parts, self.cfg.thread_levels)
            }
            _ => 0,
        };
        Ok(LevelPlan {
            binoms,
            step_limit,
            level_parts,
            levels,
            wide_from,
            host_sized,
            step,
            max_dim,
            stats,
            ptab,
            auxs,
            ordm,
            cur,
            lvl,
            idx2,
            wq2,
            kdir,
            res,
            ctr,
        })
    }

    /// Step 4: the levels l = 0..=d that hold points, each recorded and submitted
    /// in turn; returns the resumed launches.
    fn iterate(&mut self, pre: &Prefiltered, ws: &mut WorkingSet, plan: &mut LevelPlan) -> GpuResult<u32> {
        let mut state = LevelState {
            ncur: ws.n1,
            last: (0, 0),
            resumed: 0,
            counts0: if self.prof.on { ws.counts.clone() } else { Vec::new() },
        };
        for li in 0..plan.levels.len() {
            self.level(pre, ws, plan, &mut state, li)?;
        }
        Ok(state.resumed)
    }

    /// Submits what `enc` holds and gives it a fresh encoder.
    fn flush(&self, enc: &mut wgpu::CommandEncoder) -> GpuResult<()> {
        self.ctx.submit(std::mem::replace(enc, self.ctx.encoder("skyline-levels")))?;
        Ok(())
    }

    /// Level `plan.levels[li]`: the partitions' sort for the key cut, the iteration,
    /// the next level's plan and the repacking, then (profile, checks) its readbacks.
    fn level(
        &mut self,
        pre: &Prefiltered,
        ws: &mut WorkingSet,
        plan: &mut LevelPlan,
        state: &mut LevelState,
        li: usize,
    ) -> GpuResult<()> {
        let ctx = self.ctx;
        let l = plan.levels[li];
        let masks = 1usize << self.d;
        let mut enc = ctx.encoder("skyline-levels");
        let t_level = Instant::now();
        let parts = &plan.level_parts[l];
        let npart = parts.len() / 3;
        let lk = match self.cfg.kernel {
            SkylineKernel::Mixed if l < plan.wide_from || npart <= self.cfg.thread_parts => {
                SkylineKernel::Thread
            }
            SkylineKernel::Mixed => SkylineKernel::Wide,
            k => k,
        };
        // Each partition sorted by key, with its key directory (see `sort_level`);
        // an all-zero directory (no cut) where the cut is off. Levels whose
        // partitions average fewer points than `key_cut` are not sorted: there a
        // partition costs a workgroup's sort but holds few points to skip.
        let level_points = ncur_level(parts);
        let key_cut = self.cfg.key_cut;
        let sorted = key_cut != usize::MAX && level_points >= key_cut.saturating_mul(npart);
        enc.clear_buffer(buf(&plan.stats), 16, Some(4 * (1 + masks) as u64));
        if plan.step_limit > 0 {
            enc.clear_buffer(buf(&plan.res), 0, None);
        }
        if !sorted {
            enc.clear_buffer(buf(&plan.kdir), 0, Some((npart * KDIR * 4) as u64));
        }
        if plan.host_sized && li > 0 {
            // This level's size, from the table the previous plan wrote.
            self.flush(&mut enc)?;
            state.ncur = plan.lvl.download::<u32>(ctx)?[l * LVW + 9] as usize;
        }
        let sort_ms = if sorted {
            self.sort_level(&mut enc, pre, ws, plan, l, level_points)?
        } else {
            0.0
        };
        let t_iter = Instant::now();
        state.resumed += self.iterate_level(&mut enc, pre, ws, plan, l, lk, state.ncur)?;
        let mut iterate_ms = 0.0;
        if self.prof.on {
            self.flush(&mut enc)?;
            ctx.wait()?;
            iterate_ms = t_iter.elapsed().as_secs_f64() * 1e3;
        }
        let t_repack = Instant::now();
        self.repack(&mut enc, ws, plan, li, state.ncur)?;
        // Every level is submitted as soon as it is recorded, so the device runs
        // it while the host records the next (recording all levels took the host
        // 0.8-1.2 ms on the H100 machine; submitting only the first and the last
        // level left the device waiting for it: d = 12 15.0-15.3 against 14.8-14.9
        // ms, docs/benchmarks/history/session-19.md).
        ctx.submit(enc)?;
        if self.prof.on || ws.mq.is_some() {
            let s = plan.stats.download::<u32>(ctx)?;
            let now = sum_counters(&plan.ctr.download::<u32>(ctx)?);
            let (level_dts, level_mts) = (now.0 - state.last.0, now.1 - state.last.1);
            state.last = now;
            ws.counts.copy_from_slice(&s[5..]);
            let next: usize = ws.counts.iter().map(|&c| c as usize).sum();
            if let Some(mq) = &ws.mq {
                if let Some(&lnext) = plan.levels.get(li + 1) {
                    // The plan kernel's table against the host's.
                    check_plan(
                        ctx,
                        l,
                        lnext,
                        next,
                        &plan.lvl,
                        &plan.auxs[lnext],
                        &plan.level_parts[lnext],
                        &ws.counts,
                        self.order,
                    )?;
                    check_working_set(ctx, &ws.idx, &ws.wq, mq, &ws.counts, self.order)?;
                }
                check_live(ctx, l, self.n, next, &ws.dead, mq)?;
            }
            if self.prof.on {
                let (wm, wcv) = level_work(&state.counts0, self.d, l);
                log::debug!(
                    target: PROFILE,
                    "skyline profile: level {l} ({lk:?}): working set {}, {npart} partitions, sort {sort_ms:.3} ms, iterate {iterate_ms:.3} ms ({level_dts} dominance tests, {level_mts} mask tests), plan and repack {:.3} ms, {next} kept; level {:.3} ms; estimated work {wm:.0} a point, cv {wcv:.2}",
                    state.ncur,
                    t_repack.elapsed().as_secs_f64() * 1e3,
                    t_level.elapsed().as_secs_f64() * 1e3,
                );
            }
            state.ncur = next;
        }
        Ok(())
    }

    /// Level `l`'s partitions sorted by key, with their directories
    /// (`sort_level`); the checks' comparisons; returns the sort's time (profile).
    fn sort_level(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pre: &Prefiltered,
        ws: &WorkingSet,
        plan: &LevelPlan,
        l: usize,
        level_points: usize,
    ) -> GpuResult<f64> {
        let ctx = self.ctx;
        let npart = plan.level_parts[l].len() / 3;
        let aux = &plan.auxs[l];
        if self.prof.on {
            self.flush(enc)?;
            ctx.wait()?;
        }
        let t_sort = Instant::now();
        let p = SkyParams {
            npart: npart as u32,
            sort_lanes: sort_lanes(level_points, npart),
            ..self.base
        };
        let binds = [
            (1, buf(&pre.r)),
            (3, buf(aux)),
            (6, buf(&ws.wq)),
            (13, buf(&ws.idx)),
            (14, buf(&plan.kdir)),
        ];
        self.k.record(enc, "sort_level", p, &binds, Groups::Direct(npart as u64))?;
        let mut sort_ms = 0.0;
        if self.prof.on {
            self.flush(enc)?;
            ctx.wait()?;
            sort_ms = t_sort.elapsed().as_secs_f64() * 1e3;
        }
        if let Some(mq) = &ws.mq {
            self.flush(enc)?;
            let dev_parts = aux.download::<u32>(ctx)?;
            check_working_set(ctx, &ws.idx, &ws.wq, mq, &ws.counts, self.order)?;
            check_keys(
                ctx,
                &ws.idx,
                &plan.kdir,
                &dev_parts[..3 * npart],
                self.ranks,
                self.d,
                self.base.kshift,
                self.k.sort_cap,
            )?;
        }
        Ok(sort_ms)
    }

    /// Level `l`'s iteration with kernel `lk` over the `ncur` points of the
    /// working set (host-sized launches of `plan.step` positions, or one indirect
    /// dispatch); the per-invocation kernel under a step bound launches again until
    /// no invocation is left unfinished. Returns the resumed launches.
    #[allow(clippy::too_many_arguments)]
    fn iterate_level(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pre: &Prefiltered,
        ws: &WorkingSet,
        plan: &LevelPlan,
        l: usize,
        lk: SkylineKernel,
        ncur: usize,
    ) -> GpuResult<u32> {
        let ctx = self.ctx;
        let parts = &plan.level_parts[l];
        let npart = parts.len() / 3;
        let aux = &plan.auxs[l];
        let (host_sized, step) = (plan.host_sized, plan.step);
        // Packed slot offsets in iterate_wide where they fit (see packed_slots).
        let max_len = parts.chunks_exact(3).map(|t| t[2] - t[1]).max().unwrap_or(0);
        let packed = packed_slots(max_len, self.cfg.wide_wg);
        let p = SkyParams {
            l: l as u32,
            npart: npart as u32,
            full: plan.step_limit,
            ..self.base
        };
        let region = (l * LVW * 4) as u64;
        let mut resumed = 0;
        if lk == SkylineKernel::Wide {
            // `full` carries the subset lookup choice (no step bound here).
            let full = match self.cfg.subset_lookup {
                None => 0,
                Some(true) => 1,
                Some(false) => 2,
            };
            let binds = [
                (1, buf(&pre.r)),
                (2, buf(&plan.stats)),
                (3, buf(aux)),
                (6, buf(&ws.wq)),
                (7, buf(&ws.idx)),
                (8, buf(&ws.dead)),
                (10, buf(&plan.ptab)),
                (15, buf(&plan.kdir)),
                (18, buf(&plan.lvl)),
                (22, buf(&plan.ctr)),
            ];
            if host_sized {
                for first in (0..ncur).step_by(step) {
                    let p = SkyParams {
                        full,
                        packed: packed as u32,
                        shift: first as u32,
                        ..p
                    };
                    let g = Groups::Direct((ncur - first).min(step) as u64);
                    self.k.record(enc, "iterate_wide", p, &binds, g)?;
                }
            } else {
                let p = SkyParams {
                    full,
                    packed: packed as u32,
                    ..p
                };
                let g = Groups::Indirect(buf(&plan.lvl), region + 12);
                self.k.record(enc, "iterate_wide", p, &binds, g)?;
            }
        } else {
            let binds = [
                (1, buf(&pre.r)),
                (2, buf(&plan.stats)),
                (3, buf(aux)),
                (4, buf(&plan.res)),
                (6, buf(&ws.wq)),
                (7, buf(&ws.idx)),
                (8, buf(&ws.dead)),
                (15, buf(&plan.kdir)),
                (18, buf(&plan.lvl)),
                (22, buf(&plan.ctr)),
            ];
            if host_sized {
                loop {
                    for first in (0..ncur).step_by(step) {
                        let p = SkyParams {
                            shift: first as u32,
                            ..p
                        };
                        let g = Groups::Direct(((ncur - first).min(step) as u64).div_ceil(SKY_WG as u64));
                        self.k.record(enc, "iterate", p, &binds, g)?;
                    }
                    if plan.step_limit == 0 {
                        break;
                    }
                    self.flush(enc)?;
                    let s = plan.stats.download::<u32>(ctx)?;
                    if s[4] == 0 {
                        break;
                    }
                    resumed += 1;
                    enc.clear_buffer(buf(&plan.stats), 16, Some(4));
                }
            } else {
                let g = Groups::Indirect(buf(&plan.lvl), region);
                self.k.record(enc, "iterate", p, &binds, g)?;
            }
        }
        Ok(resumed)
    }

    /// Repacking after level `plan.levels[li]` (line 25): `plan` turns the kept
    /// points' per-mask counts into each mask's first slot, the next level's
    /// partition bounds and sizes; the kept points are scattered to their mask's
    /// partition in (|M|, M) order (atomic cursors; any order inside a partition);
    /// the new working set swaps in. Nothing after the last level.
    fn repack(
        &self,
        enc: &mut wgpu::CommandEncoder,
        ws: &mut WorkingSet,
        plan: &mut LevelPlan,
        li: usize,
        ncur: usize,
    ) -> GpuResult<()> {
        let l = plan.levels[li];
        let d = self.d;
        let Some(&lnext) = plan.levels.get(li + 1) else {
            return Ok(());
        };
        let region = (l * LVW * 4) as u64;
        let off: usize = (0..=l).map(|k| plan.binoms[d * 17 + k] as usize).sum();
        let p = SkyParams {
            l: l as u32,
            tau: off as u32,
            shift: lnext as u32,
            npart: (plan.level_parts[lnext].len() / 3) as u32,
            stride: plan.max_dim,
            ..self.base
        };
        let binds = [
            (25, buf(&plan.stats)),
            (17, buf(&plan.lvl)),
            (19, buf(&plan.ordm)),
            (20, buf(&plan.cur)),
            (21, buf(&plan.auxs[lnext])),
        ];
        self.k.record(enc, "plan", p, &binds, Groups::Direct(1))?;
        let p = SkyParams { l: l as u32, ..self.base };
        let binds = [
            (2, buf(&plan.cur)),
            (6, buf(&ws.wq)),
            (7, buf(&ws.idx)),
            (8, buf(&ws.dead)),
            (11, buf(&plan.idx2)),
            (12, buf(&plan.wq2)),
            (18, buf(&plan.lvl)),
        ];
        if plan.host_sized {
            let g = Groups::Direct((ncur as u64).div_ceil(SKY_WG as u64));
            self.k.record(enc, "repack", p, &binds, g)?;
        } else {
            self.k.record(enc, "repack", p, &binds, Groups::Indirect(buf(&plan.lvl), region))?;
        }
        std::mem::swap(&mut ws.idx, &mut plan.idx2);
        std::mem::swap(&mut ws.wq, &mut plan.wq2);
        Ok(())
    }

    /// Step 5: the survivors as a bitmap (n / 8 bytes read back), listed in
    /// parallel; the test counters come back behind it in the same readback.
    fn finish(mut self, ws: &WorkingSet, plan: &LevelPlan, resumed: u32) -> GpuResult<ChunkOut> {
        let (ctx, n) = (self.ctx, self.n);
        let t_fin = Instant::now();
        if self.prof.on {
            ctx.wait()?;
        }
        let t_dl = Instant::now();
        let words = n.div_ceil(32);
        let bits = DeviceArray::alloc(ctx, words + 4 * CSTRIPES, 4)?;
        self.mem.spike(bits.device_bytes());
        let mut enc = ctx.encoder("skyline-finish");
        let p = SkyParams {
            n: n as u32,
            ..self.base
        };
        let g = Groups::Direct((words as u64).div_ceil(SKY_WG as u64));
        self.k.record(&mut enc, "alive_bits", p, &[(8, buf(&ws.dead)), (9, buf(&bits))], g)?;
        enc.copy_buffer_to_buffer(buf(&plan.ctr), 0, buf(&bits), 4 * words as u64, 16 * CSTRIPES as u64);
        ctx.submit(enc)?;
        // The rows' vector, its pages touched while the device finishes the levels.
        let mut out: Vec<u32> = Vec::with_capacity(n);
        out.spare_capacity_mut()
            .par_chunks_mut(1 << 14)
            .for_each(|c| c.fill(std::mem::MaybeUninit::new(0)));
        // SAFETY: every element was just initialised.
        unsafe { out.set_len(n) };
        let mut bits = bits.download::<u32>(ctx)?;
        let last = sum_counters(&bits[words..words + 4 * CSTRIPES]);
        bits.truncate(words);
        let t_rows = Instant::now();
        let rows = bits_to_rows_into(&bits, out);
        if self.prof.on {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            let now = Instant::now();
            log::debug!(
                target: PROFILE,
                "skyline profile: finish: queue drained {:.3} ms, dead flags read {:.3} ms, rows listed {:.3} ms; chunk {:.3} ms",
                ms(t_fin, t_dl),
                ms(t_dl, t_rows),
                ms(t_rows, now),
                self.prof.t_chunk.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(ChunkOut {
            rows,
            dominance_tests: last.0,
            mask_tests: last.1,
            device_bytes: self.mem.peak,
            resumed,
        })
    }
}
