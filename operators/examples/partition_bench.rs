//! Partition timings: `cargo run -p ridgeline-operators --release --example
//! partition_bench -- [min_log2_n] [max_log2_n] [payload_columns] [reps] [cpu: 0|1]
//! [fanouts, default 2,16,256,4096] [--profile]`.
//! For n = 2^min .. 2^max (default 2^20 .. 2^26) and the fan-outs:
//! the GPU hash partition of a u32 key plus `payload_columns` u32 columns
//! (GPU-resident input, device time of the partition's compute pass, median of
//! `reps`), its GB/s (input read + output written), the histogram scratch as a
//! share of the input, the same partition through the rank kernel and
//! per-column moves instead of the fused rank-and-scatter, and optionally the
//! CPU fast path's wall time. `--profile` enables the `ridgeline::profile::partition`
//! log target, so every size also gets a per-step profile of both paths (one more
//! run with every dispatch in its own timed pass).
use ridgeline_operators::partition::{bench_partition, partition_cpu, HostColumn, PartitionFn};

/// Prints the `ridgeline::profile::partition` log target at debug (`--profile`).
struct ProfileLog;

impl log::Log for ProfileLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("ridgeline::profile::partition") && m.level() <= log::Level::Debug
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            println!("profile: {}", r.args());
        }
    }
    fn flush(&self) {}
}

fn main() {
    let mut a: Vec<String> = std::env::args().collect();
    if let Some(i) = a.iter().position(|s| s == "--profile") {
        a.remove(i);
        log::set_logger(&ProfileLog).expect("no other logger");
        log::set_max_level(log::LevelFilter::Debug);
    }
    let lo: u32 = a.get(1).map_or(20, |s| s.parse().unwrap());
    let hi: u32 = a.get(2).map_or(26, |s| s.parse().unwrap());
    let payload: usize = a.get(3).map_or(1, |s| s.parse().unwrap());
    let reps: usize = a.get(4).map_or(3, |s| s.parse().unwrap());
    let cpu = a.get(5).is_some_and(|s| s != "0");
    let ctx = ridgeline_operators::global().expect("a GPU adapter");
    println!("adapter: {} ({:?})", ctx.info().name, ctx.info().device_type);
    let fanouts: Vec<u32> = a
        .get(6)
        .map(|v| v.split(',').map(|f| f.trim().parse().expect("fan-outs: comma-separated numbers")).collect())
        .unwrap_or_else(|| vec![2, 16, 256, 4096]);
    println!("| n | fan-out | passes | GPU ms | GB/s | wall ms | hist scratch | rank + moves ms | CPU ms |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for lg in lo..=hi {
        let n = 1usize << lg;
        for &fanout in &fanouts {
            let b = match bench_partition(&ctx, n, fanout, payload, reps, true) {
                Ok(b) => b,
                Err(e) => {
                    println!("| 2^{lg} | {fanout} | error: {e} |");
                    continue;
                }
            };
            let (unfused, uprof) = match bench_partition(&ctx, n, fanout, payload, reps, false) {
                Ok(u) => (format!("{:.2}", u.ms), u.profile),
                Err(e) => (format!("error: {e}"), Vec::new()),
            };
            for (what, prof) in [("fused", &b.profile), ("rank + moves", &uprof)] {
                if !prof.is_empty() {
                    let steps: Vec<String> = prof.iter().map(|(l, ms)| format!("{l} {ms:.3}")).collect();
                    println!("| 2^{lg} | {fanout} | profile {what}: {} |", steps.join(", "));
                }
            }
            let cpu_ms = if cpu {
                let keys: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
                let pays: Vec<Vec<u32>> = (0..payload).map(|c| (0..n as u32).map(|i| i ^ c as u32).collect()).collect();
                let mut cols = vec![HostColumn::u32(&keys)];
                cols.extend(pays.iter().map(|p| HostColumn::u32(p)));
                let mut ts: Vec<f64> = (0..reps.max(1))
                    .map(|_| {
                        let t = std::time::Instant::now();
                        let out = partition_cpu(&cols, &[0], &PartitionFn::Hash { fanout });
                        std::hint::black_box(&out);
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                ts.sort_by(|x, y| x.total_cmp(y));
                format!("{:.1}", ts[ts.len() / 2])
            } else {
                "-".into()
            };
            println!(
                "| 2^{lg} | {fanout} | {} | {:.2} | {:.2} | {:.1} | {:.2}% | {unfused} | {cpu_ms} |",
                b.stats.passes,
                b.ms,
                b.gb_per_s,
                b.wall_ms,
                100.0 * b.stats.histogram_bytes as f64 / b.stats.input_bytes as f64
            );
        }
    }
}
