//! The CPU fast path of the hash join: the GPU's bucketed layout built by a
//! counting sort, probed in parallel.
use super::Keys;
use rayon::prelude::*;

/// Probe rows per rayon task.
const CHUNK: usize = 1 << 16;

/// A build table in host memory: the valid build keys grouped by bucket, each
/// bucket in build order.
#[derive(Clone, Debug)]
pub struct HostJoinTable {
    offsets: Vec<u32>,
    keys: Vec<i64>,
    rows: Vec<u32>,
    mask: u64,
}

fn hash64(k: i64) -> u64 {
    // splitmix64's finalizer
    let mut z = k as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn valid(validity: Option<&[u32]>, i: usize) -> bool {
    validity.is_none_or(|v| (v[i / 32] >> (i % 32)) & 1 != 0)
}

impl HostJoinTable {
    /// The table of `keys` (validity: Arrow-style bits, `None` when none is NULL).
    pub fn build(keys: Keys<'_>, validity: Option<&[u32]>) -> HostJoinTable {
        let n = keys.len();
        let buckets = (n.max(1)).next_power_of_two();
        let mask = buckets as u64 - 1;
        let mut offsets = vec![0u32; buckets + 1];
        for i in 0..n {
            if valid(validity, i) {
                offsets[(hash64(keys.get(i)) & mask) as usize + 1] += 1;
            }
        }
        for b in 0..buckets {
            offsets[b + 1] += offsets[b];
        }
        let total = offsets[buckets] as usize;
        let mut cursor = offsets[..buckets].to_vec();
        let mut tkeys = vec![0i64; total];
        let mut rows = vec![0u32; total];
        for i in 0..n {
            if valid(validity, i) {
                let k = keys.get(i);
                let b = (hash64(k) & mask) as usize;
                let at = cursor[b] as usize;
                cursor[b] += 1;
                tkeys[at] = k;
                rows[at] = i as u32;
            }
        }
        HostJoinTable { offsets, keys: tkeys, rows, mask }
    }

    /// Valid build keys in the table.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the table holds no valid key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Host bytes held.
    pub fn bytes(&self) -> usize {
        self.offsets.len() * 4 + self.keys.len() * 8 + self.rows.len() * 4
    }

    fn bucket(&self, k: i64) -> std::ops::Range<usize> {
        let b = (hash64(k) & self.mask) as usize;
        self.offsets[b] as usize..self.offsets[b + 1] as usize
    }

    /// The (probe row, build row) pairs of equal keys, probe-major with build rows
    /// ascending: `(probe rows, build rows)`.
    pub fn probe(&self, keys: Keys<'_>, validity: Option<&[u32]>) -> (Vec<u32>, Vec<u32>) {
        let n = keys.len();
        let parts: Vec<(Vec<u32>, Vec<u32>)> = (0..n.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let (mut p, mut b) = (Vec::new(), Vec::new());
                for i in c * CHUNK..((c + 1) * CHUNK).min(n) {
                    if !valid(validity, i) {
                        continue;
                    }
                    let k = keys.get(i);
                    for j in self.bucket(k) {
                        if self.keys[j] == k {
                            p.push(i as u32);
                            b.push(self.rows[j]);
                        }
                    }
                }
                (p, b)
            })
            .collect();
        let total = parts.iter().map(|(p, _)| p.len()).sum();
        let (mut probe, mut build) = (Vec::with_capacity(total), Vec::with_capacity(total));
        for (p, b) in parts {
            probe.extend_from_slice(&p);
            build.extend_from_slice(&b);
        }
        (probe, build)
    }

    /// Bitmap words (bit `i % 32` of word `i / 32`) of the probe rows with a match.
    pub fn matched(&self, keys: Keys<'_>, validity: Option<&[u32]>) -> Vec<u32> {
        let n = keys.len();
        let mut out = vec![0u32; n.div_ceil(32)];
        out.par_chunks_mut(CHUNK / 32).enumerate().for_each(|(c, words)| {
            for (w, word) in words.iter_mut().enumerate() {
                let r0 = (c * (CHUNK / 32) + w) * 32;
                for j in 0..(n - r0).min(32) {
                    let i = r0 + j;
                    if valid(validity, i) {
                        let k = keys.get(i);
                        if self.bucket(k).any(|t| self.keys[t] == k) {
                            *word |= 1 << j;
                        }
                    }
                }
            }
        });
        out
    }
}
