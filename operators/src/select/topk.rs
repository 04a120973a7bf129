//! Top-k: the row indices of the `k` smallest keys, ties at the threshold to the
//! first rows (or, for the candidates of a top-k with further sort keys, every row
//! tied with the threshold). 32-bit keys take the chain over (key, row) pairs;
//! otherwise SampleSelect finds the threshold and a stable row filter collects the
//! rows (see "Top-k" in the module documentation of [`super`]).
use super::chain::{chain, ChainEnd};
use super::contract::{SelectKey, SelectOptions, SelectStats};
use super::descent::{check_device_input, sample_select};
use super::kernels::{Kern, TkParams, CHUNK};
use super::record::{read_buf, uni, GpuClock, Rec, Scratch};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};

/// The top-k of the first `len` keys of `keys` (`ties`: with every row tied with
/// the threshold).
pub(super) fn topk_device<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    k: usize,
    ties: bool,
    opts: &SelectOptions,
) -> GpuResult<(Vec<u32>, SelectStats)> {
    check_device_input::<K>(ctx, keys, len)?;
    let mut stats = SelectStats { algorithm: "gpu-topk", ..Default::default() };
    if k == 0 || len == 0 {
        return Ok((Vec::new(), stats));
    }
    if k >= len {
        return Ok(((0..len as u32).collect(), stats));
    }
    if K::BYTES == 4 {
        if let Some(done) = topk_by_chain(ctx, keys, len, k, ties, opts)? {
            return Ok(done);
        }
    }
    let (t, st) = sample_select::<K>(ctx, keys, len, &[k as u64 - 1], None, opts)?;
    let (idx, rf) = row_filter::<K>(ctx, keys, len, k, t[0], ties, opts)?;
    stats.levels = st.levels;
    stats.device_bytes = st.device_bytes + rf.device_bytes;
    stats.gpu_ms = st.gpu_ms + rf.gpu_ms;
    Ok((idx, stats))
}

/// Top-k of 32-bit keys by the chain over (key, row) pairs: exact, ties to the
/// first rows, one submission. `None` where the chain does not apply or stopped,
/// or (`ties`) the last region may not hold every key tied with the threshold.
fn topk_by_chain(ctx: &GpuContext, keys: &DeviceArray, len: usize, k: usize, ties: bool, opts: &SelectOptions) -> GpuResult<Option<(Vec<u32>, SelectStats)>> {
    let mut clock = GpuClock::new(ctx, opts);
    let mut scratch = Scratch { ctx, bytes: 0 };
    let kk = k as u64 - 1;
    if let Some((ChainEnd::Region(pairs, 0, hi), levels)) = chain::<u64>(ctx, keys, len, kk, kk, true, opts, &mut clock, &mut scratch)? {
        let key_t = pairs[k - 1] >> 32;
        // With ties, every key equal to the threshold must be in the last region:
        // its window's upper bound lies above the threshold's key (or is open).
        if !ties || hi.is_none_or(|h| h >> 32 > key_t) {
            let take = if ties { pairs.partition_point(|&p| p >> 32 <= key_t) } else { k };
            let mut idx: Vec<u32> = pairs[..take].iter().map(|&p| p as u32).collect();
            idx.sort_unstable();
            let stats = SelectStats { levels, device_bytes: scratch.bytes, algorithm: "gpu-topk+chain", rank_error_bound: 0, gpu_ms: clock.ms() };
            return Ok(Some((idx, stats)));
        }
    }
    Ok(None)
}

/// The stable two-pass row filter of a top-k with threshold `t` (the `k`-th
/// smallest key; shaders/select/topk.wgsl): `tk_count` counts the keys below and
/// equal to `t` per block, the host turns the counts into offsets, `tk_scatter`
/// writes the rows below `t` and the first `need` rows equal to it (`ties`: all of
/// them). Returns the rows and the filter's scratch bytes and time.
#[allow(clippy::too_many_arguments)]
fn row_filter<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    k: usize,
    t: K,
    ties: bool,
    opts: &SelectOptions,
) -> GpuResult<(Vec<u32>, SelectStats)> {
    let mut clock = GpuClock::new(ctx, opts);
    clock.mark(ctx, format_args!("top-k threshold"))?;
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let p_count = kern.pipe(ctx, "topk", "tk_count")?;
    let p_scatter = kern.pipe(ctx, "topk", "tk_scatter")?;
    let mut scratch = Scratch { ctx, bytes: 0 };

    // Segments (of the first len rows) and their blocks.
    let segs: Vec<(&wgpu::Buffer, usize, usize)> = (0..keys.num_segments())
        .map(|i| keys.segment(i))
        .map(|(b, start, rows)| (b, start, rows.min(len.saturating_sub(start))))
        .filter(|s| s.2 > 0)
        .collect();
    let mut block_base = Vec::with_capacity(segs.len());
    let mut blocks = 0u64;
    for s in &segs {
        block_base.push(blocks);
        blocks += (s.2 as u64).div_ceil(CHUNK as u64);
    }
    let thr = scratch.with_data(bytemuck::bytes_of(&t))?;
    let counts = scratch.alloc(2 * blocks * 4)?;
    let params = |si: usize, need: u32, win_lo: u32, win_len: u32| TkParams {
        n: segs[si].2 as u32,
        block_base: block_base[si] as u32,
        row0: segs[si].1 as u32,
        need,
        win_lo,
        win_len,
        blocks: blocks as u32,
        lt_total: 0,
    };
    let mut rec = Rec::new(ctx);
    for (si, s) in segs.iter().enumerate() {
        let ub = uni(ctx, &params(si, 0, 0, 0));
        // The scatter's output binding is unused by tk_count (not in its layout).
        rec.dispatch(&p_count, &[(0, s.0), (1, thr.raw()), (2, counts.raw()), (3, &ub)], (s.2 as u64).div_ceil(CHUNK as u64))?;
    }
    clock.submit(ctx, ctx.encoder("topk-count"), &[&rec])?;
    clock.mark(ctx, format_args!("top-k count"))?;
    let c: Vec<u32> = read_buf(ctx, counts.raw(), 2 * blocks as usize)?;
    // Exclusive offsets of both halves (keys < t, keys == t), in place.
    let mut offs = c.clone();
    let (mut lt, mut eq) = (0u64, 0u64);
    for b in 0..blocks as usize {
        offs[b] = lt as u32;
        lt += c[b] as u64;
        offs[blocks as usize + b] = eq as u32;
        eq += c[blocks as usize + b] as u64;
    }
    let k64 = k as u64;
    if !(lt < k64 && k64 <= lt + eq) {
        return Err(GpuError::Validation(format!("top-k threshold is inconsistent: {lt} keys below, {eq} equal, k = {k}")));
    }
    // With ties, every key equal to the threshold comes along.
    let (need, k) = if ties { (eq as u32, (lt + eq) as usize) } else { ((k64 - lt) as u32, k) };
    ctx.write_small(counts.raw(), 0, bytemuck::cast_slice(&offs))?;
    let out = DeviceArray::alloc(ctx, k, 4)?;
    scratch.bytes += out.device_bytes();
    let mut rec = Rec::new(ctx);
    for oi in 0..out.num_segments() {
        let (obuf, ostart, orows) = out.segment(oi);
        for (si, s) in segs.iter().enumerate() {
            let ub = uni(ctx, &TkParams { lt_total: lt as u32, ..params(si, need, ostart as u32, orows as u32) });
            rec.dispatch(
                &p_scatter,
                &[(0, s.0), (1, thr.raw()), (2, counts.raw()), (3, &ub), (4, obuf)],
                (s.2 as u64).div_ceil(CHUNK as u64),
            )?;
        }
    }
    clock.submit(ctx, ctx.encoder("topk-scatter"), &[&rec])?;
    clock.mark(ctx, format_args!("top-k scatter"))?;
    let idx = out.download::<u32>(ctx)?;
    Ok((idx, SelectStats { device_bytes: scratch.bytes, gpu_ms: clock.ms(), ..Default::default() }))
}
