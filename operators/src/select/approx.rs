//! Approximate selection in one pass: the sorted sample's keys near each target
//! rank become splitters (or, for 32-bit keys, cut their windows into cells of key
//! space), one histogram pass over the keys finds their exact rank ranges, and
//! each rank is answered by the nearest, its error exact and reported.
use super::chain::{piece_params, ChainU};
use super::contract::{SelectKey, SelectOptions};
use super::descent::{pieces, Src, Task};
use super::kernels::{bind, Kern, Params, WG};
use super::record::{lap, profiling, uni, Dims, GpuClock, Rec, Scratch};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::transfer::Extent;
use crate::tuning::select::{approx_groups, approx_items, APPROX_CELLS};

/// Most windows of a one-pass approximate selection (shaders/select/approx.wgsl).
const APPROX_MAX_WINDOWS: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ApU {
    first: [u32; APPROX_MAX_WINDOWS],
    len: [u32; APPROX_MAX_WINDOWS],
    off: [u32; APPROX_MAX_WINDOWS],
}

/// The shift of a window of cells spanning `span` + 1 keys (kc_shift of shaders/select/approx_kc.wgsl):
/// the least that leaves at most `cw` cells.
fn kc_shift(span: u32, cw: u64) -> u32 {
    if (span as u64) < cw {
        0
    } else {
        32 - span.leading_zeros() - cw.trailing_zeros()
    }
}

/// Answers of the key-cell pass (shaders/select/approx_kc.wgsl): every sample key of
/// a window lies in a cell whose rank range the counts give, so its copies' ranks
/// are in that range; each rank is answered by the sample key whose range reaches
/// least far from it. Cells of width 1 (shift 0) hold one key's copies only, so
/// their ranges are exact: a rank inside one is answered with error 0. Returns the
/// answers and the largest error bound, or `None` where some bound exceeds
/// `allowed` (cells too coarse in rank).
fn cells_answer<K: SelectKey>(
    n: u64,
    wins: &[(u64, u64)],
    counts: &[u32],
    cw: u64,
    sample: &[K],
    uniq: &[u64],
    allowed: u64,
) -> GpuResult<Option<(Vec<K>, u64)>> {
    // (key, lowest and highest rank of its cell, the cell holds only this key).
    let mut cands: Vec<(K, u64, u64, bool)> = Vec::new();
    for (w, &(a, b)) in wins.iter().enumerate() {
        let lo = sample[a as usize].to_u64() as u32;
        let span = (sample[b as usize].to_u64() as u32).wrapping_sub(lo);
        let sh = kc_shift(span, cw);
        let bins = &counts[APPROX_MAX_WINDOWS + w * cw as usize..][..cw as usize];
        let mut pre = Vec::with_capacity(cw as usize + 1);
        let mut acc = counts[w] as u64;
        pre.push(acc);
        for &c in bins {
            acc += c as u64;
            pre.push(acc);
        }
        if acc > n {
            return Err(GpuError::Validation(format!("approximate selection counted {acc} keys of {n}")));
        }
        for y in &sample[a as usize..=b as usize] {
            let c = ((y.to_u64() as u32).wrapping_sub(lo) >> sh) as usize;
            if pre[c + 1] == pre[c] {
                return Err(GpuError::Validation(format!("sample key {y:?} missing from its cell's count")));
            }
            cands.push((*y, pre[c], pre[c + 1] - 1, sh == 0));
        }
    }
    let mut out = Vec::with_capacity(uniq.len());
    let mut worst = 0u64;
    for &r in uniq {
        let reach = |c: &(K, u64, u64, bool)| {
            if c.3 {
                c.1.saturating_sub(r).max(r.saturating_sub(c.2))
            } else {
                r.abs_diff(c.1).max(r.abs_diff(c.2))
            }
        };
        let Some(best) = cands.iter().min_by_key(|c| reach(c)) else {
            return Ok(None);
        };
        let d = reach(best);
        if d > allowed {
            return Ok(None);
        }
        worst = worst.max(d);
        out.push(best.0);
    }
    Ok(Some((out, worst)))
}

/// Windows of sorted-sample indices `[a, b]` around the sorted distinct `ranks` of
/// `n` keys with a sample of `s`, `sig` standard deviations of the sample rank
/// either side (and one index more), overlapping ones merged.
fn approx_windows(n: u64, s: u64, ranks: &[u64], sig: f64) -> Vec<(u64, u64)> {
    let mut w: Vec<(u64, u64)> = Vec::new();
    let (sf, nf) = (s as f64, n as f64);
    for &r in ranks {
        let q = (r as f64 + 0.5) / nf;
        let sd = (sf * q * (1.0 - q)).sqrt() + 1.0;
        let a = (q * sf - 0.5 - sig * sd).floor() - 1.0;
        let b = (q * sf - 0.5 + sig * sd).ceil() + 1.0;
        let (a, b) = (a.clamp(0.0, sf - 1.0) as u64, b.clamp(0.0, sf - 1.0) as u64);
        match w.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => w.push((a, b)),
        }
    }
    w
}

/// Approximate selection in one pass (shaders/select/approx.wgsl): the sorted
/// sample's keys near each rank become splitters whose exact rank ranges one
/// histogram pass over the keys finds; each rank is answered by the nearest.
/// Returns the answers for the sorted distinct `uniq` ranks, the largest rank
/// error and the algorithm's name (which kernel ran), or `None` when it does not apply or
/// an error exceeds `allowed` (the sample missed a rank; the caller runs a descent).
#[allow(clippy::too_many_arguments)]
pub(super) fn approx_hist<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    uniq: &[u64],
    allowed: u64,
    cells: bool,
    opts: &SelectOptions,
    clock: &mut GpuClock,
    scratch: &mut Scratch<'_>,
) -> GpuResult<Option<(Vec<K>, u64, &'static str)>> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let (s, kb) = (kern.s as u64, kern.kb as u64);
    let n = len as u64;
    if len < opts.approx_hist_min || n <= 4 * s || uniq.is_empty() {
        return Ok(None);
    }
    let wins = approx_windows(n, s, uniq, if cells && K::BYTES == 4 { opts.approx_cell_sigmas } else { opts.approx_sigmas });
    let total: u64 = wins.iter().map(|w| w.1 - w.0 + 1).sum();
    if wins.len() > APPROX_MAX_WINDOWS {
        return Ok(None);
    }
    // Splitters held (a power of two from 256, for few pipeline variants), within
    // the adapter's workgroup memory.
    let aw = total.next_power_of_two().max(256);
    let mem = ctx.limits().max_compute_workgroup_storage_size as u64;
    // Cells per window (all windows together APPROX_CELLS), and their memory.
    let cw = APPROX_CELLS >> wins.len().next_power_of_two().trailing_zeros();
    let cells = cells && K::BYTES == 4 && (wins.len() as u64 * cw) * 4 + 64 <= mem;
    // Keys per invocation and chunk, and the most workgroups (0: the defaults,
    // tuning::select::approx_items and approx_groups).
    let items = match opts.approx_hist_items {
        0 => approx_items(),
        i => i,
    }
    .min(32);
    let max_groups = match opts.approx_hist_groups {
        0 => approx_groups(),
        g => g,
    }
    .min(65535) as u64;
    // Splitters, histogram and counters; the subgroup kernel also stages three
    // keys per invocation.
    let wg_mem = aw * kb + 2 * aw * 4 + 64;
    if wg_mem > mem {
        return Ok(None);
    }
    let sg = opts.approx_hist_subgroups && ctx.has_subgroup_barriers() && wg_mem + 3 * WG as u64 * kb <= mem;
    let whole = Task { src: Src::Input, n, lo: 0, ranks: Vec::new(), below: None, above: None };
    let ps = pieces(input, len, &[], &whole);
    let defs = [
        ("SRC", "K".to_string()),
        ("SRCKEY", "return x;".to_string()),
        ("SLOT", s.to_string()),
        ("NW", wins.len().to_string()),
        ("AW", aw.to_string()),
        ("AITEMS", items.to_string()),
        ("SGW", ctx.info().subgroup_max_size.div_ceil(32).clamp(1, 4).to_string()),
    ];
    let p_gather = kern.pipe_with(ctx, "chain+chain_first+chain_gather", "ch_gather", &defs[..3])?;
    let p_sort = kern.sort_pipe(ctx)?;
    let p_hist = if cells {
        let mut d = defs.to_vec();
        d.push(("KCW", cw.to_string()));
        kern.pipe_with(ctx, "chain+chain_first+approx+approx_kc", "ap_hist_kc", &d)?
    } else if sg {
        kern.pipe_with(ctx, "chain+chain_first+approx+approx_sg", "ap_hist_sg", &defs)?
    } else {
        kern.pipe_with(ctx, "chain+chain_first+approx", "ap_hist", &defs)?
    };

    let mut u: ApU = bytemuck::Zeroable::zeroed();
    let mut off = 0u64;
    for (i, &(a, b)) in wins.iter().enumerate() {
        u.first[i] = a as u32;
        u.len[i] = (b - a + 1) as u32;
        u.off[i] = off as u32;
        off += b - a + 1;
    }
    let ubuf = scratch.with_data(bytemuck::bytes_of(&u))?;
    // ch_gather reads the chain's state: keys in the region (above S: sample).
    let mut chu: ChainU = bytemuck::Zeroable::zeroed();
    chu.seed = opts.seed ^ 0x1656_67b1;
    let chbuf = scratch.with_data(bytemuck::bytes_of(&chu))?;
    let mut st0 = [0u32; 8];
    st0[0] = n as u32;
    let st = scratch.with_data(bytemuck::cast_slice(&st0))?;
    let raw_smp = scratch.alloc(s * kb)?;
    let smp = scratch.alloc(s * kb)?;
    let ncnt = APPROX_MAX_WINDOWS as u64 + if cells { wins.len() as u64 * cw } else { 2 * aw };
    let cnt = scratch.with_data(&vec![0u8; (ncnt * 4) as usize])?;
    let (stb, smpb, rawb, ub, chb, cntb) = (st.raw(), smp.raw(), raw_smp.raw(), ubuf.raw(), chbuf.raw(), cnt.raw());
    let mut rec = Rec::new(ctx);
    let piece_bufs = piece_params(&ps, s, n, scratch)?;
    for (&(inbuf, _, _), pb) in ps.iter().zip(&piece_bufs) {
        let g = bind(ctx, &p_gather, &[(0, inbuf), (3, stb), (4, rawb), (5, chb), (7, pb.raw())]);
        rec.push(&p_gather, &g, Dims::Direct((s as u32).div_ceil(WG), 1, 1));
    }
    let sort_u = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort = bind(ctx, &p_sort, &[(0, rawb), (1, smpb), (2, &sort_u)]);
    rec.push(&p_sort, &g_sort, Dims::Direct(1, 1, 1));
    if profiling() {
        // The host's setup (pipelines, buffers, bind groups) before any submission,
        // then the sample on its own, so the profile shows the histogram pass alone.
        clock.mark(ctx, format_args!("approx setup"))?;
        clock.submit(ctx, ctx.encoder("select-approx-sample"), &[&rec])?;
        clock.mark(ctx, format_args!("approx sample"))?;
        rec = Rec::new(ctx);
    }
    // Workgroups loop over chunks: enough to fill a large GPU, few enough that the
    // per-workgroup histogram flushes stay a small part of the pass.
    for (&(inbuf, _, pn), pb) in ps.iter().zip(&piece_bufs) {
        let chunks = (pn as u64).div_ceil((WG * items) as u64);
        let g = bind(ctx, &p_hist, &[(0, inbuf), (4, smpb), (7, pb.raw()), (9, ub), (10, cntb)]);
        rec.push(&p_hist, &g, Dims::Direct(chunks.clamp(1, max_groups) as u32, 1, 1));
    }
    clock.mark(ctx, format_args!("approx record ({} windows, {total} splitters)", wins.len()))?;
    clock.submit(ctx, ctx.encoder("select-approx"), &[&rec])?;
    clock.mark(ctx, format_args!("approx kernels"))?;
    let cnt_bytes = ncnt * 4;
    let mut raw = vec![0u32; ((cnt_bytes + s * kb) / 4) as usize];
    lap("download", || {
        ctx.download_stream(
            &[
                Extent { buffer: cntb, offset: 0, stream_offset: 0, len: cnt_bytes },
                Extent { buffer: smpb, offset: 0, stream_offset: cnt_bytes, len: s * kb },
            ],
            bytemuck::cast_slice_mut(&mut raw),
        )
    })?;
    clock.mark(ctx, format_args!("approx readback"))?;
    let (counts, rest) = raw.split_at(ncnt as usize);
    let sample: Vec<K> = bytemuck::cast_slice::<u32, u8>(rest).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    if cells {
        return Ok(cells_answer(n, &wins, counts, cw, &sample, uniq, allowed)?.map(|(v, e)| (v, e, "gpu-sampleselect-approx-1pass-cells")));
    }
    let Some((out, worst)) = splitters_answer(n, &wins, &u, counts, &sample, uniq, allowed)? else {
        return Ok(None);
    };
    let algorithm = if sg { "gpu-sampleselect-approx-1pass-subgroup" } else { "gpu-sampleselect-approx-1pass" };
    Ok(Some((out, worst, algorithm)))
}

/// Answers of the splitter pass (shaders/select/approx.wgsl): the counts give the
/// exact rank range of every distinct sample key of a window (its splitters, at
/// `u.off` of the window); each rank is answered by the key whose range is nearest.
/// Returns the answers and the largest error, or `None` where an error exceeds
/// `allowed` (the sample missed a rank).
#[allow(clippy::too_many_arguments)]
fn splitters_answer<K: SelectKey>(
    n: u64,
    wins: &[(u64, u64)],
    u: &ApU,
    counts: &[u32],
    sample: &[K],
    uniq: &[u64],
    allowed: u64,
) -> GpuResult<Option<(Vec<K>, u64)>> {
    // Rank ranges of the windows' distinct keys: (key, first rank, last rank).
    let bins = &counts[APPROX_MAX_WINDOWS..];
    let mut cands: Vec<(K, u64, u64)> = Vec::new();
    for (w, &(a, b)) in wins.iter().enumerate() {
        let o = u.off[w] as usize;
        let mut lt = counts[w] as u64;
        // A key equal to a later window's first key was counted there.
        let next_lo = wins.get(w + 1).map(|&(a2, _)| sample[a2 as usize]);
        for (t, j) in (a as usize..=b as usize).enumerate() {
            let v = sample[j];
            let g = o + t;
            if t > 0 {
                lt += bins[2 * g] as u64;
                if v == sample[j - 1] {
                    continue;
                }
            }
            let eq = bins[2 * g + 1] as u64;
            if next_lo != Some(v) && eq > 0 {
                cands.push((v, lt, lt + eq - 1));
            }
            lt += eq;
        }
        if lt > n {
            return Err(GpuError::Validation(format!("approximate selection counted {lt} keys of {n}")));
        }
    }
    let mut out = Vec::with_capacity(uniq.len());
    let mut worst = 0u64;
    for &r in uniq {
        let dist = |c: &(K, u64, u64)| if r < c.1 { c.1 - r } else { r.saturating_sub(c.2) };
        let Some(best) = cands.iter().min_by_key(|c| dist(c)) else {
            return Ok(None);
        };
        let d = dist(best);
        if d > allowed {
            return Ok(None);
        }
        worst = worst.max(d);
        out.push(best.0);
    }
    Ok(Some((out, worst)))
}
