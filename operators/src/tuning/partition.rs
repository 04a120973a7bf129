//! Tuned constants and switches of radix partitioning (fused and unfused multi-split).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).

super::switches! {}
