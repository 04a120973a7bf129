//! The operators crate's integration tests, one binary (model: DataFusion's
//! `core/tests/core_integration.rs`): each primitive against its CPU reference on
//! random, adversarial and edge inputs. With `RIDGELINE_GPU=on` (CI) every GPU
//! kernel runs; elsewhere a machine without an adapter skips the GPU halves.
mod common;

mod group_agg;
mod group_table;
mod join;
mod member;
mod partition;
mod regions;
mod runtime;
mod scan_compact;
mod select;
mod skyline;
