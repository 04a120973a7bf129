//! The answer's bitmap (`alive_bits`) to row ids.
use rayon::prelude::*;

/// The set bits of a bitmap (bit b of word w: row 32 w + b) in ascending order:
/// counted per chunk of words, then written in parallel into one exact-size vector
/// (per-chunk vectors and their concatenation cost 2.2 ms at 600k rows on the H100
/// machine's host, mostly first touches of fresh memory).
#[cfg(test)]
fn bits_to_rows(bits: &[u32]) -> Vec<u32> {
    bits_to_rows_into(bits, Vec::new())
}

/// [`bits_to_rows`] into `out` (grown if shorter than the rows; truncated to them).
/// A caller that touches `out`'s pages while the device still works saves the
/// page faults of a fresh vector here.
pub(super) fn bits_to_rows_into(bits: &[u32], mut out: Vec<u32>) -> Vec<u32> {
    const WORDS: usize = 1 << 11;
    let counts: Vec<usize> = bits
        .par_chunks(WORDS)
        .map(|ws| ws.iter().map(|w| w.count_ones() as usize).sum())
        .collect();
    let total: usize = counts.iter().sum();
    if out.len() < total {
        out.resize(total, 0);
    }
    out.truncate(total);
    let mut slices = Vec::with_capacity(counts.len());
    let mut rest = out.as_mut_slice();
    for &c in &counts {
        let (head, tail) = rest.split_at_mut(c);
        slices.push(head);
        rest = tail;
    }
    bits.par_chunks(WORDS)
        .zip(slices)
        .enumerate()
        .for_each(|(c, (ws, dst))| {
            let mut k = 0;
            for (i, &w) in ws.iter().enumerate() {
                let mut w = w;
                let base = ((c * WORDS + i) * 32) as u32;
                while w != 0 {
                    dst[k] = base + w.trailing_zeros();
                    k += 1;
                    w &= w - 1;
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::bits_to_rows;

    #[test]
    fn bitmap_rows() {
        assert!(bits_to_rows(&[]).is_empty());
        assert_eq!(bits_to_rows(&[0, 0]), Vec::<u32>::new());
        assert_eq!(bits_to_rows(&[0b1011, 1 << 31]), vec![0, 1, 3, 63]);
        // Across the per-chunk boundaries: every third row of 5000 words.
        let n = 5000 * 32;
        let mut bits = vec![0u32; 5000];
        for r in (0..n).step_by(3) {
            bits[r / 32] |= 1 << (r % 32);
        }
        let want: Vec<u32> = (0..n as u32).step_by(3).collect();
        assert_eq!(bits_to_rows(&bits), want);
        assert_eq!(
            bits_to_rows(&vec![u32::MAX; 4097]),
            (0..4097 * 32).collect::<Vec<u32>>()
        );
    }
}
