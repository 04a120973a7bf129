//! `bench aggregate --sql`: GROUP BY as SQL over a resident table: GPU mode
//! (one `GpuAggregateExec` pass) vs CPU mode (DataFusion's hash aggregation on
//! the host copy) vs DuckDB over the same rows (a Parquet file loaded into a
//! DuckDB table first, so no side times the file).
use crate::cli::bench_tpch::{duckdb_python, run_mode};
use crate::Ridgeline;
use arrow::array::{Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::GpuMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const QUERY: &str = "SELECT k, count(*), sum(v), min(v), max(v) FROM t GROUP BY k";

fn err(m: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(m.into())
}

/// `n` rows in batches of 1M: `k` pseudo-random in `0 .. groups`, `v` an i64.
fn table(n: usize, groups: u32) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false), Field::new("v", DataType::Int64, false)]));
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state
    };
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let m = left.min(1 << 20);
        let k: Vec<i32> = (0..m).map(|_| ((next() >> 32) % groups as u64) as i32).collect();
        let v: Vec<i64> = (0..m).map(|_| (next() >> 24) as i64 - (1 << 39)).collect();
        out.push(RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(k)), Arc::new(Int64Array::from(v))]).unwrap());
        left -= m;
    }
    out
}

const DUCK_SCRIPT: &str = r#"
import json, sys, time
import duckdb
cfg = json.load(open(sys.argv[1]))
con = duckdb.connect()
con.execute("CREATE TABLE t AS SELECT * FROM read_parquet('%s')" % cfg["path"].replace("'", "''"))
times = []
res = []
for i in range(cfg["iterations"] + 1):
    t = time.perf_counter()
    res = con.execute(cfg["sql"]).fetchall()
    if i > 0:
        times.append((time.perf_counter() - t) * 1e3)
times.sort()
rows = len(res)
first = str(res[0][0]) if res else None
print(json.dumps({"min": times[0], "median": times[len(times) // 2], "rows": rows, "first": first, "version": duckdb.__version__}))
"#;

/// DuckDB's min and median ms for `sql` over `batches` (table `t`) and its rows.
fn duckdb_ms(python: &Path, batches: &[RecordBatch], sql: &str, iterations: usize) -> Result<(f64, f64, usize)> {
    duckdb_run(python, batches, sql, iterations).map(|(a, b, c, _)| (a, b, c))
}

/// [`duckdb_ms`], and the first value of the first row as DuckDB prints it.
pub(crate) fn duckdb_run(python: &Path, batches: &[RecordBatch], sql: &str, iterations: usize) -> Result<(f64, f64, usize, Option<String>)> {
    let dir = std::env::temp_dir().join(format!("ridgeline-agg-duckdb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
    let path = dir.join("t.parquet");
    let f = std::fs::File::create(&path).map_err(|e| err(e.to_string()))?;
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batches[0].schema(), None)?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    let cfg = serde_json::json!({"path": path.to_string_lossy(), "sql": sql, "iterations": iterations.max(1)});
    std::fs::write(dir.join("in.json"), cfg.to_string()).map_err(|e| err(e.to_string()))?;
    std::fs::write(dir.join("agg.py"), DUCK_SCRIPT).map_err(|e| err(e.to_string()))?;
    let out = std::process::Command::new(python).arg(dir.join("agg.py")).arg(dir.join("in.json")).output().map_err(|e| err(e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| err(format!("DuckDB: {e}: {}", String::from_utf8_lossy(&out.stderr))))?;
    Ok((
        v["min"].as_f64().unwrap_or(f64::NAN),
        v["median"].as_f64().unwrap_or(f64::NAN),
        v["rows"].as_u64().unwrap_or(0) as usize,
        v["first"].as_str().map(str::to_string),
    ))
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

/// Prints one table: sizes `2^lo ..= 2^hi` (every second power), 4 / 1k / 1M groups.
pub async fn run(lo: u32, hi: u32, iterations: usize, duckdb: bool, wheel: Option<PathBuf>) -> Result<()> {
    let py = if duckdb { Some(duckdb_python(wheel.as_deref())?) } else { None };
    println!("bench aggregate --sql: `{QUERY}`, ms min / median of {iterations} after a warm-up (planning included); GPU mode over a resident table, CPU mode over the same rows in memory; DuckDB over a table loaded from Parquet");
    println!("| n | groups | GPU mode ms | CPU mode ms | DuckDB ms | CPU/GPU | DuckDB/GPU | GPU operators | answers |");
    println!("|{}", " --- |".repeat(9));
    let mut k = lo;
    while k <= hi {
        let n = 1usize << k;
        for g in [4u32, 1000, 1_000_000] {
            if g as usize > n {
                continue;
            }
            let batches = table(n, g);
            let schema = batches[0].schema();
            let gpu = Ridgeline::builder().gpu_mode(GpuMode::from_env().unwrap_or(GpuMode::Auto)).build()?;
            gpu.register_resident("t", schema.clone(), batches.clone()).await?;
            let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build()?;
            cpu.register_batches("t", schema.clone(), batches.clone())?;
            let g_run = run_mode(&gpu, QUERY, iterations).await?;
            drop(gpu);
            let c_run = run_mode(&cpu, QUERY, iterations).await?;
            drop(cpu);
            let same = sorted(g_run.result.clone()) == sorted(c_run.result.clone());
            let duck = match &py {
                Some(py) => {
                    let (py, b) = (py.clone(), batches.clone());
                    Some(tokio::task::spawn_blocking(move || duckdb_ms(&py, &b, QUERY, iterations)).await.map_err(|e| err(e.to_string()))??)
                }
                None => None,
            };
            let gm = g_run.timing.min_ms;
            let ops = if g_run.gpu_ops.is_empty() { "none".to_string() } else { g_run.gpu_ops.join(",") };
            let (dcol, dratio) = match duck {
                Some((dmin, dmed, rows)) if rows == g_run.timing.rows => (format!("{dmin:.1} / {dmed:.1}"), format!("{:.2}", dmin / gm)),
                Some((_, _, rows)) => (format!("{rows} rows?"), "-".into()),
                None => ("-".into(), "-".into()),
            };
            println!(
                "| 2^{k} | {g} | {:.1} / {:.1} | {:.1} / {:.1} | {dcol} | {:.2} | {dratio} | {ops} | {} |",
                gm,
                g_run.timing.median_ms,
                c_run.timing.min_ms,
                c_run.timing.median_ms,
                c_run.timing.min_ms / gm,
                if same { "same" } else { "DIFFER" }
            );
        }
        k += 2;
    }
    Ok(())
}
