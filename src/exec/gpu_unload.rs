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
use std::sync::Arc;

/// Downloads its GPU input for a CPU parent.
#[derive(Debug)]
pub struct GpuUnloadExec {
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuUnloadExec {
    /// Wraps a GPU plan.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let props = input.properties().clone();
        GpuUnloadExec { input, props, metrics: ExecutionPlanMetricsSet::new() }
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

fn warn_fallback(e: &DataFusionError) {
    log::warn!("GPU failed, running on the CPU instead: {e}");
    eprintln!("warning: GPU failed, running on the CPU instead: {e}");
}

/// A stream fed by a task through a channel.
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<RecordBatch>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let task = tokio::spawn(f(tx));
    let guard = AbortOnDrop(task);
    futures::stream::unfold((rx, guard), |(mut rx, g)| async move { rx.recv().await.map(|b| (b, (rx, g))) })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl GpuUnloadExec {
    fn fall_back(&self, partition: usize, ctx: Arc<TaskContext>, e: DataFusionError) -> Result<SendableRecordBatchStream> {
        match super::cpu_equivalent(&self.input) {
            Some(Ok(plan)) => {
                warn_fallback(&e);
                plan.execute(partition, ctx)
            }
            _ => Err(e),
        }
    }
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
            Err(e) if is_gpu_error(&e) => return self.fall_back(partition, ctx, e),
            Err(e) => return Err(e),
        };
        // A GPU failure before the first batch (lost device, out of memory) re-runs
        // the island's CPU equivalent; after rows were handed on it is an error.
        let fallback = super::cpu_equivalent(&self.input);
        let schema = self.schema();
        let mut started = false;
        let mut stream = download_stream(schema.clone(), stream, batch_size)?;
        let s = async_stream(move |tx| async move {
            while let Some(item) = stream.next().await {
                match item {
                    Err(e) if !started && is_gpu_error(&e) && matches!(fallback, Some(Ok(_))) => {
                        let Some(Ok(plan)) = fallback else { unreachable!() };
                        warn_fallback(&e);
                        match plan.execute(partition, ctx) {
                            Ok(mut cpu) => {
                                while let Some(b) = cpu.next().await {
                                    if tx.send(b).await.is_err() {
                                        return;
                                    }
                                }
                            }
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                            }
                        }
                        return;
                    }
                    other => {
                        started = true;
                        if tx.send(other).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s)))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
