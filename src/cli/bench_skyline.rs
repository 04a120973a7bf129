//! `ridgeline bench skyline`: SkyAlign on the GPU vs the CPU algorithm (same rank
//! matrix, same process), the whole `SKYLINE OF` query in GPU and CPU mode, and
//! optionally DuckDB running the usual NOT EXISTS formulation on the same rows.
use crate::cli::bench::median;
use crate::cli::bench_tpch::{duckdb_python, warm_up_query};
use crate::exec::skyline::dense_ranks;
use crate::gen::skyline::{skyline_batch, SkylineDist};
use crate::sql_ext::skyline::SkylineDirection;
use crate::{GpuMode, Ridgeline};
use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use rayon::prelude::*;
use ridgeline_operators::skyline::{
    skyline_cpu, skyline_gpu, CpuSkylineAlgorithm, CpuSkylineOptions, RankMatrix,
    SkylineGpuOptions, SkylineKernel, SkylineStats,
};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `bench skyline`.
#[derive(clap::Args, Debug, Clone)]
pub struct SkylineArgs {
    /// Distributions, comma-separated: independent, correlated, anticorrelated.
    #[arg(long, default_value = "independent,correlated,anticorrelated")]
    pub dist: String,
    /// Dimension counts, comma-separated.
    #[arg(long, default_value = "6,8,12,16")]
    pub dims: String,
    /// Rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: usize,
    /// Repetitions (median reported).
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Skip the whole-query (SQL) columns.
    #[arg(long)]
    pub no_sql: bool,
    /// Add DuckDB running `NOT EXISTS (a dominating row)` on the first --duckdb-rows rows.
    #[arg(long)]
    pub duckdb: bool,
    /// Rows DuckDB gets (its NOT EXISTS is quadratic); the GPU and CPU are timed on the same rows too.
    #[arg(long, default_value_t = 100_000)]
    pub duckdb_rows: usize,
    /// Seconds before a DuckDB query is interrupted.
    #[arg(long, default_value_t = 300)]
    pub duckdb_timeout: u64,
    /// Also time the CPU's blocked algorithm (the one before the sorted grid), answer checked.
    #[arg(long)]
    pub cpu_blocked: bool,
    /// A duckdb wheel to install offline (default: RIDGELINE_DUCKDB_WHEEL).
    #[arg(long)]
    pub duckdb_wheel: Option<PathBuf>,
}

fn err(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(msg.into())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn rank_matrix(batch: &RecordBatch) -> Result<Vec<u32>> {
    let d = batch.num_columns();
    let n = batch.num_rows();
    let ranks: Vec<Vec<u32>> = batch
        .columns()
        .par_iter()
        .map(|c| dense_ranks(c, SkylineDirection::Min))
        .collect::<Result<_>>()?;
    let mut m = vec![0u32; n * d];
    m.par_chunks_mut(d.max(1)).enumerate().for_each(|(i, row)| {
        for (j, r) in ranks.iter().enumerate() {
            row[j] = r[i];
        }
    });
    Ok(m)
}

fn skyline_sql(dims: usize) -> String {
    let d: Vec<String> = (0..dims).map(|j| format!("d{j} MIN")).collect();
    format!(
        "SELECT count(*) FROM (SELECT * FROM pts SKYLINE OF {})",
        d.join(", ")
    )
}

fn not_exists_sql(dims: usize) -> String {
    let le: Vec<String> = (0..dims).map(|j| format!("q.d{j} <= p.d{j}")).collect();
    let lt: Vec<String> = (0..dims).map(|j| format!("q.d{j} < p.d{j}")).collect();
    format!(
        "SELECT count(*) FROM pts p WHERE NOT EXISTS (SELECT 1 FROM pts q WHERE {} AND ({}))",
        le.join(" AND "),
        lt.join(" OR ")
    )
}

async fn time_sql(
    mode: GpuMode,
    batch: &RecordBatch,
    sql: &str,
    iterations: usize,
) -> Result<(f64, i64)> {
    let rl = Ridgeline::builder().gpu_mode(mode).build()?;
    rl.register_batches("pts", batch.schema(), vec![batch.clone()])?;
    let mut times = Vec::new();
    let mut count = 0;
    warm_up_query(&rl, sql, Instant::now()).await?;
    for _ in 0..iterations.max(1) {
        let t = Instant::now();
        let b = rl.sql(sql).await?.collect().await?;
        times.push(ms(t));
        count = b[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .map_or(-1, |a| a.value(0));
    }
    Ok((median(times), count))
}

const DUCK_SCRIPT: &str = r#"
import json, sys, time, threading
import duckdb
cfg = json.load(open(sys.argv[1]))
con = duckdb.connect()
con.execute("CREATE TABLE pts AS SELECT * FROM read_parquet('%s')" % cfg["path"].replace("'", "''"))
timer = threading.Timer(cfg["timeout"], con.interrupt)
timer.start()
t = time.perf_counter()
try:
    n = con.execute(cfg["sql"]).fetchall()[0][0]
    out = {"ms": (time.perf_counter() - t) * 1e3, "count": n, "version": duckdb.__version__}
except Exception as e:
    out = {"error": " ".join(str(e).split())[:200], "ms": (time.perf_counter() - t) * 1e3}
timer.cancel()
print(json.dumps(out))
"#;

fn duckdb_run(
    python: &std::path::Path,
    batch: &RecordBatch,
    dims: usize,
    timeout: u64,
) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("ridgeline-sky-duckdb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
    let path = dir.join("pts.parquet");
    let f = std::fs::File::create(&path).map_err(|e| err(e.to_string()))?;
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None)?;
    w.write(batch)?;
    w.close()?;
    let cfg = serde_json::json!({"path": path.to_string_lossy(), "sql": not_exists_sql(dims), "timeout": timeout});
    std::fs::write(dir.join("in.json"), cfg.to_string()).map_err(|e| err(e.to_string()))?;
    std::fs::write(dir.join("sky.py"), DUCK_SCRIPT).map_err(|e| err(e.to_string()))?;
    let out = std::process::Command::new(python)
        .arg(dir.join("sky.py"))
        .arg(dir.join("in.json"))
        .output()
        .map_err(|e| err(e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        err(format!(
            "DuckDB: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok(match v["error"].as_str() {
        Some(e) if e.to_lowercase().contains("interrupt") => format!(">{timeout}000"),
        Some(e) => format!("error: {e}"),
        None => format!(
            "{:.1} ({} rows)",
            v["ms"].as_f64().unwrap_or(f64::NAN),
            v["count"]
        ),
    })
}

/// Runs the benchmark and prints one table.
pub async fn run(args: SkylineArgs) -> Result<()> {
    let dists: Vec<SkylineDist> = args
        .dist
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_>>()?;
    let dims: Vec<usize> = args
        .dims
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| err(format!("--dims: not a number: {s}")))
        })
        .collect::<Result<_>>()?;
    let rows = if args.duckdb {
        args.rows.min(args.duckdb_rows)
    } else {
        args.rows
    };
    let py = if args.duckdb {
        Some(duckdb_python(args.duckdb_wheel.as_deref())?)
    } else {
        None
    };
    let dev = ridgeline_operators::context::global().ok();
    println!(
        "bench skyline: {rows} rows, {} threads, GPU: {}",
        rayon::current_num_threads(),
        dev.as_ref()
            .map_or("none".to_string(), |d| d.info().name.clone())
    );
    let mut header = vec![
        "dist",
        "d",
        "skyline",
        "rank ms",
        "GPU ms",
        "GPU per-invocation ms",
        "CPU ms",
        "CPU/GPU",
        "GPU dom tests",
        "GPU mask tests",
        "CPU dom tests",
        "CPU mask tests",
        "dev MiB",
        "dev/ranks",
    ];
    if args.cpu_blocked {
        header.push("CPU blocked ms");
    }
    if !args.no_sql {
        header.extend(["SQL gpu ms", "SQL cpu ms"]);
    }
    if args.duckdb {
        header.push("DuckDB NOT EXISTS ms");
    }
    println!("| {} |", header.join(" | "));
    println!("|{}", " --- |".repeat(header.len()));
    for &dist in &dists {
        for &d in &dims {
            let batch = skyline_batch(dist, d, rows, 42)?;
            let t = Instant::now();
            let m = rank_matrix(&batch)?;
            let rank_ms = ms(t);
            let rm = RankMatrix::new(rows, d, &m);
            let mut cpu_t = Vec::new();
            let mut cpu = None;
            for _ in 0..args.iterations.max(1) {
                let t = Instant::now();
                let r = skyline_cpu(rm, &CpuSkylineOptions::default());
                cpu_t.push(ms(t));
                cpu = Some(r);
            }
            let (cpu_ids, cpu_st) = cpu.unwrap();
            let mut row = vec![
                dist.to_string(),
                d.to_string(),
                cpu_ids.len().to_string(),
                format!("{rank_ms:.1}"),
            ];
            let cpu_ms = median(cpu_t);
            match &dev {
                Some(dev) => {
                    // The default kernel, then the per-invocation one (the paper's
                    // layout) in the same process; each answer checked.
                    let time_gpu = |kernel: Option<SkylineKernel>,
                                    what: &str|
                     -> Result<(f64, SkylineStats)> {
                        // `None`: the default kernel (RIDGELINE_SKYLINE_KERNEL where set).
                        let mut opts = SkylineGpuOptions::default();
                        if kernel.is_some() {
                            opts.kernel = kernel;
                        }
                        ridgeline_operators::timing::warm_up(
                            ridgeline_operators::timing::WARM_UP_MS,
                            || {
                                skyline_gpu(dev, rm, &opts)
                                    .map(|_| ())
                                    .map_err(|e| err(e.to_string()))
                            },
                        )?;
                        let mut times = Vec::new();
                        let mut stats = SkylineStats::default();
                        for _ in 0..args.iterations.max(1) {
                            let t = Instant::now();
                            let (ids, st) =
                                skyline_gpu(dev, rm, &opts).map_err(|e| err(e.to_string()))?;
                            times.push(ms(t));
                            if ids != cpu_ids {
                                return Err(err(format!(
                                    "{dist} d={d}: {what} skyline ({} rows) differs from the CPU's ({})",
                                    ids.len(),
                                    cpu_ids.len()
                                )));
                            }
                            stats = st;
                        }
                        Ok((median(times), stats))
                    };
                    let (gms, gst) = time_gpu(None, "GPU")?;
                    let (tms, _) =
                        time_gpu(Some(SkylineKernel::Thread), "the per-invocation kernel's")?;
                    let bytes = (rows * d * 4) as f64;
                    row.extend([
                        format!("{gms:.2}"),
                        format!("{tms:.2}"),
                        format!("{cpu_ms:.2}"),
                        format!("{:.2}", cpu_ms / gms),
                        gst.dominance_tests.to_string(),
                        gst.mask_tests.to_string(),
                    ]);
                    row.extend([
                        cpu_st.dominance_tests.to_string(),
                        cpu_st.mask_tests.to_string(),
                    ]);
                    row.extend([
                        format!("{:.1}", gst.device_bytes as f64 / (1 << 20) as f64),
                        format!("{:.2}", gst.device_bytes as f64 / bytes),
                    ]);
                }
                None => {
                    row.extend([
                        "-".into(),
                        "-".into(),
                        format!("{cpu_ms:.2}"),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                    ]);
                    row.extend([
                        cpu_st.dominance_tests.to_string(),
                        cpu_st.mask_tests.to_string(),
                        "-".into(),
                        "-".into(),
                    ]);
                }
            }
            if args.cpu_blocked {
                let mut times = Vec::new();
                for _ in 0..args.iterations.max(1) {
                    let t = Instant::now();
                    let (ids, _) = skyline_cpu(
                        rm,
                        &CpuSkylineOptions { algorithm: CpuSkylineAlgorithm::Blocked, ..Default::default() },
                    );
                    times.push(ms(t));
                    if ids != cpu_ids {
                        return Err(err(format!(
                            "{dist} d={d}: the blocked CPU skyline differs"
                        )));
                    }
                }
                row.push(format!("{:.2}", median(times)));
            }
            if !args.no_sql {
                let sql = skyline_sql(d);
                let gpu = if dev.is_some() {
                    let (t, c) = time_sql(GpuMode::On, &batch, &sql, args.iterations).await?;
                    if c != cpu_ids.len() as i64 {
                        return Err(err(format!(
                            "SQL in GPU mode counted {c}, expected {}",
                            cpu_ids.len()
                        )));
                    }
                    format!("{t:.1}")
                } else {
                    "-".into()
                };
                let (t, c) = time_sql(GpuMode::Off, &batch, &sql, args.iterations).await?;
                if c != cpu_ids.len() as i64 {
                    return Err(err(format!(
                        "SQL in CPU mode counted {c}, expected {}",
                        cpu_ids.len()
                    )));
                }
                row.extend([gpu, format!("{t:.1}")]);
            }
            if let Some(py) = &py {
                let (py, b, timeout) = (py.clone(), batch.clone(), args.duckdb_timeout);
                let r = tokio::task::spawn_blocking(move || duckdb_run(&py, &b, d, timeout))
                    .await
                    .map_err(|e| err(e.to_string()))??;
                row.push(r);
            }
            println!("| {} |", row.join(" | "));
        }
    }
    Ok(())
}
