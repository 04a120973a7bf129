//! Tuned constants and switches of the skyline (CPU grid and hybrid, SkyAlign on the GPU).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).

super::switches! {}
