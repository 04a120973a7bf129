//! The GPU semi-join prefilter's nodes (the rule is `optimizer::join_prefilter`):
//! [`JoinKeysExec`] collects a join's build-side keys as they stream past, and
//! [`GpuSemiFilterExec`] drops probe rows whose key is not among them on the
//! device, before the probe side is downloaded to the CPU hash join.
pub mod join_keys;
pub mod semi_filter;

pub use join_keys::JoinKeysExec;
pub use semi_filter::GpuSemiFilterExec;
