//! Dense-tag aggregation over several calls into one set of device tables.
use super::gpu::{check_value_columns, decode_tables, entry, Params, F_ROWS, F_SUM, F_VALID, DENSE_WGSL};
use super::{dense_capacity, AggKind, GroupAggError, GroupAggOptions, GroupAggOutput, GroupAggStrategy, SMALL_GROUPS, SMALL_TILE_ROWS};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::scan::Pass;

/// Dense-tag aggregation of i64 columns over several calls (a table's chunks) into
/// one set of device tables, read back once by [`DenseAccumulator::finish`]:
/// [`group_agg_gpu`](super::group_agg_gpu) per chunk waits for and reads back its
/// tables before the next chunk starts (16 round trips for TPC-H Q1's lineitem at
/// SF 10).
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
        let init = ctx.pipeline("group_agg_dense", DENSE_WGSL, "init_table", &defs)?;
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
        let main = ctx.pipeline("group_agg_dense", DENSE_WGSL, if small { "dense_small" } else { "dense_main" }, &defs)?;
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
    /// [`group_agg_gpu`](super::group_agg_gpu) call over all the rows added, MIN/MAX `None`.
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
