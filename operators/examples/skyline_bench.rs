//! Skyline timings: `cargo run -p ridgeline-operators --release --example skyline_bench
//! -- [n] [d] [dist: indep|corr|anti] [threads] [reps] [gpu: 0|1]`.
//! Prints the CPU (Hybrid-style) and GPU (SkyAlign) times (median of `reps`), the
//! work counters, and checks that both return the same skyline.
use rand::{Rng, SeedableRng};
use ridgeline_operators::skyline::{skyline_cpu, skyline_gpu, RankMatrix};

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
    // Dense ranks per dimension.
    let mut ranks = vec![0u32; n * d];
    let mut col: Vec<(f64, usize)> = Vec::with_capacity(n);
    for j in 0..d {
        col.clear();
        col.extend((0..n).map(|i| (vals[i * d + j], i)));
        col.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
        let mut rank = 0u32;
        for k in 0..n {
            if k > 0 && col[k].0 != col[k - 1].0 {
                rank += 1;
            }
            ranks[col[k].1 * d + j] = rank;
        }
    }
    drop(vals);
    let m = RankMatrix::new(n, d, &ranks);
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let mut times = Vec::new();
    let mut cpu_out = None;
    for _ in 0..reps {
        let (ids, st) = skyline_cpu(m, threads);
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
            let (ids, st) = skyline_gpu(&ctx, m).expect("gpu skyline");
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
                for &r in a.difference(b).take(if std::env::var_os("SKY_EMU").is_some() { 2 } else { 10 }) {
                    if std::env::var_os("SKY_EMU").is_some() {
                        emulate(m, r as usize);
                    }
                    let dom = (0..n).find(|&p| dominates(m.row(p), m.row(r as usize)));
                    println!("{side}: row {r} {:?} dominated by {:?} {:?}", m.row(r as usize), dom, dom.map(|p| m.row(p)));
                }
            }
        }
    }
}

/// Host emulation of the masks for one missed row: which levels/partitions cover it.
fn emulate(m: RankMatrix<'_>, target: usize) {
    use ridgeline_operators::skyline::dominates;
    let (n, d) = (m.rows, m.dims);
    let tau = (0..n).map(|r| *m.row(r).iter().max().unwrap()).min().unwrap();
    let kept: Vec<usize> = (0..n).filter(|&r| { let row = m.row(r); let mn = *row.iter().min().unwrap(); let mx = *row.iter().max().unwrap(); mn < tau || mx == tau }).collect();
    let n1 = kept.len();
    let mut quart = vec![0u32; 3 * d];
    for j in 0..d {
        let mut col: Vec<u32> = kept.iter().map(|&r| m.row(r)[j]).collect();
        col.sort_unstable();
        for q in 0..3 { quart[j * 3 + q] = col[((q + 1) * n1 / 4).min(n1 - 1)]; }
    }
    let masks = |r: usize| {
        let (mut mm, mut qq) = (0u32, 0u32);
        for j in 0..d { let v = m.row(r)[j]; let above = v > quart[j*3+1]; let piv = if above { quart[j*3+2] } else { quart[j*3] }; mm |= (above as u32) << j; qq |= ((v > piv) as u32) << j; }
        (mm, qq)
    };
    let (mp, qp) = masks(target);
    println!("target {target}: tau {tau} kept {n1} M {:b} |M| {} Q {:b}", mp, mp.count_ones(), qp);
    // Skyline dominators of the target among kept rows.
    let doms: Vec<usize> = kept.iter().copied().filter(|&s| dominates(m.row(s), m.row(target))).collect();
    for &s in doms.iter().take(5) {
        let (ms, qs) = masks(s);
        let sky = !kept.iter().any(|&t| dominates(m.row(t), m.row(s)));
        let eq1 = ms | mp != mp;
        let eq4 = (((ms | !mp) & qs) | qp) != qp;
        println!("  dominator {s}: M {:b} |M| {} Q {:b} skyline {sky} eq1-skip {eq1} eq4-skip {eq4}", ms, ms.count_ones(), qs);
    }
}
