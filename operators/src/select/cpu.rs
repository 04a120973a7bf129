//! The references (sorting a copy, for tests) and the CPU paths: parallel exact
//! selection by one SampleSelect level and multi-select, approximate selection
//! (answered exactly), and top-k by the threshold and a parallel row filter.
use super::contract::{SelectKey, SelectStats};
use rayon::prelude::*;

fn check_ranks(n: usize, ranks: &[u64]) {
    if let Some(r) = ranks.iter().find(|&&r| r >= n as u64) {
        panic!("rank {r} out of range for {n} keys");
    }
}

/// Exact selection by sorting a copy (tests only).
pub fn select_reference<K: SelectKey>(keys: &[K], ranks: &[u64]) -> Vec<K> {
    check_ranks(keys.len(), ranks);
    let mut v = keys.to_vec();
    v.sort_unstable();
    ranks.iter().map(|&r| v[r as usize]).collect()
}

/// Multi-select in place: puts the keys at every rank of `ranks` (sorted, unique,
/// relative to `v`) in their sorted position; recursion splits in parallel.
fn multiselect<K: SelectKey>(v: &mut [K], ranks: &[usize]) {
    if ranks.is_empty() {
        return;
    }
    let mid = ranks.len() / 2;
    let r = ranks[mid];
    v.select_nth_unstable(r);
    let (left, right) = v.split_at_mut(r);
    let lr = &ranks[..mid];
    let rr: Vec<usize> = ranks[mid + 1..].iter().map(|&x| x - r - 1).collect();
    let right = &mut right[1..];
    if left.len() + right.len() > 1 << 15 {
        rayon::join(|| multiselect(left, lr), || multiselect(right, &rr));
    } else {
        multiselect(left, lr);
        multiselect(right, &rr);
    }
}

/// CPU SampleSelect bucketing of `keys` by `spl` (sorted): `2j + (x == spl[j])`.
fn cpu_bucket<K: SelectKey>(spl: &[K], x: K) -> usize {
    let j = spl.partition_point(|s| *s < x);
    2 * j + usize::from(j < spl.len() && spl[j] == x)
}

/// Fast parallel CPU selection of all ranks at once: one parallel SampleSelect level
/// (256 splitters from a sample of 4096, equality buckets, parallel histograms and a
/// parallel filter of the target buckets), then parallel multi-select on the small
/// buckets; small inputs go straight to multi-select on a copy.
pub fn select_cpu<K: SelectKey>(keys: &[K], ranks: &[u64]) -> Vec<K> {
    check_ranks(keys.len(), ranks);
    let n = keys.len();
    if ranks.is_empty() {
        return Vec::new();
    }
    let mut uniq: Vec<usize> = ranks.iter().map(|&r| r as usize).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let answers: Vec<K> = if n < 1 << 18 || uniq.len() > 64 {
        let mut v = keys.to_vec();
        multiselect(&mut v, &uniq);
        uniq.iter().map(|&r| v[r]).collect()
    } else {
        // Sample and splitters.
        let ns = 255usize;
        let mut sample: Vec<K> = (0..4096u64)
            .map(|i| keys[(splitmix(i ^ 0x9e37_79b9) % n as u64) as usize])
            .collect();
        sample.sort_unstable();
        let spl: Vec<K> = (0..ns).map(|j| sample[(j + 1) * sample.len() / (ns + 1)]).collect();
        let nb = 2 * ns + 1;
        let chunk = (n / (rayon::current_num_threads() * 4)).max(1 << 16);
        let counts = keys
            .par_chunks(chunk)
            .map(|c| {
                let mut h = vec![0usize; nb];
                for &x in c {
                    h[cpu_bucket(&spl, x)] += 1;
                }
                h
            })
            .reduce(|| vec![0usize; nb], |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            });
        let mut start = vec![0usize; nb + 1];
        for b in 0..nb {
            start[b + 1] = start[b] + counts[b];
        }
        let bucket_of_rank = |r: usize| start.partition_point(|&s| s <= r) - 1;
        let mut targets: Vec<usize> = uniq.iter().map(|&r| bucket_of_rank(r)).filter(|b| b % 2 == 0).collect();
        targets.dedup();
        let is_target = {
            let mut t = vec![false; nb];
            for &b in &targets {
                t[b] = true;
            }
            t
        };
        // Extract the target buckets (parallel), then multi-select inside each.
        let parts: Vec<Vec<(usize, K)>> = keys
            .par_chunks(chunk)
            .map(|c| {
                c.iter()
                    .filter_map(|&x| {
                        let b = cpu_bucket(&spl, x);
                        is_target[b].then_some((b, x))
                    })
                    .collect()
            })
            .collect();
        let mut buckets: Vec<Vec<K>> = targets.iter().map(|&b| Vec::with_capacity(counts[b])).collect();
        for p in parts {
            for (b, x) in p {
                let i = targets.binary_search(&b).expect("target bucket");
                buckets[i].push(x);
            }
        }
        let per: Vec<Vec<usize>> = targets
            .iter()
            .map(|&b| uniq.iter().filter(|&&r| bucket_of_rank(r) == b).map(|&r| r - start[b]).collect())
            .collect();
        buckets.par_iter_mut().zip(per.par_iter()).for_each(|(v, rs)| multiselect(v, rs));
        uniq.iter()
            .map(|&r| {
                let b = bucket_of_rank(r);
                if b % 2 == 1 {
                    spl[b / 2]
                } else {
                    let i = targets.binary_search(&b).expect("target bucket");
                    buckets[i][r - start[b]]
                }
            })
            .collect()
    };
    ranks.iter().map(|&r| answers[uniq.binary_search(&(r as usize)).expect("rank")]).collect()
}

/// Approximate selection on the CPU: answers exactly (error bound 0), which meets
/// any approximate contract; the CPU has no cheaper one-level variant that pays.
pub fn approx_select_cpu<K: SelectKey>(keys: &[K], ranks: &[u64]) -> (Vec<K>, SelectStats) {
    let v = select_cpu(keys, ranks);
    (v, SelectStats { algorithm: "cpu-exact", ..Default::default() })
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Top-k by a stable sort of row indices (tests only).
pub fn topk_reference<K: SelectKey>(keys: &[K], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..keys.len() as u32).collect();
    idx.sort_by_key(|&i| (keys[i as usize], i));
    idx.truncate(k);
    idx.sort_unstable();
    idx
}

/// Top-k on the CPU: the threshold by [`select_cpu`], then a parallel two-pass row
/// filter (count the keys equal to the threshold per chunk, then collect the rows
/// below it and the first `need` rows equal to it).
pub fn topk_cpu<K: SelectKey>(keys: &[K], k: usize) -> Vec<u32> {
    let n = keys.len();
    assert!(n <= u32::MAX as usize, "top-k of more than 2^32 rows");
    if k == 0 || n == 0 {
        return Vec::new();
    }
    if k >= n {
        return (0..n as u32).collect();
    }
    let t = select_cpu(keys, &[k as u64 - 1])[0];
    let chunk = (n / (rayon::current_num_threads() * 4)).max(1 << 14);
    let counts: Vec<(usize, usize)> = keys
        .par_chunks(chunk)
        .map(|c| c.iter().fold((0, 0), |(l, e), &x| (l + usize::from(x < t), e + usize::from(x == t))))
        .collect();
    let lt: usize = counts.iter().map(|c| c.0).sum();
    let need = k - lt;
    let mut eq_before = Vec::with_capacity(counts.len());
    let mut acc = 0usize;
    for c in &counts {
        eq_before.push(acc);
        acc += c.1;
    }
    let parts: Vec<Vec<u32>> = keys
        .par_chunks(chunk)
        .zip(eq_before.par_iter())
        .enumerate()
        .map(|(ci, (c, &e0))| {
            let mut e = e0;
            let mut out = Vec::new();
            for (i, &x) in c.iter().enumerate() {
                if x < t {
                    out.push((ci * chunk + i) as u32);
                } else if x == t {
                    if e < need {
                        out.push((ci * chunk + i) as u32);
                    }
                    e += 1;
                }
            }
            out
        })
        .collect();
    let mut out = Vec::with_capacity(k);
    for p in parts {
        out.extend_from_slice(&p);
    }
    out
}
