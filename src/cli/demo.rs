//! `ridgeline demo`: the showcase on built-in data. Generates TPC-H and a skyline
//! data set in memory, makes them resident on the GPU (when there is one) and runs
//! the showcase queries, printing each result's first rows, how many rows it has
//! (and how many are shown), its planning and execution times and the operators
//! that ran on the GPU (or why none did: a CPU adapter in mode auto, no GPU).
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

/// What the demo says about the adapter: its name and kind and, for a CPU
/// adapter in mode auto, why the GPU operators stay on the CPU.
pub fn adapter_line(mode: crate::GpuMode, name: &str, backend: &str, cpu_adapter: bool) -> String {
    match (mode, cpu_adapter) {
        (crate::GpuMode::Off, _) => "GPU: off (--gpu off); everything runs on the CPU".to_string(),
        (crate::GpuMode::Auto, true) => format!(
            "GPU: {name} ({backend}) is a CPU adapter (software Vulkan), not a GPU: mode auto keeps the \
             operators on the CPU, where they run faster than emulated; --gpu on runs them on it anyway"
        ),
        (crate::GpuMode::On, true) => format!("GPU: {name} ({backend}), a CPU adapter (software Vulkan): --gpu on runs the GPU operators on it"),
        (_, false) => format!("GPU: {name} ({backend})"),
    }
}

/// The line under a result: how many rows it has and how many are shown, the
/// planning and the execution time, and the GPU operators.
pub fn result_line(rows: usize, shown: usize, plan_ms: f64, run_ms: f64, gpu: &[String], why_none: Option<&str>) -> String {
    let rows_text = if shown < rows { format!("{rows} rows ({shown} shown)") } else { super::output::row_footer(rows, rows) };
    let ops = if gpu.is_empty() { format!("none{}", why_none.map(|w| format!(" ({w})")).unwrap_or_default()) } else { gpu.join(", ") };
    format!("{rows_text}; planned in {plan_ms:.1} ms, ran in {run_ms:.1} ms; GPU operators: {ops}")
}

/// Runs the demo.
pub async fn run(rl: Ridgeline, sf: f64) -> Result<()> {
    let mode = rl.gpu_mode()?;
    println!("Ridgeline demo (gpu mode: {mode})");
    let mut why_none: Option<&str> = None;
    match ridgeline_operators::context::global() {
        Ok(c) => {
            let cpu = c.is_cpu_adapter();
            println!("{}", adapter_line(mode, &c.info().name, &format!("{:?}", c.info().backend), cpu));
            if mode == crate::GpuMode::Auto && cpu {
                why_none = Some("a CPU adapter in mode auto");
            }
        }
        Err(_) if mode == crate::GpuMode::Off => println!("{}", adapter_line(mode, "", "", false)),
        Err(e) => {
            println!("GPU: none ({e}); everything runs on the CPU");
            why_none = Some("no GPU");
        }
    }
    if mode == crate::GpuMode::Off {
        why_none = Some("--gpu off");
    }
    let t = Instant::now();
    let tables = tokio::task::spawn_blocking(move || generate_all(sf))
        .await
        .map_err(crate::exec::blocking_err)??;
    let rows: usize = tables.iter().map(|(_, b)| b.iter().map(|x| x.num_rows()).sum::<usize>()).sum();
    println!("generated TPC-H SF {sf} ({rows} rows in 8 tables) in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let points = skyline_batch(SkylineDist::Anticorrelated, 4, 100_000, 7)?;
    println!("generated skyline data (100000 rows, 4 dims, anticorrelated) in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let mut on_gpu = false;
    for (name, batches) in tables {
        on_gpu |= rl.register_resident(&name, table_schema(&name)?, batches).await?;
    }
    on_gpu |= rl.register_resident("points", points.schema(), vec![points]).await?;
    println!(
        "{} the 9 tables in {:.0} ms",
        if on_gpu { "uploaded (made GPU-resident)" } else { "registered in host memory" },
        t.elapsed().as_secs_f64() * 1e3
    );
    for (title, sql) in showcase() {
        println!("\n== {title}");
        let t = Instant::now();
        let df = rl.sql(sql).await?;
        let task = rl.session().task_ctx();
        let plan = df.create_physical_plan().await?;
        let plan_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let batches = collect(plan.clone(), task).await?;
        let run_ms = t.elapsed().as_secs_f64() * 1e3;
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut first = Vec::new();
        let mut left = SHOWN;
        for b in &batches {
            if left == 0 {
                break;
            }
            let k = left.min(b.num_rows());
            first.push(b.slice(0, k));
            left -= k;
        }
        let options = arrow::util::display::FormatOptions::default().with_display_error(true).with_null("NULL");
        println!("{}", arrow::util::pretty::pretty_format_batches_with_options(&first, &options)?);
        let gpu = gpu_operator_names(&plan);
        println!("{}", result_line(n, n.min(SHOWN), plan_ms, run_ms, &gpu, why_none));
    }
    Ok(())
}

/// Rows of each result the demo prints.
const SHOWN: usize = 5;

