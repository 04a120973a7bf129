//! SampleSelect timings, not a check: `RIDGELINE_GPU=on cargo run -p
//! ridgeline-operators --release --example select_bench -- [n] [timestamps: 0|1]`
//! (n keys, default 2^24 uniform u32). For the oracle on and off: the exact median
//! and 9 deciles, the approximate 9 deciles and top-100 on resident keys, each
//! path's gpu_ms (kernel time by timestamp queries with `timestamps` 1 where the
//! adapter has them, see `SelectOptions::timestamps`; else wall time) and its
//! levels. (Formerly the ignored test `bench_select` of operators/tests/primitives.)
use rand::{Rng, SeedableRng};
use ridgeline_operators::select::{approx_select_gpu, select_gpu, topk_gpu, Keys, SelectOptions};
use ridgeline_operators::DeviceArray;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(1 << 24, |s| s.parse().expect("n: a number of keys"));
    let timestamps = a.get(2).is_some_and(|s| s != "0");
    let ctx = ridgeline_operators::global().expect("a GPU adapter");
    println!("adapter: {} ({:?})", ctx.info().name, ctx.info().device_type);
    let mut r = rand::rngs::SmallRng::seed_from_u64(99);
    let keys: Vec<u32> = (0..n).map(|_| r.random::<u32>()).collect();
    let arr = DeviceArray::upload(&ctx, &keys).unwrap();
    let median = [n as u64 / 2];
    let deciles: Vec<u64> = (1..10).map(|i| i * n as u64 / 10).collect();
    for oracle in [true, false] {
        let opts = SelectOptions { oracle, timestamps, ..Default::default() };
        for (what, ranks) in [("median", &median[..]), ("9 deciles", &deciles[..])] {
            let _ = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), ranks, &opts).unwrap();
            let t = std::time::Instant::now();
            let (_, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), ranks, &opts).unwrap();
            println!(
                "n={n} exact {what} oracle={oracle}: gpu {:.1} ms, wall {:.1} ms, {} levels, {} aux bytes",
                st.gpu_ms,
                t.elapsed().as_secs_f64() * 1e3,
                st.levels,
                st.device_bytes
            );
        }
        let (_, st) = approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &deciles, &opts).unwrap();
        println!("n={n} approx 9 deciles oracle={oracle}: gpu {:.1} ms, {} levels, bound {}", st.gpu_ms, st.levels, st.rank_error_bound);
        let (_, st) = topk_gpu::<u32>(&ctx, Keys::Device(&arr, n), 100, &opts).unwrap();
        println!("n={n} top-100 oracle={oracle}: gpu {:.1} ms, {} levels", st.gpu_ms, st.levels);
    }
}
