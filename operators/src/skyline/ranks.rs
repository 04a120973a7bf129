//! Dense ranks of order-preserving keys (the SQL layer's way from values to a
//! [`RankMatrix`](super::RankMatrix)).
use rayon::prelude::*;

/// Dense ranks of order-preserving 64-bit keys: 0 for the smallest key, equal keys
/// equal ranks, each larger distinct key the next rank. One counting-sort pass
/// on the 16 highest bits that vary between keys (bits every key shares are
/// skipped: doubles in [0, 1) share their sign and top exponent bits), then each
/// bucket sorted on its own, the buckets in parallel. The caller maps its values
/// to keys (e.g. floats by their total order, a MAX direction by `!key`).
pub fn dense_ranks_u64(keys: &[u64]) -> Vec<u32> {
    const BITS: u32 = 16;
    let n = keys.len();
    let mut ranks = vec![0u32; n];
    if n == 0 {
        return ranks;
    }
    let (or, and) = keys
        .iter()
        .fold((0u64, u64::MAX), |(o, a), &k| (o | k, a & k));
    let diff = or ^ and;
    if diff == 0 {
        return ranks; // all equal
    }
    let top = 64 - diff.leading_zeros(); // bits 0..top vary
    let shift = top.saturating_sub(BITS);
    let nb = 1usize << (top - shift);
    let bucket = |k: u64| ((k >> shift) as usize) & (nb - 1);
    let mut start = vec![0u32; nb + 1];
    for &k in keys {
        start[bucket(k) + 1] += 1;
    }
    for b in 0..nb {
        start[b + 1] += start[b];
    }
    let mut cur = start.clone();
    let mut pairs = vec![(0u64, 0u32); n];
    for (i, &k) in keys.iter().enumerate() {
        let c = &mut cur[bucket(k)];
        pairs[*c as usize] = (k, i as u32);
        *c += 1;
    }
    {
        let mut slices: Vec<&mut [(u64, u32)]> = Vec::with_capacity(nb);
        let mut rest = &mut pairs[..];
        for b in 0..nb {
            let (x, y) = std::mem::take(&mut rest).split_at_mut((start[b + 1] - start[b]) as usize);
            if x.len() > 1 {
                slices.push(x);
            }
            rest = y;
        }
        slices
            .par_iter_mut()
            .with_min_len(64)
            .for_each(|s| s.sort_unstable());
    }
    let mut r = 0u32;
    ranks[pairs[0].1 as usize] = 0;
    for j in 1..n {
        if pairs[j].0 != pairs[j - 1].0 {
            r += 1;
        }
        ranks[pairs[j].1 as usize] = r;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::dense_ranks_u64;


    #[test]
    fn dense_ranks_of_keys() {
        assert!(dense_ranks_u64(&[]).is_empty());
        assert_eq!(dense_ranks_u64(&[7]), vec![0]);
        assert_eq!(dense_ranks_u64(&[5, 5, 5]), vec![0, 0, 0]);
        assert_eq!(
            dense_ranks_u64(&[u64::MAX, 0, 1 << 63, 0, 3]),
            vec![3, 0, 2, 0, 1]
        );
        // Random keys in a few widths, ties included, against a comparison sort.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, mask) in [
            (1000usize, 0xffu64),
            (5000, u64::MAX),
            (3000, 0xffff_0000_0000),
            (4097, 0x7ff),
        ] {
            let keys: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x & mask
                })
                .collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let want: Vec<u32> = keys
                .iter()
                .map(|k| sorted.binary_search(k).unwrap() as u32)
                .collect();
            assert_eq!(dense_ranks_u64(&keys), want, "n {n} mask {mask:x}");
        }
    }
}
