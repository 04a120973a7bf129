//! Replaces a `SortExec` with a fetch (`ORDER BY .. LIMIT k [OFFSET m]`) by
//! [`GpuTopKExec`] (SampleSelect finds the threshold of the first sort key).
//!
//! Mode `on`: every such sort whose first key has an order-preserving key
//! (numbers, decimals up to 18 digits, dates, timestamps). Mode `auto`: only on a
//! GPU that is not a CPU adapter, when DataFusion's statistics put the input at
//! [`GPU_MIN_ROWS`] rows or more and the fetch between [`AUTO_MIN_FETCH`] and an
//! eighth of the rows. DataFusion's streaming `TopK` (a heap of k rows, with
//! dynamic filters) is hard to beat for small k: on the H100 machine, TPC-H SF 1
//! `ORDER BY l_extendedprice DESC .. LIMIT 100` took 11 ms in CPU mode and 261 ms
//! through this operator (it copies the input first), hence the lower bound on k.
//! Over a resident key column (the operator's device path: only the candidate
//! rows leave the device) mode `auto` takes any fetch up to an eighth of the rows.
use crate::config::rule_device;
use crate::exec::gpu_topk::{has_resident_key, GpuTopKExec, GPU_MIN_ROWS};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

pub use crate::tuning::topk::AUTO_MIN_FETCH;

/// The GPU top-k rule.
#[derive(Debug, Default)]
pub struct GpuTopKRule;

impl PhysicalOptimizerRule for GpuTopKRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((_, mode, dev)) = rule_device(config)? else { return Ok(plan) };
        if mode == GpuMode::Auto && dev.is_cpu_adapter() {
            return Ok(plan);
        }
        Ok(plan
            .transform_up(|node| {
                let Some(sort) = node.downcast_ref::<SortExec>() else { return Ok(Transformed::no(node)) };
                let Some(fetch) = sort.fetch() else { return Ok(Transformed::no(node)) };
                let input = sort.input().clone();
                let first = &sort.expr()[0];
                if !crate::functions::percentile::has_order_key(&first.expr.data_type(&input.schema())?) {
                    return Ok(Transformed::no(node));
                }
                if mode == GpuMode::Auto {
                    let rows = crate::exec::plan_statistics(input.as_ref())?.num_rows.get_value().copied();
                    // Over a resident key column only the candidates leave the device, so
                    // any fetch pays; otherwise the keys are computed on the host and
                    // uploaded, which pays only for large fetches.
                    let resident = has_resident_key(&input, sort.expr());
                    match rows {
                        Some(r) if r >= GPU_MIN_ROWS && resident && fetch.saturating_mul(8) <= r => {}
                        Some(r) if r >= GPU_MIN_ROWS && fetch >= AUTO_MIN_FETCH && fetch.saturating_mul(8) <= r => {}
                        _ => return Ok(Transformed::no(node)),
                    }
                }
                let input: Arc<dyn ExecutionPlan> = if input.output_partitioning().partition_count() > 1 {
                    Arc::new(CoalescePartitionsExec::new(input))
                } else {
                    input
                };
                let (min_rows, cpu_ok) = if mode == GpuMode::On { (0, true) } else { (GPU_MIN_ROWS, false) };
                Ok(Transformed::yes(Arc::new(GpuTopKExec::new(input, sort.expr().clone(), fetch, min_rows, cpu_ok)) as Arc<dyn ExecutionPlan>))
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_topk"
    }
    fn schema_check(&self) -> bool {
        true
    }
}
