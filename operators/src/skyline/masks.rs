//! What the CPU and GPU paths share: SkyAlign's pre-filter test, the per-dimension
//! quartiles and a row's median and quartile masks (the GPU path computes these on
//! the device; its checks compare them with these).
use super::RankMatrix;
use rayon::prelude::*;

/// The pre-filter threshold of SkyAlign (Algorithm 1, line 1): the smallest row
/// maximum. A row whose every rank is >= tau is weakly dominated by the row that
/// attains tau, and strictly unless both are all tau; so a row survives iff some
/// rank is below tau or every rank equals tau.
pub(super) fn prefilter_keeps(row: &[u32], tau: u32) -> bool {
    let (mut mn, mut mx) = (u32::MAX, 0u32);
    for &v in row {
        mn = mn.min(v);
        mx = mx.max(v);
    }
    mn < tau || mx == tau
}

/// The median mask M and quartile mask Q of a row (bit j of M: rank > median of
/// dimension j; bit j of Q: rank > q3 if M's bit is set, else rank > q1), as in
/// SkyAlign's Algorithm 1, lines 8-9. `quart[j * 3 + k]` is quartile k + 1.
pub(super) fn row_masks(row: &[u32], quart: &[u32]) -> (u32, u32) {
    let (mut m, mut q) = (0u32, 0u32);
    for (j, &v) in row.iter().enumerate() {
        let above = v > quart[j * 3 + 1];
        let pivot = if above {
            quart[j * 3 + 2]
        } else {
            quart[j * 3]
        };
        m |= (above as u32) << j;
        q |= ((v > pivot) as u32) << j;
    }
    (m, q)
}

/// Quartiles `[q1, q2, q3]` of every dimension over the given rows (positions
/// n/4, n/2, 3n/4 of the sorted column), `quart[j * 3 + k]`.
pub(super) fn cpu_quartiles(m: RankMatrix<'_>, rows: &[u32]) -> Vec<u32> {
    let n = rows.len();
    let per_dim: Vec<[u32; 3]> = (0..m.dims)
        .into_par_iter()
        .map(|j| {
            if n == 0 {
                return [0; 3];
            }
            let mut col: Vec<u32> = rows
                .iter()
                .map(|&r| m.ranks[r as usize * m.dims + j])
                .collect();
            let mut out = [0u32; 3];
            // Largest position first so the smaller ones select within the prefix.
            for k in (0..3).rev() {
                let pos = ((k + 1) * n / 4).min(n - 1);
                let end = if k == 2 {
                    n
                } else {
                    (((k + 2) * n / 4).min(n - 1)) + 1
                };
                let (_, v, _) = col[..end].select_nth_unstable(pos);
                out[k] = *v;
            }
            out
        })
        .collect();
    per_dim.into_iter().flatten().collect()
}
