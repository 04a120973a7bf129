//! Element plumbing: the public element types ([`ScanElem`]) map onto the four kernel
//! types ([`KernelElem`]: `u32`, `u64`, `f32`, `f64`) with the same layout and the same
//! addition on bits, and the SIMD level of this machine is detected once.
use std::sync::atomic::{AtomicU8, Ordering};

use super::lanes::{self, Kernels};

/// An element type that can be prefix-summed.
///
/// Implemented for `u32`, `i32`, `u64`, `i64`, `usize`, `isize`, `f32` and `f64`; the
/// trait is sealed because the fast path relies on the element layout.
///
/// Integer addition **wraps** on overflow (see the module docs: SQL overflow checks
/// happen elsewhere). Float addition is plain IEEE addition.
pub trait ScanElem: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The additive identity, the first output of an exclusive scan.
    const ZERO: Self;
    /// The scan's addition: wrapping for integers, plain for floats.
    fn scan_add(self, rhs: Self) -> Self;
}

pub(super) mod sealed {
    /// Maps a public element type onto the kernel type with the same layout and the same
    /// addition on bits (`i32 -> u32`, `i64/usize/isize -> u64`, floats to themselves).
    ///
    /// # Safety (internal)
    /// `Repr` must have the size and alignment of `Self`, every bit pattern must be valid
    /// for both, and `Repr`'s addition on the bits must equal `Self`'s.
    pub trait Sealed: Copy {
        type Repr: super::KernelElem;
        fn from_repr(r: Self::Repr) -> Self;
    }
}

macro_rules! impl_int_elem {
    ($($t:ty => $repr:ty),* $(,)?) => {$(
        impl sealed::Sealed for $t {
            type Repr = $repr;
            #[inline]
            fn from_repr(r: $repr) -> $t {
                r as $t
            }
        }
        impl ScanElem for $t {
            const ZERO: $t = 0;
            /// Wrapping addition.
            #[inline]
            fn scan_add(self, rhs: $t) -> $t {
                self.wrapping_add(rhs)
            }
        }
    )*};
}

impl_int_elem!(u32 => u32, i32 => u32, u64 => u64, i64 => u64);
#[cfg(target_pointer_width = "64")]
impl_int_elem!(usize => u64, isize => u64);
#[cfg(target_pointer_width = "32")]
impl_int_elem!(usize => u32, isize => u32);

macro_rules! impl_float_elem {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {
            type Repr = $t;
            #[inline]
            fn from_repr(r: $t) -> $t {
                r
            }
        }
        impl ScanElem for $t {
            const ZERO: $t = 0.0;
            /// Plain IEEE addition.
            #[inline]
            fn scan_add(self, rhs: $t) -> $t {
                self + rhs
            }
        }
    )*};
}

impl_float_elem!(f32, f64);

/// Element types with kernels: `u32`, `u64`, `f32`, `f64`.
#[doc(hidden)]
pub trait KernelElem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    fn add(self, rhs: Self) -> Self;
    fn to_bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
    fn kernels(level: Level) -> Kernels<Self>;
}

/// The kernel level: the portable loops, or the SSE2 or AVX2 lanes.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Scalar,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Sse2,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
}

/// The best SIMD level of this machine, detected once.
pub(super) fn simd_level() -> Level {
    static CACHED: AtomicU8 = AtomicU8::new(0);
    match CACHED.load(Ordering::Relaxed) {
        1 => Level::Scalar,
        2 => Level::Sse2,
        3 => Level::Avx2,
        _ => {
            let level = detect_level();
            let code = match level {
                Level::Scalar => 1,
                Level::Sse2 => 2,
                Level::Avx2 => 3,
            };
            CACHED.store(code, Ordering::Relaxed);
            level
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_level() -> Level {
    if std::arch::is_x86_feature_detected!("avx2") {
        Level::Avx2
    } else {
        Level::Sse2
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_level() -> Level {
    Level::Scalar
}

/// `KernelElem` for a kernel type: its addition and bits, and its kernels at each level
/// (`$sse2`/`$avx2`: the lanes generated in `lanes::x86`).
macro_rules! impl_kernel_elem {
    (
        $t:ty,
        $zero:expr,
        |$a:ident, $b:ident| $add:expr,
        |$x:ident| $to:expr,
        |$bits:ident| $from:expr,
        $sse2:ident,
        $avx2:ident
    ) => {
        impl KernelElem for $t {
            const ZERO: $t = $zero;
            #[inline(always)]
            fn add(self, rhs: $t) -> $t {
                let ($a, $b) = (self, rhs);
                $add
            }
            #[inline(always)]
            fn to_bits(self) -> u64 {
                let $x = self;
                $to
            }
            #[inline(always)]
            fn from_bits($bits: u64) -> $t {
                $from
            }
            fn kernels(level: Level) -> Kernels<$t> {
                match level {
                    #[cfg(target_arch = "x86_64")]
                    Level::Sse2 => lanes::x86::$sse2::KERNELS,
                    // Only valid where AVX2 was detected.
                    #[cfg(target_arch = "x86_64")]
                    Level::Avx2 => lanes::x86::$avx2::KERNELS,
                    _ => lanes::scalar_kernels::<$t>(),
                }
            }
        }
    };
}

impl_kernel_elem!(u32, 0, |a, b| a.wrapping_add(b), |x| x as u64, |b| b as u32, sse2_u32, avx2_u32);
impl_kernel_elem!(u64, 0, |a, b| a.wrapping_add(b), |x| x, |b| b, sse2_u64, avx2_u64);
impl_kernel_elem!(f32, 0.0, |a, b| a + b, |x| x.to_bits() as u64, |b| f32::from_bits(b as u32), sse2_f32, avx2_f32);
impl_kernel_elem!(f64, 0.0, |a, b| a + b, |x| x.to_bits(), |b| f64::from_bits(b), sse2_f64, avx2_f64);
