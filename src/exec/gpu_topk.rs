//! `GpuTopKExec`: `ORDER BY e [ASC|DESC] [NULLS FIRST|LAST], ... LIMIT k [OFFSET m]`
//! by SampleSelect (replaces a `SortExec` with a fetch; the rule is
//! `optimizer::gpu_topk`).
//!
//! 1. The first sort key of every row becomes an order-preserving u64 key (DESC:
//!    complemented), NULLs set aside.
//! 2. SampleSelect finds the threshold: the key at rank `f - 1` among the non-NULL
//!    keys (`f` = fetch, or fewer once NULLS FIRST rows are counted), on the GPU
//!    where it pays (mode `auto`: from [`GPU_MIN_ROWS`] rows on a GPU that is not a
//!    CPU adapter; mode `on`: always), else with the parallel CPU selection.
//! 3. The candidate rows (key at or before the threshold, plus the NULL rows the
//!    NULLS placement lets in) are gathered in input order, and a stable
//!    lexicographic sort over all sort keys on the CPU keeps the first `f`.
//!
//! Over a resident table (the input is a `GpuScanExec`) whose first sort key is
//! a column of 8-byte integers, decimals or timestamps without NULLs, nothing but
//! the candidates leaves the device: the key column's chunks are copied into one
//! device array, turned into order keys in place (complemented for DESC),
//! SampleSelect finds the threshold, and one count-and-scatter pass returns the
//! row numbers of every key at or before it (all ties included); those rows are
//! taken from the table's host copy and sorted as above. A GPU failure falls back
//! to the host path with a warning.
//!
//! The answer is exactly the sort's: the first `f` rows in the order of all
//! keys; rows tied on every key come in input order (DataFusion's `TopK` leaves
//! that order open). Inputs whose first key has another type (strings, say) are
//! sorted on the CPU by the same stable sort.
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch, LexicographicalComparator, SortColumn};
use arrow::datatypes::*;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use rayon::prelude::*;
use ridgeline_operators::select::{key_i64, select_cpu, select_gpu, Keys, SelectOptions};
use crate::exec::GpuScanExec;
use crate::gpu_batch::{gpu_err, is_gpu_error, ColumnData};
use crate::resident::ResidentData;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use std::sync::Arc;

pub use crate::tuning::topk::GPU_MIN_ROWS;

/// Top-k by SampleSelect.
#[derive(Debug)]
pub struct GpuTopKExec {
    input: Arc<dyn ExecutionPlan>,
    /// The resident table and the first key's table column, when the device path applies.
    resident: Option<ResidentKey>,
    order: LexOrdering,
    fetch: usize,
    /// Select on the GPU from this many rows (usize::MAX: never).
    gpu_min_rows: usize,
    /// Whether a CPU adapter (lavapipe) may run it (mode on).
    cpu_adapter_ok: bool,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuTopKExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, order: LexOrdering, fetch: usize, gpu_min_rows: usize, cpu_adapter_ok: bool) -> Self {
        let mut eq = datafusion::physical_expr::EquivalenceProperties::new(input.schema());
        eq.add_ordering(order.iter().cloned());
        let props = PlanProperties::new(eq, Partitioning::UnknownPartitioning(1), EmissionType::Final, Boundedness::Bounded);
        let resident = resident_key(&input, &order);
        GpuTopKExec { input, resident, order, fetch, gpu_min_rows, cpu_adapter_ok, props: Arc::new(props), metrics: ExecutionPlanMetricsSet::new() }
    }
    pub fn fetch_rows(&self) -> usize {
        self.fetch
    }
    pub fn order(&self) -> &LexOrdering {
        &self.order
    }
}

impl DisplayAs for GpuTopKExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let keys: Vec<String> = self.order.iter().map(|s| s.to_string()).collect();
        let on = if self.resident.is_some() { " on the resident key" } else { "" };
        write!(f, "GpuTopKExec: SampleSelect threshold{on}, fetch={}, expr=[{}]", self.fetch, keys.join(", "))
    }
}

impl ExecutionPlan for GpuTopKExec {
    fn name(&self) -> &str {
        "GpuTopKExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        for s in self.order.iter() {
            if f(&s.expr)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    fn fetch(&self) -> Option<usize> {
        Some(self.fetch)
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuTopKExec::new(children.swap_remove(0), self.order.clone(), self.fetch, self.gpu_min_rows, self.cpu_adapter_ok)))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!("GpuTopKExec has one partition, asked for {partition}")));
        }
        let schema = self.schema();
        if let Some(rk) = self.resident.clone() {
            // The device path, unless there is no usable GPU (then the host path below).
            let usable = ridgeline_operators::context::global().ok().filter(|d| self.cpu_adapter_ok || !d.is_cpu_adapter());
            if let Some(dev) = usable.filter(|_| rk.data.table.num_rows >= self.gpu_min_rows) {
                let (order, fetch, s2) = (self.order.clone(), self.fetch, schema.clone());
                let input = self.input.clone();
                let gpu_rows = MetricBuilder::new(&self.metrics).counter("gpu_rows", partition);
                let candidates = MetricBuilder::new(&self.metrics).counter("candidate_rows", partition);
                let fut = async move {
                    let rows = rk.data.table.num_rows;
                    let o2 = order.clone();
                    let r = tokio::task::spawn_blocking(move || resident_topk(&dev, &rk, &s2, &o2, fetch)).await.map_err(super::blocking_err)?;
                    let out = match r {
                        Ok((b, cand)) => {
                            gpu_rows.add(rows);
                            candidates.add(cand);
                            b
                        }
                        Err(e) if is_gpu_error(&e) => {
                            log::warn!("GPU top-k failed, running it on the host copy instead: {e}");
                            let schema = input.schema();
                            let batches: Vec<RecordBatch> = datafusion::physical_plan::common::collect(input.execute(0, ctx)?).await?;
                            topk(&schema, &batches, &order, fetch, usize::MAX, false)?.0
                        }
                        Err(e) => return Err(e),
                    };
                    Ok::<_, DataFusionError>(futures::stream::iter([Ok(out)]))
                };
                let s = futures::stream::once(fut).try_flatten();
                return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s.boxed())));
            }
        }
        let mut input = self.input.execute(0, ctx.clone())?;
        let order = self.order.clone();
        let fetch = self.fetch;
        let (gpu_min_rows, cpu_ok) = (self.gpu_min_rows, self.cpu_adapter_ok);
        let gpu_rows = MetricBuilder::new(&self.metrics).counter("gpu_rows", partition);
        let candidates = MetricBuilder::new(&self.metrics).counter("candidate_rows", partition);
        let elapsed = MetricBuilder::new(&self.metrics).elapsed_compute(partition);
        let reservation = MemoryConsumer::new("GpuTopKExec").register(ctx.memory_pool());
        let s2 = schema.clone();
        let fut = async move {
            let mut batches = Vec::new();
            while let Some(b) = input.next().await {
                let b = b?;
                reservation.try_grow(b.get_array_memory_size())?;
                batches.push(b);
            }
            let out = tokio::task::spawn_blocking(move || -> Result<RecordBatch> {
                let _t = elapsed.timer();
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                let (out, on_gpu, cand) = topk(&s2, &batches, &order, fetch, gpu_min_rows, cpu_ok)?;
                drop(batches);
                if on_gpu {
                    gpu_rows.add(rows);
                }
                candidates.add(cand);
                Ok(out)
            })
            .await
            .map_err(super::blocking_err)??;
            drop(reservation);
            Ok::<_, DataFusionError>(futures::stream::iter([Ok(out)]))
        };
        let s = futures::stream::once(fut).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s.boxed())))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The key of `x` in `f64::total_cmp`'s order, the order Arrow sorts floats by
/// (unlike `select::key_f64` it keeps NaNs apart: -NaN sorts first).
fn total_key_f64(x: f64) -> u64 {
    let b = x.to_bits() as i64;
    let t = b ^ ((((b >> 63) as u64) >> 1) as i64);
    (t as u64) ^ (1u64 << 63)
}

/// Order-preserving u64 keys of `a` (None: NULL), or None for a type without them.
pub fn order_keys(a: &ArrayRef) -> Result<Option<Vec<Option<u64>>>> {
    macro_rules! map {
        ($t:ty, $f:expr) => {
            Some(a.as_primitive::<$t>().iter().map(|v| v.map($f)).collect())
        };
    }
    Ok(match a.data_type() {
        DataType::Float64 => map!(Float64Type, total_key_f64),
        DataType::Float32 => map!(Float32Type, |x| total_key_f64(x as f64)),
        DataType::Int64 => map!(Int64Type, key_i64),
        DataType::Int32 => map!(Int32Type, |x| key_i64(x as i64)),
        DataType::Int16 => map!(Int16Type, |x| key_i64(x as i64)),
        DataType::Int8 => map!(Int8Type, |x| key_i64(x as i64)),
        DataType::UInt64 => map!(UInt64Type, |x| x),
        DataType::UInt32 => map!(UInt32Type, |x| x as u64),
        DataType::UInt16 => map!(UInt16Type, |x| x as u64),
        DataType::UInt8 => map!(UInt8Type, |x| x as u64),
        DataType::Date32 => map!(Date32Type, |x| key_i64(x as i64)),
        DataType::Date64 => map!(Date64Type, key_i64),
        DataType::Timestamp(TimeUnit::Second, _) => map!(TimestampSecondType, key_i64),
        DataType::Timestamp(TimeUnit::Millisecond, _) => map!(TimestampMillisecondType, key_i64),
        DataType::Timestamp(TimeUnit::Microsecond, _) => map!(TimestampMicrosecondType, key_i64),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => map!(TimestampNanosecondType, key_i64),
        DataType::Decimal128(p, _) if *p <= 18 => map!(Decimal128Type, |x| key_i64(x as i64)),
        _ => None,
    })
}

/// The first `fetch` rows of `batches` in `order` (stable: ties in input order),
/// whether the threshold was selected on the GPU, and how many candidate rows were
/// sorted. Keys and candidates are computed per batch in parallel; the input is
/// never concatenated.
pub fn topk(
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    order: &LexOrdering,
    fetch: usize,
    gpu_min_rows: usize,
    cpu_adapter_ok: bool,
) -> Result<(RecordBatch, bool, usize)> {
    let n: usize = batches.iter().map(|b| b.num_rows()).sum();
    let f = fetch.min(n);
    if f == 0 {
        return Ok((RecordBatch::new_empty(schema.clone()), false, 0));
    }
    let first = &order[0];
    let desc = first.options.descending;
    let nulls_first = first.options.nulls_first;
    // Per batch: the first sort key's keys in the wanted direction (None: its type
    // has no order-preserving key).
    let per: Vec<Option<Vec<Option<u64>>>> = batches
        .par_iter()
        .map(|b| {
            let arr = first.expr.evaluate(b)?.into_array(b.num_rows())?;
            Ok(order_keys(&arr)?.map(|k| if desc { k.into_iter().map(|x| x.map(|x| !x)).collect() } else { k }))
        })
        .collect::<Result<_>>()?;
    let keyed = per.iter().all(Option::is_some);
    let mut on_gpu = false;
    let candidates: Vec<RecordBatch> = if keyed && f < n {
        let nulls: usize = per.iter().map(|p| p.as_ref().unwrap().iter().filter(|k| k.is_none()).count()).sum();
        let nn = n - nulls;
        // How many non-NULL rows can make the cut.
        let want = if nulls_first { f.saturating_sub(nulls) } else { f.min(nn) };
        let threshold = if want == 0 {
            None
        } else {
            let parts: Vec<Vec<u64>> = per.par_iter().map(|p| p.as_ref().unwrap().iter().flatten().copied().collect()).collect();
            let dense: Vec<u64> = parts.concat();
            let rank = [(want - 1) as u64];
            let mut t = None;
            if dense.len() >= gpu_min_rows {
                if let Ok(dev) = ridgeline_operators::context::global() {
                    if cpu_adapter_ok || !dev.is_cpu_adapter() {
                        match select_gpu(&dev, Keys::Host(&dense), &rank, &SelectOptions::default()) {
                            Ok((v, _)) => {
                                t = Some(v[0]);
                                on_gpu = true;
                            }
                            Err(e) => {
                                log::warn!("GPU top-k failed, selecting on the CPU instead: {e}");
                            }
                        }
                    }
                }
            }
            Some(t.unwrap_or_else(|| select_cpu(&dense, &rank)[0]))
        };
        // NULL rows come along when they can be among the first f.
        let take_nulls = nulls_first || want < f;
        batches
            .par_iter()
            .zip(per.par_iter())
            .map(|(b, p)| {
                let rows: Vec<u32> = p
                    .as_ref()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| match k {
                        None => take_nulls,
                        Some(k) => threshold.is_some_and(|t| *k <= t),
                    })
                    .map(|(i, _)| i as u32)
                    .collect();
                Ok(take_record_batch(b, &UInt32Array::from(rows))?)
            })
            .collect::<Result<_>>()?
    } else {
        batches.to_vec()
    };
    let cand = concat_batches(schema, &candidates)?;
    Ok((settle(&cand, order, f)?, on_gpu, cand.num_rows()))
}

/// The first `f` rows of the candidates `cand` in `order` (stable: ties keep
/// their order in `cand`).
fn settle(cand: &RecordBatch, order: &LexOrdering, f: usize) -> Result<RecordBatch> {
    let columns: Vec<SortColumn> = order
        .iter()
        .map(|s| Ok(SortColumn { values: s.expr.evaluate(&cand)?.into_array(cand.num_rows())?, options: Some(s.options) }))
        .collect::<Result<_>>()?;
    let cmp = LexicographicalComparator::try_new(&columns)?;
    let mut idx: Vec<u32> = (0..cand.num_rows() as u32).collect();
    idx.sort_by(|&a, &b| cmp.compare(a as usize, b as usize)); // stable: ties keep input order
    idx.truncate(f);
    Ok(take_record_batch(cand, &UInt32Array::from(idx))?)
}

/// Whether the device path applies to `input` sorted by `order` (see [`GpuTopKExec`]).
pub fn has_resident_key(input: &Arc<dyn ExecutionPlan>, order: &LexOrdering) -> bool {
    resident_key(input, order).is_some()
}

/// A resident table under the node and its column that the first sort key is.
#[derive(Debug, Clone)]
struct ResidentKey {
    data: Arc<ResidentData>,
    /// Table columns of the node's input, in order.
    columns: Vec<usize>,
    /// Table column of the first sort key.
    key: usize,
    descending: bool,
}

/// The resident key when `input` is a resident scan (through partition
/// coalescing) and the first sort key is one of its columns of 8-byte integers,
/// decimals (precision at most 18) or timestamps with no NULLs.
fn resident_key(input: &Arc<dyn ExecutionPlan>, order: &LexOrdering) -> Option<ResidentKey> {
    let mut p = input;
    while p.downcast_ref::<CoalescePartitionsExec>().is_some() || p.name() == "CooperativeExec" {
        p = p.children()[0];
    }
    let scan = p.downcast_ref::<GpuScanExec>()?;
    let first = &order[0];
    let c = first.expr.downcast_ref::<Column>()?;
    let columns = scan.table_columns();
    let key = *columns.get(c.index())?;
    let data = scan.data().clone();
    let ok_type = matches!(
        data.table.schema.field(key).data_type(),
        DataType::Int64 | DataType::Date64 | DataType::Timestamp(..)
    ) || matches!(data.table.schema.field(key).data_type(), DataType::Decimal128(p, _) if *p <= 18);
    let no_nulls = data.table.column_stats[key].null_count == datafusion::common::stats::Precision::Exact(0);
    (ok_type && no_nulls).then_some(ResidentKey { data, columns, key, descending: first.options.descending })
}

/// The device top-k over a resident key column (module documentation), and how
/// many candidate rows came back.
fn resident_topk(
    dev: &ridgeline_operators::GpuContext,
    rk: &ResidentKey,
    schema: &SchemaRef,
    order: &LexOrdering,
    fetch: usize,
) -> Result<(RecordBatch, usize)> {
    use ridgeline_operators::array::copy_elements;
    use ridgeline_operators::select::{to_order_keys_gpu, topk_ties_gpu, Keys, RawKind, SelectOptions};
    let n = rk.data.table.num_rows;
    let f = fetch.min(n);
    if f == 0 {
        return Ok((RecordBatch::new_empty(schema.clone()), 0));
    }
    if n >= u32::MAX as usize {
        return Err(DataFusionError::NotImplemented(format!("device top-k of {n} rows")));
    }
    let keys = ridgeline_operators::DeviceArray::alloc(dev, n, 8).map_err(gpu_err)?;
    let mut at = 0usize;
    for chunk in &rk.data.chunks {
        match &chunk.columns[rk.key].data {
            ColumnData::Device { values, validity: None, .. } if values.elem_size() == 8 => {
                copy_elements(dev, values, 0, &keys, at, chunk.num_rows).map_err(gpu_err)?;
            }
            _ => return Err(DataFusionError::Internal("resident top-k key is not an 8-byte device column without NULLs".into())),
        }
        at += chunk.num_rows;
    }
    to_order_keys_gpu(dev, &keys, RawKind::I64, rk.descending).map_err(gpu_err)?;
    let (rows, _) = topk_ties_gpu::<u64>(dev, Keys::Device(&keys, n), f, &SelectOptions::default()).map_err(gpu_err)?;
    drop(keys);
    // The candidate rows from the host copy, chunk by chunk, in row order.
    let mut parts = Vec::new();
    let (mut i, mut start) = (0usize, 0usize);
    for host in &rk.data.table.host {
        let end = start + host.num_rows();
        let j = i + rows[i..].partition_point(|&r| (r as usize) < end);
        if j > i {
            let idx = UInt32Array::from(rows[i..j].iter().map(|&r| r - start as u32).collect::<Vec<_>>());
            let projected = host.project(&rk.columns)?;
            let b = take_record_batch(&projected, &idx)?;
            parts.push(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?);
        }
        i = j;
        start = end;
    }
    let cand = concat_batches(schema, &parts)?;
    Ok((settle(&cand, order, f)?, cand.num_rows()))
}
