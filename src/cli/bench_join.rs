//! `ridgeline bench join`: the GPU hash join's primitives (build table, probe
//! to pairs) on device-resident i64 keys, against the CPU path of the same
//! primitives and DataFusion's hash join (`SELECT count(*) .. JOIN ..` over
//! memory tables, CPU mode) on the same keys.
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::join::{build_table_gpu, probe_gpu, HostJoinTable, JoinOptions, KeyColumn, KeyWidth, Keys};
use ridgeline_operators::{context, DeviceArray, GpuContext};
use std::time::Instant;

/// Arguments of `bench join`.
#[derive(clap::Args, Debug)]
pub struct JoinArgs {
    /// Build sides, log2 rows (comma-separated).
    #[arg(long, value_name = "LIST", default_value = "10,16,20,24")]
    pub build_log2: String,
    /// Probe sides, log2 rows (comma-separated).
    #[arg(long, value_name = "LIST", default_value = "20,24,26")]
    pub probe_log2: String,
    /// Match rates in percent (comma-separated).
    #[arg(long, value_name = "LIST", default_value = "1,50,100")]
    pub rates: String,
    /// Repetitions (GPU: median; CPU: best).
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
    /// Largest probe side (log2) the CPU columns run at (they take seconds beyond).
    #[arg(long, default_value_t = 26)]
    pub cpu_max_log2: u32,
    /// HBM bandwidth in GB/s for the bytes-moved floor (default: the H200's 4800).
    #[arg(long, default_value_t = 4800.0)]
    pub hbm_gbps: f64,
    /// Key-column layouts for the second table, a whole query (`SELECT count(*)
    /// .. JOIN ..` over resident tables, GPU mode against CPU mode): `1` (one i64
    /// key), `2` (two columns whose ranges pack into 64 bits) and `2h` (two columns
    /// too wide to pack: hashed, every pair checked); empty: no such table.
    #[arg(long, value_name = "LIST", default_value = "1,2,2h")]
    pub sql_keys: String,
    /// Largest probe side (log2) of the whole-query table.
    #[arg(long, default_value_t = 26)]
    pub sql_max_log2: u32,
}

/// A key-column layout of the whole-query table.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KeyLayout {
    One,
    Packed,
    Hashed,
}

impl KeyLayout {
    fn parse(s: &str) -> Result<Vec<KeyLayout>> {
        s.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| match t {
                "1" => Ok(KeyLayout::One),
                "2" => Ok(KeyLayout::Packed),
                "2h" => Ok(KeyLayout::Hashed),
                other => Err(DataFusionError::Plan(format!("--sql-keys: '{other}' is not one of 1, 2, 2h"))),
            })
            .collect()
    }
    fn label(self) -> &'static str {
        match self {
            KeyLayout::One => "1",
            KeyLayout::Packed => "2 packed",
            KeyLayout::Hashed => "2 hashed",
        }
    }
    /// The key columns of one side from single keys: a pair is equal exactly when
    /// the single keys are (the low 10 bits and the rest), spread over 60 bits in
    /// the hashed layout so the ranges' product leaves 64 bits.
    fn columns(self, k: &[i64]) -> Vec<Vec<i64>> {
        match self {
            KeyLayout::One => vec![k.to_vec()],
            KeyLayout::Packed => vec![k.iter().map(|x| x >> 10).collect(), k.iter().map(|x| x & 1023).collect()],
            KeyLayout::Hashed => vec![k.iter().map(|x| x >> 10).collect(), k.iter().map(|x| (x & 1023) << 50).collect()],
        }
    }
}

/// Registers `name` as a resident table of i64 columns `c0, c1, ..`.
fn register_keys(rt: &tokio::runtime::Runtime, rl: &crate::Ridgeline, name: &str, cols: &[Vec<i64>]) -> Result<()> {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    let n = cols[0].len();
    let mut batches = Vec::new();
    for start in (0..n).step_by(1 << 20) {
        let end = (start + (1 << 20)).min(n);
        let arrays: Vec<(String, ArrayRef)> =
            cols.iter().enumerate().map(|(i, c)| (format!("c{i}"), std::sync::Arc::new(Int64Array::from(c[start..end].to_vec())) as ArrayRef)).collect();
        batches.push(RecordBatch::try_from_iter(arrays)?);
    }
    let schema = batches[0].schema();
    rt.block_on(rl.register_resident(name, schema, batches))?;
    Ok(())
}

/// Best milliseconds of a counting join query and its count.
fn count_query_ms(rt: &tokio::runtime::Runtime, rl: &crate::Ridgeline, sql: &str, iterations: usize) -> Result<(f64, i64)> {
    use arrow::array::Int64Array;
    let mut best = f64::INFINITY;
    let mut n = -1;
    for _ in 0..=iterations.max(1) {
        let t = Instant::now();
        let out = rt.block_on(async { rl.sql(sql).await?.collect().await })?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        n = out[0].column(0).as_any().downcast_ref::<Int64Array>().map_or(-1, |a| a.value(0));
    }
    Ok((best, n))
}

/// The whole-query table: one and two key columns through `GpuHashJoinExec`
/// (mode on) and DataFusion's hash join (mode off) on the same resident tables.
fn sql_table(args: &JoinArgs, layouts: &[KeyLayout], rt: &tokio::runtime::Runtime, builds: &[u32], probes: &[u32], rates: &[u32]) -> Result<()> {
    if layouts.is_empty() {
        return Ok(());
    }
    let it = args.iterations;
    println!();
    println!(
        "whole query: `SELECT count(*) FROM p JOIN b ON p.c0 = b.c0 [AND p.c1 = b.c1]` over resident tables of i64 columns; best of {it} wall ms after a warm-up; GPU = mode on (GpuHashJoinExec), CPU = mode off (DataFusion's hash join), same session, same tables"
    );
    println!("| build | probe | match % | key columns | pairs | GPU ms | CPU ms | CPU / GPU |");
    println!("|{}", " --- |".repeat(8));
    for &bl in builds {
        for &pl in probes.iter().filter(|&&p| p <= args.sql_max_log2) {
            for &rate in rates {
                let (build, probe) = keys(1 << bl, 1 << pl, rate, 0x9E37_79B9 ^ (bl as u64) << 32 ^ pl as u64);
                let want = HostJoinTable::build(Keys::I64(&build), None).probe(Keys::I64(&probe), None).0.len() as i64;
                for &layout in layouts {
                    let rl = crate::Ridgeline::builder().gpu_mode(crate::GpuMode::On).build()?;
                    let (bc, pc) = (layout.columns(&build), layout.columns(&probe));
                    register_keys(rt, &rl, "b", &bc)?;
                    register_keys(rt, &rl, "p", &pc)?;
                    let on = (0..bc.len()).map(|i| format!("p.c{i} = b.c{i}")).collect::<Vec<_>>().join(" AND ");
                    let sql = format!("SELECT count(*) FROM p JOIN b ON {on}");
                    // The GPU column must time the GPU join, not a plan the rule left alone.
                    let plan = rt.block_on(async { rl.sql(&sql).await?.create_physical_plan().await })?;
                    let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
                    if !shown.contains("GpuHashJoinExec") {
                        return Err(DataFusionError::Execution(format!("{} key columns: the plan has no GpuHashJoinExec:\n{shown}", layout.label())));
                    }
                    let (g_ms, g_n) = count_query_ms(rt, &rl, &sql, it)?;
                    rl.set_gpu_mode(crate::GpuMode::Off)?;
                    let (c_ms, c_n) = count_query_ms(rt, &rl, &sql, it)?;
                    if g_n != want || c_n != want {
                        return Err(DataFusionError::Execution(format!("{} key columns: GPU mode counted {g_n} pairs, CPU mode {c_n}, the reference {want}", layout.label())));
                    }
                    println!("| 2^{bl} | 2^{pl} | {rate} | {} | {want} | {g_ms:.2} | {c_ms:.2} | {:.1} |", layout.label(), c_ms / g_ms);
                }
            }
        }
    }
    Ok(())
}

fn list(s: &str, what: &str) -> Result<Vec<u32>> {
    s.split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().parse::<u32>().map_err(|_| DataFusionError::Plan(format!("--{what}: '{t}' is not a number"))))
        .collect()
}

fn gerr(e: ridgeline_operators::GpuError) -> DataFusionError {
    DataFusionError::Execution(e.to_string())
}

/// Distinct build keys `3 j`, and probe keys that hit a build key with
/// probability `rate` (else `3 j + 1`, which none has).
fn keys(b: usize, p: usize, rate: u32, seed: u64) -> (Vec<i64>, Vec<i64>) {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let build: Vec<i64> = (0..b as i64).map(|j| 3 * j).collect();
    let probe: Vec<i64> = (0..p)
        .map(|_| {
            let x = next();
            let j = ((x >> 8) % b as u64) as i64;
            if x % 100 < rate as u64 { 3 * j } else { 3 * j + 1 }
        })
        .collect();
    (build, probe)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// GPU build and probe milliseconds (medians) and the pairs.
fn gpu_times(ctx: &GpuContext, build: &[i64], probe: &[i64], iterations: usize) -> Result<(f64, f64, usize)> {
    let bk = DeviceArray::upload(ctx, build).map_err(gerr)?;
    let pk = DeviceArray::upload(ctx, probe).map_err(gerr)?;
    let bcol = KeyColumn { keys: &bk, width: KeyWidth::I64, validity: None, rows: build.len() };
    let pcol = KeyColumn { keys: &pk, width: KeyWidth::I64, validity: None, rows: probe.len() };
    let opts = JoinOptions::default();
    let (mut bt, mut pt, mut pairs) = (Vec::new(), Vec::new(), 0);
    // one warm-up round (pipelines compile) then the timed ones
    for it in 0..=iterations.max(1) {
        ctx.wait().map_err(gerr)?;
        let t = Instant::now();
        let table = build_table_gpu(ctx, &bcol, &opts).map_err(gerr)?;
        ctx.wait().map_err(gerr)?;
        let b_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let out = probe_gpu(ctx, &table, &pcol, &opts).map_err(gerr)?;
        ctx.wait().map_err(gerr)?;
        let p_ms = t.elapsed().as_secs_f64() * 1e3;
        pairs = out.iter().map(|o| o.len).sum();
        if it > 0 {
            bt.push(b_ms);
            pt.push(p_ms);
        }
    }
    Ok((median(bt), median(pt), pairs))
}

/// DataFusion's CPU hash join counting the pairs (best ms).
fn datafusion_ms(rt: &tokio::runtime::Runtime, build: &[i64], probe: &[i64], iterations: usize, want: usize) -> Result<f64> {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    let rl = crate::Ridgeline::builder().gpu_mode(crate::GpuMode::Off).build()?;
    let chunks = |v: &[i64], name: &str| -> Result<Vec<RecordBatch>> {
        v.chunks(1 << 20)
            .map(|c| {
                let a: ArrayRef = std::sync::Arc::new(Int64Array::from(c.to_vec()));
                RecordBatch::try_from_iter([(name, a)]).map_err(DataFusionError::from)
            })
            .collect()
    };
    let b = chunks(build, "b")?;
    let p = chunks(probe, "p")?;
    rl.register_batches("bt", b[0].schema(), b)?;
    rl.register_batches("pt", p[0].schema(), p)?;
    let mut best = f64::INFINITY;
    for _ in 0..iterations.max(1) {
        let t = Instant::now();
        let out = rt.block_on(async { rl.sql("SELECT count(*) FROM pt JOIN bt ON pt.p = bt.b").await?.collect().await })?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        let n = out[0].column(0).as_any().downcast_ref::<Int64Array>().map_or(-1, |a| a.value(0));
        if n != want as i64 {
            return Err(DataFusionError::Execution(format!("DataFusion counted {n} pairs, the GPU {want}")));
        }
    }
    Ok(best)
}

/// `bench join`.
pub fn run(args: JoinArgs) -> Result<()> {
    let builds = list(&args.build_log2, "build-log2")?;
    let probes = list(&args.probe_log2, "probe-log2")?;
    let rates = list(&args.rates, "rates")?;
    let layouts = KeyLayout::parse(&args.sql_keys)?;
    let ctx = context::global().map_err(gerr)?;
    let threads = rayon::current_num_threads();
    let it = args.iterations;
    println!(
        "bench join on {} ({:?}): i64 keys resident on the device, unique build keys; GPU wall ms (median of {it}, after a warm-up) for the table and for the probe to (probe, build) pairs on the device; CPU path of the same primitives and DataFusion's hash join (count of the pairs, memory tables) on {threads} threads (best of {it}); floor = (8 B key + 4 B count written, read, scanned + 8 B a pair) / {} GB/s",
        ctx.info().name,
        ctx.info().backend,
        args.hbm_gbps
    );
    println!("| build | probe | match % | pairs | GPU build ms | GPU probe ms | probe G rows/s | floor ms | CPU path ms | DataFusion ms | DataFusion / GPU probe |");
    println!("|{}", " --- |".repeat(11));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    for &bl in &builds {
        for &pl in &probes {
            for &rate in &rates {
                let (build, probe) = keys(1 << bl, 1 << pl, rate, 0x9E37_79B9 ^ (bl as u64) << 32 ^ pl as u64);
                let (b_ms, p_ms, pairs) = match gpu_times(&ctx, &build, &probe, it) {
                    Ok(t) => t,
                    Err(e) => {
                        println!("| 2^{bl} | 2^{pl} | {rate} | GPU failed: {e} |");
                        continue;
                    }
                };
                let floor = ((probe.len() * 20 + pairs * 8) as f64) / (args.hbm_gbps * 1e6);
                let (cpu, df) = if pl <= args.cpu_max_log2 {
                    let table = HostJoinTable::build(Keys::I64(&build), None);
                    let mut best = f64::INFINITY;
                    for _ in 0..it.max(1) {
                        let t = Instant::now();
                        let (p, _) = table.probe(Keys::I64(&probe), None);
                        best = best.min(t.elapsed().as_secs_f64() * 1e3);
                        if p.len() != pairs {
                            return Err(DataFusionError::Execution(format!("CPU path found {} pairs, the GPU {pairs}", p.len())));
                        }
                    }
                    (format!("{best:.2}"), datafusion_ms(&rt, &build, &probe, it, pairs)?)
                } else {
                    ("-".into(), f64::NAN)
                };
                let dfs = if df.is_nan() { "-".to_string() } else { format!("{df:.2}") };
                let ratio = if df.is_nan() { "-".to_string() } else { format!("{:.1}", df / p_ms) };
                println!(
                    "| 2^{bl} | 2^{pl} | {rate} | {pairs} | {b_ms:.3} | {p_ms:.3} | {:.2} | {floor:.3} | {cpu} | {dfs} | {ratio} |",
                    probe.len() as f64 / (p_ms * 1e6)
                );
            }
        }
    }
    sql_table(&args, &layouts, &rt, &builds, &probes, &rates)
}
