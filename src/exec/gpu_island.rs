//! `GpuIslandExec`: an aggregation over host inputs (Parquet, CSV, JSON and
//! Arrow files, memory tables) that becomes a GPU island when it runs.
//!
//! The GPU rules that take whole chains (`GpuAggregateRule`, `GpuTopKRule`, the
//! string-code rewrites) plan over resident tables: their exact column ranges,
//! dictionaries and row counts decide the group tags and the kernels. Host inputs
//! have none of that at planning time, so in mode `on` the island rule wraps the
//! highest aggregation whose inputs are all host sources in this node, and at run
//! time it
//! 1. reads each host input once (all its partitions) and uploads it as a
//!    query-local resident table (the same chunked upload as
//!    `Ridgeline::register_resident`, string dictionaries built on demand);
//! 2. replaces the input by a scan of that table and runs the GPU rules (filter,
//!    aggregate, top-k, repartition, join prefilter, join, boundaries) over the
//!    subtree, now with exact statistics;
//! 3. runs the result to the end and deals its rows into this node's output
//!    partitions (by DataFusion's hash partitioner where the parent expects hash
//!    partitioning).
//!
//! Nothing is handed up before the island has finished, so a GPU that fails on
//! the way (lost, out of memory, over the budget) costs one warning and the
//! subtree as planned runs instead: never a partial answer. EXPLAIN shows the
//! subtree as planned under this node; EXPLAIN ANALYZE the island as it ran (its
//! operators and their metrics) and names the GPU operators in it.
use crate::config::{device_for, RidgelineOptions};
use crate::gpu_batch::is_gpu_error;
use crate::resident::ResidentData;
use arrow::array::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties};
use futures::TryStreamExt;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The island's output, per output partition.
type Parts = Arc<Vec<Vec<RecordBatch>>>;

/// An aggregation over host inputs, run as a GPU island (see the module docs).
#[derive(Debug)]
pub struct GpuIslandExec {
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
    result: Arc<tokio::sync::OnceCell<std::result::Result<Parts, Arc<DataFusionError>>>>,
    /// The GPU operators of the plan that ran (`None` before a run, or after a fallback).
    ran: Arc<OnceLock<Option<String>>>,
    /// The island as it ran: after a run, the node's child (so EXPLAIN ANALYZE
    /// shows the operators that ran, with their metrics).
    executed: Arc<OnceLock<Arc<dyn ExecutionPlan>>>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuIslandExec {
    /// Wraps a subtree whose leaves are host sources. Its output keeps the
    /// subtree's partitioning; it promises no order.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let p = input.properties();
        let props = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            p.output_partitioning().clone(),
            datafusion::physical_plan::execution_plan::EmissionType::Final,
            p.boundedness,
        );
        GpuIslandExec {
            input,
            props: Arc::new(props),
            result: Default::default(),
            ran: Default::default(),
            executed: Default::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
    /// The subtree as planned.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for GpuIslandExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "GpuIslandExec: host inputs uploaded when it runs")?;
        match self.ran.get() {
            Some(Some(ops)) => write!(f, ", ran: {ops}"),
            Some(None) => write!(f, ", ran: the subtree as planned (GPU fallback)"),
            None => Ok(()),
        }
    }
}

impl ExecutionPlan for GpuIslandExec {
    fn name(&self) -> &str {
        "GpuIslandExec"
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
        vec![self.executed.get().unwrap_or(&self.input)]
    }
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuIslandExec::new(children.swap_remove(0))))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let (input, cell, ran, executed) = (self.input.clone(), self.result.clone(), self.ran.clone(), self.executed.clone());
        let partitioning = self.props.output_partitioning().clone();
        let upload_rows = MetricBuilder::new(&self.metrics).global_counter("uploaded_rows");
        let upload_time = MetricBuilder::new(&self.metrics).subset_time("upload_time", partition);
        let out_schema = schema.clone();
        let parts = async move {
            let r = cell
                .get_or_init(|| async move {
                    run(input, ctx, partitioning, out_schema, ran, executed, upload_rows, upload_time).await.map_err(Arc::new)
                })
                .await;
            let parts = r.clone().map_err(DataFusionError::Shared)?;
            let batches = parts.get(partition).cloned().unwrap_or_default();
            Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(Ok)))
        };
        let stream = futures::stream::once(parts).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Whether `p` is a leaf the island reads and uploads.
pub(crate) fn is_host_source(p: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::datasource::source::DataSourceExec;
    p.children().is_empty() && (p.downcast_ref::<DataSourceExec>().is_some() || p.downcast_ref::<super::HostScanExec>().is_some())
}

/// Leaves that hold no rows to upload (VALUES-less subqueries, empty relations).
pub(crate) fn is_rowless_leaf(p: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
    p.children().is_empty() && (p.downcast_ref::<EmptyExec>().is_some() || p.downcast_ref::<PlaceholderRowExec>().is_some())
}

/// Runs the island, or, where the GPU fails, the subtree as planned.
async fn run(
    input: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
    partitioning: Partitioning,
    schema: arrow::datatypes::SchemaRef,
    ran: Arc<OnceLock<Option<String>>>,
    executed: Arc<OnceLock<Arc<dyn ExecutionPlan>>>,
    upload_rows: datafusion::physical_plan::metrics::Count,
    upload_time: datafusion::physical_plan::metrics::Time,
) -> Result<Parts> {
    match island(&input, &ctx, &partitioning, &schema, &ran, &executed, &upload_rows, &upload_time).await {
        Ok(parts) => Ok(parts),
        Err(e) if is_gpu_error(&e) || matches!(e, DataFusionError::Context(ref c, _) if c == UPLOAD) => {
            warn_once(&e);
            let _ = ran.set(None);
            // A fresh copy: the island read the file scans once already (their shared
            // work queues are drained) and may have run repartitions part-way.
            let parts = datafusion::physical_plan::collect_partitioned(super::fresh_plan(&input)?, super::replay_context(&ctx)).await?;
            Ok(Arc::new(parts))
        }
        Err(e) => Err(e),
    }
}

const UPLOAD: &str = "GPU island upload";

fn warn_once(e: &DataFusionError) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!("a GPU island over host inputs runs on the CPU instead: {e}");
    } else {
        log::debug!("a GPU island over host inputs runs on the CPU instead: {e}");
    }
}

/// The session's GPU placement rules, then DataFusion's cooperative wrapping: the
/// new scans yield to the runtime like the planned plan's leaves did (a query
/// timeout or a cancelled client must get through a long join).
fn gpu_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = crate::optimizer::gpu_placement_rules();
    rules.push(Arc::new(datafusion::physical_optimizer::ensure_coop::EnsureCooperative::new()));
    rules
}

/// The subtree without its CPU/GPU boundary nodes (the rules put them back).
fn strip_boundaries(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .clone()
        .transform_up(|n| {
            if n.downcast_ref::<super::GpuLoadExec>().is_some() || n.downcast_ref::<super::GpuUnloadExec>().is_some() {
                return Ok(Transformed::yes(n.children()[0].clone()));
            }
            Ok(Transformed::no(n))
        })?
        .data)
}

fn host_leaves(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<dyn ExecutionPlan>>) {
    if is_host_source(plan) {
        if !out.iter().any(|p| Arc::ptr_eq(p, plan)) {
            out.push(plan.clone());
        }
        return;
    }
    for c in plan.children() {
        host_leaves(c, out);
    }
}

fn key(p: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(p) as *const () as usize
}

async fn island(
    input: &Arc<dyn ExecutionPlan>,
    ctx: &Arc<TaskContext>,
    partitioning: &Partitioning,
    schema: &arrow::datatypes::SchemaRef,
    ran: &OnceLock<Option<String>>,
    executed: &OnceLock<Arc<dyn ExecutionPlan>>,
    upload_rows: &datafusion::physical_plan::metrics::Count,
    upload_time: &datafusion::physical_plan::metrics::Time,
) -> Result<Parts> {
    let config = ctx.session_config().options().clone();
    let opts = RidgelineOptions::from_config(&config);
    let Some(dev) = device_for(opts.mode()?)? else {
        return Err(DataFusionError::Context(UPLOAD.into(), Box::new(DataFusionError::Execution("no GPU".into()))));
    };
    let plan = strip_boundaries(input)?;
    let mut leaves = Vec::new();
    host_leaves(&plan, &mut leaves);
    // Each host input read once and uploaded as a query-local resident table.
    let chunk_rows = opts.chunk_rows(Some(&dev));
    let parts = config.execution.target_partitions;
    let mut scans: HashMap<usize, Arc<dyn ExecutionPlan>> = HashMap::new();
    // The inputs' host copies count against the query's memory pool while the
    // island lives; where they do not fit, the subtree as planned streams instead.
    let reservation = datafusion::execution::memory_pool::MemoryConsumer::new("GpuIslandExec").register(ctx.memory_pool());
    for (i, leaf) in leaves.iter().enumerate() {
        let batches: Vec<RecordBatch> = datafusion::physical_plan::collect(leaf.clone(), ctx.clone()).await?;
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        reservation.try_grow(bytes).map_err(|e| DataFusionError::Context(UPLOAD.into(), Box::new(e)))?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let scan: Arc<dyn ExecutionPlan> = if rows == 0 {
            Arc::new(EmptyExec::new(leaf.schema()).with_partitions(leaf.output_partitioning().partition_count()))
        } else {
            let _t = upload_time.timer();
            let (dev, s, name) = (dev.clone(), leaf.schema(), format!("island_input_{i}"));
            let data = tokio::task::spawn_blocking(move || ResidentData::upload(&dev, &name, s, &batches, chunk_rows, parts))
                .await
                .map_err(super::blocking_err)?
                .map_err(|e| if is_gpu_error(&e) { e } else { DataFusionError::Context(UPLOAD.into(), Box::new(e)) })?;
            upload_rows.add(rows);
            Arc::new(super::GpuScanExec::try_new(Arc::new(data), None, leaf.output_partitioning().partition_count())?)
        };
        scans.insert(key(leaf), scan);
    }
    let plan = plan
        .transform_up(|n| match scans.get(&key(&n)) {
            Some(s) => Ok(Transformed::yes(s.clone())),
            None => Ok(Transformed::no(n)),
        })?
        .data;
    // Its own execution state: the nodes it shares with the subtree as planned
    // (repartitions, joins) must be new for a fallback to start from nothing.
    let mut plan = super::fresh_plan(&plan)?;
    for rule in gpu_rules() {
        plan = rule.optimize(plan, &config)?;
    }
    let ops = super::gpu_operator_names(&plan);
    log::debug!("GPU island plan:\n{}", datafusion::physical_plan::displayable(plan.as_ref()).indent(true));
    let batches = datafusion::physical_plan::collect(plan.clone(), ctx.clone()).await?;
    let n = partitioning.partition_count().max(1);
    let mut out = vec![Vec::new(); n];
    match partitioning {
        Partitioning::Hash(exprs, _) if n > 1 => {
            let rows = ctx.session_config().batch_size().max(1);
            for b in &batches {
                for (i, dealt) in super::gpu_aggregate::deal(b, n, Some((exprs.clone(), n)), rows)?.into_iter().enumerate() {
                    out[i].extend(dealt.into_iter().filter(|d| d.num_rows() > 0));
                }
            }
        }
        _ => out[0] = batches,
    }
    // The island's rows under this node's schema (field names and nullability as planned).
    for part in out.iter_mut() {
        for b in part.iter_mut() {
            if b.schema() != *schema {
                *b = RecordBatch::try_new(schema.clone(), b.columns().to_vec())?;
            }
        }
    }
    let _ = executed.set(plan);
    let _ = ran.set(Some(if ops.is_empty() { "no GPU operator".into() } else { ops.join(", ") }));
    Ok(Arc::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;

    #[test]
    fn rowless_leaves_are_not_host_sources() {
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        let e: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let p: Arc<dyn ExecutionPlan> = Arc::new(PlaceholderRowExec::new(schema));
        assert!(is_rowless_leaf(&e) && is_rowless_leaf(&p));
        assert!(!is_host_source(&e) && !is_host_source(&p));
    }
}
