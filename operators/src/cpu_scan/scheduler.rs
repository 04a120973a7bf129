//! The partition scheduler of the parallel fast path: the calling thread and helpers on
//! rayon's pool claim partitions in order, sum each (pass one), find its offset by
//! looking back over the predecessors' published sums (stealing a slow predecessor's
//! pass one), and scan it from cache (pass two). See the module docs of
//! [`crate::cpu_scan`] for the design and Zhang, Wang & Ross (ADMS 2020) for the
//! partitioned two-pass scheme it follows.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::elem::{KernelElem, Level};
use super::lanes::{ScanFn, SumFn};
use super::{ScanConfig, ScanElem, ScanKind};
use crate::tuning::cpu_scan::{
    MIN_PARALLEL_PARTITIONS, SPINS_BEFORE_YIELD, STEAL_PATIENCE_FACTOR, STEAL_PATIENCE_FLOOR_MICROS,
};

/// Internal knobs of one scan, chosen by the public functions (tests set them directly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tuning {
    /// Write the output with non-temporal stores (out-of-place only).
    pub(super) stream: bool,
    /// Steal a predecessor's pass one as soon as it is missing instead of first waiting
    /// about as long as our own pass one took (tests use it to exercise stealing).
    pub(super) eager_steal: bool,
}

impl Tuning {
    pub(super) const PLAIN: Tuning = Tuning {
        stream: false,
        eager_steal: false,
    };
}

/// The fast path from `input` to `out` (same length) with explicit `tuning`; returns
/// the total.
pub(super) fn scan_out_of_place_tuned<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    kind: ScanKind,
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
    T::from_repr(unsafe { scan_raw(cfg, level, kind, src, dst, n, tuning) })
}

/// The fast path in place with explicit `tuning` (never streaming); returns the total.
pub(super) fn scan_in_place_tuned<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    kind: ScanKind,
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
    T::from_repr(unsafe { scan_raw(cfg, level, kind, dst.cast_const(), dst, n, tuning) })
}

/// Scans `n` elements from `src` to `dst` (equal or disjoint); returns the total.
///
/// # Safety
/// `n` elements readable at `src`, writable at `dst`; `src == dst` or the ranges are
/// disjoint; `level` is supported by this CPU; `tuning.stream` only if `src != dst`.
unsafe fn scan_raw<R: KernelElem>(
    cfg: &ScanConfig,
    level: Level,
    kind: ScanKind,
    src: *const R,
    dst: *mut R,
    n: usize,
    tuning: Tuning,
) -> R {
    debug_assert!(!tuning.stream || n == 0 || src != dst.cast_const());
    let k = R::kernels(level);
    let scan = k.scan(kind, tuning.stream);
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
        sum: k.sum(),
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
    if *spins < SPINS_BEFORE_YIELD {
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
                started.elapsed() * STEAL_PATIENCE_FACTOR + Duration::from_micros(STEAL_PATIENCE_FLOOR_MICROS)
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
        super::tests::STEALS.fetch_add(1, Ordering::Relaxed);
        let (src, _, len) = self.partition(j);
        // SAFETY: partition `j` is readable and its owner will not write it before
        // `stealers` drops back to zero.
        (AGGREGATE, unsafe { (self.sum)(src, len) })
    }
}

// ---------------------------------------------------------------------------------------
