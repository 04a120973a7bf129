//! `HostScanExec`: reads a [`HostTable`](crate::resident::HostTable), an in-memory
//! table chunked and described (exact row count, NULL counts, min / max) like a
//! resident one. Its output partitions, batches and statistics are those a
//! [`GpuScanExec`](super::GpuScanExec) gives from its host copy, so DataFusion
//! plans both alike; both read through [`HostData`]'s methods below.
use crate::resident::HostData;
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use datafusion::common::ScalarValue;
use datafusion::config::ConfigOptions;
use datafusion::physical_expr::expressions::{CaseExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::DynamicFilterTracking;
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use datafusion::physical_plan::filter_pushdown::{ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown};
use std::sync::Arc;

impl HostData {
    /// Rows of output partition `p` of `partitions`: chunk `i` goes to partition
    /// `i % partitions`.
    pub(crate) fn partition_rows(&self, partitions: usize, p: usize) -> usize {
        self.host.iter().enumerate().filter(|(i, _)| i % partitions == p).map(|(_, b)| b.num_rows()).sum()
    }

    /// Output partition `partition` of `partitions`, projected (`out_schema`), cut
    /// into `batch_size` rows, with rows failing any of `filters` (dynamic filters
    /// of the plan: a hash join's build-side keys, a top-k's threshold; evaluated on
    /// each batch as it is read, with their value at that moment) left out, and,
    /// with `masks` (one per chunk, `None`: every row), the rows whose mask bit is
    /// not set (a semi-join prefilter's selection, computed on the device).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn filtered_stream(
        &self,
        out_schema: SchemaRef,
        projection: Option<&[usize]>,
        partitions: usize,
        partition: usize,
        batch_size: usize,
        filters: Vec<Arc<dyn PhysicalExpr>>,
        masks: Option<&[Option<BooleanBuffer>]>,
    ) -> Result<SendableRecordBatchStream> {
        let batch_size = batch_size.max(1);
        let mut chunks = Vec::new();
        for (i, b) in self.host.iter().enumerate() {
            if i % partitions != partition {
                continue;
            }
            let b = match projection {
                Some(p) => b.project(p)?,
                None => b.clone(),
            };
            let mask = masks.and_then(|m| m.get(i).cloned().flatten()).filter(|m| m.len() == b.num_rows());
            chunks.push((b, mask));
        }
        // A chunk is filtered by its mask whole (one selection and one gather per
        // column, not one per batch) when its first batch is polled, then cut into
        // batches. The dynamic filters run when a batch is polled (the iterator is
        // lazy), so a hash join's filter applies once its build side is done.
        let mut skip = vec![0usize; filters.len()];
        let batches = chunks
            .into_iter()
            .flat_map(move |(b, mask)| -> Vec<Result<RecordBatch>> {
                let b = match mask.map(|m| (m.count_set_bits(), m)) {
                    Some((0, _)) => return vec![],
                    Some((k, m)) if k < m.len() => match filter_record_batch(&b, &BooleanArray::new(m, None)) {
                        Ok(b) => b,
                        Err(e) => return vec![Err(e.into())],
                    },
                    _ => b,
                };
                let n = b.num_rows();
                (0..n).step_by(batch_size).map(|o| Ok(b.slice(o, batch_size.min(n - o)))).collect()
            })
            .filter_map(move |b| match b.and_then(|b| apply_filters(&filters, &mut skip, b)) {
                Ok(b) if b.num_rows() == 0 => None,
                r => Some(r),
            });
        Ok(Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(out_schema, futures::stream::iter(batches))))
    }

    /// Statistics of a scan with `projection` (output schema `out_schema`): of the
    /// whole table, or of output partition `p` of `partitions` (row count only).
    pub(crate) fn statistics(&self, out_schema: &SchemaRef, projection: Option<&[usize]>, partition: Option<(usize, usize)>) -> Statistics {
        let mut s = Statistics::new_unknown(out_schema);
        let (rows, bytes) = match partition {
            None => (self.num_rows, self.host_bytes),
            Some((partitions, p)) => {
                let rows = self.partition_rows(partitions, p);
                (rows, (self.host_bytes as f64 * rows as f64 / self.num_rows.max(1) as f64) as usize)
            }
        };
        s.num_rows = Precision::Exact(rows);
        if partition.is_none() {
            s.column_statistics = match projection {
                Some(p) => p.iter().map(|&i| self.column_stats[i].clone()).collect(),
                None => self.column_stats.clone(),
            };
        }
        let frac = out_schema.fields().len() as f64 / self.schema.fields().len().max(1) as f64;
        s.total_byte_size = Precision::Inexact((bytes as f64 * frac) as usize);
        s
    }
}

use crate::tuning::host_scan::SKIP_AFTER_UNSELECTIVE;
use crate::tuning::host_scan::KEEP_AT_MOST;

/// `batch` without the rows some filter is not true for; filters whose current
/// value is the literal `true` (a dynamic filter not yet filled in) cost nothing.
/// A filter that keeps more than [`KEEP_AT_MOST`] of a batch is not evaluated for
/// the next [`SKIP_AFTER_UNSELECTIVE`] batches (`skip` counts down per filter): it
/// is only an early cut, and a hash join's key lookup (a cache miss per row, plus
/// the hash of its partition in partitioned mode) costs about what the join's own
/// probe does, so it pays only where it removes nearly all rows (TPC-H q17 and q18
/// at SF 1 got 1.6-1.9x faster; q3, q9 and q21, whose filters keep 10-50%, 1.5-1.9x
/// slower when every batch was filtered).
fn apply_filters(filters: &[Arc<dyn PhysicalExpr>], skip: &mut [usize], mut batch: RecordBatch) -> Result<RecordBatch> {
    for (f, skip) in filters.iter().zip(skip.iter_mut()) {
        if *skip > 0 {
            *skip -= 1;
            continue;
        }
        let cur = snapshot_physical_expr(Arc::clone(f))?;
        if let Some(l) = cur.downcast_ref::<Literal>() {
            if l.value() == &ScalarValue::Boolean(Some(true)) {
                continue;
            }
        }
        // A partitioned hash join's filter routes every row by the hash of its
        // key (`CASE hash % n WHEN ..`): measured 3x the cost of the join's own
        // probe per row (TPC-H q4 at SF 1: 46 -> 147 ms), so never applied.
        if cur.downcast_ref::<CaseExpr>().is_some() {
            *skip = usize::MAX;
            continue;
        }
        let v = cur.evaluate(&batch)?.into_array(batch.num_rows())?;
        let Some(mask) = v.as_any().downcast_ref::<BooleanArray>() else {
            return datafusion::common::internal_err!("a pushed-down filter gave {} values, not booleans", v.data_type());
        };
        let kept = mask.true_count();
        if kept as f64 > KEEP_AT_MOST * mask.len() as f64 {
            *skip = SKIP_AFTER_UNSELECTIVE;
        }
        if kept == mask.len() {
            continue;
        }
        batch = filter_record_batch(&batch, mask)?;
        if batch.num_rows() == 0 {
            break;
        }
    }
    Ok(batch)
}

/// The parent filters of a leaf scan's pushdown: every one answered "not pushed"
/// (parents keep their own operators), and, with `ridgeline.scan_dynamic_filters`
/// on, the dynamic ones of the post phase returned for the scan to apply as an
/// early cut.
pub(crate) fn dynamic_filters(
    phase: FilterPushdownPhase,
    child_pushdown_result: ChildPushdownResult,
    config: &ConfigOptions,
) -> (FilterPushdownPropagation<Arc<dyn ExecutionPlan>>, Vec<Arc<dyn PhysicalExpr>>) {
    let parent: Vec<Arc<dyn PhysicalExpr>> = child_pushdown_result.parent_filters.into_iter().map(|f| f.filter).collect();
    let verdicts = vec![PushedDown::No; parent.len()];
    let wanted = crate::config::RidgelineOptions::from_config(config).scan_dynamic_filters;
    let dynamic = if wanted && phase == FilterPushdownPhase::Post { parent.into_iter().filter(|e| DynamicFilterTracking::classify(e).contains_dynamic_filter()).collect() } else { Vec::new() };
    (FilterPushdownPropagation::with_parent_pushdown_result(verdicts), dynamic)
}

/// `apply_expressions` over a scan's filters.
pub(crate) fn visit_filters(
    filters: &[Arc<dyn PhysicalExpr>],
    f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
    let mut r = datafusion::common::tree_node::TreeNodeRecursion::Continue;
    for e in filters {
        r = f(e)?;
        if r == datafusion::common::tree_node::TreeNodeRecursion::Stop {
            break;
        }
    }
    Ok(r)
}

/// Scan of a host table.
#[derive(Debug)]
pub struct HostScanExec {
    data: Arc<HostData>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    partitions: usize,
    props: Arc<PlanProperties>,
    /// Dynamic filters pushed down from the plan above (hash joins' build-side
    /// keys, top-k thresholds), applied to every batch read.
    filters: Vec<Arc<dyn PhysicalExpr>>,
}

impl HostScanExec {
    /// Scans `data` with an optional projection into `partitions` output partitions
    /// (at most one per chunk).
    pub fn try_new(data: Arc<HostData>, projection: Option<Vec<usize>>, partitions: usize) -> Result<Self> {
        let schema = match &projection {
            Some(p) => Arc::new(data.schema.project(p)?),
            None => data.schema.clone(),
        };
        let partitions = partitions.clamp(1, data.host.len().max(1));
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(HostScanExec { data, projection, schema, partitions, props, filters: Vec::new() })
    }
}

impl DisplayAs for HostScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let cols: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "HostScanExec: table={}, rows={}, chunks={}, projection=[{}]",
            self.data.name,
            self.data.num_rows,
            self.data.host.len(),
            cols.join(", ")
        )?;
        if !self.filters.is_empty() {
            let fs: Vec<String> = self.filters.iter().map(|e| e.to_string()).collect();
            write!(f, ", dynamic_filters=[{}]", fs.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for HostScanExec {
    fn name(&self) -> &str {
        "HostScanExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        visit_filters(&self.filters, f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let bs = ctx.session_config().batch_size();
        self.data.filtered_stream(self.schema.clone(), self.projection.as_deref(), self.partitions, partition, bs, self.filters.clone(), None)
    }
    /// Takes the dynamic filters of the second (post-optimization) pushdown phase:
    /// they only drop rows the operator that made them would drop anyway, so the
    /// parents are told they were not pushed (nothing above changes) and the scan
    /// applies them as an early cut. Static filters stay where they are (a GPU
    /// filter may take them).
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let (mut prop, dynamic) = dynamic_filters(phase, child_pushdown_result, config);
        if !dynamic.is_empty() {
            let mut node = HostScanExec::try_new(self.data.clone(), self.projection.clone(), self.partitions)?;
            node.filters = self.filters.iter().cloned().chain(dynamic).collect();
            prop = prop.with_updated_node(Arc::new(node) as Arc<dyn ExecutionPlan>);
        }
        Ok(prop)
    }
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        Ok(Arc::new(self.data.statistics(&self.schema, self.projection.as_deref(), partition.map(|p| (self.partitions, p)))))
    }
}
