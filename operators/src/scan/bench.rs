//! [`bench_scan`]: device times of the exclusive `u32` scan.
use super::kernel::build_array_scan;
use super::{ScanAlgorithm, ScanKernel, ScanKind, ScanOptions, ScanType};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::timing::KernelTimer;

/// A scan benchmark result (see [`bench_scan`]).
#[derive(Clone, Debug)]
pub struct ScanBench {
    /// Elements scanned.
    pub n: usize,
    /// Median time of one scan in milliseconds (GPU timestamps around the scan's
    /// compute pass where the adapter has them, else wall clock around submit + wait).
    pub ms: f64,
    /// Effective bandwidth: `2 * n * 4` bytes (the input read once and the output
    /// written once, as CUB reports it) per second, in GB/s (10^9 bytes).
    pub gb_per_s: f64,
    /// Whether `ms` comes from GPU timestamps.
    pub gpu_timed: bool,
    /// Whether the subgroup path ran.
    pub subgroups: bool,
    /// The algorithm that ran.
    pub algorithm: ScanAlgorithm,
    /// Invocations per workgroup.
    pub workgroup_size: u32,
    /// Elements per tile (one workgroup).
    pub tile_elems: u64,
    /// Dispatches of one scan (the single pass: the state initialisation plus one
    /// per segment).
    pub dispatches: usize,
    /// Median wall-clock time of one scan (encode, submit and wait), in
    /// milliseconds: an upper bound that cross-checks `ms`.
    pub wall_ms: f64,
}

/// Times an exclusive `u32` scan of `n` elements under `opts` (the context's
/// segmentation): one warm-up run, then the median of `reps` (at least 1) runs.
/// The time covers every dispatch of the scan (for the single pass: the state
/// initialisation and the scan dispatches), not the allocation.
/// [`ScanOptions::with_algorithm`] times reduce-then-scan.
pub fn bench_scan(ctx: &GpuContext, n: usize, reps: usize, opts: &ScanOptions) -> GpuResult<ScanBench> {
    let k = ScanKernel::new(ctx, ScanType::U32, opts)?;
    let data: Vec<u32> = (0..n as u32).map(|i| i % 7).collect();
    let input = DeviceArray::upload(ctx, &data)?;
    drop(data);
    let values = DeviceArray::alloc_segmented(ctx, n, 4, input.seg_rows())?;
    let total = DeviceArray::alloc_segmented(ctx, 1, 4, 4)?;
    let mut times = Vec::new();
    let mut walls = Vec::new();
    let mut dispatches = 0;
    for rep in 0..=reps.max(1) {
        let pass = build_array_scan(ctx, &k, &input, &values, &total, ScanKind::Exclusive)?;
        dispatches = pass.len();
        let timer = KernelTimer::new(ctx, 1);
        let mut enc = ctx.encoder("bench-scan");
        let t0 = std::time::Instant::now();
        pass.encode(&mut enc, timer.as_ref().and_then(|t| t.writes(0)));
        if let Some(t) = &timer {
            t.resolve(&mut enc);
        }
        ctx.submit(enc)?;
        ctx.wait()?;
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        let ms = match &timer {
            Some(t) => t.read_ms(ctx)?[0],
            None => wall,
        };
        if rep > 0 {
            times.push(ms);
            walls.push(wall);
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    walls.sort_by(|a, b| a.total_cmp(b));
    let wall_ms = walls[walls.len() / 2];
    let ms = times[times.len() / 2];
    let gb_per_s = if ms > 0.0 { (2 * n * 4) as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
    Ok(ScanBench {
        n,
        ms,
        gb_per_s,
        gpu_timed: ctx.has_timestamps(),
        subgroups: k.subgroups,
        algorithm: if k.single_pass { ScanAlgorithm::SinglePass } else { ScanAlgorithm::ReduceThenScan },
        workgroup_size: k.wg,
        tile_elems: k.tile(),
        dispatches,
        wall_ms,
    })
}
