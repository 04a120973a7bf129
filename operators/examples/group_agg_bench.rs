//! Grouped-aggregation timings: `cargo run -p ridgeline-operators --release --example
//! group_agg_bench -- [log2_n] [reps]`: one i64 column over pseudo-random group ids,
//! dense tags vs sparse regions vs auto for several group counts (wall time of the
//! whole call, median of `reps`).
use ridgeline_operators::group_agg::{bench_group_agg, dense_capacity, GroupAggStrategy};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let lg: u32 = a.get(1).map_or(22, |s| s.parse().unwrap());
    let reps: usize = a.get(2).map_or(3, |s| s.parse().unwrap());
    let ctx = ridgeline_operators::global().expect("a GPU adapter");
    let n = 1usize << lg;
    println!("adapter: {} ({:?}), dense capacity {}", ctx.info().name, ctx.info().device_type, dense_capacity(&ctx));
    println!("| n | groups | dense ms | sparse ms | auto ms (ran) |");
    println!("| --- | --- | --- | --- | --- |");
    for g in [1u32, 16, 256, 1024, 65_536, 1 << 20] {
        let cell = |s: GroupAggStrategy| match bench_group_agg(&ctx, n, g, s, reps) {
            Ok(b) => (format!("{:.1}", b.ms), b.strategy),
            Err(e) => (format!("({e})"), s),
        };
        let dense = if g <= dense_capacity(&ctx) { cell(GroupAggStrategy::DenseTags).0 } else { "-".into() };
        let sparse = cell(GroupAggStrategy::SparseRegions).0;
        let (auto, ran) = cell(GroupAggStrategy::Auto);
        println!("| 2^{lg} | {g} | {dense} | {sparse} | {auto} ({ran:?}) |");
    }
}
