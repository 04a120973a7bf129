//! Aggregate functions Ridgeline adds.
pub mod quantile;
