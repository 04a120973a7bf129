//! The `bench aggregate` measurement of the GPU path.
use super::{group_agg_gpu, AggColumn, AggKind, GroupAggError, GroupAggOptions, GroupAggStrategy};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;

/// A grouped-aggregation benchmark result (see [`bench_group_agg`]).
#[derive(Clone, Debug)]
pub struct GroupAggBench {
    /// Rows.
    pub n: usize,
    /// Groups.
    pub groups: u32,
    /// The strategy that ran.
    pub strategy: GroupAggStrategy,
    /// Median wall time of the whole call (GPU-resident input; the partition's and
    /// the tables' readbacks included), in milliseconds.
    pub ms: f64,
}

/// Times the aggregation of one i64 column (pseudo-random values, no NULLs) over
/// `n` rows with pseudo-random group ids in `0 .. g`, GPU-resident, with
/// `strategy`: one warm-up run, then the median of `reps` (at least 1).
pub fn bench_group_agg(ctx: &GpuContext, n: usize, g: u32, strategy: GroupAggStrategy, reps: usize) -> Result<GroupAggBench, GroupAggError> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state
    };
    let gids: Vec<u32> = (0..n).map(|_| ((next() >> 32) % g.max(1) as u64) as u32).collect();
    let vals: Vec<i64> = (0..n).map(|_| (next() >> 24) as i64 - (1 << 39)).collect();
    let gd = DeviceArray::upload(ctx, &gids)?;
    let vd = DeviceArray::upload(ctx, &vals)?;
    let cols = [AggColumn { kind: AggKind::I64, column: Column::new(&vd) }];
    let opts = GroupAggOptions { strategy, ..Default::default() };
    let mut times = Vec::new();
    let mut ran = strategy;
    crate::timing::warm_up(crate::timing::WARM_UP_MS, || -> Result<(), GroupAggError> {
        group_agg_gpu(ctx, &gd, g, &cols, &opts)?;
        ctx.wait()?;
        Ok(())
    })?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        let t0 = std::time::Instant::now();
        let out = group_agg_gpu(ctx, &gd, g, &cols, &opts)?;
        ctx.wait()?;
        ran = out.strategy;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(GroupAggBench { n, groups: g, strategy: ran, ms: times[times.len() / 2] })
}
