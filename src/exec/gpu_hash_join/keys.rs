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
        let wide: Vec<Vec<i64>> = cols.iter().map(|c| widen(c.as_ref())).collect::<Result<_>>()?;
        Ok(self.key_of_wide(cols, &wide))
    }
    /// [`Composite::key`] over `cols` already widened to `wide`.
    pub(super) fn key_of_wide(&self, cols: &[ArrayRef], wide: &[Vec<i64>]) -> ArrayRef {
        let n = cols.first().map_or(0, |c| c.len());
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
                    for w in wide {
                        h = mix64(h ^ (w[i] as u64).wrapping_add(0x9e37_79b9_7f4a_7c15));
                    }
                    out.append_value(h as i64)
                }
            }
        }
        Arc::new(out.finish())
    }
}

/// A key column widened to i64: 4-byte keys of signed types sign-extended, the
/// others zero-extended (the order packing over ranges relies on).
pub(super) fn widen(a: &dyn Array) -> Result<Vec<i64>> {
    use arrow::datatypes::DataType::*;
    let signed = matches!(a.data_type(), Int8 | Int16 | Int32 | Date32);
    Ok(match KeyWords::of(a)? {
        KeyWords::W32(v) if signed => v.into_iter().map(|w| w as i32 as i64).collect(),
        KeyWords::W32(v) => v.into_iter().map(i64::from).collect(),
        KeyWords::W64(v) => v.into_iter().map(|w| w as i64).collect(),
    })
}

/// The device words of a key column as the host table's keys (4-byte keys by
/// their bit patterns: equality, all a join asks, is the same).
pub(super) fn host_keys(w: &KeyWords) -> Keys<'_> {
    match w {
        KeyWords::W32(v) => Keys::U32(v),
        KeyWords::W64(v) => Keys::I64(bytemuck::cast_slice(v)),
    }
}

pub(super) fn host_table(keys: &dyn Array) -> Result<HostJoinTable> {
    let words = KeyWords::of(keys)?;
    Ok(HostJoinTable::build(host_keys(&words), validity_words(keys).as_deref()))
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
