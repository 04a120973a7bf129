//! Skyline: `skyline_cpu` (Hybrid-style) and `skyline_gpu` (SkyAlign) against the
//! brute-force `skyline_reference`, exact equality of the ascending row-id lists.
//!
//! Data: Börzsönyi et al.'s independent, correlated and anticorrelated generators
//! (coordinates in [0, 1), converted to dense ranks per dimension), heavy ties,
//! duplicates, edge shapes, the NBA data set and one input whose rank matrix is
//! larger than the adapter's storage binding limit.
use rand::{Rng, SeedableRng};
use ridgeline_operators::skyline::{
    dominates, skyline_cpu, skyline_gpu, skyline_reference, CpuSkylineAlgorithm, CpuSkylineOptions,
    RankMatrix, SkylineGpuOptions, SkylineKernel, SkylineStats, GPU_MAX_DIMS,
};
use ridgeline_operators::testing::test_context;
use ridgeline_operators::GpuContext;

fn rng(seed: u64) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(seed)
}

#[derive(Clone, Copy, Debug)]
enum Dist {
    Independent,
    Correlated,
    Anticorrelated,
}

/// An approximately normal value (sum of uniforms), mean `mu`, deviation about `sd`.
fn normalish(r: &mut impl Rng, mu: f64, sd: f64) -> f64 {
    let s: f64 = (0..12).map(|_| r.random::<f64>()).sum::<f64>() - 6.0;
    mu + s * sd
}

/// Börzsönyi-style generator: `n` points in [0, 1)^d, row-major.
fn generate(dist: Dist, n: usize, d: usize, seed: u64) -> Vec<f64> {
    let mut r = rng(seed);
    let mut out = Vec::with_capacity(n * d);
    let mut p = vec![0.0f64; d];
    for _ in 0..n {
        loop {
            match dist {
                Dist::Independent => p.iter_mut().for_each(|x| *x = r.random::<f64>()),
                Dist::Correlated => {
                    // A point near the diagonal, spread a little around it.
                    let v = normalish(&mut r, 0.5, 0.25);
                    p.iter_mut()
                        .for_each(|x| *x = v + normalish(&mut r, 0.0, 0.05));
                }
                Dist::Anticorrelated => {
                    // A point near the plane sum = d * v with v close to 0.5, spread
                    // widely inside it.
                    let v = normalish(&mut r, 0.5, 0.05);
                    p.iter_mut().for_each(|x| *x = r.random::<f64>());
                    let mean = p.iter().sum::<f64>() / d as f64;
                    p.iter_mut().for_each(|x| *x = *x - mean + v);
                }
            }
            if p.iter().all(|&x| (0.0..1.0).contains(&x)) {
                break;
            }
        }
        out.extend_from_slice(&p);
    }
    out
}

fn dense_ranks(values: &[f64], n: usize, d: usize) -> Vec<u32> {
    ridgeline_operators::testing::dense_ranks_f64(values, n, d)
}

/// Quantizes coordinates to `levels` values (heavy ties).
fn quantize(values: &mut [f64], levels: u32) {
    values
        .iter_mut()
        .for_each(|x| *x = (*x * levels as f64).floor());
}

/// The CPU skyline's default options (every thread, the algorithm by size).
fn cpu_opts() -> CpuSkylineOptions {
    CpuSkylineOptions::default()
}

fn ctx() -> Option<std::sync::Arc<GpuContext>> {
    test_context()
}

/// Checks both paths against `want` (the reference unless given).
fn check(
    ctx: Option<&GpuContext>,
    ranks: &[u32],
    n: usize,
    d: usize,
    what: &str,
) -> (SkylineStats, Option<SkylineStats>) {
    let m = RankMatrix::new(n, d, ranks);
    let want = skyline_reference(m);
    check_against(ctx, m, &want, what)
}

fn check_against(
    ctx: Option<&GpuContext>,
    m: RankMatrix<'_>,
    want: &[u32],
    what: &str,
) -> (SkylineStats, Option<SkylineStats>) {
    let (cpu, cst) = skyline_cpu(m, &cpu_opts());
    assert_eq!(cpu, want, "cpu skyline differs: {what}");
    let (cpu2, _) = skyline_cpu(m, &CpuSkylineOptions { threads: 2, ..cpu_opts() });
    assert_eq!(cpu2, want, "cpu skyline (2 threads) differs: {what}");
    // Both CPU algorithms, whichever `Auto` picked.
    for algo in [
        CpuSkylineAlgorithm::SortedGrid,
        CpuSkylineAlgorithm::Blocked,
    ] {
        let (got, st) = skyline_cpu(m, &CpuSkylineOptions { algorithm: algo, ..cpu_opts() });
        assert_eq!(
            got, want,
            "cpu skyline ({algo:?}, ran {}) differs: {what}",
            st.algorithm
        );
        if algo == CpuSkylineAlgorithm::Blocked && m.rows > 0 && m.dims > 0 {
            assert_eq!(st.algorithm, "cpu-hybrid");
        }
        if algo == CpuSkylineAlgorithm::SortedGrid && m.rows > 0 && m.dims > 0 && m.dims <= 16 {
            assert_eq!(st.algorithm, "cpu-sorted-grid");
        }
    }
    let gst = ctx.map(|ctx| {
        let (gpu, gst) =
            skyline_gpu(ctx, m, &SkylineGpuOptions::default()).unwrap_or_else(|e| panic!("gpu skyline failed on {what}: {e}"));
        assert_eq!(gpu, want, "gpu skyline differs: {what} ({gst:?})");
        gst
    });
    (cst, gst)
}

#[test]
fn dominance_semantics() {
    assert!(dominates(&[0, 1], &[1, 1]));
    assert!(!dominates(&[1, 1], &[1, 1]));
    assert!(!dominates(&[0, 2], &[1, 1]));
}

#[test]
fn edge_shapes() {
    let c = ctx();
    let c = c.as_deref();
    // Empty.
    for d in [1, 3, 16] {
        check(c, &[], 0, d, "empty");
    }
    // One row, every width.
    for d in 1..=GPU_MAX_DIMS {
        let row: Vec<u32> = (0..d as u32).collect();
        let (_, g) = check(c, &row, 1, d, &format!("one row d={d}"));
        if let Some(g) = g {
            assert_eq!(g.algorithm, "gpu-skyalign");
        }
    }
    // All rows equal: all stay.
    for (n, d) in [(2, 1), (1000, 5), (777, 16)] {
        let ranks = vec![3u32; n * d];
        check(c, &ranks, n, d, &format!("all equal n={n} d={d}"));
    }
    // d = 1: the rows with the smallest rank.
    let mut r = rng(1);
    let ranks: Vec<u32> = (0..1001).map(|_| r.random_range(0..50u32)).collect();
    check(c, &ranks, 1001, 1, "d=1");
    // Two rows, one dominating; two incomparable.
    check(c, &[0, 0, 1, 1], 2, 2, "two, dominated");
    check(c, &[0, 1, 1, 0], 2, 2, "two, incomparable");
}

#[test]
fn distributions() {
    let c = ctx();
    let c = c.as_deref();
    for d in 2..=16usize {
        for (k, dist) in [Dist::Independent, Dist::Correlated, Dist::Anticorrelated]
            .into_iter()
            .enumerate()
        {
            // Not a multiple of the workgroup size (256).
            let n = match dist {
                Dist::Anticorrelated if d >= 8 => 1201,
                _ => 2999,
            };
            let vals = generate(dist, n, d, (d * 10 + k) as u64);
            let ranks = dense_ranks(&vals, n, d);
            let what = format!("{dist:?} n={n} d={d}");
            let (cst, gst) = check(c, &ranks, n, d, &what);
            assert!(
                cst.dominance_tests > 0 && cst.mask_tests > 0,
                "cpu counters: {what} {cst:?}"
            );
            if let Some(g) = gst {
                assert!(
                    g.dominance_tests > 0 && g.mask_tests > 0,
                    "gpu counters: {what} {g:?}"
                );
                assert!(g.device_bytes > 0);
                eprintln!(
                    "{what}: cpu dt {} mt {} | gpu dt {} mt {} bytes {} (matrix {})",
                    cst.dominance_tests,
                    cst.mask_tests,
                    g.dominance_tests,
                    g.mask_tests,
                    g.device_bytes,
                    n * d * 4
                );
            }
        }
    }
}

#[test]
fn ties_and_duplicates() {
    let c = ctx();
    let c = c.as_deref();
    for (d, levels) in [(2, 3), (4, 2), (5, 4), (8, 3), (12, 2), (16, 3)] {
        for dist in [Dist::Independent, Dist::Anticorrelated] {
            let n = 2345;
            let mut vals = generate(dist, n, d, 77 + d as u64);
            quantize(&mut vals, levels);
            let ranks = dense_ranks(&vals, n, d);
            check(
                c,
                &ranks,
                n,
                d,
                &format!("ties {dist:?} d={d} levels={levels}"),
            );
        }
    }
    // Exact duplicates of every row (skyline rows come in pairs).
    let d = 6;
    let n = 1500;
    let vals = generate(Dist::Anticorrelated, n, d, 5);
    let mut dup = vals.clone();
    dup.extend_from_slice(&vals);
    let ranks = dense_ranks(&dup, 2 * n, d);
    check(c, &ranks, 2 * n, d, "duplicated rows");
}

#[test]
fn wide_rows_fall_back() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let (n, d) = (500, 20);
    let vals = generate(Dist::Independent, n, d, 3);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    let (got, st) = skyline_gpu(c, m, &SkylineGpuOptions::default()).unwrap();
    assert_eq!(got, skyline_reference(m));
    assert!(st.algorithm.starts_with("cpu"), "{}", st.algorithm);
}

#[test]
fn small_chunks() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    for (dist, d) in [
        (Dist::Independent, 4),
        (Dist::Correlated, 8),
        (Dist::Independent, 3),
    ] {
        let n = 3001;
        let vals = generate(dist, n, d, 11);
        let ranks = dense_ranks(&vals, n, d);
        let m = RankMatrix::new(n, d, &ranks);
        let want = skyline_reference(m);
        let (got, st) = skyline_gpu(
            c,
            m,
            &SkylineGpuOptions {
                max_chunk_rows: 700,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(got, want, "{dist:?} d={d} chunks of 700");
        assert!(st.chunks >= 6, "{st:?}");
    }
}

/// Chunk-local skylines that do not shrink (anticorrelated data, tiny chunks) end
/// in an error the caller can fall back on, never a panic or a wrong answer.
#[test]
fn chunks_that_do_not_shrink() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let (n, d) = (2000, 10);
    let vals = generate(Dist::Anticorrelated, n, d, 9);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    match skyline_gpu(
        c,
        m,
        &SkylineGpuOptions {
            max_chunk_rows: 300,
            ..Default::default()
        },
    ) {
        Ok((got, _)) => assert_eq!(got, skyline_reference(m)),
        Err(e) => assert!(e.should_fall_back(), "{e}"),
    }
}

/// Large partitions: invocations that need more loop steps than one launch allows
/// on CPU adapters resume in later launches. Points on an anti-diagonal (all in the
/// skyline, two partitions of half the rows each) and a dominated twin of each.
#[test]
fn long_running_invocations_resume() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let half = 20_000u32;
    let mut ranks = Vec::new();
    for i in 0..half {
        ranks.extend_from_slice(&[i, half - 1 - i]);
        ranks.extend_from_slice(&[i + 1, half - i]);
    }
    let m = RankMatrix::new(2 * half as usize, 2, &ranks);
    let want: Vec<u32> = (0..half).map(|i| 2 * i).collect();
    let (got, st) = skyline_gpu(c, m, &SkylineGpuOptions::default()).unwrap();
    assert_eq!(got, want, "{st:?}");
    if c.is_cpu_adapter() {
        assert!(st.resumed_launches > 0, "{st:?}");
    }
    assert_eq!(skyline_cpu(m, &cpu_opts()).0, want);
}

/// The iteration kernel without a step bound (what discrete GPUs run) and with a
/// tiny one (every invocation resumes many times).
#[test]
fn step_limits() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    for (dist, n, d) in [
        (Dist::Independent, 2999, 6),
        (Dist::Anticorrelated, 1500, 4),
        (Dist::Correlated, 2000, 9),
    ] {
        let vals = generate(dist, n, d, 31);
        let ranks = dense_ranks(&vals, n, d);
        let m = RankMatrix::new(n, d, &ranks);
        let want = skyline_reference(m);
        for limit in [0u32, 7, 50] {
            let opts = SkylineGpuOptions {
                step_limit: Some(limit),
                ..Default::default()
            };
            let (got, st) = skyline_gpu(c, m, &opts).unwrap();
            assert_eq!(got, want, "{dist:?} n={n} d={d} step limit {limit}");
            if limit == 0 {
                assert_eq!(st.resumed_launches, 0, "{st:?}");
            }
            if limit == 7 {
                assert!(st.resumed_launches > 0, "{st:?}");
            }
        }
    }
}

fn load_nba() -> (Vec<u32>, usize, usize) {
    let text = std::fs::read_to_string("/work/shared/data/nba-8d-17264.csv").expect("NBA data set");
    let mut vals = Vec::new();
    let mut n = 0;
    let mut d = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: Vec<f64> = line
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        if d == 0 {
            d = row.len();
        }
        assert_eq!(row.len(), d);
        vals.extend(row);
        n += 1;
    }
    (dense_ranks(&vals, n, d), n, d)
}

#[test]
fn nba() {
    if !std::path::Path::new("/work/shared/data/nba-8d-17264.csv").exists() {
        eprintln!("NBA data set missing: skipped");
        return;
    }
    let c = ctx();
    let (ranks, n, d) = load_nba();
    assert_eq!((n, d), (17264, 8));
    let (cst, gst) = check(c.as_deref(), &ranks, n, d, "NBA");
    eprintln!("NBA: cpu {cst:?}\nNBA: gpu {gst:?}");
}

/// A rank matrix above the binding limit (128 MiB on lavapipe): correlated, so the
/// skyline is small; compared with the CPU path (the reference would take minutes),
/// and the CPU path is checked against the reference on a slice first.
#[test]
fn larger_than_binding() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let d = 16;
    let max_bind = c.limits().max_storage_buffer_binding_size as usize;
    let n = (max_bind / (d * 4)) * 21 / 20 + 1234;
    if n > 40_000_000 {
        eprintln!("binding limit {max_bind}: too large for a test, skipped");
        return;
    }
    // Correlated integer ranks (base + small noise per dimension).
    let mut r = rng(42);
    let mut ranks = vec![0u32; n * d];
    for row in ranks.chunks_mut(d) {
        let base = r.random_range(0..1_000_000u32);
        for x in row.iter_mut() {
            *x = base + r.random_range(0..5000u32);
        }
    }
    let m = RankMatrix::new(n, d, &ranks);
    assert!(n * d * 4 > max_bind);
    let sub = RankMatrix::new(4000, d, &ranks[..4000 * d]);
    assert_eq!(skyline_cpu(sub, &cpu_opts()).0, skyline_reference(sub));
    let (want, cst) = skyline_cpu(m, &cpu_opts());
    let (got, gst) = skyline_gpu(c, m, &SkylineGpuOptions::default()).unwrap();
    assert_eq!(got, want);
    assert!(gst.chunks >= 2, "{gst:?}");
    assert!(gst.dominance_tests > 0 && gst.mask_tests > 0);
    assert!(gst.device_bytes <= 2 * (n * d * 4) as u64, "{gst:?}");
    eprintln!(
        "n={n} d={d}: skyline {} | cpu {cst:?} | gpu {gst:?}",
        want.len()
    );
}

/// The iteration kernels (one invocation per point, one workgroup per point with
/// and without subset lookups, the two mixed by level) against
/// the reference on every distribution and width, ties, duplicates, all-equal rows,
/// one row, sizes that are not multiples of either workgroup, long partitions (the
/// anti-diagonal: two partitions of half the rows each) and several chunks; their
/// answers and dominance-test counts are compared.
#[test]
fn iteration_kernels_agree() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let run = |m: RankMatrix<'_>, want: &[u32], what: &str, chunk: usize| {
        let mut tests = Vec::new();
        // Launches sized on the host (None on CPU adapters) and on the device
        // (Some(0): indirect dispatch from the level table).
        let variants = [
            (SkylineKernel::Thread, None, None),
            (SkylineKernel::Wide, None, None),
            (SkylineKernel::Wide, Some(true), Some(0)),
            (SkylineKernel::Wide, Some(false), Some(0)),
            (SkylineKernel::Mixed, None, Some(0)),
        ];
        for (kernel, subset_lookup, launch_rows) in variants {
            let opts = SkylineGpuOptions {
                kernel: Some(kernel),
                subset_lookup,
                launch_rows,
                max_chunk_rows: chunk,
                ..Default::default()
            };
            let (got, st) = skyline_gpu(c, m, &opts)
                .unwrap_or_else(|e| panic!("{kernel:?} {subset_lookup:?} on {what}: {e}"));
            assert_eq!(
                got, want,
                "{kernel:?} kernel (subset lookup {subset_lookup:?}) differs: {what} ({st:?})"
            );
            tests.push((st.dominance_tests, st.mask_tests));
        }
        // Each counts the mask tests it ran: a test per candidate partition (Eq. 1
        // or a subset looked up) and per point, so where one ran none, so did the
        // others.
        assert!(
            tests.iter().all(|t| (t.1 > 0) == (tests[0].1 > 0)),
            "{what}: {tests:?}"
        );
    };
    for (k, dist) in [Dist::Independent, Dist::Correlated, Dist::Anticorrelated]
        .into_iter()
        .enumerate()
    {
        for d in [1usize, 2, 3, 5, 8, 12, 16] {
            for n in [1usize, 63, 1201] {
                let vals = generate(dist, n, d, (d * 7 + k * 3 + n) as u64);
                let ranks = dense_ranks(&vals, n, d);
                let m = RankMatrix::new(n, d, &ranks);
                run(
                    m,
                    &skyline_reference(m),
                    &format!("{dist:?} n={n} d={d}"),
                    0,
                );
            }
        }
    }
    // Ties (few levels), duplicated rows, all rows equal.
    for (d, levels) in [(3, 2), (8, 3), (16, 2)] {
        let n = 1999;
        let mut vals = generate(Dist::Anticorrelated, n, d, 9 + d as u64);
        quantize(&mut vals, levels);
        let mut dup = vals.clone();
        dup.extend_from_slice(&vals);
        let ranks = dense_ranks(&dup, 2 * n, d);
        let m = RankMatrix::new(2 * n, d, &ranks);
        run(
            m,
            &skyline_reference(m),
            &format!("ties and duplicates d={d} levels={levels}"),
            0,
        );
    }
    let eq = vec![5u32; 777 * 6];
    let m = RankMatrix::new(777, 6, &eq);
    run(m, &(0..777).collect::<Vec<u32>>(), "all equal", 0);
    // The anti-diagonal and its dominated twins: partitions of 5000 rows.
    let half = 5000u32;
    let mut ranks = Vec::new();
    for i in 0..half {
        ranks.extend_from_slice(&[i, half - 1 - i]);
        ranks.extend_from_slice(&[i + 1, half - i]);
    }
    let m = RankMatrix::new(2 * half as usize, 2, &ranks);
    run(
        m,
        &(0..half).map(|i| 2 * i).collect::<Vec<u32>>(),
        "anti-diagonal",
        0,
    );
    // Several chunks, then the skyline of their union.
    let (n, d) = (4001, 6);
    let vals = generate(Dist::Independent, n, d, 12);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    run(m, &skyline_reference(m), "chunks of 900", 900);
}

/// The two CPU algorithms agree on inputs too large for the O(n^2) reference,
/// where the sorted grid's groups are large enough for its bucket directories
/// (groups of 16 rows or more) and the group key covers fewer bits than d.
#[test]
fn cpu_algorithms_agree_large() {
    for (dist, d, levels) in [
        (Dist::Anticorrelated, 4, 0),
        (Dist::Anticorrelated, 9, 0),
        (Dist::Independent, 12, 0),
        (Dist::Anticorrelated, 16, 0),
        (Dist::Independent, 10, 5),
        (Dist::Correlated, 7, 0),
    ] {
        let n = 40_000;
        let mut vals = generate(dist, n, d, 1000 + d as u64);
        if levels > 0 {
            quantize(&mut vals, levels);
        }
        let ranks = dense_ranks(&vals, n, d);
        let m = RankMatrix::new(n, d, &ranks);
        let (a, sa) = skyline_cpu(m, &CpuSkylineOptions { algorithm: CpuSkylineAlgorithm::SortedGrid, ..cpu_opts() });
        let (b, sb) = skyline_cpu(m, &CpuSkylineOptions { algorithm: CpuSkylineAlgorithm::Blocked, ..cpu_opts() });
        assert_eq!(sa.algorithm, "cpu-sorted-grid");
        assert_eq!(sb.algorithm, "cpu-hybrid");
        assert_eq!(a, b, "{dist:?} d={d} levels={levels}");
        assert!(!a.is_empty());
        // Spot-check survivors and non-survivors against brute force.
        let set: std::collections::HashSet<u32> = a.iter().copied().collect();
        for r in (0..n).step_by(997) {
            let dominated = (0..n).any(|p| dominates(m.row(p), m.row(r)));
            assert_eq!(
                !dominated,
                set.contains(&(r as u32)),
                "{dist:?} d={d} row {r}"
            );
        }
    }
}

/// The device's intermediate results checked against host computations while the
/// algorithm runs (`SkylineGpuOptions::check`: the quartiles qpick selects, the
/// working set after every level's sort and repacking, every partition's key order
/// and directory), with the key cut on every level, on none and chosen per level,
/// and the cut's effect: it must remove mask tests on anticorrelated data.
#[test]
fn device_steps_checked() {
    let c = ctx();
    let Some(c) = c.as_deref() else { return };
    let run = |m: RankMatrix<'_>, want: &[u32], what: &str| -> Vec<u64> {
        let mut mts = Vec::new();
        // Levels sized on the device (Some(0): indirect dispatch from the level
        // table the plan kernel writes) and on the host (bounded launches).
        for (kernel, rows) in [
            (SkylineKernel::Mixed, Some(0)),
            (SkylineKernel::Thread, None),
            (SkylineKernel::Wide, Some(256)),
        ] {
            for key_cut in [Some(true), Some(false), None] {
                let opts = SkylineGpuOptions {
                    kernel: Some(kernel),
                    key_cut,
                    launch_rows: rows,
                    check: true,
                    ..Default::default()
                };
                let (got, st) = skyline_gpu(c, m, &opts).unwrap_or_else(|e| {
                    panic!("{kernel:?} rows {rows:?} cut {key_cut:?} on {what}: {e}")
                });
                assert_eq!(
                    got, want,
                    "{kernel:?} rows {rows:?} cut {key_cut:?} differs: {what} ({st:?})"
                );
                mts.push(st.mask_tests);
            }
        }
        mts
    };
    for (k, dist) in [Dist::Independent, Dist::Anticorrelated].into_iter().enumerate() {
        for (d, n) in [(2usize, 700usize), (5, 3001), (12, 2500), (16, 1500)] {
            let vals = generate(dist, n, d, (d * 11 + k) as u64);
            let ranks = dense_ranks(&vals, n, d);
            let m = RankMatrix::new(n, d, &ranks);
            run(m, &skyline_reference(m), &format!("{dist:?} n={n} d={d}"));
        }
    }
    // Edge sizes: one and two rows, one below a workgroup, one above 2^12.
    for n in [1usize, 2, 63, 4097] {
        let vals = generate(Dist::Anticorrelated, n, 3, n as u64);
        let ranks = dense_ranks(&vals, n, 3);
        let m = RankMatrix::new(n, 3, &ranks);
        run(m, &skyline_reference(m), &format!("anticorrelated n={n} d=3"));
    }
    // More rows than qhist's workgroups cover in one stride (512 x 256).
    let (n, d) = (140_000, 3);
    let vals = generate(Dist::Independent, n, d, 3);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    run(m, &skyline_cpu(m, &cpu_opts()).0, "independent n=140000 d=3");
    // Ties: equal keys inside a partition, and rows equal to the point itself.
    let (n, d) = (2999, 6);
    let mut vals = generate(Dist::Anticorrelated, n, d, 77);
    quantize(&mut vals, 3);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    run(m, &skyline_reference(m), "ties");
    // Partitions of 5000 rows: above the sort's capacity (all-zero directories).
    let half = 5000u32;
    let mut ranks = Vec::new();
    for i in 0..half {
        ranks.extend_from_slice(&[i, half - 1 - i]);
        ranks.extend_from_slice(&[i + 1, half - i]);
    }
    let m = RankMatrix::new(2 * half as usize, 2, &ranks);
    run(m, &(0..half).map(|i| 2 * i).collect::<Vec<u32>>(), "anti-diagonal");
    // The cut's effect (mask tests of Mixed with and without it).
    let (n, d) = (12000, 10);
    let vals = generate(Dist::Anticorrelated, n, d, 5);
    let ranks = dense_ranks(&vals, n, d);
    let m = RankMatrix::new(n, d, &ranks);
    let mts = run(m, &skyline_cpu(m, &cpu_opts()).0, "anticorrelated n=12000 d=10");
    assert!(
        mts[0] * 4 < mts[1] * 3,
        "the key cut should remove at least a quarter of the mask tests: {mts:?}"
    );
}
