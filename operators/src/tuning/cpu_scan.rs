//! Tuned constants of the CPU prefix sum ([`crate::cpu_scan`]: the partitioned SIMD
//! scan of Zhang, Wang & Ross, ADMS 2020).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it. The headline figure (2^26 u32 on the 2-core machine: 1.93x the
//! sequential loop with 2 threads; 10-12x on the H100 machine's 16 cores) is in
//! BENCHMARKS.md, "CPU prefix sum" and "Prefix sums". [`crate::cpu_scan::ScanConfig`]'s
//! `Default` reads the partition size from here.

super::switches! {}

/// Inputs with fewer than this many partitions are scanned single-threaded (the
/// one-pass SIMD scan, which reads the input once instead of twice): 4. Not measured
/// separately.
pub const MIN_PARALLEL_PARTITIONS: usize = 4;

/// The per-core L2 size assumed when it cannot be detected: 1 MiB.
pub const DEFAULT_L2_BYTES: usize = 1 << 20;

/// The last-level cache size assumed when it cannot be detected: 16 MiB.
pub const DEFAULT_LLC_BYTES: usize = 16 << 20;

/// The default partition is the per-core L2 divided by this: 2, half the L2, the
/// paper's finding (the partition and the output lines being written both stay
/// cached between the two passes); `cpu_scan::tests::timing` times half and twice
/// the default on the machine it runs on.
pub const PARTITION_L2_DIVISOR: usize = 2;

/// Smallest default partition: 8 KiB (a bound on the detected L2's half; not measured
/// separately).
pub const MIN_PARTITION_BYTES: usize = 8 << 10;

/// Largest default partition: 8 MiB (a bound on the detected L2's half; not measured
/// separately).
pub const MAX_PARTITION_BYTES: usize = 8 << 20;

/// A worker waits for a predecessor's pass one this many times as long as its own
/// pass one took before it sums that partition itself (steals it): 2. A neighbour
/// that started its pass one with ours should finish within that unless its thread
/// is descheduled.
pub const STEAL_PATIENCE_FACTOR: u32 = 2;

/// Added to the stealing patience, in microseconds: 2 (avoids pointless steals on
/// tiny, cached partitions).
pub const STEAL_PATIENCE_FLOOR_MICROS: u64 = 2;

/// Spins of a waiting worker before it starts yielding its core: 4096 (the thread
/// it waits for may need the core on a machine with more threads than cores).
pub const SPINS_BEFORE_YIELD: u32 = 4096;
