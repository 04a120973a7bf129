//! Skyline timings: `cargo run -p ridgeline-operators --release --example skyline_bench
//! -- [n] [d] [dist: indep|corr|anti] [threads] [reps] [gpu: 0|1]`.
//! Prints the CPU (Hybrid-style) and GPU (SkyAlign) times (median of `reps`), the
//! work counters, and checks that both return the same skyline.
use rand::{Rng, SeedableRng};
use ridgeline_operators::skyline::{skyline_cpu, skyline_gpu, CpuSkylineOptions, RankMatrix, SkylineGpuOptions};

fn normalish(r: &mut impl Rng, mu: f64, sd: f64) -> f64 {
    let s: f64 = (0..12).map(|_| r.random::<f64>()).sum::<f64>() - 6.0;
    mu + s * sd
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(1_000_000, |s| s.parse().unwrap());
    let d: usize = a.get(2).map_or(12, |s| s.parse().unwrap());
    let dist = a.get(3).map_or("anti", |s| s.as_str()).to_string();
    let threads: usize = a.get(4).map_or(0, |s| s.parse().unwrap());
    let reps: usize = a.get(5).map_or(3, |s| s.parse().unwrap());
    let gpu = a.get(6).map_or(true, |s| s != "0");
    let mut r = rand::rngs::SmallRng::seed_from_u64(7);
    let mut vals = vec![0f64; n * d];
    let mut p = vec![0f64; d];
    for row in vals.chunks_mut(d) {
        loop {
            match dist.as_str() {
                "indep" => p.iter_mut().for_each(|x| *x = r.random::<f64>()),
                "corr" => {
                    let v = normalish(&mut r, 0.5, 0.25);
                    p.iter_mut().for_each(|x| *x = v + normalish(&mut r, 0.0, 0.05));
                }
                _ => {
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
        row.copy_from_slice(&p);
    }
    let ranks = ridgeline_operators::testing::dense_ranks_f64(&vals, n, d);
    drop(vals);
    let m = RankMatrix::new(n, d, &ranks);
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let mut times = Vec::new();
    let mut cpu_out = None;
    for _ in 0..reps {
        let (ids, st) = skyline_cpu(m, &CpuSkylineOptions { threads, ..Default::default() });
        times.push(st.wall_ms);
        cpu_out = Some((ids, st));
    }
    let (cids, cst) = cpu_out.unwrap();
    println!(
        "cpu  n={n} d={d} {dist} threads={threads}: {:.1} ms (median of {reps}), skyline {}, dt {}, mt {}",
        med(times),
        cids.len(),
        cst.dominance_tests,
        cst.mask_tests
    );
    if gpu {
        let ctx = ridgeline_operators::global().expect("GPU");
        println!("adapter: {}", ctx.info().name);
        let mut times = Vec::new();
        let mut out = None;
        for _ in 0..reps + 1 {
            let (ids, st) = skyline_gpu(&ctx, m, &SkylineGpuOptions::default()).expect("gpu skyline");
            times.push(st.wall_ms);
            out = Some((ids, st));
        }
        times.remove(0); // pipeline creation
        let (gids, gst) = out.unwrap();
        println!(
            "gpu  n={n} d={d} {dist}: {:.1} ms (median of {reps}), skyline {}, dt {}, mt {}, device bytes {} ({:.2}x matrix), same as cpu: {}",
            med(times),
            gids.len(),
            gst.dominance_tests,
            gst.mask_tests,
            gst.device_bytes,
            gst.device_bytes as f64 / (n * d * 4) as f64,
            gids == cids
        );
        if gids != cids {
            // Which side is wrong: look for a dominator of every row in the difference.
            use ridgeline_operators::skyline::dominates;
            let cs: std::collections::HashSet<u32> = cids.iter().copied().collect();
            let gs: std::collections::HashSet<u32> = gids.iter().copied().collect();
            for (side, a, b) in [("gpu only", &gs, &cs), ("cpu only", &cs, &gs)] {
                for &r in a.difference(b).take(10) {
                    let dom = (0..n).find(|&p| dominates(m.row(p), m.row(r as usize)));
                    println!("{side}: row {r} {:?} dominated by {:?} {:?}", m.row(r as usize), dom, dom.map(|p| m.row(p)));
                }
            }
        }
    }
}

