//! The CPU's dominance lanes: SkyAlign's mask tests (Eq. 1, Eq. 4/5) branch-free over
//! contiguous masks, 32 points a scan (SSE2 on x86_64, AVX2 where the CPU has it),
//! ahead of the dominance tests of the points that pass.
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
pub(super) fn scan_q(qs: &[u32], bad: u32, mask_tests: &mut u64, mut dom: impl FnMut(usize) -> bool) -> bool {
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
pub(super) fn scan_mq(
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
pub(super) fn prefetch_row(data: &[u32], at: usize) {
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
pub(super) fn scan_mq_packed(
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
