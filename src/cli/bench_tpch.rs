//! `ridgeline bench tpch`: the 22 TPC-H queries timed in CPU and GPU mode side by
//! side (and, with `--duckdb`, in DuckDB on the same Parquet files), with optional
//! answer checks (GPU against CPU at any scale factor; the published SF 1 answers
//! from a dbgen `answers/` directory).
//!
//! Data is generated in memory with the tpchgen crates, or read from a Parquet
//! directory (`--data`, one `<table>.parquet` file or directory per table, as
//! `ridgeline gen tpch` writes it). Loading is not part of the query timings: each
//! query runs once to warm up, then `--iterations` times per mode (the modes
//! alternating run by run unless `--blocks`); the table shows the minimum and the
//! median.
use crate::exec::gpu_operator_names;
use crate::gen::tpch::{generate_all, table_schema, write_tpch, OutputFormat, TPCH_TABLES};
use crate::{GpuMode, Ridgeline};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The 22 TPC-H queries (`sql/tpch/qN.sql`), embedded so the binary works anywhere.
pub const QUERIES: [&str; 22] = [
    include_str!("../../sql/tpch/q1.sql"),
    include_str!("../../sql/tpch/q2.sql"),
    include_str!("../../sql/tpch/q3.sql"),
    include_str!("../../sql/tpch/q4.sql"),
    include_str!("../../sql/tpch/q5.sql"),
    include_str!("../../sql/tpch/q6.sql"),
    include_str!("../../sql/tpch/q7.sql"),
    include_str!("../../sql/tpch/q8.sql"),
    include_str!("../../sql/tpch/q9.sql"),
    include_str!("../../sql/tpch/q10.sql"),
    include_str!("../../sql/tpch/q11.sql"),
    include_str!("../../sql/tpch/q12.sql"),
    include_str!("../../sql/tpch/q13.sql"),
    include_str!("../../sql/tpch/q14.sql"),
    include_str!("../../sql/tpch/q15.sql"),
    include_str!("../../sql/tpch/q16.sql"),
    include_str!("../../sql/tpch/q17.sql"),
    include_str!("../../sql/tpch/q18.sql"),
    include_str!("../../sql/tpch/q19.sql"),
    include_str!("../../sql/tpch/q20.sql"),
    include_str!("../../sql/tpch/q21.sql"),
    include_str!("../../sql/tpch/q22.sql"),
];

/// Arguments of `ridgeline bench tpch`.
#[derive(clap::Args, Debug, Clone)]
pub struct TpchArgs {
    /// Scale factor.
    #[arg(long)]
    pub sf: f64,
    /// Parquet directory with one <table>.parquet file (or directory) per table, as
    /// `ridgeline gen tpch` writes; generated there first when it holds no TPC-H tables.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Queries to run, e.g. 1,6,10-12 (default: all 22).
    #[arg(long, value_name = "LIST")]
    pub queries: Option<String>,
    /// Modes to time: off (CPU only), on (GPU only) or both (default).
    // The id is the global `--gpu`'s, with the same value type, so clap lets this
    // subcommand have its own `--gpu` (with `both`, read as `auto`).
    #[arg(long = "gpu", id = "gpu", value_name = "off|on|both", value_parser = parse_modes)]
    pub gpu: Option<GpuMode>,
    /// Make the tables GPU-resident (otherwise they are in host memory).
    #[arg(long)]
    pub resident: bool,
    /// The mode of the GPU column: auto (the cost model decides per operator,
    /// the default) or on (every operator that can runs on the GPU).
    #[arg(long, value_name = "auto|on", default_value = "auto")]
    pub gpu_column: String,
    /// Timed runs per query and mode, after one warm-up run.
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Keep timing a query (every mode, and DuckDB, alike) past `--iterations`
    /// until each has spent at least this many milliseconds in timed runs (at most
    /// 1000 runs): short queries get more samples, so their medians settle.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub min_time_ms: f64,
    /// Time each mode's runs of a query in one block (CPU mode's, then GPU mode's)
    /// instead of alternating the modes run by run (the default).
    #[arg(long)]
    pub blocks: bool,
    /// Time planning only (SQL text to physical plan, every optimizer rule), not
    /// execution: each mode's planning cost side by side. The answer run still
    /// executes, so --check still compares answers. DuckDB is not timed.
    #[arg(long)]
    pub plan_only: bool,
    /// Verify the answers: GPU mode against CPU mode, and at SF 1 against --answers.
    #[arg(long)]
    pub check: bool,
    /// Directory with the published SF 1 answers: dbgen/answers/qN.out from the TPC-H
    /// tools (tpc.org), `|`-separated with a header line; default: RIDGELINE_TPCH_ANSWERS.
    /// Implies --check.
    #[arg(long, value_name = "DIR")]
    pub answers: Option<PathBuf>,
    /// Also time DuckDB (Python package) on the same Parquet files.
    #[arg(long)]
    pub duckdb: bool,
    /// A duckdb wheel to install offline (default: RIDGELINE_DUCKDB_WHEEL).
    #[arg(long, value_name = "PATH")]
    pub duckdb_wheel: Option<PathBuf>,
    /// Session settings for both modes, e.g. `--set ridgeline.join_reorder=false`
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Session settings for the GPU column only, applied after `--set` (repeatable):
    /// with `--set ridgeline.gpu=off` an A/B test of a setting on one engine, the
    /// runs alternating.
    #[arg(long = "set-gpu", value_name = "KEY=VALUE")]
    pub gpu_settings: Vec<String>,
}

fn parse_modes(s: &str) -> std::result::Result<GpuMode, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "both" | "auto" => Ok(GpuMode::Auto),
        other => other.parse::<GpuMode>().map_err(|_| format!("invalid value '{s}': expected off, on or both")),
    }
}

fn exec_err(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(msg.into())
}

/// Queries beyond the 22, on lineitem, for the operators TPC-H does not stress:
/// numbered from 23 on, named in `--queries` by name.
pub const EXTRA_QUERIES: [(&str, &str); 5] = [
    ("median", "SELECT l_returnflag, median(l_extendedprice) AS med FROM lineitem GROUP BY l_returnflag ORDER BY l_returnflag"),
    ("topk", "SELECT l_orderkey, l_linenumber, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey, l_linenumber LIMIT 100"),
    ("quartiles", "SELECT quantile_cont(l_extendedprice, [0.25, 0.5, 0.75]) AS q FROM lineitem"),
    ("topk_large", "SELECT sum(l_extendedprice), count(*) FROM (SELECT l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC LIMIT 100000)"),
    (
        "median_groups",
        "SELECT p_brand, p_container, median(p_retailprice) AS med, quantile_cont(p_size, [0.1, 0.9]) AS q FROM part GROUP BY p_brand, p_container ORDER BY 1, 2",
    ),
];

/// The SQL of query `q` (1..=22 TPC-H, then [`EXTRA_QUERIES`]).
pub fn query_sql(q: usize) -> &'static str {
    if q <= 22 { QUERIES[q - 1] } else { EXTRA_QUERIES[q - 23].1 }
}

/// The table name of query `q`: q1..q22, then the extra query's name.
pub fn query_name(q: usize) -> String {
    if q <= 22 { format!("q{q}") } else { EXTRA_QUERIES[q - 23].0.to_string() }
}

/// Parses `1,6,10-12` (a `q` prefix is allowed; `all` means all 22; the extra
/// queries by name: median, topk, quartiles).
pub fn parse_queries(list: Option<&str>) -> Result<Vec<usize>> {
    let all: Vec<usize> = (1..=22).collect();
    let Some(list) = list.map(str::trim).filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("all")) else {
        return Ok(all);
    };
    let num = |s: &str| -> Result<usize> {
        if let Some(i) = EXTRA_QUERIES.iter().position(|(n, _)| n.eq_ignore_ascii_case(s.trim())) {
            return Ok(23 + i);
        }
        let t = s.trim().trim_start_matches(['q', 'Q']);
        match t.parse::<usize>() {
            Ok(n) if (1..=22).contains(&n) => Ok(n),
            _ => Err(DataFusionError::Plan(format!("--queries: '{}' is not a TPC-H query number (1 to 22) nor median, topk, quartiles, topk_large, median_groups", s.trim()))),
        }
    };
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let range = match part.split_once('-') {
            Some((a, b)) => num(a)?..=num(b)?,
            None => {
                let n = num(part)?;
                n..=n
            }
        };
        if range.is_empty() {
            return Err(DataFusionError::Plan(format!("--queries: empty range '{}'", part.trim())));
        }
        for q in range {
            if !out.contains(&q) {
                out.push(q);
            }
        }
    }
    Ok(out)
}

/// One table: name, schema, batches.
type Table = (String, SchemaRef, Vec<RecordBatch>);

/// The Parquet path of each table in `dir`: `<table>.parquet` (file or directory) or `<table>/`.
fn find_tables(dir: &Path) -> (Vec<(String, PathBuf)>, Vec<&'static str>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for t in TPCH_TABLES {
        let candidates = [dir.join(format!("{t}.parquet")), dir.join(t)];
        match candidates.into_iter().find(|p| p.exists()) {
            Some(p) => found.push((t.to_string(), p)),
            None => missing.push(t),
        }
    }
    (found, missing)
}

/// Makes sure `dir` holds the 8 tables as Parquet: uses them when all are there,
/// writes them at `sf` when none is (into a fresh directory first when `dir` does
/// not exist, so an interrupted run leaves nothing half-written behind).
async fn ensure_parquet(dir: &Path, sf: f64) -> Result<Vec<(String, PathBuf)>> {
    let (found, missing) = find_tables(dir);
    if missing.is_empty() {
        return Ok(found);
    }
    if !found.is_empty() {
        return Err(DataFusionError::Plan(format!(
            "{} holds some TPC-H tables but not {} (expected <table>.parquet files or directories, as `ridgeline gen tpch` writes)",
            dir.display(),
            missing.join(", ")
        )));
    }
    let fresh = !dir.exists();
    let target = if fresh {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "tpch".into());
        dir.with_file_name(format!(".{name}.partial-{}", std::process::id()))
    } else {
        dir.to_path_buf()
    };
    eprintln!("writing TPC-H SF {sf} as Parquet to {}", dir.display());
    let t2 = target.clone();
    tokio::task::spawn_blocking(move || write_tpch(sf, &t2, OutputFormat::Parquet, true))
        .await
        .map_err(|e| exec_err(format!("data generation failed: {e}")))??;
    if fresh {
        std::fs::rename(&target, dir)
            .map_err(|e| exec_err(format!("cannot move {} to {}: {e}", target.display(), dir.display())))?;
    }
    let (found, missing) = find_tables(dir);
    if !missing.is_empty() {
        return Err(exec_err(format!("{} lacks {} after generation", dir.display(), missing.join(", "))));
    }
    Ok(found)
}

/// Reads Parquet tables into memory.
async fn read_parquet(files: &[(String, PathBuf)]) -> Result<Vec<Table>> {
    let ctx = SessionContext::new();
    let mut out = Vec::new();
    for (name, path) in files {
        let p = path.to_string_lossy().to_string();
        let df = ctx
            .read_parquet(p.as_str(), ParquetReadOptions::default())
            .await
            .map_err(|e| exec_err(format!("cannot read table {name} from {p}: {e}")))?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        out.push((name.clone(), schema, batches));
    }
    Ok(out)
}

/// Where `--duckdb` writes generated data when no `--data` is given.
fn default_cache_dir(sf: f64) -> PathBuf {
    let name = format!("tpch-sf{sf}");
    if Path::new("target").is_dir() {
        Path::new("target").join(name)
    } else {
        std::env::temp_dir().join(format!("ridgeline-{name}"))
    }
}

/// Timings of one query in one engine / mode.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    pub(crate) min_ms: f64,
    pub(crate) median_ms: f64,
    pub(crate) rows: usize,
    /// Timed runs behind the figures.
    pub(crate) runs: usize,
    /// Every timed run's milliseconds, in run order.
    pub(crate) times: Vec<f64>,
}

/// The median of the run-by-run ratios `a[i] / b[i]` of two modes whose runs
/// alternated (run i of each taken back to back), or `None` without a pair. Each
/// pair shares the machine's state of the moment (clock, caches, other load), so
/// drift over a query's runs cancels out of it, unlike a ratio of two medians.
pub(crate) fn paired_ratio(a: &[f64], b: &[f64]) -> Option<f64> {
    let r: Vec<f64> = a.iter().zip(b).filter(|(_, y)| **y > 0.0).map(|(x, y)| x / y).collect();
    (!r.is_empty()).then(|| median(&r))
}

/// One query in one Ridgeline mode.
pub(crate) struct ModeRun {
    pub(crate) timing: Timing,
    pub(crate) result: Vec<Vec<String>>,
    pub(crate) gpu_ops: Vec<String>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

async fn execute(rl: &Ridgeline, sql: &str) -> Result<(Vec<RecordBatch>, Arc<dyn ExecutionPlan>)> {
    let df = rl.sql(sql).await?;
    let plan = df.create_physical_plan().await?;
    let batches = collect(plan.clone(), rl.session().task_ctx()).await?;
    Ok((batches, plan))
}

/// Runs `sql` (planning and execution) until `timing::WARM_UP_MS` have passed
/// since `since` (at most 1000 runs): the async twin of `timing::warm_up`, so a GPU
/// left idle by the previous mode is back at its clock.
pub(crate) async fn warm_up_query(rl: &Ridgeline, sql: &str, since: Instant) -> Result<()> {
    let mut runs = 0;
    while since.elapsed().as_secs_f64() * 1e3 < ridgeline_operators::timing::WARM_UP_MS && runs < 1000 {
        execute(rl, sql).await?;
        runs += 1;
    }
    Ok(())
}

/// The most timed runs per query and engine that `--min-time-ms` asks for.
pub(crate) const MAX_RUNS: usize = 1000;

/// Whether another round of timed runs is due after `done` rounds: always below
/// `iterations`, then while some engine's timed runs add up to less than `min_ms`.
fn more_runs(done: usize, iterations: usize, min_ms: f64, spent_ms: impl Iterator<Item = f64>) -> bool {
    done < iterations || (done < MAX_RUNS && spent_ms.fold(f64::INFINITY, f64::min) < min_ms)
}

/// Warm-up (the first run gives the answer; see [`warm_up_query`]), then
/// `iterations` timed runs (planning and execution).
pub(crate) async fn run_mode(rl: &Ridgeline, sql: &str, iterations: usize) -> Result<ModeRun> {
    run_modes(&[rl], sql, iterations, 0.0, false).await.pop().expect("one engine")
}

/// [`run_mode`] for several engines on one query. Every engine gets its answer run
/// and warm-up first; with `interleave` the timed runs then alternate between the
/// engines, in forward order on even iterations and backward on odd ones, so a drift
/// of the machine (clocks, memory left by the previous run, other load) falls on
/// every engine alike instead of on whichever ran second. Without it each engine
/// runs all its iterations in turn. After `iterations` runs, runs go on while an
/// engine has spent less than `min_ms` in timed runs (every engine gets the same
/// number, at most [`MAX_RUNS`]). An engine that fails keeps its error and is left
/// out of the later rounds.
pub(crate) async fn run_modes(engines: &[&Ridgeline], sql: &str, iterations: usize, min_ms: f64, interleave: bool) -> Vec<Result<ModeRun>> {
    run_modes_with(engines, sql, iterations, min_ms, interleave, false).await
}

/// [`run_modes`]; with `plan_only` the timed runs plan the query (SQL text to
/// physical plan, every optimizer rule included) without executing it, while the
/// first run still executes it for the answer.
pub(crate) async fn run_modes_with(engines: &[&Ridgeline], sql: &str, iterations: usize, min_ms: f64, interleave: bool, plan_only: bool) -> Vec<Result<ModeRun>> {
    struct Slot {
        result: Vec<Vec<String>>,
        plan: Arc<dyn ExecutionPlan>,
        times: Vec<f64>,
    }
    async fn first(rl: &Ridgeline, sql: &str) -> Result<Slot> {
        let t = Instant::now();
        let (batches, plan) = execute(rl, sql).await?;
        let result = to_rows(&batches)?;
        warm_up_query(rl, sql, t).await?;
        Ok(Slot { result, plan, times: Vec::new() })
    }
    async fn timed(rl: &Ridgeline, sql: &str, slot: &mut Slot, plan_only: bool) -> Result<()> {
        let t = Instant::now();
        let p = if plan_only { rl.sql(sql).await?.create_physical_plan().await? } else { execute(rl, sql).await?.1 };
        slot.times.push(t.elapsed().as_secs_f64() * 1e3);
        slot.plan = p;
        Ok(())
    }
    let mut slots: Vec<Result<Slot>> = Vec::with_capacity(engines.len());
    if interleave {
        for rl in engines {
            slots.push(first(rl, sql).await);
        }
        let mut i = 0;
        while more_runs(i, iterations, min_ms, slots.iter().filter_map(|s| s.as_ref().ok()).map(|s| s.times.iter().sum::<f64>())) {
            let order: Vec<usize> = if i % 2 == 0 { (0..engines.len()).collect() } else { (0..engines.len()).rev().collect() };
            for e in order {
                if let Ok(slot) = &mut slots[e] {
                    if let Err(err) = timed(engines[e], sql, slot, plan_only).await {
                        slots[e] = Err(err);
                    }
                }
            }
            i += 1;
        }
    } else {
        for rl in engines {
            let mut slot = first(rl, sql).await;
            for i in 0.. {
                let Ok(s) = &mut slot else { break };
                if !more_runs(i, iterations, min_ms, std::iter::once(s.times.iter().sum::<f64>())) {
                    break;
                }
                if let Err(err) = timed(rl, sql, s, plan_only).await {
                    slot = Err(err);
                }
            }
            slots.push(slot);
        }
    }
    slots
        .into_iter()
        .map(|slot| {
            let s = slot?;
            Ok(ModeRun {
                timing: Timing { min_ms: s.times.iter().copied().fold(f64::INFINITY, f64::min), median_ms: median(&s.times), rows: s.result.len(), runs: s.times.len(), times: s.times },
                result: s.result,
                gpu_ops: gpu_operator_names(&s.plan),
            })
        })
        .collect()
}

/// Result rows as display strings (NULL as `NULL`).
fn to_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let fmts = b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &opts)).collect::<std::result::Result<Vec<_>, _>>()?;
        for i in 0..b.num_rows() {
            rows.push(fmts.iter().map(|f| f.value(i).to_string()).collect());
        }
    }
    Ok(rows)
}

/// Tolerances for numeric cells.
#[derive(Clone, Copy)]
struct Tol {
    rel: f64,
    abs: f64,
}

/// GPU against CPU.
const TOL_MODES: Tol = Tol { rel: 1e-9, abs: 1e-12 };
/// Against dbgen's answers, which are rounded to 2 decimals.
const TOL_ANSWERS: Tol = Tol { rel: 1e-9, abs: 0.01 + 1e-9 };

fn cell_eq(a: &str, b: &str, tol: Tol) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let d = (x - y).abs();
            d <= tol.abs || d <= tol.rel * x.abs().max(y.abs())
        }
        _ => false,
    }
}

/// Compares results; `None` when equal, else the first difference.
fn compare(got: &[Vec<String>], want: &[Vec<String>], ordered: bool, tol: Tol) -> Option<String> {
    let (mut g, mut w) = (got.to_vec(), want.to_vec());
    if !ordered {
        g.sort();
        w.sort();
    }
    let show = |r: &Vec<String>| r.iter().map(|c| c.trim()).collect::<Vec<_>>().join("|");
    for (i, (a, b)) in g.iter().zip(w.iter()).enumerate() {
        if a.len() != b.len() || !a.iter().zip(b).all(|(x, y)| cell_eq(x, y, tol)) {
            return Some(format!("row {}: {} vs {}", i + 1, show(a), show(b)));
        }
    }
    if g.len() != w.len() {
        let extra = if g.len() > w.len() { &g[w.len()] } else { &w[g.len()] };
        return Some(format!("{} rows vs {}; first unmatched row {}: {}", g.len(), w.len(), g.len().min(w.len()) + 1, show(extra)));
    }
    None
}

/// Reads dbgen's `qN.out`: a header line, then `|`-separated rows.
fn read_answer(dir: &Path, q: usize) -> Result<Option<Vec<Vec<String>>>> {
    let path = dir.join(format!("q{q}.out"));
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| exec_err(format!("cannot read {}: {e}", path.display())))?;
    Ok(Some(
        text.lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
            .collect(),
    ))
}

/// Whether the query's result order is defined (top-level ORDER BY).
fn is_ordered(sql: &str) -> bool {
    sql.to_ascii_lowercase().contains("order by")
}

fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "-".into()
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() || v.iter().any(|x| x.is_nan() || *x <= 0.0) {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Prints an aligned table; columns flagged `true` are right-aligned.
fn print_table(headers: &[(String, bool)], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = headers.iter().map(|(h, _)| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let n = cells.len();
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = w[i].saturating_sub(c.chars().count());
                if headers[i].1 {
                    format!("{}{c}", " ".repeat(pad))
                } else if i + 1 == n {
                    c.to_string()
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect();
        println!("{}", parts.join(" | ").trim_end());
    };
    line(headers.iter().map(|(h, _)| h.as_str()).collect());
    println!("{}", w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("-+-"));
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// Per-query outcome.
struct QueryOutcome {
    q: usize,
    cpu: Option<std::result::Result<ModeRun, String>>,
    gpu: Option<std::result::Result<ModeRun, String>>,
    check: Option<String>,
}

/// What `bench tpch` runs: the modes, the queries, whether answers are checked.
struct Plan {
    sf: f64,
    queries: Vec<usize>,
    answers_dir: Option<PathBuf>,
    check: bool,
    run_cpu: bool,
    run_gpu: bool,
    gpu_line: String,
}

/// The data as loaded: the tables, the Parquet files they came from (for DuckDB)
/// and a line saying where they came from.
struct Data {
    tables: Vec<Table>,
    files: Vec<(String, PathBuf)>,
    source: String,
    rows_total: usize,
    gen_ms: f64,
}

/// Runs `ridgeline bench tpch`: checks the arguments, picks the modes, loads
/// the data, builds one engine per mode, times every query in every mode (and
/// DuckDB), then prints the table and fails if a run failed or an answer did not
/// match.
pub async fn run(args: TpchArgs) -> Result<()> {
    let plan = plan(&args)?;
    // DuckDB set-up first, so a missing Python fails before the long part.
    let duck_python = if args.duckdb { Some(duckdb::python(args.duckdb_wheel.as_deref())?) } else { None };
    let data = load_data(&args, plan.sf).await?;
    let files = data.files.clone();
    let (rl, gpu_rl) = engines(&args, &plan, data).await?;
    let outcomes = run_queries(&args, &plan, &rl, &gpu_rl).await?;
    let duck = match &duck_python {
        Some(py) => Some(duckdb::run(py, &files, &plan.queries, args.iterations, args.min_time_ms).await?),
        None => None,
    };
    let (headers, rows, errors) = results_table(&args, &plan, &outcomes, duck.as_ref());
    report(&args, &plan, &outcomes, duck.as_ref(), &headers, &rows, &errors)
}

/// Checks the arguments and picks the modes (mode `on` without an adapter fails
/// here; `auto` without one times CPU mode only).
fn plan(args: &TpchArgs) -> Result<Plan> {
    let sf = args.sf;
    if !(sf.is_finite() && sf > 0.0) {
        return Err(DataFusionError::Plan(format!("invalid scale factor {sf}: it must be a positive number")));
    }
    if args.iterations == 0 {
        return Err(DataFusionError::Plan("--iterations must be at least 1".into()));
    }
    if args.plan_only && args.duckdb {
        return Err(DataFusionError::Plan("--plan-only times Ridgeline's planning; it does not go with --duckdb".into()));
    }
    if !(args.min_time_ms.is_finite() && args.min_time_ms >= 0.0) {
        return Err(DataFusionError::Plan(format!("--min-time-ms {}: it must be a number of milliseconds, 0 or more", args.min_time_ms)));
    }
    let queries = parse_queries(args.queries.as_deref())?;
    let answers_dir = args.answers.clone().or_else(|| crate::config::switch("RIDGELINE_TPCH_ANSWERS").map(PathBuf::from));
    let check = args.check || args.answers.is_some();
    if let Some(d) = &args.answers {
        if !d.is_dir() {
            return Err(DataFusionError::Plan(format!("--answers {}: not a directory", d.display())));
        }
    }

    // Modes.
    let mode = args.gpu.unwrap_or(GpuMode::Auto);
    let run_cpu = mode != GpuMode::On;
    let mut run_gpu = mode != GpuMode::Off;
    let mut gpu_line = "GPU: off".to_string();
    if run_gpu {
        match ridgeline_operators::context::global() {
            Ok(c) => gpu_line = format!("GPU: {} ({:?}), GPU column in mode {}", c.info().name, c.info().backend, args.gpu_column.trim()),
            Err(e) if mode == GpuMode::On => {
                return Err(exec_err(format!("--gpu on, but the GPU is unavailable: {e}")));
            }
            Err(e) => {
                gpu_line = format!("GPU: unavailable ({e}); timing CPU mode only");
                run_gpu = false;
            }
        }
    }

    Ok(Plan { sf, queries, answers_dir, check, run_cpu, run_gpu, gpu_line })
}

/// The tables: read from `--data` (generated there first if missing; DuckDB's
/// runs need files, so `--duckdb` without `--data` uses a cache directory) or
/// generated in memory.
async fn load_data(args: &TpchArgs, sf: f64) -> Result<Data> {
    let data_dir = match (&args.data, args.duckdb) {
        (Some(d), _) => Some(d.clone()),
        (None, true) => Some(default_cache_dir(sf)),
        (None, false) => None,
    };
    let t = Instant::now();
    let (tables, files, source) = match &data_dir {
        Some(d) => {
            let files = ensure_parquet(d, sf).await?;
            (read_parquet(&files).await?, files, format!("read from {}", d.display()))
        }
        None => {
            let gen = tokio::task::spawn_blocking(move || generate_all(sf))
                .await
                .map_err(|e| exec_err(format!("data generation failed: {e}")))??;
            let tables = gen
                .into_iter()
                .map(|(n, b)| Ok((n.clone(), table_schema(&n)?, b)))
                .collect::<Result<Vec<_>>>()?;
            (tables, vec![], "generated in memory".to_string())
        }
    };
    let rows_total: usize = tables.iter().map(|(_, _, b)| b.iter().map(|x| x.num_rows()).sum::<usize>()).sum();
    if let Some((_, _, b)) = tables.iter().find(|(n, _, _)| n == "supplier") {
        let want = tpchgen::generators::SupplierGenerator::calculate_row_count(sf, 1, 1);
        let got: usize = b.iter().map(|x| x.num_rows()).sum();
        if got as i64 != want {
            eprintln!("warning: supplier has {got} rows, SF {sf} has {want}: the data is of another scale factor");
        }
    }
    let gen_ms = t.elapsed().as_secs_f64() * 1e3;

    Ok(Data { tables, files, source, rows_total, gen_ms })
}

/// The CPU-mode engine and the GPU-mode one (the same engine when only CPU mode
/// runs), with `--set`/`--set-gpu` applied and the tables registered; prints the
/// run's header lines.
async fn engines(args: &TpchArgs, plan: &Plan, data: Data) -> Result<(Ridgeline, Ridgeline)> {
    let (sf, run_cpu, run_gpu) = (plan.sf, plan.run_cpu, plan.run_gpu);
    let Data { tables, source, rows_total, gen_ms, .. } = data;
    // CPU mode reads host tables; GPU mode reads the same tables, made GPU-resident
    // with --resident (so CPU mode never pays a download it would not have).
    let gpu_mode = match args.gpu_column.trim() {
        "auto" => GpuMode::Auto,
        "on" => GpuMode::On,
        other => return Err(exec_err(format!("--gpu-column must be auto or on, not '{other}'"))),
    };
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build()?;
    let gpu_rl = if run_gpu { Ridgeline::builder().gpu_mode(gpu_mode).build()? } else { rl.clone() };
    let gpu_only = if run_gpu { vec![&gpu_rl] } else { vec![] };
    for (kv, engines, flag) in args.settings.iter().map(|kv| (kv, vec![&rl, &gpu_rl], "--set")).chain(args.gpu_settings.iter().map(|kv| (kv, gpu_only.clone(), "--set-gpu"))) {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(exec_err(format!("{flag} takes KEY=VALUE, not '{kv}'")));
        };
        for e in engines {
            e.sql(&format!("SET {} = '{}'", k.trim(), v.trim().replace('\'', "''"))).await?.collect().await?;
        }
    }
    let t = Instant::now();
    let mut all_resident = args.resident;
    for (name, schema, batches) in tables {
        if run_gpu {
            if args.resident {
                all_resident &= gpu_rl.register_resident(&name, schema.clone(), batches.clone()).await?;
                // CPU mode reads the same host chunks (shared, not copied; chunked the
                // same way they stay one batch a chunk): where the modes run the same
                // plan they then read the same memory, and differ only in their plans.
                if let Some(host) = gpu_rl.host_chunks(&name).await? {
                    rl.register_batches(&name, schema, host)?;
                    continue;
                }
            } else {
                gpu_rl.register_batches(&name, schema.clone(), batches.clone())?;
            }
        }
        rl.register_batches(&name, schema, batches)?;
    }
    let placement = if !args.resident {
        "in host memory"
    } else if all_resident {
        "GPU-resident"
    } else {
        "resident where they fit (some or all in host memory)"
    };
    println!("bench tpch: SF {sf}, {rows_total} rows {source} in {gen_ms:.0} ms; tables {placement} in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    if !args.settings.is_empty() {
        println!("settings: {}", args.settings.join(", "));
    }
    if !args.gpu_settings.is_empty() {
        println!("GPU column's settings: {}", args.gpu_settings.join(", "));
    }
    let mut runs = if args.iterations == 1 { "1 timed run".to_string() } else { format!("{} timed runs", args.iterations) };
    if args.min_time_ms > 0.0 {
        runs = format!("{runs} (more until {:.0} ms of timed runs, at most {MAX_RUNS})", args.min_time_ms);
    }
    let order = if args.blocks || !(run_cpu && run_gpu) { "" } else { ", the modes alternating run by run" };
    let what = if args.plan_only { "planning only: SQL text to physical plan" } else { "planning + execution" };
    println!("{}; {runs} per query and mode after one warm-up ({what}){order}", plan.gpu_line);

    Ok((rl, gpu_rl))
}

/// Times every query in every mode (see [`run_modes_with`]) and checks answers.
async fn run_queries(args: &TpchArgs, plan: &Plan, rl: &Ridgeline, gpu_rl: &Ridgeline) -> Result<Vec<QueryOutcome>> {
    let (sf, run_cpu, run_gpu, check, answers_dir, queries) = (plan.sf, plan.run_cpu, plan.run_gpu, plan.check, &plan.answers_dir, &plan.queries);
    let mut outcomes = Vec::new();
    for &q in queries {
        let sql = query_sql(q);
        let mut o = QueryOutcome { q, cpu: None, gpu: None, check: None };
        let engines: Vec<&Ridgeline> = [(run_cpu, rl), (run_gpu, gpu_rl)].into_iter().filter(|(on, _)| *on).map(|(_, e)| e).collect();
        let mut runs = run_modes_with(&engines, sql, args.iterations, args.min_time_ms, !args.blocks, args.plan_only).await.into_iter();
        if run_cpu {
            o.cpu = runs.next().map(|r| r.map_err(|e| crate::format::one_line(&e)));
        }
        if run_gpu {
            o.gpu = runs.next().map(|r| r.map_err(|e| crate::format::one_line(&e)));
        }
        if check {
            o.check = Some(check_query(&o, sql, sf, answers_dir.as_deref())?);
        }
        outcomes.push(o);
    }

    Ok(outcomes)
}

/// The results table: headers (name, right-aligned), one row per query plus the
/// geomean row, and the failed runs.
fn results_table(args: &TpchArgs, plan: &Plan, outcomes: &[QueryOutcome], duck: Option<&duckdb::Report>) -> (Vec<(String, bool)>, Vec<Vec<String>>, Vec<String>) {
    let (run_cpu, run_gpu, check) = (plan.run_cpu, plan.run_gpu, plan.check);
    let mut headers: Vec<(String, bool)> = vec![("query".into(), false)];
    if run_cpu {
        headers.extend([("CPU min ms".into(), true), ("CPU med ms".into(), true)]);
    }
    if run_gpu {
        headers.extend([("GPU min ms".into(), true), ("GPU med ms".into(), true)]);
    }
    // run-by-run ratios exist where the modes alternated
    let paired = run_cpu && run_gpu && !args.blocks;
    if run_cpu && run_gpu {
        headers.push(("CPU/GPU".into(), true));
    }
    if paired {
        headers.push(("CPU/GPU paired".into(), true));
    }
    if duck.is_some() {
        headers.extend([("DuckDB min ms".into(), true), ("DuckDB med ms".into(), true)]);
    }
    headers.push(("rows".into(), true));
    let show_runs = args.min_time_ms > 0.0;
    if show_runs {
        headers.push(("runs".into(), true));
    }
    if run_gpu {
        headers.push(("GPU operators".into(), false));
    }
    if check {
        headers.push(("check".into(), false));
    }
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    // geometric means over the queries where every column has a time
    let mut gm: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut pairs_gm: Vec<f64> = Vec::new();
    for o in outcomes {
        let mut r = vec![query_name(o.q)];
        let mut cols: Vec<(&str, Option<&Timing>)> = Vec::new();
        for (name, run) in [("CPU", &o.cpu), ("GPU", &o.gpu)] {
            match run {
                Some(Ok(m)) => cols.push((name, Some(&m.timing))),
                Some(Err(e)) => {
                    errors.push(format!("{} {name}: {e}", query_name(o.q)));
                    cols.push((name, None));
                }
                None => {}
            }
        }
        let duck_t = duck.as_ref().map(|d| match d.queries.get(&o.q) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                errors.push(format!("{} DuckDB: {e}", query_name(o.q)));
                None
            }
            None => None,
        });
        for (_, t) in &cols {
            match t {
                Some(t) => r.extend([fmt_ms(t.min_ms), fmt_ms(t.median_ms)]),
                None => r.extend(["error".into(), "error".into()]),
            }
        }
        let cpu_t = cols.iter().find(|c| c.0 == "CPU").and_then(|c| c.1);
        let gpu_t = cols.iter().find(|c| c.0 == "GPU").and_then(|c| c.1);
        if run_cpu && run_gpu {
            r.push(match (cpu_t, gpu_t) {
                (Some(c), Some(g)) => format!("{:.2}", c.median_ms / g.median_ms),
                _ => "-".into(),
            });
        }
        if paired {
            let pr = cpu_t.zip(gpu_t).and_then(|(c, g)| paired_ratio(&c.times, &g.times));
            if let Some(p) = pr {
                pairs_gm.push(p);
            }
            r.push(pr.map(|p| format!("{p:.2}")).unwrap_or_else(|| "-".into()));
        }
        if let Some(d) = &duck_t {
            match d {
                Some(t) => r.extend([fmt_ms(t.min_ms), fmt_ms(t.median_ms)]),
                None => r.extend(["error".into(), "error".into()]),
            }
        }
        let n_rows = cpu_t.or(gpu_t).map(|t| t.rows);
        let mut rows_cell = n_rows.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
        if let (Some(n), Some(Some(d))) = (n_rows, &duck_t) {
            if d.rows != n {
                rows_cell = format!("{n} (DuckDB {})", d.rows);
            }
        }
        r.push(rows_cell);
        if show_runs {
            // Ridgeline's modes alternate, so they share one count unless one failed
            let mut counts: Vec<String> = cols.iter().filter_map(|c| c.1).map(|t| t.runs.to_string()).collect();
            counts.dedup();
            let mut cell = if counts.is_empty() { "-".to_string() } else { counts.join("/") };
            if let Some(Some(d)) = &duck_t {
                cell = format!("{cell} (DuckDB {})", d.runs);
            }
            r.push(cell);
        }
        if run_gpu {
            r.push(match &o.gpu {
                Some(Ok(m)) if m.gpu_ops.is_empty() => "none".into(),
                Some(Ok(m)) => m.gpu_ops.iter().map(|n| n.trim_start_matches("Gpu").trim_end_matches("Exec")).collect::<Vec<_>>().join(","),
                _ => "-".into(),
            });
        }
        if let Some(c) = &o.check {
            r.push(c.clone());
        }
        // every time column present: record for the geometric mean
        let all = cols.iter().all(|c| c.1.is_some()) && duck_t.as_ref().is_none_or(|d| d.is_some());
        if all {
            for (name, t) in &cols {
                let t = t.expect("checked");
                gm.entry(if *name == "CPU" { "cpu_min" } else { "gpu_min" }).or_default().push(t.min_ms);
                gm.entry(if *name == "CPU" { "cpu_med" } else { "gpu_med" }).or_default().push(t.median_ms);
            }
            if let Some(Some(t)) = &duck_t {
                gm.entry("duck_min").or_default().push(t.min_ms);
                gm.entry("duck_med").or_default().push(t.median_ms);
            }
        }
        rows.push(r);
    }
    if outcomes.len() > 1 {
        let g = |k: &str| gm.get(k).map(|v| geomean(v)).unwrap_or(f64::NAN);
        let mut r = vec!["geomean".to_string()];
        if run_cpu {
            r.extend([fmt_ms(g("cpu_min")), fmt_ms(g("cpu_med"))]);
        }
        if run_gpu {
            r.extend([fmt_ms(g("gpu_min")), fmt_ms(g("gpu_med"))]);
        }
        if run_cpu && run_gpu {
            let ratio = g("cpu_med") / g("gpu_med");
            r.push(if ratio.is_finite() { format!("{ratio:.2}") } else { "-".into() });
        }
        if paired {
            r.push(if pairs_gm.is_empty() { "-".into() } else { format!("{:.2}", geomean(&pairs_gm)) });
        }
        if duck.is_some() {
            r.extend([fmt_ms(g("duck_min")), fmt_ms(g("duck_med"))]);
        }
        while r.len() < headers.len() {
            r.push(String::new());
        }
        rows.push(r);
    }
    (headers, rows, errors)
}

/// Prints the table and its notes; fails when a run failed or an answer did not match.
fn report(args: &TpchArgs, plan: &Plan, outcomes: &[QueryOutcome], duck: Option<&duckdb::Report>, headers: &[(String, bool)], rows: &[Vec<String>], errors: &[String]) -> Result<()> {
    let (sf, run_cpu, run_gpu, check, answers_dir) = (plan.sf, plan.run_cpu, plan.run_gpu, plan.check, &plan.answers_dir);
    let paired = run_cpu && run_gpu && !args.blocks;
    println!();
    print_table(headers, rows);
    if let Some(d) = duck {
        println!("DuckDB {} ({} threads): tables loaded into memory from the same Parquet files", d.version, d.threads);
    }
    if paired {
        println!("CPU/GPU: ratio of the medians; paired: median of the run-by-run ratios (run i of each mode back to back), geomean row over the queries");
    }
    if run_gpu {
        println!("GPU operators: Gpu*Exec nodes in the GPU-mode plan");
    }
    if check {
        let mut what = Vec::new();
        if run_cpu && run_gpu {
            what.push("GPU vs CPU (relative tolerance 1e-9)".to_string());
        }
        match &answers_dir {
            Some(d) if sf == 1.0 => what.push(format!("SF1 answers in {} (to 0.01)", d.display())),
            Some(_) => what.push("no answer files (they are for SF 1 only)".into()),
            None if sf == 1.0 => what.push(
                "no SF1 answers (pass --answers DIR: dbgen's answers/ directory from the TPC-H tools, qN.out)".into(),
            ),
            None => {}
        }
        if what.is_empty() {
            what.push("nothing to compare: one mode only and no answers".into());
        }
        println!("check: {}", what.join("; "));
    }
    for e in errors {
        println!("error: {e}");
    }
    let mismatches = outcomes.iter().filter(|o| o.check.as_deref().is_some_and(|c| c.starts_with("MISMATCH"))).count();
    if !errors.is_empty() || mismatches > 0 {
        let mut what = Vec::new();
        if !errors.is_empty() {
            what.push(format!("{} runs failed", errors.len()));
        }
        if mismatches > 0 {
            what.push(format!("{mismatches} of {} queries did not match", outcomes.len()));
        }
        return Err(exec_err(format!("bench tpch: {}", what.join(", "))));
    }
    Ok(())
}


/// The check column for one query.
fn check_query(o: &QueryOutcome, sql: &str, sf: f64, answers: Option<&Path>) -> Result<String> {
    let ordered = is_ordered(sql);
    let cpu = match &o.cpu {
        Some(Ok(m)) => Some(&m.result),
        Some(Err(_)) => return Ok("ERROR".into()),
        None => None,
    };
    let gpu = match &o.gpu {
        Some(Ok(m)) => Some(&m.result),
        Some(Err(_)) => return Ok("ERROR".into()),
        None => None,
    };
    let mut checked = Vec::new();
    let mut missing = false;
    if let (Some(c), Some(g)) = (cpu, gpu) {
        if let Some(d) = compare(g, c, ordered, TOL_MODES) {
            return Ok(format!("MISMATCH GPU vs CPU, {d}"));
        }
        checked.push("gpu=cpu");
    }
    if let (Some(dir), true) = (answers, sf == 1.0) {
        match read_answer(dir, o.q)? {
            Some(want) => {
                for (name, got) in [("CPU", cpu), ("GPU", gpu)] {
                    if let Some(got) = got {
                        if let Some(d) = compare(got, &want, ordered, TOL_ANSWERS) {
                            return Ok(format!("MISMATCH {name} vs answer, {d}"));
                        }
                    }
                }
                checked.push("answer");
            }
            None => missing = true,
        }
    }
    let status = if checked.is_empty() { "-" } else { "OK" };
    Ok(if missing { format!("{status} (no q{}.out)", o.q) } else { status.to_string() })
}

/// DuckDB through its Python package.
/// A Python that can import duckdb (see `duckdb::python`).
pub(crate) fn duckdb_python(wheel: Option<&Path>) -> Result<PathBuf> {
    duckdb::python(wheel)
}

mod duckdb {
    use super::{exec_err, median, Timing};
    use datafusion::error::{DataFusionError, Result};
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// DuckDB's results: per query timings or an error.
    pub struct Report {
        pub version: String,
        pub threads: usize,
        pub queries: BTreeMap<usize, std::result::Result<Timing, String>>,
    }

    const SCRIPT: &str = r#"
import json, sys, time
import duckdb

cfg = json.load(open(sys.argv[1]))
con = duckdb.connect()
con.execute("SET threads TO %d" % int(cfg["threads"]))
for name, path in cfg["tables"].items():
    src = "read_parquet('%s')" % path.replace("'", "''")
    kind = "VIEW" if cfg["views"] else "TABLE"
    con.execute("CREATE %s %s AS SELECT * FROM %s" % (kind, name, src))
out = {"version": duckdb.__version__, "queries": {}}
for q, sql in cfg["queries"].items():
    try:
        rows = len(con.execute(sql).fetchall())
        times = []
        while len(times) < int(cfg["iterations"]) or (len(times) < int(cfg["max_runs"]) and sum(times) < float(cfg["min_ms"])):
            t = time.perf_counter()
            con.execute(sql).fetchall()
            times.append((time.perf_counter() - t) * 1e3)
        out["queries"][q] = {"times_ms": times, "rows": rows}
    except Exception as e:
        out["queries"][q] = {"error": " ".join(str(e).split())}
print(json.dumps(out))
"#;

    fn venv_python(venv: &Path) -> PathBuf {
        if cfg!(windows) {
            venv.join("Scripts").join("python.exe")
        } else {
            venv.join("bin").join("python")
        }
    }

    /// `Ok(version)` when `python` can import duckdb.
    fn probe(python: &Path) -> std::result::Result<String, String> {
        match Command::new(python).args(["-c", "import duckdb; print(duckdb.__version__)"]).output() {
            Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
            Ok(o) => Err(tail(&o.stderr)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn tail(bytes: &[u8]) -> String {
        let s = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }

    fn run_step(cmd: &mut Command, what: &str) -> Result<()> {
        eprintln!("duckdb: {what}");
        let o = cmd.output().map_err(|e| exec_err(format!("DuckDB set-up: cannot {what}: {e}")))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(exec_err(format!("DuckDB set-up: {what} failed: {}", tail(&o.stderr))))
        }
    }

    /// A Python that can import duckdb: RIDGELINE_PYTHON, else the project's virtual
    /// environment (RIDGELINE_DUCKDB_VENV, default ./.venv-duckdb), else `python3`;
    /// failing those, creates the environment and installs duckdb into it (from
    /// `wheel` / RIDGELINE_DUCKDB_WHEEL offline, else from the package index).
    pub fn python(wheel: Option<&Path>) -> Result<PathBuf> {
        if let Some(p) = crate::config::switch("RIDGELINE_PYTHON").map(PathBuf::from) {
            let p = PathBuf::from(p);
            return match probe(&p) {
                Ok(_) => Ok(p),
                Err(e) => Err(exec_err(format!("RIDGELINE_PYTHON={} cannot import duckdb: {e}", p.display()))),
            };
        }
        let venv = crate::config::switch("RIDGELINE_DUCKDB_VENV").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".venv-duckdb"));
        let vpy = venv_python(&venv);
        if vpy.exists() && probe(&vpy).is_ok() {
            return Ok(vpy);
        }
        let system = PathBuf::from("python3");
        if !vpy.exists() && probe(&system).is_ok() {
            return Ok(system);
        }
        let wheel = wheel.map(Path::to_path_buf).or_else(|| crate::config::switch("RIDGELINE_DUCKDB_WHEEL").map(PathBuf::from));
        if let Some(w) = &wheel {
            if !w.is_file() {
                return Err(DataFusionError::Plan(format!("duckdb wheel {} does not exist", w.display())));
            }
        }
        if !vpy.exists() {
            run_step(
                Command::new("python3").arg("-m").arg("venv").arg(&venv),
                &format!("create the virtual environment {} (python3 -m venv)", venv.display()),
            )?;
        }
        match &wheel {
            Some(w) => run_step(
                Command::new(&vpy).args(["-m", "pip", "install", "--quiet", "--no-index"]).arg(w),
                &format!("install {} into {}", w.display(), venv.display()),
            )?,
            None => run_step(
                Command::new(&vpy).args(["-m", "pip", "install", "--quiet", "duckdb"]),
                &format!(
                    "install duckdb into {} (pip install duckdb; offline, pass --duckdb-wheel or RIDGELINE_DUCKDB_WHEEL)",
                    venv.display()
                ),
            )?,
        }
        probe(&vpy).map_err(|e| exec_err(format!("duckdb was installed into {} but does not import: {e}", venv.display())))?;
        Ok(vpy)
    }

    /// DuckDB's SQL for a query: the TPC-H text is accepted as is.
    fn dialect(sql: &str) -> String {
        sql.trim().trim_end_matches(';').to_string()
    }

    /// Runs the queries in DuckDB over the Parquet `files`.
    pub async fn run(python: &Path, files: &[(String, PathBuf)], queries: &[usize], iterations: usize, min_ms: f64) -> Result<Report> {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let mut tables = serde_json::Map::new();
        for (name, path) in files {
            let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let src = if abs.is_dir() { abs.join("*.parquet") } else { abs };
            tables.insert(name.clone(), src.to_string_lossy().to_string().into());
        }
        let qs: serde_json::Map<String, serde_json::Value> =
            queries.iter().map(|&q| (q.to_string(), dialect(super::query_sql(q)).into())).collect();
        let views = crate::config::switch("RIDGELINE_DUCKDB_VIEWS") == Some("1");
        let cfg = serde_json::json!({ "threads": threads, "iterations": iterations, "min_ms": min_ms, "max_runs": super::MAX_RUNS, "tables": tables, "queries": qs, "views": views });
        let dir = std::env::temp_dir().join(format!("ridgeline-duckdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| exec_err(format!("cannot create {}: {e}", dir.display())))?;
        let (script, input) = (dir.join("bench_tpch.py"), dir.join("input.json"));
        std::fs::write(&script, SCRIPT).map_err(|e| exec_err(format!("cannot write {}: {e}", script.display())))?;
        std::fs::write(&input, cfg.to_string()).map_err(|e| exec_err(format!("cannot write {}: {e}", input.display())))?;
        let py = python.to_path_buf();
        let (s2, i2) = (script.clone(), input.clone());
        let out = tokio::task::spawn_blocking(move || Command::new(&py).arg(&s2).arg(&i2).output())
            .await
            .map_err(|e| exec_err(format!("DuckDB run failed: {e}")))?
            .map_err(|e| exec_err(format!("cannot run {}: {e}", python.display())));
        let _ = std::fs::remove_dir_all(&dir);
        let out = out?;
        if !out.status.success() {
            return Err(exec_err(format!("DuckDB script failed: {}", tail(&out.stderr))));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| exec_err(format!("cannot parse DuckDB's output ({e}): {}", tail(&out.stdout))))?;
        let mut report = Report {
            version: v["version"].as_str().unwrap_or("?").to_string(),
            threads,
            queries: BTreeMap::new(),
        };
        for &q in queries {
            let r = &v["queries"][q.to_string()];
            let res = if let Some(e) = r["error"].as_str() {
                Err(e.to_string())
            } else {
                let times: Vec<f64> = r["times_ms"].as_array().map(|a| a.iter().filter_map(|x| x.as_f64()).collect()).unwrap_or_default();
                match (times.is_empty(), r["rows"].as_u64()) {
                    (false, Some(rows)) => Ok(Timing {
                        min_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
                        median_ms: median(&times),
                        rows: rows as usize,
                        runs: times.len(),
                        times,
                    }),
                    _ => Err("no result from DuckDB".to_string()),
                }
            };
            report.queries.insert(q, res);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn modes_alternate_and_keep_their_errors() {
        let with = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        with.sql("CREATE TABLE t AS VALUES (1), (2), (3)").await.unwrap().collect().await.unwrap();
        let without = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        for interleave in [true, false] {
            let runs = run_modes(&[&with, &without, &with], "SELECT sum(column1) FROM t", 3, 0.0, interleave).await;
            assert_eq!(runs.len(), 3);
            for i in [0, 2] {
                let r = runs[i].as_ref().unwrap();
                assert_eq!(r.result, vec![vec!["6".to_string()]], "engine {i}, interleave {interleave}");
                assert!(r.timing.min_ms.is_finite() && r.timing.min_ms <= r.timing.median_ms);
            }
            let e = runs[1].as_ref().err().expect("no table t in the second engine").to_string();
            assert!(e.contains("t"), "{e}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn min_time_adds_runs_alike() {
        let a = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        a.sql("CREATE TABLE t AS VALUES (1), (2), (3)").await.unwrap().collect().await.unwrap();
        let b = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        b.sql("CREATE TABLE t AS VALUES (4), (5)").await.unwrap().collect().await.unwrap();
        let sql = "SELECT sum(column1) FROM t";
        for interleave in [true, false] {
            let plain = run_modes(&[&a, &b], sql, 2, 0.0, interleave).await;
            let runs: Vec<usize> = plain.iter().map(|r| r.as_ref().unwrap().timing.runs).collect();
            assert_eq!(runs, vec![2, 2], "interleave {interleave}");
            let long = run_modes(&[&a, &b], sql, 2, 30.0, interleave).await;
            let (ra, rb) = (long[0].as_ref().unwrap(), long[1].as_ref().unwrap());
            assert_eq!(ra.result, vec![vec!["6".to_string()]]);
            assert_eq!(rb.result, vec![vec!["9".to_string()]]);
            // past the 2 iterations only while 30 ms are not spent: runs of under 15 ms
            // each need more than 2
            for t in [&ra.timing, &rb.timing] {
                assert!(t.runs > 2 || t.min_ms * 2.0 >= 30.0, "{} runs, min {} ms", t.runs, t.min_ms);
                assert!(t.runs == 2 || t.min_ms * ((t.runs - 1) as f64) < 30.0 || interleave, "{} runs, min {} ms", t.runs, t.min_ms);
            }
            assert!(ra.timing.runs <= MAX_RUNS);
            if interleave {
                assert_eq!(ra.timing.runs, rb.timing.runs);
            }
        }
    }

    #[test]
    fn paired_ratio_cancels_drift() {
        // a slow drift shared by both modes: the ratio of medians sees the
        // drift's skew between the two sample sets, the paired ratio does not
        let cpu = [10.0, 11.0, 30.0, 31.0, 32.0];
        let gpu = [5.0, 5.5, 15.0, 15.5, 16.0];
        assert_eq!(paired_ratio(&cpu, &gpu), Some(2.0));
        assert_eq!(paired_ratio(&[4.0, 9.0, 1.0], &[2.0, 3.0, 1.0]), Some(2.0), "median of 2, 3 and 1");
        assert_eq!(paired_ratio(&[4.0, 6.0], &[2.0, 2.0]), Some(2.5), "even count: mean of the middle two");
        // unequal lengths pair what they share; nothing to pair is None
        assert_eq!(paired_ratio(&[3.0, 100.0], &[1.0]), Some(3.0));
        assert_eq!(paired_ratio(&[], &[1.0]), None);
        assert_eq!(paired_ratio(&[1.0], &[0.0]), None, "a zero time is not a ratio");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timed_runs_are_kept_in_order() {
        let a = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        let r = run_modes(&[&a], "SELECT 1", 4, 0.0, true).await.pop().unwrap().unwrap();
        assert_eq!(r.timing.times.len(), 4);
        assert_eq!(r.timing.runs, 4);
        let min = r.timing.times.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(min, r.timing.min_ms);
        assert!(r.timing.times.iter().all(|t| *t > 0.0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plan_only_times_planning_and_keeps_the_answer() {
        let a = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        a.sql("CREATE TABLE t AS VALUES (1), (2), (3)").await.unwrap().collect().await.unwrap();
        let r = run_modes_with(&[&a], "SELECT sum(column1) FROM t", 3, 0.0, true, true).await.pop().unwrap().unwrap();
        assert_eq!(r.result, vec![vec!["6".to_string()]], "the answer run executes");
        assert_eq!(r.timing.runs, 3);
        // an error found while planning fails the engine's column
        let e = run_modes_with(&[&a], "SELECT nope FROM t", 2, 0.0, true, true).await.pop().unwrap();
        assert!(e.err().unwrap().to_string().contains("nope"));
    }

    #[test]
    fn more_runs_rule() {
        assert!(more_runs(0, 3, 0.0, std::iter::empty()));
        assert!(!more_runs(3, 3, 0.0, [1.0, 2.0].into_iter()));
        assert!(more_runs(3, 3, 10.0, [20.0, 5.0].into_iter()), "the engine with 5 ms goes on");
        assert!(!more_runs(3, 3, 10.0, [20.0, 10.0].into_iter()));
        assert!(!more_runs(MAX_RUNS, 3, 10.0, [0.1].into_iter()), "capped");
        // every engine failed: no time to count, no more rounds past the minimum
        assert!(!more_runs(3, 3, 10.0, std::iter::empty()));
    }

    #[test]
    fn query_lists() {
        assert_eq!(parse_queries(None).unwrap().len(), 22);
        assert_eq!(parse_queries(Some("1,6")).unwrap(), vec![1, 6]);
        assert_eq!(parse_queries(Some("q3, 10-12,3")).unwrap(), vec![3, 10, 11, 12]);
        assert!(parse_queries(Some("23")).is_err());
        assert!(parse_queries(Some("5-2")).is_err());
        assert!(parse_queries(Some("x")).is_err());
    }

    #[test]
    fn comparisons() {
        let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = vec![r(&["A", "1.0000000001"]), r(&["B", "2"])];
        let b = vec![r(&["B", "2"]), r(&["A", "1"])];
        assert!(compare(&a, &b, false, TOL_MODES).is_none());
        assert!(compare(&a, &b, true, TOL_MODES).unwrap().starts_with("row 1"));
        let c = vec![r(&["A", "1.01"]), r(&["B", "2"])];
        assert!(compare(&c, &b, false, TOL_MODES).is_some());
        assert!(compare(&c, &b, false, TOL_ANSWERS).is_none());
        assert!(compare(&a[..1], &b, false, TOL_MODES).unwrap().contains("1 rows vs 2"));
        assert!(cell_eq(" x ", "x", TOL_MODES));
    }

    #[test]
    fn answer_file_format() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("q3.out"), "l_orderkey |revenue |o_orderdat|o_shippriority\n    2456423|406181.01|1995-03-05|    0\n").unwrap();
        let a = read_answer(dir.path(), 3).unwrap().unwrap();
        assert_eq!(a, vec![vec!["2456423", "406181.01", "1995-03-05", "0"]]);
        assert!(read_answer(dir.path(), 4).unwrap().is_none());
    }
}
