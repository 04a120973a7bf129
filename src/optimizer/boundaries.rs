//! Inserts explicit boundary nodes where a plan crosses between CPU and GPU:
//! `GpuLoadExec` under a GPU operator whose input is a CPU operator, and
//! `GpuUnloadExec` under a CPU operator (or at the root) whose input is a GPU
//! operator (except a resident scan, which serves CPU parents from its host
//! copy). Runs after every rule that places operators on the GPU.
use crate::exec::{as_gpu, GpuLoadExec, GpuRepartitionExec, GpuScanExec, GpuSemiFilterExec, GpuUnloadExec};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// GPU operators whose `execute` hands CPU parents host batches without an unload.
fn serves_cpu(p: &Arc<dyn ExecutionPlan>) -> bool {
    p.downcast_ref::<GpuScanExec>().is_some() || p.downcast_ref::<GpuSemiFilterExec>().is_some()
}

/// The boundary rule.
#[derive(Debug, Default)]
pub struct GpuBoundaries;

impl PhysicalOptimizerRule for GpuBoundaries {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = plan
            .transform_up(|node| {
                let gpu_consumer = as_gpu(&node).map(|g| g.consumes_gpu_input());
                // Nodes that read GPU islands themselves and hand over host batches.
                let is_unload = node.downcast_ref::<GpuUnloadExec>().is_some() || node.downcast_ref::<GpuRepartitionExec>().is_some();
                let mut changed = false;
                let children: Vec<Arc<dyn ExecutionPlan>> = node
                    .children()
                    .into_iter()
                    .map(|c| {
                        let child_gpu = as_gpu(c).is_some();
                        match gpu_consumer {
                            Some(true) if !child_gpu => {
                                changed = true;
                                Arc::new(GpuLoadExec::new(c.clone())) as Arc<dyn ExecutionPlan>
                            }
                            // A resident scan serves CPU parents from its host copy,
                            // and a semi-join prefilter downloads its own output.
                            None if child_gpu && !is_unload && !serves_cpu(c) => {
                                changed = true;
                                Arc::new(GpuUnloadExec::new(c.clone()))
                            }
                            _ => c.clone(),
                        }
                    })
                    .collect();
                if !changed {
                    return Ok(Transformed::no(node));
                }
                let n = datafusion::physical_plan::execution_plan::replace_children_if_necessary(node, children)?;
                Ok(Transformed::yes(n))
            })?
            .data;
        Ok(if as_gpu(&plan).is_some() && !serves_cpu(&plan) { Arc::new(GpuUnloadExec::new(plan)) } else { plan })
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_boundaries"
    }
    fn schema_check(&self) -> bool {
        true
    }
}
