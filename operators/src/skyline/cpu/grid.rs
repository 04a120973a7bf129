//! The CPU skyline without blocks: every kept row is tested, independently and in
//! parallel, against every other kept row that could dominate it, skyline or not
//! (a dominated dominator still proves the row dominated). The candidates come
//! from an index built once:
//!
//! - rows grouped by median mask M; only groups whose mask is a subset of the
//!   row's can hold a dominator (Eq. 1), enumerated through a dense mask -> group
//!   table, fewest bits first;
//! - inside every group, d lists of its rows, one sorted by each dimension's rank
//!   (rank, quartile mask Q and row, 12 bytes an entry). A dominator is no worse
//!   in the row's best dimension k (its smallest rank), so only the prefix of the
//!   group's k-list up to the row's rank can hold one: a binary search bounds it
//!   (on anticorrelated d = 12 data about a tenth of the group);
//! - in that prefix the quartile test (Eq. 4/5) runs branch-free on contiguous
//!   masks before the dominance tests.
//!
//! No barriers between rows, so it scales with the threads; a dominated row
//! usually stops at one of the first, best candidates.
//!
//! The index is built in the named steps of [`SortedGrid::build`] (rows grouped,
//! column maxima, sorted lists, directories, visit order), then
//! [`SortedGrid::test_rows`] tests every row.
use super::super::dominates;
use super::super::masks::row_masks;
use super::super::simd::{prefetch_row, scan_mq_packed};
use super::super::{RankMatrix, SkylineStats};
use crate::tuning::skyline::{PROFILE, SG_BUCKETS, SG_FREE_ASIDE_BYTES};
use rayon::prelude::*;
use std::time::Instant;


/// The sorted grid's index over the kept rows.
struct SortedGrid {
    d: usize,
    /// Kept rows.
    n: usize,
    /// Rows in group order: (group key, M, Q, row), sorted by group key.
    keyed: Vec<(u32, u32, u32, u32)>,
    /// The rows' ranks in `keyed`'s order.
    data: Vec<u32>,
    /// Groups: [gstart[g], gstart[g + 1]) in `keyed`, their keys (low mask bits).
    gstart: Vec<u32>,
    gmask: Vec<u32>,
    /// Group key -> group (u32::MAX: none).
    group_of: Vec<u32>,
    /// Per dimension k and group g, the group's entries sorted by rank k: list k
    /// occupies [k * n, (k + 1) * n), group g [k * n + gstart[g], k * n + gstart[g + 1]):
    /// the rank, the masks (M << 16 | Q) and the row (in `keyed`).
    key: Vec<u32>,
    qs: Vec<u32>,
    pos: Vec<u32>,
    /// Right shift of a dimension's ranks to its bucket of [`SG_BUCKETS`].
    shift: Vec<u32>,
    /// log2 of each group's directory buckets (0: no directory).
    glog: Vec<u32>,
    /// Each group's directory offset inside a dimension's directories, and their total.
    doff: Vec<usize>,
    per_k: usize,
    dir: Vec<u32>,
    /// Rows in visiting order: (best dimension, rank there, row in `keyed`).
    visit: Vec<(u32, u32, u32)>,
}

/// The sorted grid over the pre-filter's `kept` rows with their quartiles `quart`
/// (rows grouped by the low `gbits` bits of M); the skyline's row ids, ascending.
pub(super) fn sorted_grid(
    m: RankMatrix<'_>,
    kept: &[u32],
    quart: &[u32],
    gbits: usize,
    st: &mut SkylineStats,
    profile: bool,
) -> Vec<u32> {
    let tp = Instant::now();
    let grid = SortedGrid::build(m, kept, quart, gbits, tp, profile);
    let t_index = tp.elapsed().as_secs_f64() * 1e3;
    let tq = Instant::now();
    let res = grid.test_rows();
    st.dominance_tests = res.iter().map(|r| r.2).sum();
    st.mask_tests = res.iter().map(|r| r.3).sum();
    st.chunks = 1;
    if profile {
        let (mut md, mut ma, mut dd, mut da, mut nd) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for r in &res {
            if r.1 {
                md += r.3;
                dd += r.2;
                nd += 1;
            } else {
                ma += r.3;
                da += r.2;
            }
        }
        log::debug!(target: PROFILE, "cpu skyline profile (sorted grid): dominated rows {nd}: mask tests {md}, dominance tests {dd}; skyline rows: mask tests {ma}, dominance tests {da}");
    }
    let mut out: Vec<u32> = res
        .iter()
        .filter(|r| !r.1)
        .map(|r| grid.keyed[r.0 as usize].3)
        .collect();
    out.par_sort_unstable();
    let (n, d, ng) = (grid.n, grid.d, grid.gmask.len());
    if profile {
        log::debug!(
            target: PROFILE,
            "cpu skyline profile (sorted grid): index {t_index:.1} ms ({n} rows, {ng} groups, {} threads), tests {:.1} ms",
            rayon::current_num_threads(),
            tq.elapsed().as_secs_f64() * 1e3
        );
    }
    // A large index (about 16 d + 44 bytes a row) is returned to the allocator on
    // another thread: unmapping it took 15-20 ms at 1M rows, d = 12, which the
    // caller need not wait for. Small ones are dropped here (a thread costs more).
    let big = (grid, res);
    if n * (16 * d + 44) >= SG_FREE_ASIDE_BYTES {
        // A failed spawn drops `big` here.
        let _ = std::thread::Builder::new()
            .name("skyline-free".into())
            .spawn(move || drop(big));
    }
    out
}

impl SortedGrid {
    /// The index, step by step (the profile logs when each step ends, from `tp`).
    fn build(m: RankMatrix<'_>, kept: &[u32], quart: &[u32], gbits: usize, tp: Instant, profile: bool) -> Self {
        let d = m.dims;
        let (keyed, data, t_k0, t_k1) = Self::group_rows(m, kept, quart, gbits, tp);
        let n = keyed.len();
        let (gstart, gmask, group_of) = Self::groups(&keyed, gbits);
        let maxes = Self::column_maxes(&data, d);
        let t_keyed = tp.elapsed().as_secs_f64() * 1e3;
        let (key, qs, pos) = Self::sorted_lists(&keyed, &data, &gstart, &maxes, d);
        let t_lists = tp.elapsed().as_secs_f64() * 1e3;
        let (shift, glog, doff, dir) = Self::directories(&key, &gstart, &maxes, d);
        let per_k = doff[gmask.len()];
        let t_dir = tp.elapsed().as_secs_f64() * 1e3;
        let (visit, t_v0) = Self::visit_order(&data, &gstart, d, tp);
        let t_index = tp.elapsed().as_secs_f64() * 1e3;
        if profile {
            log::debug!(
                target: PROFILE,
                "cpu skyline profile (sorted grid): index steps end at: masks {t_k0:.1}, group sort {t_k1:.1}, gather {t_keyed:.1}, lists {t_lists:.1}, directories {t_dir:.1}, visit order {t_v0:.1}, sorted {t_index:.1} ms"
            );
        }
        SortedGrid { d, n, keyed, data, gstart, gmask, group_of, key, qs, pos, shift, glog, doff, per_k, dir, visit }
    }

    /// Rows in group order (by the low `gbits` bits of M: all of them up to d = 8;
    /// the other bits are tested per entry) with their masks, and their ranks
    /// gathered in that order; the times the masks and the sort ended.
    #[allow(clippy::type_complexity)]
    fn group_rows(
        m: RankMatrix<'_>,
        kept: &[u32],
        quart: &[u32],
        gbits: usize,
        tp: Instant,
    ) -> (Vec<(u32, u32, u32, u32)>, Vec<u32>, f64, f64) {
        let d = m.dims;
        let low = ((1u64 << gbits) - 1) as u32;
        let mut keyed: Vec<(u32, u32, u32, u32)> = kept
            .par_iter()
            .map(|&r| {
                let (mk, qk) = row_masks(m.row(r as usize), quart);
                (mk & low, mk, qk, r)
            })
            .collect();
        let t_k0 = tp.elapsed().as_secs_f64() * 1e3;
        // Order inside a group does not matter (its lists are sorted below).
        keyed.par_sort_unstable_by_key(|t| t.0);
        let t_k1 = tp.elapsed().as_secs_f64() * 1e3;
        let mut data = vec![0u32; keyed.len() * d];
        data.par_chunks_mut(d)
            .zip(keyed.par_iter())
            .for_each(|(dst, t)| dst.copy_from_slice(m.row(t.3 as usize)));
        (keyed, data, t_k0, t_k1)
    }

    /// The groups' starts in `keyed` (and the end), their keys, and the group key ->
    /// group table.
    fn groups(keyed: &[(u32, u32, u32, u32)], gbits: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let mut gstart: Vec<u32> = Vec::new();
        let mut gmask: Vec<u32> = Vec::new();
        for (i, t) in keyed.iter().enumerate() {
            if i == 0 || keyed[i - 1].0 != t.0 {
                gstart.push(i as u32);
                gmask.push(t.0);
            }
        }
        gstart.push(keyed.len() as u32);
        let mut group_of = vec![u32::MAX; 1 << gbits];
        for (g, &mk) in gmask.iter().enumerate() {
            group_of[mk as usize] = g as u32;
        }
        (gstart, gmask, group_of)
    }

    /// Every dimension's largest rank.
    fn column_maxes(data: &[u32], d: usize) -> Vec<u32> {
        data.par_chunks(d)
            .with_min_len(4096)
            .fold(
                || vec![0u32; d],
                |mut a, row| {
                    a.iter_mut().zip(row).for_each(|(a, &v)| *a = (*a).max(v));
                    a
                },
            )
            .reduce(
                || vec![0u32; d],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(a, v)| *a = (*a).max(v));
                    a
                },
            )
    }

    /// The per-(dimension, group) lists sorted by rank (see [`SortedGrid::key`]).
    fn sorted_lists(
        keyed: &[(u32, u32, u32, u32)],
        data: &[u32],
        gstart: &[u32],
        maxes: &[u32],
        d: usize,
    ) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let n = keyed.len();
        let ng = gstart.len() - 1;
        let mut key = vec![0u32; n * d];
        let mut qs = vec![0u32; n * d];
        let mut pos = vec![0u32; n * d];
        // The three arrays cut into per-(k, g) segments (k-major, as they are laid
        // out), each then sorted by rank k; one task per group, its d lists in
        // turn (the group's rows stay in cache).
        let glen = |_| (0..ng).map(|g| (gstart[g + 1] - gstart[g]) as usize);
        let lens = || (0..d).flat_map(glen);
        let mut segs: Vec<(usize, usize, &mut [u32], &mut [u32], &mut [u32])> =
            split_lengths(&mut key, lens())
                .into_iter()
                .zip(split_lengths(&mut qs, lens()))
                .zip(split_lengths(&mut pos, lens()))
                .enumerate()
                .map(|(s, ((a, b), c))| (s / ng, s % ng, a, b, c))
                .collect();
        segs.sort_unstable_by_key(|t| (t.1, t.0));
        segs.par_chunks_mut(d).for_each_init(
            || (Vec::new(), Vec::new()),
            |(tmp, scratch), group| {
                for (k, g, ks, qv, ps) in group.iter_mut() {
                    let s = gstart[*g] as usize;
                    tmp.clear();
                    tmp.extend(
                        (0..ks.len())
                            .map(|j| ((data[(s + j) * d + *k] as u64) << 32) | (s + j) as u64),
                    );
                    radix_sort_high(tmp, scratch, 32 - maxes[*k].leading_zeros());
                    for (j, &t) in tmp.iter().enumerate() {
                        let i = t as u32 as usize;
                        ks[j] = (t >> 32) as u32;
                        qv[j] = (keyed[i].1 << 16) | keyed[i].2;
                        ps[j] = i as u32;
                    }
                }
            },
        );
        drop(segs);
        (key, qs, pos)
    }

    /// A directory per list segment: entry b counts the segment's keys below
    /// bucket b of the dimension's rank range, so a row's prefix ends at one
    /// looked-up entry (the end of its rank's bucket; keys above its rank there
    /// fail the scan's key test). A group of `len` rows gets about len / 16
    /// buckets (a power of two, at most `SG_BUCKETS`; none below 16 rows, whose
    /// segment is scanned whole), so the directories stay a small fraction of the
    /// lists. Returns the shifts, the groups' bucket logs, the directory offsets
    /// and the directories.
    fn directories(
        key: &[u32],
        gstart: &[u32],
        maxes: &[u32],
        d: usize,
    ) -> (Vec<u32>, Vec<u32>, Vec<usize>, Vec<u32>) {
        let ng = gstart.len() - 1;
        let n = *gstart.last().unwrap() as usize;
        let shift: Vec<u32> = maxes
            .iter()
            .map(|mx| (32 - mx.leading_zeros()).saturating_sub(SG_BUCKETS.trailing_zeros()))
            .collect();
        let glog: Vec<u32> = (0..ng)
            .map(|g| {
                let len = (gstart[g + 1] - gstart[g]) as usize;
                if len < 16 {
                    0
                } else {
                    ((len / 16).next_power_of_two().min(SG_BUCKETS)).trailing_zeros()
                }
            })
            .collect();
        let mut doff = vec![0usize; ng + 1];
        for g in 0..ng {
            doff[g + 1] = doff[g]
                + if glog[g] == 0 {
                    0
                } else {
                    (1usize << glog[g]) + 1
                };
        }
        let per_k = doff[ng];
        let mut dir = vec![0u32; d * per_k];
        split_lengths(
            &mut dir,
            (0..d).flat_map(|_| (0..ng).map(|g| doff[g + 1] - doff[g])),
        )
        .into_par_iter()
        .enumerate()
        .with_min_len(16)
        .for_each(|(sg, out)| {
            let (k, g) = (sg / ng, sg % ng);
            let keys = &key[k * n + gstart[g] as usize..k * n + gstart[g + 1] as usize];
            let sh = shift[k] + SG_BUCKETS.trailing_zeros() - glog[g];
            let mut j = 0;
            for (b, o) in out.iter_mut().enumerate() {
                while j < keys.len() && ((keys[j] >> sh) as usize) < b {
                    j += 1;
                }
                *o = j as u32;
            }
        });
        (shift, glog, doff, dir)
    }

    /// Every row's best dimension; rows are visited by (M, best dimension, rank
    /// there), so consecutive rows search the same lists near the same place and
    /// find them in cache. Also the time the best dimensions were found (from `tp`).
    fn visit_order(data: &[u32], gstart: &[u32], d: usize, tp: Instant) -> (Vec<(u32, u32, u32)>, f64) {
        let ng = gstart.len() - 1;
        let n = *gstart.last().unwrap() as usize;
        let best = |i: usize| {
            let p = &data[i * d..(i + 1) * d];
            let mut k = 0;
            for j in 1..d {
                if p[j] < p[k] {
                    k = j;
                }
            }
            k
        };
        let mut visit: Vec<(u32, u32, u32)> = (0..n)
            .into_par_iter()
            .map(|i| {
                let k = best(i);
                (k as u32, data[i * d + k], i as u32)
            })
            .collect();
        let t_v0 = tp.elapsed().as_secs_f64() * 1e3;
        // `visit` is already in group order (as `keyed`): sort each group's range.
        split_lengths(
            &mut visit,
            (0..ng).map(|g| (gstart[g + 1] - gstart[g]) as usize),
        )
        .into_par_iter()
        .for_each(|r| r.sort_unstable());
        (visit, t_v0)
    }

    /// Every row against its candidates, in parallel: per visited row (row in
    /// `keyed`, dominated, dominance tests, mask tests).
    fn test_rows(&self) -> Vec<(u32, bool, u64, u64)> {
        let SortedGrid { d, n, keyed, data, gstart, gmask, group_of, key, qs, pos, shift, glog, doff, per_k, dir, visit } = self;
        let (d, n, per_k) = (*d, *n, *per_k);
        let ng = gmask.len();
        visit
            .par_iter()
            .with_min_len(32)
            .map(|&(k, pk, i)| {
                let k = k as usize;
                let i = i as usize;
                let (gi, mi, qi, _) = keyed[i];
                let p = &data[i * d..(i + 1) * d];
                let base = k * n;
                let (mut dt, mut mt) = (0u64, 0u64);
                let pb = pk >> shift[k];
                let test_group = |g: usize, dt: &mut u64, mt: &mut u64| -> bool {
                    let s = base + gstart[g] as usize;
                    // Up to the end of pk's bucket: the bucket's keys above pk
                    // fail the scan's key test.
                    let hi = if glog[g] == 0 {
                        base + gstart[g + 1] as usize
                    } else {
                        let b = (pb >> (SG_BUCKETS.trailing_zeros() - glog[g])) as usize;
                        s + dir[k * per_k + doff[g] + b + 1] as usize
                    };
                    scan_mq_packed(
                        &key[s..hi],
                        &qs[s..hi],
                        pk,
                        mi,
                        qi,
                        mt,
                        |j| prefetch_row(data, pos[s + j] as usize * d),
                        |j| {
                            let o = pos[s + j] as usize;
                            *dt += 1;
                            dominates(&data[o * d..(o + 1) * d], p)
                        },
                    )
                };
                if (1u64 << gi.count_ones()) <= ng as u64 {
                    let mut sub = 0u32;
                    loop {
                        mt += 1;
                        let g = group_of[sub as usize];
                        if g != u32::MAX && test_group(g as usize, &mut dt, &mut mt) {
                            return (i as u32, true, dt, mt);
                        }
                        if sub == gi {
                            break;
                        }
                        sub = sub.wrapping_sub(gi) & gi;
                    }
                } else {
                    for g in 0..ng {
                        mt += 1;
                        if gmask[g] & !gi == 0 && test_group(g, &mut dt, &mut mt) {
                            return (i as u32, true, dt, mt);
                        }
                    }
                }
                (i as u32, false, dt, mt)
            })
            .collect()
    }
}

/// Sorts `v` by its high 32 bits, of which only the low `bits` can be set, stably
/// (LSD radix sort, 11-bit digits; `tmp` is scratch). Short inputs are sorted
/// whole, which is the same order when the low words ascend, as they do here.
fn radix_sort_high(v: &mut Vec<u64>, tmp: &mut Vec<u64>, bits: u32) {
    const DIGIT: u32 = 11;
    if v.len() <= 64 {
        v.sort_unstable();
        return;
    }
    tmp.clear();
    tmp.resize(v.len(), 0);
    let mut shift = 32;
    while shift < 32 + bits {
        let mut cnt = [0u32; 1 << DIGIT];
        for &x in v.iter() {
            cnt[((x >> shift) as usize) & ((1 << DIGIT) - 1)] += 1;
        }
        let mut sum = 0;
        for c in cnt.iter_mut() {
            let t = *c;
            *c = sum;
            sum += t;
        }
        for &x in v.iter() {
            let c = &mut cnt[((x >> shift) as usize) & ((1 << DIGIT) - 1)];
            tmp[*c as usize] = x;
            *c += 1;
        }
        std::mem::swap(v, tmp);
        shift += DIGIT;
    }
}

/// `v` cut into consecutive pieces of the given lengths (their sum at most `v.len()`).
fn split_lengths<T>(mut v: &mut [T], lens: impl Iterator<Item = usize>) -> Vec<&mut [T]> {
    let mut out = Vec::new();
    for len in lens {
        let (a, b) = std::mem::take(&mut v).split_at_mut(len);
        out.push(a);
        v = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::radix_sort_high;

    /// The lists' radix sort is stable by the high word, for every length class
    /// (below and above the cut-over to the comparison sort) and key width.
    #[test]
    fn radix_sort_is_stable_by_key() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (len, bits) in [
            (0usize, 1u32),
            (1, 5),
            (64, 3),
            (65, 1),
            (1000, 11),
            (5000, 12),
            (5000, 20),
            (3000, 32),
        ] {
            let mut v: Vec<u64> = (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = if bits == 32 {
                        x as u32
                    } else {
                        (x as u32) & ((1u32 << bits) - 1)
                    };
                    ((key as u64) << 32) | i as u64
                })
                .collect();
            let mut want = v.clone();
            want.sort_by_key(|t| t >> 32);
            radix_sort_high(&mut v, &mut Vec::new(), bits);
            assert_eq!(v, want, "len {len} bits {bits}");
        }
    }
}
