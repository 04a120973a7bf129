//! SKYLINE (Pareto-optimal rows) over rank-encoded dimensions.
//!
//! CONTRACT (shared by the SQL layer in `src/` and the kernels here; keep these
//! signatures): the caller replaces every dimension's values by their dense rank in
//! the preferred direction (0 = best; MAX dimensions are ranked descending; NULL gets
//! the worst rank), handles DIFF groups (calls once per group) and DISTINCT (drops
//! rows equal on every rank after the skyline). Here, row `p` dominates row `q` iff
//! `p[j] <= q[j]` for every `j` and `p[j] < q[j]` for at least one `j`; rows equal on
//! every dimension never dominate each other, so all of them stay.
//!
//! Every function returns the skyline's row ids in ascending order.
//!
//! # Algorithms
//!
//! * [`skyline_reference`]: brute force, O(n^2) dominance tests (tests only).
//! * [`skyline_cpu`]: multithreaded (rayon), after SkyAlign's tau pre-filter and
//!   per-dimension quartiles:
//!   - for d <= 16, the **sorted grid** (`cpu_sorted_grid`): every row is tested on
//!     its own, in parallel, against the rows of its median-mask subset groups
//!     (Eq. 1), reading only the prefix of each group's list sorted by the row's
//!     best dimension up to the row's rank there (a dominator is no worse in that
//!     dimension: about a tenth of the group on anticorrelated data), with the
//!     mask tests (Eq. 1 on the remaining bits, Eq. 4/5) on packed masks, 8 at a
//!     time with AVX2, before dominance tests;
//!   - otherwise a Hybrid-style (Chester et al., ICDE 2015) **blocked** algorithm:
//!     rows sorted by Manhattan norm (sum of ranks) so that only earlier rows can
//!     dominate, then blocks of rows tested in parallel first against the confirmed
//!     skyline (grouped by median mask, one mask test skips a whole group, quartile
//!     mask tests before dominance tests), then against the block's earlier
//!     survivors; survivors join the skyline.
//!   [`skyline_cpu_with`] picks either ([`CpuSkylineAlgorithm`]).
//! * [`skyline_gpu`]: SkyAlign (Bøgh, Chester & Assent, VLDB 2015) in WGSL
//!   (shaders/skyline.wgsl), per chunk of at most one storage binding:
//!   1. `minmax`: tau = min over rows of the row maximum (atomic min). As Section
//!      5.1's text says, a row survives iff it has a rank below tau or all its ranks
//!      equal tau (Algorithm 1's line 2 keeps rows with a rank <= tau; the text also
//!      drops rows whose minimum is tau but not all ranks are: the tau row dominates
//!      those strictly too). The filter is applied inside every later kernel.
//!   2. `qhist` (1-4 passes): per-dimension quartiles q1, q2, q3 of the surviving
//!      rows by an MSD radix select (8-bit digits, histograms by atomics on the GPU,
//!      the host picks each digit from 3 * d * 256 counts).
//!   3. `mask_hist` + `scatter`: median mask M (rank > q2) and quartile mask Q (rank
//!      > q3 where M is set, else > q1) per surviving row, stored as M | Q << 16;
//!      a counting sort by (|M|, M): the GPU builds the histogram over M, the host
//!      turns its 2^d counts into each mask's first slot, the GPU scatters the row
//!      ids with atomic cursors, and each row's masks beside its id (`wq`), so the
//!      iteration reads its comparands' masks in order. The sorted ids are the
//!      working set; the rank matrix is not copied (the rows compared against are
//!      read through their ids, shared by the lanes testing one point).
//!   4. `iterate` for l = 0..=d: every point of the working set (|M| >= l, not yet
//!      dominated) compares against the level-l points: a point with |M| = l only
//!      against its own partition (Eq. 3), with the quartile test of Eq. 5 before each
//!      dominance test; a point with |M| > l walks the level-l partitions, skips every
//!      partition whose mask is not a subset of its own (Eq. 1, one mask test per
//!      partition) and inside the others runs Eq. 4 before a distinct-value dominance
//!      test. Dominated points are flagged dead; the level-l survivors are final
//!      (no point of a higher order can dominate them, Eq. 2). The working set is
//!      then repacked: the per-mask counts of the kept points (atomics in the
//!      same kernel, read back) give each mask's first slot in (|M|, M) order, and
//!      `repack` scatters the kept ids and masks there with atomic cursors, as the
//!      first sort did (no count pass, no second readback; the order inside a
//!      partition is free).
//!
//!      Two kernels do a level ([`SkylineKernel`]). `iterate` gives each point one
//!      invocation, as the paper does. A point's work grows with the number of
//!      level-l partitions below its mask, C(|M|, l), so the warps holding high-|M|
//!      points ran long after the rest: on the H100 at 1M anticorrelated d = 12
//!      rows, level 5 took 25.8 ms for 1.4G mask tests. `iterate_wide` gives each
//!      point a workgroup of 64 lanes: they find the candidate partitions 64 at a
//!      time (by Eq. 1 over every partition, or by looking up the level-l subsets
//!      of M in a mask -> partition table where that takes fewer rounds), then
//!      stride through the matching partitions' points as one range in steps
//!      (mask tests first, queueing the points that pass, then the queued
//!      dominance tests together), stopping after the step that finds a
//!      dominator. The low levels (below max(2, d / 4), unless the host's estimate
//!      of a level's work says otherwise, see `mixed_wide_from`) and levels of at
//!      most 16 partitions, where every point's work is small, keep `iterate`
//!      ([`SkylineKernel::Mixed`], the default on GPUs). At 1M
//!      anticorrelated d = 12 rows the whole skyline went from 99.6 to 21.9 ms on
//!      the H100, d = 16 from 130 to 38 ms (BENCHMARKS.md, session 15).
//!   5. The skyline: the rows not flagged dead (the pre-filter flags its drops),
//!      read back as a bitmap (`alive_bits`) and listed in parallel.
//!
//!   Mask tests and dominance tests are counted on the GPU (per-invocation counts
//!   added to 64-bit counters kept as two `u32` with an atomic carry).
//!   `device_bytes` is the peak of one chunk: the rank matrix, 1 `u32` per row (dead
//!   flag; the masks by row too until the sort), 5 per surviving row (ids and masks
//!   of the working set, keep flags, the repacked ids and masks; 2 more on CPU
//!   adapters for resuming, see below) plus three 2^d arrays (histogram, cursors,
//!   a level's partition table); pool size classes included. That
//!   is about 1 + 6/d times the matrix on GPUs (1 + 8/d on CPU adapters; measured on
//!   the H100: 1.88x at d = 6, 1.55x at d = 12, 1.45x at d = 16, 1M anticorrelated
//!   rows): at most 2x from d = 6 on (d = 8 on CPU adapters); small d and tiny
//!   inputs (where the 2^d arrays and 256-byte minimum buffers dominate) go above.
//!
//!   Measured on lavapipe (Mesa's CPU Vulkan driver, 2 shared cores, release
//!   build, `examples/skyline_bench`; ratios only, absolute times mean nothing
//!   there): the GPU path took 4-12x the CPU path's time on 2 threads (200k
//!   independent d=8: 12x; 200k correlated d=8: 3.9x; 50k anticorrelated d=8:
//!   8.6x; 100k anticorrelated d=12: 8.9x; 1M independent d=12: 8.6x), as expected
//!   when the "GPU" is the same two cores running SIMT code; it did 1.0-1.3x the
//!   CPU path's dominance tests and 0.45-1.4x its mask tests (the CPU path skips
//!   whole mask groups, the GPU path tests the paper's per-partition masks). The
//!   CPU path ran 1.95-2.1x faster
//!   on 2 threads than on 1 (1.2x on 50k anticorrelated d=8, where the serial
//!   joins of large blocks weigh more). llvmpipe ends every loop of a SIMD group
//!   for good once the group has taken 65535 loop back-edges in total
//!   (LP_MAX_TGSI_LOOP_ITERATIONS): at 1M independent d=12 rows a few long-running
//!   invocations then saw one dimension per dominance test, killing skyline rows
//!   and keeping dominated ones. On CPU adapters the iteration kernel therefore
//!   bounds its loop steps per launch and resumes (`resumed_launches`);
//!   `RIDGELINE_SKYLINE_CHECK=1` re-verifies the working set after every repacking.
//!
//!   Larger inputs: chunks of at most `max_storage_buffer_binding_size / (4 d)` rows
//!   get local skylines; the skyline of their union (gathered on the host) is the
//!   skyline of the whole, so the algorithm runs again on the union. If the union
//!   still needs several chunks and did not shrink below 90%, the call returns
//!   `Err` (the caller falls back to the CPU). Dimensions above [`GPU_MAX_DIMS`] (16)
//!   run the CPU path; `algorithm` says so.

use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use rayon::prelude::*;
use std::time::Instant;

/// A row-major matrix of dense ranks: `ranks[r * dims + j]` is row `r`'s rank in
/// dimension `j` (smaller is better).
#[derive(Clone, Copy, Debug)]
pub struct RankMatrix<'a> {
    pub rows: usize,
    pub dims: usize,
    pub ranks: &'a [u32],
}

impl<'a> RankMatrix<'a> {
    pub fn new(rows: usize, dims: usize, ranks: &'a [u32]) -> Self {
        assert_eq!(
            ranks.len(),
            rows * dims,
            "rank matrix has rows * dims entries"
        );
        RankMatrix { rows, dims, ranks }
    }
    pub fn row(&self, r: usize) -> &'a [u32] {
        &self.ranks[r * self.dims..(r + 1) * self.dims]
    }
}

/// Work counters (the paper's measure of work) and the device memory used.
#[derive(Clone, Debug, Default)]
pub struct SkylineStats {
    /// Full dominance tests (one per pair of rows compared on every dimension).
    pub dominance_tests: u64,
    /// Mask tests (SkyAlign's median/quartile bitmask tests), 0 on paths without masks.
    pub mask_tests: u64,
    /// Peak device bytes allocated by the GPU path (0 on the CPU).
    pub device_bytes: u64,
    /// Which algorithm ran ("gpu-skyalign", "cpu-hybrid", "reference", ...).
    pub algorithm: &'static str,
    /// Wall-clock time of the whole call in milliseconds (host view; on the GPU it
    /// includes uploads, readbacks and pipeline creation on first use).
    pub wall_ms: f64,
    /// GPU: chunk launches of the SkyAlign pipeline (1 when the rank matrix fits one
    /// binding; more when it is split, plus one per merge round). CPU: blocks.
    pub chunks: u32,
    /// GPU: extra launches of the iteration kernel because invocations ran out of
    /// their loop-step bound (CPU adapters only, see shaders/skyline.wgsl).
    pub resumed_launches: u32,
}

/// `true` iff row `p` dominates row `q` (see the module docs).
pub fn dominates(p: &[u32], q: &[u32]) -> bool {
    let mut strictly = false;
    for (a, b) in p.iter().zip(q) {
        if a > b {
            return false;
        }
        strictly |= a < b;
    }
    strictly
}

/// Brute-force reference: O(n^2) dominance tests. For tests only.
pub fn skyline_reference(m: RankMatrix<'_>) -> Vec<u32> {
    (0..m.rows)
        .filter(|&q| !(0..m.rows).any(|p| p != q && dominates(m.row(p), m.row(q))))
        .map(|q| q as u32)
        .collect()
}

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

// ---------------------------------------------------------------------------------
// Shared: quartile masks
// ---------------------------------------------------------------------------------

/// The pre-filter threshold of SkyAlign (Algorithm 1, line 1): the smallest row
/// maximum. A row whose every rank is >= tau is weakly dominated by the row that
/// attains tau, and strictly unless both are all tau; so a row survives iff some
/// rank is below tau or every rank equals tau.
fn prefilter_keeps(row: &[u32], tau: u32) -> bool {
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
fn row_masks(row: &[u32], quart: &[u32]) -> (u32, u32) {
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

/// Points per branch-free mask scan.
const SCAN: usize = 32;

/// Bit k set iff `c[k] & bad == 0` (`c.len() <= 32`).
#[inline]
fn pass_bits(c: &[u32], bad: u32) -> u32 {
    let mut bits = 0u32;
    let mut k = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SSE2 is part of the x86_64 baseline: 4 masks per compare and movemask.
        // SAFETY: loads of 4 u32 within `c` (k + 4 <= c.len()).
        unsafe {
            let b = _mm_set1_epi32(bad as i32);
            let z = _mm_setzero_si128();
            while k + 4 <= c.len() {
                let v = _mm_loadu_si128(c.as_ptr().add(k) as *const __m128i);
                let e = _mm_cmpeq_epi32(_mm_and_si128(v, b), z);
                bits |= (_mm_movemask_ps(_mm_castsi128_ps(e)) as u32) << k;
                k += 4;
            }
        }
    }
    while k < c.len() {
        bits |= ((c[k] & bad == 0) as u32) << k;
        k += 1;
    }
    bits
}

/// Eq. 4 / 5 over a group's quartile masks: point `k` passes iff `qs[k] & bad == 0`.
/// Masks are tested `SCAN` at a time without branches (`mask_tests` counts every
/// mask tested); `dom(k)` runs for the passing points in order and ends the scan
/// with `true` when it finds a dominator.
#[inline]
fn scan_q(qs: &[u32], bad: u32, mask_tests: &mut u64, mut dom: impl FnMut(usize) -> bool) -> bool {
    let mut base = 0;
    for chunk in qs.chunks(SCAN) {
        *mask_tests += chunk.len() as u64;
        if any_dominates(pass_bits(chunk, bad), base, &mut dom) {
            return true;
        }
        base += chunk.len();
    }
    false
}

/// Runs the dominance test `dom` on the points whose bit is set in `bits` (point
/// `base + bit`), in order, until one dominates.
#[inline]
fn any_dominates(mut bits: u32, base: usize, dom: &mut impl FnMut(usize) -> bool) -> bool {
    while bits != 0 {
        let k = base + bits.trailing_zeros() as usize;
        bits &= bits - 1;
        if dom(k) {
            return true;
        }
    }
    false
}

/// Eq. 1 and Eq. 4 between point i (`mi`, `qi`) and every point k of `ms`/`qs`
/// (two mask tests a point, no branches, `SCAN` points at a time); `dom(k)` as in
/// [`scan_q`].
#[inline]
fn scan_mq(
    ms: &[u32],
    qs: &[u32],
    mi: u32,
    qi: u32,
    mask_tests: &mut u64,
    mut dom: impl FnMut(usize) -> bool,
) -> bool {
    let (nmi, nqi) = (!mi, !qi);
    let test = |mj: u32, qj: u32| (mj & nmi) | ((mj | nmi) & qj & nqi) == 0;
    let mut base = 0;
    for (cm, cq) in ms.chunks(SCAN).zip(qs.chunks(SCAN)) {
        let mut bits = 0u32;
        for k in 0..cm.len() {
            bits |= (test(cm[k], cq[k]) as u32) << k;
        }
        *mask_tests += 2 * cm.len() as u64;
        if any_dominates(bits, base, &mut dom) {
            return true;
        }
        base += cm.len();
    }
    false
}

/// Asks the CPU to bring `data[at..]` into cache (a hint; no effect elsewhere).
#[inline]
fn prefetch_row(data: &[u32], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < data.len() {
        // SAFETY: a prefetch of an in-bounds address; it reads nothing.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                data.as_ptr().add(at) as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
}

/// [`scan_mq_packed`]'s test of up to `SCAN` (32) entries with AVX2, 8 a step;
/// returns the pass bits of the first `8 * (len / 8)` entries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn packed_bits_avx2(ks: &[u32], ws: &[u32], pk: u32, nmi: u32, nqi: u32) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(ks.len() == ws.len() && ws.len() <= SCAN);
    let vn = _mm256_set1_epi32(nmi as i32);
    let vq = _mm256_set1_epi32(nqi as i32);
    let lo = _mm256_set1_epi32(0xffff);
    let sign = _mm256_set1_epi32(i32::MIN);
    // key <= pk, unsigned: (key ^ sign) > (pk ^ sign) signed means key > pk.
    let vp = _mm256_set1_epi32((pk ^ 0x8000_0000) as i32);
    let z = _mm256_setzero_si256();
    let mut bits = 0u32;
    let mut k = 0;
    while k + 8 <= ws.len() {
        // SAFETY: k + 8 <= ks.len() = ws.len().
        let (w, key) = unsafe {
            (
                _mm256_loadu_si256(ws.as_ptr().add(k) as *const __m256i),
                _mm256_loadu_si256(ks.as_ptr().add(k) as *const __m256i),
            )
        };
        let mj = _mm256_srli_epi32(w, 16);
        let qj = _mm256_and_si256(w, lo);
        let a = _mm256_and_si256(mj, vn);
        let b = _mm256_and_si256(_mm256_and_si256(qj, vq), _mm256_or_si256(mj, vn));
        let pass = _mm256_cmpeq_epi32(_mm256_or_si256(a, b), z);
        let above = _mm256_cmpgt_epi32(_mm256_xor_si256(key, sign), vp);
        let e = _mm256_andnot_si256(above, pass);
        bits |= (_mm256_movemask_ps(_mm256_castsi256_ps(e)) as u32) << k;
        k += 8;
    }
    bits
}

/// Eq. 1 and Eq. 4/5 between point i (`mi`, `qi`) and entries packing a point's
/// masks as `M << 16 | Q` (d <= 16), restricted to entries whose key is at most
/// `pk`: entry j passes iff `ks[j] <= pk`, `Mj & !mi == 0` and
/// `Qj & (Mj | !mi) & !qi == 0`. Branch-free, 32 entries at a time (AVX2 when the
/// CPU has it, else SSE2 on x86_64); one mask test counted an entry. The passing
/// entries of a step are announced to `pre(k)` (a prefetch of their rows, so
/// their cache misses overlap) before `dom(k)` runs on them as in [`scan_q`].
#[inline]
#[allow(clippy::too_many_arguments)]
fn scan_mq_packed(
    ks: &[u32],
    ws: &[u32],
    pk: u32,
    mi: u32,
    qi: u32,
    mask_tests: &mut u64,
    pre: impl Fn(usize),
    dom: impl FnMut(usize) -> bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { scan_mq_packed_avx2(ks, ws, pk, mi, qi, mask_tests, pre, dom) };
    }
    scan_mq_packed_body(
        ks,
        ws,
        pk,
        mi,
        qi,
        mask_tests,
        pre,
        dom,
        |_, _, _, _, _| 0,
        0,
    )
}

/// [`scan_mq_packed`] compiled with AVX2 (the whole loop, so the 8-wide test
/// inlines into it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn scan_mq_packed_avx2(
    ks: &[u32],
    ws: &[u32],
    pk: u32,
    mi: u32,
    qi: u32,
    mask_tests: &mut u64,
    pre: impl Fn(usize),
    dom: impl FnMut(usize) -> bool,
) -> bool {
    scan_mq_packed_body(
        ks,
        ws,
        pk,
        mi,
        qi,
        mask_tests,
        pre,
        dom,
        // SAFETY: this function only runs where AVX2 is present.
        |kc, c, pk, nmi, nqi| unsafe { packed_bits_avx2(kc, c, pk, nmi, nqi) },
        8,
    )
}

/// The loop of [`scan_mq_packed`]: `wide(keys, words, pk, !mi, !qi)` tests the
/// first `lanes * (len / lanes)` entries of a chunk (0 lanes: none), the rest are
/// tested one by one.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scan_mq_packed_body(
    ks: &[u32],
    ws: &[u32],
    pk: u32,
    mi: u32,
    qi: u32,
    mask_tests: &mut u64,
    pre: impl Fn(usize),
    mut dom: impl FnMut(usize) -> bool,
    wide: impl Fn(&[u32], &[u32], u32, u32, u32) -> u32,
    lanes: usize,
) -> bool {
    let (nmi, nqi) = (!mi & 0xffff, !qi & 0xffff);
    let test = |key: u32, w: u32| {
        let (mj, qj) = (w >> 16, w & 0xffff);
        key <= pk && (mj & nmi) | (qj & (mj | nmi) & nqi) == 0
    };
    let mut base = 0;
    for (kc, c) in ks.chunks(SCAN).zip(ws.chunks(SCAN)) {
        *mask_tests += c.len() as u64;
        let mut bits = 0u32;
        let mut k = 0;
        if lanes > 0 {
            bits = wide(kc, c, pk, nmi, nqi);
            k = c.len() - c.len() % lanes;
        }
        while k < c.len() {
            bits |= (test(kc[k], c[k]) as u32) << k;
            k += 1;
        }
        let mut b = bits;
        while b != 0 {
            pre(base + b.trailing_zeros() as usize);
            b &= b - 1;
        }
        if any_dominates(bits, base, &mut dom) {
            return true;
        }
        base += c.len();
    }
    false
}

// ---------------------------------------------------------------------------------
// CPU: Hybrid-style blocked skyline
// ---------------------------------------------------------------------------------

/// Points per block of the CPU algorithm.
const CPU_BLOCK: usize = 2048;

/// The CPU skyline (multithreaded; `threads` = 0 means rayon's pool size): the
/// sorted grid (`cpu_sorted_grid`) for d <= 16 while its lists fit
/// `SORTED_GRID_MAX_BYTES`, else the blocked algorithm described here.
///
/// The blocked algorithm, in the spirit of Hybrid (Chester et al., ICDE 2015),
/// with SkyAlign's static median/quartile masks in place of Hybrid's pivot masks:
///
/// 1. SkyAlign's pre-filter (tau = min over rows of the row maximum) drops rows
///    that the tau row dominates, in parallel.
/// 2. Per-dimension quartiles (selection on each rank column, in parallel), then
///    every row's median mask M and quartile mask Q and its Manhattan norm (sum of
///    ranks); rows are sorted by (norm, id) in parallel. A row can only be
///    dominated by a row with a strictly smaller norm, so a row confirmed against
///    everything before it in this order stays in the skyline.
/// 3. Blocks of [`CPU_BLOCK`] rows: (a) every row of the block is tested in
///    parallel against the confirmed skyline, which is kept grouped by median
///    mask: only groups whose mask is a subset of the row's can hold a dominator
///    (Eq. 1). For d <= 20 a dense mask -> group table is indexed directly: for
///    d <= 14, when it is the cheaper walk, group-major (every group, fewest mask
///    bits first, in parallel, walks the supersets of its mask in a per-block
///    mask -> rows table, so a group's points are read once per block instead of
///    once per row; one mask test per table entry looked up), otherwise row-major
///    (every row enumerates its mask's subsets when fewer than the groups, else
///    scans the groups, one mask test each). Inside a group the quartile test
///    (Eq. 4/5) runs branch-free on the group's contiguous masks (SSE2 on x86_64,
///    one mask test a point) before the dominance tests of the points that pass;
///    (b) the block's survivors are tested in parallel against the survivors
///    before them in the block (Eq. 1 and 4 branch-free, two mask tests a pair);
///    (c) the rest join the skyline groups.
///
///    (Measured on 2 shared cores at 200k anticorrelated d=12: step 3(a) is about
///    90% of the time; with the subset lookups alone it took about 1/8 of that, so
///    the cost is the scans of the groups' points and their dominance tests.
///    Group-major and the SSE2 scans gave 1.15-1.45x over the previous version:
///    200k anticorrelated d=12 1.99/2.71 -> 1.38/2.03 s, 1M independent d=12
///    13.4/15.6 -> 11.7/12.9 s, same skylines.)
///
/// `dominance_tests` and `mask_tests` count every test done.
pub fn skyline_cpu(m: RankMatrix<'_>, threads: usize) -> (Vec<u32>, SkylineStats) {
    skyline_cpu_with(m, threads, CpuSkylineAlgorithm::Auto)
}

/// Which CPU skyline algorithm [`skyline_cpu_with`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuSkylineAlgorithm {
    /// The sorted grid ([`cpu_sorted_grid`]) for d <= 16 when its lists fit
    /// [`SORTED_GRID_MAX_BYTES`], else the blocked algorithm.
    /// `RIDGELINE_SKYLINE_CPU=blocked` makes it the blocked algorithm always.
    #[default]
    Auto,
    /// The sorted grid where it applies (d <= 16, lists within the budget).
    SortedGrid,
    /// The blocked Hybrid-style algorithm (every width).
    Blocked,
}

/// [`skyline_cpu`] with a choice of algorithm ([`SkylineStats::algorithm`] says
/// which one ran).
pub fn skyline_cpu_with(
    m: RankMatrix<'_>,
    threads: usize,
    algo: CpuSkylineAlgorithm,
) -> (Vec<u32>, SkylineStats) {
    let t0 = Instant::now();
    let algo = match algo {
        CpuSkylineAlgorithm::Auto
            if std::env::var("RIDGELINE_SKYLINE_CPU").is_ok_and(|v| v == "blocked") =>
        {
            CpuSkylineAlgorithm::Blocked
        }
        a => a,
    };
    let (ids, mut st) = if threads == 0 {
        cpu_hybrid(m, algo)
    } else {
        match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(pool) => pool.install(|| cpu_hybrid(m, algo)),
            Err(_) => cpu_hybrid(m, algo),
        }
    };
    st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    (ids, st)
}

/// Quartiles `[q1, q2, q3]` of every dimension over the given rows (positions
/// n/4, n/2, 3n/4 of the sorted column), `quart[j * 3 + k]`.
fn cpu_quartiles(m: RankMatrix<'_>, rows: &[u32]) -> Vec<u32> {
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

struct SkyGroup {
    mask: u32,
    q: Vec<u32>,
    rows: Vec<u32>,
    ids: Vec<u32>,
}

/// Most dimensions for the group-major step 3(a) (a 2^d table per block).
const GM_MAX_DIMS: usize = 14;

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

/// Most bytes of sorted per-dimension lists [`cpu_sorted_grid`] may allocate
/// (12 bytes per kept row and dimension); larger inputs run the blocked path.
const SORTED_GRID_MAX_BYTES: usize = 1 << 30;

/// Median-mask bits that group rows in [`cpu_sorted_grid`] (at most).
const SG_GROUP_BITS: usize = 8;

/// Index bytes from which [`cpu_sorted_grid`] frees its index on another thread.
const SG_FREE_ASIDE_BYTES: usize = 64 << 20;

/// Buckets of rank range per sorted-list directory in [`cpu_sorted_grid`].
const SG_BUCKETS: usize = 256;

/// The CPU skyline without blocks: every kept row is tested, independently and in
/// parallel, against every other kept row that could dominate it, skyline or not
/// (a dominated dominator still proves the row dominated). The candidates come
/// from an index built once:
///
/// - rows grouped by median mask M; only groups whose mask is a subset of the
///   row's can hold a dominator (Eq. 1), enumerated through a dense mask -> group
///   table, fewest bits first;
/// - inside every group, d lists of its rows, one sorted by each dimension's rank
///   (rank, quartile mask Q and row, 12 bytes an entry). A dominator is no worse
///   in the row's best dimension k (its smallest rank), so only the prefix of the
///   group's k-list up to the row's rank can hold one: a binary search bounds it
///   (on anticorrelated d = 12 data about a tenth of the group);
/// - in that prefix the quartile test (Eq. 4/5) runs branch-free on contiguous
///   masks before the dominance tests.
///
/// No barriers between rows, so it scales with the threads; a dominated row
/// usually stops at one of the first, best candidates.
fn cpu_sorted_grid(
    m: RankMatrix<'_>,
    kept: &[u32],
    quart: &[u32],
    st: &mut SkylineStats,
    profile: bool,
) -> Vec<u32> {
    let d = m.dims;
    let tp = Instant::now();
    // Groups by the low `gbits` bits of M (`SG_GROUP_BITS`: all of them up to
    // d = 8; more bits make smaller groups and more subset groups per row, whose
    // per-group overhead cost more than the extra mask tests save); the other
    // bits are tested per entry.
    let gbits = std::env::var("RIDGELINE_SKYLINE_GROUP_BITS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(SG_GROUP_BITS)
        .clamp(1, d);
    let low = ((1u64 << gbits) - 1) as u32;
    // Rows in group order: (group key, M, Q, row), sorted.
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
    let n = keyed.len();
    let mut data = vec![0u32; n * d];
    data.par_chunks_mut(d)
        .zip(keyed.par_iter())
        .for_each(|(dst, t)| dst.copy_from_slice(m.row(t.3 as usize)));
    // Groups: [start, end) in `keyed`; group key -> group.
    let mut gstart: Vec<u32> = Vec::new();
    let mut gmask: Vec<u32> = Vec::new();
    for (i, t) in keyed.iter().enumerate() {
        if i == 0 || keyed[i - 1].0 != t.0 {
            gstart.push(i as u32);
            gmask.push(t.0);
        }
    }
    gstart.push(n as u32);
    let ng = gmask.len();
    let mut group_of = vec![u32::MAX; 1 << gbits];
    for (g, &mk) in gmask.iter().enumerate() {
        group_of[mk as usize] = g as u32;
    }
    // Per dimension k and group g, the group's entries sorted by rank k: list k
    // occupies [k * n, (k + 1) * n), group g [k * n + gstart[g], k * n + gstart[g + 1]).
    let maxes = data
        .par_chunks(d)
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
        );
    let mut key = vec![0u32; n * d];
    let mut qs = vec![0u32; n * d];
    let mut pos = vec![0u32; n * d];
    let t_keyed = tp.elapsed().as_secs_f64() * 1e3;
    {
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
    }
    let t_lists = tp.elapsed().as_secs_f64() * 1e3;
    // A directory per list segment: entry b counts the segment's keys below
    // bucket b of the dimension's rank range, so a row's prefix ends at one
    // looked-up entry (the end of its rank's bucket; keys above its rank there
    // fail the scan's key test). A group of `len` rows gets about len / 16
    // buckets (a power of two, at most `SG_BUCKETS`; none below 16 rows, whose
    // segment is scanned whole), so the directories stay a small fraction of the
    // lists.
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
    let t_dir = tp.elapsed().as_secs_f64() * 1e3;
    // Every row's best dimension; rows are visited by (M, best dimension, rank
    // there), so consecutive rows search the same lists near the same place and
    // find them in cache.
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
    let t_index = tp.elapsed().as_secs_f64() * 1e3;
    if profile {
        eprintln!(
            "cpu skyline profile (sorted grid): index steps end at: masks {t_k0:.1}, group sort {t_k1:.1}, gather {t_keyed:.1}, lists {t_lists:.1}, directories {t_dir:.1}, visit order {t_v0:.1}, sorted {t_index:.1} ms"
        );
    }
    let tq = Instant::now();
    // Per visited row: (row in `keyed`, dominated, dominance tests, mask tests).
    let res: Vec<(u32, bool, u64, u64)> = visit
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
                    |j| prefetch_row(&data, pos[s + j] as usize * d),
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
        .collect();
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
        eprintln!("cpu skyline profile (sorted grid): dominated rows {nd}: mask tests {md}, dominance tests {dd}; skyline rows: mask tests {ma}, dominance tests {da}");
    }
    let mut out: Vec<u32> = res
        .iter()
        .filter(|r| !r.1)
        .map(|r| keyed[r.0 as usize].3)
        .collect();
    out.par_sort_unstable();
    if profile {
        eprintln!(
            "cpu skyline profile (sorted grid): index {t_index:.1} ms ({n} rows, {ng} groups, {} threads), tests {:.1} ms",
            rayon::current_num_threads(),
            tq.elapsed().as_secs_f64() * 1e3
        );
    }
    // A large index (about 16 d + 44 bytes a row) is returned to the allocator on
    // another thread: unmapping it took 15-20 ms at 1M rows, d = 12, which the
    // caller need not wait for. Small ones are dropped here (a thread costs more).
    let big = (key, qs, pos, data, dir, keyed, visit, res);
    if n * (16 * d + 44) >= SG_FREE_ASIDE_BYTES {
        // A failed spawn drops `big` here.
        let _ = std::thread::Builder::new()
            .name("skyline-free".into())
            .spawn(move || drop(big));
    }
    out
}

fn cpu_hybrid(m: RankMatrix<'_>, algo: CpuSkylineAlgorithm) -> (Vec<u32>, SkylineStats) {
    let (n, d) = (m.rows, m.dims);
    let mut st = SkylineStats {
        algorithm: "cpu-hybrid",
        ..Default::default()
    };
    if n == 0 {
        return (Vec::new(), st);
    }
    if d == 0 {
        return ((0..n as u32).collect(), st);
    }
    let profile = std::env::var_os("RIDGELINE_SKYLINE_PROFILE").is_some();
    let tp = Instant::now();
    let (mut t_a, mut t_b, mut t_c) = (0f64, 0f64, 0f64);
    // 1. Pre-filter.
    let tau = (0..n)
        .into_par_iter()
        .map(|r| *m.row(r).iter().max().unwrap())
        .min()
        .unwrap();
    let kept: Vec<u32> = (0..n as u32)
        .into_par_iter()
        .filter(|&r| prefilter_keeps(m.row(r as usize), tau))
        .collect();
    if algo != CpuSkylineAlgorithm::Blocked
        && d <= 16
        && kept.len().saturating_mul(d).saturating_mul(12) <= SORTED_GRID_MAX_BYTES
    {
        let quart = cpu_quartiles(m, &kept);
        st.algorithm = "cpu-sorted-grid";
        if profile {
            eprintln!(
                "cpu skyline profile: pre-filter and quartiles {:.1} ms",
                tp.elapsed().as_secs_f64() * 1e3
            );
        }
        return (cpu_sorted_grid(m, &kept, &quart, &mut st, profile), st);
    }
    // 2. Quartile masks (d <= 32; more dimensions run without masks) and the sort.
    let use_masks = d <= 32;
    let mut keyed: Vec<(u64, u32, u32, u32)> = kept
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
        let quart = cpu_quartiles(m, &kept);
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

    let t_setup = tp.elapsed().as_secs_f64() * 1e3;
    // 3. Blocks.
    let mut groups: Vec<SkyGroup> = Vec::new();
    // Mask -> group (dense table for d <= 20; otherwise groups are scanned).
    let mut group_of: Vec<u32> = if use_masks && d <= 20 {
        vec![u32::MAX; 1 << d]
    } else {
        Vec::new()
    };
    let mut group_map: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let (mut dts, mut mts) = (0u64, 0u64);
    let mut blocks = 0u32;
    let block = CPU_BLOCK;
    let mut gorder: Vec<u32> = Vec::new();
    for start in (0..keyed.len()).step_by(block) {
        blocks += 1;
        let end = (start + block).min(keyed.len());
        let ta = Instant::now();
        // (a) against the confirmed skyline.
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
        let phase1: Vec<(bool, u64, u64)> = if use_gm {
            group_major(
                &groups,
                &keyed[start..end],
                &data[start * d..end * d],
                d,
                &mut gorder,
            )
        } else {
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
                            if gi != u32::MAX && test_group(&groups[gi as usize], &mut dt, &mut mt)
                            {
                                return (true, dt, mt);
                            }
                            if sub == mi {
                                break;
                            }
                            sub = sub.wrapping_sub(mi) & mi;
                        }
                    } else {
                        for g in &groups {
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
        };
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
        // (b) against earlier survivors of the block: Eq. 1 and Eq. 4 on contiguous
        // mask arrays without branches (two mask tests a pair), 32 pairs at a time.
        let sn: Vec<u64> = surv.iter().map(|&i| keyed[i].0).collect();
        let sm: Vec<u32> = surv.iter().map(|&i| keyed[i].2).collect();
        let sq: Vec<u32> = surv.iter().map(|&i| keyed[i].3).collect();
        let phase2: Vec<(bool, u64, u64)> = (0..surv.len())
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
            .collect();
        t_b += tb.elapsed().as_secs_f64() * 1e3;
        let tc = Instant::now();
        // (c) survivors join the skyline.
        for (a, &(dead, dt, mt)) in phase2.iter().enumerate() {
            dts += dt;
            mts += mt;
            if dead {
                continue;
            }
            let i = surv[a];
            let (_, r, mi, qi) = keyed[i];
            let gi = *group_map.entry(mi).or_insert_with(|| {
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
            let g = &mut groups[gi];
            g.q.push(qi);
            g.rows.extend_from_slice(&data[i * d..(i + 1) * d]);
            g.ids.push(r);
        }
        t_c += tc.elapsed().as_secs_f64() * 1e3;
    }
    if profile {
        eprintln!(
            "cpu skyline profile: setup {t_setup:.1} ms (pre-filter, sort, masks; {} rows kept), blocks {blocks}: (a) {t_a:.1} ms, (b) {t_b:.1} ms, (c) {t_c:.1} ms, groups {}",
            keyed.len(),
            groups.len()
        );
    }
    let mut out: Vec<u32> = groups.iter().flat_map(|g| g.ids.iter().copied()).collect();
    out.par_sort_unstable();
    st.dominance_tests = dts;
    st.mask_tests = mts;
    st.chunks = blocks;
    (out, st)
}

// ---------------------------------------------------------------------------------
// GPU: SkyAlign
// ---------------------------------------------------------------------------------

const SKY_WGSL: &str = include_str!("../../shaders/skyline.wgsl");
const SKY_WG: u32 = 256;

/// Most dimensions the GPU path handles (M and Q share one `u32`); wider inputs run
/// [`skyline_cpu`] and say so in [`SkylineStats::algorithm`].
pub const GPU_MAX_DIMS: usize = 16;

/// Options of [`skyline_gpu_with`].
#[derive(Clone, Debug, Default)]
pub struct SkylineGpuOptions {
    /// Most rows per chunk (0: as many as one storage binding holds). Tests use
    /// small chunks to exercise the chunked path cheaply.
    pub max_chunk_rows: usize,
    /// Loop steps per invocation and launch of the iteration kernel (`Some(0)`: no
    /// bound; `None`: bounded on CPU adapters only, see shaders/skyline.wgsl). Tests
    /// use tiny bounds to exercise resuming.
    pub step_limit: Option<u32>,
    /// The iteration kernel (`None`: `RIDGELINE_SKYLINE_KERNEL=thread|wide|mixed` if
    /// set, else [`SkylineKernel::Mixed`] on GPUs and [`SkylineKernel::Thread`] on
    /// CPU adapters, where only the per-invocation kernel can bound its loop steps).
    pub kernel: Option<SkylineKernel>,
    /// `iterate_wide` finds a point's candidate partitions by looking up the
    /// level-l subsets of its mask where that takes fewer rounds (of one candidate a
    /// lane) than testing every partition (Eq. 1), else by testing every
    /// partition. `Some(true)` / `Some(false)` force one way (tests;
    /// `RIDGELINE_SKYLINE_SUBSETS=always|never` where `None`, a diagnosis aid).
    pub subset_lookup: Option<bool>,
    /// Sort each level's partitions by key (the sum of ranks over the partition's
    /// mask) so that a point scans only the prefix of each partition that can hold
    /// a dominator (`sort_level` in shaders/skyline.wgsl). `None`: on for levels
    /// whose partitions average at least 64 points (see `cut_min`), off with
    /// `RIDGELINE_SKYLINE_KEYCUT=off` (a diagnosis aid); `Some(true)`: every
    /// level; `Some(false)`: none. Tests compare all three.
    pub key_cut: Option<bool>,
    /// Working-set positions per launch of the iteration kernels (`None`: 32768
    /// on CPU adapters, `RIDGELINE_SKYLINE_LAUNCH_ROWS` if set, else unbounded;
    /// `Some(0)`: unbounded). Unbounded launches without a step bound are sized on
    /// the device (indirect dispatch from the level table `plan` writes), so the
    /// levels run without a readback; bounded ones read each level's size back.
    pub launch_rows: Option<usize>,
    /// Check the device's intermediate results against host computations as the
    /// algorithm runs (quartiles, working set after every sort and repacking, key
    /// directories); slow, for tests. `RIDGELINE_SKYLINE_CHECK` turns it on too.
    pub check: bool,
}

/// SkyAlign's iteration kernel (shaders/skyline.wgsl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkylineKernel {
    /// `iterate`: one invocation per working-set point (the paper's layout);
    /// resumable under a loop-step bound (CPU adapters).
    Thread,
    /// `iterate_wide`: one workgroup per point; its lanes share the partition walk
    /// and the points of each matching partition, so points below many partitions
    /// (high |M|) no longer hold up their warps. No step bound.
    Wide,
    /// `iterate` for the low levels (below max(2, d / 4), or below an earlier
    /// level whose estimated work a point is large) and levels of at most 16
    /// partitions, where a point's work is small and a workgroup per point costs
    /// more than it balances; `iterate_wide` for the rest. No step bound.
    Mixed,
}

impl SkylineKernel {
    fn choose(opt: Option<SkylineKernel>, ctx: &GpuContext) -> SkylineKernel {
        if let Some(k) = opt {
            return k;
        }
        match std::env::var("RIDGELINE_SKYLINE_KERNEL").ok().as_deref() {
            Some("thread") => SkylineKernel::Thread,
            Some("wide") => SkylineKernel::Wide,
            Some("mixed") => SkylineKernel::Mixed,
            _ if ctx.is_cpu_adapter() => SkylineKernel::Thread,
            _ => SkylineKernel::Mixed,
        }
    }
}

/// Under [`SkylineKernel::Mixed`], levels with at most this many partitions also
/// run the per-invocation kernel (`RIDGELINE_SKYLINE_THREAD_PARTS`, a diagnosis aid).
fn thread_parts() -> usize {
    std::env::var("RIDGELINE_SKYLINE_THREAD_PARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

/// Lanes of `iterate_wide`'s workgroup (64; `RIDGELINE_SKYLINE_WIDE_WG`, a power of
/// two from 32 to 256, is a diagnosis aid).
fn wide_wg() -> u32 {
    std::env::var("RIDGELINE_SKYLINE_WIDE_WG")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| v.is_power_of_two() && (32..=256).contains(v))
        .unwrap_or(64)
}

/// The estimated work of level `l` from the first working set's per-mask counts:
/// for each point with |M| > l, the points of the level-l partitions below its
/// mask (the sum over the l-subsets S of M of count(S), by a zeta transform over
/// the d bits, in u32: no sum exceeds the row count); returns their mean and
/// coefficient of variation over those points.
fn level_work(counts: &[u32], d: usize, l: usize) -> (f64, f64) {
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

/// Under [`SkylineKernel::Mixed`], a level below max(2, d / 4) with more than
/// `thread_parts()` partitions still runs the wide kernel where its estimated work
/// a point (see [`level_work`]) reaches this: per-invocation points then carry
/// long and uneven work (warps wait for their slowest point), which a workgroup per
/// point spreads. H100, 1M rows (estimate, faster kernel): anticorrelated d = 12
/// level 2 717 per invocation (1.46 against 2.37 ms); independent d = 12 level 2
/// 3895 wide (1.53 against 3.92 ms); anticorrelated d = 16 levels 2, 3 87 and 253
/// per invocation; independent d = 16 level 2 457 per invocation, level 3 1080
/// wide (3.71 against 5.90 ms). A threshold on work plus partitions instead sent
/// 100k-row inputs' middle levels to the per-invocation kernel, up to 1.6x slower
/// (BENCHMARKS.md, session 19).
const WIDE_WORK: f64 = 900.0;

/// C(n, k).
#[cfg(test)]
fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// The first level that runs the wide kernel under [`SkylineKernel::Mixed`]
/// (levels with at most `thread_parts()` partitions excepted): max(2, d / 4), or
/// an earlier level whose work estimate reaches [`WIDE_WORK`]; `levels` are the
/// levels that hold points with their partition counts. In the low levels every
/// point has few partitions below its mask and few points in them, so a workgroup
/// per point costs more than it balances (H100, 1M anticorrelated rows: d = 12
/// level 2 1.6 ms per invocation against 2.3 ms wide; from level 3 at d = 12 and
/// level 4 at d = 16 wide wins). `RIDGELINE_SKYLINE_THREAD_LEVELS` fixes it instead
/// (a diagnosis aid).
fn mixed_wide_from(counts: &[u32], d: usize, levels: &[(usize, usize)]) -> usize {
    if let Some(v) = std::env::var("RIDGELINE_SKYLINE_THREAD_LEVELS").ok().and_then(|v| v.parse().ok()) {
        return v;
    }
    let base = (d / 4).max(2);
    let parts = thread_parts();
    for &(l, npart) in levels {
        if l < base && npart > parts && level_work(counts, d, l).0 >= WIDE_WORK {
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
fn packed_slots(max_len: u32, wgw: u32) -> bool {
    wgw < 128 && (max_len as u64 * wgw as u64) < (1 << 25)
}

/// Positions of `iterate_wide`'s joint range a lane tests per step before the
/// workgroup runs the step's queued dominance tests together (4;
/// `RIDGELINE_SKYLINE_WIDE_STEP`, 1 to 16, a diagnosis aid). H100, 1M
/// anticorrelated rows, d = 12: 2 and 8 were slower than 4 (BENCHMARKS.md,
/// session 19).
fn wide_step() -> u32 {
    std::env::var("RIDGELINE_SKYLINE_WIDE_STEP")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| (1..=16).contains(v))
        .unwrap_or(4)
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct SkyParams {
    n: u32,
    d: u32,
    l: u32,
    tau: u32,
    shift: u32,
    full: u32,
    npart: u32,
    stride: u32,
    /// Right shift of every rank in a key (see `key_shift`).
    kshift: u32,
    /// iterate_wide: 1 where slot offsets come from one packed atomic.
    packed: u32,
    /// sort_level's lanes (the `SWG` constant its pipeline is built with).
    sort_lanes: u32,
    pad: u32,
}

/// Elements per segment so that `len` elements sit in one segment.
fn one_seg(len: usize) -> usize {
    len.max(1).div_ceil(4) * 4
}

/// `data` in a new one-segment array. Through the small-write queue (one copy with
/// the next submission): a staging upload of its own each took a 64 MiB stage, and
/// the level tables' dozen uploads waited for the device once the stages ran out.
fn upload_one(ctx: &GpuContext, data: &[u32]) -> GpuResult<DeviceArray> {
    let data = if data.is_empty() { &[0u32][..] } else { data };
    let a = DeviceArray::alloc_segmented(ctx, data.len(), 4, one_seg(data.len()))?;
    ctx.write_small(buf(&a), 0, bytemuck::cast_slice(data))?;
    Ok(a)
}

fn buf(a: &DeviceArray) -> &wgpu::Buffer {
    a.segment(0).0
}

/// Peak device bytes of one chunk (pool size classes included).
#[derive(Default)]
struct Mem {
    live: u64,
    peak: u64,
}

impl Mem {
    fn add(&mut self, a: &DeviceArray) {
        self.live += a.device_bytes();
        self.peak = self.peak.max(self.live);
    }
    fn sub(&mut self, a: &DeviceArray) {
        self.live -= a.device_bytes();
    }
    fn spike(&mut self, bytes: u64) {
        self.peak = self.peak.max(self.live + bytes);
    }
}

fn launch(
    ctx: &GpuContext,
    entry: &str,
    p: SkyParams,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> GpuResult<()> {
    launch_groups(
        ctx,
        entry,
        p,
        bindings,
        (threads as u64).div_ceil(SKY_WG as u64),
    )
}

/// [`launch`] by workgroups (`iterate_wide`: one per point).
fn launch_groups(
    ctx: &GpuContext,
    entry: &str,
    p: SkyParams,
    bindings: &[(u32, &wgpu::Buffer)],
    groups: u64,
) -> GpuResult<()> {
    if groups == 0 {
        return Ok(());
    }
    let mut enc = ctx.encoder(entry);
    record(ctx, &mut enc, entry, p, bindings, Groups::Direct(groups))?;
    ctx.submit(enc)?;
    Ok(())
}

/// Workgroups of a dispatch: a count, or indirect arguments in a buffer at a byte
/// offset (the level table, see `plan` in shaders/skyline.wgsl).
#[derive(Clone, Copy)]
enum Groups<'a> {
    Direct(u64),
    Indirect(&'a wgpu::Buffer, u64),
}

/// Stripes of the test counters (shaders/skyline.wgsl, `CSTRIPES`).
const CSTRIPES: usize = 256;

/// (dominance tests, mask tests) from the striped counters: per stripe the
/// dominance tests' low and high words, then the mask tests'.
fn sum_counters(v: &[u32]) -> (u64, u64) {
    v.chunks_exact(4).fold((0, 0), |(a, b), c| {
        (
            a + (c[0] as u64 | (c[1] as u64) << 32),
            b + (c[2] as u64 | (c[3] as u64) << 32),
        )
    })
}

/// Words per level in the level table (shaders/skyline.wgsl, `LVW`).
const LVW: usize = 16;

/// Records one dispatch of `entry` into `enc`.
fn record(
    ctx: &GpuContext,
    enc: &mut wgpu::CommandEncoder,
    entry: &str,
    p: SkyParams,
    bindings: &[(u32, &wgpu::Buffer)],
    groups: Groups<'_>,
) -> GpuResult<()> {
    if matches!(groups, Groups::Direct(0)) {
        return Ok(());
    }
    let defs = [
        ("WG", SKY_WG.to_string()),
        ("WGW", wide_wg().to_string()),
        ("WQS", wide_step().to_string()),
        ("SCAP", sort_cap(ctx).to_string()),
        ("D", p.d.to_string()),
        // sort_level's lanes (see `sort_lanes`); one variant elsewhere.
        ("SWG", if entry == "sort_level" { p.sort_lanes } else { 64 }.to_string()),
    ];
    let pipe = ctx.pipeline("skyline", SKY_WGSL, entry, &defs)?;
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    if let Groups::Direct(g) = groups {
        if g > max_dim as u64 * max_dim as u64 {
            return Err(GpuError::Invalid(format!(
                "skyline {entry}: {g} workgroups exceed the dispatch limit"
            )));
        }
    }
    let ub = ctx.uniform(&p);
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: ub.as_entire_binding(),
    }];
    for &(b, buffer) in bindings {
        entries.push(wgpu::BindGroupEntry {
            binding: b,
            resource: buffer.as_entire_binding(),
        });
    }
    let bg = ctx.scoped(|| {
        ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("skyline"),
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        })
    })?;
    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(entry),
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipe);
    pass.set_bind_group(0, &bg, &[]);
    match groups {
        Groups::Direct(g) => {
            let (x, y, z) = dispatch_dims(g, max_dim);
            pass.dispatch_workgroups(x, y, z);
        }
        Groups::Indirect(b, off) => pass.dispatch_workgroups_indirect(b, off),
    }
    Ok(())
}

/// The smallest average partition size (points) at which a level is sorted for
/// the key cut: 64 (`RIDGELINE_SKYLINE_CUT_MIN`, a diagnosis aid). Smaller
/// partitions cost a workgroup's sort each but hold few points to skip; on the
/// H100 (1M rows, d = 12 and 16, two rounds of 0 / 32 / 64 / 128) 64 was best
/// on anticorrelated data, within the rounds' 10% noise elsewhere.
fn cut_min() -> usize {
    std::env::var("RIDGELINE_SKYLINE_CUT_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Points in a level's partitions.
fn ncur_level(parts: &[u32]) -> usize {
    parts.chunks_exact(3).map(|t| (t[2] - t[1]) as usize).sum()
}

/// `sort_level`'s lanes for a level: a quarter of the average partition size,
/// from 64 to 256 (H100, 1M anticorrelated rows: 64 lanes took twice as long as
/// 256 on d = 12's partitions of hundreds of points).
fn sort_lanes(points: usize, npart: usize) -> u32 {
    let avg = points / npart.max(1);
    ((avg / 4).next_power_of_two() as u32).clamp(64, 256)
}

/// Keys in each partition's directory (shaders/skyline.wgsl, `KDIR`).
const KDIR: usize = 16;

/// Most points of a partition `sort_level` sorts in workgroup memory (8 bytes a
/// point): 4096, or the largest power of two the adapter's workgroup storage holds
/// beside the iteration kernels' few arrays. Larger partitions are not cut.
fn sort_cap(ctx: &GpuContext) -> u32 {
    let lim = ctx.limits().max_compute_workgroup_storage_size.saturating_sub(4096);
    let mut cap = 4096u32;
    while cap > 256 && cap * 8 > lim {
        cap /= 2;
    }
    cap
}

/// The right shift of every rank in a key (the sum of up to d ranks, see
/// `sort_level`) so that the sum fits a `u32`; 0 unless ranks reach 2^28.
fn key_shift(gmax: u32, d: usize) -> u32 {
    (0..32)
        .find(|&s| ((gmax as u64) >> s) * d as u64 <= u32::MAX as u64)
        .unwrap_or(32)
}

/// Working-set positions per `iterate` launch.
fn iterate_launch_rows(ctx: &GpuContext) -> usize {
    if let Some(v) = std::env::var("RIDGELINE_SKYLINE_LAUNCH_ROWS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return v.max(SKY_WG as usize);
    }
    if ctx.is_cpu_adapter() {
        1 << 15
    } else {
        usize::MAX
    }
}

/// Masks `0..2^d` in SkyAlign's partition order: by number of bits set, then value.
fn mask_order(d: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..1u32 << d).collect();
    v.sort_unstable_by_key(|&m| (m.count_ones(), m));
    v
}

/// Each mask's first slot in the (|M|, M) `order` given the per-mask `counts`
/// (a counting sort's offsets), and the total.
fn mask_starts(counts: &[u32], order: &[u32]) -> (Vec<u32>, u32) {
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
fn part_bounds(m: u32, starts: &[u32], counts: &[u32]) -> [u32; 3] {
    let (s, c) = (starts[m as usize], counts[m as usize]);
    [m, s, s + c]
}

struct ChunkOut {
    /// Local row indices of the chunk's skyline (any order).
    rows: Vec<u32>,
    dominance_tests: u64,
    mask_tests: u64,
    device_bytes: u64,
    resumed: u32,
}

/// SkyAlign on one chunk whose rank matrix fits one storage binding.
fn gpu_chunk(
    ctx: &GpuContext,
    ranks: &[u32],
    n: usize,
    d: usize,
    order: &[u32],
    step_limit: Option<u32>,
    kernel: SkylineKernel,
    subset_lookup: Option<bool>,
    key_cut: usize,
    launch_rows: Option<usize>,
    check: bool,
) -> GpuResult<ChunkOut> {
    // RIDGELINE_SKYLINE_PROFILE=1: a line for the setup, one per level (working
    // set, partitions, wall times of preparation, iteration and repacking, its
    // tests) and one for the finish, on stderr.
    let profile = std::env::var_os("RIDGELINE_SKYLINE_PROFILE").is_some();
    let t_chunk = Instant::now();
    // The setup's steps (profile only: each waits for the device).
    let mut t_mark = t_chunk;
    let mut steps = String::new();
    let mut mark = |what: &str| -> GpuResult<()> {
        if profile {
            ctx.wait()?;
            let now = Instant::now();
            steps += &format!("{what} {:.3}, ", (now - t_mark).as_secs_f64() * 1e3);
            t_mark = now;
        }
        Ok(())
    };
    let mut mem = Mem::default();
    let (nu, du) = (n as u32, d as u32);
    let base = SkyParams {
        n: nu,
        d: du,
        ..Default::default()
    };
    // Upload and the pre-filter's tau (Algorithm 1, line 1).
    let r = DeviceArray::upload_segmented(ctx, ranks, one_seg(ranks.len()))?;
    mem.add(&r);
    mark("upload")?;
    let mm = upload_one(ctx, &[u32::MAX, 0])?;
    launch(ctx, "minmax", base, &[(1, buf(&r)), (2, buf(&mm))], n)?;
    let v = mm.download::<u32>(ctx)?;
    let (tau, gmax) = (v[0], v[1]);
    mark("minmax")?;
    let base = SkyParams {
        kshift: key_shift(gmax, d),
        ..base
    };
    // Quartiles of the surviving rows (line 2 filters inside every kernel below):
    // an MSD radix select, 8 bits a pass, over every (dimension, quartile) at once.
    let bits = 32 - gmax.leading_zeros();
    let passes = bits.div_ceil(8).max(1);
    // The state (prefixes, ranks sought, surviving rows, error flag) stays on the
    // device: qpick chooses each pass's digits there, so the passes run without a
    // readback; mask_hist appends the row count and the flag to its histogram.
    let quart = upload_one(ctx, &vec![0u32; 6 * d + 2])?;
    let hist = upload_one(ctx, &vec![0u32; 1 + 3 * d * 256])?;
    mem.spike(hist.device_bytes() + quart.device_bytes());
    // qhist's first pass strides over the rows with a few hundred workgroups (see
    // there); later passes take a row per invocation.
    let qgroups = (n as u64).div_ceil(SKY_WG as u64);
    let mut enc = ctx.encoder("skyline-quartiles");
    for pass in 0..passes {
        let shift = 8 * (passes - 1 - pass);
        if pass > 0 {
            enc.clear_buffer(buf(&hist), 0, None);
        }
        let p = SkyParams {
            tau,
            shift,
            full: (pass == 0) as u32,
            ..base
        };
        let binds = [(1, buf(&r)), (2, buf(&hist)), (3, buf(&quart))];
        let g = if pass == 0 { qgroups.min(512) } else { qgroups };
        record(ctx, &mut enc, "qhist", p, &binds, Groups::Direct(g))?;
        let binds = [(2, buf(&hist)), (16, buf(&quart))];
        record(ctx, &mut enc, "qpick", p, &binds, Groups::Direct(3 * d as u64))?;
    }
    ctx.submit(enc)?;
    drop(hist);
    mark("quartiles")?;
    // Median and quartile masks of every surviving row (mq[r] = M | Q << 16; dead[r]
    // = 1 for the rows the pre-filter drops), the histogram over M, then the
    // (|M|, M) order's partition starts.
    let masks = 1usize << d;
    let mh = upload_one(ctx, &vec![0u32; masks + 2])?;
    mem.add(&mh);
    let mq = DeviceArray::alloc_segmented(ctx, n, 4, one_seg(n))?;
    mem.add(&mq);
    let dead = DeviceArray::alloc_segmented(ctx, n, 4, one_seg(n))?;
    mem.add(&dead);
    let p = SkyParams { tau, ..base };
    launch(
        ctx,
        "mask_hist",
        p,
        &[
            (1, buf(&r)),
            (2, buf(&mh)),
            (3, buf(&quart)),
            (5, buf(&mq)),
            (8, buf(&dead)),
        ],
        n,
    )?;
    let mut counts = mh.download::<u32>(ctx)?;
    mark("masks")?;
    let (n1, qerr) = (counts[masks], counts[masks + 1]);
    counts.truncate(masks);
    if n1 == 0 {
        return Err(GpuError::Invalid("skyline pre-filter kept no row".into()));
    }
    if qerr != 0 {
        return Err(GpuError::Invalid(
            "skyline quartile selection lost its rank".into(),
        ));
    }
    if check {
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
    }
    let (starts, acc) = mask_starts(&counts, order);
    if acc != n1 {
        return Err(GpuError::Invalid(format!(
            "skyline mask histogram counts {acc} of {n1} rows"
        )));
    }
    let n1 = n1 as usize;
    // Sort by (|M|, M): a counting-sort scatter of the surviving rows' ids (atomic
    // cursors, one per mask) gives the initial working set.
    let cursors = upload_one(ctx, &starts)?;
    mem.add(&cursors);
    let mut idx = DeviceArray::alloc(ctx, n1, 4)?;
    mem.add(&idx);
    if idx.num_segments() != 1 {
        return Err(GpuError::Invalid(
            "skyline working set spans segments".into(),
        ));
    }
    // The masks in working-set order beside the row ids (wq[i] = mq[idx[i]]): the
    // iteration reads its comparands' masks in order, and mq is no longer needed.
    let mut wq = DeviceArray::alloc(ctx, n1, 4)?;
    mem.add(&wq);
    launch(
        ctx,
        "scatter",
        p,
        &[
            (2, buf(&cursors)),
            (5, buf(&mq)),
            (6, buf(&wq)),
            (8, buf(&dead)),
            (9, buf(&idx)),
        ],
        n,
    )?;
    mark("scatter")?;
    // (Back to the pool; later work on the queue runs after the scatter.)
    mem.sub(&cursors);
    drop(cursors);
    mem.sub(&mh);
    drop(mh);
    let mq = if check {
        Some(mq)
    } else {
        mem.sub(&mq);
        None
    };
    // C(n, k) for n, k <= 16, appended to the partition lookup table (ptab).
    let mut binoms = vec![0u32; 17 * 17];
    for a in 0..17usize {
        binoms[a * 17] = 1;
        for b in 1..=a {
            binoms[a * 17 + b] =
                binoms[(a - 1) * 17 + b - 1] + if b < a { binoms[(a - 1) * 17 + b] } else { 0 };
        }
    }
    let stats = upload_one(ctx, &vec![0u32; 5 + masks])?;
    mem.add(&stats);
    // Loop steps per invocation and launch on llvmpipe (see `iterate` in
    // shaders/skyline.wgsl): its SIMD group may take (d + 2) back-edges a step.
    let step_limit = match kernel {
        SkylineKernel::Wide | SkylineKernel::Mixed => 0,
        SkylineKernel::Thread => step_limit.unwrap_or(if ctx.is_cpu_adapter() {
            (60_000 / (d as u32 + 2)).max(1)
        } else {
            0
        }),
    };
    if profile {
        eprintln!("skyline profile: n {n} d {d} kernel {kernel:?}: setup {:.3} ms ({steps}ms), {n1} rows after the pre-filter", t_chunk.elapsed().as_secs_f64() * 1e3);
    }
    // The level plan, fixed here from the first working set: a level's partitions
    // are its masks that hold points now (a partition may empty later, never
    // appear). Their bounds move as points leave: the device's `plan` kernel
    // rewrites them after every level, with the next working set's size and
    // dispatch sizes, so the levels run back to back with no readback. The
    // per-level choices (kernel, key cut, packed offsets) use these first counts.
    let mut level_parts: Vec<Vec<u32>> = vec![Vec::new(); d + 1];
    for &mk in order {
        if counts[mk as usize] > 0 {
            level_parts[mk.count_ones() as usize].extend_from_slice(&part_bounds(mk, &starts, &counts));
        }
    }
    let levels: Vec<usize> = (0..=d).filter(|&l| !level_parts[l].is_empty()).collect();
    // Mask -> its partition's index in its level + 1 (0: no partition), then the
    // binomial table (iterate_wide enumerates subsets of a mask).
    let mut tab = vec![0u32; masks];
    for parts in &level_parts {
        for (k, t) in parts.chunks_exact(3).enumerate() {
            tab[t[0] as usize] = k as u32 + 1;
        }
    }
    tab.extend_from_slice(&binoms);
    let ptab = upload_one(ctx, &tab)?;
    mem.add(&ptab);
    let mut auxs = Vec::with_capacity(d + 1);
    for parts in &level_parts {
        let a = upload_one(ctx, parts)?;
        mem.add(&a);
        auxs.push(a);
    }
    let ordm = upload_one(ctx, order)?;
    mem.add(&ordm);
    let cur = DeviceArray::alloc(ctx, masks, 4)?;
    mem.add(&cur);
    // The level table (LVW words a level, see `plan`): the first level's entry here.
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let mut lv = vec![0u32; LVW * (d + 1)];
    let first = levels[0] * LVW;
    let (x, y, z) = dispatch_dims((n1 as u64).div_ceil(SKY_WG as u64), max_dim);
    lv[first..first + 3].copy_from_slice(&[x, y, z]);
    let (x, y, z) = dispatch_dims(n1 as u64, max_dim);
    lv[first + 3..first + 6].copy_from_slice(&[x, y, z]);
    lv[first + 9] = n1 as u32;
    let lvl = upload_one(ctx, &lv)?;
    mem.add(&lvl);
    // The next working set's ids and masks (the repacking writes them; then the
    // pairs swap).
    let mut idx2 = DeviceArray::alloc(ctx, n1, 4)?;
    mem.add(&idx2);
    let mut wq2 = DeviceArray::alloc(ctx, n1, 4)?;
    mem.add(&wq2);
    let max_parts = level_parts.iter().map(|p| p.len() / 3).max().unwrap_or(1);
    let kdir = DeviceArray::alloc(ctx, max_parts.max(1) * KDIR, 4)?;
    mem.add(&kdir);
    // The resume state (2 words a point) where the iteration has a step bound, else
    // a stand-in.
    let res = upload_one(ctx, &vec![0u32; if step_limit > 0 { 2 * n1 } else { 4 }])?;
    mem.add(&res);
    // Launches sized on the host (CPU adapters: bounded launches; step bounds: the
    // resume loop) read each level's working-set size back; otherwise the
    // iterations are dispatched indirectly from the level table.
    let step = launch_rows.unwrap_or_else(|| iterate_launch_rows(ctx));
    let host_sized = step_limit > 0 || step != usize::MAX;
    let step = step.max(1);
    // Host copies for the checks and the profile.
    let mut ncur = n1;
    let mut last = (0u64, 0u64);
    // The striped test counters (see `add64` in shaders/skyline.wgsl).
    let ctr = upload_one(ctx, &vec![0u32; 4 * CSTRIPES])?;
    mem.add(&ctr);
    let mut resumed = 0u32;
    // The first counts, for the profile's work estimates (`counts` follows the
    // levels where they are read back).
    let counts0 = if profile { counts.clone() } else { Vec::new() };
    // The first level of the wide kernel under Mixed (see mixed_wide_from).
    let wide_from = match kernel {
        SkylineKernel::Mixed => {
            let lv: Vec<(usize, usize)> = levels.iter().map(|&l| (l, level_parts[l].len() / 3)).collect();
            mixed_wide_from(&counts, d, &lv)
        }
        _ => 0,
    };
    for (li, &l) in levels.iter().enumerate() {
        let mut enc = ctx.encoder("skyline-levels");
        let t_level = Instant::now();
        let parts = &level_parts[l];
        let npart = parts.len() / 3;
        let aux = &auxs[l];
        let lk = match kernel {
            SkylineKernel::Mixed if l < wide_from || npart <= thread_parts() => {
                SkylineKernel::Thread
            }
            SkylineKernel::Mixed => SkylineKernel::Wide,
            k => k,
        };
        // Each partition sorted by key, with its key directory (see `sort_level`);
        // an all-zero directory (no cut) where the cut is off. Levels whose
        // partitions average fewer points than `key_cut` are not sorted: there a
        // partition costs a workgroup's sort but holds few points to skip.
        let level_points = ncur_level(parts);
        let sorted = key_cut != usize::MAX && level_points >= key_cut.saturating_mul(npart);
        enc.clear_buffer(buf(&stats), 16, Some(4 * (1 + masks) as u64));
        if step_limit > 0 {
            enc.clear_buffer(buf(&res), 0, None);
        }
        if !sorted {
            enc.clear_buffer(buf(&kdir), 0, Some((npart * KDIR * 4) as u64));
        }
        if host_sized && li > 0 {
            // This level's size, from the table the previous plan wrote.
            ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
            ncur = lvl.download::<u32>(ctx)?[l * LVW + 9] as usize;
        }
        let mut sort_ms = 0.0;
        if sorted {
            if profile {
                ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
                ctx.wait()?;
            }
            let t_sort = Instant::now();
            let p = SkyParams {
                npart: npart as u32,
                sort_lanes: sort_lanes(level_points, npart),
                ..base
            };
            let binds = [
                (1, buf(&r)),
                (3, buf(aux)),
                (6, buf(&wq)),
                (13, buf(&idx)),
                (14, buf(&kdir)),
            ];
            record(ctx, &mut enc, "sort_level", p, &binds, Groups::Direct(npart as u64))?;
            if profile {
                ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
                ctx.wait()?;
                sort_ms = t_sort.elapsed().as_secs_f64() * 1e3;
            }
            if let Some(mq) = &mq {
                ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
                let dev_parts = aux.download::<u32>(ctx)?;
                check_working_set(ctx, &idx, &wq, mq, &counts, order)?;
                check_keys(ctx, &idx, &kdir, &dev_parts[..3 * npart], ranks, d, base.kshift, sort_cap(ctx))?;
            }
        }
        // Packed slot offsets in iterate_wide where they fit (see packed_slots).
        let max_len = parts.chunks_exact(3).map(|t| t[2] - t[1]).max().unwrap_or(0);
        let packed = packed_slots(max_len, wide_wg());
        let t_iter = Instant::now();
        let p = SkyParams {
            l: l as u32,
            npart: npart as u32,
            full: step_limit,
            ..base
        };
        let region = (l * LVW * 4) as u64;
        if lk == SkylineKernel::Wide {
            // `full` carries the subset lookup choice (no step bound here).
            let env = || match std::env::var("RIDGELINE_SKYLINE_SUBSETS").ok().as_deref() {
                Some("always") => Some(true),
                Some("never") => Some(false),
                _ => None,
            };
            let full = match subset_lookup.or_else(env) {
                None => 0,
                Some(true) => 1,
                Some(false) => 2,
            };
            let binds = [
                (1, buf(&r)),
                (2, buf(&stats)),
                (3, buf(aux)),
                (6, buf(&wq)),
                (7, buf(&idx)),
                (8, buf(&dead)),
                (10, buf(&ptab)),
                (15, buf(&kdir)),
                (18, buf(&lvl)),
                (22, buf(&ctr)),
            ];
            if host_sized {
                for first in (0..ncur).step_by(step) {
                    let p = SkyParams {
                        full,
                        packed: packed as u32,
                        shift: first as u32,
                        ..p
                    };
                    let g = Groups::Direct((ncur - first).min(step) as u64);
                    record(ctx, &mut enc, "iterate_wide", p, &binds, g)?;
                }
            } else {
                let p = SkyParams {
                    full,
                    packed: packed as u32,
                    ..p
                };
                let g = Groups::Indirect(buf(&lvl), region + 12);
                record(ctx, &mut enc, "iterate_wide", p, &binds, g)?;
            }
        } else {
            let binds = [
                (1, buf(&r)),
                (2, buf(&stats)),
                (3, buf(aux)),
                (4, buf(&res)),
                (6, buf(&wq)),
                (7, buf(&idx)),
                (8, buf(&dead)),
                (15, buf(&kdir)),
                (18, buf(&lvl)),
                (22, buf(&ctr)),
            ];
            if host_sized {
                loop {
                    for first in (0..ncur).step_by(step) {
                        let p = SkyParams {
                            shift: first as u32,
                            ..p
                        };
                        let g = Groups::Direct(((ncur - first).min(step) as u64).div_ceil(SKY_WG as u64));
                        record(ctx, &mut enc, "iterate", p, &binds, g)?;
                    }
                    if step_limit == 0 {
                        break;
                    }
                    ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
                    let s = stats.download::<u32>(ctx)?;
                    if s[4] == 0 {
                        break;
                    }
                    resumed += 1;
                    enc.clear_buffer(buf(&stats), 16, Some(4));
                }
            } else {
                let g = Groups::Indirect(buf(&lvl), region);
                record(ctx, &mut enc, "iterate", p, &binds, g)?;
            }
        }
        let mut iterate_ms = 0.0;
        if profile {
            ctx.submit(std::mem::replace(&mut enc, ctx.encoder("skyline-levels")))?;
            ctx.wait()?;
            iterate_ms = t_iter.elapsed().as_secs_f64() * 1e3;
        }
        let t_repack = Instant::now();
        // Repacking (line 25): `plan` turns the kept points' per-mask counts into
        // each mask's first slot, the next level's partition bounds and sizes; the
        // kept points are scattered to their mask's partition in (|M|, M) order
        // (atomic cursors; any order inside a partition).
        if let Some(&lnext) = levels.get(li + 1) {
            let off: usize = (0..=l).map(|k| binoms[d * 17 + k] as usize).sum();
            let p = SkyParams {
                l: l as u32,
                tau: off as u32,
                shift: lnext as u32,
                npart: (level_parts[lnext].len() / 3) as u32,
                stride: max_dim,
                ..base
            };
            let binds = [
                (25, buf(&stats)),
                (17, buf(&lvl)),
                (19, buf(&ordm)),
                (20, buf(&cur)),
                (21, buf(&auxs[lnext])),
            ];
            record(ctx, &mut enc, "plan", p, &binds, Groups::Direct(1))?;
            let p = SkyParams { l: l as u32, ..base };
            let binds = [
                (2, buf(&cur)),
                (6, buf(&wq)),
                (7, buf(&idx)),
                (8, buf(&dead)),
                (11, buf(&idx2)),
                (12, buf(&wq2)),
                (18, buf(&lvl)),
            ];
            if host_sized {
                let g = Groups::Direct((ncur as u64).div_ceil(SKY_WG as u64));
                record(ctx, &mut enc, "repack", p, &binds, g)?;
            } else {
                record(ctx, &mut enc, "repack", p, &binds, Groups::Indirect(buf(&lvl), region))?;
            }
            std::mem::swap(&mut idx, &mut idx2);
            std::mem::swap(&mut wq, &mut wq2);
        }
        // Every level is submitted as soon as it is recorded, so the device runs
        // it while the host records the next (recording all levels took the host
        // 0.8-1.2 ms on the H100 machine; submitting only the first and the last
        // level left the device waiting for it: d = 12 15.0-15.3 against 14.8-14.9
        // ms, BENCHMARKS.md session 19).
        ctx.submit(enc)?;
        if profile || mq.is_some() {
            let s = stats.download::<u32>(ctx)?;
            let now = sum_counters(&ctr.download::<u32>(ctx)?);
            let (level_dts, level_mts) = (now.0 - last.0, now.1 - last.1);
            last = now;
            counts.copy_from_slice(&s[5..]);
            let next: usize = counts.iter().map(|&c| c as usize).sum();
            if let Some(mq) = &mq {
                if let Some(&lnext) = levels.get(li + 1) {
                    // The plan kernel's table against the host's.
                    let lvv = lvl.download::<u32>(ctx)?;
                    let got = auxs[lnext].download::<u32>(ctx)?;
                    let st = mask_starts(&counts, order).0;
                    let want: Vec<u32> = level_parts[lnext]
                        .chunks_exact(3)
                        .flat_map(|t| part_bounds(t[0], &st, &counts))
                        .collect();
                    if got[..want.len()] != want[..] || lvv[lnext * LVW + 9] as usize != next {
                        return Err(GpuError::Invalid(format!(
                            "level {l}: the device's plan of level {lnext} differs from the host's"
                        )));
                    }
                    check_working_set(ctx, &idx, &wq, mq, &counts, order)?;
                }
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
            }
            if profile {
                let (wm, wcv) = level_work(&counts0, d, l);
                eprintln!(
                    "skyline profile: level {l} ({lk:?}): working set {ncur}, {npart} partitions, sort {sort_ms:.3} ms, iterate {iterate_ms:.3} ms ({level_dts} dominance tests, {level_mts} mask tests), plan and repack {:.3} ms, {next} kept; level {:.3} ms; estimated work {wm:.0} a point, cv {wcv:.2}",
                    t_repack.elapsed().as_secs_f64() * 1e3,
                    t_level.elapsed().as_secs_f64() * 1e3,
                );
            }
            ncur = next;
        }
    }
    let t_fin = Instant::now();
    if profile {
        ctx.wait()?;
    }
    let t_dl = Instant::now();
    // The survivors as a bitmap (n / 8 bytes read back), listed in parallel; the
    // test counters (stats[0..4]) come back behind it in the same readback.
    let words = n.div_ceil(32);
    let bits = DeviceArray::alloc(ctx, words + 4 * CSTRIPES, 4)?;
    mem.spike(bits.device_bytes());
    let mut enc = ctx.encoder("skyline-finish");
    let p = SkyParams {
        n: n as u32,
        ..base
    };
    let g = Groups::Direct((words as u64).div_ceil(SKY_WG as u64));
    record(ctx, &mut enc, "alive_bits", p, &[(8, buf(&dead)), (9, buf(&bits))], g)?;
    enc.copy_buffer_to_buffer(buf(&ctr), 0, buf(&bits), 4 * words as u64, 16 * CSTRIPES as u64);
    ctx.submit(enc)?;
    // The rows' vector, its pages touched while the device finishes the levels.
    let mut out: Vec<u32> = Vec::with_capacity(n);
    out.spare_capacity_mut()
        .par_chunks_mut(1 << 14)
        .for_each(|c| c.fill(std::mem::MaybeUninit::new(0)));
    // SAFETY: every element was just initialised.
    unsafe { out.set_len(n) };
    let mut bits = bits.download::<u32>(ctx)?;
    last = sum_counters(&bits[words..words + 4 * CSTRIPES]);
    bits.truncate(words);
    let t_rows = Instant::now();
    let rows = bits_to_rows_into(&bits, out);
    if profile {
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        let now = Instant::now();
        eprintln!(
            "skyline profile: finish: queue drained {:.3} ms, dead flags read {:.3} ms, rows listed {:.3} ms; chunk {:.3} ms",
            ms(t_fin, t_dl),
            ms(t_dl, t_rows),
            ms(t_rows, now),
            t_chunk.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(ChunkOut {
        rows,
        dominance_tests: last.0,
        mask_tests: last.1,
        device_bytes: mem.peak,
        resumed,
    })
}

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
fn bits_to_rows_into(bits: &[u32], mut out: Vec<u32>) -> Vec<u32> {
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

/// Debugging aid (`RIDGELINE_SKYLINE_CHECK`): the working set is in (|M|, M) order,
/// without repeats, matches the per-mask counts, and its masks are its rows'.
fn check_working_set(
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

/// Debugging aid (`RIDGELINE_SKYLINE_CHECK`): after `sort_level`, every level-l
/// partition is in ascending order of its points' sums of ranks over the
/// partition's mask, and its directory holds the key at every KDIR-th of its
/// length (all zero for partitions above the sort capacity).
#[allow(clippy::too_many_arguments)]
fn check_keys(
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

/// SkyAlign on the GPU (Bøgh, Chester & Assent, VLDB 2015), with default options.
pub fn skyline_gpu(ctx: &GpuContext, m: RankMatrix<'_>) -> GpuResult<(Vec<u32>, SkylineStats)> {
    skyline_gpu_with(ctx, m, &SkylineGpuOptions::default())
}

/// SkyAlign on the GPU; see the module docs. Rank matrices larger than one storage
/// binding (or than `opts.max_chunk_rows` rows) are split into chunks: the skyline
/// of the union of the chunks' skylines is the skyline of the whole, so the union
/// is gathered on the host and the algorithm runs again on it. If a round does not
/// shrink the candidates below 90% while they still need several chunks, the call
/// fails with [`GpuError::OutOfMemory`] (the caller falls back to the CPU).
pub fn skyline_gpu_with(
    ctx: &GpuContext,
    m: RankMatrix<'_>,
    opts: &SkylineGpuOptions,
) -> GpuResult<(Vec<u32>, SkylineStats)> {
    let t0 = Instant::now();
    let (n, d) = (m.rows, m.dims);
    let mut st = SkylineStats {
        algorithm: "gpu-skyalign",
        ..Default::default()
    };
    if n == 0 || d == 0 {
        st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        return Ok(((0..n as u32).collect(), st));
    }
    if d > GPU_MAX_DIMS {
        let (ids, mut st) = skyline_cpu(m, 0);
        st.algorithm = "cpu-hybrid (dims > 16, GPU path not used)";
        return Ok((ids, st));
    }
    if n > u32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "skyline of {n} rows: row ids are u32"
        )));
    }
    let lim = ctx.limits();
    let max_bind = (lim.max_storage_buffer_binding_size as u64)
        .min(lim.max_buffer_size)
        .min((1 << 31) - 1);
    let max_words = ((max_bind / 4) / 4 * 4) as usize;
    let mut chunk = (max_words / d).min(ctx.segment_rows());
    if opts.max_chunk_rows > 0 {
        chunk = chunk.min(opts.max_chunk_rows);
    }
    let chunk = chunk.max(1);
    let order = mask_order(d);
    // A step bound asks for the kernel that has one.
    let kernel = match opts.step_limit {
        Some(l) if l > 0 && opts.kernel.is_none() => SkylineKernel::Thread,
        _ => SkylineKernel::choose(opts.kernel, ctx),
    };
    // The smallest average partition size of a sorted level (usize::MAX: none).
    let key_cut = match opts.key_cut {
        Some(true) => 0,
        Some(false) => usize::MAX,
        None if std::env::var("RIDGELINE_SKYLINE_KEYCUT").is_ok_and(|v| v == "off") => usize::MAX,
        None => cut_min(),
    };
    // Candidates: None = every row of `m`; Some((global ids, their rows)).
    let mut cand: Option<(Vec<u32>, Vec<u32>)> = None;
    loop {
        let (ranks, cn): (&[u32], usize) = match &cand {
            None => (m.ranks, n),
            Some((ids, rows)) => (rows.as_slice(), ids.len()),
        };
        let global = |local: usize| -> u32 {
            match &cand {
                None => local as u32,
                Some((ids, _)) => ids[local],
            }
        };
        let mut next = Vec::new();
        for c in (0..cn).step_by(chunk) {
            let e = (c + chunk).min(cn);
            let out = gpu_chunk(
                ctx,
                &ranks[c * d..e * d],
                e - c,
                d,
                &order,
                opts.step_limit,
                kernel,
                opts.subset_lookup,
                key_cut,
                opts.launch_rows.map(|r| if r == 0 { usize::MAX } else { r.max(SKY_WG as usize) }),
                opts.check || std::env::var_os("RIDGELINE_SKYLINE_CHECK").is_some(),
            )?;
            st.dominance_tests += out.dominance_tests;
            st.mask_tests += out.mask_tests;
            st.device_bytes = st.device_bytes.max(out.device_bytes);
            st.chunks += 1;
            st.resumed_launches += out.resumed;
            if cand.is_none() && cn <= chunk {
                // One chunk of the whole input: its rows are the answer, ascending.
                st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
                return Ok((out.rows, st));
            }
            next.extend(out.rows.iter().map(|&r| global(c + r as usize)));
        }
        next.sort_unstable();
        if cn <= chunk {
            st.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok((next, st));
        }
        if next.len() > chunk && next.len() * 10 > cn * 9 {
            return Err(GpuError::OutOfMemory(format!(
                "skyline: {} candidates of {cn} rows after chunk-local skylines still exceed one chunk of {chunk} rows",
                next.len()
            )));
        }
        let mut rows = vec![0u32; next.len() * d];
        rows.par_chunks_mut(d)
            .zip(next.par_iter())
            .for_each(|(dst, &g)| dst.copy_from_slice(m.row(g as usize)));
        cand = Some((next, rows));
    }
}

#[cfg(test)]
mod tests {
    /// The zeta-transform estimate against a direct sum over subsets, and the
    /// Mixed kernel's first wide level.
    #[test]
    fn level_work_and_wide_from() {
        use super::{level_work, mixed_wide_from, WIDE_WORK};
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
        assert_eq!(mixed_wide_from(&many, d, &levels), 2);
        let few = vec![1u32; 1 << d];
        assert!(level_work(&few, d, 2).0 < WIDE_WORK);
        assert_eq!(mixed_wide_from(&few, d, &levels), 3);
        // d = 8: max(2, 2) = 2 and levels 0, 1 have at most 16 partitions.
        let levels8: Vec<(usize, usize)> = (0..=8).map(|l| (l, super::binomial(8, l))).collect();
        assert_eq!(mixed_wide_from(&vec![1000u32; 256], 8, &levels8), 2);
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

    use super::{bits_to_rows, dense_ranks_u64, radix_sort_high};

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
