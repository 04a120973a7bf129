//! Tuned constants and switches of SampleSelect (exact and approximate selection, top-k, grouped regions).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).

super::switches! {}
