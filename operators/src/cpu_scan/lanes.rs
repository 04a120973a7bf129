//! The scan kernels: the portable scalar loops (also the heads and tails of the SIMD
//! kernels), and on x86_64 the SSE2 and AVX2 lanes, each generated once by `lane!`
//! from its vector type's intrinsics.
//!
//! A lane kernel is a horizontal in-register scan (Hillis-Steele inside one register:
//! log2(lanes) shift+add steps), a broadcast carry, and a 4-accumulator reduction for
//! pass one (Zhang, Wang & Ross, ADMS 2020, the "horizontal" variant).
use super::elem::KernelElem;

/// Inclusive or exclusive scan kernel: scans `n` elements from `src` to `dst` (which may
/// be equal, never partially overlapping) starting from `carry`; returns `carry` plus the
/// sum of the `n` elements.
pub(super) type ScanFn<R> = unsafe fn(*const R, *mut R, usize, R) -> R;
/// Sum of `n` elements at `src`.
pub(super) type SumFn<R> = unsafe fn(*const R, usize) -> R;

#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct Kernels<R> {
    inclusive: ScanFn<R>,
    exclusive: ScanFn<R>,
    /// As `inclusive`/`exclusive` but with non-temporal stores where the target has
    /// them; only for `src != dst`.
    inclusive_nt: ScanFn<R>,
    exclusive_nt: ScanFn<R>,
    sum: SumFn<R>,
}

impl<R> Kernels<R> {
    /// The scan kernel of `kind`, with streaming stores if `stream`.
    pub(super) fn scan(&self, kind: super::ScanKind, stream: bool) -> ScanFn<R> {
        use super::ScanKind::{Exclusive, Inclusive};
        match (kind, stream) {
            (Inclusive, false) => self.inclusive,
            (Exclusive, false) => self.exclusive,
            (Inclusive, true) => self.inclusive_nt,
            (Exclusive, true) => self.exclusive_nt,
        }
    }

    /// The pass-one reduction.
    pub(super) fn sum(&self) -> SumFn<R> {
        self.sum
    }
}

/// The portable kernels of `R` (the scalar level; there are no streaming stores).
pub(super) fn scalar_kernels<R: KernelElem>() -> Kernels<R> {
    Kernels {
        inclusive: scalar_inclusive::<R>,
        exclusive: scalar_exclusive::<R>,
        inclusive_nt: scalar_inclusive::<R>,
        exclusive_nt: scalar_exclusive::<R>,
        sum: scalar_sum::<R>,
    }
}


/// Portable kernels (also the tails of the SIMD kernels on x86_64).
unsafe fn scalar_inclusive<R: KernelElem>(src: *const R, dst: *mut R, n: usize, carry: R) -> R {
    let mut acc = carry;
    for i in 0..n {
        // SAFETY: the caller guarantees `n` readable elements at `src` and `n` writable
        // ones at `dst`; element `i` is read before it is written.
        unsafe {
            acc = acc.add(*src.add(i));
            *dst.add(i) = acc;
        }
    }
    acc
}

unsafe fn scalar_exclusive<R: KernelElem>(src: *const R, dst: *mut R, n: usize, carry: R) -> R {
    let mut acc = carry;
    for i in 0..n {
        // SAFETY: as in `scalar_inclusive`.
        unsafe {
            let x = *src.add(i);
            *dst.add(i) = acc;
            acc = acc.add(x);
        }
    }
    acc
}

unsafe fn scalar_sum<R: KernelElem>(src: *const R, n: usize) -> R {
    let mut acc = R::ZERO;
    for i in 0..n {
        // SAFETY: the caller guarantees `n` readable elements at `src`.
        acc = acc.add(unsafe { *src.add(i) });
    }
    acc
}


/// One SIMD lane: a vector type's small operations, given as intrinsics, and the
/// inclusive, exclusive and sum kernels built from them, each a `#[target_feature]`
/// function so that everything inlines into one loop; `KERNELS` is the lane's table.
///
/// The operations: `load`/`store` (unaligned), `stream` (non-temporal store to an
/// `align`-aligned address), `add`, `zero`, `splat` (broadcast a scalar), `scan` (the
/// in-register inclusive scan), `shift1` (up by one lane, zero into lane 0: inclusive
/// to exclusive), `bcast_last` (broadcast the last lane), `first` (lane 0) and `hsum`
/// (sum of the lanes).
#[cfg(target_arch = "x86_64")]
macro_rules! lane {
    (
        $name:ident: $feat:literal, $T:ty as $V:ty, lanes $lanes:literal, align $align:literal;
        load($lp:ident) = $load:expr;
        store($sp:ident, $sv:ident) = $store:expr;
        stream($tp:ident, $tv:ident) = $stream:expr;
        add($aa:ident, $ab:ident) = $add:expr;
        zero() = $zero:expr;
        splat($sx:ident) = $splat:expr;
        scan($cx:ident) = $scan:expr;
        shift1($hx:ident) = $shift1:expr;
        bcast_last($bx:ident) = $bcast:expr;
        first($fx:ident) = $first:expr;
        hsum($ux:ident) = $hsum:expr;
    ) => {
        #[allow(unsafe_op_in_unsafe_fn)]
        pub(in crate::cpu_scan) mod $name {
            use super::super::{scalar_exclusive, scalar_inclusive, scalar_sum, Kernels};
            use core::arch::x86_64::*;

            const LANES: usize = $lanes;
            const ALIGN: usize = $align;

            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn load($lp: *const $T) -> $V {
                $load
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn store($sp: *mut $T, $sv: $V) {
                $store
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn stream($tp: *mut $T, $tv: $V) {
                $stream
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn add($aa: $V, $ab: $V) -> $V {
                $add
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn zero() -> $V {
                $zero
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn splat($sx: $T) -> $V {
                $splat
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn scan($cx: $V) -> $V {
                $scan
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn shift1($hx: $V) -> $V {
                $shift1
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn bcast_last($bx: $V) -> $V {
                $bcast
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn first($fx: $V) -> $T {
                $first
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn hsum($ux: $V) -> $T {
                $hsum
            }

            /// Scalar head so that `dst` becomes vector-aligned (for streaming stores).
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn head_len(dst: *mut $T, n: usize) -> usize {
                let mis = dst as usize % ALIGN;
                if mis == 0 {
                    0
                } else {
                    ((ALIGN - mis) / core::mem::size_of::<$T>()).min(n)
                }
            }

            /// `NT`: write with non-temporal (streaming) stores, which skip the
            /// read-for-ownership of the output lines; for outputs that do not fit
            /// in the cache anyway.
            #[target_feature(enable = $feat)]
            unsafe fn inclusive<const NT: bool>(src: *const $T, dst: *mut $T, n: usize, carry: $T) -> $T {
                let head = if NT { head_len(dst, n) } else { 0 };
                let carry = scalar_inclusive(src, dst, head, carry);
                let mut c = splat(carry);
                let mut i = head;
                while i + LANES <= n {
                    let p = scan(load(src.add(i)));
                    let v = add(p, c);
                    if NT {
                        stream(dst.add(i), v);
                    } else {
                        store(dst.add(i), v);
                    }
                    c = add(c, bcast_last(p));
                    i += LANES;
                }
                if NT {
                    _mm_sfence();
                }
                scalar_inclusive(src.add(i), dst.add(i), n - i, first(c))
            }

            #[target_feature(enable = $feat)]
            unsafe fn exclusive<const NT: bool>(src: *const $T, dst: *mut $T, n: usize, carry: $T) -> $T {
                let head = if NT { head_len(dst, n) } else { 0 };
                let carry = scalar_exclusive(src, dst, head, carry);
                let mut c = splat(carry);
                let mut i = head;
                while i + LANES <= n {
                    let p = scan(load(src.add(i)));
                    let v = add(shift1(p), c);
                    if NT {
                        stream(dst.add(i), v);
                    } else {
                        store(dst.add(i), v);
                    }
                    c = add(c, bcast_last(p));
                    i += LANES;
                }
                if NT {
                    _mm_sfence();
                }
                scalar_exclusive(src.add(i), dst.add(i), n - i, first(c))
            }

            #[target_feature(enable = $feat)]
            unsafe fn sum(src: *const $T, n: usize) -> $T {
                let (mut a0, mut a1, mut a2, mut a3) = (zero(), zero(), zero(), zero());
                let mut i = 0usize;
                while i + 4 * LANES <= n {
                    a0 = add(a0, load(src.add(i)));
                    a1 = add(a1, load(src.add(i + LANES)));
                    a2 = add(a2, load(src.add(i + 2 * LANES)));
                    a3 = add(a3, load(src.add(i + 3 * LANES)));
                    i += 4 * LANES;
                }
                while i + LANES <= n {
                    a0 = add(a0, load(src.add(i)));
                    i += LANES;
                }
                let v = add(add(a0, a1), add(a2, a3));
                let tail = scalar_sum(src.add(i), n - i);
                <$T as crate::cpu_scan::KernelElem>::add(hsum(v), tail)
            }

            /// The lane's kernels; only valid where `$feat` was detected.
            pub(in crate::cpu_scan) const KERNELS: Kernels<$T> = Kernels {
                inclusive: inclusive::<false>,
                exclusive: exclusive::<false>,
                inclusive_nt: inclusive::<true>,
                exclusive_nt: exclusive::<true>,
                sum,
            };
        }
    };
}

/// The SSE2 lanes (4 x 32 bits, 2 x 64 bits) and the AVX2 lanes (8 x 32 bits, 4 x 64
/// bits) of the four kernel types.
#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    lane! {
        sse2_u32: "sse2", u32 as __m128i, lanes 4, align 16;
        load(p) = _mm_loadu_si128(p.cast());
        store(p, v) = _mm_storeu_si128(p.cast(), v);
        stream(p, v) = _mm_stream_si128(p.cast(), v);
        add(a, b) = _mm_add_epi32(a, b);
        zero() = _mm_setzero_si128();
        splat(x) = _mm_set1_epi32(x as i32);
        // 2 shift+add steps.
        scan(x) = {
            let x = _mm_add_epi32(x, _mm_slli_si128::<4>(x));
            _mm_add_epi32(x, _mm_slli_si128::<8>(x))
        };
        shift1(x) = _mm_slli_si128::<4>(x);
        bcast_last(x) = _mm_shuffle_epi32::<0xFF>(x);
        first(x) = _mm_cvtsi128_si32(x) as u32;
        hsum(x) = {
            let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0x4E>(x));
            let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0xB1>(x));
            _mm_cvtsi128_si32(x) as u32
        };
    }

    lane! {
        sse2_u64: "sse2", u64 as __m128i, lanes 2, align 16;
        load(p) = _mm_loadu_si128(p.cast());
        store(p, v) = _mm_storeu_si128(p.cast(), v);
        stream(p, v) = _mm_stream_si128(p.cast(), v);
        add(a, b) = _mm_add_epi64(a, b);
        zero() = _mm_setzero_si128();
        splat(x) = _mm_set1_epi64x(x as i64);
        // 1 shift+add step.
        scan(x) = _mm_add_epi64(x, _mm_slli_si128::<8>(x));
        shift1(x) = _mm_slli_si128::<8>(x);
        bcast_last(x) = _mm_shuffle_epi32::<0xEE>(x);
        first(x) = _mm_cvtsi128_si64(x) as u64;
        hsum(x) = _mm_cvtsi128_si64(_mm_add_epi64(x, _mm_shuffle_epi32::<0xEE>(x))) as u64;
    }

    lane! {
        sse2_f32: "sse2", f32 as __m128, lanes 4, align 16;
        load(p) = _mm_loadu_ps(p);
        store(p, v) = _mm_storeu_ps(p, v);
        stream(p, v) = _mm_stream_ps(p, v);
        add(a, b) = _mm_add_ps(a, b);
        zero() = _mm_setzero_ps();
        splat(x) = _mm_set1_ps(x);
        scan(x) = {
            let x = _mm_add_ps(x, _mm_castsi128_ps(_mm_slli_si128::<4>(_mm_castps_si128(x))));
            _mm_add_ps(x, _mm_castsi128_ps(_mm_slli_si128::<8>(_mm_castps_si128(x))))
        };
        shift1(x) = _mm_castsi128_ps(_mm_slli_si128::<4>(_mm_castps_si128(x)));
        bcast_last(x) = _mm_shuffle_ps::<0xFF>(x, x);
        first(x) = _mm_cvtss_f32(x);
        hsum(x) = {
            let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps::<0x55>(x, x)))
        };
    }

    lane! {
        sse2_f64: "sse2", f64 as __m128d, lanes 2, align 16;
        load(p) = _mm_loadu_pd(p);
        store(p, v) = _mm_storeu_pd(p, v);
        stream(p, v) = _mm_stream_pd(p, v);
        add(a, b) = _mm_add_pd(a, b);
        zero() = _mm_setzero_pd();
        splat(x) = _mm_set1_pd(x);
        scan(x) = _mm_add_pd(x, shift1(x));
        shift1(x) = _mm_castsi128_pd(_mm_slli_si128::<8>(_mm_castpd_si128(x)));
        bcast_last(x) = _mm_unpackhi_pd(x, x);
        first(x) = _mm_cvtsd_f64(x);
        hsum(x) = _mm_cvtsd_f64(_mm_add_sd(x, _mm_unpackhi_pd(x, x)));
    }

    lane! {
        avx2_u32: "avx2", u32 as __m256i, lanes 8, align 32;
        load(p) = _mm256_loadu_si256(p.cast());
        store(p, v) = _mm256_storeu_si256(p.cast(), v);
        stream(p, v) = _mm256_stream_si256(p.cast(), v);
        add(a, b) = _mm256_add_epi32(a, b);
        zero() = _mm256_setzero_si256();
        splat(x) = _mm256_set1_epi32(x as i32);
        // 3 shift+add steps. The byte shifts work within each 128-bit half, so the
        // third step adds the low half's last lane to every lane of the high half.
        scan(x) = {
            let x = _mm256_add_epi32(x, _mm256_slli_si256::<4>(x));
            let x = _mm256_add_epi32(x, _mm256_slli_si256::<8>(x));
            let t = _mm256_shuffle_epi32::<0xFF>(x); // [x3 x3 x3 x3 | x7 x7 x7 x7]
            let t = _mm256_permute2x128_si256::<0x08>(t, t); // [0 0 0 0 | x3 x3 x3 x3]
            _mm256_add_epi32(x, t)
        };
        // Across the halves.
        shift1(x) = {
            let lo_up = _mm256_permute2x128_si256::<0x08>(x, x); // [0 | x.lo]
            _mm256_alignr_epi8::<12>(x, lo_up) // [0 x0 x1 x2 | x3 x4 x5 x6]
        };
        bcast_last(x) = _mm256_permutevar8x32_epi32(x, _mm256_set1_epi32(7));
        first(x) = _mm256_cvtsi256_si32(x) as u32;
        hsum(x) = {
            let s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4E>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0xB1>(s));
            _mm_cvtsi128_si32(s) as u32
        };
    }

    lane! {
        avx2_u64: "avx2", u64 as __m256i, lanes 4, align 32;
        load(p) = _mm256_loadu_si256(p.cast());
        store(p, v) = _mm256_storeu_si256(p.cast(), v);
        stream(p, v) = _mm256_stream_si256(p.cast(), v);
        add(a, b) = _mm256_add_epi64(a, b);
        zero() = _mm256_setzero_si256();
        splat(x) = _mm256_set1_epi64x(x as i64);
        // 2 shift+add steps.
        scan(x) = {
            let x = _mm256_add_epi64(x, _mm256_slli_si256::<8>(x));
            let t = _mm256_unpackhi_epi64(x, x); // [x1 x1 | x3 x3]
            let t = _mm256_permute2x128_si256::<0x08>(t, t); // [0 0 | x1 x1]
            _mm256_add_epi64(x, t)
        };
        shift1(x) = {
            let lo_up = _mm256_permute2x128_si256::<0x08>(x, x); // [0 0 | x0 x1]
            _mm256_alignr_epi8::<8>(x, lo_up) // [0 x0 | x1 x2]
        };
        bcast_last(x) = _mm256_permute4x64_epi64::<0xFF>(x);
        first(x) = _mm_cvtsi128_si64(_mm256_castsi256_si128(x)) as u64;
        hsum(x) = {
            let s = _mm_add_epi64(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            _mm_cvtsi128_si64(_mm_add_epi64(s, _mm_shuffle_epi32::<0xEE>(s))) as u64
        };
    }

    lane! {
        avx2_f32: "avx2", f32 as __m256, lanes 8, align 32;
        load(p) = _mm256_loadu_ps(p);
        store(p, v) = _mm256_storeu_ps(p, v);
        stream(p, v) = _mm256_stream_ps(p, v);
        add(a, b) = _mm256_add_ps(a, b);
        zero() = _mm256_setzero_ps();
        splat(x) = _mm256_set1_ps(x);
        scan(x) = {
            let x = _mm256_add_ps(x, _mm256_castsi256_ps(_mm256_slli_si256::<4>(_mm256_castps_si256(x))));
            let x = _mm256_add_ps(x, _mm256_castsi256_ps(_mm256_slli_si256::<8>(_mm256_castps_si256(x))));
            let t = _mm256_permute_ps::<0xFF>(x);
            let t = _mm256_permute2f128_ps::<0x08>(t, t);
            _mm256_add_ps(x, t)
        };
        shift1(x) = {
            let xi = _mm256_castps_si256(x);
            let lo_up = _mm256_permute2x128_si256::<0x08>(xi, xi);
            _mm256_castsi256_ps(_mm256_alignr_epi8::<12>(xi, lo_up))
        };
        bcast_last(x) = _mm256_permutevar8x32_ps(x, _mm256_set1_epi32(7));
        first(x) = _mm256_cvtss_f32(x);
        hsum(x) = {
            let s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<0x55>(s, s)))
        };
    }

    lane! {
        avx2_f64: "avx2", f64 as __m256d, lanes 4, align 32;
        load(p) = _mm256_loadu_pd(p);
        store(p, v) = _mm256_storeu_pd(p, v);
        stream(p, v) = _mm256_stream_pd(p, v);
        add(a, b) = _mm256_add_pd(a, b);
        zero() = _mm256_setzero_pd();
        splat(x) = _mm256_set1_pd(x);
        scan(x) = {
            let x = _mm256_add_pd(x, _mm256_castsi256_pd(_mm256_slli_si256::<8>(_mm256_castpd_si256(x))));
            let t = _mm256_unpackhi_pd(x, x);
            let t = _mm256_permute2f128_pd::<0x08>(t, t);
            _mm256_add_pd(x, t)
        };
        shift1(x) = {
            let xi = _mm256_castpd_si256(x);
            let lo_up = _mm256_permute2x128_si256::<0x08>(xi, xi);
            _mm256_castsi256_pd(_mm256_alignr_epi8::<8>(xi, lo_up))
        };
        bcast_last(x) = _mm256_permute4x64_pd::<0xFF>(x);
        first(x) = _mm256_cvtsd_f64(x);
        hsum(x) = {
            let s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd::<1>(x));
            _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
        };
    }
}
