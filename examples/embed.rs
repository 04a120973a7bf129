//! Embedding Ridgeline in a service: build an engine, register data, keep a table
//! on the GPU, run SQL. Run with `cargo run --release --example embed`.
use arrow::array::{Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use ridgeline::{GpuMode, Ridgeline, RidgelineSessionExt};
use std::sync::Arc;

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    // 1. The Ridgeline engine: GPU where it pays, the CPU otherwise.
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Auto).process_memory_budget(2 << 30).build()?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..100_000)),
            Arc::new(Float64Array::from_iter((0..100_000).map(|i| if i % 10 == 0 { None } else { Some(i as f64 * 0.5) }))),
        ],
    )?;
    // Resident: uploaded once, later queries pay no transfer (host memory without a GPU).
    let on_gpu = rl.register_resident("prices", schema, vec![batch]).await?;
    println!("prices is {}", if on_gpu { "GPU-resident" } else { "in host memory" });
    rl.sql("SELECT count(*) AS n, count(price) AS priced, avg(price) AS avg_price FROM prices")
        .await?
        .show()
        .await?;

    // 2. The one-line opt-in for an existing DataFusion session.
    let state = SessionStateBuilder::new().with_default_features().with_ridgeline().build();
    let ctx = SessionContext::new_with_state(state);
    ctx.sql("SELECT 6 * 7 AS answer").await?.show().await?;
    Ok(())
}
