//! Grouped aggregation with dense tags in device memory: COUNT(*) and, per i64
//! column, the non-NULL count, the exact SUM and optionally MIN and MAX, for group
//! counts far beyond what a workgroup table holds (shaders/group_table.wgsl,
//! shaders/group_table_u64.wgsl).
//!
//! [`crate::group_agg`]'s dense strategy keeps every group's state in workgroup
//! memory (at most about a thousand groups) and reads all G groups back; its
//! sparse strategy partitions the rows by group first. A [`GroupTable`] keeps the
//! state of G groups (up to one storage binding of u32 words per state word, tens
//! of millions of groups on a discrete GPU) in device memory: every row adds itself
//! to its group with global atomics, calls accumulate (one per resident chunk, say),
//! and [`GroupTable::finish`] compacts the groups that received rows on the device
//! and reads back only those (in group-id order). This is the region paper's dense
//! tags with the region state moved to device memory, for a key whose range is
//! large but whose groups are dense enough to address directly (TPC-H's order keys).
//!
//! The CPU reference is [`group_table_reference`]: one sequential loop, the same
//! output.
use crate::array::DeviceArray;
use crate::compact::{compact, Column, CompactAlgo, Selection};
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::group_agg::{HostAggColumn, HostAggValues};
use crate::scan::Pass;
use crate::select::unkey_i64;

const GROUP_TABLE_WGSL: &str = include_str!("../../shaders/group_table.wgsl");
const GROUP_TABLE_U64_WGSL: &str = include_str!("../../shaders/group_table_u64.wgsl");
const WG: u32 = crate::tuning::aggregate::GROUP_TABLE_WORKGROUP;
const F_VALID: u32 = 1;
const F_COUNT: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    groups: u32,
    flags: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct CondParams {
    n: u32,
    op: u32,
    pad0: u32,
    pad: u32,
    c: [u32; 3],
    pad2: u32,
}

/// What a [`TableCond`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableWord {
    /// The group's rows (COUNT(*)).
    Rows,
    /// Value column `.0`'s non-NULL count.
    Count(usize),
    /// Value column `.0`'s sum (a group without values fails every condition, as
    /// SQL's NULL does).
    Sum(usize),
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `=`
    Eq,
    /// `<>`
    Ne,
}

impl CmpOp {
    fn code(self) -> u32 {
        match self {
            CmpOp::Lt => 0,
            CmpOp::Le => 1,
            CmpOp::Gt => 2,
            CmpOp::Ge => 3,
            CmpOp::Eq => 4,
            CmpOp::Ne => 5,
        }
    }
    /// The comparison with its operands swapped (`a op b` is `b op.flipped() a`).
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            o => o,
        }
    }
    /// Whether `a op b`.
    pub fn holds<T: Ord>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

/// A condition on a group's state (HAVING), applied on the device before the
/// live groups are read back: `word op value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableCond {
    /// The state word.
    pub word: TableWord,
    /// The comparison.
    pub op: CmpOp,
    /// The constant (an unscaled decimal for a decimal sum).
    pub value: i128,
}

/// Per-group results of one value column, for the live groups.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveColumn {
    /// Non-NULL values.
    pub count: Vec<u64>,
    /// Exact sums (0 where count is 0); the caller checks they fit its type.
    pub sum: Vec<i128>,
    /// Minima (`None` where count is 0); empty unless the column keeps MIN/MAX.
    pub min: Vec<Option<i64>>,
    /// Maxima, likewise.
    pub max: Vec<Option<i64>>,
}

/// The groups that received rows, in ascending group id.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LiveGroups {
    /// Group ids.
    pub ids: Vec<u32>,
    /// COUNT(*) per group (at least 1).
    pub rows: Vec<u64>,
    /// One entry per value column.
    pub columns: Vec<LiveColumn>,
}

/// The most groups a [`GroupTable`] takes on `ctx`: one state word of every group
/// in one storage binding.
pub fn max_groups(ctx: &GpuContext) -> u32 {
    let binding = (ctx.limits().max_storage_buffer_binding_size as u64).min((1 << 31) - 1);
    (binding / 4).min(ctx.segment_rows() as u64).min(u32::MAX as u64 - 1) as u32
}

/// Whether group tables can keep MIN and MAX on `ctx` (64-bit atomic min/max).
pub fn supports_min_max(ctx: &GpuContext) -> bool {
    ctx.features().contains(wgpu::Features::SHADER_INT64 | wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX)
}

/// Device bytes a table of `groups` groups and `columns` value columns takes.
pub fn table_bytes(groups: u32, columns: usize) -> u64 {
    // rows, then per column the count and the three sum words, plus the compaction's copy
    groups as u64 * 4 * (2 + 4 * columns as u64) * 2
}

/// State words of one value column.
struct ColumnWords {
    /// Non-NULL values, from the first call that gave the column a validity bitmap
    /// on (until then every accepted row had a value: the count starts as a copy of
    /// the rows); `None`: the count is the rows.
    cnt: Option<DeviceArray>,
    s: [DeviceArray; 3],
    /// MIN / MAX words (u64 order keys: max of the complement, max), when kept.
    mm: Option<[DeviceArray; 2]>,
}

/// Group state in device memory across calls (see the module documentation).
pub struct GroupTable {
    groups: u32,
    rows: DeviceArray,
    columns: Vec<ColumnWords>,
    added: u64,
}

impl std::fmt::Debug for GroupTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTable").field("groups", &self.groups).field("columns", &self.columns.len()).field("added", &self.added).finish()
    }
}

fn t(a: &DeviceArray) -> &wgpu::Buffer {
    a.segment(0).0
}

fn entry(binding: u32, buf: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() }
}

/// One zeroed state word (`elem` bytes) per group.
fn zeroed(ctx: &GpuContext, enc: &mut wgpu::CommandEncoder, groups: u32, elem: usize) -> GpuResult<DeviceArray> {
    let a = DeviceArray::alloc(ctx, groups.max(1) as usize, elem)?;
    for s in 0..a.num_segments() {
        enc.clear_buffer(a.segment(s).0, 0, None);
    }
    Ok(a)
}

impl GroupTable {
    /// A zeroed table of `groups` groups with one i64 value column per entry of
    /// `min_max`, which says whether the column also keeps its MIN and MAX (64-bit
    /// atomics: see [`supports_min_max`]).
    pub fn new(ctx: &GpuContext, groups: u32, min_max: &[bool]) -> GpuResult<GroupTable> {
        if groups > max_groups(ctx) {
            return Err(GpuError::Invalid(format!("{groups} groups exceed the table's limit of {} on this adapter", max_groups(ctx))));
        }
        if min_max.iter().any(|&m| m) && !supports_min_max(ctx) {
            return Err(GpuError::Invalid("MIN/MAX in a group table needs 64-bit atomics".into()));
        }
        let mut enc = ctx.encoder("group-table-init");
        let rows = zeroed(ctx, &mut enc, groups, 4)?;
        let mut cols = Vec::with_capacity(min_max.len());
        for &m in min_max {
            let mm = if m { Some([zeroed(ctx, &mut enc, groups, 8)?, zeroed(ctx, &mut enc, groups, 8)?]) } else { None };
            cols.push(ColumnWords {
                // Counted from the first call with a validity bitmap on.
                cnt: None,
                s: [zeroed(ctx, &mut enc, groups, 4)?, zeroed(ctx, &mut enc, groups, 4)?, zeroed(ctx, &mut enc, groups, 4)?],
                mm,
            });
        }
        ctx.submit(enc)?;
        Ok(GroupTable { groups, rows, columns: cols, added: 0 })
    }

    /// Groups.
    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// Adds rows: `gids` (u32; an id `>= groups` skips the row) and one column of
    /// 8-byte i64 values (with optional validity) per value column, shaped like
    /// `gids`. Row counts are u32 words: at most `u32::MAX` rows in all calls.
    ///
    /// With `enc`, the work is recorded into it instead of submitted (after the
    /// commands that write `gids` and `columns`, say): the caller submits `enc` and
    /// keeps the inputs alive until then.
    pub fn add(&mut self, ctx: &GpuContext, gids: &DeviceArray, columns: &[Column<'_>], enc: Option<&mut wgpu::CommandEncoder>) -> GpuResult<()> {
        match enc {
            Some(enc) => self.record_add(ctx, gids, columns, enc),
            None => {
                let mut enc = ctx.encoder("group-table-add");
                self.record_add(ctx, gids, columns, &mut enc)?;
                ctx.submit(enc)?;
                Ok(())
            }
        }
    }

    fn record_add(&mut self, ctx: &GpuContext, gids: &DeviceArray, columns: &[Column<'_>], enc: &mut wgpu::CommandEncoder) -> GpuResult<()> {
        let inv = |m: String| Err(GpuError::Invalid(m));
        let n = gids.len();
        let seg = gids.seg_rows();
        if gids.elem_size() != 4 {
            return inv("group ids must be u32".into());
        }
        if columns.len() != self.columns.len() {
            return inv(format!("{} value columns for a table of {}", columns.len(), self.columns.len()));
        }
        for c in columns {
            if c.values.elem_size() != 8 || c.values.len() != n || c.values.seg_rows() != seg {
                return inv("value columns must be 8-byte arrays shaped like the group ids".into());
            }
            if let Some(v) = c.validity {
                if v.len() != n.div_ceil(32) || v.seg_rows() * 32 != seg {
                    return inv("validity bitmap does not match its column".into());
                }
            }
        }
        if self.added + n as u64 > u32::MAX as u64 {
            return inv(format!("more than {} rows in one group table", u32::MAX));
        }
        if n == 0 {
            return Ok(());
        }
        self.added += n as u64;
        for (c, w) in columns.iter().zip(&mut self.columns) {
            if c.validity.is_some() && w.cnt.is_none() {
                let cnt = DeviceArray::alloc(ctx, self.groups.max(1) as usize, 4)?;
                enc.copy_buffer_to_buffer(t(&self.rows), 0, t(&cnt), 0, self.groups.max(1) as u64 * 4);
                w.cnt = Some(cnt);
            }
        }
        let defs = [("WG", WG.to_string())];
        let rows_k = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_rows", &defs)?;
        let sum_k = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_sum", &defs)?;
        let mm_k = match self.columns.iter().any(|w| w.mm.is_some()) {
            true => Some(ctx.pipeline("group_table_u64", GROUP_TABLE_U64_WGSL, "table_min_max", &defs)?),
            false => None,
        };
        let mut pass = Pass::default();
        for s in 0..gids.num_segments() {
            let (gb, _, nrows) = gids.segment(s);
            let ub = ctx.uniform(&Params { n: nrows as u32, groups: self.groups, flags: 0, pad: 0 });
            let wgs = (nrows as u64).div_ceil(WG as u64);
            pass.dispatch(ctx, &rows_k, &[entry(0, gb), entry(3, self.rows.segment(0).0), entry(7, &ub)], wgs)?;
            for (c, w) in columns.iter().zip(&mut self.columns) {
                let vb = c.values.segment(s).0;
                let (vv, valid) = match c.validity {
                    Some(v) => (v.segment(s).0, F_VALID),
                    None => (gb, 0),
                };
                let flags = valid | if w.cnt.is_some() { F_COUNT } else { 0 };
                let ub = ctx.uniform(&Params { n: nrows as u32, groups: self.groups, flags, pad: 0 });
                pass.dispatch(
                    ctx,
                    &sum_k,
                    &[
                        entry(0, gb),
                        entry(1, vb),
                        entry(2, vv),
                        entry(3, t(w.cnt.as_ref().unwrap_or(&self.rows))),
                        entry(4, t(&w.s[0])),
                        entry(5, t(&w.s[1])),
                        entry(6, t(&w.s[2])),
                        entry(7, &ub),
                    ],
                    wgs,
                )?;
                if let (Some(k), Some([mn, mx])) = (&mm_k, &w.mm) {
                    // The kernel reads F_VALID only.
                    pass.dispatch(ctx, k, &[entry(0, gb), entry(1, vb), entry(2, vv), entry(7, &ub), entry(10, t(mn)), entry(11, t(mx))], wgs)?;
                }
            }
        }
        pass.encode(enc, None);
        Ok(())
    }

    /// Compacts the groups that received rows and meet every condition of `conds`
    /// (HAVING, evaluated on the device; `&[]`: every group with rows) and reads them
    /// back.
    pub fn finish(self, ctx: &GpuContext, conds: &[TableCond]) -> GpuResult<LiveGroups> {
        for c in conds {
            if let TableWord::Count(i) | TableWord::Sum(i) = c.word {
                if i >= self.columns.len() {
                    return Err(GpuError::Invalid(format!("condition on value column {i} of {}", self.columns.len())));
                }
            }
        }
        let ncols = self.columns.len();
        if self.added == 0 || self.groups == 0 {
            return Ok(LiveGroups { ids: vec![], rows: vec![], columns: vec![LiveColumn::default(); ncols] });
        }
        let g = self.groups as usize;
        let ids = DeviceArray::alloc(ctx, g.max(1), 4)?;
        let k = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_ids", &[("WG", WG.to_string())])?;
        let ub = ctx.uniform(&Params { n: g as u32, groups: self.groups, flags: 0, pad: 0 });
        let mut pass = Pass::default();
        pass.dispatch(ctx, &k, &[entry(7, &ub), entry(8, ids.segment(0).0)], (g as u64).div_ceil(WG as u64))?;
        let flags = if conds.is_empty() { None } else { Some(self.record_having(ctx, &mut pass, conds)?) };
        let mut enc = ctx.encoder("group-table-having");
        pass.encode(&mut enc, None);
        ctx.submit(enc)?;
        self.read_live(ctx, &ids, flags.as_ref())
    }

    /// HAVING: one flag per group, set for the groups with rows, then cleared by each
    /// condition; recorded into `pass`.
    fn record_having(&self, ctx: &GpuContext, pass: &mut Pass, conds: &[TableCond]) -> GpuResult<DeviceArray> {
        let g = self.groups as usize;
        let defs = [("WG", WG.to_string())];
        let flags = DeviceArray::alloc(ctx, g.max(1), 4)?;
        let wgs = (g as u64).div_ceil(WG as u64);
        let live = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_live", &defs)?;
        let cp = ctx.uniform(&CondParams { n: g as u32, ..Default::default() });
        pass.dispatch(ctx, &live, &[entry(3, t(&self.rows)), entry(8, t(&flags)), entry(9, &cp)], wgs)?;
        for c in conds {
            // A constant beyond 96 bits makes the condition the same for every group.
            let lim = 1i128 << 95;
            let (op, v) = if c.value >= lim || c.value < -lim {
                let above = c.value >= lim;
                let all = match c.op {
                    CmpOp::Lt | CmpOp::Le => above,
                    CmpOp::Gt | CmpOp::Ge => !above,
                    CmpOp::Eq => false,
                    CmpOp::Ne => true,
                };
                match (all, c.word) {
                    // Every group (with a value, for a sum: NULL still fails).
                    (true, TableWord::Sum(_)) => (CmpOp::Ge, (-lim) as u128),
                    (true, _) => continue,
                    // None: no 96-bit value exceeds the largest one.
                    (false, _) => (CmpOp::Gt, (lim - 1) as u128),
                }
            } else {
                (c.op, c.value as u128)
            };
            let cp = ctx.uniform(&CondParams {
                n: g as u32,
                op: op.code(),
                c: [v as u32, (v >> 32) as u32, (v >> 64) as u32],
                ..Default::default()
            });
            let count_of = |i: usize| self.columns[i].cnt.as_ref().unwrap_or(&self.rows);
            match c.word {
                TableWord::Sum(i) => {
                    let k = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_cond_sum", &defs)?;
                    let w = &self.columns[i];
                    pass.dispatch(
                        ctx,
                        &k,
                        &[
                            entry(3, t(count_of(i))),
                            entry(4, t(&w.s[0])),
                            entry(5, t(&w.s[1])),
                            entry(6, t(&w.s[2])),
                            entry(8, t(&flags)),
                            entry(9, &cp),
                        ],
                        wgs,
                    )?;
                }
                TableWord::Rows | TableWord::Count(_) => {
                    let k = ctx.pipeline("group_table", GROUP_TABLE_WGSL, "table_cond_count", &defs)?;
                    let cnt = match c.word {
                        TableWord::Count(i) => count_of(i),
                        _ => &self.rows,
                    };
                    pass.dispatch(ctx, &k, &[entry(3, t(cnt)), entry(8, t(&flags)), entry(9, &cp)], wgs)?;
                }
            }
        }
        Ok(flags)
    }

    /// Compacts the live groups (`flags`, or those with rows) with their ids and
    /// words, and reads them back.
    fn read_live(&self, ctx: &GpuContext, ids: &DeviceArray, flags: Option<&DeviceArray>) -> GpuResult<LiveGroups> {
        let ncols = self.columns.len();
        // The selection and every column cover G rows.
        let rows_view = &self.rows;
        let mut cols: Vec<Column<'_>> = vec![Column::new(ids), Column::new(rows_view)];
        for w in &self.columns {
            if let Some(c) = &w.cnt {
                cols.push(Column::new(c));
            }
            cols.extend(w.s.iter().map(Column::new));
            if let Some(mm) = &w.mm {
                cols.extend(mm.iter().map(Column::new));
            }
        }
        let out = compact(ctx, Selection::Flags(flags.unwrap_or(rows_view)), &cols, &crate::compact::CompactOptions::with_algo(CompactAlgo::Stable))?;
        let mut it = out.columns.into_iter();
        let mut next_col = || it.next().ok_or_else(|| GpuError::Invalid("compaction lost a column".into()));
        let ids = next_col()?.values.download::<u32>(ctx)?;
        let rows: Vec<u64> = next_col()?.values.download::<u32>(ctx)?.into_iter().map(u64::from).collect();
        let mut columns = Vec::with_capacity(ncols);
        for w in &self.columns {
            let mut next = || -> GpuResult<Vec<u32>> { next_col()?.values.download::<u32>(ctx) };
            let count: Vec<u64> = if w.cnt.is_some() { next()?.into_iter().map(u64::from).collect() } else { rows.clone() };
            let (s0, s1, s2) = (next()?, next()?, next()?);
            let sum = (0..ids.len()).map(|i| sum96(s0[i], s1[i], s2[i])).collect();
            let (min, max) = if w.mm.is_some() {
                let mn = next_col()?.values.download::<u64>(ctx)?;
                let mx = next_col()?.values.download::<u64>(ctx)?;
                (
                    (0..ids.len()).map(|i| (count[i] > 0).then(|| unkey_i64(!mn[i]))).collect(),
                    (0..ids.len()).map(|i| (count[i] > 0).then(|| unkey_i64(mx[i]))).collect(),
                )
            } else {
                (vec![], vec![])
            };
            columns.push(LiveColumn { count, sum, min, max });
        }
        Ok(LiveGroups { ids, rows, columns })
    }
}

/// A 96-bit two's-complement value from its words, sign-extended.
fn sum96(w0: u32, w1: u32, w2: u32) -> i128 {
    (((((w2 as u128) << 64) | ((w1 as u128) << 32) | w0 as u128) << 32) as i128) >> 32
}

/// The CPU reference of a [`GroupTable`] fed `gids` and `columns` in one call
/// (i64 columns only; an id `>= groups` skips the row), with MIN and MAX of the
/// columns `min_max` marks, keeping the groups that meet `conds`.
pub fn group_table_reference(gids: &[u32], groups: u32, columns: &[HostAggColumn<'_>], min_max: &[bool], conds: &[TableCond]) -> LiveGroups {
    let g = groups as usize;
    let mut rows = vec![0u64; g];
    let mut count = vec![vec![0u64; g]; columns.len()];
    let mut sum = vec![vec![0i128; g]; columns.len()];
    let mut mins = vec![vec![i64::MAX; g]; columns.len()];
    let mut maxs = vec![vec![i64::MIN; g]; columns.len()];
    for (i, &x) in gids.iter().enumerate() {
        let x = x as usize;
        if x >= g {
            continue;
        }
        rows[x] += 1;
        for (c, col) in columns.iter().enumerate() {
            let HostAggValues::I64(v) = col.values else { panic!("group tables take i64 columns") };
            if col.validity.is_none_or(|b| (b[i / 32] >> (i % 32)) & 1 != 0) {
                count[c][x] += 1;
                sum[c][x] += v[i] as i128;
                mins[c][x] = mins[c][x].min(v[i]);
                maxs[c][x] = maxs[c][x].max(v[i]);
            }
        }
    }
    let meets = |x: usize| {
        conds.iter().all(|c| match c.word {
            TableWord::Rows => c.op.holds(rows[x] as i128, c.value),
            TableWord::Count(i) => c.op.holds(count[i][x] as i128, c.value),
            TableWord::Sum(i) => count[i][x] > 0 && c.op.holds(sum[i][x], c.value),
        })
    };
    let live: Vec<usize> = (0..g).filter(|&x| rows[x] > 0 && meets(x)).collect();
    LiveGroups {
        ids: live.iter().map(|&x| x as u32).collect(),
        rows: live.iter().map(|&x| rows[x]).collect(),
        columns: (0..columns.len())
            .map(|c| {
                let pick = |v: &[i64]| -> Vec<Option<i64>> {
                    if min_max.get(c).copied().unwrap_or(false) {
                        live.iter().map(|&x| (count[c][x] > 0).then_some(v[x])).collect()
                    } else {
                        vec![]
                    }
                };
                LiveColumn {
                    count: live.iter().map(|&x| count[c][x]).collect(),
                    sum: live.iter().map(|&x| sum[c][x]).collect(),
                    min: pick(&mins[c]),
                    max: pick(&maxs[c]),
                }
            })
            .collect(),
    }
}
