//! Physical optimizer rules that place operators on the GPU, and the logical
//! join-order rule.
pub mod boundaries;
pub mod filter_estimates;
pub mod gpu_aggregate;
pub mod gpu_filter;
pub mod gpu_repartition;
pub mod gpu_topk;
pub mod join_prefilter;
pub mod join_reorder;
pub mod string_codes;
pub use boundaries::GpuBoundaries;
pub use filter_estimates::FilterEstimates;
pub use gpu_aggregate::GpuAggregateRule;
pub use gpu_filter::GpuFilterRule;
pub use gpu_repartition::GpuRepartitionRule;
pub use gpu_topk::GpuTopKRule;
pub use join_prefilter::GpuJoinPrefilter;
pub use join_reorder::JoinReorder;

/// A physical optimizer rule that logs its planning time at debug level
/// (`RUST_LOG=ridgeline::optimizer=debug`): where a GPU-mode session's extra
/// planning time goes. Delegates everything to the wrapped rule.
#[derive(Debug)]
pub struct Timed(pub std::sync::Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>);

impl datafusion::physical_optimizer::PhysicalOptimizerRule for Timed {
    fn optimize(
        &self,
        plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        config: &datafusion::config::ConfigOptions,
    ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        if !log::log_enabled!(log::Level::Debug) {
            return self.0.optimize(plan, config);
        }
        let t = std::time::Instant::now();
        let out = self.0.optimize(plan, config);
        log::debug!("rule {}: {} us", self.0.name(), t.elapsed().as_micros());
        out
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}
