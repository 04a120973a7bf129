//! Aggregate functions Ridgeline adds.
pub mod percentile;
pub mod quantile;
