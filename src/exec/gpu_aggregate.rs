//! `GpuAggregateExec`: `GROUP BY` aggregation over a resident table in one pass
//! on the GPU (the rule is `optimizer::gpu_aggregate`).
//!
//! It replaces the whole aggregation (DataFusion's partial and final
//! `AggregateExec`, the repartition between them, and the filters and
//! projections below them down to the resident scan):
//!
//! 1. **Group ids.** Each GROUP BY key is a column of the table: a string column
//!    by the codes of its resident dictionary ([`StringDict`]), an integer column
//!    by `value - min` (from the table's exact statistics); NULL is one more code.
//!    A row's group id is its codes in mixed radix, so groups are dense tags
//!    `0 .. G`; rows the WHERE clause rejects get the id `G` (dropped).
//! 2. **One row-wise kernel** per resident chunk computes the group ids and every
//!    aggregate argument (`CASE WHEN predicate THEN argument END`, so a rejected
//!    row contributes nothing and raises no error). Decimal arguments wider than
//!    18 digits (TPC-H Q1's `l_extendedprice * (1 - l_discount) * (1 + l_tax)`)
//!    compute in i64 with every overflow checked.
//! 3. **Region state** per group ([`ridgeline_operators::group_agg`], the region
//!    paper's choice): dense per-workgroup tables when the groups are few and
//!    large, else a partition into contiguous regions reduced over their offsets.
//!    SUM is exact in 96 bits, then 128 on the host across chunks.
//! 4. **Quantiles** (`median`, `percentile_cont` / `_disc`, `quantile_cont` /
//!    `_disc`, `approx_quantile`): the kernel also gives each row a tag per
//!    quantile input (its group, or the drop tag when the row is rejected or the
//!    value NULL) and the raw value; [`RegionSelect`] partitions all rows by tag
//!    once and selects every group's ranks in one SampleSelect descent over the
//!    regions. The answers are computed here, by the accumulators' own code
//!    ([`GpuQuantile`]), and the final aggregation keeps them (MAX of one row).
//! 5. Only the group tables come back: they become the partial aggregate state
//!    DataFusion's own final aggregation expects, and a final `AggregateExec`
//!    over those few rows evaluates them (AVG's decimal rounding, the result
//!    types), so the answers are DataFusion's by construction.
//!
//! A GPU failure (device lost, out of memory) or a decimal that leaves 64 bits
//! reruns the original plan on the CPU, with a warning.
use crate::gpu_batch::{gpu_err, is_gpu_error, ColumnData, GpuBatch, GpuColumn};
use crate::gpu_expr::{is_decimal_wide, RowProgram};
use crate::resident::{ResidentData, StringDict};
use arrow::array::{Array, ArrayRef, Decimal128Array, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::TryStreamExt;
use ridgeline_operators::compact::Column;
use ridgeline_operators::group_agg::{group_agg_gpu, AggColumn, AggKind, ColumnAgg, DenseAccumulator, GroupAggError, GroupAggOptions, GroupAggOutput};
use ridgeline_operators::group_table::{GroupTable, LiveColumn, TableCond};
use ridgeline_operators::select::regions::RegionSelect;
use ridgeline_operators::select::RawKind;
use ridgeline_operators::GpuContext;
use crate::functions::percentile::GpuQuantile;
use std::sync::Arc;

static FALLBACKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many GPU aggregations this process redid on the CPU (GPU failure, or a
/// wide decimal that left 64 bits).
pub fn fallbacks() -> u64 {
    FALLBACKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// A GROUP BY key.
#[derive(Debug, Clone)]
pub enum GroupKey {
    /// A string column by its dictionary codes (NULL: `values.len()`).
    Dict {
        /// The dictionary.
        dict: Arc<StringDict>,
        /// Codes, NULL included when the column has NULLs.
        card: u32,
    },
    /// An integer column by `value - min` (NULL: `card - 1` when nullable).
    Range {
        /// Smallest value.
        min: i64,
        /// Codes.
        card: u32,
        /// Whether the last code is NULL.
        nullable: bool,
        /// The key's type.
        data_type: DataType,
    },
}

impl GroupKey {
    /// Number of codes.
    pub fn card(&self) -> u32 {
        match self {
            GroupKey::Dict { card, .. } | GroupKey::Range { card, .. } => *card,
        }
    }
}

/// Where an aggregate's partial state comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggState {
    /// COUNT(*) (or of a non-NULL literal): the group's rows.
    CountRows,
    /// COUNT(x): non-NULL values of value column `.0`.
    Count(usize),
    /// SUM(x).
    Sum(usize),
    /// AVG(x): count, then sum.
    Avg(usize),
    /// MIN(x).
    Min(usize),
    /// MAX(x).
    Max(usize),
    /// A quantile (`median`, `percentile_cont`, `percentile_disc`): entry `.0` of
    /// [`GpuAggregatePlan::quantiles`]; its state is the answer itself.
    Quantile(usize),
}

/// A quantile aggregate.
#[derive(Debug, Clone)]
pub struct QuantileAgg {
    /// Its ranks and answers.
    pub quantile: GpuQuantile,
    /// Its input: entry of [`GpuAggregatePlan::quantile_inputs`].
    pub input: usize,
}

/// Everything the node needs, prepared by the rule.
#[derive(Debug)]
pub struct GpuAggregatePlan {
    /// The resident table.
    pub data: Arc<ResidentData>,
    /// Table column of each column of the program's input, before the code columns.
    pub table_cols: Vec<usize>,
    /// Keys, in GROUP BY order; the program's input ends with one `UInt32` code
    /// column per dictionary key, in key order.
    pub keys: Vec<GroupKey>,
    /// Dictionaries of the string columns the predicate or the arguments test
    /// (`optimizer::string_codes`): their code columns follow the keys' in the
    /// program's input, in this order.
    pub str_codes: Vec<Arc<StringDict>>,
    /// Groups (`G`, the product of the keys' codes).
    pub groups: u32,
    /// Output 0: group id (`u32`, `G` for rejected rows); then the `nvals` value
    /// columns; then per quantile input its tags (`G` for rejected rows and NULL
    /// values) and its raw values.
    pub program: RowProgram,
    /// Value columns of COUNT, SUM, AVG, MIN and MAX.
    pub nvals: usize,
    /// One entry per aggregate.
    pub states: Vec<AggState>,
    /// The quantiles' distinct value columns, by how their 8 bytes order.
    pub quantile_inputs: Vec<RawKind>,
    /// The quantile aggregates.
    pub quantiles: Vec<QuantileAgg>,
    /// Regions of at least this many values select on the device (smaller ones on the CPU).
    pub region_gpu_min_rows: usize,
    /// Whether any aggregate needs MIN or MAX.
    pub min_max: bool,
    /// Group state in a device-memory table ([`GroupTable`]: dense tags with global
    /// atomics, only the live groups read back) instead of per-chunk tables of all
    /// groups: for group counts beyond the workgroup tables (no quantiles).
    pub table: bool,
    /// The partial state is the answer (COUNT, SUM, MIN and MAX only, state types
    /// equal to the result types): no final aggregation runs over it.
    pub direct: bool,
    /// Mode auto, a group table with few rows per group: worth it only when HAVING
    /// conditions cut the readback, else the rule puts this replaced plan back.
    pub unless_having: Option<Arc<dyn ExecutionPlan>>,
    /// The final aggregation over the partial state (its input is replaced at run time).
    pub final_agg: Arc<AggregateExec>,
    /// The partial state's schema (the final aggregation's input).
    pub partial_schema: SchemaRef,
    /// The replaced plan (CPU operators), for the fallback.
    pub cpu: Arc<dyn ExecutionPlan>,
    /// For EXPLAIN: the predicate, keys and aggregates as SQL-ish text.
    pub display: String,
}

/// GROUP BY aggregation over a resident table on the GPU.
#[derive(Debug)]
pub struct GpuAggregateExec {
    plan: Arc<GpuAggregatePlan>,
    props: Arc<PlanProperties>,
    /// The groups' states, computed once by whichever partition asks first and
    /// shared out in slices of the batch size over the output partitions.
    outcome: Arc<tokio::sync::OnceCell<std::result::Result<Outcome, Arc<DataFusionError>>>>,
    /// HAVING conditions of the filter above, applied on the device before the
    /// groups are read back (group-table path; the filter itself stays above).
    having: Arc<Vec<TableCond>>,
    /// EXPLAIN ANALYZE: `device_time` (the device pass with its readback, counted
    /// by the partition that ran it), `deal_time` (spreading the groups over the
    /// partitions), `groups` (read back) and per partition `output_rows`.
    metrics: ExecutionPlanMetricsSet,
}

/// What the device pass left.
#[derive(Debug)]
enum Outcome {
    /// The partial states of the live groups, one list of batches per partition.
    States(Vec<Vec<RecordBatch>>),
    /// The GPU failed: partition 0 runs the CPU plan.
    Cpu,
}

impl GpuAggregateExec {
    /// The node for `plan`; `schema` and `partitions` are the replaced
    /// aggregation's output schema and partition count (parents planned for that
    /// many partitions keep working: the result comes in partition 0, the others
    /// are empty).
    pub fn new(plan: GpuAggregatePlan, schema: SchemaRef, partitions: usize) -> Self {
        Self::with_partitioning(plan, schema, Partitioning::UnknownPartitioning(partitions.max(1)))
    }
    /// The node with the replaced aggregation's output partitioning: `UnknownPartitioning`,
    /// or `Hash` over group key columns (the groups are then dealt out by DataFusion's
    /// own hash partitioner, so co-partitioned parents find them where a
    /// `RepartitionExec` would have put them).
    pub fn with_partitioning(plan: GpuAggregatePlan, schema: SchemaRef, partitioning: Partitioning) -> Self {
        let props = PlanProperties::new(
            datafusion::physical_expr::EquivalenceProperties::new(schema),
            partitioning,
            EmissionType::Final,
            Boundedness::Bounded,
        );
        GpuAggregateExec {
            plan: Arc::new(plan),
            props: Arc::new(props),
            outcome: Arc::new(tokio::sync::OnceCell::new()),
            having: Arc::new(vec![]),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
    /// The same node keeping only the groups that meet `having` (the conditions of
    /// a filter above it, which must stay: the node returns a superset).
    pub fn with_having(&self, having: Vec<TableCond>) -> Self {
        GpuAggregateExec {
            plan: self.plan.clone(),
            props: self.props.clone(),
            outcome: Arc::new(tokio::sync::OnceCell::new()),
            having: Arc::new(having),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
    /// The HAVING conditions applied on the device.
    pub fn having(&self) -> &[TableCond] {
        &self.having
    }
    /// The prepared plan.
    pub fn plan(&self) -> &GpuAggregatePlan {
        &self.plan
    }
}

impl DisplayAs for GpuAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let state = match (self.plan.table, self.having.len()) {
            (false, _) => String::new(),
            (true, 0) => " (group table in device memory)".to_string(),
            (true, n) => format!(" (group table in device memory, {n} HAVING conditions on the device)"),
        };
        write!(f, "GpuAggregateExec: table={}, groups={}{state}, {}", self.plan.data.table.name, self.plan.groups, self.plan.display)
    }
}

impl ExecutionPlan for GpuAggregateExec {
    fn name(&self) -> &str {
        "GpuAggregateExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        super::no_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let plan = self.plan.clone();
        let schema = self.schema();
        let device_time = MetricBuilder::new(&self.metrics).subset_time("device_time", partition);
        let deal_time = MetricBuilder::new(&self.metrics).subset_time("deal_time", partition);
        let groups = MetricBuilder::new(&self.metrics).counter("groups", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let cell = self.outcome.clone();
        let having = self.having.clone();
        // Without GROUP BY the one result row comes from partition 0 alone.
        let parts = if self.plan.keys.is_empty() { 1 } else { self.props.output_partitioning().partition_count().max(1) };
        let hash = match self.props.output_partitioning() {
            Partitioning::Hash(exprs, n) if *n > 1 => Some((exprs.clone(), *n)),
            _ => None,
        };
        let batch_rows = ctx.session_config().batch_size().max(1);
        let fut = async move {
            let outcome = cell
                .get_or_init(|| async {
                    let p = plan.clone();
                    let timer = device_time.timer();
                    let states = tokio::task::spawn_blocking(move || {
                        let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
                        if p.table { table_states(&dev, &p, &having) } else { partial_states(&dev, &p) }
                    })
                    .await
                    .map_err(super::blocking_err);
                    timer.done();
                    match states {
                        Ok(Ok(batch)) => tokio::task::spawn_blocking(move || {
                            groups.add(batch.num_rows());
                            let _t = deal_time.timer();
                            deal(&batch, parts, hash, batch_rows)
                        })
                            .await
                            .map_err(super::blocking_err)
                            .and_then(|r| r)
                            .map(Outcome::States)
                            .map_err(Arc::new),
                        Ok(Err(e)) | Err(e) if is_gpu_error(&e) || is_decimal_wide(&e) => {
                            log::warn!("GPU aggregation failed ({e}); running it on the CPU");
                            FALLBACKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            Ok(Outcome::Cpu)
                        }
                        Ok(Err(e)) | Err(e) => Err(Arc::new(e)),
                    }
                })
                .await;
            match outcome {
                Err(e) => Err(DataFusionError::Shared(e.clone())),
                Ok(Outcome::States(_)) if partition >= parts => {
                    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::empty())) as SendableRecordBatchStream)
                }
                Ok(Outcome::Cpu) if partition == 0 => CoalescePartitionsExec::new(super::fresh_plan(&plan.cpu)?).execute(0, super::replay_context(&ctx)),
                Ok(Outcome::Cpu) => Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::empty())) as SendableRecordBatchStream),
                Ok(Outcome::States(all)) if plan.direct => {
                    // COUNT, SUM, MIN and MAX states are the answers: the same columns under the node's schema.
                    let batches = all[partition]
                        .iter()
                        .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()).map_err(DataFusionError::from))
                        .collect::<Vec<_>>();
                    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::iter(batches))) as SendableRecordBatchStream)
                }
                Ok(Outcome::States(all)) => {
                    // Every group is one row of one partition: the final aggregation of each
                    // partition's rows is the answer for its groups.
                    let src = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(all, plan.partial_schema.clone(), None)?;
                    #[allow(deprecated)]
                    let fin = plan.final_agg.clone().with_new_children(vec![src])?;
                    fin.execute(partition, ctx)
                }
            }
        };
        let out = futures::stream::once(fut).try_flatten().inspect_ok(move |b| output_rows.add(b.num_rows()));
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), out)))
    }
}

/// The rows of `batch` dealt into `parts` partitions in slices of `batch_rows`
/// rows: round-robin, or with `hash` by DataFusion's hash partitioner over its
/// expressions (group key columns, at the same positions in the partial state as in
/// the result; slices hashed in parallel). An empty batch goes to partition 0.
pub(crate) fn deal(batch: &RecordBatch, parts: usize, hash: Option<(Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>, usize)>, batch_rows: usize) -> Result<Vec<Vec<RecordBatch>>> {
    use datafusion::physical_plan::metrics::Time;
    use datafusion::physical_plan::repartition::BatchPartitioner;
    use rayon::prelude::*;
    let t = std::time::Instant::now();
    let slices: Vec<RecordBatch> = (0..batch.num_rows()).step_by(batch_rows).map(|at| batch.slice(at, batch_rows.min(batch.num_rows() - at))).collect();
    let mut out = vec![Vec::new(); hash.as_ref().map_or(parts, |h| h.1)];
    match hash {
        None => {
            for (k, b) in slices.into_iter().enumerate() {
                out[k % parts].push(b);
            }
        }
        Some((exprs, n)) => {
            let dealt = slices
                .into_par_iter()
                .map(|b| {
                    let mut p = BatchPartitioner::new_hash_partitioner(exprs.clone(), n, Time::new())?;
                    let mut out: Vec<(usize, RecordBatch)> = Vec::new();
                    p.partition(b, |i, part| {
                        out.push((i, part));
                        Ok(())
                    })?;
                    Ok(out)
                })
                .collect::<Result<Vec<_>>>()?;
            for (i, b) in dealt.into_iter().flatten() {
                out[i].push(b);
            }
            log::debug!("GPU aggregate: {} groups hashed into {n} partitions in {:?}", batch.num_rows(), t.elapsed());
        }
    }
    if batch.num_rows() == 0 {
        out[0].push(batch.clone());
    }
    Ok(out)
}

/// Running totals of one value column over the chunks.
#[derive(Clone, Default)]
struct Totals {
    count: Vec<u64>,
    sum: Vec<i128>,
    min: Vec<Option<i64>>,
    max: Vec<Option<i64>>,
}

impl Totals {
    fn new(g: usize) -> Self {
        Totals { count: vec![0; g], sum: vec![0; g], min: vec![None; g], max: vec![None; g] }
    }
}

/// Runs the kernel and the grouped aggregation over every chunk; returns the
/// partial state of the groups that have rows.
fn partial_states(dev: &GpuContext, plan: &GpuAggregatePlan) -> Result<RecordBatch> {
    let t0 = std::time::Instant::now();
    let g = plan.groups as usize;
    let nvals = plan.nvals;
    let mut regions = plan
        .quantile_inputs
        .iter()
        .map(|&kind| RegionSelect::new(dev, plan.groups, kind, plan.data.table.num_rows))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(gpu_err)?;
    let mut rows = vec![0u64; g];
    let mut totals = vec![Totals::new(g); nvals];
    // The few-groups kernel folds rows in registers first
    // (`GroupAggOptions::small_groups`, at most 8 groups), from
    // `tuning::aggregate::SMALL_GROUPS_MIN` groups.
    let small_groups = plan.groups >= crate::tuning::aggregate::SMALL_GROUPS_MIN;
    let opts = GroupAggOptions { min_max: plan.min_max, checked_sums: false, small_groups, ..Default::default() };
    let agg_err = |e: GroupAggError| match e {
        GroupAggError::Gpu(e) => gpu_err(e),
        other => DataFusionError::Internal(other.to_string()),
    };
    // Without MIN/MAX the chunks add into one set of device tables, read back once
    // (`DenseAccumulator`); otherwise each chunk's tables come back on their own.
    let one_readback = !plan.min_max
        && plan.groups + 1 <= ridgeline_operators::group_agg::dense_capacity(dev)
        && (plan.data.table.num_rows as u64) < u32::MAX as u64;
    let mut acc = if one_readback { Some(DenseAccumulator::new(dev, plan.groups + 1, nvals, &opts).map_err(agg_err)?) } else { None };
    let mut merge = |out: GroupAggOutput| -> Result<()> {
        for x in 0..g {
            rows[x] += out.rows[x];
        }
        for (t, c) in totals.iter_mut().zip(&out.columns) {
            let ColumnAgg::I64(a) = c else { return Err(DataFusionError::Internal("f64 column in a GPU aggregate".into())) };
            for x in 0..g {
                t.count[x] += a.count[x];
                t.sum[x] += a.sum128[x].unwrap_or(0);
                t.min[x] = match (t.min[x], a.min[x]) {
                    (Some(p), Some(q)) => Some(p.min(q)),
                    (p, q) => p.or(q),
                };
                t.max[x] = match (t.max[x], a.max[x]) {
                    (Some(p), Some(q)) => Some(p.max(q)),
                    (p, q) => p.or(q),
                };
            }
        }
        Ok(())
    };
    for_each_chunk(dev, plan, false, |outputs, _| {
        let gids = device(&outputs[0])?;
        for (i, rs) in regions.iter_mut().enumerate() {
            let tags = device(&outputs[1 + nvals + 2 * i])?;
            let vals = device(&outputs[2 + nvals + 2 * i])?;
            rs.add(dev, tags.values, vals.values).map_err(gpu_err)?;
        }
        if let Some(acc) = acc.as_mut() {
            let values = outputs[1..1 + nvals].iter().map(device).collect::<Result<Vec<_>>>()?;
            return acc.add(dev, gids.values, &values).map_err(agg_err);
        }
        let values = outputs[1..1 + nvals]
            .iter()
            .map(|c| device(c).map(|column| AggColumn { kind: AggKind::I64, column }))
            .collect::<Result<Vec<_>>>()?;
        let out = group_agg_gpu(dev, gids.values, plan.groups + 1, &values, &opts).map_err(agg_err)?;
        merge(out)
    })?;
    if let Some(acc) = acc {
        merge(acc.finish(dev).map_err(agg_err)?)?;
    }
    log::debug!("GPU aggregate partial states of {g} groups: chunks done after {:?}", t0.elapsed());
    // Quantiles: every group a region, selected on the device; the answers of all groups.
    let mut answers: Vec<Option<ArrayRef>> = vec![None; plan.quantiles.len()];
    for (i, rs) in regions.into_iter().enumerate() {
        let aggs: Vec<usize> = (0..plan.quantiles.len()).filter(|&q| plan.quantiles[q].input == i).collect();
        let ranks_of = |n: usize| aggs.iter().flat_map(|&q| plan.quantiles[q].quantile.ranks(n)).collect::<Vec<u64>>();
        let (stats, st) = rs.finish(dev, &ranks_of, plan.region_gpu_min_rows).map_err(gpu_err)?;
        log::debug!("GPU quantile regions: {st:?}");
        // Each group's keys are the aggregates' ranks back to back, in `aggs` order.
        let mut per_agg: Vec<Vec<(usize, Vec<u64>)>> = vec![Vec::with_capacity(stats.len()); aggs.len()];
        for (n, keys) in &stats {
            let mut rest = keys.as_slice();
            for (mine, &q) in per_agg.iter_mut().zip(&aggs) {
                let k = if *n == 0 { 0 } else { plan.quantiles[q].quantile.ranks(*n).len() };
                let (own, tail) = rest.split_at(k);
                mine.push((*n, own.to_vec()));
                rest = tail;
            }
        }
        for (mine, &q) in per_agg.iter().zip(&aggs) {
            answers[q] = Some(plan.quantiles[q].quantile.answers(mine)?);
        }
    }
    // Groups with rows, in group-id order.
    let live: Vec<usize> = (0..g).filter(|&x| rows[x] > 0).collect();
    let pick = |v: &[u64]| live.iter().map(|&x| v[x]).collect::<Vec<_>>();
    let cols = totals
        .iter()
        .map(|t| LiveColumn {
            count: pick(&t.count),
            sum: live.iter().map(|&x| t.sum[x]).collect(),
            min: live.iter().map(|&x| t.min[x]).collect(),
            max: live.iter().map(|&x| t.max[x]).collect(),
        })
        .collect::<Vec<_>>();
    let rows = pick(&rows);
    assemble(plan, &live, &rows, &cols, &answers)
}

/// The group-table path: every chunk's rows go into one [`GroupTable`] in device
/// memory; only the live groups come back.
fn table_states(dev: &GpuContext, plan: &GpuAggregatePlan, having: &[TableCond]) -> Result<RecordBatch> {
    let t0 = std::time::Instant::now();
    let nvals = plan.nvals;
    let min_max: Vec<bool> = (0..nvals).map(|c| plan.states.iter().any(|s| matches!(s, AggState::Min(x) | AggState::Max(x) if *x == c))).collect();
    let mut table = GroupTable::new(dev, plan.groups, &min_max).map_err(gpu_err)?;
    for_each_chunk(dev, plan, true, |outputs, enc| {
        let gids = device(&outputs[0])?;
        let values = outputs[1..1 + nvals].iter().map(device).collect::<Result<Vec<_>>>()?;
        table.add(dev, gids.values, &values, enc).map_err(gpu_err)
    })?;
    let t_add = t0.elapsed();
    let out = table.finish(dev, having).map_err(gpu_err)?;
    let t_finish = t0.elapsed();
    let live: Vec<usize> = out.ids.iter().map(|&x| x as usize).collect();
    // MIN / MAX are there for the columns that keep them.
    let batch = assemble(plan, &live, &out.rows, &out.columns, &[]);
    log::debug!(
        "GPU group table of {} groups: {} live; chunks {:?}, compaction and readback {:?}, arrays {:?}",
        plan.groups,
        live.len(),
        t_add,
        t_finish - t_add,
        t0.elapsed() - t_finish
    );
    batch
}

/// Runs the plan's row program over every resident chunk (the table's columns plus
/// the dictionary keys' codes) and hands its outputs to `f`, freed after it returns.
/// Kernels that can raise an error are checked after the last chunk: by then every
/// kernel has finished, so reading their error words waits for nothing.
///
/// With `record`, `f` gets an encoder holding the chunk's row program and records
/// its own work after it: the chunks go to the device in one submission (a new
/// one every [`RECORD_FLUSH_BYTES`] of held outputs), the outputs kept until it
/// is made, instead of two submissions per chunk (about 0.1 ms each: TPC-H Q15 at
/// SF 1 spent 3-4.5 ms of device time per aggregation over 16 chunks). Without
/// it `f` gets `None` and may submit and read back as it likes.
fn for_each_chunk(dev: &GpuContext, plan: &GpuAggregatePlan, record: bool, mut f: impl FnMut(&[GpuColumn], Option<&mut ridgeline_operators::wgpu::CommandEncoder>) -> Result<()>) -> Result<()> {
    let aug_schema = plan.program.schema().clone();
    let mut pending_errors = Vec::new();
    let t0 = std::time::Instant::now();
    let (mut t_eval, mut t_f, mut n, mut submits) = (std::time::Duration::ZERO, std::time::Duration::ZERO, 0usize, 0usize);
    let mut enc = record.then(|| dev.encoder("aggregate-chunks"));
    let mut held: Vec<crate::gpu_expr::Evaluated> = Vec::new();
    let mut held_bytes = 0u64;
    let mut flush = |enc: &mut Option<ridgeline_operators::wgpu::CommandEncoder>, held: &mut Vec<crate::gpu_expr::Evaluated>, pending: &mut Vec<crate::gpu_expr::Evaluated>| -> Result<()> {
        if let Some(e) = enc.take() {
            dev.submit(e).map_err(gpu_err)?;
            submits += 1;
        }
        for mut eval in held.drain(..) {
            eval.outputs.clear();
            pending.push(eval);
        }
        Ok(())
    };
    for (ci, chunk) in plan.data.chunks.iter().enumerate() {
        if chunk.num_rows == 0 {
            continue;
        }
        let mut cols: Vec<Arc<GpuColumn>> = plan.table_cols.iter().map(|&t| chunk.columns[t].clone()).collect();
        for k in &plan.keys {
            if let GroupKey::Dict { dict, .. } = k {
                cols.push(dict.codes[ci].clone());
            }
        }
        for d in &plan.str_codes {
            cols.push(d.codes[ci].clone());
        }
        let batch = GpuBatch { schema: aug_schema.clone(), columns: cols, num_rows: chunk.num_rows, host: None };
        let t = std::time::Instant::now();
        let mut eval = match enc.as_mut() {
            Some(e) => plan.program.evaluate_into(dev, &batch, e)?,
            None => plan.program.evaluate(dev, &batch)?,
        };
        let te = t.elapsed();
        f(&eval.outputs, enc.as_mut())?;
        t_f += t.elapsed() - te;
        t_eval += te;
        n += 1;
        if enc.is_some() {
            held_bytes += eval.outputs.iter().map(GpuColumn::device_bytes).sum::<u64>();
            held.push(eval);
            if held_bytes >= record_flush_bytes() {
                flush(&mut enc, &mut held, &mut pending_errors)?;
                enc = Some(dev.encoder("aggregate-chunks"));
                held_bytes = 0;
            }
        } else {
            // Free the outputs now; keep the error word.
            eval.outputs.clear();
            pending_errors.push(eval);
        }
    }
    flush(&mut enc, &mut held, &mut pending_errors)?;
    let t = std::time::Instant::now();
    crate::gpu_expr::Evaluated::check_errors_many(dev, &pending_errors)?;
    log::debug!(
        "GPU aggregate chunks: {n} in {:?} (row program {t_eval:?}, aggregation {t_f:?}, {submits} recorded submissions, error checks {:?})",
        t0.elapsed(),
        t.elapsed()
    );
    Ok(())
}

use crate::tuning::aggregate::RECORD_FLUSH_BYTES;

static FLUSH_OVERRIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`RECORD_FLUSH_BYTES`], unless [`set_record_flush_bytes`] set another bound.
fn record_flush_bytes() -> u64 {
    match FLUSH_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => RECORD_FLUSH_BYTES,
        b => b,
    }
}

/// Tests: the held output bytes after which the GPU aggregation submits what it
/// recorded (0 restores the default), so small inputs take several submissions.
#[doc(hidden)]
pub fn set_record_flush_bytes(bytes: u64) {
    FLUSH_OVERRIDE.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// A device column's values and validity.
fn device(c: &GpuColumn) -> Result<Column<'_>> {
    match &c.data {
        ColumnData::Device { values, validity, .. } => Ok(Column { values, validity: validity.as_ref() }),
        ColumnData::Host(_) => Err(DataFusionError::Internal("GPU aggregate output on the host".into())),
    }
}

/// The partial state batch of the live groups (`live`: group ids; `rows` and `cols`
/// aligned with them; `answers`: each quantile's answers for all groups).
fn assemble(plan: &GpuAggregatePlan, live: &[usize], rows: &[u64], cols: &[LiveColumn], answers: &[Option<ArrayRef>]) -> Result<RecordBatch> {
    let schema = plan.partial_schema.clone();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    // Mixed radix, first key most significant: key k's code is worth the product
    // of the later keys' code counts.
    let mut strides = vec![1u64; plan.keys.len()];
    for k in (1..plan.keys.len()).rev() {
        strides[k - 1] = strides[k] * plan.keys[k].card() as u64;
    }
    for (k, key) in plan.keys.iter().enumerate() {
        let codes = live.iter().map(|&x| (x as u64 / strides[k]) % key.card() as u64);
        let field = schema.field(arrays.len());
        let a: ArrayRef = match key {
            GroupKey::Dict { dict, .. } => {
                let n = dict.values.len() as u64;
                let idx = UInt32Array::from(codes.map(|c| (c < n).then_some(c as u32)).collect::<Vec<_>>());
                arrow::compute::take(dict.values.as_ref(), &idx, None)?
            }
            GroupKey::Range { min, card, nullable, data_type } => {
                let (stride, card, min) = (strides[k], *card as u64, *min as i128);
                let code = move |i: usize| (live[i] as u64 / stride) % card;
                let null = *nullable;
                int_array_fn(data_type, live.len(), &|i| min + code(i) as i128, &|i| !(null && code(i) == card - 1))?
            }
        };
        arrays.push(cast_to(a, field.data_type())?);
    }
    let n = live.len();
    for st in &plan.states {
        let mut push = |value: &(dyn Fn(usize) -> i128 + Sync), valid: &(dyn Fn(usize) -> bool + Sync)| -> Result<()> {
            let dt = schema.field(arrays.len()).data_type().clone();
            arrays.push(int_array_fn(&dt, n, value, valid)?);
            Ok(())
        };
        let all = |_: usize| true;
        match *st {
            AggState::CountRows => push(&|i| rows[i] as i128, &all)?,
            AggState::Count(c) => push(&|i| cols[c].count[i] as i128, &all)?,
            AggState::Sum(c) => push(&|i| cols[c].sum[i], &|i| cols[c].count[i] > 0)?,
            AggState::Avg(c) => {
                // DataFusion's AVG state: count and sum both NULL for a group without values.
                push(&|i| cols[c].count[i] as i128, &|i| cols[c].count[i] > 0)?;
                push(&|i| cols[c].sum[i], &|i| cols[c].count[i] > 0)?;
            }
            AggState::Min(c) => push(&|i| cols[c].min[i].unwrap_or(0) as i128, &|i| cols[c].min[i].is_some())?,
            AggState::Max(c) => push(&|i| cols[c].max[i].unwrap_or(0) as i128, &|i| cols[c].max[i].is_some())?,
            AggState::Quantile(q) => {
                let all = answers
                    .get(q)
                    .and_then(|a| a.as_ref())
                    .ok_or_else(|| DataFusionError::Internal("quantile without an answer".into()))?;
                let idx = UInt32Array::from(live.iter().map(|&x| x as u32).collect::<Vec<_>>());
                let a = arrow::compute::take(all.as_ref(), &idx, None)?;
                let dt = schema.field(arrays.len()).data_type().clone();
                arrays.push(cast_to(a, &dt)?);
            }
        }
    }
    let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(schema, arrays, &opts)?)
}

fn cast_to(a: ArrayRef, dt: &DataType) -> Result<ArrayRef> {
    if a.data_type() == dt {
        return Ok(a);
    }
    Ok(arrow::compute::cast(&a, dt)?)
}

/// [`int_array`] from `n` values given by `value` (NULL where `valid` says so),
/// built straight into the typed buffers (in parallel for large outputs: a group
/// table can return millions of groups).
pub(crate) fn int_array_fn(dt: &DataType, n: usize, value: &(dyn Fn(usize) -> i128 + Sync), valid: &(dyn Fn(usize) -> bool + Sync)) -> Result<ArrayRef> {
    use arrow::buffer::NullBuffer;
    use rayon::prelude::*;
    use DataType::*;
    fn gen<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
        if n >= 1 << 16 { (0..n).into_par_iter().map(f).collect() } else { (0..n).map(f).collect() }
    }
    let bits = gen(n, valid);
    let nulls = (!bits.iter().all(|&b| b)).then(|| NullBuffer::from(bits));
    Ok(match dt {
        Decimal128(p, s) => Arc::new(Decimal128Array::new(gen(n, value).into(), nulls).with_precision_and_scale(*p, *s)?),
        Int64 => Arc::new(Int64Array::new(gen(n, |i| value(i) as i64).into(), nulls)),
        UInt64 => Arc::new(UInt64Array::new(gen(n, |i| value(i) as u64).into(), nulls)),
        Int8 | Int16 | Int32 | UInt8 | UInt16 | UInt32 => {
            let a: ArrayRef = Arc::new(Int64Array::new(gen(n, |i| value(i) as i64).into(), nulls));
            arrow::compute::cast(&a, dt)?
        }
        _ => int_array(dt, (0..n).map(|i| valid(i).then(|| value(i))).collect())?,
    })
}

/// An array of type `dt` from integer values: decimals by their unscaled value,
/// Int64 and UInt64 wrapped (DataFusion's SUM wraps), other integer, date and
/// time types from their 64-bit value.
pub(crate) fn int_array(dt: &DataType, v: Vec<Option<i128>>) -> Result<ArrayRef> {
    use DataType::*;
    Ok(match dt {
        Decimal128(p, s) => Arc::new(Decimal128Array::from(v).with_precision_and_scale(*p, *s)?),
        UInt64 => Arc::new(UInt64Array::from(v.into_iter().map(|x| x.map(|x| x as u64)).collect::<Vec<_>>())),
        Int64 => Arc::new(Int64Array::from(v.into_iter().map(|x| x.map(|x| x as i64)).collect::<Vec<_>>())),
        Int8 | Int16 | Int32 | UInt8 | UInt16 | UInt32 => {
            let a: ArrayRef = Arc::new(Int64Array::from(v.into_iter().map(|x| x.map(|x| x as i64)).collect::<Vec<_>>()));
            arrow::compute::cast(&a, dt)?
        }
        Date64 | Timestamp(_, _) | Duration(_) => {
            let a = Int64Array::from(v.into_iter().map(|x| x.map(|x| x as i64)).collect::<Vec<_>>());
            let data = a.into_data().into_builder().data_type(dt.clone()).build()?;
            arrow::array::make_array(data)
        }
        other => return Err(DataFusionError::Internal(format!("GPU aggregate state of type {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_arrays_of_every_state_type() {
        let v = vec![Some(5i128), None, Some(-3)];
        let a = int_array(&DataType::Decimal128(38, 4), v.clone()).unwrap();
        assert_eq!(a.data_type(), &DataType::Decimal128(38, 4));
        assert!(a.is_null(1));
        let a = int_array(&DataType::Int32, v.clone()).unwrap();
        assert_eq!(a.as_any().downcast_ref::<arrow::array::Int32Array>().unwrap().value(2), -3);
        let a = int_array(&DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None), v.clone()).unwrap();
        assert_eq!(a.len(), 3);
        // SUM(BIGINT) wraps as DataFusion's does.
        let a = int_array(&DataType::Int64, vec![Some(i64::MAX as i128 + 1)]).unwrap();
        assert_eq!(a.as_any().downcast_ref::<Int64Array>().unwrap().value(0), i64::MIN);
        assert!(int_array(&DataType::Utf8, vec![]).is_err());
    }
}
