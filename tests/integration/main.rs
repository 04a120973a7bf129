//! Ridgeline's integration tests, one binary (model: DataFusion's
//! `core/tests/core_integration.rs`), so DataFusion and wgpu are linked once.
//! `tests/budget_fallback.rs` stays apart: it changes the process's device budget.
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/server.rs"]
mod server;
#[path = "../common/slt.rs"]
mod slt;

mod aggregate;
mod arrow_transfer;
mod bench_join;
mod bench_select;
mod bench_tpch;
mod cli;
mod files_in_sql;
mod fuzz;
mod gpu_expr;
mod gpu_filter_plan;
mod gpu_island;
mod gpu_join;
mod join_order;
mod join_prefilter;
mod percentile;
mod repartition;
mod serve;
mod serve_adbc;
mod settings;
mod shell;
mod skyline;
mod sqllogictests;
mod topk;
