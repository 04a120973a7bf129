//! `GpuLoadExec`: the CPU -> GPU boundary. Gathers its input's record batches into
//! large chunks (rows from the memory budget) and uploads each chunk once.
use super::{blocking_err, GpuBatchStream, GpuExec};
use crate::config::{device_for, RidgelineOptions};
use crate::gpu_batch::{gpu_err, is_gpu_error, GpuBatch};
use arrow::compute::concat_batches;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use ridgeline_operators::GpuError;
use std::sync::Arc;

/// Uploads its CPU input to the GPU.
#[derive(Debug)]
pub struct GpuLoadExec {
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    warned: Arc<std::sync::atomic::AtomicBool>,
}

impl GpuLoadExec {
    /// Wraps a CPU plan.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let props = input.properties().clone();
        GpuLoadExec { input, props, metrics: ExecutionPlanMetricsSet::new(), warned: Default::default() }
    }
    /// The CPU input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for GpuLoadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "GpuLoadExec: CPU -> GPU")
    }
}

impl ExecutionPlan for GpuLoadExec {
    fn name(&self) -> &str {
        "GpuLoadExec"
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
        Ok(Arc::new(GpuLoadExec::new(children.swap_remove(0))))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        // Under a CPU parent: upload and download again (correct, if pointless); the
        // boundary rule never builds this, but a hand-made plan may.
        let gpu = self.execute_gpu(partition, ctx.clone())?;
        super::gpu_unload::download_stream(self.schema(), gpu, ctx.session_config().batch_size())
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

impl GpuExec for GpuLoadExec {
    fn consumes_gpu_input(&self) -> bool {
        false
    }
    fn cpu_plan(&self) -> Option<Result<Arc<dyn ExecutionPlan>>> {
        Some(Ok(self.input.clone()))
    }
    fn execute_gpu(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<GpuBatchStream> {
        let opts = RidgelineOptions::from_config(ctx.session_config().options());
        let dev = device_for(opts.mode()?)?.ok_or_else(|| gpu_err(GpuError::Disabled))?;
        let chunk_rows = opts.chunk_rows(Some(&dev));
        let schema = self.schema();
        // Each partition reads its own files, so that a GPU failure can re-run it.
        let input = self.input.execute(partition, super::replay_context(&ctx))?;
        let bytes = MetricBuilder::new(&self.metrics).counter("bytes_uploaded", partition);
        let warned = self.warned.clone();
        let time = MetricBuilder::new(&self.metrics).subset_time("upload_time", partition);
        struct St {
            input: SendableRecordBatchStream,
            done: bool,
        }
        let stream = futures::stream::unfold(St { input, done: false }, move |mut st| {
            let (schema, dev, bytes, time, warned) = (schema.clone(), dev.clone(), bytes.clone(), time.clone(), warned.clone());
            async move {
                if st.done {
                    return None;
                }
                let mut pending = Vec::new();
                let mut rows = 0usize;
                while rows < chunk_rows {
                    match st.input.next().await {
                        Some(Ok(b)) => {
                            rows += b.num_rows();
                            if b.num_rows() > 0 {
                                pending.push(b);
                            }
                        }
                        Some(Err(e)) => {
                            st.done = true;
                            return Some((Err(e), st));
                        }
                        None => {
                            st.done = true;
                            break;
                        }
                    }
                }
                if pending.is_empty() {
                    return None;
                }
                let res = tokio::task::spawn_blocking(move || {
                    let _t = time.timer();
                    let batch = if pending.len() == 1 { pending.pop().unwrap() } else { concat_batches(&schema, &pending)? };
                    match GpuBatch::upload(&dev, &batch) {
                        Ok(g) => {
                            bytes.add(batch.get_array_memory_size());
                            // The host rows stay beside the device copy until the
                            // island is done with the chunk: a GPU operator that
                            // fails on it finishes it from them on the CPU.
                            Ok(g.with_host(batch))
                        }
                        // Out of device memory (or the device lost): the chunk goes
                        // on in host memory and the operators above run it on the CPU.
                        Err(e) if is_gpu_error(&e) => {
                            super::warn_fallback(&warned, "the chunk that cannot be uploaded", &e);
                            Ok(GpuBatch::from_host(batch))
                        }
                        Err(e) => Err(e),
                    }
                })
                .await
                .map_err(blocking_err)
                .and_then(|r| r);
                Some((res, st))
            }
        });
        Ok(stream.boxed())
    }
}
