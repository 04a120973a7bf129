//! Grouped aggregation over dense group ids: per group COUNT(*), and per value
//! column COUNT (non-NULL rows; NULLs = rows - count), SUM, MIN and MAX, on the
//! GPU (shaders/group_agg/) and on the CPU.
//!
//! # Inputs and outputs
//!
//! Rows carry a `u32` group id in `0 .. G` (from a dictionary of the GROUP BY key;
//! ids `>= G` are a caller error: the CPU paths panic; on the GPU they never
//! write out of bounds: dense tags skip such rows, sparse regions count them into
//! group `G - 1`). Value columns hold 8-byte values with optional validity bitmaps:
//! [`AggKind::I64`] (BIGINT, decimals as unscaled i64, dates/timestamps) or
//! [`AggKind::F64`] (DOUBLE). Per group and column the result is the non-NULL
//! count and, when that is non-zero, the sum, the minimum and the maximum
//! (`None` for a group without non-NULL values, as SQL's NULL).
//!
//! * i64 SUM is exact: accumulated in 96 bits (three u32 words with carries on the
//!   GPU, i128 on the CPU) and checked to fit i64 at the end; a group whose sum
//!   does not fit is reported as [`GroupAggError::Overflow`] (the first such group
//!   of the first such column) on every path, never wrapped.
//! * f64 MIN/MAX follow Arrow's total order (`-0.0 < +0.0`, NaN greater than
//!   +inf; the crate's [`crate::select::key_f64`] order), so they are exact.
//! * f64 SUM adds the group's values **in row order** (the order a sequential loop
//!   over the input uses), so every path gives bit-identical sums. WGSL has no
//!   f64, so the GPU path partitions the f64 columns by group id on the GPU
//!   ([`crate::partition`], stable: every group becomes a contiguous region in row
//!   order), reads the regions back and sums each region on the CPU (rayon over
//!   groups).
//!
//! # GPU strategies ([`GroupAggStrategy`]), after the region-based state paper
//!
//! * [`GroupAggStrategy::DenseTags`]: every row is tagged with its group; each
//!   workgroup keeps the tables of all G groups in workgroup memory (6 words a
//!   group: count, 96-bit sum, high words of the min/max keys) and updates them
//!   with workgroup atomics over a tile of rows, then merges them into the global
//!   table with global atomics (the 96-bit add propagates carries exactly in any
//!   order). A second pass over the rows settles the low words of MIN/MAX among
//!   the rows whose high word won. Needs `G <= dense capacity`
//!   ([`dense_capacity`]: workgroup memory / 24 bytes, at most 1024 groups).
//! * [`GroupAggStrategy::SparseRegions`]: the rows are partitioned by group id
//!   ([`crate::partition::PartitionFn::Direct`], so each group is one contiguous
//!   region and the `G + 1` region offsets are known), then a two-level segmented
//!   reduction over the region offsets: the host cuts the regions into pieces of
//!   at most [`SPARSE_PIECE_ROWS`] rows (never crossing a segment), one invocation
//!   reduces a piece into a partial, one invocation per group folds its pieces in
//!   order (no atomics; a skewed region is spread over many invocations). Any G.
//! * [`GroupAggStrategy::Auto`]: with `avg = rows / G` (the measured average group
//!   size), DenseTags when `G <= dense capacity` and `avg >= workgroup_size / 8`
//!   (regions at least an eighth of the workgroup: tags in workgroup memory then
//!   amortise the per-tile merge of G entries), SparseRegions otherwise (many small
//!   regions: one invocation per region walks a few contiguous rows, and the
//!   dense tables would not fit or would be mostly empty per tile).
//!
//! # CPU
//!
//! [`group_agg_reference`]: one sequential loop. [`group_agg_cpu`]: stable
//! partition by group id ([`crate::partition::partition_cpu`]) of the value
//! columns, then every group's region reduced in parallel (rayon): identical
//! results to the reference, floats included.
//!
//! # Parts
//!
//! `mod.rs` (the types and the strategy rule), `cpu.rs` (reference and fast path),
//! `gpu.rs` (the two strategies and the tables' read-back), `accumulator.rs`
//! ([`DenseAccumulator`]: dense tags over several calls), `bench.rs` (`bench
//! aggregate`). Tuned constants live in [`crate::tuning::aggregate`].
mod accumulator;
mod bench;
mod cpu;
mod gpu;

pub use crate::tuning::aggregate::{SMALL_GROUPS, SPARSE_PIECE_ROWS};
pub use accumulator::DenseAccumulator;
pub use bench::{bench_group_agg, GroupAggBench};
pub use cpu::{group_agg_cpu, group_agg_reference};
pub use gpu::group_agg_gpu;

use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::GpuError;
use crate::tuning::aggregate::{
    DENSE_MAX_GROUPS, DENSE_MIN_AVG_DIVISOR, GROUP_AGG_TILE_ROWS, GROUP_AGG_WORKGROUP, SMALL_TILE_ROWS,
};

/// Value type of an aggregated column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggKind {
    /// 64-bit signed integers (also decimals as unscaled values, dates).
    I64,
    /// 64-bit floats.
    F64,
}

/// A device value column: 8-byte values plus optional validity (`seg_rows / 32`
/// words per segment, like [`Column`]).
#[derive(Clone, Copy, Debug)]
pub struct AggColumn<'a> {
    /// Type of the values.
    pub kind: AggKind,
    /// Values and validity.
    pub column: Column<'a>,
}

/// A host value column.
#[derive(Clone, Copy, Debug)]
pub enum HostAggValues<'a> {
    /// i64 values.
    I64(&'a [i64]),
    /// f64 values.
    F64(&'a [f64]),
}

/// A host value column with an optional validity bitmap.
#[derive(Clone, Copy, Debug)]
pub struct HostAggColumn<'a> {
    /// Values.
    pub values: HostAggValues<'a>,
    /// Validity (`ceil(len / 32)` words; bit set = not NULL).
    pub validity: Option<&'a [u32]>,
}

impl HostAggColumn<'_> {
    fn len(&self) -> usize {
        match self.values {
            HostAggValues::I64(v) => v.len(),
            HostAggValues::F64(v) => v.len(),
        }
    }
    fn valid(&self, i: usize) -> bool {
        self.validity.is_none_or(|b| (b[i / 32] >> (i % 32)) & 1 != 0)
    }
    fn bits(&self) -> &[u64] {
        match self.values {
            HostAggValues::I64(v) => bytemuck::cast_slice(v),
            HostAggValues::F64(v) => bytemuck::cast_slice(v),
        }
    }
}

/// Per-group results of one i64 column.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct I64Agg {
    /// Non-NULL rows.
    pub count: Vec<u64>,
    /// Sums (`None` where count is 0). With [`GroupAggOptions::checked_sums`]
    /// off, a sum that does not fit i64 is wrapped (as `i128 as i64`).
    pub sum: Vec<Option<i64>>,
    /// The exact sums, in 128 bits (`None` where count is 0).
    pub sum128: Vec<Option<i128>>,
    /// Minima (with [`GroupAggOptions::min_max`] off on the GPU: `None`).
    pub min: Vec<Option<i64>>,
    /// Maxima.
    pub max: Vec<Option<i64>>,
}

/// Per-group results of one f64 column.
#[derive(Clone, Debug, Default)]
pub struct F64Agg {
    /// Non-NULL rows.
    pub count: Vec<u64>,
    /// Sums in row order (`None` where count is 0).
    pub sum: Vec<Option<f64>>,
    /// Minima (total order).
    pub min: Vec<Option<f64>>,
    /// Maxima (total order).
    pub max: Vec<Option<f64>>,
}

impl PartialEq for F64Agg {
    /// Bit equality (NaN equals NaN, -0.0 differs from +0.0). A NaN sum equals
    /// any NaN sum: which NaN an addition returns is not defined (the compiler may
    /// swap the operands of `+`, and release and debug builds did differ), whereas
    /// MIN and MAX return one of the input values, bit for bit.
    fn eq(&self, o: &Self) -> bool {
        let bits = |v: &[Option<f64>]| v.iter().map(|x| x.map(f64::to_bits)).collect::<Vec<_>>();
        let sums = |v: &[Option<f64>]| v.iter().map(|x| x.map(|f| if f.is_nan() { f64::NAN.to_bits() } else { f.to_bits() })).collect::<Vec<_>>();
        self.count == o.count
            && sums(&self.sum) == sums(&o.sum)
            && bits(&self.min) == bits(&o.min)
            && bits(&self.max) == bits(&o.max)
    }
}

/// Per-group results of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnAgg {
    /// An i64 column.
    I64(I64Agg),
    /// An f64 column.
    F64(F64Agg),
}

/// The strategy of the GPU path (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupAggStrategy {
    /// Choose by G and the average group size.
    Auto,
    /// Group tables in workgroup memory (small G).
    DenseTags,
    /// Partition by group, reduce each contiguous region (any G).
    SparseRegions,
}

/// The result of a grouped aggregation.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupAggOutput {
    /// COUNT(*) per group.
    pub rows: Vec<u64>,
    /// One entry per value column, in order.
    pub columns: Vec<ColumnAgg>,
    /// The strategy that ran (`DenseTags` / `SparseRegions` on the GPU; the CPU
    /// paths report `SparseRegions` for the fast path and `DenseTags` for the
    /// reference's single table).
    pub strategy: GroupAggStrategy,
}

/// Errors of grouped aggregation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupAggError {
    /// A device failure or an invalid request.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// An i64 SUM does not fit i64.
    #[error("integer overflow in SUM of column {column}, group {group}")]
    Overflow {
        /// Value column.
        column: usize,
        /// Group.
        group: u32,
    },
}

/// Options of [`group_agg_gpu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupAggOptions {
    /// Strategy.
    pub strategy: GroupAggStrategy,
    /// Invocations per workgroup (64, 128 or 256).
    pub workgroup_size: u32,
    /// Rows per workgroup tile of the dense strategy.
    pub tile_rows: u32,
    /// Compute MIN and MAX (the dense strategy's second pass over the rows settles
    /// their low words; without it MIN/MAX come back as `None`).
    pub min_max: bool,
    /// Report an i64 SUM that does not fit i64 as [`GroupAggError::Overflow`]; when
    /// off, `sum` holds the wrapped value and `sum128` the exact one.
    pub checked_sums: bool,
    /// With dense tags and at most [`SMALL_GROUPS`] groups, fold each invocation's
    /// rows in registers before the workgroup atomics, in tiles of at most 2,048
    /// rows (`dense_small`); off (the default): one set of workgroup atomics per
    /// row (`dense_main`). Off by default until measured faster: on the H100 the
    /// register fold alone (in 16,384-row tiles) did not speed up TPC-H Q1
    /// (docs/benchmarks/history/session-26.md); the small tiles are not measured there yet.
    pub small_groups: bool,
}

impl Default for GroupAggOptions {
    fn default() -> Self {
        GroupAggOptions {
            strategy: GroupAggStrategy::Auto,
            workgroup_size: GROUP_AGG_WORKGROUP,
            tile_rows: GROUP_AGG_TILE_ROWS,
            min_max: true,
            checked_sums: true,
            small_groups: false,
        }
    }
}

/// Largest G the dense strategy takes on this device: 24 bytes of workgroup memory
/// a group (the tables are sized in multiples of 64 groups), at most 1024 groups
/// (1024 with 32 KiB of workgroup memory, 640 with WebGPU's minimum 16 KiB).
pub fn dense_capacity(ctx: &GpuContext) -> u32 {
    let mem = ctx.limits().max_compute_workgroup_storage_size as u64;
    ((mem.saturating_sub(64)) / 24 / 64 * 64).min(DENSE_MAX_GROUPS as u64) as u32
}

/// The strategy [`GroupAggStrategy::Auto`] picks for `rows` rows in `g` groups.
pub fn choose_strategy(ctx: &GpuContext, rows: usize, g: u32, workgroup_size: u32) -> GroupAggStrategy {
    let avg = rows as f64 / g.max(1) as f64;
    if g <= dense_capacity(ctx) && avg >= workgroup_size as f64 / DENSE_MIN_AVG_DIVISOR as f64 {
        GroupAggStrategy::DenseTags
    } else {
        GroupAggStrategy::SparseRegions
    }
}
