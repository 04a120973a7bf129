//! Random inputs shared by the operator tests.
#![allow(dead_code)]
use rand::{Rng, SeedableRng};

/// A seeded generator.
pub fn rng(seed: u64) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(seed)
}

/// The bitmap words (bit `i % 32` of word `i / 32`) of per-row flags.
pub fn bits_of(valid: &[bool]) -> Vec<u32> {
    let mut w = vec![0u32; valid.len().div_ceil(32)];
    for (i, &v) in valid.iter().enumerate() {
        if v {
            w[i / 32] |= 1 << (i % 32);
        }
    }
    w
}

/// A validity bitmap of `n` rows (`ceil(n / 32)` words, bit set = not NULL), each
/// row NULL with probability `p_null`.
pub fn bitmap(n: usize, r: &mut impl Rng, p_null: f64) -> Vec<u32> {
    let mut w = vec![0u32; n.div_ceil(32)];
    for i in 0..n {
        if !r.random_bool(p_null) {
            w[i / 32] |= 1 << (i % 32);
        }
    }
    w
}

/// Rows just past one segment of the adapter (its binding limit for 8-byte values),
/// or `None` (with a note) where a segment is too large to exceed in a test.
pub fn rows_past_one_segment(ctx: &ridgeline_operators::GpuContext) -> Option<usize> {
    let seg = ctx.segment_rows();
    if seg > (32 << 20) {
        eprintln!("segment of {seg} rows too large to exceed in a test on this adapter; covered with small segments");
        return None;
    }
    Some(seg + seg / 100 + 7)
}
