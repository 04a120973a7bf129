//! Kernel probes for `bench select --probe`: device times of plain load-and-sum
//! passes (shaders/probe.wgsl) beside the selection's own kernels, to see what
//! bounds them.
use super::contract::SelectOptions;
use super::descent::check_device_input;
use super::kernels::{Kern, Params, WinParams, CCHUNK, CHUNK, WG};
use super::record::Rec;
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use std::sync::Arc;

const PROBE_WGSL: &str = include_str!("../../../shaders/probe.wgsl");

/// Device milliseconds (timestamp queries, median of `reps`) of one pass over the
/// first `n` keys of `keys` (u32; at most its first segment) for: plain load-and-sum probes
/// (shaders/probe.wgsl) in scalar and vec4 shapes, with and without contention on
/// one global counter; the bracketing level's count and copy passes (one window of
/// sample indices 1900..=2200, about 7% of the keys); one level's sample gather and
/// sort; and the first level's count kernel (1023 splitters, with and without the
/// oracle, and with parts left out or the former sorted-array search). `sample` is a sorted sample of the keys (4096 of them). Empty when
/// the adapter has no timestamp queries.
pub fn probe_kernels(ctx: &GpuContext, keys: &DeviceArray, n: usize, sample: &[u32], reps: usize) -> GpuResult<Vec<(String, f64)>> {
    check_device_input::<u32>(ctx, keys, n)?;
    if !ctx.has_timestamps() || sample.len() != 4096 {
        return Ok(Vec::new());
    }
    // The first segment (all of the keys unless they exceed one binding).
    let (buf, _, rows) = keys.segment(0);
    let n = n.min(rows);
    let time = |what: &str, pipe: &Arc<wgpu::ComputePipeline>, entries: &[(u32, &wgpu::Buffer)], groups: u64| -> GpuResult<(String, f64)> {
        // Warm up (the clock of an idle GPU drops; see timing::warm_up).
        crate::timing::warm_up(200.0, || -> GpuResult<()> {
            let mut r = Rec::new(ctx);
            r.dispatch(pipe, entries, groups)?;
            let mut enc = ctx.encoder("probe-warm-up");
            r.encode(&mut enc, None);
            ctx.submit(enc)?;
            ctx.wait()
        })?;
        let mut v = Vec::new();
        for _ in 0..reps.max(1) {
            let mut r = Rec::new(ctx);
            r.dispatch(pipe, entries, groups)?;
            let timer = crate::timing::KernelTimer::new(ctx, 1).ok_or_else(|| GpuError::Invalid("no timestamps".into()))?;
            let mut enc = ctx.encoder("probe");
            r.encode(&mut enc, timer.writes(0));
            timer.resolve(&mut enc);
            ctx.submit(enc)?;
            v.push(timer.read_ms(ctx)?[0]);
        }
        v.sort_by(f64::total_cmp);
        Ok((what.to_string(), v[v.len() / 2]))
    };
    let mut out = Vec::new();
    let acc = ctx.pool().alloc(4096 * 4)?;
    for items in [16u32, 64] {
        let defs = [("ITEMS", items.to_string())];
        let ps = ctx.pipeline("probe", PROBE_WGSL, "sum_scalar", &defs)?;
        let pv = ctx.pipeline("probe", PROBE_WGSL, "sum_vec4", &defs)?;
        let groups = (n as u64).div_ceil(256 * items as u64);
        for mode in [0u32, 1] {
            let ub = ctx.uniform(&[n as u32, mode, 0, 0]);
            let e: [(u32, &wgpu::Buffer); 3] = [(0, buf), (2, acc.raw()), (3, &ub)];
            out.push(time(&format!("sum scalar x{items} mode {mode}"), &ps, &e, groups)?);
            let e: [(u32, &wgpu::Buffer); 3] = [(1, buf), (2, acc.raw()), (3, &ub)];
            out.push(time(&format!("sum vec4 x{items} mode {mode}"), &pv, &e, groups)?);
        }
    }
    // The window pass over one window of sample indices 1900..=2200.
    let kern = Kern::new(ctx, 4, &SelectOptions::default())?;
    let smp = ctx.pool().alloc(4096 * 4)?;
    ctx.write_small(smp.raw(), 0, bytemuck::cast_slice(sample))?;
    let counts = ctx.pool().alloc(32 * 4)?;
    let cap = n as u64 / 5;
    let wout = ctx.pool().alloc(cap * 4)?;
    let wp = WinParams {
        off: 0,
        n: n as u32,
        pad: 0,
        wg_base: 0,
        lo_idx: [1900, 0, 0, 0],
        hi_idx: [2200, 0, 0, 0],
        woff: [0; 4],
        cap: [cap as u32, 0, 0, 0],
    };
    let ub = ctx.uniform(&wp);
    let groups = (n as u64).div_ceil(CHUNK as u64);
    let per_group = ctx.pool().alloc(groups * 4)?;
    let defs = [("NWIN", "1".to_string())];
    let p = kern.pipe_with(ctx, "window", "window_count", &defs)?;
    out.push(time("window count", &p, &[(0, buf), (1, smp.raw()), (2, counts.raw()), (3, &ub), (5, per_group.raw())], groups)?);
    let p = kern.pipe_with(ctx, "window", "window_copy", &defs)?;
    out.push(time("window copy", &p, &[(0, buf), (1, smp.raw()), (2, counts.raw()), (3, &ub), (4, wout.raw()), (5, per_group.raw())], groups)?);
    // One level's sample: the gather of S keys and their sort in one workgroup.
    let samples = ctx.pool().alloc(kern.s as u64 * 4)?;
    let sorted = ctx.pool().alloc(kern.s as u64 * 4)?;
    let ub = ctx.uniform(&Params { off: 0, n: n as u32, cnt: kern.s, dst_off: 0, seed: 7, task: 0, mode: 0, pad: 0 });
    let p = kern.pipe(ctx, "sample_gather", "gather")?;
    out.push(time("gather S", &p, &[(0, buf), (1, samples.raw()), (2, &ub)], (kern.s as u64).div_ceil(WG as u64))?);
    let ub = ctx.uniform(&Params { off: 0, n: kern.s, cnt: kern.s, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.sort_pipe(ctx)?;
    out.push(time(if kern.sg_sort { "sort S (subgroup shuffles)" } else { "sort S" }, &p, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?);
    let p = kern.pipe(ctx, "sample_bitonic+sample_sort", "sort_sample")?;
    out.push(time("sort S (every step through workgroup memory)", &p, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?);
    // The count kernel with the oracle, 1023 splitters from the sample.
    let spl: Vec<u32> = (0..kern.ns as usize).map(|j| sample[(j + 1) * 4096 / (kern.ns as usize + 1)]).collect();
    let splb = ctx.pool().alloc(spl.len() as u64 * 4)?;
    ctx.write_small(splb.raw(), 0, bytemuck::cast_slice(&spl))?;
    let cnt = ctx.pool().alloc(kern.nb() as u64 * 4)?;
    let ob = ctx.pool().alloc((n as u64).div_ceil(8 * WG as u64) * WG as u64 * 4)?;
    let ub = ctx.uniform(&Params { off: 0, n: n as u32, cnt: 0, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.pipe(ctx, "bucket+bucket_oracle", "count_oracle")?;
    out.push(time("count (oracle)", &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub), (7, ob.raw())], (n as u64).div_ceil(CCHUNK as u64))?);
    let p = kern.pipe(ctx, "bucket", "count")?;
    out.push(time("count (no oracle)", &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub)], (n as u64).div_ceil(CCHUNK as u64))?);
    for (what, entry) in [("count, histogram only", "count_nosearch"), ("count, search only", "count_noatomic"), ("count, sorted-array search (before)", "count_sorted")] {
        let p = kern.pipe(ctx, "bucket+bucket_probe", entry)?;
        out.push(time(what, &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub)], (n as u64).div_ceil(CCHUNK as u64))?);
    }
    Ok(out)
}
