//! The host's plan of SkyAlign's levels: the (|M|, M) order and its partition
//! bounds, the per-level choices of the mixed kernel (work estimates), the key
//! cut's parameters and the counters' sum.
use crate::context::GpuContext;
#[cfg(test)]
use crate::tuning::skyline::THREAD_PARTS;
use crate::tuning::skyline::{SORT_CAP, SORT_LANES_MAX, SORT_LANES_MIN, WIDE_WORK};

/// The estimated work of level `l` from the first working set's per-mask counts:
/// for each point with |M| > l, the points of the level-l partitions below its
/// mask (the sum over the l-subsets S of M of count(S), by a zeta transform over
/// the d bits, in u32: no sum exceeds the row count); returns their mean and
/// coefficient of variation over those points.
pub(super) fn level_work(counts: &[u32], d: usize, l: usize) -> (f64, f64) {
    let masks = 1usize << d;
    let mut f: Vec<u32> = (0..masks)
        .map(|m| if m.count_ones() as usize == l { counts[m] } else { 0 })
        .collect();
    // Bit b: every mask with b set adds the mask without it (contiguous halves, so
    // the adds vectorise).
    for b in 0..d {
        let h = 1usize << b;
        for block in f.chunks_exact_mut(2 * h) {
            let (lo, hi) = block.split_at_mut(h);
            for (x, y) in hi.iter_mut().zip(lo.iter()) {
                *x += *y;
            }
        }
    }
    let (mut n, mut s1, mut s2) = (0f64, 0f64, 0f64);
    for m in 0..masks {
        if m.count_ones() as usize > l && counts[m] > 0 {
            let c = counts[m] as f64;
            let w = f[m] as f64;
            n += c;
            s1 += c * w;
            s2 += c * w * w;
        }
    }
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let mean = s1 / n;
    let var = (s2 / n - mean * mean).max(0.0);
    (mean, if mean > 0.0 { var.sqrt() / mean } else { 0.0 })
}

/// C(n, k).
#[cfg(test)]
fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// C(a, b) for a, b <= 16, row-major by a (17 x 17), appended to the partition
/// lookup table (`binom` in shaders/skyline/iterate_wide.wgsl).
pub(super) fn binomials() -> Vec<u32> {
    let mut binoms = vec![0u32; 17 * 17];
    for a in 0..17usize {
        binoms[a * 17] = 1;
        for b in 1..=a {
            binoms[a * 17 + b] =
                binoms[(a - 1) * 17 + b - 1] + if b < a { binoms[(a - 1) * 17 + b] } else { 0 };
        }
    }
    binoms
}

/// The first level that runs the wide kernel under [`SkylineKernel::Mixed`]
/// (levels with at most `thread_parts` partitions excepted): max(2, d / 4), or
/// an earlier level whose work estimate reaches [`WIDE_WORK`]; `levels` are the
/// levels that hold points with their partition counts. In the low levels every
/// point has few partitions below its mask and few points in them, so a workgroup
/// per point costs more than it balances (H100, 1M anticorrelated rows: d = 12
/// level 2 1.6 ms per invocation against 2.3 ms wide; from level 3 at d = 12 and
/// level 4 at d = 16 wide wins). `thread_levels` (`RIDGELINE_SKYLINE_THREAD_LEVELS`)
/// fixes it instead.
///
/// [`SkylineKernel::Mixed`]: super::SkylineKernel::Mixed
pub(super) fn mixed_wide_from(
    counts: &[u32],
    d: usize,
    levels: &[(usize, usize)],
    thread_parts: usize,
    thread_levels: Option<usize>,
) -> usize {
    if let Some(v) = thread_levels {
        return v;
    }
    let base = (d / 4).max(2);
    for &(l, npart) in levels {
        if l < base && npart > thread_parts && level_work(counts, d, l).0 >= WIDE_WORK {
            return l;
        }
    }
    base
}

/// Whether `iterate_wide` may take its slots and offsets from one packed atomic
/// (slot count in bits 25.., offset in bits 0..24) with `wgw` lanes and partitions
/// of at most `max_len` points: no `wgw` partitions reach 2^25 points together,
/// and the count (up to `wgw`) fits the 7 high bits (so never with 128 lanes:
/// the count 128 wrapped to 0 and lost a batch's dominators).
pub(super) fn packed_slots(max_len: u32, wgw: u32) -> bool {
    wgw < 128 && (max_len as u64 * wgw as u64) < (1 << 25)
}

/// Points in a level's partitions.
pub(super) fn ncur_level(parts: &[u32]) -> usize {
    parts.chunks_exact(3).map(|t| (t[2] - t[1]) as usize).sum()
}

/// `sort_level`'s lanes for a level: a quarter of the average partition size,
/// from [`SORT_LANES_MIN`] to [`SORT_LANES_MAX`].
pub(super) fn sort_lanes(points: usize, npart: usize) -> u32 {
    let avg = points / npart.max(1);
    ((avg / 4).next_power_of_two() as u32).clamp(SORT_LANES_MIN, SORT_LANES_MAX)
}

/// Most points of a partition `sort_level` sorts in workgroup memory (8 bytes a
/// point): [`SORT_CAP`], or the largest power of two the adapter's workgroup storage
/// holds beside the iteration kernels' few arrays. Larger partitions are not cut.
pub(super) fn sort_cap(ctx: &GpuContext) -> u32 {
    let lim = ctx.limits().max_compute_workgroup_storage_size.saturating_sub(4096);
    let mut cap = SORT_CAP;
    while cap > 256 && cap * 8 > lim {
        cap /= 2;
    }
    cap
}

/// The right shift of every rank in a key (the sum of up to d ranks, see
/// `sort_level`) so that the sum fits a `u32`; 0 unless ranks reach 2^28.
pub(super) fn key_shift(gmax: u32, d: usize) -> u32 {
    (0..32)
        .find(|&s| ((gmax as u64) >> s) * d as u64 <= u32::MAX as u64)
        .unwrap_or(32)
}

/// Masks `0..2^d` in SkyAlign's partition order: by number of bits set, then value.
pub(super) fn mask_order(d: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..1u32 << d).collect();
    v.sort_unstable_by_key(|&m| (m.count_ones(), m));
    v
}

/// Each mask's first slot in the (|M|, M) `order` given the per-mask `counts`
/// (a counting sort's offsets), and the total.
pub(super) fn mask_starts(counts: &[u32], order: &[u32]) -> (Vec<u32>, u32) {
    let mut starts = vec![0u32; counts.len()];
    let mut acc = 0u32;
    for &mk in order {
        starts[mk as usize] = acc;
        acc += counts[mk as usize];
    }
    (starts, acc)
}

/// Mask `m`'s partition as (mask, start, end) in working-set positions, given
/// each mask's first slot and count.
pub(super) fn part_bounds(m: u32, starts: &[u32], counts: &[u32]) -> [u32; 3] {
    let (s, c) = (starts[m as usize], counts[m as usize]);
    [m, s, s + c]
}

/// (dominance tests, mask tests) from the striped counters: per stripe the
/// dominance tests' low and high words, then the mask tests'.
pub(super) fn sum_counters(v: &[u32]) -> (u64, u64) {
    v.chunks_exact(4).fold((0, 0), |(a, b), c| {
        (
            a + (c[0] as u64 | (c[1] as u64) << 32),
            b + (c[2] as u64 | (c[3] as u64) << 32),
        )
    })
}

#[cfg(test)]
mod tests {
    /// The zeta-transform estimate against a direct sum over subsets, and the
    /// Mixed kernel's first wide level.
    #[test]
    fn level_work_and_wide_from() {
        use super::{level_work, mixed_wide_from, WIDE_WORK, THREAD_PARTS};
        let d = 7;
        let mut seed = 12345u64;
        let counts: Vec<u32> = (0..1usize << d)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 33) % 50) as u32 * ((seed >> 20) & 1) as u32
            })
            .collect();
        for l in 0..=d {
            let (mut n, mut s1, mut s2) = (0f64, 0f64, 0f64);
            for m in 0..1usize << d {
                if m.count_ones() as usize <= l || counts[m] == 0 {
                    continue;
                }
                let w: u32 = (0..1usize << d)
                    .filter(|&s| s & !m == 0 && s.count_ones() as usize == l)
                    .map(|s| counts[s])
                    .sum();
                let c = counts[m] as f64;
                n += c;
                s1 += c * w as f64;
                s2 += c * (w as f64) * (w as f64);
            }
            let (mean, cv) = level_work(&counts, d, l);
            if n == 0.0 {
                assert_eq!((mean, cv), (0.0, 0.0), "level {l}");
                continue;
            }
            let want = s1 / n;
            assert!((mean - want).abs() < 1e-9 * want.max(1.0), "level {l}: {mean} against {want}");
            let want_cv = ((s2 / n - want * want).max(0.0)).sqrt() / want;
            assert!(want == 0.0 || (cv - want_cv).abs() < 1e-9, "level {l}: cv {cv} against {want_cv}");
        }
        // Uniform counts c at d = 12: level 2 (66 partitions) goes wide early
        // where c makes its work large; otherwise wide starts at max(2, d / 4) = 3.
        let d = 12;
        let levels: Vec<(usize, usize)> = (0..=d).map(|l| (l, super::binomial(d, l))).collect();
        let many = vec![200u32; 1 << d];
        assert!(level_work(&many, d, 2).0 >= WIDE_WORK);
        assert_eq!(mixed_wide_from(&many, d, &levels, THREAD_PARTS, None), 2);
        let few = vec![1u32; 1 << d];
        assert!(level_work(&few, d, 2).0 < WIDE_WORK);
        assert_eq!(mixed_wide_from(&few, d, &levels, THREAD_PARTS, None), 3);
        // d = 8: max(2, 2) = 2 and levels 0, 1 have at most 16 partitions.
        let levels8: Vec<(usize, usize)> = (0..=8).map(|l| (l, super::binomial(8, l))).collect();
        assert_eq!(mixed_wide_from(&vec![1000u32; 256], 8, &levels8, THREAD_PARTS, None), 2);
    }

    #[test]
    fn packed_slots_fit() {
        use super::packed_slots;
        assert!(packed_slots(1000, 64));
        assert!(packed_slots(1000, 32));
        // The slot count needs 8 bits with 128 or more lanes.
        assert!(!packed_slots(10, 128));
        assert!(!packed_slots(10, 256));
        // 64 partitions of 2^19 points reach 2^25.
        assert!(!packed_slots(1 << 19, 64));
        assert!(packed_slots((1 << 19) - 1, 64));
    }
}
