//! Key membership in a dense bitmap: the semi-join prefilter.
//!
//! A hash join's build side is small and its keys are usually a dense integer
//! range (dimension tables' keys); the probe side is a large fact table. Sideways
//! information passing sends the build side's key set to the probe-side scan so
//! rows whose key cannot match are dropped before they travel or are probed. Here
//! the set is exact: a bitmap over `[base, base + nbits)` ([`KeyBitmap`]), and the
//! test is one bit read per row. `ridgeline`'s `GpuSemiFilterExec` runs it on the
//! resident probe columns ([`member_gpu`], shaders/member.wgsl) and compacts the
//! rows that pass; [`member_words`] is the CPU fast path and [`member_reference`]
//! the plain reference.
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::DeviceArray;

const MEMBER_WGSL: &str = include_str!("../../shaders/member.wgsl");
const WG: u32 = crate::tuning::aggregate::MEMBER_WORKGROUP;

/// The widest bitmap a key set may have (2^28 bits, 32 MiB): wider key ranges are
/// not worth a dense set.
pub const MAX_SET_BITS: u64 = 1 << 28;

/// An exact set of integer keys as a bitmap over `[base, base + nbits)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBitmap {
    /// The smallest key the bitmap covers.
    pub base: i64,
    /// Bits covered (keys `base .. base + nbits`).
    pub nbits: u32,
    /// The bits, `nbits.div_ceil(32)` words (bit `k - base` set for key `k`).
    pub words: Vec<u32>,
    /// Keys in the set.
    pub count: u64,
}

impl KeyBitmap {
    /// The empty set.
    pub fn empty() -> KeyBitmap {
        KeyBitmap { base: 0, nbits: 0, words: Vec::new(), count: 0 }
    }

    /// The set of `keys` (duplicates allowed), or `None` when their range is wider
    /// than `max_bits` (at most [`MAX_SET_BITS`]).
    pub fn from_keys(keys: &[i64], max_bits: u64) -> Option<KeyBitmap> {
        let (Some(&lo), Some(&hi)) = (keys.iter().min(), keys.iter().max()) else { return Some(KeyBitmap::empty()) };
        let span = (hi as i128 - lo as i128 + 1) as u128;
        if span > max_bits.min(MAX_SET_BITS) as u128 {
            return None;
        }
        let nbits = span as u32;
        let mut words = vec![0u32; (nbits as usize).div_ceil(32)];
        for &k in keys {
            let d = (k - lo) as u32;
            words[(d >> 5) as usize] |= 1 << (d & 31);
        }
        let count = words.iter().map(|w| w.count_ones() as u64).sum();
        Some(KeyBitmap { base: lo, nbits, words, count })
    }

    /// Whether `k` is in the set.
    pub fn contains(&self, k: i64) -> bool {
        let d = k as i128 - self.base as i128;
        if d < 0 || d >= self.nbits as i128 {
            return false;
        }
        let d = d as u32;
        (self.words[(d >> 5) as usize] >> (d & 31)) & 1 != 0
    }

    /// Keys of the set within `[lo, hi]`.
    pub fn count_in(&self, lo: i64, hi: i64) -> u64 {
        if self.nbits == 0 || hi < lo {
            return 0;
        }
        let first = (lo as i128 - self.base as i128).max(0);
        let last = (hi as i128 - self.base as i128).min(self.nbits as i128 - 1);
        if first > last {
            return 0;
        }
        let (first, last) = (first as u64, last as u64);
        if first == 0 && last == self.nbits as u64 - 1 {
            return self.count;
        }
        (first..=last).filter(|&d| (self.words[(d >> 5) as usize] >> (d & 31)) & 1 != 0).count() as u64
    }
}

/// The keys of a column, by their width on the device.
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    /// 4-byte signed keys (Int8/16/32, Date32 widened).
    I32(&'a [i32]),
    /// 4-byte unsigned keys.
    U32(&'a [u32]),
    /// 8-byte signed keys.
    I64(&'a [i64]),
}

impl Keys<'_> {
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            Keys::I32(k) => k.len(),
            Keys::U32(k) => k.len(),
            Keys::I64(k) => k.len(),
        }
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(crate) fn get(&self, i: usize) -> i64 {
        match self {
            Keys::I32(k) => k[i] as i64,
            Keys::U32(k) => k[i] as i64,
            Keys::I64(k) => k[i],
        }
    }
}

/// How a device key column is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyWidth {
    /// 4-byte signed.
    I32,
    /// 4-byte unsigned.
    U32,
    /// 8-byte signed.
    I64,
}

/// The reference: whether each row's key is valid and in `set`.
pub fn member_reference(keys: &[i64], valid: Option<&[bool]>, set: &KeyBitmap) -> Vec<bool> {
    keys.iter().enumerate().map(|(i, &k)| valid.is_none_or(|v| v[i]) && set.contains(k)).collect()
}

/// The CPU fast path: the selection bitmap (bit `r` of word `r / 32`) of rows
/// whose key is valid (`validity`: Arrow-style bits, `None` when none is NULL) and
/// in `set`; one range test and one bit read per row, a word at a time.
pub fn member_words(keys: Keys<'_>, validity: Option<&[u32]>, set: &KeyBitmap) -> Vec<u32> {
    let n = keys.len();
    let mut out = vec![0u32; n.div_ceil(32)];
    let base = set.base as i128;
    let nbits = set.nbits as i128;
    for (w, word) in out.iter_mut().enumerate() {
        let r0 = w * 32;
        let vw = validity.map_or(u32::MAX, |v| v[w]);
        let mut bits = 0u32;
        for j in 0..(n - r0).min(32) {
            if (vw >> j) & 1 == 0 {
                continue;
            }
            let d = keys.get(r0 + j) as i128 - base;
            if d >= 0 && d < nbits {
                let d = d as u32;
                bits |= ((set.words[(d >> 5) as usize] >> (d & 31)) & 1) << j;
            }
        }
        *word = bits;
    }
    out
}

/// A key set on the device (uploaded once per query, shared by every batch).
#[derive(Debug)]
pub struct DeviceKeySet {
    bits: DeviceArray,
    base: i64,
    nbits: u32,
}

impl DeviceKeySet {
    /// Uploads `set` (its bitmap must fit one binding).
    pub fn upload(ctx: &GpuContext, set: &KeyBitmap) -> GpuResult<DeviceKeySet> {
        let mut words = set.words.clone();
        if words.is_empty() {
            words.push(0);
        }
        if words.len() > ctx.segment_rows() {
            return Err(GpuError::Invalid(format!("key set of {} bits exceeds one binding", set.nbits)));
        }
        let bits = DeviceArray::upload(ctx, &words)?;
        Ok(DeviceKeySet { bits, base: set.base, nbits: set.nbits })
    }
    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        self.bits.device_bytes()
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    grid: u32,
    flags: u32,
    nbits: u32,
    base_lo: u32,
    base_hi: u32,
    pad0: u32,
    pad1: u32,
}

/// One key column of [`member_gpu`]: `rows` keys (`keys`, stored as
/// `width`, validity bits in `validity` when some are NULL).
#[derive(Clone, Copy)]
pub struct MemberInput<'a> {
    /// The keys.
    pub keys: &'a DeviceArray,
    /// Their storage.
    pub width: KeyWidth,
    /// Their validity bits, if some are NULL.
    pub validity: Option<&'a DeviceArray>,
    /// Rows to test.
    pub rows: usize,
}

/// Rows a workgroup of the kernel tests (`ITEMS * WG` in shaders/member.wgsl).
const ROWS_PER_WG: u64 = 4 * WG as u64;

/// The selection bitmaps of the key columns `inputs` against one set, recorded into
/// one command buffer and submitted once (a semi-join prefilter tests every chunk of
/// a table this way): per input, the bitmap of its `rows` rows whose key (`keys`,
/// stored as `width`, validity bits in `validity` when some are NULL) is in `set`,
/// segmented like the row-wise kernels' selections (`keys.seg_rows() / 32` words per
/// segment), ready for `compact::Selection::Bitmap`.
pub fn member_gpu(ctx: &GpuContext, inputs: &[MemberInput<'_>], set: &DeviceKeySet) -> GpuResult<Vec<DeviceArray>> {
    let pipe = ctx.pipeline("member", MEMBER_WGSL, "main", &[("WG", WG.to_string())])?;
    let layout = pipe.get_bind_group_layout(0);
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let (set_buf, _, _) = set.bits.segment(0);
    let mut enc = ctx.encoder("member");
    let mut uniforms = Vec::new();
    let mut outs = Vec::with_capacity(inputs.len());
    for &MemberInput { keys, width, validity, rows } in inputs {
        let elem = if width == KeyWidth::I64 { 8 } else { 4 };
        if keys.elem_size() != elem || keys.len() < rows {
            return Err(GpuError::Invalid(format!("{rows} keys of {elem} bytes expected, got {} of {}", keys.len(), keys.elem_size())));
        }
        let seg = keys.seg_rows();
        let segments = rows.div_ceil(seg);
        if segments > 1 && seg % 32 != 0 {
            return Err(GpuError::Invalid(format!("key segments of {seg} rows (expected a multiple of 32)")));
        }
        if let Some(v) = validity {
            if v.num_segments() < segments || (segments > 1 && v.seg_rows() != seg / 32) {
                return Err(GpuError::Invalid("validity bitmap not split like its keys".into()));
            }
        }
        // One selection segment per key segment, `seg / 32` words each (the
        // row-wise kernels' layout, which the compaction expects)
        // (a single segment whose rows are not a multiple of 128 gets one segment
        // of every word instead)
        let out_seg = if seg % 128 == 0 { seg / 32 } else { rows.div_ceil(32).max(1).div_ceil(4) * 4 };
        let out = DeviceArray::alloc_segmented(ctx, rows.div_ceil(32), 4, out_seg)?;
        let mut flags = match width {
            KeyWidth::I64 => 1,
            KeyWidth::I32 => 2,
            KeyWidth::U32 => 0,
        };
        if validity.is_some() {
            flags |= 4;
        }
        for s in 0..segments {
            let (kbuf, start, _) = keys.segment(s);
            let seg_len = (rows - start).min(seg);
            let (x, y, z) = dispatch_dims((seg_len as u64).div_ceil(ROWS_PER_WG), max_dim);
            let ub = ctx.uniform(&Params {
                rows: seg_len as u32,
                grid: x,
                flags,
                nbits: set.nbits,
                base_lo: set.base as u64 as u32,
                base_hi: ((set.base as u64) >> 32) as u32,
                pad0: 0,
                pad1: 0,
            });
            let vbuf = match validity {
                Some(v) => v.segment(s).0,
                None => kbuf,
            };
            let (obuf, _, _) = out.segment(s);
            let entries = [
                wgpu::BindGroupEntry { binding: 0, resource: ub.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: kbuf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: vbuf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: set_buf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: obuf.as_entire_binding() },
            ];
            let bg = ctx.scoped(|| {
                ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some("member"), layout: &layout, entries: &entries })
            })?;
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("member"), timestamp_writes: None });
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
            uniforms.push(ub);
        }
        outs.push(out);
    }
    if !uniforms.is_empty() {
        ctx.submit(enc)?;
    }
    drop(uniforms);
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_basics() {
        let s = KeyBitmap::from_keys(&[5, 9, 5, -3], 1 << 20).unwrap();
        assert_eq!((s.base, s.nbits, s.count), (-3, 13, 3));
        assert!(s.contains(-3) && s.contains(5) && s.contains(9));
        assert!(!s.contains(-4) && !s.contains(4) && !s.contains(10) && !s.contains(i64::MIN) && !s.contains(i64::MAX));
        assert_eq!(s.count_in(0, 100), 2);
        assert_eq!(s.count_in(-100, 100), 3);
        assert_eq!(s.count_in(6, 8), 0);
        assert_eq!(s.count_in(10, 5), 0);
        assert!(KeyBitmap::from_keys(&[0, 1 << 21], 1 << 20).is_none());
        assert!(KeyBitmap::from_keys(&[i64::MIN, i64::MAX], MAX_SET_BITS).is_none());
        let e = KeyBitmap::from_keys(&[], 16).unwrap();
        assert_eq!((e.nbits, e.count), (0, 0));
        assert!(!e.contains(0));
        assert_eq!(e.count_in(i64::MIN, i64::MAX), 0);
    }

    #[test]
    fn fast_path_matches_reference() {
        let set = KeyBitmap::from_keys(&[-40, -1, 0, 3, 31, 32, 33, 64, 1000], 1 << 16).unwrap();
        let keys: Vec<i64> = (-70..1100).chain([i64::MIN, i64::MAX, -41, 1001]).collect();
        let valid: Vec<bool> = (0..keys.len()).map(|i| i % 7 != 3).collect();
        let mut vbits = vec![0u32; keys.len().div_ceil(32)];
        for (i, &v) in valid.iter().enumerate() {
            if v {
                vbits[i / 32] |= 1 << (i % 32);
            }
        }
        let want = member_reference(&keys, Some(&valid), &set);
        let got = member_words(Keys::I64(&keys), Some(&vbits), &set);
        for (i, &w) in want.iter().enumerate() {
            assert_eq!((got[i / 32] >> (i % 32)) & 1 == 1, w, "row {i}");
        }
        let k32: Vec<i32> = keys.iter().map(|&k| k as i32).collect();
        let want32 = member_reference(&k32.iter().map(|&k| k as i64).collect::<Vec<_>>(), None, &set);
        let got32 = member_words(Keys::I32(&k32), None, &set);
        for (i, &w) in want32.iter().enumerate() {
            assert_eq!((got32[i / 32] >> (i % 32)) & 1 == 1, w, "row {i}");
        }
    }
}
