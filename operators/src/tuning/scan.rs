//! Tuned constants and switches of prefix sums, stream compaction and the CPU scan.
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).

super::switches! {}
