//! Ridgeline: an embedded analytic SQL engine on Apache DataFusion whose heavy
//! operators run on the GPU through wgpu (WGSL compute shaders), with fast CPU
//! paths when there is no GPU.
//!
//! ```no_run
//! # async fn demo() -> datafusion::error::Result<()> {
//! use ridgeline::{GpuMode, Ridgeline};
//! let rl = Ridgeline::builder().gpu_mode(GpuMode::Auto).build()?;
//! rl.register_parquet("lineitem", "data/lineitem.parquet").await?;
//! rl.make_resident("lineitem").await?; // keep its columns on the GPU
//! rl.sql("SELECT count(*) FROM lineitem").await?.show().await?;
//! # Ok(()) }
//! ```
//!
//! Cargo features: `cli` (default: the `ridgeline` binary, shell, demo and
//! benchmark harness; implies `server` and `gen`), `server` (Arrow Flight SQL and
//! HTTP: [`serve`]), `gen` (TPC-H and skyline data generators: [`gen`]). With
//! `default-features = false` the library is the engine alone.
#![recursion_limit = "256"]
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod exec;
pub mod files;
pub mod format;
pub mod functions;
#[cfg(feature = "gen")]
pub mod gen;
pub mod gpu_batch;
pub mod gpu_expr;
pub mod guard;
mod hll;
pub mod logical;
pub mod optimizer;
pub mod planner;
pub mod resident;
#[cfg(feature = "server")]
pub mod serve;
pub mod session;
pub mod sql_ext;
pub mod tuning;

pub use config::RidgelineOptions;
pub use guard::{panic_message, WORKER_STACK_BYTES};
pub use logical::{SkylineDataFrameExt, SkylineDim};
pub use sql_ext::skyline::SkylineDirection;
pub use ridgeline_operators::{GpuContext, GpuError, GpuMode};
pub use session::{Ridgeline, RidgelineBuilder, RidgelineSessionExt};
