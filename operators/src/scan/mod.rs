//! GPU prefix sums (scans) over [`DeviceArray`]s: inclusive and exclusive, for
//! `u32`, `i32`, `f32`, `u64` and `i64`.
//!
//! # Algorithms ([`ScanOptions::algorithm`])
//!
//! **Single pass** ([`ScanAlgorithm::SinglePass`], the default for `u32`, `i32`,
//! `f32`; shaders/scan/single_pass.wgsl): a chained scan with decoupled look-back
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
//! workgroup scans subgroup totals (shaders/scan/tile/striped.wgsl). Otherwise each
//! invocation owns `vectors_per_thread` consecutive vectors, optionally moved
//! through workgroup memory so every global access is coalesced
//! ([`ScanOptions::transpose`]; shaders/scan/tile/blocked.wgsl). The look-back runs
//! in one subgroup without workgroup barriers between its steps. Descriptors are two
//! atomic words a tile (flag plus 16 bits of the value each). The input is read
//! once and the output written once; one small dispatch zeroes the descriptors
//! first. [`ScanOptions::force_fallback`] makes every tile reduce its predecessor
//! by the fallback (for tests).
//!
//! **Reduce-then-scan** ([`ScanAlgorithm::ReduceThenScan`]; always used for `u64` /
//! `i64`; shaders/scan/reduce_then_scan.wgsl), which never waits on another workgroup:
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
//!
//! # Kernel sources (shaders/scan/)
//!
//! Every scan kernel is composed of pieces, concatenated in this order:
//! an element part (`element/vec4.wgsl` for 32-bit elements, `element/u64.wgsl`
//! or `element/u64emu.wgsl` for 64-bit ones: the type, zero, addition, packing),
//! a workgroup-scan part (`workgroup/subgroup.wgsl` or `workgroup/shared.wgsl`),
//! then the algorithm: `reduce_then_scan.wgsl`, or `single_pass.wgsl` followed by
//! its look-back step (`lookback/subgroup.wgsl` or `lookback/shared.wgsl`) and its
//! tile layout (`tile/striped.wgsl` or `tile/blocked.wgsl`). The element and
//! workgroup parts are shared with the compaction kernels (shaders/compact/).
//!
//! # Layout
//!
//! This module: the element types, options and entry points ([`scan`], [`total`],
//! [`read_scalar`]); `kernel`: the kernels' configuration ([`ScanOptions`] checked
//! against the adapter) and recording, used by compaction and partitioning too;
//! `pass`: the recorded compute pass every GPU primitive of the crate encodes;
//! `bench`: [`bench_scan`].
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::tuning::scan as tuned;

mod bench;
mod kernel;
mod pass;

pub use bench::{bench_scan, ScanBench};
pub(crate) use kernel::{check_workgroup, elem_u32_part, wg_part, ScanKernel};
use kernel::{build_array_scan, F_EXCLUSIVE};
pub(crate) use pass::Pass;

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

/// Default invocations per workgroup of the scans ([`tuned::SCAN_WORKGROUP`]); where
/// the adapter allows fewer, its largest power of two is used instead (other sizes
/// must fit as given).
pub const DEFAULT_SCAN_WORKGROUP: u32 = tuned::SCAN_WORKGROUP;

/// Default look-back steps on a not-ready predecessor before the fallback
/// ([`tuned::LOOKBACK_SPINS`]).
pub const DEFAULT_LOOKBACK_SPINS: u32 = tuned::LOOKBACK_SPINS;

/// Tuning and path selection for [`scan`] and [`total`]; `Default` takes the tuned
/// constants of `crate::tuning::scan`.
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
    /// invocations (the adapter's maximum where that is lower),
    /// [`tuned::SCAN_VECTORS_PER_THREAD`] vectors each (tiles of 16384 32-bit or
    /// 8192 64-bit elements), the striped layout, native 64-bit integers where
    /// available: the fastest single-pass tuning measured (see
    /// [`tuned::SCAN_VECTORS_PER_THREAD`]).
    fn default() -> Self {
        ScanOptions {
            subgroups: true,
            workgroup_size: DEFAULT_SCAN_WORKGROUP,
            vectors_per_thread: tuned::SCAN_VECTORS_PER_THREAD,
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

/// Prefix sums of `input` (elements of `ty`); callers wanting the defaults pass
/// `&ScanOptions::default()`. The work is submitted; the result arrays can be used
/// by later GPU work or downloaded at once.
pub fn scan(ctx: &GpuContext, input: &DeviceArray, ty: ScanType, kind: ScanKind, opts: &ScanOptions) -> GpuResult<ScanOutput> {
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
/// reduction kernels only (no prefix sums are written); callers wanting the
/// defaults pass `&ScanOptions::default()`.
pub fn total(ctx: &GpuContext, input: &DeviceArray, ty: ScanType, opts: &ScanOptions) -> GpuResult<DeviceArray> {
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
