//! GPU prefix sums (scans) over [`DeviceArray`]s: inclusive and exclusive, for
//! `u32`, `i32`, `f32`, `u64` and `i64`.
//!
//! # Algorithms ([`ScanOptions::algorithm`])
//!
//! **Single pass** ([`ScanAlgorithm::SinglePass`], the default for `u32`, `i32`,
//! `f32`; shaders/scan_lookback.wgsl): a chained scan with decoupled look-back
//! (Merrill & Garland), made portable by the *decoupled fallback* of Smith, Levien
//! & Owens (SPAA 2025). Vulkan promises no forward progress between workgroups, so
//! a workgroup that waits on a predecessor whose descriptor stays not ready for
//! [`ScanOptions::lookback_spins`] look-back steps loads that predecessor's tile and
//! reduces it itself instead of spinning forever (it then publishes the result with
//! `atomicMax`, which never overwrites a finished prefix). Tile indices come from an
//! atomic counter, so tiles start in order. A tile is `workgroup_size *
//! vectors_per_thread` 16-byte vectors (default: 1024 x 4 = 16384 32-bit elements). With
//! subgroups the tile is *striped* ([`ScanOptions::striped`], default): lane `l`
//! of subgroup `g` owns vectors `g * SG * VPT + j * SG + l`, so every load and store
//! of a subgroup is contiguous; the subgroup scans its rows in turn and the
//! workgroup scans subgroup totals (shaders/scan_tile_striped.wgsl). Otherwise each
//! invocation owns `vectors_per_thread` consecutive vectors, optionally moved
//! through workgroup memory so every global access is coalesced
//! ([`ScanOptions::transpose`]; shaders/scan_tile_blocked.wgsl). The look-back runs
//! in one subgroup without workgroup barriers between its steps. Descriptors are two
//! atomic words a tile (flag plus 16 bits of the value each). The input is read
//! once and the output written once; one small dispatch zeroes the descriptors
//! first. [`ScanOptions::force_fallback`] makes every tile reduce its predecessor
//! by the fallback (for tests).
//!
//! **Reduce-then-scan** ([`ScanAlgorithm::ReduceThenScan`]; always used for `u64` /
//! `i64`; shaders/scan.wgsl), which never waits on another workgroup:
//!
//! 1. `reduce`: each workgroup sums one tile of `workgroup_size * vectors_per_thread`
//!    16-byte vectors (16384 elements of 32 bits or 8192 of 64 bits by default) and
//!    writes the tile total. Tiles are numbered across all segments of the array.
//! 2. The tile totals are scanned exclusively with the same two kernels,
//!    recursively, until one workgroup's tile holds them all; that workgroup also
//!    writes the total. With the default tiles, inputs up to 16384^2 = 2^28 32-bit
//!    elements take 3 dispatches (reduce, one-workgroup scan, downsweep) and larger
//!    ones 5.
//! 3. `downsweep`: each workgroup rescans its tile from the tile's offset.
//!
//! The input is read twice and the output written once. In both algorithms the
//! scan of the per-invocation sums inside a workgroup uses subgroup operations
//! (`subgroupExclusiveAdd`, `subgroupAdd`; the look-back `subgroupMin`) when the
//! adapter has them, and workgroup memory otherwise; [`ScanOptions::subgroups`]
//! forces the workgroup-memory path.
//! The subgroup size is never assumed; the workgroup size must be a multiple of the
//! adapter's largest subgroup size so subgroups are full.
//!
//! All dispatches of a scan go into one compute pass of one submission (wgpu orders
//! dispatches inside a pass); workgroup counts above the per-dimension limit are laid
//! out in two dimensions (`context::dispatch_dims`).
//!
//! # Segments
//!
//! A multi-segment input gives an output with the same segmentation (same
//! `seg_rows`); the running total carries across segments because tiles are
//! numbered over the whole array (single pass: one dispatch per segment, the first
//! tiles of a segment look back into the previous segment's finished tiles).
//! Scratch: single pass, two words per tile plus one per segment; reduce-then-scan,
//! two arrays of one element per tile per level (about `2 * len / 4096` elements);
//! plus the 1-element total.
//!
//! # Arithmetic
//!
//! * Integer sums **wrap** (two's complement), exactly like
//!   [`crate::cpu_scan::inclusive_scan_seq`] / [`crate::cpu_scan::exclusive_scan_seq`]:
//!   integer results are bit-identical to the sequential reference. `i32` and `i64`
//!   use the `u32` / `u64` kernels (wrapping addition is the same bit operation).
//! * `f32` uses IEEE addition in a tree order (in-thread left to right, then across
//!   invocations and tiles), so results equal the sequential reference up to
//!   rounding; NaN propagates; the sign of a zero sum is not specified (Vulkan does
//!   not promise signed-zero preservation). `f64` is not supported (Ridgeline does
//!   not request SHADER_F64): [`GpuError::Invalid`].
//! * 64-bit integers use native WGSL `u64` when the device has SHADER_INT64
//!   ([`GpuContext::has_int64`]) and otherwise an emulation on `vec2<u32>` with
//!   carries ([`Int64Path`]); both give identical bits. Subgroup sums of 64-bit values
//!   are taken on three 32-bit parts (wgpu does not enable Vulkan's
//!   `shaderSubgroupExtendedTypes`, which 64-bit subgroup arithmetic needs).
//! * Lengths above `u32::MAX` elements are [`GpuError::Invalid`].
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::timing::KernelTimer;
use std::sync::Arc;

const SCAN_WGSL: &str = include_str!("../../shaders/scan.wgsl");
const ELEM_VEC4_WGSL: &str = include_str!("../../shaders/scan_elem_vec4.wgsl");
const ELEM_U64_WGSL: &str = include_str!("../../shaders/scan_elem_u64.wgsl");
const ELEM_U64EMU_WGSL: &str = include_str!("../../shaders/scan_elem_u64emu.wgsl");
const WG_SUBGROUP_WGSL: &str = include_str!("../../shaders/scan_wg_subgroup.wgsl");
const WG_SHARED_WGSL: &str = include_str!("../../shaders/scan_wg_shared.wgsl");
const LOOKBACK_WGSL: &str = include_str!("../../shaders/scan_lookback.wgsl");
const LB_SUBGROUP_WGSL: &str = include_str!("../../shaders/scan_lb_subgroup.wgsl");
const LB_SHARED_WGSL: &str = include_str!("../../shaders/scan_lb_shared.wgsl");
const TILE_BLOCKED_WGSL: &str = include_str!("../../shaders/scan_tile_blocked.wgsl");
const TILE_STRIPED_WGSL: &str = include_str!("../../shaders/scan_tile_striped.wgsl");

/// Kernel flags (shaders/scan.wgsl `F_*`).
const F_EXCLUSIVE: u32 = 1;
const F_OFFSETS: u32 = 2;
const F_TOTAL: u32 = 4;
const F_FORCE_FB: u32 = 8;

/// Element type of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanType {
    /// 32-bit unsigned, wrapping.
    U32,
    /// 32-bit signed, wrapping (two's complement).
    I32,
    /// 32-bit float.
    F32,
    /// 64-bit unsigned, wrapping.
    U64,
    /// 64-bit signed, wrapping (two's complement).
    I64,
}

impl ScanType {
    /// Bytes per element.
    pub fn elem_size(self) -> usize {
        match self {
            ScanType::U32 | ScanType::I32 | ScanType::F32 => 4,
            ScanType::U64 | ScanType::I64 => 8,
        }
    }
}

/// Inclusive (`out[i] = x[0] + .. + x[i]`) or exclusive (`out[i] = x[0] + .. +
/// x[i-1]`, `out[0] = 0`) prefix sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// `out[i]` includes `x[i]`.
    Inclusive,
    /// `out[i]` excludes `x[i]`; `out[0]` is zero.
    Exclusive,
}

/// How 64-bit integers are computed in the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Int64Path {
    /// Native `u64` when the device has SHADER_INT64, else emulated.
    #[default]
    Auto,
    /// Native `u64`; [`GpuError::Invalid`] without SHADER_INT64.
    Native,
    /// `vec2<u32>` with carries, on any device.
    Emulated,
}

/// The scan algorithm (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ScanAlgorithm {
    /// Single pass: chained scan with decoupled look-back and decoupled fallback
    /// (shaders/scan_lookback.wgsl). Reads the input once. Used for 32-bit elements
    /// (`u32`, `i32`, `f32`); 64-bit elements take [`ScanAlgorithm::ReduceThenScan`].
    #[default]
    SinglePass,
    /// The portable reduce-then-scan (shaders/scan.wgsl): reads the input twice,
    /// never waits on another workgroup.
    ReduceThenScan,
}

/// Default invocations per workgroup of the scans; where the adapter allows fewer,
/// its largest power of two is used instead (other sizes must fit as given).
pub const DEFAULT_SCAN_WORKGROUP: u32 = 1024;

/// Default look-back steps on a not-ready predecessor before the fallback.
pub const DEFAULT_LOOKBACK_SPINS: u32 = 64;

/// Tuning and path selection for [`scan_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOptions {
    /// Use subgroup operations when the adapter has them (`false` forces the
    /// workgroup-memory path).
    pub subgroups: bool,
    /// Invocations per workgroup: a power of two from 32 to 1024 within the
    /// adapter's limits, and a multiple of its largest subgroup size when
    /// subgroups are used.
    pub workgroup_size: u32,
    /// 16-byte vectors each invocation loads per tile (1 to 16).
    pub vectors_per_thread: u32,
    /// 64-bit integer arithmetic.
    pub int64: Int64Path,
    /// Single pass (default) or reduce-then-scan.
    pub algorithm: ScanAlgorithm,
    /// Single pass: look-back steps a workgroup waits on a predecessor whose
    /// descriptor is not ready before it reduces that tile itself (the fallback).
    /// 0 falls back at the first not-ready descriptor.
    pub lookback_spins: u32,
    /// Single pass, testing: every tile reduces its predecessor in the same segment
    /// by the fallback, whatever the predecessor's descriptor says.
    pub force_fallback: bool,
    /// Single pass: move the tile through workgroup memory so global loads and
    /// stores are coalesced (used when the tile fits the adapter's workgroup
    /// memory). Off by default: on the H100 the direct per-invocation vectors
    /// (4 consecutive 16-byte vectors each) measured as fast or faster.
    pub transpose: bool,
    /// Single pass with subgroups: the striped tile layout (lane `l` of subgroup
    /// `g` owns vectors `g * SG * VPT + j * SG + l`), so global loads and stores
    /// are coalesced without workgroup memory; `transpose` is then ignored. On by
    /// default; without subgroups the blocked layout runs.
    pub striped: bool,
}

impl Default for ScanOptions {
    /// Single pass, subgroups where available, [`DEFAULT_SCAN_WORKGROUP`]
    /// invocations (the adapter's maximum where that is lower), 4 vectors each
    /// (tiles of 16384 32-bit or 8192 64-bit elements), the striped layout, native
    /// 64-bit integers where available. On the H100 at 2^28 `u32` (fresh processes,
    /// one run, 2026-11-22) this was the fastest single-pass tuning: 1.05 ms,
    /// against 1.19 ms for 1024 x 2, 1.20 ms for 512 x 4, 1.41-1.48 ms with 8
    /// vectors, and 1.38 ms for the blocked layout at 512 x 4.
    fn default() -> Self {
        ScanOptions {
            subgroups: true,
            workgroup_size: DEFAULT_SCAN_WORKGROUP,
            vectors_per_thread: 4,
            int64: Int64Path::Auto,
            algorithm: ScanAlgorithm::SinglePass,
            lookback_spins: DEFAULT_LOOKBACK_SPINS,
            force_fallback: false,
            transpose: false,
            striped: true,
        }
    }
}

impl ScanOptions {
    /// Default options with the given algorithm.
    pub fn with_algorithm(algorithm: ScanAlgorithm) -> Self {
        ScanOptions { algorithm, ..Default::default() }
    }
}

/// The result of a scan: the prefix sums and the total of all elements.
#[derive(Debug)]
pub struct ScanOutput {
    /// Prefix sums, same length and segmentation as the input.
    pub values: DeviceArray,
    /// The total of all elements (1 element of the input's size; zero for an empty
    /// input). Read it with [`ScanOutput::total_bits`] or [`read_scalar`].
    pub total: DeviceArray,
}

impl ScanOutput {
    /// The total's bits, zero-extended to 64 (an `f32` total is its bit pattern:
    /// `f32::from_bits(bits as u32)`). Blocks until the scan is done.
    pub fn total_bits(&self, ctx: &GpuContext) -> GpuResult<u64> {
        if self.total.elem_size() == 4 {
            Ok(read_scalar::<u32>(ctx, &self.total)? as u64)
        } else {
            read_scalar::<u64>(ctx, &self.total)
        }
    }
}

/// Reads element 0 of a device array (a device-side total or count) to the host.
pub fn read_scalar<T: bytemuck::Pod + Default>(ctx: &GpuContext, a: &DeviceArray) -> GpuResult<T> {
    if a.is_empty() {
        return Err(GpuError::Invalid("read_scalar of an empty array".into()));
    }
    if std::mem::size_of::<T>() != a.elem_size() {
        return Err(GpuError::Invalid(format!(
            "read_scalar as {}-byte value of a {}-byte array",
            std::mem::size_of::<T>(),
            a.elem_size()
        )));
    }
    let (buf, _, _) = a.segment(0);
    let mut out = T::default();
    ctx.download_stream(
        &[crate::transfer::Extent { buffer: buf, offset: 0, stream_offset: 0, len: 4.max(a.elem_size() as u64) }],
        bytemuck::bytes_of_mut(&mut out),
    )?;
    Ok(out)
}

/// Prefix sums of `input` (elements of `ty`) with the default options.
pub fn scan(ctx: &GpuContext, input: &DeviceArray, ty: ScanType, kind: ScanKind) -> GpuResult<ScanOutput> {
    scan_with(ctx, input, ty, kind, &ScanOptions::default())
}

/// Prefix sums of `input` with explicit options. The work is submitted; the result
/// arrays can be used by later GPU work or downloaded at once.
pub fn scan_with(
    ctx: &GpuContext,
    input: &DeviceArray,
    ty: ScanType,
    kind: ScanKind,
    opts: &ScanOptions,
) -> GpuResult<ScanOutput> {
    let k = ScanKernel::new(ctx, ty, opts)?;
    check_input(input, ty)?;
    let values = DeviceArray::alloc_segmented(ctx, input.len(), input.elem_size(), input.seg_rows())?;
    let total = DeviceArray::alloc_segmented(ctx, 1, input.elem_size(), 4)?;
    let mut enc = ctx.encoder("scan");
    let pass = build_array_scan(ctx, &k, input, &values, &total, kind)?;
    if input.is_empty() {
        enc.clear_buffer(total.segment(0).0, 0, None);
    }
    pass.encode(&mut enc, None);
    ctx.submit(enc)?;
    Ok(ScanOutput { values, total })
}

/// The total of all elements of `input` (a 1-element device array), by the scan's
/// reduction kernels only (no prefix sums are written).
pub fn total(ctx: &GpuContext, input: &DeviceArray, ty: ScanType) -> GpuResult<DeviceArray> {
    total_with(ctx, input, ty, &ScanOptions::default())
}

/// [`total`] with explicit options.
pub fn total_with(ctx: &GpuContext, input: &DeviceArray, ty: ScanType, opts: &ScanOptions) -> GpuResult<DeviceArray> {
    let k = ScanKernel::new(ctx, ty, opts)?;
    check_input(input, ty)?;
    let total = DeviceArray::alloc_segmented(ctx, 1, input.elem_size(), 4)?;
    let mut enc = ctx.encoder("scan-total");
    if input.is_empty() {
        enc.clear_buffer(total.segment(0).0, 0, None);
        ctx.submit(enc)?;
        return Ok(total);
    }
    let mut pass = Pass::default();
    let tb = total.segment(0).0;
    let segs: Vec<(&wgpu::Buffer, u64)> = (0..input.num_segments())
        .map(|i| {
            let (b, _, rows) = input.segment(i);
            (b, rows as u64)
        })
        .collect();
    let tiles: Vec<u64> = segs.iter().map(|s| s.1.div_ceil(k.tile())).collect();
    let nt: u64 = tiles.iter().sum();
    let sums = ctx.pool().alloc(nt * k.elem_bytes())?;
    let mut base = 0u64;
    for (&(buf, rows), &t) in segs.iter().zip(&tiles) {
        k.reduce(ctx, &mut pass, buf, rows, t, base, sums.raw())?;
        base += t;
    }
    // The tile totals' reduction: reduce them again until one tile remains, then
    // let that tile's downsweep write the total (its prefix sums go to scratch).
    let mut cur = sums;
    let mut n = nt;
    while n > k.tile() {
        let t = n.div_ceil(k.tile());
        let next = ctx.pool().alloc(t * k.elem_bytes())?;
        k.reduce(ctx, &mut pass, cur.raw(), n, t, 0, next.raw())?;
        pass.keep.push(cur);
        cur = next;
        n = t;
    }
    let scratch = ctx.pool().alloc(n * k.elem_bytes())?;
    k.downsweep(ctx, &mut pass, cur.raw(), scratch.raw(), n, 1, 0, None, Some(tb), F_EXCLUSIVE)?;
    pass.keep.push(cur);
    pass.keep.push(scratch);
    pass.encode(&mut enc, None);
    ctx.submit(enc)?;
    Ok(total)
}

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

/// Times an exclusive `u32` scan of `n` elements (default options, i.e. the single
/// pass, the context's segmentation): one warm-up run, then the median of `reps`
/// (at least 1) runs. The time covers every dispatch of the scan (for the single
/// pass: the state initialisation and the scan dispatches), not the allocation.
/// [`bench_scan_with`] with [`ScanOptions::with_algorithm`] times the old path.
pub fn bench_scan(ctx: &GpuContext, n: usize, reps: usize) -> GpuResult<ScanBench> {
    bench_scan_with(ctx, n, reps, &ScanOptions::default())
}

/// [`bench_scan`] with explicit options.
pub fn bench_scan_with(ctx: &GpuContext, n: usize, reps: usize, opts: &ScanOptions) -> GpuResult<ScanBench> {
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
        dispatches = pass.dispatches.len();
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

// ---------------------------------------------------------------------------------
// Crate-internal machinery (also used by compaction)
// ---------------------------------------------------------------------------------

/// Element representation in the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    U32,
    F32,
    U64,
    U64Emu,
}

fn check_input(input: &DeviceArray, ty: ScanType) -> GpuResult<()> {
    if input.elem_size() != ty.elem_size() {
        return Err(GpuError::Invalid(format!(
            "scan of {ty:?} over an array of {}-byte elements",
            input.elem_size()
        )));
    }
    if input.len() as u64 > u32::MAX as u64 {
        return Err(GpuError::Invalid(format!("scan of {} elements (at most 2^32 - 1)", input.len())));
    }
    Ok(())
}

/// Dispatches recorded for one compute pass, plus the scratch they use (kept alive,
/// and out of the pool, until the pass is submitted).
/// One recorded dispatch: pipeline, bind group, workgroup counts.
type Dispatch = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, (u32, u32, u32), &'static str);

#[derive(Default)]
pub(crate) struct Pass {
    dispatches: Vec<Dispatch>,
    /// Scratch buffers the dispatches use.
    pub(crate) keep: Vec<GpuBuffer>,
    /// The step the next dispatches belong to (for [`Pass::encode_each`]'s profile).
    pub(crate) label: &'static str,
}

impl Pass {
    /// Records one dispatch of `groups` workgroups.
    pub(crate) fn dispatch(
        &mut self,
        ctx: &GpuContext,
        pipeline: &Arc<wgpu::ComputePipeline>,
        entries: &[wgpu::BindGroupEntry<'_>],
        groups: u64,
    ) -> GpuResult<()> {
        if groups == 0 {
            return Ok(());
        }
        let max = ctx.limits().max_compute_workgroups_per_dimension.max(1) as u64;
        if groups > max * max {
            return Err(GpuError::Invalid(format!("dispatch of {groups} workgroups exceeds two dimensions")));
        }
        let bg = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ridgeline-kernel"),
            layout: &pipeline.get_bind_group_layout(0),
            entries,
        });
        let dims = dispatch_dims(groups, ctx.limits().max_compute_workgroups_per_dimension);
        self.dispatches.push((pipeline.clone(), bg, dims, self.label));
        Ok(())
    }

    /// Encodes the dispatches as one compute pass (wgpu synchronizes dispatches
    /// inside a pass), optionally timed.
    pub(crate) fn encode(&self, enc: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        if self.dispatches.is_empty() && timestamps.is_none() {
            return;
        }
        let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ridgeline"), timestamp_writes: timestamps });
        for d in &self.dispatches {
            Self::record(&mut cp, d);
        }
    }

    fn record(cp: &mut wgpu::ComputePass<'_>, (p, bg, (x, y, z), _): &Dispatch) {
        cp.set_pipeline(p);
        cp.set_bind_group(0, bg, &[]);
        cp.dispatch_workgroups(*x, *y, *z);
    }

    /// Dispatches recorded so far.
    pub(crate) fn len(&self) -> usize {
        self.dispatches.len()
    }

    /// Encodes every dispatch as its own compute pass, timed by pass `i` of
    /// `timer` (a profile: per-dispatch device times, at the cost of the passes'
    /// boundaries).
    pub(crate) fn encode_each(&self, enc: &mut wgpu::CommandEncoder, timer: &KernelTimer) {
        for (i, d) in self.dispatches.iter().enumerate() {
            let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ridgeline"), timestamp_writes: timer.writes(i as u32) });
            Self::record(&mut cp, d);
        }
    }

    /// Each dispatch's step label, in order.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.dispatches.iter().map(|d| d.3)
    }
}

/// shaders/scan_lookback.wgsl `LbParams`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LbParams {
    n: u32,
    nvec: u32,
    tiles: u32,
    tile_base: u32,
    flags: u32,
    ctr: u32,
    spins: u32,
    pad: u32,
}

/// shaders/scan.wgsl `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    nvec: u32,
    tiles: u32,
    tile_base: u32,
    flags: u32,
    pad: [u32; 3],
}

/// The source of a workgroup-scan part (scan_wg_*.wgsl).
pub(crate) fn wg_part(subgroups: bool) -> &'static str {
    if subgroups {
        WG_SUBGROUP_WGSL
    } else {
        WG_SHARED_WGSL
    }
}

/// The `u32` element part (for kernels that scan 32-bit counts).
pub(crate) fn elem_u32_part() -> String {
    ELEM_VEC4_WGSL.replace("{{T}}", "u32")
}

/// Checks workgroup-size options against the adapter; returns whether subgroups
/// will be used.
pub(crate) fn check_workgroup(ctx: &GpuContext, want_subgroups: bool, wg: u32, shared_bytes: u64) -> GpuResult<bool> {
    let l = ctx.limits();
    let max = l.max_compute_invocations_per_workgroup.min(l.max_compute_workgroup_size_x).min(1024);
    if !wg.is_power_of_two() || wg < 32 || wg > max {
        return Err(GpuError::Invalid(format!("workgroup size {wg} (expected a power of two in 32..={max})")));
    }
    if shared_bytes > l.max_compute_workgroup_storage_size as u64 {
        return Err(GpuError::Invalid(format!(
            "workgroup size {wg} needs {shared_bytes} bytes of workgroup memory (limit {})",
            l.max_compute_workgroup_storage_size
        )));
    }
    let subgroups = want_subgroups && ctx.has_subgroups();
    if subgroups {
        let sg_max = ctx.info().subgroup_max_size;
        if sg_max > 0 && !wg.is_multiple_of(sg_max) {
            return Err(GpuError::Invalid(format!(
                "workgroup size {wg} is not a multiple of the subgroup size {sg_max}"
            )));
        }
    }
    Ok(subgroups)
}

/// One configuration of the scan kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanKernel {
    elem: Elem,
    subgroups: bool,
    wg: u32,
    vpt: u32,
    single_pass: bool,
    spins: u32,
    force_fallback: bool,
    transpose: bool,
    striped: bool,
}

impl ScanKernel {
    /// Validates the options for `ty` on this device.
    pub(crate) fn new(ctx: &GpuContext, ty: ScanType, opts: &ScanOptions) -> GpuResult<ScanKernel> {
        let elem = match ty {
            ScanType::U32 | ScanType::I32 => Elem::U32,
            ScanType::F32 => Elem::F32,
            ScanType::U64 | ScanType::I64 => match opts.int64 {
                Int64Path::Auto if ctx.has_int64() => Elem::U64,
                Int64Path::Auto | Int64Path::Emulated => Elem::U64Emu,
                Int64Path::Native if ctx.has_int64() => Elem::U64,
                Int64Path::Native => {
                    return Err(GpuError::Invalid("native 64-bit scan without SHADER_INT64 on this device".into()))
                }
            },
        };
        if !(1..=16).contains(&opts.vectors_per_thread) {
            return Err(GpuError::Invalid(format!("{} vectors per thread (expected 1..=16)", opts.vectors_per_thread)));
        }
        let eb = if matches!(elem, Elem::U32 | Elem::F32) { 4 } else { 8 };
        let mut wg = opts.workgroup_size;
        if wg == DEFAULT_SCAN_WORKGROUP {
            let l = ctx.limits();
            let max = l.max_compute_invocations_per_workgroup.min(l.max_compute_workgroup_size_x);
            if max < wg && max >= 32 {
                wg = 1 << max.ilog2();
            }
        }
        let shared = 2 * wg as u64 * eb + 16;
        let subgroups = check_workgroup(ctx, opts.subgroups, wg, shared)?;
        let single_pass = opts.algorithm == ScanAlgorithm::SinglePass && matches!(elem, Elem::U32 | Elem::F32);
        let tile_bytes = wg as u64 * opts.vectors_per_thread as u64 * 16 * 9 / 8 + 16;
        let striped = single_pass && subgroups && opts.striped;
        let transpose = single_pass
            && !striped
            && opts.transpose
            && shared + tile_bytes <= ctx.limits().max_compute_workgroup_storage_size as u64;
        Ok(ScanKernel {
            elem,
            subgroups,
            wg,
            vpt: opts.vectors_per_thread,
            single_pass,
            spins: opts.lookback_spins,
            force_fallback: opts.force_fallback,
            transpose,
            striped,
        })
    }

    /// Elements per 16-byte vector.
    fn vec(&self) -> u64 {
        match self.elem {
            Elem::U32 | Elem::F32 => 4,
            Elem::U64 | Elem::U64Emu => 2,
        }
    }

    pub(crate) fn elem_bytes(&self) -> u64 {
        16 / self.vec()
    }

    /// Elements per tile (one workgroup).
    pub(crate) fn tile(&self) -> u64 {
        self.wg as u64 * self.vpt as u64 * self.vec()
    }

    fn pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let (ename, elem_src, t) = match self.elem {
            Elem::U32 => ("u32", ELEM_VEC4_WGSL, "u32"),
            Elem::F32 => ("f32", ELEM_VEC4_WGSL, "f32"),
            Elem::U64 => ("u64", ELEM_U64_WGSL, ""),
            Elem::U64Emu => ("u64emu", ELEM_U64EMU_WGSL, ""),
        };
        let name = format!("scan-{ename}-{}", if self.subgroups { "subgroup" } else { "shared" });
        let src = format!("{elem_src}\n{}\n{SCAN_WGSL}", wg_part(self.subgroups));
        let defs = [("T", t.to_string()), ("WG", self.wg.to_string()), ("VPT", self.vpt.to_string())];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// A pipeline of the single-pass module (32-bit elements only).
    fn lb_pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let t = if self.elem == Elem::F32 { "f32" } else { "u32" };
        let layout = if self.striped { "striped" } else { "blocked" };
        let name = format!("scanlb-{t}-{}-{layout}-{}", if self.subgroups { "subgroup" } else { "shared" }, self.transpose);
        let lb = if self.subgroups { LB_SUBGROUP_WGSL } else { LB_SHARED_WGSL };
        let tile = if self.striped { TILE_STRIPED_WGSL } else { TILE_BLOCKED_WGSL };
        let src = format!("{ELEM_VEC4_WGSL}\n{}\n{LOOKBACK_WGSL}\n{lb}\n{tile}", wg_part(self.subgroups));
        let xv = if self.transpose { self.wg * self.vpt * 9 / 8 + 1 } else { 1 };
        let defs = [
            ("T", t.to_string()),
            ("WG", self.wg.to_string()),
            ("VPT", self.vpt.to_string()),
            ("XPOSE", self.transpose.to_string()),
            ("XPOSE_VECS", xv.to_string()),
        ];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// Records the single-pass scan of `parts` (see [`ScanKernel::record`]): the
    /// state initialisation, then one look-back dispatch per part.
    fn record_single_pass(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        parts: &[(&wgpu::Buffer, &wgpu::Buffer, u64)],
        kind: ScanKind,
        total: &wgpu::Buffer,
    ) -> GpuResult<()> {
        let tile = self.tile();
        let tiles: Vec<u64> = parts.iter().map(|p| p.2.div_ceil(tile)).collect();
        let nt: u64 = tiles.iter().sum();
        if nt == 0 {
            return Err(GpuError::Invalid("scan of an empty part list".into()));
        }
        for &(src, dst, n) in parts {
            self.check_padded(src, n)?;
            self.check_padded(dst, n)?;
        }
        let words = 2 * nt + parts.len() as u64;
        if words > u32::MAX as u64 {
            return Err(GpuError::Invalid(format!("single-pass scan of {nt} tiles")));
        }
        let state = ctx.pool().alloc(words * 4)?;
        let init = self.lb_pipeline(ctx, "init_state")?;
        let ub = ctx.uniform(&LbParams { n: words as u32, nvec: 0, tiles: 0, tile_base: 0, flags: 0, ctr: 0, spins: 0, pad: 0 });
        pass.dispatch(
            ctx,
            &init,
            &[
                wgpu::BindGroupEntry { binding: 2, resource: state.raw().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            words.div_ceil(self.wg as u64),
        )?;
        let pipe = self.lb_pipeline(ctx, "scan_lookback")?;
        let mut base = 0u64;
        for (i, (&(src, dst, n), &t)) in parts.iter().zip(&tiles).enumerate() {
            let mut flags = if kind == ScanKind::Exclusive { F_EXCLUSIVE } else { 0 };
            if i + 1 == parts.len() {
                flags |= F_TOTAL;
            }
            if self.force_fallback {
                flags |= F_FORCE_FB;
            }
            let ub = ctx.uniform(&LbParams {
                n: n as u32,
                nvec: n.div_ceil(self.vec()) as u32,
                tiles: t as u32,
                tile_base: base as u32,
                flags,
                ctr: (2 * nt) as u32 + i as u32,
                spins: self.spins,
                pad: 0,
            });
            pass.dispatch(
                ctx,
                &pipe,
                &[
                    wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: state.raw().as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: total.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
                ],
                t,
            )?;
            base += t;
        }
        pass.keep.push(state);
        Ok(())
    }

    /// Checks that a buffer holding `n` elements can be accessed as whole vectors.
    fn check_padded(&self, buf: &wgpu::Buffer, n: u64) -> GpuResult<()> {
        let need = n.div_ceil(self.vec()) * 16;
        if buf.size() < need {
            return Err(GpuError::Invalid(format!(
                "buffer of {} bytes holds {n} elements but is not padded to whole 16-byte vectors ({need} bytes)",
                buf.size()
            )));
        }
        Ok(())
    }

    fn params(&self, ctx: &GpuContext, n: u64, tiles: u64, tile_base: u64, flags: u32) -> wgpu::Buffer {
        ctx.uniform(&Params {
            n: n as u32,
            nvec: n.div_ceil(self.vec()) as u32,
            tiles: tiles as u32,
            tile_base: tile_base as u32,
            flags,
            pad: [0; 3],
        })
    }

    /// Records a `reduce` dispatch: tile totals of `src` (n elements, `tiles`
    /// tiles) into `sums[tile_base..]`.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        src: &wgpu::Buffer,
        n: u64,
        tiles: u64,
        tile_base: u64,
        sums: &wgpu::Buffer,
    ) -> GpuResult<()> {
        self.check_padded(src, n)?;
        let pipe = self.pipeline(ctx, "reduce")?;
        let ub = self.params(ctx, n, tiles, tile_base, 0);
        pass.dispatch(
            ctx,
            &pipe,
            &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: sums.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            tiles,
        )
    }

    /// Records a `downsweep` dispatch over `src` -> `dst` (n elements, `tiles`
    /// tiles), adding `offs[tile_base + tile]` when given and writing the grand
    /// total to `total[0]` when given.
    #[allow(clippy::too_many_arguments)]
    fn downsweep(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        n: u64,
        tiles: u64,
        tile_base: u64,
        offs: Option<&wgpu::Buffer>,
        total: Option<&wgpu::Buffer>,
        mut flags: u32,
    ) -> GpuResult<()> {
        self.check_padded(src, n)?;
        self.check_padded(dst, n)?;
        if offs.is_some() {
            flags |= F_OFFSETS;
        }
        if total.is_some() {
            flags |= F_TOTAL;
        }
        let pipe = self.pipeline(ctx, "downsweep")?;
        let ub = self.params(ctx, n, tiles, tile_base, flags);
        // Unused bindings get a buffer of the same access already bound (a read-only
        // buffer may be bound twice read-only, a read-write one twice read-write).
        pass.dispatch(
            ctx,
            &pipe,
            &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: offs.unwrap_or(src).as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: total.unwrap_or(dst).as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            tiles,
        )
    }

    /// Records the scan of a list of buffers that form one logical array
    /// (`(src, dst, rows)` per part, in order): prefix sums into each `dst`, the
    /// grand total into `total[0]`. Single pass where configured, else
    /// reduce-then-scan, recursive over the tile totals. Every part must have at
    /// least one row.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        parts: &[(&wgpu::Buffer, &wgpu::Buffer, u64)],
        kind: ScanKind,
        total: &wgpu::Buffer,
    ) -> GpuResult<()> {
        if self.single_pass {
            return self.record_single_pass(ctx, pass, parts, kind, total);
        }
        let flags = if kind == ScanKind::Exclusive { F_EXCLUSIVE } else { 0 };
        let tile = self.tile();
        let tiles: Vec<u64> = parts.iter().map(|p| p.2.div_ceil(tile)).collect();
        let nt: u64 = tiles.iter().sum();
        if nt == 0 {
            return Err(GpuError::Invalid("scan of an empty part list".into()));
        }
        if nt == 1 {
            let (src, dst, n) = parts[0];
            return self.downsweep(ctx, pass, src, dst, n, 1, 0, None, Some(total), flags);
        }
        let sums = ctx.pool().alloc(nt * self.elem_bytes())?;
        let offs = ctx.pool().alloc(nt * self.elem_bytes())?;
        let mut base = 0;
        for (&(src, _, n), &t) in parts.iter().zip(&tiles) {
            self.reduce(ctx, pass, src, n, t, base, sums.raw())?;
            base += t;
        }
        self.record(ctx, pass, &[(sums.raw(), offs.raw(), nt)], ScanKind::Exclusive, total)?;
        let mut base = 0;
        for (&(src, dst, n), &t) in parts.iter().zip(&tiles) {
            self.downsweep(ctx, pass, src, dst, n, t, base, Some(offs.raw()), None, flags)?;
            base += t;
        }
        pass.keep.push(sums);
        pass.keep.push(offs);
        Ok(())
    }
}

/// Records the scan of `input` into `values` (same segmentation) and its total
/// into `total`; nothing for an empty input (the caller clears the total).
fn build_array_scan(
    ctx: &GpuContext,
    k: &ScanKernel,
    input: &DeviceArray,
    values: &DeviceArray,
    total: &DeviceArray,
    kind: ScanKind,
) -> GpuResult<Pass> {
    let mut pass = Pass::default();
    if input.is_empty() {
        return Ok(pass);
    }
    let parts: Vec<(&wgpu::Buffer, &wgpu::Buffer, u64)> = (0..input.num_segments())
        .map(|i| {
            let (s, _, rows) = input.segment(i);
            (s, values.segment(i).0, rows as u64)
        })
        .collect();
    k.record(ctx, &mut pass, &parts, kind, total.segment(0).0)?;
    Ok(pass)
}
