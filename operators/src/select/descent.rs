//! The SampleSelect descent (Ribizel & Anzt): tasks (a region of keys and the ranks
//! in it) descend level by level, each level sampling, sorting the sample into
//! splitters, counting every key's bucket and filtering the target buckets into
//! new buffers; tasks of at most one sample are sorted whole (the base case). The
//! chain, the bracketing level and the one-pass approximate selection start it
//! where they apply (see the module documentation of [`super`]).
use super::approx::approx_hist;
use super::bracket::bracket;
use super::chain::{chain, ChainEnd};
use super::contract::{SelectKey, SelectOptions, SelectStats};
use super::kernels::{Kern, Params, CCHUNK, CHUNK, NONE, WG};
use super::record::{read_buf, uni, GpuClock, Rec, Scratch};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::tuning::select::RANKS_PER_DESCENT;
use std::collections::HashMap;
use std::sync::Arc;

/// Where a task's keys live.
#[derive(Clone, Copy, Debug)]
pub(super) enum Src {
    /// The input array's first `len` elements.
    Input,
    /// The input array's elements `start .. start + n` (a region).
    Range { start: u64 },
    /// `bufs[buf][off..off + n]`.
    Buf { buf: usize, off: u64 },
}

#[derive(Clone, Debug)]
pub(super) struct Task {
    pub(super) src: Src,
    /// Keys in the task.
    pub(super) n: u64,
    /// Global rank of the task's smallest key.
    pub(super) lo: u64,
    /// (output index, global rank).
    pub(super) ranks: Vec<(usize, u64)>,
    /// The key at global rank `lo - 1`, when known (approximate answers).
    pub(super) below: Option<u64>,
    /// The key at global rank `lo + n`, when known.
    pub(super) above: Option<u64>,
}

/// The pieces of a task's keys, one per buffer: (buffer, first element, count).
pub(super) fn pieces<'a>(input: &'a DeviceArray, len: usize, bufs: &'a [GpuBuffer], t: &Task) -> Vec<(&'a wgpu::Buffer, u32, u32)> {
    match t.src {
        Src::Input => (0..input.num_segments())
            .filter_map(|i| {
                let (buf, start, rows) = input.segment(i);
                let rows = rows.min(len.saturating_sub(start));
                (rows > 0).then_some((buf, 0u32, rows as u32))
            })
            .collect(),
        Src::Buf { buf, off } => vec![(bufs[buf].raw(), off as u32, t.n as u32)],
        Src::Range { start } => (0..input.num_segments())
            .filter_map(|i| {
                let (buf, s0, rows) = input.segment(i);
                let (a, b) = ((s0 as u64).max(start), ((s0 + rows) as u64).min(start + t.n));
                (a < b).then(|| (buf, (a - s0 as u64) as u32, (b - a) as u32))
            })
            .collect(),
    }
}

pub(super) fn check_device_input<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize) -> GpuResult<()> {
    if keys.elem_size() != K::BYTES {
        return Err(GpuError::Invalid(format!(
            "selection of {}-byte keys from an array of {}-byte elements",
            K::BYTES,
            keys.elem_size()
        )));
    }
    if len > keys.len() {
        return Err(GpuError::Invalid(format!("selection of {len} keys from an array of {}", keys.len())));
    }
    if len as u64 >= u32::MAX as u64 {
        return Err(GpuError::Invalid(format!("selection of {len} keys (at most 2^32 - 2)")));
    }
    ctx.check()
}

/// [`sample_select_once`] over batches of at most [`RANKS_PER_DESCENT`] distinct
/// ranks (neighbouring ranks share a batch, so they share buckets).
pub(super) fn sample_select<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    ranks: &[u64],
    approx: Option<u64>,
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let mut uniq: Vec<u64> = ranks.to_vec();
    uniq.sort_unstable();
    uniq.dedup();
    if uniq.len() <= RANKS_PER_DESCENT {
        return sample_select_once(ctx, input, len, ranks, approx, opts);
    }
    let mut vals: Vec<K> = Vec::with_capacity(uniq.len());
    let mut stats = SelectStats::default();
    for batch in uniq.chunks(RANKS_PER_DESCENT) {
        let (v, st) = sample_select_once::<K>(ctx, input, len, batch, approx, opts)?;
        vals.extend(v);
        stats.levels = stats.levels.max(st.levels);
        stats.device_bytes = stats.device_bytes.max(st.device_bytes);
        stats.rank_error_bound = stats.rank_error_bound.max(st.rank_error_bound);
        stats.gpu_ms += st.gpu_ms;
        stats.algorithm = st.algorithm;
    }
    let out = ranks.iter().map(|r| vals[uniq.binary_search(r).expect("rank in its batch")]).collect();
    Ok((out, stats))
}

/// The SampleSelect descent for all `ranks` at once. `approx`: the rank error
/// allowed (None = exact).
fn sample_select_once<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    ranks: &[u64],
    approx: Option<u64>,
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let mut clock = GpuClock::new(ctx, opts);
    check_device_input::<K>(ctx, input, len)?;
    if let Some(r) = ranks.iter().find(|&&r| r >= len as u64) {
        return Err(GpuError::Invalid(format!("rank {r} out of range for {len} keys")));
    }
    if ranks.is_empty() {
        let algorithm = if approx.is_some() { "gpu-sampleselect-approx" } else { "gpu-sampleselect" };
        return Ok((Vec::new(), SelectStats { algorithm, ..Default::default() }));
    }
    let whole = Task {
        src: Src::Input,
        n: len as u64,
        lo: 0,
        ranks: ranks.iter().copied().enumerate().collect(),
        below: None,
        above: None,
    };
    // Approximate (when enabled): one histogram pass over the keys where the
    // sample's keys near the ranks are close enough.
    if let Some(allowed) = approx {
        let mut uniq: Vec<u64> = ranks.to_vec();
        uniq.sort_unstable();
        uniq.dedup();
        let mut scratch = Scratch { ctx, bytes: 0 };
        // Cells of key space first (32-bit keys, where enabled), then splitters.
        let mut found = None;
        for cells in [true, false] {
            if found.is_none() && (opts.approx_key_cells || !cells) {
                found = approx_hist::<K>(ctx, input, len, &uniq, allowed, cells, opts, &mut clock, &mut scratch)?;
            }
        }
        if let Some((vals, bound, algorithm)) = found {
            let out = ranks.iter().map(|r| vals[uniq.binary_search(r).expect("a rank")]).collect();
            let stats = SelectStats { levels: 1, device_bytes: scratch.bytes, algorithm, rank_error_bound: bound, gpu_ms: clock.ms() };
            return Ok((out, stats));
        }
    }
    // Otherwise the chain answers exactly; on the H100 it is faster than one
    // approximate level of the descent (1.8 against 2.5 ms at 2^28,
    // docs/benchmarks/history/session-10.md), so
    // approximate calls take it too (bound 0).
    {
        let (rlo, rhi) = (ranks.iter().copied().min().unwrap_or(0), ranks.iter().copied().max().unwrap_or(0));
        let mut scratch = Scratch { ctx, bytes: 0 };
        if let Some((end, levels)) = chain::<K>(ctx, input, len, rlo, rhi, false, opts, &mut clock, &mut scratch)? {
            let out = match end {
                ChainEnd::One(v) => vec![v; ranks.len()],
                ChainEnd::Region(keys, shift, _) => ranks.iter().map(|&r| keys[(r - shift) as usize]).collect(),
            };
            let stats = SelectStats { levels, device_bytes: scratch.bytes, algorithm: "gpu-sampleselect+chain", rank_error_bound: 0, gpu_ms: clock.ms() };
            return Ok((out, stats));
        }
    }
    // Approximate selection needs one bucketing level over the keys (1.3 ms at 2^28
    // on the H100), less than the bracketing level and the level after it.
    let bracketed = if approx.is_none() { bracket::<K>(ctx, input, len, &whole, opts, &mut clock)? } else { None };
    if let Some((tasks, start)) = bracketed {
        let (out, mut stats) = sample_select_tasks(ctx, input, len, tasks, ranks.len(), approx, opts, clock, start)?;
        stats.algorithm = "gpu-sampleselect+bracket";
        return Ok((out, stats));
    }
    sample_select_tasks(ctx, input, len, vec![whole], ranks.len(), approx, opts, clock, Start::default())
}

/// Where a descent starts when a bracketing level ran before it.
#[derive(Default)]
pub(super) struct Start {
    /// Buffers that the first tasks read (`Src::Buf`).
    pub(super) bufs: Vec<GpuBuffer>,
    /// Levels already run.
    pub(super) level: u32,
    /// Scratch bytes already allocated.
    pub(super) bytes: u64,
    /// Answers already known: (output index, key).
    pub(super) answered: Vec<(usize, u64)>,
}

/// What the steps of one descent share: the input, the options, the kernels and
/// the largest buffer of extracted buckets.
struct Descent<'a> {
    ctx: &'a GpuContext,
    input: &'a DeviceArray,
    len: usize,
    opts: &'a SelectOptions,
    kern: Kern,
    gather: Arc<wgpu::ComputePipeline>,
    sort: Arc<wgpu::ComputePipeline>,
    count: Arc<wgpu::ComputePipeline>,
    filter: Arc<wgpu::ComputePipeline>,
    /// The count and filter kernels with the oracle (`opts.oracle`).
    oracle: Option<(Arc<wgpu::ComputePipeline>, Arc<wgpu::ComputePipeline>)>,
    max_binding: u64,
}

/// One level's buffers: the samples, splitters and bucket counts of its bucketing
/// tasks, their oracles (per task, one per piece; none where a task does not use
/// one), and the sorted base cases back to back.
struct LevelBufs {
    spl: GpuBuffer,
    counts: GpuBuffer,
    oracles: Vec<Vec<GpuBuffer>>,
    sorted: GpuBuffer,
    /// Where each base case starts in `sorted`, and the keys of all of them.
    small_off: Vec<u64>,
    small_total: u64,
    _samples: GpuBuffer,
}

/// A target bucket of a task that the next level descends into.
struct Children {
    tasks: Vec<Task>,
    /// Per child: (parent task, bucket).
    of: Vec<(usize, u64)>,
}

/// The SampleSelect descent from the first-level `tasks` (every rank of a task
/// relative to the task's source, `lo` 0), filling `nout` answers.
#[allow(clippy::too_many_arguments)]
pub(super) fn sample_select_tasks<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    mut tasks: Vec<Task>,
    nout: usize,
    approx: Option<u64>,
    opts: &SelectOptions,
    mut clock: GpuClock,
    start: Start,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let algorithm = if approx.is_some() { "gpu-sampleselect-approx" } else { "gpu-sampleselect" };
    let mut stats = SelectStats { algorithm, ..Default::default() };
    let mut out = vec![K::default(); nout];
    for &(i, v) in &start.answered {
        out[i] = K::from_u64(v);
    }
    let d = Descent::new::<K>(ctx, input, len, opts)?;
    let (ns, nb) = (d.kern.ns as u64, d.kern.nb() as u64);
    let mut scratch = Scratch { ctx, bytes: start.bytes };
    let mut bufs: Vec<GpuBuffer> = start.bufs;
    let mut max_err = 0u64;
    let mut level = start.level;
    while !tasks.is_empty() {
        level += 1;
        if level > 64 {
            return Err(GpuError::Invalid("selection made no progress after 64 levels".into()));
        }
        // Base cases: at most S keys in one buffer (a small input spread over several
        // segments takes one bucketing level first).
        let (small, big): (Vec<Task>, Vec<Task>) =
            tasks.into_iter().partition(|t| t.n <= d.kern.s as u64 && pieces(input, len, &bufs, t).len() == 1);
        let lv = d.record_level(&bufs, &big, &small, level, &mut scratch, &mut clock)?;

        // Base cases: read the sorted buckets, answer their ranks.
        if !small.is_empty() {
            let keys: Vec<K> = read_buf(ctx, lv.sorted.raw(), lv.small_total as usize)?;
            for (t, &o) in small.iter().zip(&lv.small_off) {
                for &(i, r) in &t.ranks {
                    out[i] = keys[(o + r - t.lo) as usize];
                }
            }
        }
        if big.is_empty() {
            break;
        }
        let nbig = big.len() as u64;
        let cnt: Vec<u32> = read_buf(ctx, lv.counts.raw(), (nbig * nb) as usize)?;
        let spl_keys: Vec<K> = read_buf(ctx, lv.spl.raw(), (nbig * ns) as usize)?;
        clock.mark(ctx, format_args!("level {level} read counts"))?;

        let children = descend(&big, &cnt, &spl_keys, ns as usize, nb as usize, approx, &mut out, &mut max_err)?;
        if children.tasks.is_empty() {
            break;
        }
        let (new_bufs, next) = d.filter(&bufs, &big, &lv, children, level, &mut scratch, &mut clock)?;
        bufs.extend(new_bufs);
        tasks = next;
    }
    ctx.wait()?;
    stats.levels = level;
    stats.device_bytes = scratch.bytes;
    stats.rank_error_bound = max_err;
    stats.gpu_ms = clock.ms();
    Ok((out, stats))
}

impl<'a> Descent<'a> {
    fn new<K: SelectKey>(ctx: &'a GpuContext, input: &'a DeviceArray, len: usize, opts: &'a SelectOptions) -> GpuResult<Self> {
        let kern = Kern::new(ctx, K::BYTES, opts)?;
        let oracle = if opts.oracle {
            Some((kern.pipe(ctx, "bucket+bucket_oracle", "count_oracle")?, kern.pipe(ctx, "bucket+bucket_oracle", "filter_oracle")?))
        } else {
            None
        };
        let mut max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
        if opts.max_filter_bytes > 0 {
            max_binding = max_binding.min(opts.max_filter_bytes);
        }
        Ok(Descent {
            ctx,
            input,
            len,
            opts,
            gather: kern.pipe(ctx, "sample_gather", "gather")?,
            sort: kern.sort_pipe(ctx)?,
            count: kern.pipe(ctx, "bucket", "count")?,
            filter: kern.pipe(ctx, "bucket", "filter_buckets")?,
            kern,
            oracle,
            max_binding,
        })
    }

    /// One level's sample, sort and count of every bucketing task (`big`), and the
    /// sort of every base case (`small`), in one submission.
    #[allow(clippy::too_many_arguments)]
    fn record_level(
        &self,
        bufs: &[GpuBuffer],
        big: &[Task],
        small: &[Task],
        level: u32,
        scratch: &mut Scratch<'_>,
        clock: &mut GpuClock,
    ) -> GpuResult<LevelBufs> {
        let (ctx, input, len, opts) = (self.ctx, self.input, self.len, self.opts);
        let (s, ns, nb, kb) = (self.kern.s as u64, self.kern.ns as u64, self.kern.nb() as u64, self.kern.kb as u64);
        let nbig = big.len() as u64;
        let samples = scratch.alloc(nbig * s * kb)?;
        let spl = scratch.alloc(nbig * ns * kb)?;
        let counts = scratch.alloc(nbig * nb * 4)?;
        let small_total: u64 = small.iter().map(|t| t.n).sum();
        let sorted = scratch.alloc(small_total * kb)?;

        let mut enc = ctx.encoder("select-level");
        enc.clear_buffer(counts.raw(), 0, None);
        let mut r_sample = Rec::new(ctx);
        let mut r_sort = Rec::new(ctx);
        let mut r_count = Rec::new(ctx);
        let mut oracles: Vec<Vec<GpuBuffer>> = Vec::with_capacity(big.len());
        for (ti, t) in big.iter().enumerate() {
            let ps = pieces(input, len, bufs, t);
            let distinct = {
                let mut r: Vec<u64> = t.ranks.iter().map(|x| x.1).collect();
                r.sort_unstable();
                r.dedup();
                r.len()
            };
            let use_oracle = self.oracle.is_some() && distinct <= opts.oracle_max_ranks;
            let mut task_oracles = Vec::new();
            let mut taken = 0u64;
            for (pi, &(buf, off, n)) in ps.iter().enumerate() {
                let cnt = if pi + 1 == ps.len() { s - taken } else { s * n as u64 / t.n };
                let seed = opts.seed ^ (level.wrapping_mul(0x9e37_79b9)) ^ ((ti as u32) << 8) ^ (pi as u32);
                let ub = uni(ctx, &Params {
                    off,
                    n,
                    cnt: cnt as u32,
                    dst_off: (ti as u64 * s + taken) as u32,
                    seed,
                    task: ti as u32,
                    mode: 0,
                    pad: 0,
                });
                r_sample.dispatch(&self.gather, &[(0, buf), (1, samples.raw()), (2, &ub)], cnt.div_ceil(WG as u64))?;
                taken += cnt;
                let ub = uni(ctx, &Params { off, n, cnt: 0, dst_off: 0, seed: 0, task: ti as u32, mode: 0, pad: 0 });
                let groups = (n as u64).div_ceil(CCHUNK as u64);
                if let (true, Some((pc, _))) = (use_oracle, &self.oracle) {
                    // Whole blocks of WG words (the oracle's layout, shaders/select/bucket_oracle.wgsl).
                    let ob = scratch.alloc((n as u64).div_ceil(8 * WG as u64) * WG as u64 * 4)?;
                    r_count.dispatch(pc, &[(0, buf), (1, spl.raw()), (2, counts.raw()), (3, &ub), (7, ob.raw())], groups)?;
                    task_oracles.push(ob);
                } else {
                    r_count.dispatch(&self.count, &[(0, buf), (1, spl.raw()), (2, counts.raw()), (3, &ub)], groups)?;
                }
            }
            oracles.push(task_oracles);
            let ub = uni(ctx, &Params {
                off: (ti as u64 * s) as u32,
                n: s as u32,
                cnt: s as u32,
                dst_off: (ti as u64 * ns) as u32,
                seed: 0,
                task: ti as u32,
                mode: 1,
                pad: 0,
            });
            r_sort.dispatch(&self.sort, &[(0, samples.raw()), (1, spl.raw()), (2, &ub)], 1)?;
        }
        let mut small_off = Vec::with_capacity(small.len());
        let mut acc = 0u64;
        for t in small {
            small_off.push(acc);
            let ps = pieces(input, len, bufs, t);
            if ps.len() != 1 {
                return Err(GpuError::Invalid("a base-case task spans several segments".into()));
            }
            let (buf, off, n) = ps[0];
            let ub = uni(ctx, &Params { off, n, cnt: n, dst_off: acc as u32, seed: 0, task: 0, mode: 0, pad: 0 });
            r_sort.dispatch(&self.sort, &[(0, buf), (1, sorted.raw()), (2, &ub)], 1)?;
            acc += t.n;
        }
        clock.mark(ctx, format_args!("level {level} record ({} tasks)", big.len() + small.len()))?;
        clock.submit(ctx, enc, &[&r_sample, &r_sort, &r_count])?;
        clock.mark(ctx, format_args!("level {level} sample+sort+count"))?;
        Ok(LevelBufs { spl, counts, oracles, sorted, small_off, small_total, _samples: samples })
    }

    /// The filter: the child buckets into new buffers, as few as the binding limit
    /// allows (one for all of them unless they hold more than one binding). Returns
    /// the new buffers (numbered after `bufs`) and the children as the next tasks.
    #[allow(clippy::too_many_arguments)]
    fn filter(
        &self,
        bufs: &[GpuBuffer],
        big: &[Task],
        lv: &LevelBufs,
        children: Children,
        level: u32,
        scratch: &mut Scratch<'_>,
        clock: &mut GpuClock,
    ) -> GpuResult<(Vec<GpuBuffer>, Vec<Task>)> {
        let (ctx, input, len, max_binding) = (self.ctx, self.input, self.len, self.max_binding);
        let (nb, kb) = (self.kern.nb() as u64, self.kern.kb as u64);
        let nbig = big.len() as u64;
        let Children { tasks: mut children, of: child_of } = children;
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_keys = 0u64;
        for (ci, c) in children.iter().enumerate() {
            if c.n * kb > max_binding {
                return Err(GpuError::Invalid(format!(
                    "a bucket of {} keys exceeds one storage binding ({max_binding} bytes)",
                    c.n
                )));
            }
            if groups.is_empty() || (group_keys + c.n) * kb > max_binding {
                groups.push(Vec::new());
                group_keys = 0;
            }
            groups.last_mut().expect("a group").push(ci);
            group_keys += c.n;
        }
        let mut new_bufs = Vec::with_capacity(groups.len());
        let mut keep: Vec<GpuBuffer> = Vec::new();
        let mut enc = ctx.encoder("select-filter");
        let mut r_filter = Rec::new(ctx);
        for group in &groups {
            let keys_in: u64 = group.iter().map(|&ci| children[ci].n).sum();
            let outbuf = scratch.alloc(keys_in * kb)?;
            let mut slot = vec![NONE; (nbig * nb) as usize];
            let mut outoff = Vec::with_capacity(group.len());
            let mut acc = 0u64;
            for (si, &ci) in group.iter().enumerate() {
                let (p, b) = child_of[ci];
                slot[p * nb as usize + b as usize] = si as u32;
                outoff.push(acc as u32);
                children[ci].src = Src::Buf { buf: bufs.len() + new_bufs.len(), off: acc };
                acc += children[ci].n;
            }
            let slot_buf = scratch.with_data(bytemuck::cast_slice(&slot))?;
            let off_buf = scratch.with_data(bytemuck::cast_slice(&outoff))?;
            let cursors = scratch.alloc(group.len() as u64 * 4)?;
            enc.clear_buffer(cursors.raw(), 0, None);
            for (ti, t) in big.iter().enumerate() {
                let ps = pieces(input, len, bufs, t);
                if !group.iter().any(|&ci| child_of[ci].0 == ti) {
                    continue;
                }
                for (pi, (buf, off, n)) in ps.into_iter().enumerate() {
                    let ub = uni(ctx, &Params { off, n, cnt: 0, dst_off: 0, seed: 0, task: ti as u32, mode: 0, pad: 0 });
                    let mut entries = vec![
                        (0, buf),
                        (1, lv.spl.raw()),
                        (2, cursors.raw()),
                        (3, &ub),
                        (4, slot_buf.raw()),
                        (5, off_buf.raw()),
                        (6, outbuf.raw()),
                    ];
                    let pipe = match (lv.oracles[ti].get(pi), &self.oracle) {
                        (Some(ob), Some((_, pf))) => {
                            entries.push((7, ob.raw()));
                            pf
                        }
                        _ => &self.filter,
                    };
                    r_filter.dispatch(pipe, &entries, (n as u64).div_ceil(CHUNK as u64))?;
                }
            }
            // Pool buffers go back to the pool when dropped, and the next group's
            // allocations (and their queue writes) could take them before this
            // submission: keep them until it is submitted (queue order does the rest).
            new_bufs.push(outbuf);
            keep.extend([slot_buf, off_buf, cursors]);
        }
        clock.mark(ctx, format_args!("level {level} filter record"))?;
        clock.submit(ctx, enc, &[&r_filter])?;
        clock.mark(ctx, format_args!("level {level} filter ({} keys out)", children.iter().map(|c| c.n).sum::<u64>()))?;
        drop(keep);
        Ok((new_bufs, children))
    }
}

/// The host's part of a level: each rank's bucket from the counts and splitters of
/// its task (`cnt`, `spl_keys`: `nb` counts and `ns` splitters per task of `big`).
/// A rank in an equality bucket is answered by its splitter, an approximate rank
/// by a neighbouring splitter where the bucket is small enough (the bound joins
/// `max_err`); the others descend into their bucket: the children.
#[allow(clippy::too_many_arguments)]
fn descend<K: SelectKey>(
    big: &[Task],
    cnt: &[u32],
    spl_keys: &[K],
    ns: usize,
    nb: usize,
    approx: Option<u64>,
    out: &mut [K],
    max_err: &mut u64,
) -> GpuResult<Children> {
    let mut children: Vec<Task> = Vec::new();
    let mut child_of: Vec<(usize, u64)> = Vec::new(); // (parent task, bucket)
    let mut child_index: HashMap<(usize, u64), usize> = HashMap::new();
    for (ti, t) in big.iter().enumerate() {
        let c = &cnt[ti * nb..(ti + 1) * nb];
        let sp = &spl_keys[ti * ns..(ti + 1) * ns];
        let total: u64 = c.iter().map(|&x| x as u64).sum();
        if total != t.n {
            return Err(GpuError::Validation(format!("bucket counts sum to {total}, expected {}", t.n)));
        }
        let mut start = vec![0u64; nb + 1];
        for b in 0..nb {
            start[b + 1] = start[b] + c[b] as u64;
        }
        for &(i, r) in &t.ranks {
            let local = r - t.lo;
            let b = start.partition_point(|&x| x <= local) - 1;
            if b % 2 == 1 {
                out[i] = sp[b / 2];
                continue;
            }
            let j = b / 2;
            let size = c[b] as u64;
            let below = if j > 0 { Some(sp[j - 1].to_u64()) } else { t.below };
            let above = if j < ns { Some(sp[j].to_u64()) } else { t.above };
            if let Some(allowed) = approx {
                let bound = match (below, above) {
                    (Some(_), Some(_)) => size.div_ceil(2),
                    (None, Some(_)) | (Some(_), None) => size,
                    (None, None) => u64::MAX,
                };
                if bound <= allowed {
                    // The nearer neighbour: rank start-1 (below) or start+size (above).
                    let d_below = local - start[b] + 1;
                    let d_above = start[b] + size - local;
                    let pick = match (below, above) {
                        (Some(lo), Some(hi)) => if d_below <= d_above { lo } else { hi },
                        (Some(lo), None) => lo,
                        (None, Some(hi)) => hi,
                        (None, None) => unreachable!("bound is finite"),
                    };
                    out[i] = K::from_u64(pick);
                    *max_err = (*max_err).max(bound);
                    continue;
                }
            }
            let ci = match child_index.get(&(ti, b as u64)) {
                Some(&ci) => ci,
                None => {
                    child_index.insert((ti, b as u64), children.len());
                    child_of.push((ti, b as u64));
                    children.push(Task {
                        src: Src::Input,
                        n: size,
                        lo: t.lo + start[b],
                        ranks: Vec::new(),
                        below,
                        above,
                    });
                    children.len() - 1
                }
            };
            children[ci].ranks.push((i, r));
        }
    }
    Ok(Children { tasks: children, of: child_of })
}

/// Sorts up to S keys (the sample size of `opts` on this adapter) with the
/// selection's sample-sort kernel, as every level's sample is sorted; returns the
/// sorted keys and whether the subgroup kernel (`sort_sample_sg`) ran. For tests.
#[doc(hidden)]
pub fn sample_sort_gpu<K: SelectKey>(ctx: &GpuContext, keys: &[K], opts: &SelectOptions) -> GpuResult<(Vec<K>, bool)> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let m = keys.len();
    if m > kern.s as usize {
        return Err(GpuError::Invalid(format!("{m} keys to sort, more than the sample size {}", kern.s)));
    }
    let mut scratch = Scratch { ctx, bytes: 0 };
    let src = scratch.with_data(bytemuck::cast_slice(keys))?;
    let dst = scratch.alloc((m * K::BYTES) as u64)?;
    let ub = uni(ctx, &Params { off: 0, n: m as u32, cnt: m as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.sort_pipe(ctx)?;
    let mut r = Rec::new(ctx);
    r.dispatch(&p, &[(0, src.raw()), (1, dst.raw()), (2, &ub)], 1)?;
    let mut enc = ctx.encoder("select-sort-test");
    r.encode(&mut enc, None);
    ctx.submit(enc)?;
    let raw: Vec<u32> = read_buf(ctx, dst.raw(), m * K::BYTES / 4)?;
    let out = bytemuck::cast_slice::<u32, u8>(&raw).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    Ok((out, kern.sg_sort))
}
