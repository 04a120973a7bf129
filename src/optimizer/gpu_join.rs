//! Replaces DataFusion's `HashJoinExec` by [`GpuHashJoinExec`] (the hash table
//! and the probe on the GPU) where its key is one integer, date, timestamp or
//! decimal column of the same type on both sides and its join type is inner,
//! left, right, full, semi or anti (`exec::gpu_hash_join::unsupported_reason`
//! says why not otherwise).
//!
//! Mode `on`: every such join. Mode `auto`: on a GPU that is not a CPU adapter,
//! when DataFusion's statistics put both sides at `ridgeline.gpu_join_min_rows`
//! rows or more (default [`AUTO_MIN_ROWS`](crate::tuning::join::AUTO_MIN_ROWS):
//! the measurement there says why). `ridgeline.gpu_joins = false` turns the rule off.
//! Runs after the semi-join prefilter (which looks for `HashJoinExec`) and before
//! the boundary rule.
use crate::config::rule_device;
use crate::exec::GpuHashJoinExec;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::ExecutionPlan;
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// The GPU hash join rule.
#[derive(Debug, Default)]
pub struct GpuJoinRule;

impl PhysicalOptimizerRule for GpuJoinRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((opts, mode, dev)) = rule_device(config)? else { return Ok(plan) };
        if !opts.gpu_joins || (mode == GpuMode::Auto && dev.is_cpu_adapter()) {
            return Ok(plan);
        }
        let min_rows = opts.gpu_join_min_rows;
        Ok(plan
            .transform_up(|node| {
                let Some(hj) = node.downcast_ref::<HashJoinExec>() else { return Ok(Transformed::no(node)) };
                if mode == GpuMode::Auto {
                    let mut small = false;
                    for side in [hj.left(), hj.right()] {
                        let rows = crate::exec::plan_statistics(side.as_ref())?.num_rows.get_value().copied();
                        small |= rows.is_none_or(|r| r < min_rows);
                    }
                    if small {
                        return Ok(Transformed::no(node));
                    }
                }
                if crate::exec::gpu_hash_join::unsupported_reason(hj).is_some() {
                    return Ok(Transformed::no(node));
                }
                match GpuHashJoinExec::try_new(Arc::new(hj.builder().build()?)) {
                    Ok(g) => Ok(Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>)),
                    Err(_) => Ok(Transformed::no(node)),
                }
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_join"
    }
    fn schema_check(&self) -> bool {
        true
    }
}
