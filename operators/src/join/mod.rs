//! Hash joins on integer keys: a build table, then per probe row its matching
//! build rows, on the GPU (shaders/join/) and on the CPU.
//!
//! # Contract
//!
//! Keys are 4-byte (signed or unsigned) or 8-byte integers, compared bit for bit
//! (both sides of a join have the same width: the SQL layer coerces them), with
//! an optional validity bitmap. NULL keys never match, on either side. A probe
//! gives, per probe row in order, the build rows whose key equals it, in build
//! order: the pairs are **probe-major with build rows ascending**, so the size is
//! exact and the order deterministic, and the GPU and CPU paths give the same
//! pairs ([`join_reference`] is the plain reference). Semi, anti and mark joins
//! need one bit per probe row ([`probe_matched_gpu`], [`HostJoinTable::matched`]).
//! Which rows reach the output (inner, outer, semi, anti, residual filters) is
//! the SQL layer's business: it works on the pairs.
//!
//! # GPU algorithm
//!
//! 1. Build ([`build_table_gpu`]): the crate's stable partition
//!    ([`crate::partition`]) of the build keys and their row numbers by the hash
//!    of the key modulo `F`, a power of two near the build rows
//!    ([`crate::tuning::join::BUCKETS_PER_ROW`]): every bucket's rows are
//!    contiguous and in build order, and the `F + 1` bucket offsets stay on the
//!    device. NULL build keys land in the NULL bucket with their validity bit
//!    clear.
//! 2. Count (shaders/join/count.wgsl): per probe row, hash its key as the
//!    partition does, walk its bucket, count the valid equal keys; the 64-bit
//!    total is summed beside the counts.
//! 3. The crate's exclusive scan of the counts gives every probe row its first
//!    output slot.
//! 4. Write (shaders/join/write.wgsl): the same walk writes the (probe, build)
//!    pairs at those slots. The output is allocated before the total is read
//!    ([`JoinOptions::pairs_per_row_guess`] slots a row) and the total is read
//!    once afterwards: when it did not fit, the write pass runs again with room
//!    for it; when it exceeds what one binding holds, the probe range is halved.
//!
//! The build side must fit one storage binding; probe columns may span several
//! segments (each is probed on its own, its pairs carrying global probe rows).
//!
//! # CPU
//!
//! [`HostJoinTable`]: the same bucketed layout built by a counting sort in build
//! order (NULL keys left out), probed by rayon over chunks of probe rows, each
//! chunk's pairs concatenated in order.
mod cpu;
mod gpu;

pub use crate::member::{KeyWidth, Keys, MemberInput as KeyColumn};
pub use cpu::HostJoinTable;
pub use gpu::{build_table_gpu, probe_gpu, probe_matched_gpu, DeviceJoinTable, JoinPairs};

use crate::tuning::join as tuned;

/// Tuning of the GPU join; `Default` takes `crate::tuning::join`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinOptions {
    /// Invocations per workgroup of the probe kernels (a multiple of 32, at most 1024).
    pub workgroup_size: u32,
    /// Buckets per build row (rounded up to a power of two).
    pub buckets_per_row: u32,
    /// Pair slots allocated per probe row before the total is known.
    pub pairs_per_row_guess: u32,
    /// Most pairs one probe dispatch writes (`None`: one binding's worth); tests
    /// set it low to exercise the split of a probe range.
    pub max_pairs: Option<usize>,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            workgroup_size: tuned::PROBE_WORKGROUP,
            buckets_per_row: tuned::BUCKETS_PER_ROW,
            pairs_per_row_guess: tuned::PAIRS_PER_ROW_GUESS,
            max_pairs: None,
        }
    }
}

/// The buckets of a table over `rows` build rows: a power of two, at most the
/// partition's largest fan-out.
pub fn bucket_count(rows: usize, per_row: u32) -> u32 {
    let want = (rows as u64).saturating_mul(per_row.max(1) as u64).max(1);
    want.next_power_of_two().min(crate::partition::MAX_FANOUT as u64) as u32
}

/// The reference: every (probe row, build row) pair of equal non-NULL keys,
/// probe-major with build rows ascending.
pub fn join_reference(build: &[Option<i64>], probe: &[Option<i64>]) -> Vec<(u32, u32)> {
    let mut by_key: std::collections::HashMap<i64, Vec<u32>> = std::collections::HashMap::new();
    for (j, k) in build.iter().enumerate() {
        if let Some(k) = k {
            by_key.entry(*k).or_default().push(j as u32);
        }
    }
    let mut out = Vec::new();
    for (i, k) in probe.iter().enumerate() {
        if let Some(rows) = k.and_then(|k| by_key.get(&k)) {
            out.extend(rows.iter().map(|&j| (i as u32, j)));
        }
    }
    out
}

/// The reference of the matched bits: whether each probe row has a match.
pub fn matched_reference(build: &[Option<i64>], probe: &[Option<i64>]) -> Vec<bool> {
    let keys: std::collections::HashSet<i64> = build.iter().flatten().copied().collect();
    probe.iter().map(|k| k.is_some_and(|k| keys.contains(&k))).collect()
}
