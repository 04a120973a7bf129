//! [`bench_partition`]: device times of the GPU partition against plain copies of
//! the same columns.
use super::gpu::{partition_timed, Timing};
use super::{PartitionFn, PartitionOptions, PartitionStats};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::timing::KernelTimer;

/// A partition benchmark result (see [`bench_partition`]).
#[derive(Clone, Debug)]
pub struct PartitionBench {
    /// Rows.
    pub n: usize,
    /// Partitions.
    pub fanout: u32,
    /// Payload columns (u32) besides the u32 key.
    pub payload_columns: usize,
    /// Median device time of the partition's compute pass (timestamps where the
    /// adapter has them, else wall clock around submit + wait), in milliseconds.
    pub ms: f64,
    /// Median wall time of the whole call (allocation and the offsets' readback
    /// included), in milliseconds.
    pub wall_ms: f64,
    /// Input bytes (key plus payload columns) read and the same written once, per
    /// second, in GB/s (10^9 bytes): `2 * input_bytes / ms`.
    pub gb_per_s: f64,
    /// Scratch accounting of the last run.
    pub stats: PartitionStats,
    /// Median device time of plain copies of the same columns (the copy kernel,
    /// every column read once and written once, one timed pass), in
    /// milliseconds; 0 without timestamps.
    pub copy_ms: f64,
    /// The streaming floor of a histogram-scan-scatter partition: the copy
    /// kernel's measured rate applied to the partition's least traffic (every
    /// column read and written once, plus the histogram's read of the key),
    /// `copy_ms * (2 * input + key) / (2 * input)`, in milliseconds.
    pub floor_ms: f64,
    /// With the `ridgeline::profile::partition` log target at debug
    /// (`RUST_LOG=ridgeline::profile::partition=debug`): one more run with every
    /// dispatch in its own timed pass, device milliseconds per step (ids,
    /// histogram, scan, rank, moves, ...), also logged there; empty otherwise.
    pub profile: Vec<(&'static str, f64)>,
}

/// Times the hash partition of `n` rows of one pseudo-random u32 key plus
/// `payload_columns` u32 columns into `fanout` partitions (GPU-resident input, the
/// context's segmentation): one warm-up run, then the median of `reps` (at least 1).
/// `fused` picks the scatter path ([`PartitionOptions::fused`], forced either way).
pub fn bench_partition(ctx: &GpuContext, n: usize, fanout: u32, payload_columns: usize, reps: usize, fused: bool) -> GpuResult<PartitionBench> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let keys: Vec<u32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        })
        .collect();
    let mut arrays = vec![DeviceArray::upload(ctx, &keys)?];
    for c in 0..payload_columns {
        let v: Vec<u32> = (0..n as u32).map(|i| i ^ c as u32).collect();
        arrays.push(DeviceArray::upload(ctx, &v)?);
    }
    drop(keys);
    let cols: Vec<Column<'_>> = arrays.iter().map(Column::new).collect();
    let func = PartitionFn::Hash { fanout };
    let opts = PartitionOptions { fused: Some(fused), ..Default::default() };
    let (mut times, mut walls) = (Vec::new(), Vec::new());
    let mut stats = PartitionStats::default();
    crate::timing::warm_up(crate::timing::WARM_UP_MS, || {
        partition_timed(ctx, &cols, &[0], &func, &opts, Timing::None)?;
        ctx.wait()
    })?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        let timer = KernelTimer::new(ctx, 1);
        let t0 = std::time::Instant::now();
        let out = match &timer {
            Some(t) => partition_timed(ctx, &cols, &[0], &func, &opts, Timing::Pass(t))?,
            None => partition_timed(ctx, &cols, &[0], &func, &opts, Timing::None)?,
        };
        ctx.wait()?;
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        let ms = match &timer {
            Some(t) => t.read_ms(ctx)?[0],
            None => wall,
        };
        stats = out.stats;
        times.push(ms);
        walls.push(wall);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    walls.sort_by(|a, b| a.total_cmp(b));
    let ms = times[times.len() / 2];
    let gb_per_s = if ms > 0.0 { 2.0 * stats.input_bytes as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
    let mut profile = Vec::new();
    if crate::tuning::profiling!("ridgeline::profile::partition") {
        partition_timed(ctx, &cols, &[0], &func, &opts, Timing::Each(&mut profile))?;
        let steps: Vec<String> = profile.iter().map(|(l, ms)| format!("{l} {ms:.3}")).collect();
        log::debug!(target: "ridgeline::profile::partition", "{n} rows, fan-out {fanout}, fused {fused}: device ms per step: {}", steps.join(", "));
    }
    // The same bytes through the copy kernel, in the same process and lease.
    let copies: Vec<DeviceArray> = arrays.iter().map(|a| DeviceArray::alloc_segmented(ctx, a.len(), 4, a.seg_rows())).collect::<GpuResult<_>>()?;
    let pairs: Vec<(&DeviceArray, &DeviceArray)> = arrays.iter().zip(copies.iter()).collect();
    let mut copy_times = Vec::new();
    crate::array::copy_arrays_timed(ctx, &pairs, None)?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        if let Some(t) = KernelTimer::new(ctx, 1) {
            crate::array::copy_arrays_timed(ctx, &pairs, Some(&t))?;
            copy_times.push(t.read_ms(ctx)?[0]);
        }
    }
    copy_times.sort_by(|a, b| a.total_cmp(b));
    let copy_ms = copy_times.get(copy_times.len() / 2).copied().unwrap_or(0.0);
    let moved = 2.0 * stats.input_bytes as f64;
    let floor_ms = copy_ms * (moved + 4.0 * n as f64) / moved.max(1.0);
    Ok(PartitionBench { n, fanout, payload_columns, ms, wall_ms: walls[walls.len() / 2], gb_per_s, stats, copy_ms, floor_ms, profile })
}
