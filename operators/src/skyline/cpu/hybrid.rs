//! The CPU skyline's blocked algorithm (used for d > 16, inputs whose sorted-grid
//! lists exceed `SORTED_GRID_MAX_BYTES`, and on request).
//!
//! The blocked algorithm, in the spirit of Hybrid (Chester et al., ICDE 2015),
//! with SkyAlign's static median/quartile masks in place of Hybrid's pivot masks:
//!
//! 1. SkyAlign's pre-filter (tau = min over rows of the row maximum) drops rows
//!    that the tau row dominates, in parallel.
//! 2. Per-dimension quartiles (selection on each rank column, in parallel), then
//!    every row's median mask M and quartile mask Q and its Manhattan norm (sum of
//!    ranks); rows are sorted by (norm, id) in parallel. A row can only be
//!    dominated by a row with a strictly smaller norm, so a row confirmed against
//!    everything before it in this order stays in the skyline.
//! 3. Blocks of [`CPU_BLOCK`] rows: (a) every row of the block is tested in
//!    parallel against the confirmed skyline, which is kept grouped by median
//!    mask: only groups whose mask is a subset of the row's can hold a dominator
//!    (Eq. 1). For d <= 20 a dense mask -> group table is indexed directly: for
//!    d <= 14, when it is the cheaper walk, group-major (every group, fewest mask
//!    bits first, in parallel, walks the supersets of its mask in a per-block
//!    mask -> rows table, so a group's points are read once per block instead of
//!    once per row; one mask test per table entry looked up), otherwise row-major
//!    (every row enumerates its mask's subsets when fewer than the groups, else
//!    scans the groups, one mask test each). Inside a group the quartile test
//!    (Eq. 4/5) runs branch-free on the group's contiguous masks (SSE2 on x86_64,
//!    one mask test a point) before the dominance tests of the points that pass;
//!    (b) the block's survivors are tested in parallel against the survivors
//!    before them in the block (Eq. 1 and 4 branch-free, two mask tests a pair);
//!    (c) the rest join the skyline groups.
//!
//!    (Measured on 2 shared cores at 200k anticorrelated d=12: step 3(a) is about
//!    90% of the time; with the subset lookups alone it took about 1/8 of that, so
//!    the cost is the scans of the groups' points and their dominance tests.
//!    Group-major and the SSE2 scans gave 1.15-1.45x over the previous version:
//!    200k anticorrelated d=12 1.99/2.71 -> 1.38/2.03 s, 1M independent d=12
//!    13.4/15.6 -> 11.7/12.9 s, same skylines.)
use super::super::dominates;
use super::super::masks::{cpu_quartiles, row_masks};
use super::super::simd::{scan_mq, scan_q};
use super::super::{RankMatrix, SkylineStats};
use crate::tuning::skyline::{CPU_BLOCK, GM_MAX_DIMS, PROFILE};
use rayon::prelude::*;
use std::time::Instant;

struct SkyGroup {
    mask: u32,
    q: Vec<u32>,
    rows: Vec<u32>,
    ids: Vec<u32>,
}

/// Step 3(a) group-major: block rows bucketed by median mask (counting sort); every
/// skyline group (fewest mask bits first) walks the supersets of its mask (Eq. 1:
/// only rows whose mask contains the group's can be dominated by it; one mask test
/// per superset looked up) and tests the live rows there (Eq. 4/5, then dominance).
/// Groups run in parallel; a row found dominated is skipped by later tests (so the
/// counters may vary a little between runs). Returns (dead, dt, mt) per block row,
/// the counts summed into the first entry.
fn group_major(
    groups: &[SkyGroup],
    block: &[(u64, u32, u32, u32)],
    data: &[u32],
    d: usize,
    gorder: &mut Vec<u32>,
) -> Vec<(bool, u64, u64)> {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let nb = block.len();
    let size = 1usize << d;
    let mut bstart = vec![0u32; size + 1];
    for t in block {
        bstart[t.2 as usize + 1] += 1;
    }
    for k in 0..size {
        bstart[k + 1] += bstart[k];
    }
    let mut cur = bstart.clone();
    let mut border = vec![0u32; nb];
    for (k, t) in block.iter().enumerate() {
        let c = &mut cur[t.2 as usize];
        border[*c as usize] = k as u32;
        *c += 1;
    }
    if gorder.len() != groups.len() {
        *gorder = (0..groups.len() as u32).collect();
        gorder.sort_unstable_by_key(|&g| {
            (
                groups[g as usize].mask.count_ones(),
                groups[g as usize].mask,
            )
        });
    }
    let dead: Vec<AtomicBool> = (0..nb).map(|_| AtomicBool::new(false)).collect();
    let full = (size - 1) as u32;
    let (dt, mt) = gorder
        .par_iter()
        .with_min_len(4)
        .map(|&gi| {
            let g = &groups[gi as usize];
            let (mut dt, mut mt) = (0u64, 0u64);
            let free = full & !g.mask;
            let mut t = 0u32;
            loop {
                let sm = (g.mask | t) as usize;
                mt += 1;
                for &k in &border[bstart[sm] as usize..bstart[sm + 1] as usize] {
                    let k = k as usize;
                    if dead[k].load(Relaxed) {
                        continue;
                    }
                    let (_, _, mi, qi) = block[k];
                    let p = &data[k * d..(k + 1) * d];
                    let bad = (g.mask | !mi) & !qi;
                    if scan_q(&g.q, bad, &mut mt, |j| {
                        dt += 1;
                        dominates(&g.rows[j * d..(j + 1) * d], p)
                    }) {
                        dead[k].store(true, Relaxed);
                    }
                }
                if t == free {
                    break;
                }
                t = t.wrapping_sub(free) & free;
            }
            (dt, mt)
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let mut out: Vec<(bool, u64, u64)> = dead.into_iter().map(|x| (x.into_inner(), 0, 0)).collect();
    out[0].1 = dt;
    out[0].2 = mt;
    out
}

/// Sorts `v` by its high 32 bits, of which only the low `bits` can be set, stably
/// (LSD radix sort, 11-bit digits; `tmp` is scratch). Short inputs are sorted

/// Block rows: (norm, row, M, Q), sorted by (norm, row).
type Keyed = (u64, u32, u32, u32);

/// The blocked algorithm over the pre-filter's `kept` rows (steps 2 and 3; `tp`:
/// the start of step 1, for the profile).
pub(super) fn blocked(
    m: RankMatrix<'_>,
    kept: &[u32],
    tp: Instant,
    st: &mut SkylineStats,
    profile: bool,
) -> Vec<u32> {
    let d = m.dims;
    let (keyed, data, use_masks) = sort_by_norm(m, kept);
    let t_setup = tp.elapsed().as_secs_f64() * 1e3;
    let mut sky = ConfirmedSkyline::new(d, use_masks);
    let (mut t_a, mut t_b, mut t_c) = (0f64, 0f64, 0f64);
    let (mut dts, mut mts) = (0u64, 0u64);
    let mut blocks = 0u32;
    for start in (0..keyed.len()).step_by(CPU_BLOCK) {
        blocks += 1;
        let end = (start + CPU_BLOCK).min(keyed.len());
        let ta = Instant::now();
        let phase1 = sky.against_skyline(&keyed, &data, start, end);
        t_a += ta.elapsed().as_secs_f64() * 1e3;
        let tb = Instant::now();
        let mut surv: Vec<usize> = Vec::new();
        for (k, &(dead, dt, mt)) in phase1.iter().enumerate() {
            dts += dt;
            mts += mt;
            if !dead {
                surv.push(start + k);
            }
        }
        let phase2 = against_block(&keyed, &data, d, &surv);
        t_b += tb.elapsed().as_secs_f64() * 1e3;
        let tc = Instant::now();
        sky.join(&keyed, &data, &surv, &phase2, &mut dts, &mut mts);
        t_c += tc.elapsed().as_secs_f64() * 1e3;
    }
    if profile {
        log::debug!(
            target: PROFILE,
            "cpu skyline profile: setup {t_setup:.1} ms (pre-filter, sort, masks; {} rows kept), blocks {blocks}: (a) {t_a:.1} ms, (b) {t_b:.1} ms, (c) {t_c:.1} ms, groups {}",
            keyed.len(),
            sky.groups.len()
        );
    }
    let mut out: Vec<u32> = sky.groups.iter().flat_map(|g| g.ids.iter().copied()).collect();
    out.par_sort_unstable();
    st.dominance_tests = dts;
    st.mask_tests = mts;
    st.chunks = blocks;
    out
}

/// Step 2: the kept rows' Manhattan norms, sorted by (norm, row); their quartile
/// masks (d <= 32; more dimensions run without masks, the third value `false`);
/// their ranks gathered in that order.
fn sort_by_norm(m: RankMatrix<'_>, kept: &[u32]) -> (Vec<Keyed>, Vec<u32>, bool) {
    let d = m.dims;
    let use_masks = d <= 32;
    let mut keyed: Vec<Keyed> = kept
        .par_iter()
        .map(|&r| {
            (
                m.row(r as usize).iter().map(|&v| v as u64).sum::<u64>(),
                r,
                0,
                0,
            )
        })
        .collect();
    keyed.par_sort_unstable_by_key(|&(norm, r, _, _)| (norm, r));
    if use_masks {
        // (Quartiles of a prefix of the norm order instead, closer to the skyline,
        // measured slower: 1M independent d=12 2.4 -> 3.7 s, 100k anticorrelated
        // d=12 244 -> 399 ms with 16384 rows.)
        let quart = cpu_quartiles(m, kept);
        keyed.par_iter_mut().for_each(|t| {
            let (mk, qk) = row_masks(m.row(t.1 as usize), &quart);
            t.2 = mk;
            t.3 = qk;
        });
    }
    let mut data = vec![0u32; keyed.len() * d];
    data.par_chunks_mut(d)
        .zip(keyed.par_iter())
        .for_each(|(dst, &(_, r, _, _))| dst.copy_from_slice(m.row(r as usize)));
    (keyed, data, use_masks)
}

/// The confirmed skyline, grouped by median mask.
struct ConfirmedSkyline {
    d: usize,
    groups: Vec<SkyGroup>,
    /// Mask -> group (dense table for d <= 20; otherwise groups are scanned).
    group_of: Vec<u32>,
    group_map: std::collections::HashMap<u32, usize>,
    /// The groups' order for the group-major walk (see [`group_major`]).
    gorder: Vec<u32>,
}

impl ConfirmedSkyline {
    fn new(d: usize, use_masks: bool) -> Self {
        ConfirmedSkyline {
            d,
            groups: Vec::new(),
            group_of: if use_masks && d <= 20 {
                vec![u32::MAX; 1 << d]
            } else {
                Vec::new()
            },
            group_map: std::collections::HashMap::new(),
            gorder: Vec::new(),
        }
    }

    /// Step 3(a): block rows `start..end` against the confirmed skyline; (dead,
    /// dominance tests, mask tests) per block row.
    fn against_skyline(&mut self, keyed: &[Keyed], data: &[u32], start: usize, end: usize) -> Vec<(bool, u64, u64)> {
        let d = self.d;
        let (groups, group_of) = (&self.groups, &self.group_of);
        // Group-major when the mask table is dense and enumerating the supersets of
        // every group's mask is cheaper than the subsets of every row's: each group's
        // points are then read once per block (cache-friendly) instead of once per row.
        let use_gm = !group_of.is_empty() && d <= GM_MAX_DIMS && !groups.is_empty() && {
            let by_group: u64 = groups
                .iter()
                .map(|g| 1u64 << (d as u32 - g.mask.count_ones()))
                .sum();
            let by_row: u64 = keyed[start..end]
                .iter()
                .map(|t| (1u64 << t.2.count_ones()).min(groups.len() as u64))
                .sum();
            by_group <= by_row.saturating_mul(2)
        };
        if use_gm {
            return group_major(
                groups,
                &keyed[start..end],
                &data[start * d..end * d],
                d,
                &mut self.gorder,
            );
        }
        (start..end)
            .into_par_iter()
            .map(|i| {
                let (_, _, mi, qi) = keyed[i];
                let p = &data[i * d..(i + 1) * d];
                let (mut dt, mut mt) = (0u64, 0u64);
                let test_group = |g: &SkyGroup, dt: &mut u64, mt: &mut u64| -> bool {
                    // Eq. 4 / 5 for every point of the group, 32 at a time without
                    // branches, then dominance tests for the points that pass.
                    let bad = (g.mask | !mi) & !qi;
                    scan_q(&g.q, bad, mt, |k| {
                        *dt += 1;
                        dominates(&g.rows[k * d..(k + 1) * d], p)
                    })
                };
                if !group_of.is_empty() && (1u64 << mi.count_ones()) < groups.len() as u64 {
                    // Only groups whose mask is a subset of this row's can hold a
                    // dominator (Eq. 1): enumerate the subsets, fewer than the groups.
                    // Ascending, so groups better on more dimensions come first.
                    let mut sub = 0u32;
                    loop {
                        mt += 1;
                        let gi = group_of[sub as usize];
                        if gi != u32::MAX && test_group(&groups[gi as usize], &mut dt, &mut mt) {
                            return (true, dt, mt);
                        }
                        if sub == mi {
                            break;
                        }
                        sub = sub.wrapping_sub(mi) & mi;
                    }
                } else {
                    for g in groups {
                        mt += 1;
                        if g.mask & !mi != 0 {
                            continue; // Eq. 1 for the whole group
                        }
                        if test_group(g, &mut dt, &mut mt) {
                            return (true, dt, mt);
                        }
                    }
                }
                (false, dt, mt)
            })
            .collect()
    }

    /// Step 3(c): the block's survivors not dominated in step 3(b) join the skyline
    /// groups (and the counters of step 3(b) are added up).
    fn join(
        &mut self,
        keyed: &[Keyed],
        data: &[u32],
        surv: &[usize],
        phase2: &[(bool, u64, u64)],
        dts: &mut u64,
        mts: &mut u64,
    ) {
        let d = self.d;
        for (a, &(dead, dt, mt)) in phase2.iter().enumerate() {
            *dts += dt;
            *mts += mt;
            if dead {
                continue;
            }
            let i = surv[a];
            let (_, r, mi, qi) = keyed[i];
            let (groups, group_of) = (&mut self.groups, &mut self.group_of);
            let gi = *self.group_map.entry(mi).or_insert_with(|| {
                groups.push(SkyGroup {
                    mask: mi,
                    q: Vec::new(),
                    rows: Vec::new(),
                    ids: Vec::new(),
                });
                if !group_of.is_empty() {
                    group_of[mi as usize] = (groups.len() - 1) as u32;
                }
                groups.len() - 1
            });
            let g = &mut self.groups[gi];
            g.q.push(qi);
            g.rows.extend_from_slice(&data[i * d..(i + 1) * d]);
            g.ids.push(r);
        }
    }
}

/// Step 3(b): the block's survivors (`surv`, positions in `keyed`) against the
/// earlier survivors of the block: Eq. 1 and Eq. 4 on contiguous mask arrays
/// without branches (two mask tests a pair), 32 pairs at a time; (dead, dominance
/// tests, mask tests) per survivor.
fn against_block(keyed: &[Keyed], data: &[u32], d: usize, surv: &[usize]) -> Vec<(bool, u64, u64)> {
    let sn: Vec<u64> = surv.iter().map(|&i| keyed[i].0).collect();
    let sm: Vec<u32> = surv.iter().map(|&i| keyed[i].2).collect();
    let sq: Vec<u32> = surv.iter().map(|&i| keyed[i].3).collect();
    (0..surv.len())
        .into_par_iter()
        .map(|a| {
            let i = surv[a];
            let (ni, _, mi, qi) = keyed[i];
            let p = &data[i * d..(i + 1) * d];
            let (mut dt, mut mt) = (0u64, 0u64);
            // Equal norms cannot dominate; survivors are in norm order.
            let lim = sn[..a].partition_point(|&nj| nj < ni);
            let dead = scan_mq(&sm[..lim], &sq[..lim], mi, qi, &mut mt, |k| {
                dt += 1;
                let j = surv[k];
                dominates(&data[j * d..(j + 1) * d], p)
            });
            (dead, dt, mt)
        })
        .collect()
}
