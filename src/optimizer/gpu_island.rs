//! Wraps aggregations over host inputs in [`GpuIslandExec`], which uploads the
//! inputs when it runs and plans the GPU operators over them then (see its
//! module docs for why not now).
//!
//! It applies in mode `on` (with `ridgeline.gpu_islands`, default true) to the
//! highest aggregation (final or single) whose leaves are all host sources
//! (DataFusion's file and memory scans, Ridgeline's host tables; rowless leaves
//! such as `EmptyExec` may sit beside them), that promises no output order and
//! that has an aggregation over a host source through filters and projections
//! (what the GPU aggregation rule can take once the source is resident).
//! A subtree with a resident scan, or a GPU aggregation or top-k already planned,
//! is left to the planning-time rules. Mode `auto` leaves every plan alone: an
//! upload per query pays only where the device work saves more than the bus
//! costs, which wants a cost model of both (not built yet).
use crate::config::rule_device;
use crate::exec::gpu_island::{is_host_source, is_rowless_leaf};
use crate::exec::GpuIslandExec;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// The island rule.
#[derive(Debug, Default)]
pub struct GpuIslandRule;

/// Whether every leaf under `p` is a host source or rowless, with at least one
/// host source.
fn over_host_inputs(p: &Arc<dyn ExecutionPlan>) -> bool {
    fn walk(p: &Arc<dyn ExecutionPlan>, hosts: &mut usize) -> bool {
        if p.downcast_ref::<GpuIslandExec>().is_some() {
            return false;
        }
        if p.children().is_empty() {
            if is_host_source(p) {
                *hosts += 1;
                return true;
            }
            return is_rowless_leaf(p);
        }
        p.children().into_iter().all(|c| walk(c, hosts))
    }
    let mut hosts = 0;
    walk(p, &mut hosts) && hosts > 0
}

/// Whether some aggregation in `p` reads a host source through nodes the GPU
/// aggregation rule composes (filters, projections, repartitions, coalesces and
/// the boundaries or GPU filters planned over them): only then can the island run
/// more on the device than the plan already does (joins and filters over host
/// inputs are planned on the GPU without one), so only then is the upload worth it.
fn aggregates_a_source(p: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    let composes = |n: &Arc<dyn ExecutionPlan>| {
        super::gpu_aggregate::passes_rows(n)
            || n.downcast_ref::<FilterExec>().is_some()
            || n.downcast_ref::<ProjectionExec>().is_some()
            || n.downcast_ref::<crate::exec::GpuFilterExec>().is_some()
            || n.downcast_ref::<crate::exec::GpuLoadExec>().is_some()
            || n.downcast_ref::<crate::exec::GpuUnloadExec>().is_some()
    };
    if p.downcast_ref::<AggregateExec>().is_some() {
        let mut n = p.children()[0].clone();
        while composes(&n) && n.children().len() == 1 {
            n = n.children()[0].clone();
        }
        if is_host_source(&n) {
            return true;
        }
    }
    p.children().into_iter().any(aggregates_a_source)
}

/// An aggregation that produces its final result.
fn is_root(p: &Arc<dyn ExecutionPlan>) -> bool {
    p.downcast_ref::<AggregateExec>().is_some_and(|a| {
        matches!(a.mode(), AggregateMode::Final | AggregateMode::FinalPartitioned | AggregateMode::Single | AggregateMode::SinglePartitioned)
    })
}

impl PhysicalOptimizerRule for GpuIslandRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((opts, mode, _dev)) = rule_device(config)? else { return Ok(plan) };
        if mode != GpuMode::On || !opts.gpu_islands {
            return Ok(plan);
        }
        Ok(plan
            .transform_down(|node| {
                if is_root(&node)
                    && node.output_ordering().is_none()
                    && node.boundedness() == Boundedness::Bounded
                    && over_host_inputs(&node)
                    && aggregates_a_source(&node)
                {
                    return Ok(Transformed::new(Arc::new(GpuIslandExec::new(node)) as Arc<dyn ExecutionPlan>, true, TreeNodeRecursion::Jump));
                }
                Ok(Transformed::no(node))
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_island"
    }
    fn schema_check(&self) -> bool {
        true
    }
}
