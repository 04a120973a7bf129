//! `GpuScanExec`: reads a GPU-resident table. Its columns already live on the
//! device, so a query pays no upload; a projection shares the column buffers.
//! Under a CPU parent it reads the table's host copy instead (no download), so
//! the boundary rule puts no `GpuUnloadExec` above it.
use super::{GpuBatchStream, GpuExec};
use crate::gpu_batch::GpuBatch;
use crate::resident::ResidentData;
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::SchemaRef;
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
    /// Dynamic filters pushed down from the plan above, applied when CPU parents
    /// read the host copy (see `HostScanExec`).
    filters: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
}

impl GpuScanExec {
    /// Scans `data` with an optional projection into `partitions` output partitions.
    pub fn try_new(data: Arc<ResidentData>, projection: Option<Vec<usize>>, partitions: usize) -> Result<Self> {
        let schema = match &projection {
            Some(p) => Arc::new(data.table.schema.project(p)?),
            None => data.table.schema.clone(),
        };
        let partitions = partitions.clamp(1, data.chunks.len().max(1));
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        // Its host stream takes part in cooperative scheduling itself (below), so
        // DataFusion puts no `CooperativeExec` between it and a GPU filter.
        .with_scheduling_type(datafusion::physical_plan::execution_plan::SchedulingType::Cooperative));
        Ok(GpuScanExec { data, projection, schema, partitions, props, filters: Vec::new() })
    }

    /// The resident table.
    pub fn data(&self) -> &Arc<ResidentData> {
        &self.data
    }
    /// Table column of each output column.
    pub fn table_columns(&self) -> Vec<usize> {
        match &self.projection {
            Some(p) => p.clone(),
            None => (0..self.data.table.schema.fields().len()).collect(),
        }
    }

    /// Partition `partition`'s chunks with the dictionary codes of table columns
    /// `codes` appended as `UInt32` columns (named by `schema`, the scan's schema
    /// with those fields added): the input of a GPU filter that tests strings by
    /// their codes (`optimizer::string_codes`).
    pub fn chunks_with_codes(&self, partition: usize, codes: &[crate::resident::CodeColumn], schema: &SchemaRef) -> Result<Vec<GpuBatch>> {
        self.chunk_indices(partition)
            .zip(self.chunks_of(partition)?)
            .map(|(ci, mut b)| {
                for c in codes {
                    let col = c.dict.codes.get(ci).ok_or_else(|| datafusion::error::DataFusionError::Internal(format!("no codes for chunk {ci}")))?;
                    b.columns.push(col.clone());
                }
                b.schema = schema.clone();
                Ok(b)
            })
            .collect()
    }

    /// Output partition `partition` as a CPU parent reads it (the host copy), with
    /// the rows of chunk `i` whose bit in `masks[i]` is clear left out (a
    /// selection computed on the device; `None`: every row).
    pub fn execute_masked(&self, partition: usize, ctx: Arc<TaskContext>, masks: Option<&[Option<BooleanBuffer>]>) -> Result<SendableRecordBatchStream> {
        let bs = ctx.session_config().batch_size();
        let s = self.data.table.filtered_stream(self.schema.clone(), self.projection.as_deref(), self.partitions, partition, bs, self.filters.clone(), masks)?;
        Ok(datafusion::physical_plan::coop::make_cooperative(s))
    }

    /// Rows of output partition `partition`.
    pub fn partition_rows(&self, partition: usize) -> usize {
        self.data.table.partition_rows(self.partitions, partition)
    }

    /// Indices of partition `partition`'s chunks (every `partitions`-th).
    fn chunk_indices(&self, partition: usize) -> impl Iterator<Item = usize> {
        (partition..self.data.chunks.len()).step_by(self.partitions)
    }

    fn chunks_of(&self, partition: usize) -> Result<Vec<GpuBatch>> {
        self.chunk_indices(partition)
            .map(|i| &self.data.chunks[i])
            .map(|c| match &self.projection {
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
            self.data.table.name,
            self.data.table.num_rows,
            self.data.chunks.len(),
            cols.join(", ")
        )?;
        if !self.filters.is_empty() {
            let fs: Vec<String> = self.filters.iter().map(|e| e.to_string()).collect();
            write!(f, ", dynamic_filters=[{}]", fs.join(", "))?;
        }
        Ok(())
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
        super::host_scan::visit_filters(&self.filters, f)
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
        self.execute_masked(partition, ctx, None)
    }
    fn handle_child_pushdown_result(
        &self,
        phase: datafusion::physical_plan::filter_pushdown::FilterPushdownPhase,
        child_pushdown_result: datafusion::physical_plan::filter_pushdown::ChildPushdownResult,
        config: &datafusion::config::ConfigOptions,
    ) -> Result<datafusion::physical_plan::filter_pushdown::FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let (mut prop, dynamic) = super::host_scan::dynamic_filters(phase, child_pushdown_result, config);
        if !dynamic.is_empty() {
            let mut node = GpuScanExec::try_new(self.data.clone(), self.projection.clone(), self.partitions)?;
            node.filters = self.filters.iter().cloned().chain(dynamic).collect();
            prop = prop.with_updated_node(Arc::new(node) as Arc<dyn ExecutionPlan>);
        }
        Ok(prop)
    }
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        // Host chunk i holds the rows of device chunk i.
        Ok(Arc::new(self.data.table.statistics(&self.schema, self.projection.as_deref(), partition.map(|p| (self.partitions, p)))))
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
