//! `HostScanExec`: reads a [`HostTable`](crate::resident::HostTable), an in-memory
//! table chunked and described (exact row count, NULL counts, min / max) like a
//! resident one. Its output partitions, batches and statistics are those a
//! [`GpuScanExec`](super::GpuScanExec) gives from its host copy, so DataFusion
//! plans both alike; the helpers below are shared by the two scans.
use crate::resident::HostData;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Statistics};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use std::sync::Arc;

/// Output partition `partition` of `partitions` over table chunks `host`: chunk `i`
/// goes to partition `i % partitions`, projected, cut into `batch_size` rows.
pub(crate) fn host_partition_stream(
    host: &[RecordBatch],
    schema: SchemaRef,
    projection: Option<&[usize]>,
    partitions: usize,
    partition: usize,
    batch_size: usize,
) -> Result<SendableRecordBatchStream> {
    let batch_size = batch_size.max(1);
    let mut out = Vec::new();
    for (i, b) in host.iter().enumerate() {
        if i % partitions != partition {
            continue;
        }
        let b = match projection {
            Some(p) => b.project(p)?,
            None => b.clone(),
        };
        let n = b.num_rows();
        out.extend((0..n).step_by(batch_size).map(|o| Ok(b.slice(o, batch_size.min(n - o)))));
    }
    Ok(Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, futures::stream::iter(out))))
}

/// Statistics of a scan over a table of `num_rows` rows and `host_bytes` bytes
/// with exact `column_stats`: the whole table (`partition_rows` None) or one
/// partition of `partition_rows` rows (row count only).
pub(crate) fn scan_statistics(
    out_schema: &SchemaRef,
    table_columns: usize,
    num_rows: usize,
    host_bytes: usize,
    column_stats: &[ColumnStatistics],
    projection: Option<&[usize]>,
    partition_rows: Option<usize>,
) -> Statistics {
    let mut s = Statistics::new_unknown(out_schema);
    let (rows, bytes) = match partition_rows {
        None => (num_rows, host_bytes),
        Some(rows) => (rows, (host_bytes as f64 * rows as f64 / num_rows.max(1) as f64) as usize),
    };
    s.num_rows = Precision::Exact(rows);
    if partition_rows.is_none() {
        s.column_statistics = match projection {
            Some(p) => p.iter().map(|&i| column_stats[i].clone()).collect(),
            None => column_stats.to_vec(),
        };
    }
    let frac = out_schema.fields().len() as f64 / table_columns.max(1) as f64;
    s.total_byte_size = Precision::Inexact((bytes as f64 * frac) as usize);
    s
}

/// Scan of a host table.
#[derive(Debug)]
pub struct HostScanExec {
    data: Arc<HostData>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    partitions: usize,
    props: Arc<PlanProperties>,
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
        Ok(HostScanExec { data, projection, schema, partitions, props })
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
        )
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
        super::no_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let batch_size = ctx.session_config().batch_size();
        host_partition_stream(&self.data.host, self.schema.clone(), self.projection.as_deref(), self.partitions, partition, batch_size)
    }
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let rows = partition.map(|p| {
            self.data.host.iter().enumerate().filter(|(i, _)| i % self.partitions == p).map(|(_, b)| b.num_rows()).sum()
        });
        Ok(Arc::new(scan_statistics(
            &self.schema,
            self.data.schema.fields().len(),
            self.data.num_rows,
            self.data.host_bytes,
            &self.data.column_stats,
            self.projection.as_deref(),
            rows,
        )))
    }
}
