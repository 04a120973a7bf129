//! Physical plan nodes, one operator per file.
//!
//! GPU operators implement [`GpuExec`]: besides DataFusion's `execute`, which
//! returns host record batches so any GPU node runs correctly under a CPU parent,
//! they offer `execute_gpu`, which returns device batches. GPU parents call it on
//! GPU children, so data crosses the bus once per island of GPU operators. The
//! boundary rule marks where an island starts ([`GpuLoadExec`]) and ends
//! ([`GpuUnloadExec`]).
pub mod cpu_note;
pub mod gpu_aggregate;
pub mod gpu_filter;
pub mod gpu_hash_join;
pub mod gpu_island;
pub mod gpu_load;
pub mod gpu_repartition;
pub mod gpu_scan;
pub mod gpu_topk;
pub mod gpu_unload;
pub mod host_scan;
pub mod join_prefilter;
pub mod skyline;

pub use cpu_note::CpuNoteExec;
pub use gpu_aggregate::GpuAggregateExec;
pub use gpu_filter::GpuFilterExec;
pub use gpu_hash_join::GpuHashJoinExec;
pub use gpu_island::GpuIslandExec;
pub use gpu_load::GpuLoadExec;
pub use gpu_repartition::GpuRepartitionExec;
pub use gpu_scan::GpuScanExec;
pub use gpu_topk::GpuTopKExec;
pub use gpu_unload::GpuUnloadExec;
pub use host_scan::HostScanExec;
pub use join_prefilter::{GpuSemiFilterExec, JoinKeysExec};
pub use skyline::SkylineExec;

use crate::gpu_batch::GpuBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::stream::BoxStream;
use std::sync::Arc;

/// A stream of device batches.
pub type GpuBatchStream = BoxStream<'static, Result<GpuBatch>>;

/// An operator that can hand its output over on the device.
pub trait GpuExec: ExecutionPlan {
    /// Executes `partition`, producing device batches.
    fn execute_gpu(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<GpuBatchStream>;
    /// Whether this node consumes device batches from its children (boundary nodes do not).
    fn consumes_gpu_input(&self) -> bool {
        true
    }
    /// The same work as CPU operators, for when the GPU fails (lost, out of
    /// memory): `None` when there is no CPU equivalent (a resident table's data
    /// lives only on the device).
    fn cpu_plan(&self) -> Option<Result<Arc<dyn ExecutionPlan>>> {
        None
    }
}

/// `plan` with every GPU operator replaced by its CPU equivalent (`None` when one
/// has none).
#[recursive::recursive]
pub fn cpu_equivalent(plan: &Arc<dyn ExecutionPlan>) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    if let Some(g) = as_gpu(plan) {
        return g.cpu_plan();
    }
    if plan.downcast_ref::<GpuUnloadExec>().is_some() {
        return cpu_equivalent(plan.children()[0]);
    }
    let mut children = Vec::new();
    for c in plan.children() {
        match cpu_equivalent(c)? {
            Ok(c) => children.push(c),
            Err(e) => return Some(Err(e)),
        }
    }
    if children.is_empty() {
        return Some(Ok(plan.clone()));
    }
    // Unchanged children keep the node; children with the same properties keep
    // its properties (no recomputation).
    Some(datafusion::physical_plan::replace_children_if_necessary(plan.clone(), children))
}

/// `ctx` with DataFusion's file-scan work stealing switched off, for the CPU
/// inputs of GPU islands and for every plan a fallback runs.
///
/// With work stealing (DataFusion's default) the partitions of one file scan
/// take files from one shared queue, so what partition `p` reads depends on its
/// siblings' pace, and a partition that is run again finds the queue drained. A
/// GPU island that fails part-way re-runs its partition on the CPU: that is exact
/// only when each partition reads its own file group, every time.
pub fn replay_context(ctx: &Arc<TaskContext>) -> Arc<TaskContext> {
    if !ctx.session_config().options().execution.enable_file_stream_work_stealing {
        return ctx.clone();
    }
    let mut config = ctx.session_config().clone();
    config.options_mut().execution.enable_file_stream_work_stealing = false;
    Arc::new(TaskContext::new(
        ctx.task_id(),
        ctx.session_id(),
        config,
        ctx.scalar_functions().clone(),
        ctx.higher_order_functions().clone(),
        ctx.aggregate_functions().clone(),
        ctx.window_functions().clone(),
        ctx.runtime_env(),
    ))
}

/// A copy of `plan` with fresh execution state in every node: file and memory
/// scans get new sibling state (their shared work queues), repartitions new
/// channels, joins new build sides. Executing it does not see what an earlier,
/// abandoned execution of `plan` consumed.
pub fn fresh_plan(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::datasource::source::DataSourceExec;
    plan.clone()
        .transform_up(|node| {
            if let Some(ds) = node.downcast_ref::<DataSourceExec>() {
                let fresh = DataSourceExec::new(ds.data_source().clone())
                    .with_partitioning(node.output_partitioning().clone());
                return Ok(Transformed::yes(Arc::new(fresh) as Arc<dyn ExecutionPlan>));
            }
            Ok(Transformed::yes(node.reset_state()?))
        })
        .map(|t| t.data)
}

/// Whether partition `p` of a fresh copy of `plan`, run alone under a
/// [`replay_context`], yields exactly the rows that partition `p` of any other
/// such run yields (in any order). Round-robin repartitioning deals rows by the
/// race of its inputs, so a plan with one is not.
pub fn partition_replayable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::Partitioning;
    if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
        if matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) && r.input().output_partitioning().partition_count() > 1 {
            return false;
        }
    }
    plan.children().into_iter().all(partition_replayable)
}

/// The CPU plan that re-runs partitions of the GPU island `input` after the GPU
/// failed with `e`: fresh state, and only where a partition's rows do not depend
/// on the abandoned run; otherwise the error, saying why nothing was retried (a
/// fallback never returns a partial answer).
pub fn replay_plan(input: &Arc<dyn ExecutionPlan>, e: DataFusionError) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = match cpu_equivalent(input) {
        Some(Ok(p)) => p,
        Some(Err(_)) | None => return Err(e),
    };
    if !partition_replayable(&plan) {
        return Err(e.context("the GPU failed and its input cannot be read again partition by partition, so the query stops instead of answering in part"));
    }
    fresh_plan(&plan)
}

/// Logs the one warning of a GPU operator that runs (part of) its work on the
/// CPU after the GPU failed. `warned` is the node's flag, so a query warns once
/// per operator, not once per batch or partition.
pub fn warn_fallback(warned: &std::sync::atomic::AtomicBool, what: &str, e: &dyn std::fmt::Display) {
    if !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!("GPU failed, {what} runs on the CPU instead: {e}");
    }
}

/// The plan as a GPU operator, if it is one.
pub fn as_gpu(plan: &Arc<dyn ExecutionPlan>) -> Option<&dyn GpuExec> {
    let p: &dyn ExecutionPlan = plan.as_ref();
    if let Some(x) = p.downcast_ref::<GpuScanExec>() {
        return Some(x);
    }
    if let Some(x) = p.downcast_ref::<GpuLoadExec>() {
        return Some(x);
    }
    if let Some(x) = p.downcast_ref::<GpuFilterExec>() {
        return Some(x);
    }
    if let Some(x) = p.downcast_ref::<GpuSemiFilterExec>() {
        return Some(x);
    }
    None
}

/// Names of the GPU operators in a plan (for `demo`, `bench` and tests). A
/// resident scan counts only where a GPU operator consumes it (under a CPU
/// parent it reads its host copy).
pub fn gpu_operator_names(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(p: &Arc<dyn ExecutionPlan>, parent_gpu: bool, out: &mut Vec<String>) {
        let gpu = as_gpu(p).is_some()
            || p.downcast_ref::<GpuUnloadExec>().is_some()
            || p.downcast_ref::<SkylineExec>().is_some_and(|s| s.uses_gpu())
            || p.downcast_ref::<GpuTopKExec>().is_some()
            || p.downcast_ref::<GpuAggregateExec>().is_some()
            || p.downcast_ref::<GpuHashJoinExec>().is_some()
            || p.downcast_ref::<GpuRepartitionExec>().is_some();
        let counts = gpu && (p.downcast_ref::<GpuScanExec>().is_none() || parent_gpu);
        if counts && !out.iter().any(|n| n == p.name()) {
            out.push(p.name().to_string());
        }
        let consumes = as_gpu(p).is_some_and(|g| g.consumes_gpu_input()) || p.downcast_ref::<GpuRepartitionExec>().is_some();
        for c in p.children() {
            walk(c, consumes, out);
        }
    }
    walk(plan, false, &mut out);
    out
}

pub(crate) fn blocking_err(e: tokio::task::JoinError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Execution(format!("GPU task failed: {e}"))
}

/// `apply_expressions` for nodes that own no expressions.
pub(crate) fn no_expressions(
    _f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
    Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
}

/// DataFusion's statistics of a plan (all partitions), computed by walking its
/// inputs: since DataFusion 55 the built-in operators answer only through
/// `StatisticsContext` (their `partition_statistics` says "unknown").
///
/// Inside a [`StatsScope`] (each Ridgeline optimizer rule runs in one) the
/// statistics of every input subtree are remembered, so a rule that asks about
/// many nodes of one plan walks each subtree once instead of once per question.
/// `plan` itself is not remembered (it may be a node built for the question and
/// dropped after it); its inputs are, and are kept alive by the scope, so the
/// pointers that key the memo stay unique while it lives.
pub fn plan_statistics(plan: &dyn ExecutionPlan) -> Result<Arc<datafusion::common::Statistics>> {
    let scoped = STATS_MEMO.with(|m| m.borrow().is_some());
    if !scoped {
        return datafusion::physical_plan::StatisticsContext::new().compute(plan, &datafusion::physical_plan::StatisticsArgs::new());
    }
    stats_from_inputs(plan)
}

/// A memoized statistics walk: the key is a node's address, the value keeps the
/// node alive (so no other node can take its address while the memo lives).
type StatsMemo = std::collections::HashMap<usize, (Arc<dyn ExecutionPlan>, Arc<datafusion::common::Statistics>)>;

thread_local! {
    static STATS_MEMO: std::cell::RefCell<Option<StatsMemo>> = const { std::cell::RefCell::new(None) };
}

/// While alive, [`plan_statistics`] on this thread remembers subtree statistics.
/// Scopes do not nest: an inner scope leaves the outer one's memo in place.
pub(crate) struct StatsScope {
    owner: bool,
}

impl StatsScope {
    pub(crate) fn enter() -> StatsScope {
        let owner = STATS_MEMO.with(|m| {
            let mut m = m.borrow_mut();
            if m.is_some() {
                return false;
            }
            *m = Some(StatsMemo::new());
            true
        });
        StatsScope { owner }
    }
}

impl Drop for StatsScope {
    fn drop(&mut self) {
        if self.owner {
            // Take the memo out before dropping it: dropping plan nodes must not
            // run while the cell is borrowed.
            let memo = STATS_MEMO.with(|m| m.borrow_mut().take());
            drop(memo);
        }
    }
}

#[recursive::recursive]
fn stats_from_inputs(plan: &dyn ExecutionPlan) -> Result<Arc<datafusion::common::Statistics>> {
    use datafusion::physical_plan::{ChildStats, StatisticsArgs, StatisticsContext};
    let children = plan.children();
    let requests = plan.child_stats_requests(None);
    if requests.len() != children.len() {
        return StatisticsContext::new().compute(plan, &StatisticsArgs::new());
    }
    let mut inputs = Vec::with_capacity(children.len());
    for (child, req) in children.into_iter().zip(requests) {
        let s = match req {
            ChildStats::At(None) => child_statistics(child)?,
            ChildStats::At(Some(p)) => {
                StatisticsContext::new().compute(child.as_ref(), &StatisticsArgs::new().with_partition(Some(p)))?
            }
            ChildStats::Skip => Arc::new(datafusion::common::Statistics::new_unknown(child.schema().as_ref())),
        };
        inputs.push(s);
    }
    plan.statistics_from_inputs(&inputs, &StatisticsArgs::new())
}

#[recursive::recursive]
fn child_statistics(child: &Arc<dyn ExecutionPlan>) -> Result<Arc<datafusion::common::Statistics>> {
    let key = Arc::as_ptr(child) as *const () as usize;
    if let Some(s) = STATS_MEMO.with(|m| m.borrow().as_ref().and_then(|m| m.get(&key).map(|(_, s)| s.clone()))) {
        return Ok(s);
    }
    let s = stats_from_inputs(child.as_ref())?;
    STATS_MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.insert(key, (child.clone(), s.clone()));
        }
    });
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memoized_statistics_match_a_fresh_walk() {
        use datafusion::prelude::SessionContext;
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE a AS VALUES (1, 10), (2, 20), (2, 30), (3, NULL)").await.unwrap();
        ctx.sql("CREATE TABLE b AS VALUES (2, 'x'), (3, 'y')").await.unwrap();
        let plan = ctx
            .sql("SELECT a.column1, count(*) FROM a JOIN b ON a.column1 = b.column1 WHERE a.column2 > 5 GROUP BY a.column1")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut nodes = vec![plan.clone()];
        let mut i = 0;
        while i < nodes.len() {
            let kids: Vec<_> = nodes[i].children().into_iter().cloned().collect();
            nodes.extend(kids);
            i += 1;
        }
        let fresh: Vec<_> = nodes.iter().map(|n| plan_statistics(n.as_ref()).unwrap()).collect();
        let scope = StatsScope::enter();
        // Twice: the second round answers from the memo.
        for _ in 0..2 {
            for (n, want) in nodes.iter().zip(&fresh) {
                assert_eq!(plan_statistics(n.as_ref()).unwrap().as_ref(), want.as_ref(), "{}", n.name());
            }
        }
        let remembered = STATS_MEMO.with(|m| m.borrow().as_ref().map_or(0, |m| m.len()));
        // Inputs are remembered; the root, nobody's input, is not.
        assert!(remembered > 0 && remembered < nodes.len(), "{remembered} of {}", nodes.len());
        // A nested scope leaves the memo in place; the outer one clears it.
        drop(StatsScope::enter());
        assert!(STATS_MEMO.with(|m| m.borrow().is_some()));
        drop(scope);
        assert!(STATS_MEMO.with(|m| m.borrow().is_none()));
    }
}
