//! Grouped aggregation over dense group ids: per group COUNT(*), and per value
//! column COUNT (non-NULL rows; NULLs = rows - count), SUM, MIN and MAX, on the
//! GPU (shaders/group_agg.wgsl) and on the CPU.
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
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::partition::{
    partition_cpu, partition_gpu, HostColumn, OwnedValues, PartitionFn,
};
use crate::pool::GpuBuffer;
use crate::scan::Pass;
use crate::select::{key_f64, key_i64, unkey_f64, unkey_i64};
use rayon::prelude::*;

const GROUP_AGG_WGSL: &str = include_str!("../../shaders/group_agg.wgsl");

const F_VALID: u32 = 1;
const F_ROWS: u32 = 2;
const F_F64: u32 = 4;
const F_SUM: u32 = 8;
const F_MINMAX: u32 = 16;
/// Groups up to which dense tags fold each invocation's rows in registers first
/// (`dense_small` in shaders/group_agg.wgsl; its `SMALL_G`).
pub const SMALL_GROUPS: u32 = 8;
/// Rows per tile of `dense_small` (at most; a multiple of every workgroup size).
const SMALL_TILE_ROWS: u32 = 2048;

/// Rows per piece of the sparse strategy's two-level segmented reduction (a
/// region longer than this is reduced by several invocations).
pub const SPARSE_PIECE_ROWS: u64 = 1024;

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

/// Options of [`group_agg_gpu_with`].
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
        GroupAggOptions { strategy: GroupAggStrategy::Auto, workgroup_size: 256, tile_rows: 16384, min_max: true, checked_sums: true, small_groups: false }
    }
}

// ---------------------------------------------------------------------------------
// CPU
// ---------------------------------------------------------------------------------

/// Running state of one group and column.
#[derive(Clone, Copy, Debug)]
struct Acc {
    count: u64,
    isum: i128,
    fsum: f64,
    min: u64,
    max: u64,
}

impl Default for Acc {
    fn default() -> Self {
        Acc { count: 0, isum: 0, fsum: 0.0, min: u64::MAX, max: 0 }
    }
}

impl Acc {
    #[inline]
    fn add(&mut self, kind: AggKind, bits: u64) {
        self.count += 1;
        let k = match kind {
            AggKind::I64 => {
                self.isum += bits as i64 as i128;
                key_i64(bits as i64)
            }
            AggKind::F64 => {
                self.fsum += f64::from_bits(bits);
                key_f64(f64::from_bits(bits))
            }
        };
        self.min = self.min.min(k);
        self.max = self.max.max(k);
    }
}

fn kind_of(c: &HostAggColumn<'_>) -> AggKind {
    match c.values {
        HostAggValues::I64(_) => AggKind::I64,
        HostAggValues::F64(_) => AggKind::F64,
    }
}

/// Turns per-group states into results (overflow checked).
fn finish(kind: AggKind, accs: &[Acc], column: usize) -> Result<ColumnAgg, GroupAggError> {
    let count: Vec<u64> = accs.iter().map(|a| a.count).collect();
    Ok(match kind {
        AggKind::I64 => {
            let mut sum = Vec::with_capacity(accs.len());
            for (g, a) in accs.iter().enumerate() {
                if a.count == 0 {
                    sum.push(None);
                } else {
                    let s = i64::try_from(a.isum).map_err(|_| GroupAggError::Overflow { column, group: g as u32 })?;
                    sum.push(Some(s));
                }
            }
            let opt = |f: fn(&Acc) -> u64| accs.iter().map(|a| (a.count > 0).then(|| unkey_i64(f(a)))).collect();
            let sum128 = accs.iter().map(|a| (a.count > 0).then_some(a.isum)).collect();
            ColumnAgg::I64(I64Agg { count, sum, sum128, min: opt(|a| a.min), max: opt(|a| a.max) })
        }
        AggKind::F64 => {
            let opt = |f: fn(&Acc) -> u64| accs.iter().map(|a| (a.count > 0).then(|| unkey_f64(f(a)))).collect();
            let sum = accs.iter().map(|a| (a.count > 0).then_some(a.fsum)).collect();
            ColumnAgg::F64(F64Agg { count, sum, min: opt(|a| a.min), max: opt(|a| a.max) })
        }
    })
}

fn check_host(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) {
    for c in columns {
        assert_eq!(c.len(), groups.len(), "value column of a different length");
        if let Some(v) = c.validity {
            assert!(v.len() >= groups.len().div_ceil(32), "validity bitmap too short");
        }
    }
    assert!(groups.iter().all(|&x| x < g), "group id >= G");
}

/// The sequential reference: one pass over the rows with a table of all groups.
pub fn group_agg_reference(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) -> Result<GroupAggOutput, GroupAggError> {
    check_host(groups, g, columns);
    let mut rows = vec![0u64; g as usize];
    for &x in groups {
        rows[x as usize] += 1;
    }
    let mut out = Vec::new();
    for (ci, c) in columns.iter().enumerate() {
        let kind = kind_of(c);
        let bits = c.bits();
        let mut accs = vec![Acc::default(); g as usize];
        for (i, &x) in groups.iter().enumerate() {
            if c.valid(i) {
                accs[x as usize].add(kind, bits[i]);
            }
        }
        out.push(finish(kind, &accs, ci)?);
    }
    Ok(GroupAggOutput { rows, columns: out, strategy: GroupAggStrategy::DenseTags })
}

/// The CPU fast path: a stable parallel partition of the value columns by group id,
/// then every group's region reduced in parallel, in row order (bit-identical to
/// the reference).
pub fn group_agg_cpu(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) -> Result<GroupAggOutput, GroupAggError> {
    check_host(groups, g, columns);
    let mut host = vec![HostColumn::u32(groups)];
    for c in columns {
        let mut h = HostColumn::u64(c.bits());
        if let Some(v) = c.validity {
            h = h.with_validity(v);
        }
        host.push(h);
    }
    let part = partition_cpu(&host, &[0], &PartitionFn::Direct { fanout: g.max(1) });
    let offs = &part.offsets;
    let rows: Vec<u64> = (0..g as usize).map(|x| offs[x + 1] - offs[x]).collect();
    let mut out = Vec::new();
    for (ci, c) in columns.iter().enumerate() {
        let kind = kind_of(c);
        let pc = &part.columns[ci + 1];
        let OwnedValues::U64(bits) = &pc.values else { unreachable!("8-byte column") };
        let valid = pc.validity.as_deref();
        let accs: Vec<Acc> = (0..g as usize)
            .into_par_iter()
            .map(|x| {
                let mut a = Acc::default();
                for r in offs[x] as usize..offs[x + 1] as usize {
                    if valid.is_none_or(|b| (b[r / 32] >> (r % 32)) & 1 != 0) {
                        a.add(kind, bits[r]);
                    }
                }
                a
            })
            .collect();
        out.push(finish(kind, &accs, ci)?);
    }
    Ok(GroupAggOutput { rows, columns: out, strategy: GroupAggStrategy::SparseRegions })
}

// ---------------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    groups: u32,
    flags: u32,
    row_base: u32,
    tiles: u32,
    pad: [u32; 3],
}

/// Largest G the dense strategy takes on this device: 24 bytes of workgroup memory
/// a group (the tables are sized in multiples of 64 groups), at most 1024 groups
/// (1024 with 32 KiB of workgroup memory, 640 with WebGPU's minimum 16 KiB).
pub fn dense_capacity(ctx: &GpuContext) -> u32 {
    let mem = ctx.limits().max_compute_workgroup_storage_size as u64;
    ((mem.saturating_sub(64)) / 24 / 64 * 64).min(1024) as u32
}

/// The strategy [`GroupAggStrategy::Auto`] picks for `rows` rows in `g` groups.
pub fn choose_strategy(ctx: &GpuContext, rows: usize, g: u32, workgroup_size: u32) -> GroupAggStrategy {
    let avg = rows as f64 / g.max(1) as f64;
    if g <= dense_capacity(ctx) && avg >= workgroup_size as f64 / 8.0 {
        GroupAggStrategy::DenseTags
    } else {
        GroupAggStrategy::SparseRegions
    }
}

fn entry(binding: u32, buf: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() }
}

/// Aggregates `columns` by the group ids `groups` (`g` groups) with default options.
pub fn group_agg_gpu(ctx: &GpuContext, groups: &DeviceArray, g: u32, columns: &[AggColumn<'_>]) -> Result<GroupAggOutput, GroupAggError> {
    group_agg_gpu_with(ctx, groups, g, columns, &GroupAggOptions::default())
}

/// [`group_agg_gpu`] with explicit options.
pub fn group_agg_gpu_with(
    ctx: &GpuContext,
    groups: &DeviceArray,
    g: u32,
    columns: &[AggColumn<'_>],
    opts: &GroupAggOptions,
) -> Result<GroupAggOutput, GroupAggError> {
    let inv = |m: String| GroupAggError::Gpu(GpuError::Invalid(m));
    let n = groups.len();
    let seg = groups.seg_rows();
    if groups.elem_size() != 4 {
        return Err(inv("group ids must be u32".into()));
    }
    check_value_columns(groups, columns.iter().map(|c| &c.column))?;
    if g == 0 {
        if n > 0 {
            return Err(inv("rows without groups (G = 0)".into()));
        }
        let cols = columns
            .iter()
            .map(|c| match c.kind {
                AggKind::I64 => ColumnAgg::I64(I64Agg::default()),
                AggKind::F64 => ColumnAgg::F64(F64Agg::default()),
            })
            .collect();
        return Ok(GroupAggOutput { rows: vec![], columns: cols, strategy: GroupAggStrategy::SparseRegions });
    }
    if g > crate::partition::MAX_FANOUT {
        return Err(inv(format!("{g} groups (at most {})", crate::partition::MAX_FANOUT)));
    }
    let wg = opts.workgroup_size;
    if ![64, 128, 256].contains(&wg) || opts.tile_rows == 0 || opts.tile_rows % wg != 0 {
        return Err(inv(format!("workgroup size {wg} / tile of {} rows", opts.tile_rows)));
    }
    let strategy = match opts.strategy {
        GroupAggStrategy::Auto => choose_strategy(ctx, n, g, wg),
        s => s,
    };
    if strategy == GroupAggStrategy::DenseTags && g > dense_capacity(ctx) {
        return Err(inv(format!("{g} groups exceed the dense capacity {}", dense_capacity(ctx))));
    }
    let gmax = if strategy == GroupAggStrategy::DenseTags { g.div_ceil(64) * 64 } else { 64 };
    // Few groups: registers first, and small tiles. A tile's flush costs a few
    // atomics per group, so many groups want long tiles; with few groups the long
    // tiles only leave the GPU idle (3.75M rows in tiles of 16,384 are 229
    // workgroups for 132 multiprocessors, each invocation loading its 64 rows one
    // after another: TPC-H Q1 took 1.4-2.1 ms a chunk on an H100 either way).
    let small = strategy == GroupAggStrategy::DenseTags && g <= SMALL_GROUPS && opts.small_groups;
    let tile_rows = if small { opts.tile_rows.min(SMALL_TILE_ROWS.max(wg)) } else { opts.tile_rows };
    let defs = [("WG", wg.to_string()), ("TILE", tile_rows.to_string()), ("GMAX", gmax.to_string())];
    let pipe = |e: &str| ctx.pipeline("group_agg", GROUP_AGG_WGSL, e, &defs);
    let init = pipe("init_table")?;
    // one table (8 words a group) for COUNT(*) and one per value column
    let tables: Vec<_> = (0..=columns.len())
        .map(|_| ctx.pool().alloc(g as u64 * 32))
        .collect::<GpuResult<Vec<_>>>()?;
    let mut pass = Pass::default();
    let ub = ctx.uniform(&Params { groups: g, ..Default::default() });
    for t in &tables {
        pass.dispatch(ctx, &init, &[entry(3, t.raw()), entry(5, &ub)], (g as u64 * 8).div_ceil(wg as u64))?;
    }
    let mut f64_sums: Vec<Option<Vec<Option<f64>>>> = vec![None; columns.len()];
    let mut rows: Vec<u64>;
    let tile = tile_rows as usize;
    match strategy {
        GroupAggStrategy::DenseTags => {
            let main = pipe(if small { "dense_small" } else { "dense_main" })?;
            let lo = pipe("dense_lo")?;
            for s in 0..groups.num_segments() {
                let (gb, _, nrows) = groups.segment(s);
                let tiles = nrows.div_ceil(tile) as u32;
                let ub = ctx.uniform(&Params { n: nrows as u32, groups: g, flags: F_ROWS, tiles, ..Default::default() });
                pass.dispatch(ctx, &main, &[entry(0, gb), entry(1, gb), entry(2, gb), entry(3, tables[0].raw()), entry(5, &ub)], tiles as u64)?;
            }
            for (ci, c) in columns.iter().enumerate() {
                let t = tables[ci + 1].raw();
                let mut flags = if c.column.validity.is_some() { F_VALID } else { 0 };
                flags |= match c.kind {
                    AggKind::I64 => F_SUM,
                    AggKind::F64 => F_F64,
                };
                if opts.min_max {
                    flags |= F_MINMAX;
                }
                let kernels = if opts.min_max { vec![&main, &lo] } else { vec![&main] };
                for k in kernels {
                    for s in 0..groups.num_segments() {
                        let (gb, _, nrows) = groups.segment(s);
                        let vb = c.column.values.segment(s).0;
                        let vv = c.column.validity.map_or(gb, |v| v.segment(s).0);
                        let tiles = nrows.div_ceil(tile) as u32;
                        let ub = ctx.uniform(&Params { n: nrows as u32, groups: g, flags, tiles, ..Default::default() });
                        pass.dispatch(ctx, k, &[entry(0, gb), entry(1, vb), entry(2, vv), entry(3, t), entry(5, &ub)], tiles as u64)?;
                    }
                }
            }
            let mut enc = ctx.encoder("group-agg");
            pass.encode(&mut enc, None);
            ctx.submit(enc)?;
            rows = Vec::new();
            // f64 sums: partition the f64 columns by group id, sum regions on the CPU
            let f64_cols: Vec<usize> = (0..columns.len()).filter(|&i| columns[i].kind == AggKind::F64).collect();
            if !f64_cols.is_empty() {
                let mut cols = vec![Column::new(groups)];
                cols.extend(f64_cols.iter().map(|&i| columns[i].column));
                let part = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: g })?;
                for (j, &ci) in f64_cols.iter().enumerate() {
                    f64_sums[ci] = Some(region_f64_sums(ctx, &part.offsets, &part.columns[j + 1])?);
                }
            }
        }
        GroupAggStrategy::SparseRegions | GroupAggStrategy::Auto => {
            let mut cols = vec![Column::new(groups)];
            cols.extend(columns.iter().map(|c| c.column));
            let part = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: g })?;
            rows = (0..g as usize).map(|x| part.offsets[x + 1] - part.offsets[x]).collect();
            // pieces of at most SPARSE_PIECE_ROWS rows, never crossing a segment
            let offs = &part.offsets;
            let mut pieces: Vec<u32> = Vec::new();
            let mut poffs: Vec<u32> = Vec::with_capacity(g as usize + 1);
            for x in 0..g as usize {
                poffs.push((pieces.len() / 2) as u32);
                let (mut a, e) = (offs[x], offs[x + 1]);
                while a < e {
                    let b = (a + SPARSE_PIECE_ROWS).min(e).min((a / seg as u64 + 1) * seg as u64);
                    pieces.extend([a as u32, b as u32]);
                    a = b;
                }
            }
            let np = pieces.len() / 2;
            poffs.push(np as u32);
            // first piece of every segment (pieces are in row order)
            let nseg = n.div_ceil(seg);
            let mut seg_first = vec![np; nseg + 1];
            for k in (0..np).rev() {
                seg_first[pieces[2 * k] as usize / seg] = k;
            }
            for s in (0..nseg).rev() {
                seg_first[s] = seg_first[s].min(seg_first[s + 1]);
            }
            if pieces.is_empty() {
                pieces.extend([0, 0]);
            }
            let pieces_dev = DeviceArray::upload_segmented(ctx, &pieces, pieces.len().div_ceil(4) * 4)?;
            let roffs = DeviceArray::upload_segmented(ctx, &poffs, poffs.len().div_ceil(4) * 4)?;
            let ptbl = ctx.pool().alloc(np.max(1) as u64 * 32)?;
            let red = pipe("piece_reduce")?;
            let merge = pipe("piece_merge")?;
            for (ci, c) in columns.iter().enumerate() {
                let t = tables[ci + 1].raw();
                let pc = &part.columns[ci + 1];
                let mut flags = if pc.validity.is_some() { F_VALID } else { 0 };
                flags |= match c.kind {
                    AggKind::I64 => F_SUM,
                    AggKind::F64 => F_F64,
                };
                for s in 0..pc.values.num_segments() {
                    let (vb, row_base, _) = pc.values.segment(s);
                    let vv = pc.validity.as_ref().map_or(vb, |v| v.segment(s).0);
                    let cnt = seg_first[s + 1] - seg_first[s];
                    let ub = ctx.uniform(&Params {
                        groups: seg_first[s] as u32,
                        tiles: cnt as u32,
                        flags,
                        row_base: row_base as u32,
                        ..Default::default()
                    });
                    pass.dispatch(
                        ctx,
                        &red,
                        &[entry(1, vb), entry(2, vv), entry(5, &ub), entry(6, pieces_dev.segment(0).0), entry(7, ptbl.raw())],
                        (cnt as u64).div_ceil(wg as u64),
                    )?;
                }
                let ub = ctx.uniform(&Params { groups: g, ..Default::default() });
                pass.dispatch(
                    ctx,
                    &merge,
                    &[entry(3, t), entry(4, roffs.segment(0).0), entry(5, &ub), entry(7, ptbl.raw())],
                    (g as u64).div_ceil(wg as u64),
                )?;
                if c.kind == AggKind::F64 {
                    f64_sums[ci] = Some(region_f64_sums(ctx, &part.offsets, pc)?);
                }
            }
            let mut enc = ctx.encoder("group-agg");
            pass.encode(&mut enc, None);
            ctx.submit(enc)?;
            drop((roffs, pieces_dev, ptbl));
        }
    }
    // read the tables back
    let words = g as usize * 8;
    let read = DeviceArray::alloc_segmented(ctx, words * tables.len(), 4, (words * tables.len()).div_ceil(4) * 4)?;
    let mut enc = ctx.encoder("group-agg-read");
    for (i, t) in tables.iter().enumerate() {
        enc.copy_buffer_to_buffer(t.raw(), 0, read.segment(0).0, (i * words * 4) as u64, (words * 4) as u64);
    }
    ctx.submit(enc)?;
    let all = read.download::<u32>(ctx)?;
    drop(pass);
    if strategy == GroupAggStrategy::DenseTags {
        rows = (0..g as usize).map(|x| all[x * 8] as u64).collect();
    }
    let kinds: Vec<AggKind> = columns.iter().map(|c| c.kind).collect();
    let out = decode_tables(&all, g, &kinds, opts, &mut f64_sums)?;
    Ok(GroupAggOutput { rows, columns: out, strategy })
}

/// The value columns' results from the read-back tables (`all`: the COUNT(*)
/// table, then one table of 8 words a group per column).
fn decode_tables(all: &[u32], g: u32, kinds: &[AggKind], opts: &GroupAggOptions, f64_sums: &mut [Option<Vec<Option<f64>>>]) -> Result<Vec<ColumnAgg>, GroupAggError> {
    let words = g as usize * 8;
    let mut out = Vec::with_capacity(kinds.len());
    for (ci, &kind) in kinds.iter().enumerate() {
        let tbl = &all[(ci + 1) * words..(ci + 2) * words];
        let mut count = Vec::with_capacity(g as usize);
        let (mut mins, mut maxs, mut sums, mut sums128) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for x in 0..g as usize {
            let e = &tbl[x * 8..x * 8 + 8];
            let cnt = e[0] as u64;
            count.push(cnt);
            let mn = ((e[4] as u64) << 32) | e[6] as u64;
            let mx = ((e[5] as u64) << 32) | e[7] as u64;
            mins.push((cnt > 0 && opts.min_max).then_some(mn));
            maxs.push((cnt > 0 && opts.min_max).then_some(mx));
            if kind == AggKind::I64 && cnt > 0 {
                // 96-bit two's complement sum, sign-extended to 128 bits
                let wide = ((((e[3] as u128) << 64) | ((e[2] as u128) << 32) | e[1] as u128) << 32) as i128 >> 32;
                if opts.checked_sums && i64::try_from(wide).is_err() {
                    return Err(GroupAggError::Overflow { column: ci, group: x as u32 });
                }
                sums.push(Some(wide as i64));
                sums128.push(Some(wide));
            } else {
                sums.push(None);
                sums128.push(None);
            }
        }
        out.push(match kind {
            AggKind::I64 => ColumnAgg::I64(I64Agg {
                count,
                sum: sums,
                sum128: sums128,
                min: mins.iter().map(|k| k.map(unkey_i64)).collect(),
                max: maxs.iter().map(|k| k.map(unkey_i64)).collect(),
            }),
            AggKind::F64 => ColumnAgg::F64(F64Agg {
                count,
                sum: f64_sums[ci].take().expect("f64 sums computed"),
                min: mins.iter().map(|k| k.map(unkey_f64)).collect(),
                max: maxs.iter().map(|k| k.map(unkey_f64)).collect(),
            }),
        });
    }
    Ok(out)
}

/// Value columns must be 8-byte arrays shaped like the group ids (same rows and
/// segments), their validity bitmaps one bit a row.
fn check_value_columns<'a>(groups: &DeviceArray, columns: impl Iterator<Item = &'a Column<'a>>) -> Result<(), GroupAggError> {
    let inv = |m: &str| GroupAggError::Gpu(GpuError::Invalid(m.into()));
    let (n, seg) = (groups.len(), groups.seg_rows());
    for c in columns {
        if c.values.elem_size() != 8 || c.values.len() != n || c.values.seg_rows() != seg {
            return Err(inv("value columns must be 8-byte arrays shaped like the group ids"));
        }
        if let Some(v) = c.validity {
            if v.len() != n.div_ceil(32) || v.seg_rows() * 32 != seg {
                return Err(inv("validity bitmap does not match its column"));
            }
        }
    }
    Ok(())
}

/// Dense-tag aggregation of i64 columns over several calls (a table's chunks) into
/// one set of device tables, read back once by [`DenseAccumulator::finish`]:
/// [`group_agg_gpu_with`] per chunk waits for and reads back its tables before the
/// next chunk starts (16 round trips for TPC-H Q1's lineitem at SF 10).
///
/// Without MIN/MAX only (`opts.min_max` must be off): the dense kernels settle a
/// minimum's low word against the high word known at the time, which a later
/// chunk may still lower. Counts are 32-bit and the sums exact below 2^32 rows,
/// so at most `u32::MAX` rows in all. Calls are only recorded and submitted; work
/// on one queue runs in order, so a chunk's inputs may be freed (and their memory
/// reused) after [`add`](Self::add) returns.
pub struct DenseAccumulator {
    g: u32,
    ncols: usize,
    rows: u64,
    tables: Vec<GpuBuffer>,
    opts: GroupAggOptions,
}

impl DenseAccumulator {
    /// Tables for `g` groups and `ncols` i64 value columns, zeroed on the device.
    pub fn new(ctx: &GpuContext, g: u32, ncols: usize, opts: &GroupAggOptions) -> Result<Self, GroupAggError> {
        let inv = |m: String| GroupAggError::Gpu(GpuError::Invalid(m));
        if opts.min_max {
            return Err(inv("a dense accumulator keeps no MIN/MAX".into()));
        }
        if g == 0 || g > dense_capacity(ctx) {
            return Err(inv(format!("{g} groups (1..={} for dense tags)", dense_capacity(ctx))));
        }
        let wg = opts.workgroup_size;
        if ![64, 128, 256].contains(&wg) || opts.tile_rows == 0 || opts.tile_rows % wg != 0 {
            return Err(inv(format!("workgroup size {wg} / tile of {} rows", opts.tile_rows)));
        }
        let tables = (0..=ncols).map(|_| ctx.pool().alloc(g as u64 * 32)).collect::<GpuResult<Vec<_>>>()?;
        let defs = [("WG", wg.to_string()), ("TILE", opts.tile_rows.to_string()), ("GMAX", (g.div_ceil(64) * 64).to_string())];
        let init = ctx.pipeline("group_agg", GROUP_AGG_WGSL, "init_table", &defs)?;
        let mut pass = Pass::default();
        let ub = ctx.uniform(&Params { groups: g, ..Default::default() });
        for t in &tables {
            pass.dispatch(ctx, &init, &[entry(3, t.raw()), entry(5, &ub)], (g as u64 * 8).div_ceil(wg as u64))?;
        }
        let mut enc = ctx.encoder("group-agg-acc-init");
        pass.encode(&mut enc, None);
        ctx.submit(enc)?;
        Ok(DenseAccumulator { g, ncols, rows: 0, tables, opts: *opts })
    }

    /// Adds rows: `groups` (u32 ids below G; others are ignored) and the value
    /// columns (8-byte i64 arrays shaped like `groups`, optional validity).
    pub fn add(&mut self, ctx: &GpuContext, groups: &DeviceArray, columns: &[Column<'_>]) -> Result<(), GroupAggError> {
        let inv = |m: String| GroupAggError::Gpu(GpuError::Invalid(m));
        let n = groups.len();
        if groups.elem_size() != 4 || columns.len() != self.ncols {
            return Err(inv(format!("u32 group ids and {} value columns expected", self.ncols)));
        }
        check_value_columns(groups, columns.iter())?;
        if self.rows + n as u64 >= u32::MAX as u64 {
            return Err(inv(format!("more than {} rows in a dense accumulator", u32::MAX - 1)));
        }
        self.rows += n as u64;
        if n == 0 {
            return Ok(());
        }
        let (g, wg) = (self.g, self.opts.workgroup_size);
        let small = g <= SMALL_GROUPS && self.opts.small_groups;
        let tile_rows = if small { self.opts.tile_rows.min(SMALL_TILE_ROWS.max(wg)) } else { self.opts.tile_rows };
        let defs = [("WG", wg.to_string()), ("TILE", tile_rows.to_string()), ("GMAX", (g.div_ceil(64) * 64).to_string())];
        let main = ctx.pipeline("group_agg", GROUP_AGG_WGSL, if small { "dense_small" } else { "dense_main" }, &defs)?;
        let mut pass = Pass::default();
        for ci in 0..=self.ncols {
            let t = self.tables[ci].raw();
            let flags = match ci {
                0 => F_ROWS,
                _ => F_SUM | if columns[ci - 1].validity.is_some() { F_VALID } else { 0 },
            };
            for s in 0..groups.num_segments() {
                let (gb, _, nrows) = groups.segment(s);
                let (vb, vv) = match ci {
                    0 => (gb, gb),
                    _ => {
                        let c = &columns[ci - 1];
                        let vb = c.values.segment(s).0;
                        (vb, c.validity.map_or(gb, |v| v.segment(s).0))
                    }
                };
                let tiles = nrows.div_ceil(tile_rows as usize) as u32;
                let ub = ctx.uniform(&Params { n: nrows as u32, groups: g, flags, tiles, ..Default::default() });
                pass.dispatch(ctx, &main, &[entry(0, gb), entry(1, vb), entry(2, vv), entry(3, t), entry(5, &ub)], tiles as u64)?;
            }
        }
        let mut enc = ctx.encoder("group-agg-acc");
        pass.encode(&mut enc, None);
        ctx.submit(enc)?;
        Ok(())
    }

    /// Reads the tables back (one wait): the same output as one
    /// [`group_agg_gpu_with`] call over all the rows added, MIN/MAX `None`.
    pub fn finish(self, ctx: &GpuContext) -> Result<GroupAggOutput, GroupAggError> {
        let words = self.g as usize * 8;
        let total = words * self.tables.len();
        let read = DeviceArray::alloc_segmented(ctx, total, 4, total.div_ceil(4) * 4)?;
        let mut enc = ctx.encoder("group-agg-acc-read");
        for (i, t) in self.tables.iter().enumerate() {
            enc.copy_buffer_to_buffer(t.raw(), 0, read.segment(0).0, (i * words * 4) as u64, (words * 4) as u64);
        }
        ctx.submit(enc)?;
        let all = read.download::<u32>(ctx)?;
        let rows = (0..self.g as usize).map(|x| all[x * 8] as u64).collect();
        let kinds = vec![AggKind::I64; self.ncols];
        let columns = decode_tables(&all, self.g, &kinds, &self.opts, &mut vec![None; self.ncols])?;
        Ok(GroupAggOutput { rows, columns, strategy: GroupAggStrategy::DenseTags })
    }
}

/// Row-order sums of each group's region of a partitioned f64 column, on the CPU.
fn region_f64_sums(ctx: &GpuContext, offsets: &[u64], col: &crate::compact::CompactedColumn) -> GpuResult<Vec<Option<f64>>> {
    let vals: Vec<f64> = col.values.download::<u64>(ctx)?.into_iter().map(f64::from_bits).collect();
    let valid = match &col.validity {
        Some(v) => Some(v.download::<u32>(ctx)?),
        None => None,
    };
    let g = offsets.len() - 1;
    Ok((0..g)
        .into_par_iter()
        .map(|x| {
            let mut s = 0.0f64;
            let mut any = false;
            for r in offsets[x] as usize..offsets[x + 1] as usize {
                if valid.as_ref().is_none_or(|b| (b[r / 32] >> (r % 32)) & 1 != 0) {
                    s += vals[r];
                    any = true;
                }
            }
            any.then_some(s)
        })
        .collect())
}

/// A grouped-aggregation benchmark result (see [`bench_group_agg`]).
#[derive(Clone, Debug)]
pub struct GroupAggBench {
    /// Rows.
    pub n: usize,
    /// Groups.
    pub groups: u32,
    /// The strategy that ran.
    pub strategy: GroupAggStrategy,
    /// Median wall time of the whole call (GPU-resident input; the partition's and
    /// the tables' readbacks included), in milliseconds.
    pub ms: f64,
}

/// Times the aggregation of one i64 column (pseudo-random values, no NULLs) over
/// `n` rows with pseudo-random group ids in `0 .. g`, GPU-resident, with
/// `strategy`: one warm-up run, then the median of `reps` (at least 1).
pub fn bench_group_agg(ctx: &GpuContext, n: usize, g: u32, strategy: GroupAggStrategy, reps: usize) -> Result<GroupAggBench, GroupAggError> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state
    };
    let gids: Vec<u32> = (0..n).map(|_| ((next() >> 32) % g.max(1) as u64) as u32).collect();
    let vals: Vec<i64> = (0..n).map(|_| (next() >> 24) as i64 - (1 << 39)).collect();
    let gd = DeviceArray::upload(ctx, &gids)?;
    let vd = DeviceArray::upload(ctx, &vals)?;
    let cols = [AggColumn { kind: AggKind::I64, column: Column::new(&vd) }];
    let opts = GroupAggOptions { strategy, ..Default::default() };
    let mut times = Vec::new();
    let mut ran = strategy;
    crate::timing::warm_up(crate::timing::WARM_UP_MS, || -> Result<(), GroupAggError> {
        group_agg_gpu_with(ctx, &gd, g, &cols, &opts)?;
        ctx.wait()?;
        Ok(())
    })?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        let t0 = std::time::Instant::now();
        let out = group_agg_gpu_with(ctx, &gd, g, &cols, &opts)?;
        ctx.wait()?;
        ran = out.strategy;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(GroupAggBench { n, groups: g, strategy: ran, ms: times[times.len() / 2] })
}
