//! DataFusion's `median(x)` and `percentile_cont(f) WITHIN GROUP (ORDER BY x)`,
//! and `percentile_disc` (which DataFusion lacks), on SampleSelect: same names,
//! same answers as DataFusion's own (checked side by side in `quantile.slt` and
//! the tests below), with and without GROUP BY.
//!
//! * `median(x)`: ints are coerced to Float64 (as DataFusion does), floats and
//!   decimals keep their type; an even count averages the two middle values in the
//!   value's type (decimals: truncating division of the sum, as DataFusion).
//!   `median(DISTINCT x)`, Float16 and decimals wider than 18 digits run on
//!   DataFusion's own accumulator.
//! * `percentile_cont(f) WITHIN GROUP (ORDER BY x [DESC])` (also `percentile_cont(x, f)`):
//!   DataFusion's interpolation (weight quantised to 1e-6); `f` may be a list of
//!   fractions (then the answer is a list, all selected in one pass).
//! * `percentile_disc(f) WITHIN GROUP (ORDER BY x [DESC])`: the SQL standard's
//!   first value whose cumulative share reaches `f` (order statistic
//!   `max(ceil(f n) - 1, 0)`), for numbers, decimals, dates and timestamps; `f` a
//!   number or a list.
//!
//! # Grouped quantiles as regions
//! The grouped accumulator keeps one dense tag (the group index) and one
//! order-preserving key per row. At evaluation the rows are partitioned by tag
//! (histogram, prefix sum, stable scatter) so each group becomes a contiguous
//! region with sparse offsets, and the representation for selection is chosen by
//! the average region size against the GPU workgroup size (256):
//! * GPU, dense tags: when the tag and the key's range fit in 64 bits together,
//!   each key becomes `tag << b | (key - min)`; one SampleSelect over all rows
//!   serves every group's ranks at once (rank `offset[g] + r`), however many
//!   groups there are (up to [`MAX_DENSE_GPU_RANKS`] ranks in all).
//! * GPU, sparse offsets: otherwise every region of at least the GPU threshold
//!   runs its own SampleSelect; smaller regions stay on the CPU.
//! * CPU: regions averaging under a workgroup are sorted in place (in parallel
//!   over regions); larger ones use the parallel CPU selection per region.
use super::quantile::{order_stats, QuantileKind, GPU_MIN_ROWS};
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int64Array, ListArray, UInt64Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef, Float32Type, Float64Type, UInt64Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::functions_aggregate::median::median_udaf;
use datafusion::functions_aggregate::percentile_cont::percentile_cont_udaf;
use datafusion::logical_expr::function::{AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::scalar::ScalarValue;
use rayon::prelude::*;
use ridgeline_operators::select::{key_f64, key_i64, unkey_f64, unkey_i64};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

pub use crate::tuning::quantile::MAX_DENSE_GPU_RANKS;
pub use crate::tuning::quantile::WORKGROUP_ROWS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Func {
    Median,
    Cont,
    Disc,
}

/// The aggregate (one of the three).
#[derive(Debug)]
pub struct Percentile {
    func: Func,
    /// The GPU mode this instance was made for (see [`super::follow_session_mode`]).
    mode: GpuMode,
    gpu: bool,
    gpu_min_rows: usize,
    /// DataFusion's own implementation (median, percentile_cont) for the inputs
    /// this one leaves to it.
    inner: Option<Arc<AggregateUDF>>,
    signature: Signature,
}

impl PartialEq for Percentile {
    fn eq(&self, o: &Self) -> bool {
        self.func == o.func && self.mode == o.mode
    }
}
impl Eq for Percentile {}
impl std::hash::Hash for Percentile {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.func, self.mode).hash(h)
    }
}

/// `median`, `percentile_cont` and `percentile_disc` for a session in `mode`.
pub fn percentile_udafs(mode: GpuMode) -> Vec<Arc<AggregateUDF>> {
    [Func::Median, Func::Cont, Func::Disc].into_iter().map(|f| Arc::new(AggregateUDF::new_from_impl(Percentile::new(f, mode)))).collect()
}

fn plan_err(msg: String) -> DataFusionError {
    DataFusionError::Plan(msg)
}

impl Percentile {
    fn new(func: Func, mode: GpuMode) -> Self {
        let gpu_min_rows = if mode == GpuMode::On { 2 } else { GPU_MIN_ROWS };
        let inner = match func {
            Func::Median => Some(median_udaf()),
            Func::Cont => Some(percentile_cont_udaf()),
            Func::Disc => None,
        };
        let signature = match func {
            Func::Median => median_udaf().signature().clone(),
            _ => Signature::user_defined(Volatility::Immutable),
        };
        Percentile { func, mode, gpu: mode != GpuMode::Off, gpu_min_rows, inner, signature }
    }

    /// Whether this implementation takes `dt` (else DataFusion's does).
    fn takes(&self, dt: &DataType, distinct: bool) -> bool {
        if distinct {
            return self.func == Func::Disc && has_order_key(dt);
        }
        match self.func {
            Func::Median | Func::Cont => matches!(dt, DataType::Float32 | DataType::Float64)
                || matches!(dt, DataType::Decimal128(p, _) if *p <= 18),
            Func::Disc => has_order_key(dt),
        }
    }

    fn fractions(&self, exprs: &[Arc<dyn PhysicalExpr>], desc: bool) -> Result<(Vec<f64>, bool)> {
        let name = self.name();
        if self.func == Func::Median {
            return Ok((vec![0.5], false));
        }
        let lit = exprs
            .get(1)
            .and_then(|e| e.downcast_ref::<Literal>())
            .ok_or_else(|| plan_err(format!("Percentile value for '{name}' must be a literal")))?;
        let one = |v: &ScalarValue| -> Result<f64> {
            match v {
                ScalarValue::Float64(Some(f)) => Ok(*f),
                ScalarValue::Float32(Some(f)) => Ok(*f as f64),
                v => Err(plan_err(format!("Percentile value for '{name}' must be a number, got {v}"))),
            }
        };
        let (mut fs, list) = match lit.value() {
            ScalarValue::List(l) => {
                let vals = l.value(0);
                let f = vals.as_primitive_opt::<Float64Type>().ok_or_else(|| plan_err(format!("{name}: fractions must be numbers")))?;
                (f.iter().map(|v| v.ok_or_else(|| plan_err(format!("{name}: a fraction is NULL")))).collect::<Result<Vec<_>>>()?, true)
            }
            v => (vec![one(v)?], false),
        };
        if let Some(f) = fs.iter().find(|f| !(0.0..=1.0).contains(*f)) {
            return Err(plan_err(format!("Percentile value must be between 0.0 and 1.0 inclusive, {f} is invalid")));
        }
        if desc && self.func == Func::Cont {
            // As DataFusion: DESC reads the fraction from the other end.
            fs.iter_mut().for_each(|f| *f = 1.0 - *f);
        }
        Ok((fs, list))
    }

    fn spec(&self, args: &AccumulatorArgs) -> Result<Spec> {
        let desc = args.order_bys.first().is_some_and(|s| s.options.descending);
        self.spec_of(args.exprs, desc, args.expr_fields[0].data_type())
    }

    /// The spec for arguments `exprs` (value, then the fraction literal), the
    /// WITHIN GROUP order's direction and the value's type.
    fn spec_of(&self, exprs: &[Arc<dyn PhysicalExpr>], desc: bool, dt: &DataType) -> Result<Spec> {
        let (fractions, list) = self.fractions(exprs, desc)?;
        Ok(Spec {
            func: self.func,
            fractions,
            list,
            desc: self.func == Func::Disc && desc,
            dt: dt.clone(),
            gpu: self.gpu,
            gpu_min_rows: self.gpu_min_rows,
        })
    }
}

/// Types with an order-preserving u64 key (what percentile_disc takes, and what
/// `GpuTopKExec` can select on).
pub fn has_order_key(dt: &DataType) -> bool {
    use DataType::*;
    matches!(
        dt,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float32 | Float64 | Date32 | Date64 | Timestamp(..)
    ) || matches!(dt, Decimal128(p, _) if *p <= 18)
}

impl Percentile {
    /// The GPU mode this instance selects under.
    pub fn mode(&self) -> GpuMode {
        self.mode
    }
}

impl AggregateUDFImpl for Percentile {
    fn name(&self) -> &str {
        match self.func {
            Func::Median => "median",
            Func::Cont => "percentile_cont",
            Func::Disc => "percentile_disc",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.name();
        if arg_types.len() != 2 {
            return Err(plan_err(format!("{name} takes a value and a fraction, got {} arguments", arg_types.len())));
        }
        let x = &arg_types[0];
        let x = match self.func {
            Func::Cont => match x {
                DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Null => x.clone(),
                t if t.is_numeric() => DataType::Float64,
                t => return Err(plan_err(format!("{name} expects a numeric value, got {t}"))),
            },
            _ => match x {
                DataType::Null => DataType::Float64,
                t if has_order_key(t) => t.clone(),
                DataType::Decimal128(..) | DataType::Decimal256(..) => {
                    return Err(plan_err(format!("{name} takes decimals of at most 18 digits, got {x}")))
                }
                t => return Err(plan_err(format!("{name} expects a number, date or timestamp, got {t}"))),
            },
        };
        let f = match &arg_types[1] {
            t if t.is_numeric() => DataType::Float64,
            DataType::List(inner) | DataType::LargeList(inner) | DataType::FixedSizeList(inner, _)
                if inner.data_type().is_numeric() || inner.data_type().is_null() =>
            {
                DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true)))
            }
            t => return Err(plan_err(format!("{name}: the fraction must be a number or a list of numbers, got {t}"))),
        };
        Ok(vec![x, f])
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if self.func == Func::Median {
            return self.inner.as_ref().unwrap().return_type(arg_types);
        }
        let x = match &arg_types[0] {
            DataType::Null => DataType::Float64,
            t => t.clone(),
        };
        Ok(match arg_types.get(1) {
            Some(DataType::List(_)) => DataType::List(Arc::new(Field::new_list_field(x, true))),
            _ => x,
        })
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let dt = args.input_fields[0].data_type();
        if !self.takes(dt, args.is_distinct) {
            if let Some(inner) = &self.inner {
                return inner.inner().state_fields(args);
            }
        }
        let item = Field::new_list_field(dt.clone(), true);
        Ok(vec![Field::new(format!("{}[{}]", args.name, self.name()), DataType::List(Arc::new(item)), true).into()])
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        let func = self.func;
        super::follow_session_mode(self.mode, move |mode| AggregateUDF::new_from_impl(Percentile::new(func, mode)))
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let dt = args.expr_fields[0].data_type();
        if !self.takes(dt, args.is_distinct) {
            if let Some(inner) = &self.inner {
                return inner.inner().accumulator(args);
            }
            return Err(plan_err(format!("{} does not take {dt}", self.name())));
        }
        let spec = self.spec(&args)?;
        Ok(Box::new(PercentileAcc { groups: PercentileGroups::new(spec, args.is_distinct) }))
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        let dt = args.expr_fields[0].data_type();
        if !self.takes(dt, args.is_distinct) {
            return self.inner.as_ref().is_some_and(|i| i.inner().groups_accumulator_supported(args));
        }
        !args.is_distinct
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let dt = args.expr_fields[0].data_type();
        if !self.takes(dt, args.is_distinct) {
            if let Some(inner) = &self.inner {
                return inner.inner().create_groups_accumulator(args);
            }
        }
        let spec = self.spec(&args)?;
        Ok(Box::new(PercentileGroups::new(spec, false)))
    }
    fn supports_within_group_clause(&self) -> bool {
        self.func != Func::Median
    }
}

/// What to compute.
#[derive(Debug, Clone)]
struct Spec {
    func: Func,
    fractions: Vec<f64>,
    list: bool,
    /// percentile_disc ... ORDER BY x DESC.
    desc: bool,
    dt: DataType,
    gpu: bool,
    gpu_min_rows: usize,
}

impl Spec {
    /// The ranks (0-based) a group of `n > 0` values needs, per fraction (lo, hi).
    fn ranks(&self, n: usize) -> Vec<(u64, u64)> {
        let last = n as u64 - 1;
        self.fractions
            .iter()
            .map(|&p| match self.func {
                Func::Median => (((n - 1) / 2) as u64, (n / 2) as u64),
                Func::Cont => {
                    if n == 1 || p == 0.0 {
                        (0, 0)
                    } else if p == 1.0 {
                        (last, last)
                    } else {
                        let idx = p * last as f64;
                        (idx.floor() as u64, idx.ceil() as u64)
                    }
                }
                Func::Disc => {
                    let r = ((p * n as f64).ceil() as u64).saturating_sub(1).min(last);
                    let r = if self.desc { last - r } else { r };
                    (r, r)
                }
            })
            .collect()
    }

    /// Keys of the non-NULL values of `a` (in the type's order).
    fn keys(&self, a: &ArrayRef, out: &mut Vec<(u32, u64)>, tag_of: impl Fn(usize) -> Option<u32>) -> Result<()> {
        macro_rules! push {
            ($it:expr) => {
                for (i, v) in $it.enumerate() {
                    if let (Some(v), Some(t)) = (v, tag_of(i)) {
                        out.push((t, v));
                    }
                }
            };
        }
        match a.data_type() {
            DataType::Float64 => push!(a.as_primitive::<Float64Type>().iter().map(|v| v.map(key_f64))),
            DataType::Float32 => push!(a.as_primitive::<Float32Type>().iter().map(|v| v.map(|x| key_f64(x as f64)))),
            DataType::UInt64 => push!(a.as_primitive::<UInt64Type>().iter()),
            DataType::Decimal128(..) => push!(a.as_primitive::<Decimal128Type>().iter().map(|v| v.map(|x| key_i64(x as i64)))),
            DataType::Null => {}
            dt if has_order_key(dt) => {
                let c = if matches!(dt, DataType::Date32) {
                    arrow::compute::cast(&arrow::compute::cast(a, &DataType::Int32)?, &DataType::Int64)?
                } else {
                    arrow::compute::cast(a, &DataType::Int64)?
                };
                push!(c.as_primitive::<arrow::datatypes::Int64Type>().iter().map(|v| v.map(key_i64)))
            }
            dt => return Err(DataFusionError::Internal(format!("percentile: unexpected input type {dt}"))),
        }
        Ok(())
    }

    /// An array of `dt` holding the values of `keys` (NULL for None).
    fn values(&self, keys: &[Option<u64>]) -> Result<ArrayRef> {
        values_of(&self.dt, keys)
    }
}

fn values_of(dt: &DataType, keys: &[Option<u64>]) -> Result<ArrayRef> {
    Ok(match dt {
        DataType::Float64 | DataType::Null => Arc::new(keys.iter().map(|k| k.map(unkey_f64)).collect::<Float64Array>()),
        DataType::Float32 => Arc::new(keys.iter().map(|k| k.map(|k| unkey_f64(k) as f32)).collect::<Float32Array>()),
        DataType::UInt64 => Arc::new(keys.iter().copied().collect::<UInt64Array>()),
        DataType::Decimal128(p, s) => Arc::new(
            keys.iter().map(|k| k.map(|k| unkey_i64(k) as i128)).collect::<Decimal128Array>().with_precision_and_scale(*p, *s)?,
        ),
        DataType::Date32 => {
            let i: ArrayRef = Arc::new(keys.iter().map(|k| k.map(|k| unkey_i64(k) as i32)).collect::<arrow::array::Int32Array>());
            arrow::compute::cast(&i, dt)?
        }
        dt => {
            let i: ArrayRef = Arc::new(keys.iter().map(|k| k.map(unkey_i64)).collect::<Int64Array>());
            arrow::compute::cast(&i, dt)?
        }
    })
}

/// One group's answer from its count and the keys at its ranks.
fn finish(spec: &Spec, n: usize, ranks: &[(u64, u64)], at: impl Fn(u64) -> u64) -> Vec<Option<FinalValue>> {
    ranks
        .iter()
        .zip(&spec.fractions)
        .map(|(&(lo, hi), &p)| {
            if n == 0 {
                return None;
            }
            let (a, b) = (at(lo), at(hi));
            if lo == hi {
                return Some(FinalValue::Key(a));
            }
            Some(match (spec.func, &spec.dt) {
                (Func::Median, DataType::Float32) => {
                    let (x, y) = (unkey_f64(a) as f32, unkey_f64(b) as f32);
                    FinalValue::F32((x + y) / 2.0)
                }
                (Func::Median, DataType::Decimal128(..)) => {
                    let (x, y) = (unkey_i64(a) as i128, unkey_i64(b) as i128);
                    FinalValue::I128((x + y) / 2)
                }
                (Func::Median, _) => FinalValue::F64((unkey_f64(a) + unkey_f64(b)) / 2.0),
                (Func::Cont, dt) => {
                    // DataFusion's interpolation, weight quantised to 1e-6, in f64.
                    let index = p * (n - 1) as f64;
                    let fraction = index - lo as f64;
                    let scaled = (fraction * 1_000_000.0) as usize;
                    let weight = scaled as f64 / 1_000_000.0;
                    let (x, y) = (unkey_f64(a), unkey_f64(b));
                    let (x, y) = if matches!(dt, DataType::Float32) { (x as f32 as f64, y as f32 as f64) } else { (x, y) };
                    let v = x + (y - x) * weight;
                    if matches!(dt, DataType::Float32) {
                        FinalValue::F32(v as f32)
                    } else {
                        FinalValue::F64(v)
                    }
                }
                (Func::Disc, _) => FinalValue::Key(a),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum FinalValue {
    Key(u64),
    F64(f64),
    F32(f32),
    I128(i128),
}

/// Final values as an array of `dt`.
fn final_array(dt: &DataType, vals: &[Option<FinalValue>]) -> Result<ArrayRef> {
    let computed = vals.iter().any(|v| matches!(v, Some(FinalValue::F64(_) | FinalValue::F32(_) | FinalValue::I128(_))));
    if !computed {
        let keys: Vec<Option<u64>> = vals.iter().map(|v| v.map(|v| if let FinalValue::Key(k) = v { k } else { 0 })).collect();
        return values_of(dt, &keys);
    }
    Ok(match dt {
        DataType::Float32 => Arc::new(
            vals.iter()
                .map(|v| {
                    v.map(|v| match v {
                        FinalValue::Key(k) => unkey_f64(k) as f32,
                        FinalValue::F32(x) => x,
                        FinalValue::F64(x) => x as f32,
                        FinalValue::I128(x) => x as f32,
                    })
                })
                .collect::<Float32Array>(),
        ),
        DataType::Decimal128(p, s) => Arc::new(
            vals.iter()
                .map(|v| {
                    v.map(|v| match v {
                        FinalValue::Key(k) => unkey_i64(k) as i128,
                        FinalValue::I128(x) => x,
                        FinalValue::F64(x) => x as i128,
                        FinalValue::F32(x) => x as i128,
                    })
                })
                .collect::<Decimal128Array>()
                .with_precision_and_scale(*p, *s)?,
        ),
        _ => Arc::new(
            vals.iter()
                .map(|v| {
                    v.map(|v| match v {
                        FinalValue::Key(k) => unkey_f64(k),
                        FinalValue::F64(x) => x,
                        FinalValue::F32(x) => x as f64,
                        FinalValue::I128(x) => x as f64,
                    })
                })
                .collect::<Float64Array>(),
        ),
    })
}

/// How a grouped selection ran (for tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionPath {
    /// One SampleSelect over all rows, the group tag in the key's high bits.
    GpuDenseTags,
    /// One SampleSelect per large region (smaller regions on the CPU).
    GpuSparseRegions,
    /// Regions sorted in place on the CPU (small average region).
    CpuDenseSort,
    /// The parallel CPU selection per region.
    CpuSparseRegions,
}

/// Order statistics per group: `tags[i]` is row i's group (< `groups`), `keys[i]`
/// its key, `ranks_of(n)` the ranks a group of n rows needs. Returns per group its
/// row count and the keys at its ranks (in the order of `ranks_of`), and the path taken.
pub fn grouped_order_stats(
    tags: &[u32],
    keys: &[u64],
    groups: usize,
    ranks_of: &(dyn Fn(usize) -> Vec<u64> + Sync),
    gpu: bool,
    gpu_min_rows: usize,
) -> (Vec<(usize, Vec<u64>)>, RegionPath) {
    assert_eq!(tags.len(), keys.len());
    // Regions: histogram, exclusive prefix sum, stable scatter.
    let mut counts = vec![0u64; groups + 1];
    for &t in tags {
        counts[t as usize] += 1;
    }
    ridgeline_operators::cpu_scan::scan_in_place(&mut counts, &ridgeline_operators::cpu_scan::ScanConfig::exclusive());
    let offsets: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    let mut next = offsets.clone();
    let mut sorted = vec![0u64; keys.len()];
    for (&t, &k) in tags.iter().zip(keys) {
        let p = &mut next[t as usize];
        sorted[*p] = k;
        *p += 1;
    }
    let sizes: Vec<usize> = (0..groups).map(|g| offsets[g + 1] - offsets[g]).collect();
    let ranks: Vec<Vec<u64>> = sizes.iter().map(|&n| if n == 0 { Vec::new() } else { ranks_of(n) }).collect();
    let nonempty = sizes.iter().filter(|&&n| n > 0).count().max(1);
    let avg = keys.len() / nonempty;
    let always = gpu_min_rows <= 2;
    let total_ranks: usize = ranks.iter().map(Vec::len).sum();

    // GPU, dense tags: tag in the high bits when tag and key range fit together.
    if gpu && keys.len() >= gpu_min_rows && total_ranks <= MAX_DENSE_GPU_RANKS && total_ranks > 0 {
        let (lo, hi) = keys.par_iter().fold(|| (u64::MAX, 0u64), |(a, b), &k| (a.min(k), b.max(k))).reduce(
            || (u64::MAX, 0),
            |(a, b), (c, d)| (a.min(c), b.max(d)),
        );
        let vbits = 64 - (hi - lo).leading_zeros();
        let tbits = 64 - ((groups.max(1) - 1) as u64).leading_zeros();
        if vbits + tbits <= 64 {
            let mut composite = vec![0u64; sorted.len()];
            composite.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
                let base = c << 16;
                for (j, o) in out.iter_mut().enumerate() {
                    let i = base + j;
                    // The region of row i (binary search over the offsets).
                    let g = offsets.partition_point(|&o| o <= i) - 1;
                    *o = if vbits == 64 { sorted[i] } else { ((g as u64) << vbits) | (sorted[i] - lo) };
                }
            });
            let mut global: Vec<u64> = Vec::with_capacity(total_ranks);
            for g in 0..groups {
                global.extend(ranks[g].iter().map(|r| offsets[g] as u64 + r));
            }
            let mut uniq = global.clone();
            uniq.sort_unstable();
            uniq.dedup();
            if let Some(stats) = gpu_stats(&composite, &uniq, always) {
                let mask = if vbits == 64 { u64::MAX } else { (1u64 << vbits) - 1 };
                let out = (0..groups)
                    .map(|g| {
                        let v = ranks[g]
                            .iter()
                            .map(|r| {
                                let c = stats[uniq.binary_search(&(offsets[g] as u64 + r)).unwrap()];
                                if vbits == 64 { c } else { (c & mask) + lo }
                            })
                            .collect();
                        (sizes[g], v)
                    })
                    .collect();
                return (out, RegionPath::GpuDenseTags);
            }
        }
    }
    // Per region.
    let mut slices: Vec<&mut [u64]> = Vec::with_capacity(groups);
    let mut rest: &mut [u64] = &mut sorted;
    for &n in &sizes {
        let (a, b) = rest.split_at_mut(n);
        slices.push(a);
        rest = b;
    }
    let gpu_regions = gpu && sizes.iter().any(|&n| n >= gpu_min_rows.max(2));
    let path = if gpu_regions {
        RegionPath::GpuSparseRegions
    } else if avg < WORKGROUP_ROWS {
        RegionPath::CpuDenseSort
    } else {
        RegionPath::CpuSparseRegions
    };
    let out: Vec<(usize, Vec<u64>)> = slices
        .into_par_iter()
        .zip(ranks.par_iter())
        .map(|(s, r)| {
            let n = s.len();
            if n == 0 {
                return (0, Vec::new());
            }
            if gpu && n >= gpu_min_rows.max(2) {
                let mut uniq = r.clone();
                uniq.sort_unstable();
                uniq.dedup();
                let stats = order_stats(s, &uniq, QuantileKind::Cont, true, always);
                return (n, r.iter().map(|x| stats[uniq.binary_search(x).unwrap()]).collect());
            }
            if n <= 4 * WORKGROUP_ROWS || avg < WORKGROUP_ROWS {
                s.sort_unstable();
                (n, r.iter().map(|&x| s[x as usize]).collect())
            } else {
                let mut uniq = r.clone();
                uniq.sort_unstable();
                uniq.dedup();
                let stats = order_stats(s, &uniq, QuantileKind::Cont, false, false);
                (n, r.iter().map(|x| stats[uniq.binary_search(x).unwrap()]).collect())
            }
        })
        .collect();
    (out, path)
}

/// The keys at `ranks` on a usable GPU, or None (no GPU, or it failed: warned).
fn gpu_stats(keys: &[u64], ranks: &[u64], always: bool) -> Option<Vec<u64>> {
    let dev = ridgeline_operators::context::global().ok()?;
    if !always && dev.is_cpu_adapter() {
        return None;
    }
    match ridgeline_operators::select::select_gpu(&dev, ridgeline_operators::select::Keys::Host(keys), ranks, &ridgeline_operators::select::SelectOptions::default()) {
        Ok((v, _)) => Some(v),
        Err(e) => {
            log::warn!("GPU grouped quantile failed, running on the CPU instead: {e}");
            None
        }
    }
}

/// The grouped accumulator: dense tags and keys per row.
#[derive(Debug)]
struct PercentileGroups {
    spec: Spec,
    tags: Vec<u32>,
    keys: Vec<u64>,
    groups: usize,
    distinct: bool,
}

impl PercentileGroups {
    fn new(spec: Spec, distinct: bool) -> Self {
        PercentileGroups { spec, tags: Vec::new(), keys: Vec::new(), groups: 0, distinct }
    }

    fn add(&mut self, a: &ArrayRef, group_of: impl Fn(usize) -> Option<u32>) -> Result<()> {
        let mut pairs = Vec::with_capacity(a.len() - a.null_count());
        self.spec.keys(a, &mut pairs, group_of)?;
        self.tags.reserve(pairs.len());
        self.keys.reserve(pairs.len());
        for (t, k) in pairs {
            self.tags.push(t);
            self.keys.push(k);
        }
        Ok(())
    }

    /// Takes the rows of the groups `emit_to` names, shifting the rest down.
    fn take(&mut self, emit_to: EmitTo) -> (Vec<u32>, Vec<u64>, usize) {
        match emit_to {
            EmitTo::All => {
                let g = self.groups;
                self.groups = 0;
                (std::mem::take(&mut self.tags), std::mem::take(&mut self.keys), g)
            }
            EmitTo::First(n) => {
                let (mut t1, mut k1, mut t2, mut k2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for (&t, &k) in self.tags.iter().zip(&self.keys) {
                    if (t as usize) < n {
                        t1.push(t);
                        k1.push(k);
                    } else {
                        t2.push(t - n as u32);
                        k2.push(k);
                    }
                }
                self.tags = t2;
                self.keys = k2;
                self.groups -= n;
                (t1, k1, n)
            }
        }
    }

    fn dedup(tags: &mut Vec<u32>, keys: &mut Vec<u64>) {
        let mut pairs: Vec<(u32, u64)> = tags.iter().copied().zip(keys.iter().copied()).collect();
        pairs.par_sort_unstable();
        pairs.dedup();
        *tags = pairs.iter().map(|p| p.0).collect();
        *keys = pairs.iter().map(|p| p.1).collect();
    }

    fn evaluate_groups(&self, mut tags: Vec<u32>, mut keys: Vec<u64>, groups: usize) -> Result<ArrayRef> {
        if self.distinct {
            Self::dedup(&mut tags, &mut keys);
        }
        let spec = &self.spec;
        let ranks_of = |n: usize| spec.ranks(n).into_iter().flat_map(|(a, b)| [a, b]).collect::<Vec<u64>>();
        let (stats, path) = grouped_order_stats(&tags, &keys, groups, &ranks_of, spec.gpu && !self.distinct, spec.gpu_min_rows);
        log::debug!("{:?}: {} rows in {groups} groups via {path:?}", spec.func, keys.len());
        answers(spec, &stats)
    }

    fn state_of(&self, tags: &[u32], keys: &[u64], groups: usize) -> Result<ArrayRef> {
        let mut counts = vec![0i32; groups + 1];
        for &t in tags {
            counts[t as usize + 1] += 1;
        }
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        let mut next: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
        let mut sorted = vec![None; keys.len()];
        for (&t, &k) in tags.iter().zip(keys) {
            sorted[next[t as usize]] = Some(k);
            next[t as usize] += 1;
        }
        let values = self.spec.values(&sorted)?;
        Ok(Arc::new(ListArray::try_new(
            Arc::new(Field::new_list_field(self.spec.dt.clone(), true)),
            OffsetBuffer::new(ScalarBuffer::from(counts)),
            values,
            None,
        )?))
    }
}

/// The answers (one row per group) from each group's count and its keys at the
/// flat ranks (`(lo, hi)` per fraction, in order).
fn answers(spec: &Spec, stats: &[(usize, Vec<u64>)]) -> Result<ArrayRef> {
    let groups = stats.len();
    let per_group: Vec<Vec<Option<FinalValue>>> = stats
        .iter()
        .map(|(n, got)| {
            if *n == 0 {
                return vec![None; spec.fractions.len()];
            }
            let rk = spec.ranks(*n);
            let flat: Vec<u64> = rk.iter().flat_map(|&(a, b)| [a, b]).collect();
            finish(spec, *n, &rk, |r| got[flat.iter().position(|&x| x == r).unwrap()])
        })
        .collect();
    if spec.list {
        let flat: Vec<Option<FinalValue>> = per_group.iter().flatten().copied().collect();
        let values = final_array(&spec.dt, &flat)?;
        let k = spec.fractions.len() as i32;
        let offsets = OffsetBuffer::new(ScalarBuffer::from((0..=groups as i32).map(|g| g * k).collect::<Vec<_>>()));
        let nulls = NullBuffer::from(stats.iter().map(|(n, _)| *n > 0).collect::<Vec<_>>());
        Ok(Arc::new(ListArray::try_new(Arc::new(Field::new_list_field(spec.dt.clone(), true)), offsets, values, Some(nulls))?))
    } else {
        final_array(&spec.dt, &per_group.iter().map(|v| v[0]).collect::<Vec<_>>())
    }
}

/// `e` without the casts around it.
pub fn uncast(e: &Arc<dyn PhysicalExpr>) -> &Arc<dyn PhysicalExpr> {
    match e.downcast_ref::<datafusion::physical_expr::expressions::CastExpr>() {
        Some(c) => uncast(c.expr()),
        None => e,
    }
}

/// A quantile aggregate as the GPU aggregation computes it: it selects each
/// group's order statistics itself ([`GpuQuantile::ranks`]) and turns them into
/// the answer ([`GpuQuantile::answers`]), the same code the accumulators finish
/// with. `median`, `percentile_cont` and `percentile_disc` of this module, and
/// `quantile_cont`, `quantile_disc` and `approx_quantile` (answered exactly).
#[derive(Debug, Clone)]
pub struct GpuQuantile {
    which: Which,
    /// The value's type before a cast to Float64 that the selection looks through.
    source: Option<DataType>,
}

#[derive(Debug, Clone)]
enum Which {
    Percentile(Spec),
    Quantile(super::quantile::QuantileSpec),
}

impl GpuQuantile {
    /// `a` (whose value argument has type `dt`) as a GPU quantile: `None` when it
    /// is none of the six, is DISTINCT, or leaves its input type to DataFusion's
    /// implementation.
    ///
    /// `same_value(e)` says whether the WITHIN GROUP order expression `e` orders by
    /// the value argument (the caller resolves both over the same input).
    pub fn of(a: &AggregateFunctionExpr, dt: &DataType, same_value: &dyn Fn(&Arc<dyn PhysicalExpr>) -> bool) -> Result<Option<Self>> {
        if let Some(q) = super::quantile::QuantileSpec::of(a)? {
            return Ok((dt == &DataType::Float64).then_some(GpuQuantile { which: Which::Quantile(q), source: None }));
        }
        let Some(p) = a.fun().inner().downcast_ref::<Percentile>() else { return Ok(None) };
        if a.is_distinct() || !p.takes(dt, false) {
            return Ok(None);
        }
        let args = a.expressions();
        let desc = match a.order_bys() {
            [] => false,
            [o] if same_value(&o.expr) => o.options.descending,
            _ => return Ok(None),
        };
        Ok(Some(GpuQuantile { which: Which::Percentile(p.spec_of(&args, desc, dt)?), source: None }))
    }
    /// Selects over the values of `source` that the argument casts to Float64 (a
    /// monotone cast: the order statistics of the cast values are the casts of the
    /// order statistics); [`GpuQuantile::answers`] then takes keys of `source`.
    pub fn through_cast(mut self, source: DataType) -> Self {
        self.source = Some(source);
        self
    }
    /// The ranks a group of `n > 0` values needs, in the order [`GpuQuantile::answers`] takes them.
    pub fn ranks(&self, n: usize) -> Vec<u64> {
        match &self.which {
            Which::Percentile(spec) => spec.ranks(n).into_iter().flat_map(|(a, b)| [a, b]).collect(),
            Which::Quantile(q) => q.ranks(n),
        }
    }
    /// Whether the answer is a list (a list of fractions).
    pub fn is_list(&self) -> bool {
        match &self.which {
            Which::Percentile(spec) => spec.list,
            Which::Quantile(q) => q.is_list(),
        }
    }
    /// Per group, its count of non-NULL values and the keys at [`GpuQuantile::ranks`]:
    /// the answers, one row per group.
    pub fn answers(&self, stats: &[(usize, Vec<u64>)]) -> Result<ArrayRef> {
        let converted;
        let stats = match &self.source {
            None => stats,
            Some(src) => {
                // Keys of `src` to keys of the Float64 values, by Arrow's own cast.
                let flat: Vec<Option<u64>> = stats.iter().flat_map(|(_, k)| k.iter().map(|&k| Some(k))).collect();
                let f = arrow::compute::cast(&values_of(src, &flat)?, &DataType::Float64)?;
                let f = f.as_primitive::<Float64Type>();
                let mut it = f.values().iter().map(|&x| key_f64(x));
                converted = stats.iter().map(|(n, k)| (*n, it.by_ref().take(k.len()).collect())).collect::<Vec<_>>();
                &converted
            }
        };
        match &self.which {
            Which::Percentile(spec) => answers(spec, stats),
            Which::Quantile(q) => q.answers(stats),
        }
    }
}

impl GroupsAccumulator for PercentileGroups {
    fn update_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], opt_filter: Option<&BooleanArray>, total_num_groups: usize) -> Result<()> {
        self.groups = self.groups.max(total_num_groups);
        let keep = |i: usize| opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
        self.add(&values[0], |i| keep(i).then(|| group_indices[i] as u32))
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (tags, keys, groups) = self.take(emit_to);
        self.evaluate_groups(tags, keys, groups)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (tags, keys, groups) = self.take(emit_to);
        Ok(vec![self.state_of(&tags, &keys, groups)?])
    }
    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.groups = self.groups.max(total_num_groups);
        let lists = values[0].as_list::<i32>();
        for (i, l) in lists.iter().enumerate() {
            if let Some(l) = l {
                let g = group_indices[i] as u32;
                self.add(&l, |_| Some(g))?;
            }
        }
        Ok(())
    }
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        // Every row its own group: a list of its value (empty when NULL or filtered out).
        let keep = |i: usize| opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
        let mut pairs = Vec::new();
        self.spec.keys(&values[0], &mut pairs, |i| keep(i).then_some(i as u32))?;
        let tags: Vec<u32> = pairs.iter().map(|p| p.0).collect();
        let keys: Vec<u64> = pairs.iter().map(|p| p.1).collect();
        Ok(vec![self.state_of(&tags, &keys, values[0].len())?])
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.tags.capacity() * 4 + self.keys.capacity() * 8
    }
}

/// The ungrouped accumulator: one group of the grouped one.
#[derive(Debug)]
struct PercentileAcc {
    groups: PercentileGroups,
}

impl Accumulator for PercentileAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.groups.groups = 1;
        self.groups.add(&values[0], |_| Some(0))
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.groups.groups = 1;
        for l in states[0].as_list::<i32>().iter().flatten() {
            self.groups.add(&l, |_| Some(0))?;
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let a = self.groups.state_of(&self.groups.tags, &self.groups.keys, 1)?;
        Ok(vec![ScalarValue::try_from_array(&a, 0)?])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let a = self.groups.evaluate_groups(self.groups.tags.clone(), self.groups.keys.clone(), 1)?;
        ScalarValue::try_from_array(&a, 0)
    }
    fn size(&self) -> usize {
        self.groups.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_order_stats_paths_agree() {
        let mut s = 7u64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for &(rows, groups) in &[(0usize, 1usize), (1, 1), (1000, 1), (1000, 3), (5000, 700), (3000, 3000)] {
            let tags: Vec<u32> = (0..rows).map(|_| (rnd() % groups as u64) as u32).collect();
            let keys: Vec<u64> = (0..rows).map(|_| rnd() % 50).collect();
            let ranks_of = |n: usize| vec![0, ((n - 1) / 2) as u64, (n - 1) as u64];
            let (a, pa) = grouped_order_stats(&tags, &keys, groups, &ranks_of, false, usize::MAX);
            // The reference: sort each group.
            for g in 0..groups {
                let mut v: Vec<u64> = tags.iter().zip(&keys).filter(|(t, _)| **t as usize == g).map(|(_, k)| *k).collect();
                v.sort_unstable();
                assert_eq!(a[g].0, v.len());
                if !v.is_empty() {
                    assert_eq!(a[g].1, ranks_of(v.len()).iter().map(|&r| v[r as usize]).collect::<Vec<_>>(), "{rows} rows, {groups} groups, {pa:?}");
                }
            }
        }
    }
}
