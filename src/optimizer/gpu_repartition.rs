//! Replaces the two hash `RepartitionExec`s under a partitioned hash join by
//! [`GpuRepartitionExec`]s when both inputs are GPU islands (a resident scan, a
//! GPU filter), so each side is partitioned on the device in one pass.
//!
//! The GPU hash is not DataFusion's, so the replacement must not break an
//! alignment DataFusion planned: both join inputs move together, every key pair
//! has the same device type (integers, decimals, dates; not floats), and no node
//! above the join relies on the join's own hash partitioning (a second join or an
//! aggregation on the same keys that DataFusion left without a repartition of its
//! own). Columns without a device layout (strings) follow on the host.
//!
//! Mode `on`: wherever it applies. Mode `auto`: never (measured slower, see
//! `GpuRepartitionRule::optimize`).
use crate::config::rule_device;
use crate::exec::gpu_repartition::partitionable_key;
use crate::exec::{as_gpu, GpuRepartitionExec};
use crate::gpu_batch::Storage;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// The GPU repartition rule.
#[derive(Debug, Default)]
pub struct GpuRepartitionRule;

impl PhysicalOptimizerRule for GpuRepartitionRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((_, mode, _)) = rule_device(config)? else { return Ok(plan) };
        // Mode auto leaves DataFusion's repartition in place: on the H100 machine
        // (TPC-H SF 10, BENCHMARKS.md) the GPU path made q2 and q11 2.5-3.5x slower,
        // since a resident scan serves a CPU repartition from its host copy at no
        // cost while the GPU path downloads every column, and no query got faster.
        if mode != GpuMode::On {
            return Ok(plan);
        }
        rewrite(&plan, false)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_repartition"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

/// `relied`: whether an ancestor relies on `plan`'s hash partitioning.
fn rewrite(plan: &Arc<dyn ExecutionPlan>, relied: bool) -> Result<Arc<dyn ExecutionPlan>> {
    let resets = plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<SortPreservingMergeExec>().is_some();
    let reqs = plan.input_distribution_requirements();
    let out_hash = matches!(plan.output_partitioning(), Partitioning::Hash(..));
    let mut changed = false;
    let mut children = Vec::new();
    for (i, c) in plan.children().into_iter().enumerate() {
        let passes_up = !resets && out_hash && plan.output_partitioning().partition_count() == c.output_partitioning().partition_count();
        #[allow(deprecated)]
        let keyed = matches!(reqs.child_distribution(i), Some(Distribution::KeyPartitioned(_) | Distribution::HashPartitioned(_)));
        let child_relied = keyed || (relied && passes_up);
        let nc = rewrite(c, child_relied)?;
        changed |= !Arc::ptr_eq(&nc, c);
        children.push(nc);
    }
    if !relied {
        if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
            if *j.partition_mode() == PartitionMode::Partitioned {
                if let Some((l, r)) = replace_pair(&children[0], &children[1]) {
                    children = vec![l, r];
                    changed = true;
                }
            }
        }
    }
    if !changed {
        return Ok(plan.clone());
    }
    datafusion::physical_plan::execution_plan::replace_children_if_necessary(plan.clone(), children)
}

/// The key columns and device storage of a hash repartition over a GPU island.
fn gpu_side(p: &Arc<dyn ExecutionPlan>) -> Option<(Vec<usize>, Vec<Storage>, Partitioning)> {
    let r = p.downcast_ref::<RepartitionExec>()?;
    let Partitioning::Hash(exprs, _) = r.partitioning() else { return None };
    if r.preserve_order() || as_gpu(r.input()).is_none() {
        return None;
    }
    let schema = r.input().schema();
    let mut keys = Vec::new();
    let mut kinds = Vec::new();
    for e in exprs {
        let c = e.downcast_ref::<Column>()?;
        let dt = schema.field(c.index()).data_type();
        if !partitionable_key(dt) {
            return None;
        }
        keys.push(c.index());
        kinds.push(Storage::of(dt)?);
    }
    Some((keys, kinds, r.partitioning().clone()))
}

fn replace_pair(l: &Arc<dyn ExecutionPlan>, r: &Arc<dyn ExecutionPlan>) -> Option<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)> {
    let (lk, lt, lp) = gpu_side(l)?;
    let (rk, rt, rp) = gpu_side(r)?;
    if lt != rt || lp.partition_count() != rp.partition_count() {
        return None;
    }
    let input = |p: &Arc<dyn ExecutionPlan>| p.children()[0].clone();
    Some((Arc::new(GpuRepartitionExec::new(input(l), lk, lp)), Arc::new(GpuRepartitionExec::new(input(r), rk, rp))))
}
