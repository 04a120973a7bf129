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
use std::sync::Arc;

impl HostData {
    /// Rows of output partition `p` of `partitions`: chunk `i` goes to partition
    /// `i % partitions`.
    pub(crate) fn partition_rows(&self, partitions: usize, p: usize) -> usize {
        self.host.iter().enumerate().filter(|(i, _)| i % partitions == p).map(|(_, b)| b.num_rows()).sum()
    }

    /// Output partition `partition` of `partitions`, projected (`out_schema`), cut
    /// into `batch_size` rows.
    pub(crate) fn stream(
        &self,
        out_schema: SchemaRef,
        projection: Option<&[usize]>,
        partitions: usize,
        partition: usize,
        batch_size: usize,
    ) -> Result<SendableRecordBatchStream> {
        let batch_size = batch_size.max(1);
        let mut out = Vec::new();
        for (i, b) in self.host.iter().enumerate() {
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
        Ok(Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(out_schema, futures::stream::iter(out))))
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
        self.data.stream(self.schema.clone(), self.projection.as_deref(), self.partitions, partition, ctx.session_config().batch_size())
    }
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        Ok(Arc::new(self.data.statistics(&self.schema, self.projection.as_deref(), partition.map(|p| (self.partitions, p)))))
    }
}
