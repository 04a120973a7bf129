//! Host columns, the sequential reference ([`partition_reference`]) and the CPU
//! fast path ([`partition_cpu`]): rayon over chunks of rows, the chunk-histogram
//! matrix prefix-summed by [`crate::cpu_scan::scan_in_place`].
use super::{hash_combine, PartitionFn, NULL_TAG};
use rayon::prelude::*;

/// Values of a host column.
#[derive(Clone, Copy, Debug)]
pub enum HostValues<'a> {
    /// 4-byte values (u32, i32, f32, dates, ...).
    U32(&'a [u32]),
    /// 8-byte values (u64, i64, f64, ...).
    U64(&'a [u64]),
}

impl HostValues<'_> {
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            HostValues::U32(v) => v.len(),
            HostValues::U64(v) => v.len(),
        }
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn width(&self) -> usize {
        match self {
            HostValues::U32(_) => 4,
            HostValues::U64(_) => 8,
        }
    }
}

/// A host column: values and an optional validity bitmap (bit `i % 32` of word
/// `i / 32` set = row `i` not NULL, like Arrow).
#[derive(Clone, Copy, Debug)]
pub struct HostColumn<'a> {
    /// Values.
    pub values: HostValues<'a>,
    /// Validity bitmap (`ceil(len / 32)` words).
    pub validity: Option<&'a [u32]>,
}

impl<'a> HostColumn<'a> {
    /// A u32 column without NULLs.
    pub fn u32(v: &'a [u32]) -> Self {
        HostColumn { values: HostValues::U32(v), validity: None }
    }
    /// A u64 column without NULLs.
    pub fn u64(v: &'a [u64]) -> Self {
        HostColumn { values: HostValues::U64(v), validity: None }
    }
    /// The same column with a validity bitmap.
    pub fn with_validity(mut self, bits: &'a [u32]) -> Self {
        self.validity = Some(bits);
        self
    }
    fn valid(&self, i: usize) -> bool {
        self.validity.is_none_or(|b| (b[i / 32] >> (i % 32)) & 1 != 0)
    }
}

/// Owned values of a partitioned host column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedValues {
    /// 4-byte values.
    U32(Vec<u32>),
    /// 8-byte values.
    U64(Vec<u64>),
}

/// A partitioned host column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedColumn {
    /// Values in partition order.
    pub values: OwnedValues,
    /// Validity bitmap (`ceil(len / 32)` words, bits past `len` zero), when the
    /// input had one.
    pub validity: Option<Vec<u32>>,
}

/// A partitioned batch on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPartitioned {
    /// `fanout + 1` offsets: partition `b` is rows `offsets[b] .. offsets[b + 1]`.
    pub offsets: Vec<u64>,
    /// The columns, in input order.
    pub columns: Vec<OwnedColumn>,
}

fn check_host(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> usize {
    let n = columns.first().map_or(0, |c| c.values.len());
    for c in columns {
        assert_eq!(c.values.len(), n, "columns of different lengths");
        if let Some(v) = c.validity {
            assert!(v.len() >= n.div_ceil(32), "validity bitmap too short");
        }
    }
    for &k in keys {
        assert!(k < columns.len(), "key column {k} out of range");
    }
    let widths: Vec<usize> = keys.iter().map(|&k| columns[k].values.width()).collect();
    if let Err(e) = func.check(&widths) {
        panic!("{e}");
    }
    n
}

fn row_id(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn, i: usize) -> u32 {
    let word = |c: &HostColumn<'_>| -> (u32, u32) {
        match c.values {
            HostValues::U32(v) => (v[i], 0),
            HostValues::U64(v) => (v[i] as u32, (v[i] >> 32) as u32),
        }
    };
    match *func {
        PartitionFn::Radix { shift, bits } => {
            let c = &columns[keys[0]];
            if !c.valid(i) {
                return 0;
            }
            let (lo, hi) = word(c);
            let v = ((hi as u64) << 32) | lo as u64;
            ((v >> shift) as u32) & ((1u64 << bits) - 1) as u32
        }
        PartitionFn::Direct { fanout } => {
            let c = &columns[keys[0]];
            if !c.valid(i) {
                return 0;
            }
            word(c).0.min(fanout - 1)
        }
        PartitionFn::Hash { fanout } => {
            let mut h = 0u32;
            for &k in keys {
                let c = &columns[k];
                let wide = c.values.width() == 8;
                let (lo, hi) = if c.valid(i) { word(c) } else { (NULL_TAG, NULL_TAG) };
                h = hash_combine(h, lo);
                if wide {
                    h = hash_combine(h, hi);
                }
            }
            h % fanout
        }
    }
}

/// The partition id of every row (what the GPU's first kernel computes).
pub fn partition_ids(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> Vec<u32> {
    let n = check_host(columns, keys, func);
    let mut ids = vec![0u32; n];
    ids.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = row_id(columns, keys, func, c * (1 << 16) + j);
        }
    });
    ids
}

fn gather_column(c: &HostColumn<'_>, order: &[u32]) -> OwnedColumn {
    let values = match c.values {
        HostValues::U32(v) => OwnedValues::U32(order.iter().map(|&i| v[i as usize]).collect()),
        HostValues::U64(v) => OwnedValues::U64(order.iter().map(|&i| v[i as usize]).collect()),
    };
    let validity = c.validity.map(|_| {
        let mut bits = vec![0u32; order.len().div_ceil(32)];
        for (j, &i) in order.iter().enumerate() {
            if c.valid(i as usize) {
                bits[j / 32] |= 1 << (j % 32);
            }
        }
        bits
    });
    OwnedColumn { values, validity }
}

/// The sequential reference: a stable counting sort by partition id. Panics on
/// invalid arguments (mismatched lengths, a bad [`PartitionFn`]).
pub fn partition_reference(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> HostPartitioned {
    let n = check_host(columns, keys, func);
    let f = func.fanout() as usize;
    let ids: Vec<u32> = (0..n).map(|i| row_id(columns, keys, func, i)).collect();
    let mut offsets = vec![0u64; f + 1];
    for &id in &ids {
        offsets[id as usize + 1] += 1;
    }
    for b in 0..f {
        offsets[b + 1] += offsets[b];
    }
    let mut next: Vec<u64> = offsets[..f].to_vec();
    let mut order = vec![0u32; n];
    for (i, &id) in ids.iter().enumerate() {
        order[next[id as usize] as usize] = i as u32;
        next[id as usize] += 1;
    }
    HostPartitioned { offsets, columns: columns.iter().map(|c| gather_column(c, &order)).collect() }
}

struct SyncPtr<T>(*mut T);
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    /// # Safety
    /// `i` in bounds and written by one thread only.
    unsafe fn write(&self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
}

/// The CPU fast path: parallel histograms per chunk, the chunk-histogram matrix
/// (partition-major) prefix-summed by [`crate::cpu_scan::scan`], a
/// parallel stable scatter of the row numbers, then every column gathered in
/// parallel. Same output as [`partition_reference`].
pub fn partition_cpu(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> HostPartitioned {
    let n = check_host(columns, keys, func);
    let f = func.fanout() as usize;
    let threads = rayon::current_num_threads().max(1);
    // chunks: enough for the threads, few enough that the matrix stays small
    let chunk = n.div_ceil(threads * 4).max(1 << 14).max(f * 4);
    let nchunks = n.div_ceil(chunk).max(1);
    let ids = partition_ids(columns, keys, func);
    let hists: Vec<Vec<u32>> = (0..nchunks)
        .into_par_iter()
        .map(|c| {
            let mut h = vec![0u32; f];
            for &id in &ids[(c * chunk).min(n)..((c + 1) * chunk).min(n)] {
                h[id as usize] += 1;
            }
            h
        })
        .collect();
    let mut matrix = vec![0u64; f * nchunks];
    for (c, h) in hists.iter().enumerate() {
        for b in 0..f {
            matrix[b * nchunks + c] = h[b] as u64;
        }
    }
    let total = crate::cpu_scan::scan_in_place(&mut matrix, &crate::cpu_scan::ScanConfig::exclusive());
    debug_assert_eq!(total, n as u64);
    let mut offsets: Vec<u64> = (0..f).map(|b| matrix[b * nchunks]).collect();
    offsets.push(n as u64);
    let mut order = vec![0u32; n];
    let ptr = SyncPtr(order.as_mut_ptr());
    (0..nchunks).into_par_iter().for_each(|c| {
        let mut next: Vec<u64> = (0..f).map(|b| matrix[b * nchunks + c]).collect();
        let start = (c * chunk).min(n);
        for (j, &id) in ids[start..((c + 1) * chunk).min(n)].iter().enumerate() {
            let d = &mut next[id as usize];
            // SAFETY: the destinations of all chunks are disjoint and below n.
            unsafe { ptr.write(*d as usize, (start + j) as u32) };
            *d += 1;
        }
    });
    let cols = columns.par_iter().map(|c| gather_column_par(c, &order)).collect();
    HostPartitioned { offsets, columns: cols }
}

fn gather_column_par(c: &HostColumn<'_>, order: &[u32]) -> OwnedColumn {
    let values = match c.values {
        HostValues::U32(v) => OwnedValues::U32(order.par_iter().map(|&i| v[i as usize]).collect()),
        HostValues::U64(v) => OwnedValues::U64(order.par_iter().map(|&i| v[i as usize]).collect()),
    };
    let validity = c.validity.map(|_| {
        order
            .par_chunks(32)
            .map(|ch| ch.iter().enumerate().fold(0u32, |w, (k, &i)| w | ((c.valid(i as usize) as u32) << k)))
            .collect()
    });
    OwnedColumn { values, validity }
}
