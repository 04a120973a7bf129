//! `GpuScanExec`: reads a GPU-resident table. Its columns already live on the
//! device, so a query pays no upload; a projection shares the column buffers.
//! Under a CPU parent it reads the table's host copy instead (no download), so
//! the boundary rule puts no `GpuUnloadExec` above it.
use super::{GpuBatchStream, GpuExec};
use crate::gpu_batch::GpuBatch;
use crate::resident::ResidentData;
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::StreamExt;
use std::sync::Arc;

/// Scan of a resident table.
#[derive(Debug)]
pub struct GpuScanExec {
    data: Arc<ResidentData>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    partitions: usize,
    props: Arc<PlanProperties>,
}

impl GpuScanExec {
    /// Scans `data` with an optional projection into `partitions` output partitions.
    pub fn try_new(data: Arc<ResidentData>, projection: Option<Vec<usize>>, partitions: usize) -> Result<Self> {
        let schema = match &projection {
            Some(p) => Arc::new(data.schema.project(p)?),
            None => data.schema.clone(),
        };
        let partitions = partitions.clamp(1, data.chunks.len().max(1));
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(GpuScanExec { data, projection, schema, partitions, props })
    }

    /// The resident table.
    pub fn data(&self) -> &Arc<ResidentData> {
        &self.data
    }
    /// Table column of each output column.
    pub fn table_columns(&self) -> Vec<usize> {
        match &self.projection {
            Some(p) => p.clone(),
            None => (0..self.data.schema.fields().len()).collect(),
        }
    }

    fn chunks_of(&self, partition: usize) -> Result<Vec<GpuBatch>> {
        self.data
            .chunks
            .iter()
            .enumerate()
            .filter(|(i, _)| i % self.partitions == partition)
            .map(|(_, c)| match &self.projection {
                Some(p) => c.project(p),
                None => Ok(c.clone()),
            })
            .collect()
    }
}

impl DisplayAs for GpuScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let cols: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "GpuScanExec: table={}, resident rows={}, chunks={}, projection=[{}]",
            self.data.name,
            self.data.num_rows,
            self.data.chunks.len(),
            cols.join(", ")
        )
    }
}

impl ExecutionPlan for GpuScanExec {
    fn name(&self) -> &str {
        "GpuScanExec"
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
        // CPU parents read the host copy: the same rows, no transfer.
        let batch_size = ctx.session_config().batch_size().max(1);
        let mut out = Vec::new();
        for (i, b) in self.data.host.iter().enumerate() {
            if i % self.partitions != partition {
                continue;
            }
            let b = match &self.projection {
                Some(p) => b.project(p)?,
                None => b.clone(),
            };
            let n = b.num_rows();
            out.extend((0..n).step_by(batch_size).map(|o| Ok(b.slice(o, batch_size.min(n - o)))));
        }
        Ok(Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(out),
        )))
    }
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let mut s = Statistics::new_unknown(&self.schema);
        let (rows, bytes) = match partition {
            None => (self.data.num_rows, self.data.host_bytes),
            Some(p) => {
                let rows: usize = self.chunks_of(p)?.iter().map(|c| c.num_rows).sum();
                (rows, (self.data.host_bytes as f64 * rows as f64 / self.data.num_rows.max(1) as f64) as usize)
            }
        };
        s.num_rows = Precision::Exact(rows);
        if partition.is_none() {
            s.column_statistics = match &self.projection {
                Some(p) => p.iter().map(|&i| self.data.column_stats[i].clone()).collect(),
                None => self.data.column_stats.clone(),
            };
        }
        let frac = self.schema.fields().len() as f64 / self.data.schema.fields().len().max(1) as f64;
        s.total_byte_size = Precision::Inexact((bytes as f64 * frac) as usize);
        Ok(Arc::new(s))
    }
}

impl GpuExec for GpuScanExec {
    fn consumes_gpu_input(&self) -> bool {
        false
    }
    fn cpu_plan(&self) -> Option<Result<Arc<dyn ExecutionPlan>>> {
        // Its `execute` reads the host copy.
        Some(GpuScanExec::try_new(self.data.clone(), self.projection.clone(), self.partitions).map(|s| Arc::new(s) as _))
    }
    fn execute_gpu(&self, partition: usize, _ctx: Arc<TaskContext>) -> Result<GpuBatchStream> {
        let chunks = self.chunks_of(partition)?;
        Ok(futures::stream::iter(chunks.into_iter().map(Ok)).boxed())
    }
}
