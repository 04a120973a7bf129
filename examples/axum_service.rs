//! Ridgeline inside your own axum service: your routes next to Ridgeline's SQL
//! endpoint, one shared engine (and GPU) for both.
//!
//! Run: `cargo run --release --example axum_service`, then
//! `curl -s localhost:3000/sql/query -H 'Authorization: Bearer demo' -d 'SELECT count(*) FROM orders'`
//! or `curl -s localhost:3000/top-customers/5`.
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use ridgeline::serve::{http, QueryService, ServiceOptions};
use ridgeline::Ridgeline;
use std::time::Duration;

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    // The engine, with some data (TPC-H orders and customer at SF 0.01, in memory).
    let rl = Ridgeline::new()?;
    for t in ["orders", "customer"] {
        let batches = ridgeline::gen::tpch::generate_table(t, 0.01)?;
        rl.register_batches(t, ridgeline::gen::tpch::table_schema(t)?, batches)?;
    }
    // Limits every query gets, whichever route it comes from.
    let sql = QueryService::new(
        rl,
        ServiceOptions { token: Some("demo".into()), query_timeout: Some(Duration::from_secs(10)), ..Default::default() },
    );
    let app = Router::new()
        // Your own endpoint, answering from the same engine.
        .route("/top-customers/{n}", get(top_customers))
        .with_state(sql.clone())
        // Ridgeline's endpoint: POST /sql/query, GET /sql/health.
        .nest("/sql", http::router(sql.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    // Not `axum::serve`: Ridgeline's server adds header and write timeouts and a
    // connection limit (slow or idle clients cannot pile up connections).
    let options = sql.options().clone();
    http::serve_router(app, &options, listener, std::future::pending()).await
}

/// The `n` customers with the largest order totals, as JSON.
async fn top_customers(State(sql): State<QueryService>, Path(n): Path<u32>) -> Result<Json<serde_json::Value>, String> {
    let q = format!(
        "SELECT c_name, sum(o_totalprice) AS total FROM orders JOIN customer ON o_custkey = c_custkey \
         GROUP BY c_name ORDER BY total DESC LIMIT {n}"
    );
    let (_, batches) = sql.collect(&q).await.map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for b in &batches {
        let names = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Utf8).map_err(|e| e.to_string())?;
        let names = names.as_any().downcast_ref::<arrow::array::StringArray>().ok_or("names")?;
        let totals = arrow::compute::cast(b.column(1), &arrow::datatypes::DataType::Float64).map_err(|e| e.to_string())?;
        let totals = totals.as_any().downcast_ref::<arrow::array::Float64Array>().ok_or("totals")?;
        for i in 0..b.num_rows() {
            rows.push(serde_json::json!({"customer": names.value(i), "total": totals.value(i)}));
        }
    }
    Ok(Json(serde_json::Value::Array(rows)))
}
