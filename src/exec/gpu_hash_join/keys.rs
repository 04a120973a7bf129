//! Join keys on the host: a key column in its device width, validity words,
//! several key columns made one 64-bit key (packed or hashed), and the upload
//! of a key column for the device probe.
use super::*;

/// How several key columns become one 64-bit key.
#[derive(Debug)]
pub(super) enum Composite {
    /// One key column: the key itself.
    One,
    /// `sum((k_i - min_i) * mult_i)` over the build side's ranges (exact; a probe key
    /// outside a range cannot match and is NULL).
    Packed { mins: Vec<i128>, maxs: Vec<i128>, mults: Vec<u128> },
    /// A 64-bit hash of the keys: equal keys, equal hashes; the pairs are checked on
    /// every key column on the host.
    Hashed,
}

pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Composite {
    pub(super) fn is_hashed(&self) -> bool {
        matches!(self, Composite::Hashed)
    }
    /// Packed when the build side's key ranges multiply to less than 2^63, else hashed.
    pub(super) fn plan(build_cols: &[Vec<i64>], valid: &dyn Fn(usize) -> bool) -> Composite {
        let mut mins = Vec::new();
        let mut maxs = Vec::new();
        for c in build_cols {
            let (mut lo, mut hi) = (i128::MAX, i128::MIN);
            for (i, &v) in c.iter().enumerate() {
                if valid(i) {
                    lo = lo.min(v as i128);
                    hi = hi.max(v as i128);
                }
            }
            if lo > hi {
                (lo, hi) = (0, 0);
            }
            mins.push(lo);
            maxs.push(hi);
        }
        let mut mults = vec![0u128; mins.len()];
        let mut m: u128 = 1;
        for i in (0..mins.len()).rev() {
            mults[i] = m;
            m = match m.checked_mul((maxs[i] - mins[i] + 1) as u128) {
                Some(x) if x <= i64::MAX as u128 => x,
                _ => return Composite::Hashed,
            };
        }
        Composite::Packed { mins, maxs, mults }
    }
    /// The key of every row of `cols` (NULL where a key column is NULL, or, packed,
    /// outside the build side's range).
    pub(super) fn key(&self, cols: &[ArrayRef]) -> Result<ArrayRef> {
        let n = cols.first().map_or(0, |c| c.len());
        let wide: Vec<Vec<i64>> = cols.iter().map(|c| widen(c.as_ref())).collect::<Result<_>>()?;
        let mut out = arrow::array::Int64Builder::with_capacity(n);
        for i in 0..n {
            if cols.iter().any(|c| c.is_null(i)) {
                out.append_null();
                continue;
            }
            match self {
                Composite::Packed { mins, maxs, mults } => {
                    let mut k: u128 = 0;
                    let mut inside = true;
                    for (j, w) in wide.iter().enumerate() {
                        let v = w[i] as i128;
                        if v < mins[j] || v > maxs[j] {
                            inside = false;
                            break;
                        }
                        k += (v - mins[j]) as u128 * mults[j];
                    }
                    if inside { out.append_value(k as i64) } else { out.append_null() }
                }
                _ => {
                    let mut h = 0x243f_6a88_85a3_08d3u64;
                    for w in &wide {
                        h = mix64(h ^ (w[i] as u64).wrapping_add(0x9e37_79b9_7f4a_7c15));
                    }
                    out.append_value(h as i64)
                }
            }
        }
        Ok(Arc::new(out.finish()))
    }
}

/// A key column widened to i64 (its device width's values, sign- or zero-extended).
pub(super) fn widen(a: &dyn Array) -> Result<Vec<i64>> {
    let w = key_width(a.data_type()).ok_or_else(|| DataFusionError::Internal(format!("join key of type {}", a.data_type())))?;
    Ok(match HostKeys::of(a, w)? {
        HostKeys::I32(v) => v.into_iter().map(i64::from).collect(),
        HostKeys::U32(v) => v.into_iter().map(i64::from).collect(),
        HostKeys::I64(v) => v,
    })
}

/// A key column in host memory, in its device width.
pub(super) enum HostKeys {
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
}

impl HostKeys {
    pub(super) fn of(a: &dyn Array, width: KeyWidth) -> Result<HostKeys> {
        use arrow::array::AsArray;
        use arrow::datatypes::*;
        let n = a.len();
        macro_rules! prim {
            ($t:ty, $to:ty) => {
                a.as_primitive::<$t>().values().iter().map(|&v| v as $to).collect::<Vec<$to>>()
            };
        }
        Ok(match (width, a.data_type()) {
            (KeyWidth::I32, DataType::Int8) => HostKeys::I32(prim!(Int8Type, i32)),
            (KeyWidth::I32, DataType::Int16) => HostKeys::I32(prim!(Int16Type, i32)),
            (KeyWidth::I32, DataType::Int32) => HostKeys::I32(prim!(Int32Type, i32)),
            (KeyWidth::I32, DataType::Date32) => HostKeys::I32(prim!(Date32Type, i32)),
            (KeyWidth::U32, DataType::UInt8) => HostKeys::U32(prim!(UInt8Type, u32)),
            (KeyWidth::U32, DataType::UInt16) => HostKeys::U32(prim!(UInt16Type, u32)),
            (KeyWidth::U32, DataType::UInt32) => HostKeys::U32(prim!(UInt32Type, u32)),
            (KeyWidth::I64, DataType::Decimal128(_, _)) => HostKeys::I64(prim!(Decimal128Type, i64)),
            (KeyWidth::I64, _) => {
                // every other 8-byte key is a primitive array of 8-byte values
                let data = a.to_data();
                let buf = &data.buffers()[0];
                let vals: &[i64] = buf.typed_data::<i64>();
                HostKeys::I64(vals[data.offset()..data.offset() + n].to_vec())
            }
            (w, t) => return Err(DataFusionError::Internal(format!("join key of type {t} as {w:?}"))),
        })
    }
    pub(super) fn keys(&self) -> Keys<'_> {
        match self {
            HostKeys::I32(v) => Keys::I32(v),
            HostKeys::U32(v) => Keys::U32(v),
            HostKeys::I64(v) => Keys::I64(v),
        }
    }
}

/// Arrow-style validity words of `a` (bit 0 is row 0), `None` without NULLs.
pub(super) fn validity_words(a: &dyn Array) -> Option<Vec<u32>> {
    let nulls = a.logical_nulls().filter(|n| n.null_count() > 0)?;
    let bits = nulls.inner().sliced();
    let bytes = &bits.as_slice()[..a.len().div_ceil(8)];
    let mut words = vec![0u32; a.len().div_ceil(32)];
    for (i, b) in bytes.iter().enumerate() {
        words[i / 4] |= (*b as u32) << (8 * (i % 4));
    }
    Some(words)
}

pub(super) fn host_table(keys: &dyn Array, width: KeyWidth) -> Result<HostJoinTable> {
    let hk = HostKeys::of(keys, width)?;
    Ok(HostJoinTable::build(hk.keys(), validity_words(keys).as_deref()))
}

pub(super) fn gpu_failure(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<GpuError>().is_some(),
        DataFusionError::Context(_, inner) => gpu_failure(inner),
        DataFusionError::Shared(inner) => gpu_failure(inner),
        _ => false,
    }
}

pub(super) fn gerr(e: GpuError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Uploads a key column and runs `f` on it.
pub(super) fn with_device_keys<T>(dev: &GpuContext, keys: &dyn Array, width: KeyWidth, f: impl FnOnce(&KeyColumn<'_>) -> Result<T>) -> Result<T> {
    let col = upload_array(dev, keys)?;
    let ColumnData::Device { values, validity, .. } = &col.data else {
        return Err(DataFusionError::Internal("join keys stayed in host memory".into()));
    };
    f(&KeyColumn { keys: values, width, validity: validity.as_ref(), rows: keys.len() })
}
