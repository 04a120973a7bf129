//! Physical optimizer rules that place operators on the GPU, and the logical
//! join-order rule.
pub mod boundaries;
pub mod filter_estimates;
pub mod gpu_aggregate;
pub mod gpu_filter;
pub mod gpu_island;
pub mod gpu_join;
pub mod gpu_repartition;
pub mod gpu_topk;
pub mod join_prefilter;
pub mod join_reorder;
pub mod string_codes;
pub use boundaries::GpuBoundaries;
pub use filter_estimates::FilterEstimates;
pub use gpu_aggregate::GpuAggregateRule;
pub use gpu_filter::GpuFilterRule;
pub use gpu_island::GpuIslandRule;
pub use gpu_join::GpuJoinRule;
pub use gpu_repartition::GpuRepartitionRule;
pub use gpu_topk::GpuTopKRule;
pub use join_prefilter::GpuJoinPrefilter;
pub use join_reorder::JoinReorder;

/// The rules that place operators on the GPU, in the order they run (each
/// [`Timed`]): the session appends them after DataFusion's rules, and a GPU island
/// (`GpuIslandExec`) runs them over its subtree once its inputs are resident.
pub fn gpu_placement_rules() -> Vec<std::sync::Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>> {
    use std::sync::Arc;
    let rules: Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>> = vec![
        Arc::new(GpuFilterRule),
        Arc::new(GpuAggregateRule),
        Arc::new(GpuTopKRule),
        Arc::new(GpuRepartitionRule),
        Arc::new(GpuJoinPrefilter),
        Arc::new(GpuJoinRule),
        Arc::new(GpuBoundaries),
    ];
    rules.into_iter().map(|r| Arc::new(Timed(r)) as Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>).collect()
}

/// A physical optimizer rule that logs its planning time at debug level
/// (`RUST_LOG=ridgeline::optimizer=debug`): where a GPU-mode session's extra
/// planning time goes, with the time of the parts marked by [`span`] and whether
/// the rule changed the plan. Delegates everything to the wrapped rule, inside a
/// [`StatsScope`](crate::exec::StatsScope) (subtree statistics computed once).
#[derive(Debug)]
pub struct Timed(pub std::sync::Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>);

impl datafusion::physical_optimizer::PhysicalOptimizerRule for Timed {
    fn optimize(
        &self,
        plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        config: &datafusion::config::ConfigOptions,
    ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        let _memo = crate::exec::StatsScope::enter();
        if !log::log_enabled!(log::Level::Debug) {
            return self.0.optimize(plan, config);
        }
        let before = std::sync::Arc::as_ptr(&plan) as *const () as usize;
        PROFILING.with(|p| p.set(true));
        let t = std::time::Instant::now();
        let out = self.0.optimize(plan, config);
        let us = t.elapsed().as_micros();
        PROFILING.with(|p| p.set(false));
        let changed = out.as_ref().is_ok_and(|p| std::sync::Arc::as_ptr(p) as *const () as usize != before);
        log::debug!("rule {}: {} us changed={}", self.0.name(), us, changed);
        for (label, ns) in SPANS.with(|s| std::mem::take(&mut *s.borrow_mut())) {
            log::debug!("span {label}: {} us", ns / 1000);
        }
        out
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}

thread_local! {
    static PROFILING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static SPANS: std::cell::RefCell<Vec<(&'static str, u128)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f`; inside a rule timed at debug level, adds its time to `label`'s.
pub(crate) fn span<T>(label: &'static str, f: impl FnOnce() -> T) -> T {
    if !PROFILING.with(|p| p.get()) {
        return f();
    }
    let t = std::time::Instant::now();
    let r = f();
    let ns = t.elapsed().as_nanos();
    SPANS.with(|s| {
        let mut s = s.borrow_mut();
        match s.iter_mut().find(|(l, _)| *l == label) {
            Some(e) => e.1 += ns,
            None => s.push((label, ns)),
        }
    });
    r
}
