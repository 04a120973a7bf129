//! Prefix-sum and compaction timings (they were ignored tests of
//! `tests/primitives/scan_compact.rs`; the tests now only check results):
//!
//! `cargo run -p ridgeline-operators --release --example scan_compact_bench -- MODE [options]`
//!
//! * `sweep`: exclusive scans at 2^24 (with and without subgroups) and 2^20, then
//!   stable against Jumping Jack compaction over selectivities 0.01 .. 1.0
//!   (`--rows`, default 2^22).
//! * `paths`: every path at one size (`--rows`, default 2^28; `--reps`, default 10),
//!   checked against the CPU at that size first: reduce-then-scan and single-pass
//!   tunings, fast and per-row compaction, block sizes.
//! * `only`: one configuration in a fresh process (later allocations can be slower
//!   on some drivers): `--what scan|rts|compact` with `--wg`, `--vpt`, `--xpose 0|1`,
//!   `--striped 0|1`, `--spins` (scans) or `--wg`, `--block` (compaction at 50%).
//! * `diagnose`: where a tuned single-pass scan differs from the CPU (5 runs of each
//!   tuning), and the copy kernel's time over 1 GiB for calibration.
use rand::{Rng, SeedableRng};
use ridgeline_operators::compact::{bench_compact, compact, Column, CompactAlgo, CompactOptions, CompactPath, Selection, SelectionForm};
use ridgeline_operators::cpu_scan::{self, ScanConfig};
use ridgeline_operators::scan::{bench_scan, read_scalar, scan, ScanAlgorithm, ScanKind, ScanOptions, ScanType, DEFAULT_LOOKBACK_SPINS, DEFAULT_SCAN_WORKGROUP};
use ridgeline_operators::{DeviceArray, GpuContext};

/// `--name value` options after the mode.
struct Args(Vec<String>);

impl Args {
    fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        let flag = format!("--{name}");
        match self.0.iter().position(|a| *a == flag) {
            Some(i) => self.0.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{flag} needs a value")),
            None => default,
        }
    }
    fn text(&self, name: &str, default: &str) -> String {
        self.get(name, default.to_string())
    }
}

fn main() {
    let all: Vec<String> = std::env::args().collect();
    let mode = all.get(1).cloned().unwrap_or_else(|| "sweep".into());
    let args = Args(all.into_iter().skip(2).collect());
    let ctx = ridgeline_operators::global().expect("a GPU adapter");
    println!("adapter {:?}, segment rows {}", ctx.info().name, ctx.segment_rows());
    match mode.as_str() {
        "sweep" => sweep(&ctx, &args),
        "paths" => paths(&ctx, &args),
        "only" => only(&ctx, &args),
        "diagnose" => diagnose(&ctx),
        m => panic!("unknown mode {m} (sweep, paths, only, diagnose)"),
    }
}

fn sweep(ctx: &GpuContext, args: &Args) {
    for subgroups in [true, false] {
        let opts = ScanOptions { subgroups, ..Default::default() };
        let b = bench_scan(ctx, 1 << 24, 5, &opts).unwrap();
        println!("exclusive scan, 2^24 u32, subgroups={subgroups}: {:.1} ms, {:.2} GB/s (GPU timestamps: {})", b.ms, b.gb_per_s, b.gpu_timed);
    }
    let b = bench_scan(ctx, 1 << 20, 5, &ScanOptions::default()).unwrap();
    println!("exclusive scan, 2^20 u32: {:.2} ms, {:.2} GB/s", b.ms, b.gb_per_s);
    let n = args.get("rows", 1usize << 22);
    for s in [0.01, 0.1, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0] {
        let st = bench_compact(ctx, n, s, &CompactOptions::with_algo(CompactAlgo::Stable), 5, SelectionForm::Flags).unwrap();
        let jj = bench_compact(ctx, n, s, &CompactOptions::with_algo(CompactAlgo::JumpingJack), 5, SelectionForm::Flags).unwrap();
        println!(
            "compact {n} rows, selectivity {s}: stable {:.1} ms, jumping jack {:.1} ms (scratch {} of {} input bytes)",
            st.ms, jj.ms, st.scratch_bytes, st.input_bytes
        );
    }
}

fn only(ctx: &GpuContext, args: &Args) {
    let n = args.get("rows", 1usize << 28);
    let reps = args.get("reps", 10usize);
    let what = args.text("what", "scan");
    match what.as_str() {
        "scan" | "rts" => {
            let mut o = ScanOptions {
                workgroup_size: args.get("wg", DEFAULT_SCAN_WORKGROUP),
                vectors_per_thread: args.get("vpt", 4),
                transpose: args.get("xpose", 1u32) == 1,
                striped: args.get("striped", 1u32) == 1,
                lookback_spins: args.get("spins", DEFAULT_LOOKBACK_SPINS),
                ..Default::default()
            };
            if what == "rts" {
                o.algorithm = ScanAlgorithm::ReduceThenScan;
            }
            let b = bench_scan(ctx, n, reps, &o).unwrap();
            println!(
                "only: scan {:?} wg {} vpt {} xpose {} striped {}: {:.3} ms (wall {:.3})",
                b.algorithm, o.workgroup_size, o.vectors_per_thread, o.transpose, o.striped, b.ms, b.wall_ms
            );
        }
        _ => {
            let co = CompactOptions { workgroup_size: args.get("wg", 256), block_rows: args.get("block", 4096), ..Default::default() };
            let b = bench_compact(ctx, n, 0.5, &co, reps, SelectionForm::Flags).unwrap();
            println!("only: compact 0.5 wg {} block {}: {:.3} ms (count {:.3} + scatter {:.3})", co.workgroup_size, co.block_rows, b.ms, b.count_ms, b.scatter_ms);
        }
    }
}

fn paths(ctx: &GpuContext, args: &Args) {
    let n = args.get("rows", 1usize << 28);
    let reps = args.get("reps", 10usize);
    // correctness at full size first
    let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 22).collect();
    let d = DeviceArray::upload(ctx, &data).unwrap();
    let mut want = vec![0u32; n];
    let t = cpu_scan::scan(&data, &mut want, &ScanConfig::sequential(cpu_scan::ScanKind::Exclusive)).unwrap();
    for opts in [ScanOptions::default(), ScanOptions::with_algorithm(ScanAlgorithm::ReduceThenScan)] {
        let out = scan(ctx, &d, ScanType::U32, ScanKind::Exclusive, &opts).unwrap();
        let got = out.values.download::<u32>(ctx).unwrap();
        assert!(got == want, "scan differs at full size: {opts:?}");
        assert_eq!(read_scalar::<u32>(ctx, &out.total).unwrap(), t);
    }
    println!("scan correct at {n}");
    drop((d, want));
    let mut r = rand::rngs::SmallRng::seed_from_u64(99);
    let flags: Vec<u32> = (0..n).map(|_| r.random_range(0..2)).collect();
    let f = DeviceArray::upload(ctx, &flags).unwrap();
    let v = DeviceArray::upload(ctx, &data).unwrap();
    let want: Vec<u32> = (0..n).filter(|&i| flags[i] != 0).map(|i| data[i]).collect();
    for path in [CompactPath::Fast, CompactPath::PerRow] {
        let opts = CompactOptions { path, ..Default::default() };
        let out = compact(ctx, Selection::Flags(&f), &[Column::new(&v)], &opts).unwrap();
        assert!(out.columns[0].values.download::<u32>(ctx).unwrap() == want, "compaction differs at full size: {path:?}");
    }
    println!("compaction correct at {n}");
    drop((f, v, want, flags, data));
    let sp = |spins: u32, wg: u32, vpt: u32| ScanOptions { lookback_spins: spins, workgroup_size: wg, vectors_per_thread: vpt, ..Default::default() };
    let mut scan_opts = vec![("reduce-then-scan", ScanOptions::with_algorithm(ScanAlgorithm::ReduceThenScan)), ("single pass default", ScanOptions::default())];
    for (wg, vpt) in [(256, 2), (256, 6), (256, 8), (512, 4), (512, 2), (128, 8), (1024, 2)] {
        scan_opts.push(("single pass", sp(64, wg, vpt)));
    }
    for spins in [0, 8, 1024] {
        scan_opts.push(("single pass spins", sp(spins, 256, 4)));
    }
    scan_opts.push(("single pass, no subgroups", ScanOptions { subgroups: false, ..Default::default() }));
    scan_opts.push(("single pass, transpose", ScanOptions { transpose: true, ..Default::default() }));
    scan_opts.push(("single pass, force fallback", ScanOptions { force_fallback: true, ..Default::default() }));
    for (name, o) in scan_opts {
        match bench_scan(ctx, n, reps, &o) {
            Ok(b) => println!(
                "scan {name}: wg {} vpt {} spins {}: {:.3} ms (wall {:.3}), {:.0} GB/s ({:?}, {} dispatches, timestamps {})",
                o.workgroup_size, o.vectors_per_thread, o.lookback_spins, b.ms, b.wall_ms, b.gb_per_s, b.algorithm, b.dispatches, b.gpu_timed
            ),
            Err(e) => println!("scan {name}: {o:?}: {e}"),
        }
    }
    for s in [0.5, 0.01, 0.9, 1.0] {
        let mut copts = vec![
            ("fast stable", CompactOptions::default()),
            ("per-row stable", CompactOptions { path: CompactPath::PerRow, ..Default::default() }),
            ("fast jj", CompactOptions { algo: CompactAlgo::JumpingJack, ..Default::default() }),
        ];
        if s == 0.5 {
            copts.push(("fast stable 8192", CompactOptions { block_rows: 8192, ..Default::default() }));
            copts.push(("fast stable wg512 8192", CompactOptions { workgroup_size: 512, block_rows: 8192, ..Default::default() }));
            copts.push(("fast stable wg512 16384", CompactOptions { workgroup_size: 512, block_rows: 16384, ..Default::default() }));
            copts.push(("fast stable wg128 4096", CompactOptions { workgroup_size: 128, block_rows: 4096, ..Default::default() }));
        }
        for (name, o) in copts {
            match bench_compact(ctx, n, s, &o, reps, SelectionForm::Flags) {
                Ok(b) => println!(
                    "compact sel {s} {name}: {:.3} ms (count {:.3} + scatter {:.3}), wall {:.1} ms, scratch {} of {}",
                    b.ms, b.count_ms, b.scatter_ms, b.wall_ms, b.scratch_bytes, b.input_bytes
                ),
                Err(e) => println!("compact {name}: {e}"),
            }
        }
    }
}

fn diagnose(ctx: &GpuContext) {
    let mut r = rand::rngs::SmallRng::seed_from_u64(2);
    let data: Vec<u32> = (0..200_003).map(|_| r.random()).collect();
    let mut want = vec![0u32; data.len()];
    cpu_scan::scan(&data, &mut want, &ScanConfig::sequential(cpu_scan::ScanKind::Exclusive)).unwrap();
    let d = DeviceArray::upload_segmented(ctx, &data, 8192).unwrap();
    for (wg, vpt) in [(64u32, 3u32), (64, 4), (128, 3), (32, 3), (256, 3), (64, 1)] {
        for (name, o) in [
            ("default", ScanOptions::default()),
            ("no transpose", ScanOptions { transpose: false, ..Default::default() }),
            ("force fallback", ScanOptions { force_fallback: true, ..Default::default() }),
            ("spins 100000", ScanOptions { lookback_spins: 100_000, ..Default::default() }),
            ("no subgroups", ScanOptions { subgroups: false, ..Default::default() }),
        ] {
            let opts = ScanOptions { workgroup_size: wg, vectors_per_thread: vpt, ..o };
            let mut bad = 0usize;
            let mut first = None;
            for _ in 0..5 {
                let got = scan(ctx, &d, ScanType::U32, ScanKind::Exclusive, &opts).unwrap().values.download::<u32>(ctx).unwrap();
                let diffs: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
                if !diffs.is_empty() {
                    bad += 1;
                    if first.is_none() {
                        let i = diffs[0];
                        first = Some(format!("{} diffs, first {i} (delta {}), last {}", diffs.len(), want[i].wrapping_sub(got[i]), diffs[diffs.len() - 1]));
                    }
                }
            }
            println!("wg {wg} vpt {vpt} {name}: {bad}/5 runs wrong {}", first.unwrap_or_default());
        }
    }
    let n = 1usize << 28;
    let big = DeviceArray::alloc(ctx, n, 4).unwrap();
    for _ in 0..3 {
        ctx.wait().unwrap();
        let t0 = std::time::Instant::now();
        let c = big.duplicate(ctx).unwrap();
        ctx.wait().unwrap();
        println!("copy kernel 1 GiB: {:.3} ms wall", t0.elapsed().as_secs_f64() * 1e3);
        drop(c);
    }
}
