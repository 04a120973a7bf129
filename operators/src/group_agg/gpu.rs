//! The GPU path (shaders/group_agg/): the dense-tag and sparse-region strategies,
//! and the read-back of the per-group tables.
use super::{
    dense_capacity, AggColumn, AggKind, ColumnAgg, F64Agg, GroupAggError, GroupAggOptions, GroupAggOutput,
    GroupAggStrategy, I64Agg, SMALL_GROUPS, SMALL_TILE_ROWS, SPARSE_PIECE_ROWS,
};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::partition::{partition_gpu, PartitionFn};
use crate::pool::GpuBuffer;
use crate::scan::Pass;
use crate::select::{unkey_f64, unkey_i64};
use rayon::prelude::*;

/// The dense-tag kernels (and the table's initialisation): shaders/group_agg/common.wgsl
/// then dense.wgsl.
pub(super) const DENSE_WGSL: &str =
    concat!(include_str!("../../../shaders/group_agg/common.wgsl"), include_str!("../../../shaders/group_agg/dense.wgsl"));
/// The sparse-region kernels: shaders/group_agg/common.wgsl then sparse.wgsl.
const SPARSE_WGSL: &str =
    concat!(include_str!("../../../shaders/group_agg/common.wgsl"), include_str!("../../../shaders/group_agg/sparse.wgsl"));

pub(super) const F_VALID: u32 = 1;
pub(super) const F_ROWS: u32 = 2;
const F_F64: u32 = 4;
pub(super) const F_SUM: u32 = 8;
const F_MINMAX: u32 = 16;

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) n: u32,
    pub(super) groups: u32,
    pub(super) flags: u32,
    pub(super) row_base: u32,
    pub(super) tiles: u32,
    pub(super) pad: [u32; 3],
}

pub(super) fn entry(binding: u32, buf: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() }
}

/// Per-value-column f64 sums, computed on the CPU from the partitioned regions.
type F64Sums = Vec<Option<Vec<Option<f64>>>>;

/// One GPU aggregation: the strategy that runs and the kernels' shape.
struct Plan<'a> {
    ctx: &'a GpuContext,
    g: u32,
    wg: u32,
    /// Rows per tile of the dense kernels.
    tile: usize,
    /// `dense_small` instead of `dense_main`.
    small: bool,
    defs: [(&'static str, String); 3],
}

impl Plan<'_> {
    fn pipe(&self, entry: &str) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        let (name, source) = match entry {
            "piece_reduce" | "piece_merge" => ("group_agg_sparse", SPARSE_WGSL),
            _ => ("group_agg_dense", DENSE_WGSL),
        };
        self.ctx.pipeline(name, source, entry, &self.defs)
    }
}

/// Aggregates `columns` by the group ids `groups` (`g` groups) on the GPU, as `opts`
/// says (strategy, workgroup and tile sizes, MIN/MAX, overflow checks).
pub fn group_agg_gpu(
    ctx: &GpuContext,
    groups: &DeviceArray,
    g: u32,
    columns: &[AggColumn<'_>],
    opts: &GroupAggOptions,
) -> Result<GroupAggOutput, GroupAggError> {
    let Some(strategy) = check_request(ctx, groups, g, columns, opts)? else {
        return Ok(no_groups(columns));
    };
    let plan = plan(ctx, g, strategy, opts);
    let init = plan.pipe("init_table")?;
    // one table (8 words a group) for COUNT(*) and one per value column
    let tables: Vec<_> = (0..=columns.len())
        .map(|_| ctx.pool().alloc(g as u64 * 32))
        .collect::<GpuResult<Vec<_>>>()?;
    let mut pass = Pass::default();
    let ub = ctx.uniform(&Params { groups: g, ..Default::default() });
    for t in &tables {
        pass.dispatch(ctx, &init, &[entry(3, t.raw()), entry(5, &ub)], (g as u64 * 8).div_ceil(plan.wg as u64))?;
    }
    let (rows, mut f64_sums) = match strategy {
        GroupAggStrategy::DenseTags => dense_tags(&plan, &mut pass, groups, columns, &tables, opts)?,
        GroupAggStrategy::SparseRegions | GroupAggStrategy::Auto => sparse_regions(&plan, &mut pass, groups, columns, &tables)?,
    };
    let all = read_tables(ctx, g, &tables)?;
    drop(pass);
    let rows = match strategy {
        GroupAggStrategy::DenseTags => (0..g as usize).map(|x| all[x * 8] as u64).collect(),
        _ => rows,
    };
    let kinds: Vec<AggKind> = columns.iter().map(|c| c.kind).collect();
    let out = decode_tables(&all, g, &kinds, opts, &mut f64_sums)?;
    Ok(GroupAggOutput { rows, columns: out, strategy })
}

/// Checks the request; the strategy to run, or `None` for no groups (and no rows).
fn check_request(
    ctx: &GpuContext,
    groups: &DeviceArray,
    g: u32,
    columns: &[AggColumn<'_>],
    opts: &GroupAggOptions,
) -> Result<Option<GroupAggStrategy>, GroupAggError> {
    let inv = |m: String| GroupAggError::Gpu(GpuError::Invalid(m));
    let n = groups.len();
    if groups.elem_size() != 4 {
        return Err(inv("group ids must be u32".into()));
    }
    check_value_columns(groups, columns.iter().map(|c| &c.column))?;
    if g == 0 {
        if n > 0 {
            return Err(inv("rows without groups (G = 0)".into()));
        }
        return Ok(None);
    }
    if g > crate::partition::MAX_FANOUT {
        return Err(inv(format!("{g} groups (at most {})", crate::partition::MAX_FANOUT)));
    }
    let wg = opts.workgroup_size;
    if ![64, 128, 256].contains(&wg) || opts.tile_rows == 0 || opts.tile_rows % wg != 0 {
        return Err(inv(format!("workgroup size {wg} / tile of {} rows", opts.tile_rows)));
    }
    let strategy = match opts.strategy {
        GroupAggStrategy::Auto => super::choose_strategy(ctx, n, g, wg),
        s => s,
    };
    if strategy == GroupAggStrategy::DenseTags && g > dense_capacity(ctx) {
        return Err(inv(format!("{g} groups exceed the dense capacity {}", dense_capacity(ctx))));
    }
    Ok(Some(strategy))
}

/// The output for G = 0: no groups, empty columns.
fn no_groups(columns: &[AggColumn<'_>]) -> GroupAggOutput {
    let cols = columns
        .iter()
        .map(|c| match c.kind {
            AggKind::I64 => ColumnAgg::I64(I64Agg::default()),
            AggKind::F64 => ColumnAgg::F64(F64Agg::default()),
        })
        .collect();
    GroupAggOutput { rows: vec![], columns: cols, strategy: GroupAggStrategy::SparseRegions }
}

/// The kernels' shape for `strategy`.
fn plan<'a>(ctx: &'a GpuContext, g: u32, strategy: GroupAggStrategy, opts: &GroupAggOptions) -> Plan<'a> {
    let wg = opts.workgroup_size;
    let gmax = if strategy == GroupAggStrategy::DenseTags { g.div_ceil(64) * 64 } else { 64 };
    // Few groups: registers first, and small tiles. A tile's flush costs a few
    // atomics per group, so many groups want long tiles; with few groups the long
    // tiles only leave the GPU idle (3.75M rows in tiles of 16,384 are 229
    // workgroups for 132 multiprocessors, each invocation loading its 64 rows one
    // after another: TPC-H Q1 took 1.4-2.1 ms a chunk on an H100 either way).
    let small = strategy == GroupAggStrategy::DenseTags && g <= SMALL_GROUPS && opts.small_groups;
    let tile_rows = if small { opts.tile_rows.min(SMALL_TILE_ROWS.max(wg)) } else { opts.tile_rows };
    let defs = [("WG", wg.to_string()), ("TILE", tile_rows.to_string()), ("GMAX", gmax.to_string())];
    Plan { ctx, g, wg, tile: tile_rows as usize, small, defs }
}

/// The dense-tag strategy: records and submits the tag passes (COUNT(*), then each
/// column; with MIN/MAX a second pass settles their low words), then sums the f64
/// columns' regions on the CPU. Returns no row counts (they are in table 0).
fn dense_tags(
    plan: &Plan<'_>,
    pass: &mut Pass,
    groups: &DeviceArray,
    columns: &[AggColumn<'_>],
    tables: &[GpuBuffer],
    opts: &GroupAggOptions,
) -> Result<(Vec<u64>, F64Sums), GroupAggError> {
    let (ctx, g, tile) = (plan.ctx, plan.g, plan.tile);
    let main = plan.pipe(if plan.small { "dense_small" } else { "dense_main" })?;
    let lo = plan.pipe("dense_lo")?;
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
    // f64 sums: partition the f64 columns by group id, sum regions on the CPU
    let mut f64_sums: F64Sums = vec![None; columns.len()];
    let f64_cols: Vec<usize> = (0..columns.len()).filter(|&i| columns[i].kind == AggKind::F64).collect();
    if !f64_cols.is_empty() {
        let mut cols = vec![Column::new(groups)];
        cols.extend(f64_cols.iter().map(|&i| columns[i].column));
        let part = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: g }, &crate::partition::PartitionOptions::default())?;
        for (j, &ci) in f64_cols.iter().enumerate() {
            f64_sums[ci] = Some(region_f64_sums(ctx, &part.offsets, &part.columns[j + 1])?);
        }
    }
    Ok((Vec::new(), f64_sums))
}

/// Cuts the regions (`offsets`, G + 1 of them) into pieces of at most
/// [`SPARSE_PIECE_ROWS`] rows that never cross a segment of `seg` rows: the pieces as
/// `[start, end)` pairs, each group's first piece (G + 1 entries), and the first piece
/// of every segment (`n.div_ceil(seg) + 1` entries).
fn cut_pieces(offsets: &[u64], g: u32, n: usize, seg: usize) -> (Vec<u32>, Vec<u32>, Vec<usize>) {
    let mut pieces: Vec<u32> = Vec::new();
    let mut poffs: Vec<u32> = Vec::with_capacity(g as usize + 1);
    for x in 0..g as usize {
        poffs.push((pieces.len() / 2) as u32);
        let (mut a, e) = (offsets[x], offsets[x + 1]);
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
    (pieces, poffs, seg_first)
}

/// The sparse-region strategy: partitions the rows by group id, then a two-level
/// segmented reduction over the regions (pieces reduced into partials, each group's
/// partials folded in order); the f64 columns' regions are summed on the CPU.
/// Returns the row counts (the region sizes).
fn sparse_regions(
    plan: &Plan<'_>,
    pass: &mut Pass,
    groups: &DeviceArray,
    columns: &[AggColumn<'_>],
    tables: &[GpuBuffer],
) -> Result<(Vec<u64>, F64Sums), GroupAggError> {
    let (ctx, g, wg) = (plan.ctx, plan.g, plan.wg);
    let (n, seg) = (groups.len(), groups.seg_rows());
    let mut f64_sums: F64Sums = vec![None; columns.len()];
    let mut cols = vec![Column::new(groups)];
    cols.extend(columns.iter().map(|c| c.column));
    let part = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: g }, &crate::partition::PartitionOptions::default())?;
    let rows = (0..g as usize).map(|x| part.offsets[x + 1] - part.offsets[x]).collect();
    let (mut pieces, poffs, seg_first) = cut_pieces(&part.offsets, g, n, seg);
    let np = pieces.len() / 2;
    if pieces.is_empty() {
        pieces.extend([0, 0]);
    }
    let pieces_dev = DeviceArray::upload_segmented(ctx, &pieces, pieces.len().div_ceil(4) * 4)?;
    let roffs = DeviceArray::upload_segmented(ctx, &poffs, poffs.len().div_ceil(4) * 4)?;
    let ptbl = ctx.pool().alloc(np.max(1) as u64 * 32)?;
    let red = plan.pipe("piece_reduce")?;
    let merge = plan.pipe("piece_merge")?;
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
    Ok((rows, f64_sums))
}

/// Reads the tables back in one transfer (8 words a group each, in order).
fn read_tables(ctx: &GpuContext, g: u32, tables: &[GpuBuffer]) -> GpuResult<Vec<u32>> {
    let words = g as usize * 8;
    let read = DeviceArray::alloc_segmented(ctx, words * tables.len(), 4, (words * tables.len()).div_ceil(4) * 4)?;
    let mut enc = ctx.encoder("group-agg-read");
    for (i, t) in tables.iter().enumerate() {
        enc.copy_buffer_to_buffer(t.raw(), 0, read.segment(0).0, (i * words * 4) as u64, (words * 4) as u64);
    }
    ctx.submit(enc)?;
    read.download::<u32>(ctx)
}

/// The value columns' results from the read-back tables (`all`: the COUNT(*)
/// table, then one table of 8 words a group per column).
pub(super) fn decode_tables(all: &[u32], g: u32, kinds: &[AggKind], opts: &GroupAggOptions, f64_sums: &mut [Option<Vec<Option<f64>>>]) -> Result<Vec<ColumnAgg>, GroupAggError> {
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
pub(super) fn check_value_columns<'a>(groups: &DeviceArray, columns: impl Iterator<Item = &'a Column<'a>>) -> Result<(), GroupAggError> {
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

