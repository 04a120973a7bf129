//! Built-in data generators: TPC-H (through the tpchgen crates) and
//! Börzsönyi-style skyline data.
pub mod skyline;
pub mod tpch;
