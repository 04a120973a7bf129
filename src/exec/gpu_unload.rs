//! `GpuUnloadExec`: the GPU -> CPU boundary. Downloads each device batch once and
//! hands it to its CPU parent in `batch_size` slices.
use super::{as_gpu, blocking_err, GpuBatchStream};
use crate::gpu_batch::{gpu_err, is_gpu_error, GpuBatch};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Downloads its GPU input for a CPU parent.
#[derive(Debug)]
pub struct GpuUnloadExec {
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    warned: Arc<AtomicBool>,
}

impl GpuUnloadExec {
    /// The GPU plan it downloads.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
    /// Wraps a GPU plan.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let props = input.properties().clone();
        GpuUnloadExec { input, props, metrics: ExecutionPlanMetricsSet::new(), warned: Arc::new(AtomicBool::new(false)) }
    }
}

impl DisplayAs for GpuUnloadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "GpuUnloadExec: GPU -> CPU")
    }
}

/// Downloads a device stream as host batches of at most `batch_size` rows.
pub(crate) fn download_stream(schema: SchemaRef, gpu: GpuBatchStream, batch_size: usize) -> Result<SendableRecordBatchStream> {
    let mode_dev = ridgeline_operators::context::global().map_err(gpu_err)?;
    let s = gpu
        .then(move |b: Result<GpuBatch>| {
            let dev = mode_dev.clone();
            async move {
                let b = b?;
                tokio::task::spawn_blocking(move || b.download(&dev)).await.map_err(blocking_err)?
            }
        })
        .flat_map(move |r: Result<RecordBatch>| {
            let parts: Vec<Result<RecordBatch>> = match r {
                Ok(b) => {
                    let n = b.num_rows();
                    (0..n.max(1)).step_by(batch_size.max(1)).map(|o| Ok(b.slice(o, batch_size.min(n - o)))).collect()
                }
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(parts)
        });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s)))
}

/// The island below `input` re-run by its CPU equivalent (fresh state, the same
/// partition) after the GPU failed with `e` before any row was handed on; `e`
/// when there is no CPU equivalent or the input cannot be read again exactly.
fn fall_back(input: &Arc<dyn ExecutionPlan>, partition: usize, ctx: Arc<TaskContext>, e: DataFusionError, warned: &AtomicBool) -> Result<SendableRecordBatchStream> {
    let msg = e.to_string();
    let plan = super::replay_plan(input, e)?;
    super::warn_fallback(warned, "the GPU island", &msg);
    plan.execute(partition, super::replay_context(&ctx))
}

impl ExecutionPlan for GpuUnloadExec {
    fn name(&self) -> &str {
        "GpuUnloadExec"
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
        vec![&self.input]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuUnloadExec::new(children.swap_remove(0))))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let gpu = as_gpu(&self.input)
            .ok_or_else(|| DataFusionError::Internal(format!("GpuUnloadExec over a CPU operator ({})", self.input.name())))?;
        let batch_size = ctx.session_config().batch_size();
        let stream = match gpu.execute_gpu(partition, ctx.clone()) {
            Ok(s) => s,
            Err(e) if is_gpu_error(&e) => return fall_back(&self.input, partition, ctx, e, &self.warned),
            Err(e) => return Err(e),
        };
        // GPU filters finish a batch the GPU failed on by the CPU themselves; a GPU
        // failure that still reaches this boundary before the first batch (lost
        // device, out of memory) re-runs the island's CPU equivalent from a fresh
        // input; after rows were handed on it is an error (never a partial answer).
        let schema = self.schema();
        let mut stream = download_stream(schema.clone(), stream, batch_size)?;
        let input = self.input.clone();
        let warned = self.warned.clone();
        let s = futures::stream::once(async move {
            match stream.next().await {
                Some(Err(e)) if is_gpu_error(&e) => match fall_back(&input, partition, ctx, e, &warned) {
                    Ok(cpu) => cpu.boxed(),
                    Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
                },
                first => futures::stream::iter(first).chain(stream).boxed(),
            }
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s)))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
