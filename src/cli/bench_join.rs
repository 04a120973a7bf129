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
    let ctx = context::global().map_err(gerr)?;
    let builds = list(&args.build_log2, "build-log2")?;
    let probes = list(&args.probe_log2, "probe-log2")?;
    let rates = list(&args.rates, "rates")?;
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
    Ok(())
}
