//! Tuned constants of the hash join ([`crate::join`]).
//!
//! Each constant says what it controls, the value, and the measurement that chose it;
//! [`crate::join::JoinOptions`]'s `Default` reads its defaults from here.

super::switches! {}

/// Invocations per workgroup of the probe kernels (shaders/join/; a multiple of 32,
/// the matched-bit words): 256, the size of the other row-wise kernels of the
/// crate (not yet measured for the probe on the H200).
pub const PROBE_WORKGROUP: u32 = 256;

/// Buckets per build row, rounded up to a power of two: 1. With the stable
/// partition's hash the expected bucket holds one row, and a probe row walks
/// its bucket once per pass; more buckets cost a deeper partition (one more
/// 8-bit pass from 2^16 and from 2^24 buckets) and a bigger offsets array.
/// Not yet measured against 2 on the H200.
pub const BUCKETS_PER_ROW: u32 = 1;

/// Pair slots the probe allocates before it knows the total, per probe row: 1
/// (a key join with a unique build key gives at most one pair a row; when the
/// total is larger the write pass runs again with room for it: one more
/// dispatch, no second count).
pub const PAIRS_PER_ROW_GUESS: u32 = 1;

/// Bucket entries one probe dispatch walks per row on CPU adapters: 32768.
/// lavapipe ends any shader loop after 65535 iterations (a long bucket, one key
/// repeated 10^6 times, counted 65535 matches), so a longer bucket is walked in
/// rounds of this many entries, one dispatch each. GPUs walk a bucket in one round.
pub const CPU_ADAPTER_RUN: u32 = 32768;
