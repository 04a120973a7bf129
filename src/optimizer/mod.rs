//! Physical optimizer rules that place operators on the GPU, and the logical
//! join-order rule.
pub mod boundaries;
pub mod filter_estimates;
pub mod gpu_aggregate;
pub mod gpu_filter;
pub mod gpu_repartition;
pub mod gpu_topk;
pub mod join_reorder;
pub mod string_codes;
pub use boundaries::GpuBoundaries;
pub use filter_estimates::FilterEstimates;
pub use gpu_aggregate::GpuAggregateRule;
pub use gpu_filter::GpuFilterRule;
pub use gpu_repartition::GpuRepartitionRule;
pub use gpu_topk::GpuTopKRule;
pub use join_reorder::JoinReorder;
