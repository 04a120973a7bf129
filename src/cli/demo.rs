//! `ridgeline demo`: the showcase on built-in data. Generates TPC-H and a skyline
//! data set in memory, makes them resident on the GPU (when there is one) and runs
//! the showcase queries, printing each result's first rows, its time and the
//! operators that ran on the GPU.
use crate::exec::gpu_operator_names;
use crate::gen::skyline::{skyline_batch, SkylineDist};
use crate::gen::tpch::{generate_all, table_schema};
use crate::Ridgeline;
use datafusion::error::Result;
use datafusion::physical_plan::collect;
use std::time::Instant;

/// The showcase queries: (title, SQL).
pub fn showcase() -> Vec<(&'static str, &'static str)> {
    vec![
        ("TPC-H Q1: pricing summary report", include_str!("../../sql/tpch/q1.sql")),
        ("TPC-H Q6: forecasting revenue change", include_str!("../../sql/tpch/q6.sql")),
        (
            "Skyline data: per-dimension summary (anticorrelated, 4 dims)",
            "SELECT count(*) AS rows, min(d0) AS min_d0, max(d0) AS max_d0, avg(d0 + d1 + d2 + d3) AS avg_sum FROM points",
        ),
        (
            "SKYLINE OF: the Pareto-optimal points (anticorrelated, 4 dims, smaller is better)",
            "SELECT count(*) AS skyline_rows, min(d0) AS best_d0, min(d1) AS best_d1 FROM (SELECT * FROM points SKYLINE OF d0 MIN, d1 MIN, d2 MIN, d3 MIN)",
        ),
        (
            "SKYLINE OF with DIFF: the cheapest, most-discounted line items per ship mode",
            "SELECT l_shipmode, count(*) AS skyline_rows, min(l_extendedprice) AS cheapest FROM (SELECT * FROM lineitem WHERE l_quantity < 5 SKYLINE OF l_shipmode DIFF, l_extendedprice MIN, l_discount MAX) GROUP BY l_shipmode ORDER BY l_shipmode",
        ),
    ]
}

/// Runs the demo.
pub async fn run(rl: Ridgeline, sf: f64) -> Result<()> {
    let mode = rl.gpu_mode()?;
    println!("Ridgeline demo (gpu mode: {mode})");
    match ridgeline_operators::context::global() {
        Ok(c) if mode != crate::GpuMode::Off => println!("GPU: {} ({:?})", c.info().name, c.info().backend),
        Ok(_) => println!("GPU: off"),
        Err(e) => println!("GPU: none ({e}); running on the CPU"),
    }
    let t = Instant::now();
    let tables = tokio::task::spawn_blocking(move || generate_all(sf))
        .await
        .map_err(crate::exec::blocking_err)??;
    let rows: usize = tables.iter().map(|(_, b)| b.iter().map(|x| x.num_rows()).sum::<usize>()).sum();
    println!("generated TPC-H SF {sf} ({rows} rows in 8 tables) in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let mut on_gpu = false;
    for (name, batches) in tables {
        on_gpu |= rl.register_resident(&name, table_schema(&name)?, batches).await?;
    }
    let points = skyline_batch(SkylineDist::Anticorrelated, 4, 100_000, 7)?;
    on_gpu |= rl.register_resident("points", points.schema(), vec![points]).await?;
    println!(
        "generated skyline data (100000 rows, 4 dims, anticorrelated); tables {} in {:.0} ms",
        if on_gpu { "made GPU-resident" } else { "kept in host memory" },
        t.elapsed().as_secs_f64() * 1e3
    );
    for (title, sql) in showcase() {
        println!("\n== {title}");
        let df = rl.sql(sql).await?;
        let task = rl.session().task_ctx();
        let plan = df.create_physical_plan().await?;
        let t = Instant::now();
        let batches = collect(plan.clone(), task).await?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut first = Vec::new();
        let mut left = 5usize;
        for b in &batches {
            if left == 0 {
                break;
            }
            let k = left.min(b.num_rows());
            first.push(b.slice(0, k));
            left -= k;
        }
        println!("{}", arrow::util::pretty::pretty_format_batches(&first)?);
        let gpu = gpu_operator_names(&plan);
        println!(
            "{n} rows in {ms:.1} ms; GPU operators: {}",
            if gpu.is_empty() { "none".to_string() } else { gpu.join(", ") }
        );
    }
    Ok(())
}
