//! GPU-resident tables: registered once, their columns stay on the device, so
//! repeated queries pay no upload. A [`crate::exec::GpuScanExec`] reads them.
use crate::exec::GpuScanExec;
use crate::gpu_batch::GpuBatch;
use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use ridgeline_operators::GpuContext;
use std::sync::Arc;

/// The device data of a resident table.
#[derive(Debug)]
pub struct ResidentData {
    /// Table name (for EXPLAIN).
    pub name: String,
    /// Schema.
    pub schema: SchemaRef,
    /// Device chunks.
    pub chunks: Vec<GpuBatch>,
    /// Rows.
    pub num_rows: usize,
    /// Bytes the data took on the host (for statistics).
    pub host_bytes: usize,
}

impl ResidentData {
    /// Uploads `batches` as chunks of at most `chunk_rows` rows (and at least
    /// `min_chunks` chunks when there are enough rows, so scans can run in parallel).
    pub fn upload(ctx: &GpuContext, name: &str, schema: SchemaRef, batches: &[RecordBatch], chunk_rows: usize, min_chunks: usize) -> Result<ResidentData> {
        let num_rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let host_bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let per = chunk_rows.min(num_rows.div_ceil(min_chunks.max(1)).max(8192)).max(1);
        let mut chunks = Vec::new();
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut rows = 0;
        let mut flush = |pending: &mut Vec<RecordBatch>| -> Result<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let b = concat_batches(&schema, pending.iter())?;
            pending.clear();
            chunks.push(GpuBatch::upload(ctx, &b)?);
            Ok(())
        };
        for b in batches {
            let mut off = 0;
            while off < b.num_rows() {
                let take = (per - rows).min(b.num_rows() - off);
                pending.push(b.slice(off, take));
                rows += take;
                off += take;
                if rows == per {
                    flush(&mut pending)?;
                    rows = 0;
                }
            }
        }
        flush(&mut pending)?;
        Ok(ResidentData { name: name.to_string(), schema, chunks, num_rows, host_bytes })
    }

    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.device_bytes()).sum()
    }
}

/// A table whose columns live on the GPU.
#[derive(Debug)]
pub struct ResidentTable {
    data: Arc<ResidentData>,
}

impl ResidentTable {
    /// Wraps uploaded data.
    pub fn new(data: ResidentData) -> Self {
        ResidentTable { data: Arc::new(data) }
    }
    /// The device data.
    pub fn data(&self) -> &Arc<ResidentData> {
        &self.data
    }
}

#[async_trait]
impl TableProvider for ResidentTable {
    fn schema(&self) -> SchemaRef {
        self.data.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let parts = state.config().target_partitions();
        Ok(Arc::new(GpuScanExec::try_new(self.data.clone(), projection.cloned(), parts)?))
    }
}
