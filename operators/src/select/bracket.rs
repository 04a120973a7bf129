//! The bracketing level (the first level on large inputs, in the manner of Floyd
//! & Rivest's sampling select): windows of the sorted sample around the target
//! ranks, one pass counting the keys below and inside each window and one copying
//! the keys inside, one readback; the descent goes on inside the windows.
use super::contract::{SelectKey, SelectOptions};
use super::descent::{pieces, Src, Start, Task};
use super::kernels::{Kern, Params, WinParams, CHUNK, NONE, WG};
use super::record::{read_buf, uni, GpuClock, Rec, Scratch};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::pool::GpuBuffer;
use crate::tuning::select::BRACKET_MAX_SHARE;

static BRACKETED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bracketing levels in this process that pinned every rank of their task to a
/// window (a diagnostic counter: tests check that a path really bracketed).
pub fn bracketed_total() -> u64 {
    BRACKETED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Windows of one bracketing pass (NWIN in shaders/select/window.wgsl; the
/// arrays of [`WinParams`] hold 4).
const BRACKET_WINDOWS: usize = 4;

/// A bracketing window: sample index range `a ..= b` (`None`: unbounded on that
/// side), the ranks it serves, and the capacity of its region.
#[derive(Clone, Debug)]
struct Window {
    a: Option<u64>,
    b: Option<u64>,
    ranks: Vec<u64>,
    cap: u64,
}

/// The bracketing windows of `ranks` (sorted, distinct) for `n` keys and a sorted
/// sample of `s`; empty when there are more than [`BRACKET_WINDOWS`] after merging
/// or they would hold too much.
fn bracket_windows(n: u64, s: u64, ranks: &[u64], sigmas: f64) -> Vec<Window> {
    let mut ws: Vec<(i64, i64, Vec<u64>)> = Vec::new();
    for &r in ranks {
        let q = (r as f64 + 0.5) / n as f64;
        let p = q * s as f64 - 0.5;
        let sd = (s as f64 * q * (1.0 - q)).sqrt() + 1.0;
        // Sample indices; -1 and s stand for "unbounded".
        let a = ((p - sigmas * sd).floor() as i64 - 1).max(-1);
        let b = ((p + sigmas * sd).ceil() as i64 + 1).min(s as i64);
        match ws.last_mut() {
            Some(last) if a <= last.1 + 1 => {
                last.1 = last.1.max(b);
                last.2.push(r);
            }
            _ => ws.push((a, b, vec![r])),
        }
    }
    if ws.len() > BRACKET_WINDOWS {
        return Vec::new();
    }
    let out: Vec<Window> = ws
        .into_iter()
        .map(|(a, b, ranks)| {
            // Keys between two sample order statistics m apart: about m / (s + 1) of
            // them, standard deviation about sqrt(m) / (s + 1); 4 deviations of slack.
            let m = (b - a) as f64;
            let cap = (((m + 4.0 * m.sqrt() + 8.0) / (s as f64 + 1.0)) * n as f64).ceil() as u64;
            Window { a: (a >= 0).then_some(a as u64), b: (b < s as i64).then_some(b as u64), ranks, cap: cap.min(n) }
        })
        .collect();
    if out.iter().map(|w| w.cap).sum::<u64>() as f64 > BRACKET_MAX_SHARE * n as f64 {
        return Vec::new();
    }
    out
}

/// The bracketing level (shaders/select/window.wgsl): sample, sort the sample,
/// one pass counting and copying the keys of each rank's window, one readback. Returns the
/// first tasks (one per window holding a rank) and where the descent starts, or
/// `None` when bracketing does not apply or did not pin every rank to a window
/// (the caller then runs the plain descent).
pub(super) fn bracket<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    whole: &Task,
    opts: &SelectOptions,
    clock: &mut GpuClock,
) -> GpuResult<Option<(Vec<Task>, Start)>> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let (s, kb) = (kern.s as u64, kern.kb as u64);
    let n = whole.n;
    if n < opts.bracket_min as u64 || n < 8 * s || whole.lo != 0 {
        return Ok(None);
    }
    let mut uniq: Vec<u64> = whole.ranks.iter().map(|x| x.1).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let windows = bracket_windows(n, s, &uniq, opts.bracket_sigmas);
    let total_cap: u64 = windows.iter().map(|w| w.cap).sum();
    let max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    if windows.is_empty() || total_cap * kb > max_binding {
        return Ok(None);
    }
    let p_gather = kern.pipe(ctx, "sample_gather", "gather")?;
    let p_sort = kern.sort_pipe(ctx)?;
    let nwin = windows.len();
    let nw_def = [("NWIN", nwin.to_string())];
    let p_count = kern.pipe_with(ctx, "window", "window_count", &nw_def)?;
    let p_copy = kern.pipe_with(ctx, "window", "window_copy", &nw_def)?;
    let ps = pieces(input, len, &[], whole);
    let mut scratch = Scratch { ctx, bytes: 0 };
    let samples = scratch.alloc(s * kb)?;
    let sorted = scratch.alloc(s * kb)?;
    let counts = scratch.alloc(8 * BRACKET_WINDOWS as u64 * 4)?;
    let wout = scratch.alloc(total_cap * kb)?;
    let total_groups: u64 = ps.iter().map(|p| (p.2 as u64).div_ceil(CHUNK as u64)).sum();
    let per_group = scratch.alloc(total_groups * nwin as u64 * 4)?;
    let mut wp: WinParams = bytemuck::Zeroable::zeroed();
    for (i, w) in windows.iter().enumerate() {
        wp.lo_idx[i] = w.a.map_or(NONE, |a| a as u32);
        wp.hi_idx[i] = w.b.map_or(NONE, |b| b as u32);
    }
    // The windows' regions back to back in one buffer, `sizes[i]` keys each.
    let lay_out = |wp: &mut WinParams, sizes: &mut dyn Iterator<Item = u64>| {
        let mut acc = 0u64;
        for (i, sz) in sizes.enumerate() {
            wp.woff[i] = acc as u32;
            wp.cap[i] = sz as u32;
            acc += sz;
        }
    };
    lay_out(&mut wp, &mut windows.iter().map(|w| w.cap));
    let mut enc = ctx.encoder("select-bracket");
    enc.clear_buffer(counts.raw(), 0, None);
    let (mut r_sample, mut r_sort, mut r_count, mut r_copy) = (Rec::new(ctx), Rec::new(ctx), Rec::new(ctx), Rec::new(ctx));
    // The copy pass over every piece, with the windows' regions of `wp` in `out`.
    let copy_dispatches = |r: &mut Rec<'_>, wp: &WinParams, out: &GpuBuffer| -> GpuResult<()> {
        let mut wg_base = 0u64;
        for &(buf, off, pn) in &ps {
            let groups = (pn as u64).div_ceil(CHUNK as u64);
            let ub = uni(ctx, &WinParams { off, n: pn, wg_base: wg_base as u32, ..*wp });
            r.dispatch(&p_copy, &[(0, buf), (1, sorted.raw()), (2, counts.raw()), (3, &ub), (4, out.raw()), (5, per_group.raw())], groups)?;
            wg_base += groups;
        }
        Ok(())
    };
    let mut taken = 0u64;
    let mut wg_base = 0u64;
    for (pi, &(buf, off, pn)) in ps.iter().enumerate() {
        let cnt = if pi + 1 == ps.len() { s - taken } else { s * pn as u64 / n };
        let seed = opts.seed ^ 0x5bd1_e995 ^ (pi as u32);
        let ub = uni(ctx, &Params { off, n: pn, cnt: cnt as u32, dst_off: taken as u32, seed, task: 0, mode: 0, pad: 0 });
        r_sample.dispatch(&p_gather, &[(0, buf), (1, samples.raw()), (2, &ub)], cnt.div_ceil(WG as u64))?;
        taken += cnt;
        let groups = (pn as u64).div_ceil(CHUNK as u64);
        let ub = uni(ctx, &WinParams { off, n: pn, wg_base: wg_base as u32, ..wp });
        // The count pass does not use binding 4 (not in its layout).
        r_count.dispatch(&p_count, &[(0, buf), (1, sorted.raw()), (2, counts.raw()), (3, &ub), (5, per_group.raw())], groups)?;
        wg_base += groups;
    }
    copy_dispatches(&mut r_copy, &wp, &wout)?;
    let ub = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    r_sort.dispatch(&p_sort, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?;
    clock.submit(ctx, enc, &[&r_sample, &r_sort, &r_count, &r_copy])?;
    clock.mark(ctx, format_args!("bracket sample+sort+window ({} windows)", windows.len()))?;
    let c: Vec<u32> = read_buf(ctx, counts.raw(), 8 * BRACKET_WINDOWS)?;
    clock.mark(ctx, format_args!("bracket read counts"))?;

    let Some((answered, needed)) = pin_ranks::<K>(&c, &windows, whole) else {
        return Ok(None);
    };
    let inside = |wi: usize| c[8 * wi + 1] as u64;
    let overflow = (0..nwin).any(|wi| needed[wi].is_some() && inside(wi) > windows[wi].cap);
    let (wout, wp) = if !overflow {
        (wout, wp)
    } else {
        // Ties at the bounds made a window larger than its region: copy again into
        // regions of the exact sizes (the counts stay valid), unless that is too much.
        let sizes: Vec<u64> = (0..nwin).map(|wi| if needed[wi].is_some() { inside(wi) } else { 0 }).collect();
        let total: u64 = sizes.iter().sum();
        if total as f64 > BRACKET_MAX_SHARE * n as f64 || total * kb > max_binding {
            return Ok(None);
        }
        scratch.bytes -= wout.size();
        drop(wout);
        let wout = scratch.alloc(total * kb)?;
        let mut wp2 = wp;
        lay_out(&mut wp2, &mut sizes.iter().copied());
        let mut enc = ctx.encoder("select-bracket-recopy");
        for wi in 0..nwin {
            enc.clear_buffer(counts.raw(), (8 * wi as u64 + 6) * 4, Some(4));
        }
        let mut r_copy = Rec::new(ctx);
        copy_dispatches(&mut r_copy, &wp2, &wout)?;
        clock.submit(ctx, enc, &[&r_copy])?;
        clock.mark(ctx, format_args!("bracket copy again ({total} keys)"))?;
        (wout, wp2)
    };
    let mut tasks: Vec<Task> = Vec::new();
    for (wi, ranks) in needed.into_iter().enumerate() {
        if let Some(ranks) = ranks {
            let below = c[8 * wi] as u64;
            tasks.push(Task { src: Src::Buf { buf: 0, off: wp.woff[wi] as u64 }, n: inside(wi), lo: below, ranks, below: None, above: None });
        }
    }
    let bytes = scratch.bytes;
    drop((samples, sorted, counts, per_group));
    BRACKETED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some((tasks, Start { bufs: vec![wout], level: 1, bytes, answered })))
}

/// The bracketing level's readback (`c`: per window the keys below and inside it
/// and its smallest and largest key inside) pins every rank of `whole` to its
/// window: returns the ranks answered at once (a window of one value) and, per
/// window, the ranks to descend into there; `None` when the sample missed (a rank
/// outside its window) or the windows overlap in key space.
#[allow(clippy::type_complexity)]
fn pin_ranks<K: SelectKey>(c: &[u32], windows: &[Window], whole: &Task) -> Option<(Vec<(usize, u64)>, Vec<Option<Vec<(usize, u64)>>>)> {
    let nwin = windows.len();
    let word = |w: usize, at: usize| K::from_u64(c[8 * w + at] as u64 | ((c[8 * w + at + 1] as u64) << 32));
    let mut answered = Vec::new();
    // Per window: Some(ranks to descend into) when its keys are needed.
    let mut needed: Vec<Option<Vec<(usize, u64)>>> = vec![None; nwin];
    for (wi, w) in windows.iter().enumerate() {
        let (below, inside) = (c[8 * wi] as u64, c[8 * wi + 1] as u64);
        let (lo, hi) = (word(wi, 2), word(wi, 4));
        if wi + 1 < nwin {
            // Windows must be disjoint in key space: the next one starts above this one.
            let next_lo = word(wi + 1, 2);
            if w.b.is_none() || windows[wi + 1].a.is_none() || next_lo <= hi {
                return None;
            }
        }
        let mine: Vec<(usize, u64)> = whole.ranks.iter().copied().filter(|x| w.ranks.contains(&x.1)).collect();
        if mine.iter().any(|&(_, r)| !(below <= r && r < below + inside)) {
            // The sample missed: a rank lies outside its window.
            return None;
        }
        if w.a.is_some() && w.b.is_some() && lo == hi {
            // A window of one value answers its ranks at once.
            answered.extend(mine.iter().map(|&(i, _)| (i, lo.to_u64())));
        } else if !mine.is_empty() {
            needed[wi] = Some(mine);
        }
    }
    Some((answered, needed))
}
