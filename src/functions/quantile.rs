//! `quantile_cont(x, f)`, `quantile_disc(x, f)` and `approx_quantile(x, f)`
//! (DuckDB's names) on SampleSelect (`ridgeline_operators::select`).
//!
//! `x` is any numeric column (computed as Float64; NULLs ignored); `f` is a
//! constant fraction in [0, 1] or a list of them (then the result is a list, one
//! value per fraction, all selected in one pass). An empty group gives NULL.
//! - `quantile_cont`: linear interpolation between the order statistics at
//!   `floor(h)` and `ceil(h)`, `h = f * (n - 1)` (as DataFusion's `percentile_cont`).
//! - `quantile_disc`: the first value whose cumulative share reaches `f`: order
//!   statistic `max(ceil(f * n) - 1, 0)` (SQL's `percentile_disc`).
//! - `approx_quantile`: the order statistic `round(f * (n - 1))` from one
//!   SampleSelect level on the GPU; its rank is off by at most 0.1% of the group's
//!   rows (the bound SampleSelect reports); on the CPU it is exact.
//!
//! Values order as Arrow sorts them (-0.0 before +0.0, NaN last). In GPU mode `on`
//! (the session's `ridgeline.gpu` as the statement is planned) every group selects on
//! the GPU; in mode `auto` groups of at least [`GPU_MIN_ROWS`] values do (on the
//! H100 the GPU median of 2^20 resident values took 0.7 ms against 2.9 ms for the
//! CPU selection on 16 cores; BENCHMARKS.md, `bench select`). A GPU error falls
//! back to the CPU with a warning.
use arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use datafusion::physical_expr::expressions::Literal;
use datafusion::scalar::ScalarValue;
use ridgeline_operators::select::{approx_select_gpu, keys_f64, select_cpu, select_gpu, unkey_f64, Keys, SelectOptions};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// Which quantile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantileKind {
    Cont,
    Disc,
    Approx,
}

pub use crate::tuning::quantile::GPU_MIN_ROWS;

/// The aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Quantile {
    kind: QuantileKind,
    /// The GPU mode this instance was made for (see [`super::follow_session_mode`]).
    mode: GpuMode,
    gpu: bool,
    /// Select on the GPU from this many values.
    gpu_min_rows: usize,
    signature: Signature,
}

impl Quantile {
    pub fn new(kind: QuantileKind, mode: GpuMode) -> Self {
        let gpu_min_rows = if mode == GpuMode::On { 2 } else { GPU_MIN_ROWS };
        Quantile { kind, mode, gpu: mode != GpuMode::Off, gpu_min_rows, signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The three functions for a session in `mode`.
pub fn quantile_udafs(mode: GpuMode) -> Vec<Arc<AggregateUDF>> {
    [QuantileKind::Cont, QuantileKind::Disc, QuantileKind::Approx]
        .into_iter()
        .map(|k| Arc::new(AggregateUDF::new_from_impl(Quantile::new(k, mode))))
        .collect()
}

fn plan_err(msg: String) -> DataFusionError {
    DataFusionError::Plan(msg)
}

impl Quantile {
    /// The GPU mode this instance selects under.
    pub fn mode(&self) -> GpuMode {
        self.mode
    }
}

impl AggregateUDFImpl for Quantile {
    fn name(&self) -> &str {
        match self.kind {
            QuantileKind::Cont => "quantile_cont",
            QuantileKind::Disc => "quantile_disc",
            QuantileKind::Approx => "approx_quantile",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 2 {
            return Err(plan_err(format!("{}(x, fraction) takes 2 arguments, got {}", self.name(), arg_types.len())));
        }
        let x = &arg_types[0];
        if !(x.is_numeric() || x.is_null()) {
            return Err(plan_err(format!("{} expects a numeric column, got {x}", self.name())));
        }
        let f = match &arg_types[1] {
            t if t.is_numeric() => DataType::Float64,
            DataType::List(inner) | DataType::LargeList(inner) | DataType::FixedSizeList(inner, _)
                if inner.data_type().is_numeric() || inner.data_type().is_null() =>
            {
                DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true)))
            }
            t => return Err(plan_err(format!("{}: the fraction must be a number or a list of numbers, got {t}", self.name()))),
        };
        Ok(vec![DataType::Float64, f])
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match arg_types.get(1) {
            Some(DataType::List(_)) => DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
            _ => DataType::Float64,
        })
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let item = Field::new_list_field(DataType::Float64, true);
        Ok(vec![Field::new(format!("{}[values]", args.name), DataType::List(Arc::new(item)), true).into()])
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        let kind = self.kind;
        super::follow_session_mode(self.mode, move |mode| AggregateUDF::new_from_impl(Quantile::new(kind, mode)))
    }
    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let (fractions, list) = self.fractions(acc_args.exprs)?;
        Ok(Box::new(QuantileAcc {
            kind: self.kind,
            fractions,
            list,
            values: Vec::new(),
            gpu: self.gpu,
            gpu_min_rows: self.gpu_min_rows,
        }))
    }
}

impl Quantile {
    /// The fractions (from the literal second argument) and whether they are a list.
    fn fractions(&self, exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>]) -> Result<(Vec<f64>, bool)> {
        let name = self.name();
        let lit = exprs
            .get(1)
            .and_then(|e| e.downcast_ref::<Literal>())
            .ok_or_else(|| plan_err(format!("{name}: the fraction must be a constant")))?;
        let (fractions, list) = match lit.value() {
            ScalarValue::List(l) => {
                let vals = l.value(0);
                let f = vals.as_primitive_opt::<Float64Type>().ok_or_else(|| plan_err(format!("{name}: fractions must be numbers")))?;
                (f.iter().map(|v| v.ok_or_else(|| plan_err(format!("{name}: a fraction is NULL")))).collect::<Result<Vec<_>>>()?, true)
            }
            ScalarValue::Float64(Some(f)) => (vec![f.to_owned()], false),
            v => return Err(plan_err(format!("{name}: the fraction must be a number in [0, 1], got {v}"))),
        };
        if let Some(f) = fractions.iter().find(|f| !(0.0..=1.0).contains(*f)) {
            return Err(plan_err(format!("{name}: fraction {f} is outside [0, 1]")));
        }
        Ok((fractions, list))
    }
}

/// Per fraction: the two order statistics (0-based ranks) and the interpolation
/// weight between them, for `n > 0` values.
fn rank_plan(kind: QuantileKind, fractions: &[f64], n: usize) -> Vec<(u64, u64, f64)> {
    fractions
        .iter()
        .map(|&f| match kind {
            QuantileKind::Cont => {
                let h = f * (n - 1) as f64;
                (h.floor() as u64, h.ceil() as u64, h - h.floor())
            }
            QuantileKind::Disc => {
                let r = ((f * n as f64).ceil() as u64).saturating_sub(1).min(n as u64 - 1);
                (r, r, 0.0)
            }
            QuantileKind::Approx => {
                let r = (f * (n - 1) as f64).round() as u64;
                (r, r, 0.0)
            }
        })
        .collect()
}

/// `quantile_cont`, `quantile_disc` or `approx_quantile` as the GPU aggregation
/// computes it (see `percentile::GpuQuantile`): the same ranks and interpolation
/// as [`QuantileAcc::evaluate`]; `approx_quantile` is answered exactly there (a
/// rank error of 0 is within its bound).
#[derive(Debug, Clone)]
pub(crate) struct QuantileSpec {
    kind: QuantileKind,
    fractions: Vec<f64>,
    list: bool,
}

impl QuantileSpec {
    /// The spec of aggregate `a`, `None` when it is not one of the three.
    pub(crate) fn of(a: &datafusion::physical_expr::aggregate::AggregateFunctionExpr) -> Result<Option<Self>> {
        let Some(q) = a.fun().inner().downcast_ref::<Quantile>() else { return Ok(None) };
        if a.is_distinct() {
            return Ok(None);
        }
        let acc = q.fractions(&a.expressions())?;
        Ok(Some(QuantileSpec { kind: q.kind, fractions: acc.0, list: acc.1 }))
    }
    pub(crate) fn is_list(&self) -> bool {
        self.list
    }
    /// Per fraction: the two ranks and the interpolation weight, for `n > 0` values.
    fn per(&self, n: usize) -> Vec<(u64, u64, f64)> {
        rank_plan(self.kind, &self.fractions, n)
    }
    /// The ranks (two per fraction) a group of `n > 0` values needs.
    pub(crate) fn ranks(&self, n: usize) -> Vec<u64> {
        self.per(n).into_iter().flat_map(|p| [p.0, p.1]).collect()
    }
    /// The answers, one row per group, from each group's count and its f64 keys at [`QuantileSpec::ranks`].
    pub(crate) fn answers(&self, stats: &[(usize, Vec<u64>)]) -> Result<ArrayRef> {
        let per_group: Vec<Option<Vec<f64>>> = stats
            .iter()
            .map(|(n, keys)| {
                (*n > 0).then(|| {
                    self.per(*n)
                        .iter()
                        .zip(keys.chunks(2))
                        .map(|(&(lo, hi, w), k)| {
                            let (a, b) = (unkey_f64(k[0]), unkey_f64(k[1]));
                            if lo == hi || a == b { a } else { a + w * (b - a) }
                        })
                        .collect()
                })
            })
            .collect();
        if !self.list {
            return Ok(Arc::new(per_group.iter().map(|v| v.as_ref().map(|v| v[0])).collect::<Float64Array>()));
        }
        let k = self.fractions.len() as i32;
        let values: Vec<Option<f64>> = per_group.iter().flat_map(|v| (0..k as usize).map(move |i| v.as_ref().map(|v| v[i]))).collect();
        let offsets = OffsetBuffer::new(ScalarBuffer::from((0..=stats.len() as i32).map(|g| g * k).collect::<Vec<_>>()));
        let nulls = arrow::buffer::NullBuffer::from(per_group.iter().map(Option::is_some).collect::<Vec<_>>());
        Ok(Arc::new(ListArray::try_new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            offsets,
            Arc::new(Float64Array::from(values)),
            Some(nulls),
        )?))
    }
}

#[derive(Debug)]
struct QuantileAcc {
    kind: QuantileKind,
    fractions: Vec<f64>,
    list: bool,
    values: Vec<f64>,
    gpu: bool,
    gpu_min_rows: usize,
}

fn list_of(values: Vec<Option<f64>>) -> ScalarValue {
    let n = values.len() as i32;
    let arr = ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::new(ScalarBuffer::from(vec![0, n])),
        Arc::new(Float64Array::from(values)),
        None,
    );
    ScalarValue::List(Arc::new(arr))
}

/// The order statistics at `ranks` (0-based, each < keys.len()) of `keys`.
pub(crate) fn order_stats(keys: &[u64], ranks: &[u64], kind: QuantileKind, gpu: bool, always: bool) -> Vec<u64> {
    if gpu {
        // In mode auto a CPU adapter (lavapipe) is not used: it is slower than the CPU path.
        let usable = |d: &ridgeline_operators::GpuContext| always || d.info().device_type != ridgeline_operators::wgpu::DeviceType::Cpu;
        if let Some(dev) = ridgeline_operators::context::global().ok().filter(|d| usable(d)) {
            let r = if kind == QuantileKind::Approx { approx_select_gpu(&dev, Keys::Host(keys), ranks, &SelectOptions::default()) } else { select_gpu(&dev, Keys::Host(keys), ranks, &SelectOptions::default()) };
            match r {
                Ok((v, _)) => return v,
                Err(e) => {
                    log::warn!("GPU quantile failed, running on the CPU instead: {e}");
                }
            }
        }
    }
    select_cpu(keys, ranks)
}

impl Accumulator for QuantileAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = values[0].as_primitive::<Float64Type>();
        self.values.reserve(a.len() - a.null_count());
        self.values.extend(a.iter().flatten());
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for v in states[0].as_list::<i32>().iter().flatten() {
            self.update_batch(&[v])?;
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![list_of(self.values.iter().map(|&v| Some(v)).collect())])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let n = self.values.len();
        if n == 0 {
            return Ok(if self.list { ScalarValue::List(Arc::new(ListArray::new_null(Arc::new(Field::new_list_field(DataType::Float64, true)), 1))) } else { ScalarValue::Float64(None) });
        }
        // The ranks each fraction needs.
        let per = rank_plan(self.kind, &self.fractions, n);
        let mut ranks: Vec<u64> = per.iter().flat_map(|p| [p.0, p.1]).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let keys = keys_f64(&self.values);
        let stats = order_stats(&keys, &ranks, self.kind, self.gpu && n >= self.gpu_min_rows, self.gpu_min_rows <= 2);
        let at = |r: u64| unkey_f64(stats[ranks.binary_search(&r).unwrap()]);
        let out: Vec<f64> = per
            .iter()
            .map(|&(lo, hi, w)| {
                let (a, b) = (at(lo), at(hi));
                if lo == hi || a == b { a } else { a + w * (b - a) }
            })
            .collect();
        Ok(if self.list { list_of(out.into_iter().map(Some).collect()) } else { ScalarValue::Float64(Some(out[0])) })
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.capacity() * 8 + self.fractions.capacity() * 8
    }
}
