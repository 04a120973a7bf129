//! Debugging aids ([`SkylineGpuOptions::check`](super::SkylineGpuOptions::check),
//! `RIDGELINE_SKYLINE_CHECK`): the device's intermediate results against host
//! computations as SkyAlign runs (quartiles, the working set after every sort and
//! repacking, the plan kernel's tables, every partition's key order and directory).
use super::launch::{KDIR, LVW};
use super::plan::{mask_starts, part_bounds};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::skyline::masks::{cpu_quartiles, prefilter_keeps};
use crate::skyline::RankMatrix;

/// After `mask_hist`: the pre-filter kept the rows the host keeps and qpick chose
/// the host's quartiles (`quart`: qpick's state, its first 3 d words).
pub(super) fn check_quartiles(
    ctx: &GpuContext,
    ranks: &[u32],
    n: usize,
    d: usize,
    tau: u32,
    n1: u32,
    quart: &DeviceArray,
) -> GpuResult<()> {
    let m = RankMatrix::new(n, d, ranks);
    let kept: Vec<u32> = (0..n as u32)
        .filter(|&r| prefilter_keeps(m.row(r as usize), tau))
        .collect();
    let want = cpu_quartiles(m, &kept);
    let got = quart.download::<u32>(ctx)?;
    if kept.len() != n1 as usize || got[..3 * d] != want[..] {
        return Err(GpuError::Invalid(format!(
            "skyline quartiles {:?} of {n1} rows, expected {want:?} of {}",
            &got[..3 * d],
            kept.len()
        )));
    }
    Ok(())
}

/// After level `l`'s repacking: the plan kernel's table of the next level
/// `lnext` (`aux`, the level table `lvl`) against the host's from the kept
/// points' `counts`, and the new working set (`next` points) against the rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_plan(
    ctx: &GpuContext,
    l: usize,
    lnext: usize,
    next: usize,
    lvl: &DeviceArray,
    aux: &DeviceArray,
    level_parts: &[u32],
    counts: &[u32],
    order: &[u32],
) -> GpuResult<()> {
    let lvv = lvl.download::<u32>(ctx)?;
    let got = aux.download::<u32>(ctx)?;
    let st = mask_starts(counts, order).0;
    let want: Vec<u32> = level_parts
        .chunks_exact(3)
        .flat_map(|t| part_bounds(t[0], &st, counts))
        .collect();
    if got[..want.len()] != want[..] || lvv[lnext * LVW + 9] as usize != next {
        return Err(GpuError::Invalid(format!(
            "level {l}: the device's plan of level {lnext} differs from the host's"
        )));
    }
    Ok(())
}

/// After level `l`: the `next` points of the working set are the live rows above
/// the level.
pub(super) fn check_live(
    ctx: &GpuContext,
    l: usize,
    n: usize,
    next: usize,
    dead: &DeviceArray,
    mq: &DeviceArray,
) -> GpuResult<()> {
    let dd = dead.download::<u32>(ctx)?;
    let mqv = mq.download::<u32>(ctx)?;
    let want = (0..n)
        .filter(|&k| dd[k] == 0 && (mqv[k] & 0xffff).count_ones() as usize > l)
        .count();
    if want != next {
        return Err(GpuError::Invalid(format!(
            "level {l}: working set {next}, live rows above the level {want}"
        )));
    }
    Ok(())
}

/// The working set is in (|M|, M) order,
/// without repeats, matches the per-mask counts, and its masks are its rows'.
pub(super) fn check_working_set(
    ctx: &GpuContext,
    idx: &DeviceArray,
    wq: &DeviceArray,
    mq: &DeviceArray,
    counts: &[u32],
    order: &[u32],
) -> GpuResult<()> {
    // The working set fills the first sum(counts) slots of its buffers.
    let len: usize = counts.iter().map(|&c| c as usize).sum();
    let mut idx = idx.download::<u32>(ctx)?;
    let wq = wq.download::<u32>(ctx)?;
    let mq = mq.download::<u32>(ctx)?;
    if idx.len() < len {
        return Err(GpuError::Invalid(format!(
            "working set of {len} points in a buffer of {}",
            idx.len()
        )));
    }
    idx.truncate(len);
    if let Some(k) = (0..idx.len()).find(|&k| wq[k] != mq[idx[k] as usize]) {
        return Err(GpuError::Invalid(format!(
            "working set mask at {k} is not its row's"
        )));
    }
    let rank: std::collections::HashMap<u32, usize> =
        order.iter().enumerate().map(|(k, &m)| (m, k)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut got = vec![0u32; counts.len()];
    let mut prev = 0usize;
    for (k, &p) in idx.iter().enumerate() {
        if !seen.insert(p) {
            return Err(GpuError::Invalid(format!("working set repeats {p} at {k}")));
        }
        let m = mq[p as usize] & 0xffff;
        got[m as usize] += 1;
        let r = rank[&m];
        if r < prev {
            return Err(GpuError::Invalid(format!(
                "working set out of order at {k}"
            )));
        }
        prev = r;
    }
    if got != counts {
        return Err(GpuError::Invalid("working set counts differ".into()));
    }
    Ok(())
}

/// After `sort_level`, every level-l
/// partition is in ascending order of its points' sums of ranks over the
/// partition's mask, and its directory holds the key at every KDIR-th of its
/// length (all zero for partitions above the sort capacity).
#[allow(clippy::too_many_arguments)]
pub(super) fn check_keys(
    ctx: &GpuContext,
    idx: &DeviceArray,
    kdir: &DeviceArray,
    parts: &[u32],
    ranks: &[u32],
    d: usize,
    kshift: u32,
    cap: u32,
) -> GpuResult<()> {
    let idx = idx.download::<u32>(ctx)?;
    let dir = kdir.download::<u32>(ctx)?;
    for (k, t) in parts.chunks_exact(3).enumerate() {
        let (m, a, b) = (t[0], t[1] as usize, t[2] as usize);
        let len = b - a;
        let keys: Vec<u32> = (a..b)
            .map(|i| {
                let row = &ranks[idx[i] as usize * d..][..d];
                (0..d)
                    .filter(|&j| m >> j & 1 == 1)
                    .map(|j| row[j] >> kshift)
                    .sum::<u32>()
            })
            .collect();
        let got = &dir[k * KDIR..(k + 1) * KDIR];
        let want: Vec<u32> = if len > cap as usize {
            vec![0; KDIR]
        } else if len == 0 {
            // An emptied partition: every key above any sum (nothing to scan).
            vec![u32::MAX; KDIR]
        } else {
            if keys.windows(2).any(|w| w[0] > w[1]) {
                return Err(GpuError::Invalid(format!(
                    "partition {m:#x} is not in key order"
                )));
            }
            (0..KDIR).map(|s| keys[s * len / KDIR]).collect()
        };
        if got != want.as_slice() {
            return Err(GpuError::Invalid(format!(
                "partition {m:#x}: key directory {got:?}, expected {want:?}"
            )));
        }
    }
    Ok(())
}
