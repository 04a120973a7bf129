//! The chain: a descent with no host round trip between levels. Every level is a
//! bracketing level whose window the device computes from the target ranks and the
//! sorted sample (shaders/select/chain*.wgsl); the host sizes the regions from `n`
//! alone ([`chain_caps`]), records all levels in one submission and reads back once.
use super::contract::{SelectKey, SelectOptions};
use super::descent::{pieces, Src, Task};
use super::kernels::{bind, Kern, Params, Repr, CHUNK, WG};
use super::record::{lap, profiling, uni, Dims, GpuClock, Rec, Scratch};
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::transfer::Extent;
use crate::tuning::select::{CHAIN_LATER_SAMPLE, CHAIN_MAX_SPAN};
use std::sync::Arc;
use std::time::Instant;

/// Most levels of a chain (ChainU.cap holds 16).
const CHAIN_MAX_LEVELS: usize = 16;

/// One input segment of a chain's first level (PieceU of shaders/select/chain.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PieceU {
    off: u32,
    n: u32,
    row0: u32,
    dst: u32,
    cnt: u32,
    pad: [u32; 3],
}

/// The chain's parameters (ChainU of shaders/select/chain.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct ChainU {
    pub(super) rlo: u32,
    pub(super) rhi: u32,
    pub(super) topk: u32,
    pub(super) seed: u32,
    pub(super) sig: f32,
    pub(super) pad: [u32; 3],
    pub(super) cap: [u32; CHAIN_MAX_LEVELS],
}

static CHAINED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Chains in this process that answered their call (a diagnostic counter: tests
/// check that a path really ran as a chain).
pub fn chained_total() -> u64 {
    CHAINED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Capacities of a chain's regions, level by level, for `n` keys, samples of `s1`
/// keys on the first level and `s2` later, ranks `rlo ..= rhi` (`topk`: windows open below) and windows of `sig` standard
/// deviations: each bounds the keys of the level's window (expected size plus four
/// standard deviations, as `bracket_windows`) given the previous bound as the
/// region's size, and is at least `s2` so a region the device copies whole fits.
/// The last is `s2` (the final sort's size). `None` when that takes more than
/// [`CHAIN_MAX_LEVELS`] levels or a level would not shrink its region.
pub(super) fn chain_caps(n: u64, s1: u64, s2: u64, rlo: u64, rhi: u64, topk: bool, sig: f64) -> Option<Vec<u64>> {
    let mut caps = Vec::new();
    let mut m = n;
    while m > s2 {
        // The first level samples s1 keys, later levels s2.
        let sf = if caps.is_empty() { s1 } else { s2 } as f64;
        let mf = m as f64;
        // Sample indices spanned by the window: the device's a and b (ch_plan) with
        // the largest standard deviation the ranks can have in a region of m keys.
        let mw = if topk {
            let q = ((rhi as f64 + 0.5) / mf).min(1.0);
            let sd = (sf * q * (1.0 - q)).sqrt() + 1.0;
            q * sf + sig * sd + 3.0
        } else {
            let sd = (sf * 0.25).sqrt() + 1.0;
            (rhi - rlo) as f64 / mf * sf + 2.0 * sig * sd + 4.0
        };
        let cap = (((mw + 4.0 * mw.sqrt() + 8.0) / (sf + 1.0)) * mf).ceil() as u64;
        let cap = cap.max(s2);
        if cap >= m || caps.len() == CHAIN_MAX_LEVELS {
            return None;
        }
        caps.push(cap);
        m = cap;
    }
    Some(caps)
}

/// The parameters of a first level's input pieces (`ps`, of `n` keys in all), one
/// buffer each: offsets, first rows, each piece's share of the `s` samples, and its
/// sample slots.
pub(super) fn piece_params(ps: &[(&wgpu::Buffer, u32, u32)], s: u64, n: u64, scratch: &mut Scratch<'_>) -> GpuResult<Vec<GpuBuffer>> {
    let mut bufs = Vec::with_capacity(ps.len());
    let (mut row0, mut taken) = (0u64, 0u64);
    for (pi, &(_, off, pn)) in ps.iter().enumerate() {
        let cnt = if pi + 1 == ps.len() { s - taken } else { s * pn as u64 / n };
        let pu = PieceU { off, n: pn, row0: row0 as u32, dst: taken as u32, cnt: cnt as u32, pad: [0; 3] };
        bufs.push(scratch.with_data(bytemuck::bytes_of(&pu))?);
        row0 += pn as u64;
        taken += cnt;
    }
    Ok(bufs)
}

/// What a chain found.
pub(super) enum ChainEnd<K> {
    /// The last region sorted (at most S keys), the number of input keys below it,
    /// and the tightest upper bound of its window (`None`: never bounded).
    Region(Vec<K>, u64, Option<K>),
    /// A one-value window held every rank: its value.
    One(K),
}

/// A chain's kernels: the first level's (reading the input pieces, `kern`'s sample
/// size) and the later levels' (reading the previous region, `kern2`'s).
struct ChainPipes {
    gather1: Arc<wgpu::ComputePipeline>,
    gather: Arc<wgpu::ComputePipeline>,
    sort1: Arc<wgpu::ComputePipeline>,
    sort: Arc<wgpu::ComputePipeline>,
    plan1: Arc<wgpu::ComputePipeline>,
    plan: Arc<wgpu::ComputePipeline>,
    /// The first level in one pass per piece: each workgroup counts its chunk,
    /// reserves its slots and copies, reading the chunk twice (the second read
    /// mostly from the cache). On the H100 this took the 2^28 median from 1.93 to
    /// 1.34 ms and top-100 from 1.59 to 1.25 ms against a count pass and a copy
    /// pass (docs/benchmarks/history/session-12.md; earlier sessions measured the
    /// opposite with per-pass timestamps, which slowed the GPU's clock).
    window1: Arc<wgpu::ComputePipeline>,
    window: Arc<wgpu::ComputePipeline>,
    check: Arc<wgpu::ComputePipeline>,
    pad: Arc<wgpu::ComputePipeline>,
}

impl ChainPipes {
    fn new(ctx: &GpuContext, kern: &Kern, kern2: &Kern, defs: &[(&str, String)]) -> GpuResult<Self> {
        let pipe = |sections: &str, entry: &str| kern.pipe_with(ctx, sections, entry, defs);
        let pipe2 = |sections: &str, entry: &str| kern2.pipe_with(ctx, sections, entry, defs);
        Ok(ChainPipes {
            gather1: pipe("chain+chain_first+chain_gather", "ch_gather")?,
            gather: pipe2("chain+chain_next+chain_gather", "ch_gather")?,
            sort1: kern.sort_pipe(ctx)?,
            sort: kern2.sort_pipe(ctx)?,
            plan1: pipe("chain+chain_plan", "ch_plan")?,
            plan: pipe2("chain+chain_plan", "ch_plan")?,
            window: pipe2("chain+chain_next+chain_window", "ch_window")?,
            window1: pipe("chain+chain_first+chain_window", "ch_window")?,
            check: pipe2("chain+chain_next+chain_window", "ch_check")?,
            pad: pipe2("chain+chain_next+chain_window", "ch_pad")?,
        })
    }
}

/// A chain's device buffers: its parameters, the state words, the gathered sample,
/// the sorted sample with lo, hi and the sorted final region behind it, the
/// window pass's indirect dispatch size, and the two regions levels alternate.
struct ChainBufs {
    u: GpuBuffer,
    st: GpuBuffer,
    raw_smp: GpuBuffer,
    smp: GpuBuffer,
    args: GpuBuffer,
    regions: [GpuBuffer; 2],
    pieces: Vec<GpuBuffer>,
}

/// Runs a chain for ranks `rlo ..= rhi` of the first `len` keys of `input`
/// (shaders/select/chain*.wgsl). `pack`: the input holds 32-bit keys, the chain's
/// keys `K` (64-bit) are each key above its row index, and windows are open below
/// (top-k). `Ok(None)`: the chain does not apply or stopped (the sample missed, a
/// window overflowed); the caller runs the host-driven descent.
#[allow(clippy::too_many_arguments)]
pub(super) fn chain<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    rlo: u64,
    rhi: u64,
    pack: bool,
    opts: &SelectOptions,
    clock: &mut GpuClock,
    scratch: &mut Scratch<'_>,
) -> GpuResult<Option<(ChainEnd<K>, u32)>> {
    let t0 = Instant::now();
    // The first level samples S keys; later levels (regions of at most a few
    // percent of the input) sample fewer, whose sorts are cheaper.
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    // (A top-k's last region holds k keys and more, so large k keep S.)
    let later = if pack && rhi + 1 > (CHAIN_LATER_SAMPLE / 4) as u64 { opts.max_sample } else { opts.max_sample.min(CHAIN_LATER_SAMPLE) };
    let kern2 = Kern::new(ctx, K::BYTES, &SelectOptions { max_sample: later, ..*opts })?;
    let (s, s2, kb) = (kern.s as u64, kern2.s as u64, kern.kb as u64);
    let n = len as u64;
    if len < opts.chain_min || n <= 2 * s || rhi < rlo || rhi - rlo > CHAIN_MAX_SPAN || rhi >= n {
        return Ok(None);
    }
    let whole = Task { src: Src::Input, n, lo: 0, ranks: Vec::new(), below: None, above: None };
    let ps = pieces(input, len, &[], &whole);
    if pack && input.elem_size() != 4 {
        return Ok(None);
    }
    let Some(caps) = chain_caps(n, s, s2, rlo, rhi, pack, opts.bracket_sigmas) else {
        return Ok(None);
    };
    let max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    if caps[0] * kb > max_binding {
        return Ok(None);
    }
    let (src_ty, src_key) = match (pack, kern.repr) {
        (false, _) => ("K", "return x;"),
        (true, Repr::U64) => ("u32", "return (u64(x) << 32u) | u64(row);"),
        (true, Repr::U64Emu) => ("u32", "return vec2<u32>(row, x);"),
        (true, Repr::U32) => return Ok(None),
    };
    let defs = [("SRC", src_ty.to_string()), ("SRCKEY", src_key.to_string()), ("SLOT", s.to_string())];
    let p = ChainPipes::new(ctx, &kern, &kern2, &defs)?;
    let t_pipes = t0.elapsed();

    let mut u: ChainU = bytemuck::Zeroable::zeroed();
    u.rlo = rlo as u32;
    u.rhi = rhi as u32;
    u.topk = pack as u32;
    u.seed = opts.seed ^ 0x27d4_eb2f;
    u.sig = opts.bracket_sigmas as f32;
    for (l, &c) in caps.iter().enumerate() {
        u.cap[l] = c as u32;
    }
    let mut st0 = [0u32; 8];
    st0[0] = n as u32;
    let b = ChainBufs {
        u: scratch.with_data(bytemuck::bytes_of(&u))?,
        st: scratch.with_data(bytemuck::cast_slice(&st0))?,
        raw_smp: scratch.alloc(s * kb)?,
        smp: scratch.alloc((s + 2 + s2) * kb)?,
        args: scratch.alloc(16)?,
        regions: [scratch.alloc(caps[0] * kb)?, scratch.alloc(caps.get(1).copied().unwrap_or(1).max(s2) * kb)?],
        pieces: Vec::new(),
    };
    // lo starts at the smallest key, hi at the largest.
    let mut bounds = vec![0u8; 2 * kb as usize];
    bounds[kb as usize..].fill(0xff);
    ctx.write_small(b.smp.raw(), s * kb, &bounds)?;
    let b = ChainBufs { pieces: piece_params(&ps, s, n, scratch)?, ..b };
    let t_bufs = t0.elapsed();

    let recs = record_chain(ctx, &p, &b, &ps, &caps, s, s2)?;
    if profiling() {
        log::debug!(
            target: "ridgeline::profile::select",
            "chain host: kernels {:.3} ms, buffers {:.3} ms, all {:.3} ms",
            t_pipes.as_secs_f64() * 1e3,
            (t_bufs - t_pipes).as_secs_f64() * 1e3,
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    clock.mark(ctx, format_args!("chain record ({} levels)", caps.len()))?;
    // Every dispatch in its own timed pass, the times logged (a diagnosis aid,
    // with timestamp queries).
    if crate::tuning::profiling!("ridgeline::profile::select::passes") && ctx.has_timestamps() {
        let mut enc = ctx.encoder("select-chain");
        let timer = crate::timing::KernelTimer::new(ctx, recs.len() as u32).ok_or_else(|| GpuError::Invalid("no timer".into()))?;
        for (i, (_, r)) in recs.iter().enumerate() {
            r.encode(&mut enc, timer.writes(i as u32));
        }
        timer.resolve(&mut enc);
        ctx.submit(enc)?;
        let ms = timer.read_ms(ctx)?;
        let line: Vec<String> = recs.iter().zip(&ms).skip(1).map(|((w, _), t)| format!("{w} {t:.3}")).collect();
        log::debug!(target: "ridgeline::profile::select::passes", "chain passes (n {n}, ms): {}", line.join(", "));
    } else {
        let all: Vec<&Rec<'_>> = recs.iter().map(|r| &r.1).collect();
        clock.submit(ctx, ctx.encoder("select-chain"), &all)?;
    }
    clock.mark(ctx, format_args!("chain kernels"))?;
    read_chain_end(ctx, &b, s, s2, kb, rlo, rhi, clock)
}

/// Records every level of a chain and the final sort: one compute pass, or (when
/// the chain's passes are profiled) one per dispatch, each named.
fn record_chain<'a>(
    ctx: &'a GpuContext,
    p: &ChainPipes,
    b: &ChainBufs,
    ps: &[(&wgpu::Buffer, u32, u32)],
    caps: &[u64],
    s: u64,
    s2: u64,
) -> GpuResult<Vec<(String, Rec<'a>)>> {
    let bg = |p: &Arc<wgpu::ComputePipeline>, e: &[(u32, &wgpu::Buffer)]| lap("bind group", || bind(ctx, p, e));
    let (stb, smpb, rawb, ub, argb) = (b.st.raw(), b.smp.raw(), b.raw_smp.raw(), b.u.raw(), b.args.raw());
    // Per input piece: the first level's gather and window pass, and its keys.
    let first: Vec<(wgpu::BindGroup, wgpu::BindGroup, u64)> = ps
        .iter()
        .zip(&b.pieces)
        .map(|(&(inbuf, _, pn), pb)| {
            let (pb, r0) = (pb.raw(), b.regions[0].raw());
            (
                bg(&p.gather1, &[(0, inbuf), (3, stb), (4, rawb), (5, ub), (7, pb)]),
                bg(&p.window1, &[(0, inbuf), (2, r0), (3, stb), (4, smpb), (5, ub), (7, pb)]),
                pn as u64,
            )
        })
        .collect();
    let g_gather = [0, 1].map(|i| bg(&p.gather, &[(1, b.regions[i].raw()), (3, stb), (4, rawb), (5, ub)]));
    let sort_u1 = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort1 = bg(&p.sort1, &[(0, rawb), (1, smpb), (2, &sort_u1)]);
    let sort_u = uni(ctx, &Params { off: 0, n: s2 as u32, cnt: s2 as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort = bg(&p.sort, &[(0, rawb), (1, smpb), (2, &sort_u)]);
    let g_plan1 = bg(&p.plan1, &[(3, stb), (4, smpb), (5, ub), (6, argb)]);
    let g_plan = bg(&p.plan, &[(3, stb), (4, smpb), (5, ub), (6, argb)]);
    let g_window = [0, 1].map(|i| bg(&p.window, &[(1, b.regions[i].raw()), (2, b.regions[1 - i].raw()), (3, stb), (4, smpb), (5, ub)]));
    let g_check = bg(&p.check, &[(3, stb), (4, smpb), (5, ub)]);
    let gather_groups1 = Dims::Direct((s as u32).div_ceil(WG), 1, 1);
    let gather_groups = Dims::Direct((s2 as u32).div_ceil(WG), 1, 1);
    let one = Dims::Direct(1, 1, 1);
    let passes = crate::tuning::profiling!("ridgeline::profile::select::passes") && ctx.has_timestamps();
    let mut recs: Vec<(String, Rec<'_>)> = vec![("chain".into(), Rec::new(ctx))];
    let mut push = |what: String, p: &Arc<wgpu::ComputePipeline>, g: &wgpu::BindGroup, d: Dims| {
        if passes {
            recs.push((what, Rec::new(ctx)));
        }
        recs.last_mut().expect("a pass").1.push(p, g, d);
    };
    let max = ctx.limits().max_compute_workgroups_per_dimension.max(1);
    for l in 0..caps.len() {
        // Level l reads the input (l = 0, one dispatch per piece) or region
        // (l - 1) % 2, and writes region l % 2.
        if l == 0 {
            for f in &first {
                push(format!("{l} gather"), &p.gather1, &f.0, gather_groups1.clone());
            }
            push(format!("{l} sort"), &p.sort1, &g_sort1, one.clone());
            push(format!("{l} plan"), &p.plan1, &g_plan1, one.clone());
            for f in &first {
                let (x, y, z) = dispatch_dims(f.2.div_ceil(CHUNK as u64), max);
                push(format!("{l} window"), &p.window1, &f.1, Dims::Direct(x, y, z));
            }
        } else {
            push(format!("{l} gather"), &p.gather, &g_gather[(l - 1) % 2], gather_groups.clone());
            push(format!("{l} sort"), &p.sort, &g_sort, one.clone());
            push(format!("{l} plan"), &p.plan, &g_plan, one.clone());
            push(format!("{l} window"), &p.window, &g_window[(l - 1) % 2], Dims::Indirect(argb.clone(), 0));
        }
        push(format!("{l} check"), &p.check, &g_check, one.clone());
    }
    // The last region padded to S keys and sorted behind lo and hi.
    let last = b.regions[(caps.len() - 1) % 2].raw();
    let g_pad = bg(&p.pad, &[(2, last), (3, stb)]);
    push("pad".into(), &p.pad, &g_pad, gather_groups.clone());
    let final_u = uni(ctx, &Params { off: 0, n: s2 as u32, cnt: s2 as u32, dst_off: (s + 2) as u32, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_final = bg(&p.sort, &[(0, last), (1, smpb), (2, &final_u)]);
    push("final sort".into(), &p.sort, &g_final, one);
    Ok(recs)
}

/// A chain's one readback: the state words, then lo, hi and the final region
/// (sorted, at most `s2` keys).
#[allow(clippy::too_many_arguments)]
fn read_chain_end<K: SelectKey>(
    ctx: &GpuContext,
    b: &ChainBufs,
    s: u64,
    s2: u64,
    kb: u64,
    rlo: u64,
    rhi: u64,
    clock: &mut GpuClock,
) -> GpuResult<Option<(ChainEnd<K>, u32)>> {
    let st_bytes = 8 * 4;
    let tail = (2 + s2) * kb;
    let mut raw = vec![0u32; ((st_bytes + tail) / 4) as usize];
    lap("download", || {
        ctx.download_stream(
            &[
                Extent { buffer: b.st.raw(), offset: 0, stream_offset: 0, len: st_bytes },
                Extent { buffer: b.smp.raw(), offset: s * kb, stream_offset: st_bytes, len: tail },
            ],
            bytemuck::cast_slice_mut(&mut raw),
        )
    })?;
    clock.mark(ctx, format_args!("chain readback"))?;
    let (m, shift, fail, done, levels) = (raw[0] as u64, raw[1] as u64, raw[2], raw[3], raw[4]);
    let keys: Vec<K> = bytemuck::cast_slice::<u32, u8>(&raw[8..]).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    let (lo, hi) = (keys[0], keys[1]);
    if fail != 0 {
        return Ok(None);
    }
    CHAINED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if done != 0 {
        return Ok(Some((ChainEnd::One(lo), levels + 1)));
    }
    if m > s2 || shift > rlo || rhi - shift >= m {
        return Err(GpuError::Validation(format!("chain ended with {m} keys above {shift} for ranks {rlo}..={rhi}")));
    }
    let hi = (hi.to_u64() != K::MAX.to_u64()).then_some(hi);
    Ok(Some((ChainEnd::Region(keys[2..2 + m as usize].to_vec(), shift, hi), levels + 1)))
}
