//! CPU prefix sums (scans): the sequential reference and the multithreaded SIMD fast
//! path that every CPU fallback in Ridgeline uses (scan-based operators, and the offsets
//! step of partitioning: histogram -> prefix sum -> scatter).
//!
//! # Algorithm
//!
//! The fast path follows Zhang, Wang & Ross, "Parallel Prefix Sum with SIMD" (ADMS 2020),
//! in its cache-friendly partitioned form with the sums computed in the first pass and
//! the prefix sums in the second (their "SIMD2-P", the most robust variant):
//!
//! * The input is cut into partitions of about half the per-core L2 cache
//!   ([`ScanConfig::partition_bytes`], see [`default_partition_bytes`]).
//! * Pass one: a worker sums one partition (SIMD reduction, no writes). This pulls the
//!   partition into the worker's L2 cache.
//! * The tiny sequential scan over the partition sums gives the partition its offset.
//! * Pass two: the same worker scans the partition again, now from its cache, with an
//!   in-register SIMD scan (log2(lanes) shift+add steps, the paper's horizontal
//!   variant) plus the offset, and writes the result.
//!
//! Workers claim partitions in increasing order from a shared counter, so each worker
//! does both passes of a partition on the same core (the paper pins threads for the same
//! reason), and a worker that finishes early simply takes the next partition. Instead of
//! the paper's barrier per round of `threads` partitions, partitions publish their sum
//! and then their inclusive prefix in a slot, and a worker finds its offset by looking
//! back over its predecessors' slots (the "decoupled look-back" of single-pass GPU
//! scans): normally it only waits for its neighbour to finish that neighbour's pass
//! one. If the neighbour's thread is descheduled (a busy machine: Ridgeline's executor
//! threads share the cores with rayon's), the waiting worker sums the neighbour's
//! partition itself after waiting about twice as long as its own pass one took, so one
//! slow thread never stalls the others. No worker waits for another indefinitely,
//! whatever number of the requested workers actually get a thread.
//!
//! Out-of-place scans whose input and output together exceed the last-level cache write
//! the output with non-temporal (streaming) stores, which skip reading each output line
//! from memory before overwriting it: a third less memory traffic for a memory-bound
//! operation. Smaller outputs are written normally and stay cached for their consumer.
//!
//! The calling thread is the first worker and starts at once; the other `threads - 1`
//! are jobs spawned on rayon's current pool (the global pool unless the call is made
//! inside `ThreadPool::install`), which join as the pool gets to them. No threads or
//! pools are created per call. The caller returns as soon as every partition is done:
//! it never waits for a helper that did not get a thread in time (a late helper finds
//! nothing left to claim), so a busy pool makes the scan less parallel, not slower than
//! the caller alone.
//!
//! Inputs smaller than [`MIN_PARALLEL_PARTITIONS`] partitions, and all calls with
//! `threads <= 1`, go straight to the single-threaded one-pass SIMD scan.
//!
//! # SIMD
//!
//! On x86_64 the kernels use SSE2 (always available there) or AVX2, chosen once at run
//! time with `is_x86_feature_detected!` and cached. 32-bit and 64-bit integers, `f32`
//! and `f64` all have SIMD kernels (signed integers and `usize`/`isize` share the
//! unsigned kernels: wrapping addition is the same bit operation). Other targets use a
//! portable scalar loop.
//!
//! # Arithmetic
//!
//! * Integers use **wrapping** addition: a prefix sum never panics or saturates on
//!   overflow. SQL overflow checks, where a query needs them, happen elsewhere (for
//!   example on the widened type or on the total). Wrapping addition is associative,
//!   so every integer result is bit-identical to [`inclusive_scan_seq`] /
//!   [`exclusive_scan_seq`] whatever the configuration.
//! * Floats use plain IEEE addition, which is not associative. The fast path adds in a
//!   different order from the sequential loop (in-register tree steps, per-partition
//!   sums, multiple SIMD accumulators), so results can differ from the sequential
//!   reference by rounding, and consecutive outputs at a partition boundary are not
//!   guaranteed to be monotone even for non-negative inputs. For a given input, SIMD
//!   level and partition size the result is deterministic: it does not depend on the
//!   number of threads or on their timing (the one-pass single-threaded path, taken
//!   for `threads <= 1` and small inputs, adds in yet another order). Use the `*_seq`
//!   functions when a bit-exact sequential float result is required.
//!
//! # Lengths
//!
//! Out-of-place functions take `input: &[T]` and `out: &mut [T]`. They never panic on a
//! length mismatch: if `out.len() != input.len()` they return `Err(ScanLenMismatch)` and
//! leave `out` untouched. In-place functions cannot mismatch and return plain values.
//! Inclusive scans return `()` on success (the total is the last output); exclusive
//! scans return the total of all elements (the value an `(n + 1)`-th output would have),
//! which is what partitioning needs for the size of the scattered output.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Public API: errors, element trait, configuration
// ---------------------------------------------------------------------------------------

/// `out.len() != input.len()` in an out-of-place scan. The output is left untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScanLenMismatch {
    /// Length of the input slice.
    pub input_len: usize,
    /// Length of the output slice.
    pub output_len: usize,
}

impl fmt::Display for ScanLenMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prefix sum output length {} does not match input length {}",
            self.output_len, self.input_len
        )
    }
}

impl std::error::Error for ScanLenMismatch {}

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

/// Configuration of the parallel fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanConfig {
    /// Number of workers: the calling thread plus `threads - 1` jobs on rayon's current
    /// pool. `0` and `1` mean single-threaded.
    pub threads: usize,
    /// Size of one partition in bytes (rounded down to whole elements, at least one
    /// element; at 64 bytes or more also down to a multiple of a 64-byte cache line).
    /// About half the per-core L2 cache is best (the paper's finding); see
    /// [`default_partition_bytes`].
    pub partition_bytes: usize,
}

impl Default for ScanConfig {
    /// All threads of rayon's current pool, partitions of [`default_partition_bytes`].
    fn default() -> Self {
        ScanConfig {
            threads: rayon::current_num_threads().max(1),
            partition_bytes: default_partition_bytes(),
        }
    }
}

impl ScanConfig {
    /// The default configuration with a given number of workers.
    pub fn with_threads(threads: usize) -> Self {
        ScanConfig {
            threads,
            ..ScanConfig::default()
        }
    }

    /// Partition length in elements of `size` bytes.
    fn partition_elems(&self, size: usize) -> usize {
        let mut elems = (self.partition_bytes / size).max(1);
        let line = 64 / size;
        if elems >= line {
            elems -= elems % line;
        }
        elems
    }
}

/// Inputs with fewer than this many partitions are scanned single-threaded.
pub const MIN_PARALLEL_PARTITIONS: usize = 4;

/// Fallback L2 size when it cannot be detected: 1 MiB.
pub const DEFAULT_L2_BYTES: usize = 1 << 20;

/// Fallback last-level cache size when it cannot be detected: 16 MiB.
pub const DEFAULT_LLC_BYTES: usize = 16 << 20;

/// Per-core L2 cache size in bytes: on Linux read from
/// `/sys/devices/system/cpu/cpu0/cache/index*/` (the level-2 data or unified cache),
/// divided by the number of logical CPUs sharing it (hyperthreads); elsewhere, or if
/// that fails, [`DEFAULT_L2_BYTES`]. Detected once and cached.
pub fn l2_cache_bytes() -> usize {
    static L2: OnceLock<usize> = OnceLock::new();
    *L2.get_or_init(|| match detect_cache(CacheWanted::Level(2)) {
        Some((size, sharers)) => (size / sharers.max(1)).max(16 << 10),
        None => DEFAULT_L2_BYTES,
    })
}

/// Size in bytes of the last-level cache seen by CPU 0 (whole, not per core), detected
/// like [`l2_cache_bytes`]; [`DEFAULT_LLC_BYTES`] if unknown. Out-of-place scans whose
/// input and output together exceed it write the output with streaming stores.
pub fn last_level_cache_bytes() -> usize {
    static LLC: OnceLock<usize> = OnceLock::new();
    *LLC.get_or_init(|| match detect_cache(CacheWanted::Last) {
        Some((size, _)) => size.max(64 << 10),
        None => DEFAULT_LLC_BYTES,
    })
}

/// The default partition size: half of [`l2_cache_bytes`], clamped to 8 KiB ..= 8 MiB.
pub fn default_partition_bytes() -> usize {
    (l2_cache_bytes() / 2).clamp(8 << 10, 8 << 20)
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Clone, Copy)]
enum CacheWanted {
    Level(u32),
    Last,
}

/// `(size in bytes, number of logical CPUs sharing it)` of a data or unified cache of
/// CPU 0.
#[cfg(target_os = "linux")]
fn detect_cache(wanted: CacheWanted) -> Option<(usize, usize)> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, usize, usize)> = None;
    for entry in dir.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let path = entry.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).ok();
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        if read("type").as_deref().map(str::trim) == Some("Instruction") {
            continue;
        }
        let Some(size) = read("size").as_deref().and_then(parse_cache_size) else {
            continue;
        };
        let sharers = read("shared_cpu_list")
            .as_deref()
            .and_then(count_cpu_list)
            .unwrap_or(1);
        let better = match wanted {
            CacheWanted::Level(l) => level == l,
            CacheWanted::Last => best.is_none_or(|(b, _, _)| level > b),
        };
        if better {
            best = Some((level, size, sharers));
        }
    }
    best.map(|(_, size, sharers)| (size, sharers))
}

#[cfg(not(target_os = "linux"))]
fn detect_cache(_wanted: CacheWanted) -> Option<(usize, usize)> {
    None
}

/// Parses sysfs cache sizes such as `512K`, `1M`, `1024`, `2 MiB`.
#[cfg_attr(not(any(test, target_os = "linux")), allow(dead_code))]
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let value: usize = s[..digits_end].parse().ok()?;
    let unit = s[digits_end..].trim().to_ascii_uppercase();
    let mult = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    let bytes = value.checked_mul(mult)?;
    (bytes > 0).then_some(bytes)
}

/// Counts the CPUs in a sysfs CPU list such as `0-3,8,10-11`.
#[cfg_attr(not(any(test, target_os = "linux")), allow(dead_code))]
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut count = 0usize;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                count += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                count += 1;
            }
        }
    }
    (count > 0).then_some(count)
}

// ---------------------------------------------------------------------------------------
// Public API: sequential reference
// ---------------------------------------------------------------------------------------

fn check_len(input_len: usize, output_len: usize) -> Result<(), ScanLenMismatch> {
    if input_len == output_len {
        Ok(())
    } else {
        Err(ScanLenMismatch {
            input_len,
            output_len,
        })
    }
}

/// Sequential inclusive scan, the reference: `out[i] = input[0] + ... + input[i]`,
/// added left to right. Errors (leaving `out` untouched) if the lengths differ.
pub fn inclusive_scan_seq<T: ScanElem>(input: &[T], out: &mut [T]) -> Result<(), ScanLenMismatch> {
    check_len(input.len(), out.len())?;
    let mut acc = T::ZERO;
    for (o, &x) in out.iter_mut().zip(input) {
        acc = acc.scan_add(x);
        *o = acc;
    }
    Ok(())
}

/// Sequential exclusive scan, the reference: `out[i] = input[0] + ... + input[i - 1]`
/// (`out[0] = ZERO`), added left to right. Returns the total of all elements. Errors
/// (leaving `out` untouched) if the lengths differ.
pub fn exclusive_scan_seq<T: ScanElem>(input: &[T], out: &mut [T]) -> Result<T, ScanLenMismatch> {
    check_len(input.len(), out.len())?;
    let mut acc = T::ZERO;
    for (o, &x) in out.iter_mut().zip(input) {
        *o = acc;
        acc = acc.scan_add(x);
    }
    Ok(acc)
}

/// In-place [`inclusive_scan_seq`].
pub fn inclusive_scan_seq_in_place<T: ScanElem>(data: &mut [T]) {
    let mut acc = T::ZERO;
    for x in data.iter_mut() {
        acc = acc.scan_add(*x);
        *x = acc;
    }
}

/// In-place [`exclusive_scan_seq`]; returns the total.
pub fn exclusive_scan_seq_in_place<T: ScanElem>(data: &mut [T]) -> T {
    let mut acc = T::ZERO;
    for x in data.iter_mut() {
        let v = *x;
        *x = acc;
        acc = acc.scan_add(v);
    }
    acc
}

// ---------------------------------------------------------------------------------------
// Public API: fast path
// ---------------------------------------------------------------------------------------

/// Inclusive scan with [`ScanConfig::default`]: `out[i] = input[0] + ... + input[i]`.
/// Errors (leaving `out` untouched) if the lengths differ.
pub fn inclusive_scan<T: ScanElem>(input: &[T], out: &mut [T]) -> Result<(), ScanLenMismatch> {
    inclusive_scan_with(&ScanConfig::default(), input, out)
}

/// Exclusive scan with [`ScanConfig::default`]: `out[i] = input[0] + ... + input[i - 1]`,
/// `out[0] = ZERO`. Returns the total. Errors (leaving `out` untouched) if the lengths
/// differ.
pub fn exclusive_scan<T: ScanElem>(input: &[T], out: &mut [T]) -> Result<T, ScanLenMismatch> {
    exclusive_scan_with(&ScanConfig::default(), input, out)
}

/// In-place [`inclusive_scan`].
pub fn inclusive_scan_in_place<T: ScanElem>(data: &mut [T]) {
    inclusive_scan_in_place_with(&ScanConfig::default(), data)
}

/// In-place [`exclusive_scan`]; returns the total.
pub fn exclusive_scan_in_place<T: ScanElem>(data: &mut [T]) -> T {
    exclusive_scan_in_place_with(&ScanConfig::default(), data)
}

/// [`inclusive_scan`] with an explicit configuration.
pub fn inclusive_scan_with<T: ScanElem>(
    cfg: &ScanConfig,
    input: &[T],
    out: &mut [T],
) -> Result<(), ScanLenMismatch> {
    check_len(input.len(), out.len())?;
    scan_out_of_place(cfg, simd_level(), Mode::Inclusive, input, out);
    Ok(())
}

/// [`exclusive_scan`] with an explicit configuration.
pub fn exclusive_scan_with<T: ScanElem>(
    cfg: &ScanConfig,
    input: &[T],
    out: &mut [T],
) -> Result<T, ScanLenMismatch> {
    check_len(input.len(), out.len())?;
    Ok(scan_out_of_place(
        cfg,
        simd_level(),
        Mode::Exclusive,
        input,
        out,
    ))
}

/// [`inclusive_scan_in_place`] with an explicit configuration.
pub fn inclusive_scan_in_place_with<T: ScanElem>(cfg: &ScanConfig, data: &mut [T]) {
    scan_in_place(cfg, simd_level(), Mode::Inclusive, data);
}

/// [`exclusive_scan_in_place`] with an explicit configuration; returns the total.
pub fn exclusive_scan_in_place_with<T: ScanElem>(cfg: &ScanConfig, data: &mut [T]) -> T {
    scan_in_place(cfg, simd_level(), Mode::Exclusive, data)
}

/// Name of the SIMD kernels the fast path uses on this machine: `"avx2"`, `"sse2"` or
/// `"scalar"`. For logs and benchmark reports.
pub fn simd_level_name() -> &'static str {
    match simd_level() {
        Level::Scalar => "scalar",
        Level::Sse2 => "sse2",
        Level::Avx2 => "avx2",
    }
}

// ---------------------------------------------------------------------------------------
// Element plumbing
// ---------------------------------------------------------------------------------------

mod sealed {
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

/// Inclusive or exclusive scan kernel: scans `n` elements from `src` to `dst` (which may
/// be equal, never partially overlapping) starting from `carry`; returns `carry` plus the
/// sum of the `n` elements.
type ScanFn<R> = unsafe fn(*const R, *mut R, usize, R) -> R;
/// Sum of `n` elements at `src`.
type SumFn<R> = unsafe fn(*const R, usize) -> R;

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
fn simd_level() -> Level {
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

macro_rules! impl_kernel_elem {
    (
        $t:ty,
        $zero:expr,
        |$a:ident, $b:ident| $add:expr,
        |$x:ident| $to:expr,
        |$bits:ident| $from:expr,
        $x86:ident
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
                    Level::Sse2 => x86::$x86::SSE2,
                    #[cfg(target_arch = "x86_64")]
                    Level::Avx2 => x86::$x86::AVX2,
                    _ => Kernels {
                        inclusive: scalar_inclusive::<$t>,
                        exclusive: scalar_exclusive::<$t>,
                        inclusive_nt: scalar_inclusive::<$t>,
                        exclusive_nt: scalar_exclusive::<$t>,
                        sum: scalar_sum::<$t>,
                    },
                }
            }
        }
    };
}

impl_kernel_elem!(
    u32,
    0,
    |a, b| a.wrapping_add(b),
    |x| x as u64,
    |b| b as u32,
    u32k
);
impl_kernel_elem!(u64, 0, |a, b| a.wrapping_add(b), |x| x, |b| b, u64k);
impl_kernel_elem!(
    f32,
    0.0,
    |a, b| a + b,
    |x| x.to_bits() as u64,
    |b| f32::from_bits(b as u32),
    f32k
);
impl_kernel_elem!(
    f64,
    0.0,
    |a, b| a + b,
    |x| x.to_bits(),
    |b| f64::from_bits(b),
    f64k
);

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

// ---------------------------------------------------------------------------------------
// x86_64 SIMD kernels
// ---------------------------------------------------------------------------------------

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! Horizontal in-register scans (Hillis-Steele inside one register: log2(lanes)
    //! shift+add steps), a broadcast carry, and 4-accumulator reductions.
    //!
    //! Each `ops` module below provides the same set of small functions for one vector
    //! type; `kernels!` builds the inclusive, exclusive and sum kernels from them, each a
    //! `#[target_feature]` function so that everything inlines into one loop.

    use super::{scalar_exclusive, scalar_inclusive, scalar_sum, Kernels};
    use core::arch::x86_64::_mm_sfence;

    macro_rules! kernels {
        ($feat:literal, $ops:ident, $T:ty, $name:ident) => {
            #[allow(unsafe_op_in_unsafe_fn)]
            mod $name {
                use super::*;

                /// Scalar head so that `dst` becomes vector-aligned (for streaming stores).
                #[inline]
                #[target_feature(enable = $feat)]
                unsafe fn head_len(dst: *mut $T, n: usize) -> usize {
                    let mis = dst as usize % $ops::ALIGN;
                    if mis == 0 {
                        0
                    } else {
                        (($ops::ALIGN - mis) / core::mem::size_of::<$T>()).min(n)
                    }
                }

                /// `NT`: write with non-temporal (streaming) stores, which skip the
                /// read-for-ownership of the output lines; for outputs that do not fit
                /// in the cache anyway.
                #[target_feature(enable = $feat)]
                pub(super) unsafe fn inclusive<const NT: bool>(
                    src: *const $T,
                    dst: *mut $T,
                    n: usize,
                    carry: $T,
                ) -> $T {
                    let head = if NT { head_len(dst, n) } else { 0 };
                    let carry = scalar_inclusive(src, dst, head, carry);
                    let lanes = $ops::LANES;
                    let mut c = $ops::splat(carry);
                    let mut i = head;
                    while i + lanes <= n {
                        let p = $ops::scan($ops::load(src.add(i)));
                        let v = $ops::add(p, c);
                        if NT {
                            $ops::stream(dst.add(i), v);
                        } else {
                            $ops::store(dst.add(i), v);
                        }
                        c = $ops::add(c, $ops::bcast_last(p));
                        i += lanes;
                    }
                    if NT {
                        _mm_sfence();
                    }
                    scalar_inclusive(src.add(i), dst.add(i), n - i, $ops::first(c))
                }

                #[target_feature(enable = $feat)]
                pub(super) unsafe fn exclusive<const NT: bool>(
                    src: *const $T,
                    dst: *mut $T,
                    n: usize,
                    carry: $T,
                ) -> $T {
                    let head = if NT { head_len(dst, n) } else { 0 };
                    let carry = scalar_exclusive(src, dst, head, carry);
                    let lanes = $ops::LANES;
                    let mut c = $ops::splat(carry);
                    let mut i = head;
                    while i + lanes <= n {
                        let p = $ops::scan($ops::load(src.add(i)));
                        let v = $ops::add($ops::shift1(p), c);
                        if NT {
                            $ops::stream(dst.add(i), v);
                        } else {
                            $ops::store(dst.add(i), v);
                        }
                        c = $ops::add(c, $ops::bcast_last(p));
                        i += lanes;
                    }
                    if NT {
                        _mm_sfence();
                    }
                    scalar_exclusive(src.add(i), dst.add(i), n - i, $ops::first(c))
                }

                #[target_feature(enable = $feat)]
                pub(super) unsafe fn sum(src: *const $T, n: usize) -> $T {
                    let lanes = $ops::LANES;
                    let (mut a0, mut a1, mut a2, mut a3) =
                        ($ops::zero(), $ops::zero(), $ops::zero(), $ops::zero());
                    let mut i = 0usize;
                    while i + 4 * lanes <= n {
                        a0 = $ops::add(a0, $ops::load(src.add(i)));
                        a1 = $ops::add(a1, $ops::load(src.add(i + lanes)));
                        a2 = $ops::add(a2, $ops::load(src.add(i + 2 * lanes)));
                        a3 = $ops::add(a3, $ops::load(src.add(i + 3 * lanes)));
                        i += 4 * lanes;
                    }
                    while i + lanes <= n {
                        a0 = $ops::add(a0, $ops::load(src.add(i)));
                        i += lanes;
                    }
                    let v = $ops::add($ops::add(a0, a1), $ops::add(a2, a3));
                    let tail = scalar_sum(src.add(i), n - i);
                    <$T as super::super::KernelElem>::add($ops::hsum(v), tail)
                }
            }
        };
    }

    // --- SSE2, 4 x u32 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod sse2_u32 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 4;
        pub const ALIGN: usize = 16;
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn stream(p: *mut u32, v: __m128i) {
            _mm_stream_si128(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn load(p: *const u32) -> __m128i {
            _mm_loadu_si128(p.cast())
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn store(p: *mut u32, v: __m128i) {
            _mm_storeu_si128(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn add(a: __m128i, b: __m128i) -> __m128i {
            _mm_add_epi32(a, b)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn zero() -> __m128i {
            _mm_setzero_si128()
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn splat(x: u32) -> __m128i {
            _mm_set1_epi32(x as i32)
        }
        /// In-register inclusive scan: 2 shift+add steps.
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn scan(x: __m128i) -> __m128i {
            let x = _mm_add_epi32(x, _mm_slli_si128::<4>(x));
            _mm_add_epi32(x, _mm_slli_si128::<8>(x))
        }
        /// Shift up by one lane, zero into lane 0 (inclusive -> exclusive).
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn shift1(x: __m128i) -> __m128i {
            _mm_slli_si128::<4>(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn bcast_last(x: __m128i) -> __m128i {
            _mm_shuffle_epi32::<0xFF>(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn first(x: __m128i) -> u32 {
            _mm_cvtsi128_si32(x) as u32
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn hsum(x: __m128i) -> u32 {
            let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0x4E>(x));
            let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0xB1>(x));
            _mm_cvtsi128_si32(x) as u32
        }
    }

    // --- SSE2, 2 x u64 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod sse2_u64 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 2;
        pub const ALIGN: usize = 16;
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn stream(p: *mut u64, v: __m128i) {
            _mm_stream_si128(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn load(p: *const u64) -> __m128i {
            _mm_loadu_si128(p.cast())
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn store(p: *mut u64, v: __m128i) {
            _mm_storeu_si128(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn add(a: __m128i, b: __m128i) -> __m128i {
            _mm_add_epi64(a, b)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn zero() -> __m128i {
            _mm_setzero_si128()
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn splat(x: u64) -> __m128i {
            _mm_set1_epi64x(x as i64)
        }
        /// In-register inclusive scan: 1 shift+add step.
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn scan(x: __m128i) -> __m128i {
            _mm_add_epi64(x, _mm_slli_si128::<8>(x))
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn shift1(x: __m128i) -> __m128i {
            _mm_slli_si128::<8>(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn bcast_last(x: __m128i) -> __m128i {
            _mm_shuffle_epi32::<0xEE>(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn first(x: __m128i) -> u64 {
            _mm_cvtsi128_si64(x) as u64
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn hsum(x: __m128i) -> u64 {
            _mm_cvtsi128_si64(_mm_add_epi64(x, _mm_shuffle_epi32::<0xEE>(x))) as u64
        }
    }

    // --- SSE2, 4 x f32 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod sse2_f32 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 4;
        pub const ALIGN: usize = 16;
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn stream(p: *mut f32, v: __m128) {
            _mm_stream_ps(p, v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn load(p: *const f32) -> __m128 {
            _mm_loadu_ps(p)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn store(p: *mut f32, v: __m128) {
            _mm_storeu_ps(p, v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn add(a: __m128, b: __m128) -> __m128 {
            _mm_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn zero() -> __m128 {
            _mm_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn splat(x: f32) -> __m128 {
            _mm_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        unsafe fn shl<const B: i32>(x: __m128) -> __m128 {
            _mm_castsi128_ps(_mm_slli_si128::<B>(_mm_castps_si128(x)))
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn scan(x: __m128) -> __m128 {
            let x = _mm_add_ps(x, shl::<4>(x));
            _mm_add_ps(x, shl::<8>(x))
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn shift1(x: __m128) -> __m128 {
            shl::<4>(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn bcast_last(x: __m128) -> __m128 {
            _mm_shuffle_ps::<0xFF>(x, x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn first(x: __m128) -> f32 {
            _mm_cvtss_f32(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn hsum(x: __m128) -> f32 {
            let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps::<0x55>(x, x)))
        }
    }

    // --- SSE2, 2 x f64 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod sse2_f64 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 2;
        pub const ALIGN: usize = 16;
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn stream(p: *mut f64, v: __m128d) {
            _mm_stream_pd(p, v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn load(p: *const f64) -> __m128d {
            _mm_loadu_pd(p)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn store(p: *mut f64, v: __m128d) {
            _mm_storeu_pd(p, v)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn add(a: __m128d, b: __m128d) -> __m128d {
            _mm_add_pd(a, b)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn zero() -> __m128d {
            _mm_setzero_pd()
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn splat(x: f64) -> __m128d {
            _mm_set1_pd(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn shift1(x: __m128d) -> __m128d {
            _mm_castsi128_pd(_mm_slli_si128::<8>(_mm_castpd_si128(x)))
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn scan(x: __m128d) -> __m128d {
            _mm_add_pd(x, shift1(x))
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn bcast_last(x: __m128d) -> __m128d {
            _mm_unpackhi_pd(x, x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn first(x: __m128d) -> f64 {
            _mm_cvtsd_f64(x)
        }
        #[inline]
        #[target_feature(enable = "sse2")]
        pub unsafe fn hsum(x: __m128d) -> f64 {
            _mm_cvtsd_f64(_mm_add_sd(x, _mm_unpackhi_pd(x, x)))
        }
    }

    // --- AVX2, 8 x u32 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod avx2_u32 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 8;
        pub const ALIGN: usize = 32;
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn stream(p: *mut u32, v: __m256i) {
            _mm256_stream_si256(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn load(p: *const u32) -> __m256i {
            _mm256_loadu_si256(p.cast())
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn store(p: *mut u32, v: __m256i) {
            _mm256_storeu_si256(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn add(a: __m256i, b: __m256i) -> __m256i {
            _mm256_add_epi32(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn zero() -> __m256i {
            _mm256_setzero_si256()
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn splat(x: u32) -> __m256i {
            _mm256_set1_epi32(x as i32)
        }
        /// In-register inclusive scan: 3 shift+add steps. The byte shifts work within
        /// each 128-bit half, so the third step adds the low half's last lane to every
        /// lane of the high half.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn scan(x: __m256i) -> __m256i {
            let x = _mm256_add_epi32(x, _mm256_slli_si256::<4>(x));
            let x = _mm256_add_epi32(x, _mm256_slli_si256::<8>(x));
            let t = _mm256_shuffle_epi32::<0xFF>(x); // [x3 x3 x3 x3 | x7 x7 x7 x7]
            let t = _mm256_permute2x128_si256::<0x08>(t, t); // [0 0 0 0 | x3 x3 x3 x3]
            _mm256_add_epi32(x, t)
        }
        /// Shift up by one lane across the halves, zero into lane 0.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn shift1(x: __m256i) -> __m256i {
            let lo_up = _mm256_permute2x128_si256::<0x08>(x, x); // [0 | x.lo]
            _mm256_alignr_epi8::<12>(x, lo_up) // [0 x0 x1 x2 | x3 x4 x5 x6]
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn bcast_last(x: __m256i) -> __m256i {
            _mm256_permutevar8x32_epi32(x, _mm256_set1_epi32(7))
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn first(x: __m256i) -> u32 {
            _mm256_cvtsi256_si32(x) as u32
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn hsum(x: __m256i) -> u32 {
            let s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4E>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0xB1>(s));
            _mm_cvtsi128_si32(s) as u32
        }
    }

    // --- AVX2, 4 x u64 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod avx2_u64 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 4;
        pub const ALIGN: usize = 32;
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn stream(p: *mut u64, v: __m256i) {
            _mm256_stream_si256(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn load(p: *const u64) -> __m256i {
            _mm256_loadu_si256(p.cast())
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn store(p: *mut u64, v: __m256i) {
            _mm256_storeu_si256(p.cast(), v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn add(a: __m256i, b: __m256i) -> __m256i {
            _mm256_add_epi64(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn zero() -> __m256i {
            _mm256_setzero_si256()
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn splat(x: u64) -> __m256i {
            _mm256_set1_epi64x(x as i64)
        }
        /// In-register inclusive scan: 2 shift+add steps.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn scan(x: __m256i) -> __m256i {
            let x = _mm256_add_epi64(x, _mm256_slli_si256::<8>(x));
            let t = _mm256_unpackhi_epi64(x, x); // [x1 x1 | x3 x3]
            let t = _mm256_permute2x128_si256::<0x08>(t, t); // [0 0 | x1 x1]
            _mm256_add_epi64(x, t)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn shift1(x: __m256i) -> __m256i {
            let lo_up = _mm256_permute2x128_si256::<0x08>(x, x); // [0 0 | x0 x1]
            _mm256_alignr_epi8::<8>(x, lo_up) // [0 x0 | x1 x2]
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn bcast_last(x: __m256i) -> __m256i {
            _mm256_permute4x64_epi64::<0xFF>(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn first(x: __m256i) -> u64 {
            _mm_cvtsi128_si64(_mm256_castsi256_si128(x)) as u64
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn hsum(x: __m256i) -> u64 {
            let s = _mm_add_epi64(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            _mm_cvtsi128_si64(_mm_add_epi64(s, _mm_shuffle_epi32::<0xEE>(s))) as u64
        }
    }

    // --- AVX2, 8 x f32 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod avx2_f32 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 8;
        pub const ALIGN: usize = 32;
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn stream(p: *mut f32, v: __m256) {
            _mm256_stream_ps(p, v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn load(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn store(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn shl<const B: i32>(x: __m256) -> __m256 {
            _mm256_castsi256_ps(_mm256_slli_si256::<B>(_mm256_castps_si256(x)))
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn scan(x: __m256) -> __m256 {
            let x = _mm256_add_ps(x, shl::<4>(x));
            let x = _mm256_add_ps(x, shl::<8>(x));
            let t = _mm256_permute_ps::<0xFF>(x);
            let t = _mm256_permute2f128_ps::<0x08>(t, t);
            _mm256_add_ps(x, t)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn shift1(x: __m256) -> __m256 {
            let xi = _mm256_castps_si256(x);
            let lo_up = _mm256_permute2x128_si256::<0x08>(xi, xi);
            _mm256_castsi256_ps(_mm256_alignr_epi8::<12>(xi, lo_up))
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn bcast_last(x: __m256) -> __m256 {
            _mm256_permutevar8x32_ps(x, _mm256_set1_epi32(7))
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn first(x: __m256) -> f32 {
            _mm256_cvtss_f32(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn hsum(x: __m256) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<0x55>(s, s)))
        }
    }

    // --- AVX2, 4 x f64 -------------------------------------------------------------
    #[allow(unsafe_op_in_unsafe_fn)]
    mod avx2_f64 {
        use core::arch::x86_64::*;
        pub const LANES: usize = 4;
        pub const ALIGN: usize = 32;
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn stream(p: *mut f64, v: __m256d) {
            _mm256_stream_pd(p, v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn load(p: *const f64) -> __m256d {
            _mm256_loadu_pd(p)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn store(p: *mut f64, v: __m256d) {
            _mm256_storeu_pd(p, v)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn add(a: __m256d, b: __m256d) -> __m256d {
            _mm256_add_pd(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn zero() -> __m256d {
            _mm256_setzero_pd()
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn splat(x: f64) -> __m256d {
            _mm256_set1_pd(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn scan(x: __m256d) -> __m256d {
            let x = _mm256_add_pd(
                x,
                _mm256_castsi256_pd(_mm256_slli_si256::<8>(_mm256_castpd_si256(x))),
            );
            let t = _mm256_unpackhi_pd(x, x);
            let t = _mm256_permute2f128_pd::<0x08>(t, t);
            _mm256_add_pd(x, t)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn shift1(x: __m256d) -> __m256d {
            let xi = _mm256_castpd_si256(x);
            let lo_up = _mm256_permute2x128_si256::<0x08>(xi, xi);
            _mm256_castsi256_pd(_mm256_alignr_epi8::<8>(xi, lo_up))
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn bcast_last(x: __m256d) -> __m256d {
            _mm256_permute4x64_pd::<0xFF>(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn first(x: __m256d) -> f64 {
            _mm256_cvtsd_f64(x)
        }
        #[inline]
        #[target_feature(enable = "avx2")]
        pub unsafe fn hsum(x: __m256d) -> f64 {
            let s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd::<1>(x));
            _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
        }
    }

    kernels!("sse2", sse2_u32, u32, k_sse2_u32);
    kernels!("sse2", sse2_u64, u64, k_sse2_u64);
    kernels!("sse2", sse2_f32, f32, k_sse2_f32);
    kernels!("sse2", sse2_f64, f64, k_sse2_f64);
    kernels!("avx2", avx2_u32, u32, k_avx2_u32);
    kernels!("avx2", avx2_u64, u64, k_avx2_u64);
    kernels!("avx2", avx2_f32, f32, k_avx2_f32);
    kernels!("avx2", avx2_f64, f64, k_avx2_f64);

    macro_rules! kernel_table {
        ($name:ident, $T:ty, $sse2:ident, $avx2:ident) => {
            pub(super) mod $name {
                use super::*;
                pub(in super::super) const SSE2: Kernels<$T> = Kernels {
                    inclusive: $sse2::inclusive::<false>,
                    exclusive: $sse2::exclusive::<false>,
                    inclusive_nt: $sse2::inclusive::<true>,
                    exclusive_nt: $sse2::exclusive::<true>,
                    sum: $sse2::sum,
                };
                /// Only valid where AVX2 was detected.
                pub(in super::super) const AVX2: Kernels<$T> = Kernels {
                    inclusive: $avx2::inclusive::<false>,
                    exclusive: $avx2::exclusive::<false>,
                    inclusive_nt: $avx2::inclusive::<true>,
                    exclusive_nt: $avx2::exclusive::<true>,
                    sum: $avx2::sum,
                };
            }
        };
    }

    kernel_table!(u32k, u32, k_sse2_u32, k_avx2_u32);
    kernel_table!(u64k, u64, k_sse2_u64, k_avx2_u64);
    kernel_table!(f32k, f32, k_sse2_f32, k_avx2_f32);
    kernel_table!(f64k, f64, k_sse2_f64, k_avx2_f64);
}

// ---------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Inclusive,
    Exclusive,
}

/// Internal knobs of one scan, chosen by the public functions (tests set them directly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tuning {
    /// Write the output with non-temporal stores (out-of-place only).
    stream: bool,
    /// Steal a predecessor's pass one as soon as it is missing instead of first waiting
    /// about as long as our own pass one took (tests use it to exercise stealing).
    eager_steal: bool,
}

impl Tuning {
    const PLAIN: Tuning = Tuning {
        stream: false,
        eager_steal: false,
    };
}

fn scan_out_of_place<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    mode: Mode,
    input: &[T],
    out: &mut [T],
) -> T {
    let tuning = Tuning {
        stream: use_streaming_stores(std::mem::size_of_val(out)),
        eager_steal: false,
    };
    scan_out_of_place_tuned(cfg, level, mode, input, out, tuning)
}

fn scan_out_of_place_tuned<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    mode: Mode,
    input: &[T],
    out: &mut [T],
    tuning: Tuning,
) -> T {
    debug_assert_eq!(input.len(), out.len());
    let n = input.len().min(out.len());
    // `Sealed` guarantees `T` and `T::Repr` have the same layout; the slices do not overlap.
    let src = input.as_ptr().cast::<T::Repr>();
    let dst = out.as_mut_ptr().cast::<T::Repr>();
    // SAFETY: `n` elements are readable at `src` and writable at `dst`, disjoint.
    T::from_repr(unsafe { scan_raw(cfg, level, mode, src, dst, n, tuning) })
}

fn scan_in_place<T: ScanElem>(cfg: &ScanConfig, level: Level, mode: Mode, data: &mut [T]) -> T {
    scan_in_place_tuned(cfg, level, mode, data, Tuning::PLAIN)
}

fn scan_in_place_tuned<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    mode: Mode,
    data: &mut [T],
    tuning: Tuning,
) -> T {
    let n = data.len();
    let dst = data.as_mut_ptr().cast::<T::Repr>();
    let tuning = Tuning {
        stream: false,
        ..tuning
    };
    // SAFETY: `n` elements are readable and writable at `dst`; the kernels read each
    // element before writing it.
    T::from_repr(unsafe { scan_raw(cfg, level, mode, dst.cast_const(), dst, n, tuning) })
}

/// Out-of-place outputs are written with non-temporal (streaming) stores when input and
/// output together exceed the last-level cache: they would not stay cached anyway, and
/// streaming stores skip reading the output lines from memory before overwriting them
/// (a third of the memory traffic of a scan).
fn use_streaming_stores(out_bytes: usize) -> bool {
    cfg!(target_arch = "x86_64") && out_bytes.saturating_mul(2) > last_level_cache_bytes()
}

/// Scans `n` elements from `src` to `dst` (equal or disjoint); returns the total.
///
/// # Safety
/// `n` elements readable at `src`, writable at `dst`; `src == dst` or the ranges are
/// disjoint; `level` is supported by this CPU; `tuning.stream` only if `src != dst`.
unsafe fn scan_raw<R: KernelElem>(
    cfg: &ScanConfig,
    level: Level,
    mode: Mode,
    src: *const R,
    dst: *mut R,
    n: usize,
    tuning: Tuning,
) -> R {
    debug_assert!(!tuning.stream || n == 0 || src != dst.cast_const());
    let k = R::kernels(level);
    let scan = match (mode, tuning.stream) {
        (Mode::Inclusive, false) => k.inclusive,
        (Mode::Exclusive, false) => k.exclusive,
        (Mode::Inclusive, true) => k.inclusive_nt,
        (Mode::Exclusive, true) => k.exclusive_nt,
    };
    let part = cfg.partition_elems(std::mem::size_of::<R>());
    let parts = n.div_ceil(part);
    if cfg.threads <= 1 || parts < MIN_PARALLEL_PARTITIONS {
        // SAFETY: forwarded from the caller.
        return unsafe { scan(src, dst, n, R::ZERO) };
    }
    let job = Arc::new(Job {
        next: Padded(AtomicUsize::new(0)),
        done: Padded(AtomicUsize::new(0)),
        active: AtomicUsize::new(0),
        poisoned: AtomicBool::new(false),
        slots: (0..parts).map(|_| Slot::default()).collect(),
        sum: k.sum,
        scan,
        src: SendConst(src),
        dst: SendMut(dst),
        n,
        part,
        in_place: src == dst.cast_const(),
        eager_steal: tuning.eager_steal,
    });
    // If this thread unwinds, the helpers must stop touching the buffers first.
    let guard = CallerGuard(&job);
    // Helpers join as the pool gets to them; this thread starts at once.
    for _ in 1..cfg.threads.min(parts) {
        let job = Arc::clone(&job);
        rayon::spawn(move || job.help());
    }
    job.help();
    // Every partition is claimed now; wait for those still in progress on helpers (not
    // for helpers that have not started: they will find nothing left to claim).
    let mut spins = 0u32;
    while job.done.0.load(Ordering::Acquire) < parts {
        if job.poisoned.load(Ordering::Relaxed) {
            panic!("a cpu_scan worker panicked");
        }
        backoff(&mut spins);
    }
    drop(guard);
    let last = &job.slots[parts - 1];
    debug_assert_eq!(last.state.load(Ordering::Acquire), INCLUSIVE);
    R::from_bits(last.inclusive.load(Ordering::Acquire))
}

/// On unwinding out of `scan_raw`: close the job and wait until no helper is inside it,
/// so that none touches the caller's buffers after they are gone.
struct CallerGuard<'a, R>(&'a Job<R>);

impl<R> Drop for CallerGuard<'_, R> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.next.0.store(CLOSED, Ordering::SeqCst);
            let mut spins = 0u32;
            while self.0.active.load(Ordering::SeqCst) != 0 {
                backoff(&mut spins);
            }
        }
    }
}

/// `Job::next` after a failure: no claim can succeed any more (and `fetch_add` on it
/// cannot overflow in practice).
const CLOSED: usize = usize::MAX / 2;

/// Aligns a value to its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

/// Slot states: nothing published yet, the partition's sum, the inclusive prefix (the
/// sum of this and all earlier partitions).
const EMPTY: u8 = 0;
const AGGREGATE: u8 = 1;
const INCLUSIVE: u8 = 2;

/// What a partition has published. Values are element bits (see `KernelElem::to_bits`),
/// written before the release store of `state` that announces them.
#[derive(Default)]
struct Slot {
    state: AtomicU8,
    aggregate: AtomicU64,
    inclusive: AtomicU64,
    /// Workers currently reading this partition to compute its sum for themselves; the
    /// owner must not overwrite an in-place partition while any are.
    stealers: AtomicUsize,
}

#[derive(Clone, Copy)]
struct SendConst<R>(*const R);
#[derive(Clone, Copy)]
struct SendMut<R>(*mut R);
// SAFETY: the workers only write disjoint partitions of the buffers behind these
// pointers (reads of another partition are coordinated through `Slot::stealers`), and
// only while the caller of `scan_raw` waits for them (see `Job`).
unsafe impl<R: Send> Send for SendConst<R> {}
unsafe impl<R: Send> Sync for SendConst<R> {}
unsafe impl<R: Send> Send for SendMut<R> {}
unsafe impl<R: Send> Sync for SendMut<R> {}

/// One parallel scan, shared (`Arc`) by the calling thread and the helpers it spawned
/// on rayon's pool. The caller returns once every partition is `done`; a helper that
/// starts later still holds the `Arc` but only touches the atomics: its claim fails, so
/// it never dereferences the (by then dangling) buffer pointers.
struct Job<R> {
    /// Next partition to claim (`CLOSED` after a failure).
    next: Padded<AtomicUsize>,
    /// Partitions whose pass two has finished.
    done: Padded<AtomicUsize>,
    /// Workers inside `help` (only needed to unwind safely).
    active: AtomicUsize,
    /// A worker unwound; the caller panics too.
    poisoned: AtomicBool,
    slots: Box<[Slot]>,
    sum: SumFn<R>,
    scan: ScanFn<R>,
    src: SendConst<R>,
    dst: SendMut<R>,
    n: usize,
    part: usize,
    in_place: bool,
    eager_steal: bool,
}

/// A worker's registration in `Job::active`; poisons the job if the worker unwinds.
struct ActiveGuard<'a, R>(&'a Job<R>);

impl<R> Drop for ActiveGuard<'_, R> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poisoned.store(true, Ordering::SeqCst);
        }
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Spin a while, then yield the CPU (the thread we wait for may need it).
fn backoff(spins: &mut u32) {
    if *spins < 4096 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Decrements a stealer count when dropped (also if the sum kernel unwound).
struct StealGuard<'a>(&'a AtomicUsize);

impl Drop for StealGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<R: KernelElem> Job<R> {
    /// Register, then work until no partition is left to claim.
    fn help(&self) {
        // Registration precedes every claim (SeqCst on both), so a caller that closed
        // `next` and then saw `active == 0` knows no claim can succeed any more.
        self.active.fetch_add(1, Ordering::SeqCst);
        let _active = ActiveGuard(self);
        self.work();
    }

    /// Pointers and length of partition `p`.
    fn partition(&self, p: usize) -> (*const R, *mut R, usize) {
        let start = p * self.part;
        let len = self.part.min(self.n - start);
        // SAFETY: partition `p < parts` lies within the `n` elements that the caller of
        // `scan_raw` vouched for.
        unsafe { (self.src.0.add(start), self.dst.0.add(start), len) }
    }

    /// One worker: claim partitions in order until none are left. Per partition:
    /// pass one (sum, which also brings the partition into this core's cache), publish
    /// the sum, derive the offset from the predecessors (below), publish the inclusive
    /// prefix, pass two (scan plus offset, reading the partition from cache).
    ///
    /// The offset is found by looking back over the predecessors' slots: an inclusive
    /// prefix ends the walk, a published sum is collected and the walk goes on. A
    /// predecessor with nothing published yet is normally just finishing its own pass
    /// one, so we wait for it, but only about as long as our own pass one took: if its
    /// worker is descheduled (other busy threads on the machine), we sum its partition
    /// ourselves rather than stall. No worker ever waits for another one indefinitely.
    ///
    /// The offset is always computed as `inclusive[j] + sum[j + 1] + ... + sum[p - 1]`,
    /// added left to right from an inclusive prefix that was itself computed that way,
    /// so it equals the plain sequential scan over the partition sums bit for bit, no
    /// matter where the walk stopped or who computed which sum: float results do not
    /// depend on thread timing.
    fn work(&self) {
        let mut pending: Vec<R> = Vec::new();
        loop {
            let p = self.next.0.fetch_add(1, Ordering::SeqCst);
            if p >= self.slots.len() {
                return;
            }
            let (src, dst, len) = self.partition(p);
            let slot = &self.slots[p];

            // Pass one.
            let started = Instant::now();
            // SAFETY: only this worker writes partition `p`; it is readable.
            let aggregate = unsafe { (self.sum)(src, len) };
            let patience = if self.eager_steal {
                Duration::ZERO
            } else {
                // A neighbour that started its pass one with ours should finish within
                // this; the floor avoids pointless steals on tiny, cached partitions.
                started.elapsed() * 2 + Duration::from_micros(2)
            };
            slot.aggregate.store(aggregate.to_bits(), Ordering::Relaxed);
            slot.state.store(AGGREGATE, Ordering::Release);

            // Look back for the offset.
            pending.clear();
            let mut base = R::ZERO;
            let mut j = p;
            while j > 0 {
                j -= 1;
                match self.await_predecessor(j, patience) {
                    (INCLUSIVE, v) => {
                        base = v;
                        break;
                    }
                    (_, v) => pending.push(v),
                }
            }
            let offset = pending.iter().rev().fold(base, |acc, &a| acc.add(a));
            slot.inclusive
                .store(offset.add(aggregate).to_bits(), Ordering::Relaxed);
            // SeqCst pairs with the stealer's protocol in `await_predecessor`.
            slot.state.store(INCLUSIVE, Ordering::SeqCst);

            // A worker that stole our pass one may still be reading this partition; in
            // place, we must not overwrite it under them. (Rare, and short.)
            if self.in_place {
                let mut spins = 0u32;
                while slot.stealers.load(Ordering::SeqCst) != 0 {
                    backoff(&mut spins);
                }
            }

            // Pass two.
            // SAFETY: as above; nobody else reads partition `p` any more.
            unsafe { (self.scan)(src, dst, len, offset) };
            self.done.0.fetch_add(1, Ordering::Release);
        }
    }

    /// The state and value a predecessor `j` has published: `INCLUSIVE` with its
    /// inclusive prefix, or otherwise its sum (published, or computed here after waiting
    /// `patience` in vain).
    fn await_predecessor(&self, j: usize, patience: Duration) -> (u8, R) {
        let slot = &self.slots[j];
        let published = |state: u8| match state {
            INCLUSIVE => Some((
                INCLUSIVE,
                R::from_bits(slot.inclusive.load(Ordering::Relaxed)),
            )),
            AGGREGATE => Some((
                AGGREGATE,
                R::from_bits(slot.aggregate.load(Ordering::Relaxed)),
            )),
            state => {
                debug_assert_eq!(state, EMPTY);
                None
            }
        };
        let mut waited_since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            if let Some(found) = published(slot.state.load(Ordering::Acquire)) {
                return found;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(32) || patience.is_zero() {
                let since = *waited_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= patience {
                    break;
                }
            }
            std::hint::spin_loop();
        }
        // Steal: announce the read, then check again (SeqCst on both sides: either the
        // owner sees our announcement before its pass two, or we see its publication).
        slot.stealers.fetch_add(1, Ordering::SeqCst);
        let _guard = StealGuard(&slot.stealers);
        if let Some(found) = published(slot.state.load(Ordering::SeqCst)) {
            return found;
        }
        #[cfg(test)]
        tests::STEALS.fetch_add(1, Ordering::Relaxed);
        let (src, _, len) = self.partition(j);
        // SAFETY: partition `j` is readable and its owner will not write it before
        // `stealers` drops back to zero.
        (AGGREGATE, unsafe { (self.sum)(src, len) })
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::fmt::Debug;

    /// Number of predecessor sums computed by a waiting worker (stealing), all tests.
    pub(super) static STEALS: AtomicUsize = AtomicUsize::new(0);

    /// Every kernel level this machine can run.
    fn levels() -> Vec<Level> {
        let mut v = vec![Level::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            v.push(Level::Sse2);
            if std::arch::is_x86_feature_detected!("avx2") {
                v.push(Level::Avx2);
            }
        }
        v
    }

    /// Configurations for an input of `n` elements of `size` bytes: one single-threaded
    /// configuration, then 2, 3 and 8 threads with tiny partitions (forcing many
    /// partitions and the parallel path even for small inputs) and the default size.
    /// Configurations that would take the single-threaded path anyway, or give more than
    /// 2048 partitions (slow in debug builds), are left out.
    fn configs(n: usize, size: usize) -> Vec<ScanConfig> {
        let mut out = vec![ScanConfig {
            threads: 1,
            partition_bytes: 64,
        }];
        for threads in [2, 3, 8] {
            for part_bytes in [size, 3 * size, 64, 200, 4096, default_partition_bytes()] {
                let cfg = ScanConfig {
                    threads,
                    partition_bytes: part_bytes,
                };
                let parts = n.div_ceil(cfg.partition_elems(size));
                if (MIN_PARALLEL_PARTITIONS..=2048).contains(&parts) {
                    out.push(cfg);
                }
            }
        }
        out
    }

    /// Checks every fast-path variant against the sequential reference, bit for bit.
    fn check_exact<T: ScanElem + PartialEq + Debug>(data: &[T]) {
        let n = data.len();
        let mut incl_ref = vec![T::ZERO; n];
        let mut excl_ref = vec![T::ZERO; n];
        inclusive_scan_seq(data, &mut incl_ref).unwrap();
        let total_ref = exclusive_scan_seq(data, &mut excl_ref).unwrap();

        // The in-place references agree with the out-of-place ones.
        let mut buf = data.to_vec();
        inclusive_scan_seq_in_place(&mut buf);
        assert_eq!(buf, incl_ref, "inclusive_scan_seq_in_place n={n}");
        let mut buf = data.to_vec();
        assert_eq!(exclusive_scan_seq_in_place(&mut buf), total_ref);
        assert_eq!(buf, excl_ref, "exclusive_scan_seq_in_place n={n}");
        if n > 0 {
            assert_eq!(*incl_ref.last().unwrap(), total_ref);
        }

        let size = std::mem::size_of::<T>();
        for level in levels() {
            for cfg in configs(n, size) {
                let ctx = format!("n={n} level={level:?} cfg={cfg:?}");
                let mut out = vec![T::ZERO; n];
                scan_out_of_place(&cfg, level, Mode::Inclusive, data, &mut out);
                assert_eq!(out, incl_ref, "inclusive out-of-place {ctx}");

                let mut out = vec![T::ZERO; n];
                let total = scan_out_of_place(&cfg, level, Mode::Exclusive, data, &mut out);
                assert_eq!(out, excl_ref, "exclusive out-of-place {ctx}");
                assert_eq!(total, total_ref, "exclusive total {ctx}");

                let mut buf = data.to_vec();
                scan_in_place(&cfg, level, Mode::Inclusive, &mut buf);
                assert_eq!(buf, incl_ref, "inclusive in-place {ctx}");

                let mut buf = data.to_vec();
                let total = scan_in_place(&cfg, level, Mode::Exclusive, &mut buf);
                assert_eq!(buf, excl_ref, "exclusive in-place {ctx}");
                assert_eq!(total, total_ref, "exclusive in-place total {ctx}");

                // Streaming stores, and stealing predecessors' pass one whenever it is
                // not published yet.
                let tuning = Tuning {
                    stream: true,
                    eager_steal: true,
                };
                let mut out = vec![T::ZERO; n];
                scan_out_of_place_tuned(&cfg, level, Mode::Inclusive, data, &mut out, tuning);
                assert_eq!(out, incl_ref, "inclusive streaming/stealing {ctx}");
                let mut out = vec![T::ZERO; n];
                let total =
                    scan_out_of_place_tuned(&cfg, level, Mode::Exclusive, data, &mut out, tuning);
                assert_eq!(out, excl_ref, "exclusive streaming/stealing {ctx}");
                assert_eq!(total, total_ref, "exclusive streaming/stealing total {ctx}");
                let mut buf = data.to_vec();
                let total = scan_in_place_tuned(&cfg, level, Mode::Exclusive, &mut buf, tuning);
                assert_eq!(buf, excl_ref, "exclusive in-place stealing {ctx}");
                assert_eq!(total, total_ref, "exclusive in-place stealing total {ctx}");
                let mut buf = data.to_vec();
                scan_in_place_tuned(&cfg, level, Mode::Inclusive, &mut buf, tuning);
                assert_eq!(buf, incl_ref, "inclusive in-place stealing {ctx}");
            }
        }

        // The public entry points (default config, detected level).
        let mut out = vec![T::ZERO; n];
        inclusive_scan(data, &mut out).unwrap();
        assert_eq!(out, incl_ref, "inclusive_scan n={n}");
        let mut out = vec![T::ZERO; n];
        assert_eq!(exclusive_scan(data, &mut out).unwrap(), total_ref);
        assert_eq!(out, excl_ref, "exclusive_scan n={n}");
        let mut buf = data.to_vec();
        inclusive_scan_in_place(&mut buf);
        assert_eq!(buf, incl_ref, "inclusive_scan_in_place n={n}");
        let mut buf = data.to_vec();
        assert_eq!(exclusive_scan_in_place(&mut buf), total_ref);
        assert_eq!(buf, excl_ref, "exclusive_scan_in_place n={n}");
        let cfg = ScanConfig {
            threads: 2,
            partition_bytes: 32,
        };
        let mut out = vec![T::ZERO; n];
        inclusive_scan_with(&cfg, data, &mut out).unwrap();
        assert_eq!(out, incl_ref, "inclusive_scan_with n={n}");
        let mut out = vec![T::ZERO; n];
        assert_eq!(
            exclusive_scan_with(&cfg, data, &mut out).unwrap(),
            total_ref
        );
        assert_eq!(out, excl_ref, "exclusive_scan_with n={n}");
        let mut buf = data.to_vec();
        inclusive_scan_in_place_with(&cfg, &mut buf);
        assert_eq!(buf, incl_ref, "inclusive_scan_in_place_with n={n}");
        let mut buf = data.to_vec();
        assert_eq!(exclusive_scan_in_place_with(&cfg, &mut buf), total_ref);
        assert_eq!(buf, excl_ref, "exclusive_scan_in_place_with n={n}");
    }

    /// 0, 1, 2, 3, 7, 8, 9, 2^k - 1, 2^k, 2^k + 1 for several k, and sizes that are not
    /// multiples of any SIMD width or partition size.
    fn sizes() -> Vec<usize> {
        let mut v = vec![0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65];
        for k in [7, 10, 12, 14, 16] {
            v.extend([(1 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        v.extend([100, 999, 1001, 4099, 12_345, 30_011, 100_003]);
        v
    }

    fn random_vec<T>(n: usize, seed: u64, mut f: impl FnMut(&mut SmallRng) -> T) -> Vec<T> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n).map(|_| f(&mut rng)).collect()
    }

    /// Random data, zeros and all-equal inputs of every size.
    fn check_type<T: ScanElem + PartialEq + Debug>(
        seed: u64,
        mut gen: impl FnMut(&mut SmallRng) -> T,
        equal: T,
    ) {
        for (i, n) in sizes().into_iter().enumerate() {
            check_exact(&random_vec(n, seed + i as u64, &mut gen));
        }
        for n in [0, 1, 9, 1000, 4099, 65_537] {
            check_exact(&vec![T::ZERO; n]);
            check_exact(&vec![equal; n]);
        }
    }

    #[test]
    fn u32_random_zeros_equal() {
        check_type::<u32>(1, |r| r.random(), 7);
        // Small values too, so that most prefixes do not wrap.
        check_exact(&random_vec(50_000, 99, |r| r.random_range(0..16u32)));
    }

    #[test]
    fn i32_random_zeros_equal() {
        check_type::<i32>(2, |r| r.random(), -3);
    }

    #[test]
    fn u64_random_zeros_equal() {
        check_type::<u64>(3, |r| r.random(), u64::MAX / 3);
    }

    #[test]
    fn i64_random_zeros_equal() {
        check_type::<i64>(4, |r| r.random(), -1);
    }

    #[test]
    fn usize_isize_random() {
        check_type::<usize>(5, |r| r.random_range(0..1000u64) as usize, 1);
        check_type::<isize>(6, |r| r.random_range(-1000..1000i64) as isize, -1);
    }

    /// Integer-valued floats: every partial sum is exact (|sum| < 2^24 for f32), so the
    /// fast path must match the sequential reference bit for bit despite the different
    /// order of additions.
    #[test]
    fn f32_integer_valued_exact() {
        check_type::<f32>(7, |r| r.random_range(-8i32..=8) as f32, 3.0);
    }

    #[test]
    fn f64_integer_valued_exact() {
        check_type::<f64>(8, |r| r.random_range(-1000i32..=1000) as f64, -5.0);
    }

    #[test]
    fn integer_wrap_around() {
        for n in [1, 2, 7, 8, 9, 63, 64, 65, 1023, 1024, 1025, 10_001] {
            check_exact(&vec![u32::MAX; n]);
            check_exact(&vec![u64::MAX; n]);
            check_exact(&vec![i32::MIN; n]);
            check_exact(&vec![i64::MIN; n]);
            check_exact(&vec![i64::MAX; n]);
            let alt: Vec<i64> = (0..n)
                .map(|i| if i % 2 == 0 { i64::MIN } else { i64::MAX })
                .collect();
            check_exact(&alt);
            let alt: Vec<u32> = (0..n as u32).map(|i| u32::MAX - i).collect();
            check_exact(&alt);
        }
        // Spot values: the wrap happens and is wrapping.
        let mut out = [0u32; 3];
        inclusive_scan(&[u32::MAX, 2, u32::MAX], &mut out).unwrap();
        assert_eq!(out, [u32::MAX, 1, 0]);
        let mut out = [0i64; 3];
        let total = exclusive_scan(&[i64::MIN, i64::MIN, 5], &mut out).unwrap();
        assert_eq!(out, [0, i64::MIN, 0]);
        assert_eq!(total, 5);
    }

    #[test]
    fn known_small_values() {
        let input = [1u32, 2, 3, 4, 5];
        let mut out = [0u32; 5];
        inclusive_scan(&input, &mut out).unwrap();
        assert_eq!(out, [1, 3, 6, 10, 15]);
        assert_eq!(exclusive_scan(&input, &mut out).unwrap(), 15);
        assert_eq!(out, [0, 1, 3, 6, 10]);
        let mut empty: [i64; 0] = [];
        assert_eq!(exclusive_scan_in_place(&mut empty), 0);
        inclusive_scan_in_place(&mut empty);
        let mut one = [42.5f64];
        assert_eq!(exclusive_scan_in_place(&mut one), 42.5);
        assert_eq!(one, [0.0]);
    }

    #[test]
    fn length_mismatch_is_an_error_and_leaves_out_untouched() {
        let input = [1u32, 2, 3];
        let expected = ScanLenMismatch {
            input_len: 3,
            output_len: 2,
        };
        let mut out = [9u32; 2];
        assert_eq!(inclusive_scan(&input, &mut out), Err(expected));
        assert_eq!(exclusive_scan(&input, &mut out), Err(expected));
        assert_eq!(inclusive_scan_seq(&input, &mut out), Err(expected));
        assert_eq!(exclusive_scan_seq(&input, &mut out), Err(expected));
        let cfg = ScanConfig::with_threads(2);
        assert_eq!(inclusive_scan_with(&cfg, &input, &mut out), Err(expected));
        assert_eq!(exclusive_scan_with(&cfg, &input, &mut out), Err(expected));
        assert_eq!(out, [9, 9]);
        let mut long = [9u32; 4];
        let err = inclusive_scan(&input, &mut long).unwrap_err();
        assert_eq!(
            err,
            ScanLenMismatch {
                input_len: 3,
                output_len: 4
            }
        );
        assert_eq!(long, [9; 4]);
        assert!(err.to_string().contains("does not match"));
    }

    /// Random floats: the fast path may round differently from the sequential loop, but
    /// both must stay close to the exact prefix sums (computed in f64 for f32 data, and
    /// with an integer-scaled reference for f64 data).
    #[test]
    fn f32_random_within_tolerance() {
        let n = 200_003;
        let data = random_vec(n, 11, |r| r.random_range(-1.0f32..1.0));
        let mut exact = vec![0f64; n];
        let mut acc = 0f64;
        for (e, &x) in exact.iter_mut().zip(&data) {
            acc += x as f64;
            *e = acc;
        }
        let mut seq = vec![0f32; n];
        inclusive_scan_seq(&data, &mut seq).unwrap();
        let max_err = |v: &[f32]| {
            v.iter()
                .zip(&exact)
                .map(|(&a, &e)| (a as f64 - e).abs())
                .fold(0f64, f64::max)
        };
        let seq_err = max_err(&seq);
        // |prefix| stays around sqrt(n) ~ 450 here; f32 spacing there is ~3e-5.
        let tol = 0.05f64.max(4.0 * seq_err);
        for level in levels() {
            for cfg in [
                ScanConfig {
                    threads: 1,
                    partition_bytes: 1 << 18,
                },
                ScanConfig {
                    threads: 2,
                    partition_bytes: 1 << 12,
                },
                ScanConfig {
                    threads: 3,
                    partition_bytes: 1000,
                },
                ScanConfig {
                    threads: 8,
                    partition_bytes: 1 << 16,
                },
            ] {
                let mut out = vec![0f32; n];
                scan_out_of_place(&cfg, level, Mode::Inclusive, &data, &mut out);
                let err = max_err(&out);
                assert!(
                    err <= tol,
                    "inclusive {level:?} {cfg:?}: err {err} > tol {tol} (seq err {seq_err})"
                );

                let mut ex = vec![0f32; n];
                let total = scan_out_of_place(&cfg, level, Mode::Exclusive, &data, &mut ex);
                assert_eq!(ex[0], 0.0);
                let ex_err = ex[1..]
                    .iter()
                    .zip(&exact)
                    .map(|(&a, &e)| (a as f64 - e).abs())
                    .fold(0f64, f64::max);
                assert!(ex_err <= tol, "exclusive {level:?} {cfg:?}: err {ex_err}");
                assert!((total as f64 - exact[n - 1]).abs() <= tol);

                // Deterministic for a fixed configuration, whatever the thread timing.
                let mut again = vec![0f32; n];
                scan_out_of_place(&cfg, level, Mode::Inclusive, &data, &mut again);
                assert!(out
                    .iter()
                    .zip(&again)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
            // ... and whatever the number of threads and whether predecessors' sums were
            // stolen, for a fixed partition size.
            let run = |threads: usize, eager_steal: bool| {
                let cfg = ScanConfig {
                    threads,
                    partition_bytes: 1 << 12,
                };
                let mut out = vec![0f32; n];
                let tuning = Tuning {
                    stream: false,
                    eager_steal,
                };
                scan_out_of_place_tuned(&cfg, level, Mode::Inclusive, &data, &mut out, tuning);
                out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
            };
            let two = run(2, false);
            assert_eq!(two, run(3, false), "{level:?}");
            assert_eq!(two, run(8, true), "{level:?}");
        }
    }

    #[test]
    fn f64_random_within_tolerance() {
        // General f64 values: prefixes stay around sqrt(n), where f64 rounding is ~1e-14.
        let n = 100_001;
        let data = random_vec(n, 12, |r| r.random_range(-1.0f64..1.0) * (1.0 + 1e-9));
        let mut seq = vec![0f64; n];
        inclusive_scan_seq(&data, &mut seq).unwrap();
        for level in levels() {
            let cfg = ScanConfig {
                threads: 2,
                partition_bytes: 2048,
            };
            let mut out = vec![0f64; n];
            scan_out_of_place(&cfg, level, Mode::Inclusive, &data, &mut out);
            let err = out
                .iter()
                .zip(&seq)
                .map(|(a, b)| (a - b).abs())
                .fold(0f64, f64::max);
            assert!(err < 1e-9, "{level:?}: err {err}");
        }
    }

    #[test]
    fn float_special_values_propagate() {
        let data = vec![
            1.0f32,
            f32::INFINITY,
            2.0,
            f32::NAN,
            3.0,
            4.0,
            5.0,
            6.0,
            7.0,
            8.0,
        ];
        for level in levels() {
            for cfg in [
                ScanConfig {
                    threads: 1,
                    partition_bytes: 64,
                },
                ScanConfig {
                    threads: 2,
                    partition_bytes: 4,
                },
            ] {
                let mut out = vec![0f32; data.len()];
                scan_out_of_place(&cfg, level, Mode::Inclusive, &data, &mut out);
                assert_eq!(out[0], 1.0);
                assert_eq!(out[1], f32::INFINITY);
                assert_eq!(out[2], f32::INFINITY);
                assert!(
                    out[3..].iter().all(|x| x.is_nan()),
                    "{level:?} {cfg:?} {out:?}"
                );
            }
        }
    }

    #[test]
    fn config_and_cache_detection() {
        assert_eq!(parse_cache_size("512K"), Some(512 << 10));
        assert_eq!(parse_cache_size("1M\n"), Some(1 << 20));
        assert_eq!(parse_cache_size("2048K"), Some(2 << 20));
        assert_eq!(parse_cache_size("1 MiB"), Some(1 << 20));
        assert_eq!(parse_cache_size("65536"), Some(65536));
        assert_eq!(parse_cache_size("garbage"), None);
        assert_eq!(parse_cache_size("0K"), None);
        assert_eq!(count_cpu_list("0\n"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("x"), None);

        let l2 = l2_cache_bytes();
        assert!(l2 >= 16 << 10, "l2 {l2}");
        let part = default_partition_bytes();
        assert!((8 << 10..=8 << 20).contains(&part));
        assert_eq!(part, (l2 / 2).clamp(8 << 10, 8 << 20));
        let cfg = ScanConfig::default();
        assert!(cfg.threads >= 1);
        assert_eq!(cfg.partition_bytes, part);
        assert_eq!(ScanConfig::with_threads(3).threads, 3);

        // Partition lengths: whole elements, at least one, cache-line multiples.
        let c = |b| ScanConfig {
            threads: 2,
            partition_bytes: b,
        };
        assert_eq!(c(0).partition_elems(4), 1);
        assert_eq!(c(4).partition_elems(4), 1);
        assert_eq!(c(12).partition_elems(4), 3);
        assert_eq!(c(100).partition_elems(4), 16);
        assert_eq!(c(100).partition_elems(8), 8);
        assert_eq!(c(1 << 18).partition_elems(4), 1 << 16);
        assert!(["avx2", "sse2", "scalar"].contains(&simd_level_name()));
    }

    /// Streaming stores need a scalar head until the output is vector-aligned: try every
    /// misalignment of input and output.
    #[test]
    fn streaming_misaligned_slices() {
        fn run<T: ScanElem + PartialEq + Debug>(data: &[T]) {
            for level in levels() {
                for in_off in 0..4 {
                    for out_off in 0..9 {
                        for n in [0usize, 1, 5, 17, 100, 1000 - in_off] {
                            let input = &data[in_off..in_off + n];
                            let mut incl_ref = vec![T::ZERO; n];
                            let mut excl_ref = vec![T::ZERO; n];
                            inclusive_scan_seq(input, &mut incl_ref).unwrap();
                            let total_ref = exclusive_scan_seq(input, &mut excl_ref).unwrap();
                            let mut backing = vec![T::ZERO; n + out_off];
                            for (threads, part_bytes) in [(1, 1 << 16), (2, 40)] {
                                let cfg = ScanConfig {
                                    threads,
                                    partition_bytes: part_bytes,
                                };
                                let tuning = Tuning {
                                    stream: true,
                                    eager_steal: false,
                                };
                                let out = &mut backing[out_off..];
                                scan_out_of_place_tuned(
                                    &cfg,
                                    level,
                                    Mode::Inclusive,
                                    input,
                                    out,
                                    tuning,
                                );
                                assert_eq!(
                                    out,
                                    &incl_ref[..],
                                    "{level:?} {in_off} {out_off} {n} {cfg:?}"
                                );
                                let total = scan_out_of_place_tuned(
                                    &cfg,
                                    level,
                                    Mode::Exclusive,
                                    input,
                                    out,
                                    tuning,
                                );
                                assert_eq!(
                                    out,
                                    &excl_ref[..],
                                    "{level:?} {in_off} {out_off} {n} {cfg:?}"
                                );
                                assert_eq!(total, total_ref);
                            }
                        }
                    }
                }
            }
        }
        run(&random_vec(1000, 41, |r| r.random::<u32>()));
        run(&random_vec(1000, 42, |r| r.random::<i64>()));
        run(&random_vec(1000, 43, |r| r.random_range(-8i32..=8) as f32));
        run(&random_vec(1000, 44, |r| r.random_range(-8i32..=8) as f64));
    }

    /// Stealing happens (here forced: `eager_steal`) and keeps results exact, in place
    /// too, where the owner of a stolen partition must wait before overwriting it.
    #[test]
    fn stealing_is_exercised_and_exact() {
        let data = random_vec(300_000, 51, |r| r.random::<u64>());
        let mut incl_ref = vec![0u64; data.len()];
        inclusive_scan_seq(&data, &mut incl_ref).unwrap();
        let tuning = Tuning {
            stream: false,
            eager_steal: true,
        };
        let before = STEALS.load(Ordering::Relaxed);
        for round in 0..20 {
            let cfg = ScanConfig {
                threads: 2 + round % 3,
                partition_bytes: 1024 + 64 * round,
            };
            let mut buf = data.clone();
            scan_in_place_tuned(&cfg, simd_level(), Mode::Inclusive, &mut buf, tuning);
            assert_eq!(buf, incl_ref, "round {round}");
            let mut out = vec![0u64; data.len()];
            scan_out_of_place_tuned(&cfg, simd_level(), Mode::Inclusive, &data, &mut out, tuning);
            assert_eq!(out, incl_ref, "round {round}");
        }
        let steals = STEALS.load(Ordering::Relaxed) - before;
        println!("steals: {steals}");
        // Two pool threads racing through ~20 000 partitions with zero patience: some
        // predecessor is always caught mid pass one (unless the pool has one thread).
        if rayon::current_num_threads() >= 2 {
            assert!(steals > 0, "no steals observed");
        }
    }

    /// Many concurrent scans from different threads share rayon's pool safely.
    #[test]
    fn concurrent_callers() {
        let data = random_vec(200_000, 21, |r| r.random::<u32>());
        let mut expected = vec![0u32; data.len()];
        inclusive_scan_seq(&data, &mut expected).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (data, expected) = (&data, &expected);
                s.spawn(move || {
                    let cfg = ScanConfig {
                        threads: 1 + t,
                        partition_bytes: 4096,
                    };
                    for _ in 0..5 {
                        let mut out = vec![0u32; data.len()];
                        inclusive_scan_with(&cfg, data, &mut out).unwrap();
                        assert_eq!(&out, expected);
                    }
                });
            }
        });
        // And from inside rayon tasks.
        rayon::scope(|s| {
            for t in 0..4 {
                let (data, expected) = (&data, &expected);
                s.spawn(move |_| {
                    let cfg = ScanConfig {
                        threads: 2 + t,
                        partition_bytes: 8192,
                    };
                    let mut out = vec![0u32; data.len()];
                    inclusive_scan_with(&cfg, data, &mut out).unwrap();
                    assert_eq!(&out, expected);
                });
            }
        });
    }

    /// Times the sequential loop and variants of the fast path on `2^log` elements out
    /// of place. The variants run interleaved, one run each per round, so that background
    /// load hits them alike. Prints median and minimum times and speedups.
    fn timing_report<T: ScanElem + PartialEq + Debug>(
        name: &str,
        log: u32,
        rounds: usize,
        gen: impl FnMut(&mut SmallRng) -> T,
    ) {
        use std::time::Instant;
        let n = 1usize << log;
        let data = random_vec(n, 31, gen);
        let mut expected = vec![T::ZERO; n];
        inclusive_scan_seq(&data, &mut expected).unwrap();
        let mut out = vec![T::ZERO; n];
        let level = simd_level();
        let streams = use_streaming_stores(std::mem::size_of_val(&out[..]));
        println!(
            "cpu_scan timing: 2^{log} {name} out of place, SIMD {}, L2 {} KiB, LLC {} KiB, \
             default partition {} KiB, streaming stores {streams}, rayon pool {} threads, \
             {rounds} rounds",
            simd_level_name(),
            l2_cache_bytes() >> 10,
            last_level_cache_bytes() >> 10,
            default_partition_bytes() >> 10,
            rayon::current_num_threads()
        );
        let part = default_partition_bytes();
        // (name, threads, partition bytes, streaming stores); threads 0: sequential loop.
        let variants: Vec<(String, usize, usize, bool)> = vec![
            ("sequential loop".into(), 0, 0, false),
            ("fast, 1 thread (one-pass SIMD)".into(), 1, part, streams),
            (
                "fast, 2 threads (default: inclusive_scan_with)".into(),
                2,
                part,
                streams,
            ),
            (
                format!("fast, 2 threads, streaming stores {}", !streams),
                2,
                part,
                !streams,
            ),
            (
                format!("fast, 2 threads, {} KiB partitions", part >> 11),
                2,
                part / 2,
                streams,
            ),
            (
                format!("fast, 2 threads, {} KiB partitions", part >> 9),
                2,
                part * 2,
                streams,
            ),
        ];
        let mut times = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (v, &(_, threads, part_bytes, stream)) in variants.iter().enumerate() {
                out.fill(T::ZERO);
                let cfg = ScanConfig {
                    threads,
                    partition_bytes: part_bytes,
                };
                let t = Instant::now();
                if threads == 0 {
                    inclusive_scan_seq(&data, &mut out).unwrap();
                } else if stream == streams {
                    // The public entry point, exactly as callers use it.
                    inclusive_scan_with(&cfg, &data, &mut out).unwrap();
                } else {
                    let tuning = Tuning {
                        stream,
                        eager_steal: false,
                    };
                    scan_out_of_place_tuned(&cfg, level, Mode::Inclusive, &data, &mut out, tuning);
                }
                times[v].push(t.elapsed().as_secs_f64());
                assert_eq!(out, expected, "{}", variants[v].0);
            }
        }
        for t in &mut times {
            t.sort_by(f64::total_cmp);
        }
        let (seq_min, seq_med) = (times[0][0], times[0][rounds / 2]);
        for ((name, ..), t) in variants.iter().zip(&times) {
            let (min, med) = (t[0], t[rounds / 2]);
            println!(
                "  {name:<48} median {:8.3} ms ({:4.2} Gelem/s, {:4.2}x)   min {:8.3} ms ({:4.2}x)",
                med * 1e3,
                n as f64 / med / 1e9,
                seq_med / med,
                min * 1e3,
                seq_min / min
            );
        }
    }

    /// Release-mode timing, the headline figure: 2^26 u32. Run with
    /// `cargo test --release -p ridgeline-operators cpu_scan::tests::timing -- --ignored --nocapture`
    /// (`RAYON_NUM_THREADS` sets the pool; the fast path is timed with 1 and 2 threads).
    #[test]
    #[ignore]
    fn timing() {
        timing_report::<u32>("u32", 26, 15, |r| r.random_range(0..1000u32));
    }

    /// Release-mode timing of the other benchmark shapes (u32 and i64 at 2^20, 2^24,
    /// 2^26), run like [`timing`] with `timing_more`.
    #[test]
    #[ignore]
    fn timing_more() {
        for log in [20, 24, 26] {
            let rounds = if log == 26 { 9 } else { 25 };
            timing_report::<u32>("u32", log, rounds, |r| r.random_range(0..1000u32));
            timing_report::<i64>("i64", log, rounds, |r| r.random_range(-1000..1000i64));
        }
    }
}
