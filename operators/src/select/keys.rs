//! Order-preserving keys: host values to `u32`/`u64` keys (Arrow's total order for
//! floats, the sign bit flipped for integers), their inverses, and the same
//! mapping of raw 8-byte values in place on the device.
use super::contract::SelectOptions;
use super::kernels::{Kern, Params};
use super::record::Rec;
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::tuning::select::{BULK_MIN, WG};
use rayon::prelude::*;

const F32_NAN_KEY: u32 = 0x7fc0_0000 | 0x8000_0000;
const F64_NAN_KEY: u64 = 0x7ff8_0000_0000_0000 | (1 << 63);

/// Order-preserving key of an `f32` (Arrow's total order; all NaNs equal, after +inf).
pub fn key_f32(x: f32) -> u32 {
    if x.is_nan() {
        return F32_NAN_KEY;
    }
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Order-preserving key of an `f64` (Arrow's total order; all NaNs equal, after +inf).
pub fn key_f64(x: f64) -> u64 {
    if x.is_nan() {
        return F64_NAN_KEY;
    }
    let b = x.to_bits();
    if b & (1 << 63) != 0 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// Order-preserving key of an `i32` (sign bit flipped).
pub fn key_i32(x: i32) -> u32 {
    (x as u32) ^ 0x8000_0000
}

/// Order-preserving key of an `i64` (sign bit flipped).
pub fn key_i64(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

/// Inverse of [`key_i32`].
pub fn unkey_i32(k: u32) -> i32 {
    (k ^ 0x8000_0000) as i32
}
/// Inverse of [`key_i64`].
pub fn unkey_i64(k: u64) -> i64 {
    (k ^ (1 << 63)) as i64
}
/// Inverse of [`key_f32`] (NaN keys give the canonical NaN).
pub fn unkey_f32(k: u32) -> f32 {
    f32::from_bits(if k & 0x8000_0000 != 0 { k & 0x7fff_ffff } else { !k })
}
/// Inverse of [`key_f64`] (NaN keys give the canonical NaN).
pub fn unkey_f64(k: u64) -> f64 {
    f64::from_bits(if k & (1 << 63) != 0 { k & !(1 << 63) } else { !k })
}

fn bulk<T: Copy + Sync, K: Send>(xs: &[T], f: impl Fn(T) -> K + Sync + Send) -> Vec<K> {
    if xs.len() < BULK_MIN {
        xs.iter().map(|&x| f(x)).collect()
    } else {
        xs.par_iter().with_min_len(BULK_MIN / 4).map(|&x| f(x)).collect()
    }
}

/// [`key_f32`] of every value (parallel).
pub fn keys_f32(xs: &[f32]) -> Vec<u32> {
    bulk(xs, key_f32)
}
/// [`key_f64`] of every value (parallel).
pub fn keys_f64(xs: &[f64]) -> Vec<u64> {
    bulk(xs, key_f64)
}
/// [`key_i32`] of every value (parallel).
pub fn keys_i32(xs: &[i32]) -> Vec<u32> {
    bulk(xs, key_i32)
}
/// [`key_i64`] of every value (parallel).
pub fn keys_i64(xs: &[i64]) -> Vec<u64> {
    bulk(xs, key_i64)
}

/// What 8-byte device values hold, for [`to_order_keys_gpu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawKind {
    /// `i64` (also decimals by their unscaled value, timestamps, Date64).
    I64,
    /// `f64`.
    F64,
}

/// Turns the 8-byte values of `arr` into their order-preserving keys in place
/// ([`key_i64`] / [`key_f64`] of every element), complemented when `descending`
/// (so the largest value has the smallest key); one dispatch per segment
/// (shaders/select/order_keys.wgsl).
pub fn to_order_keys_gpu(ctx: &GpuContext, arr: &DeviceArray, kind: RawKind, descending: bool) -> GpuResult<()> {
    if arr.elem_size() != 8 {
        return Err(GpuError::Invalid(format!("order keys of {}-byte values (expected 8)", arr.elem_size())));
    }
    if arr.is_empty() {
        return Ok(());
    }
    let k = Kern::new(ctx, 8, &SelectOptions::default())?;
    let pipe = k.pipe(ctx, "order_keys", "to_key")?;
    let mode = match kind {
        RawKind::I64 => 0,
        RawKind::F64 => 1,
    } | if descending { 2 } else { 0 };
    let mut rec = Rec::new(ctx);
    let mut uniforms = Vec::new();
    for s in 0..arr.num_segments() {
        let (buf, _, rows) = arr.segment(s);
        let ub = ctx.uniform(&Params { off: 0, n: rows as u32, cnt: 0, dst_off: 0, seed: 0, task: 0, mode, pad: 0 });
        rec.dispatch(&pipe, &[(0, buf), (2, &ub)], (rows as u64).div_ceil(WG as u64))?;
        uniforms.push(ub);
    }
    let mut enc = ctx.encoder("order-keys");
    rec.encode(&mut enc, None);
    ctx.submit(enc)?;
    Ok(())
}
