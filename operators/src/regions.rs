//! Grouped order statistics on the GPU: every group a region, one SampleSelect
//! per region (the grouped quantiles of `GROUP BY`).
//!
//! Rows arrive in chunks, each with a dense group tag per row (MERCATOR's
//! enumeration, Timcheck & Buhler: tag `g < groups`, any larger tag drops the
//! row) and a raw 8-byte value. [`RegionSelect::add`] partitions each chunk by
//! tag on the device (histogram, scan, stable scatter: [`crate::partition`]), so
//! the chunk's rows of a group are one contiguous run with sparse region offsets.
//! [`RegionSelect::finish`] then gathers each group's runs from every chunk into
//! one device region ([`copy_elements`]), turns the raw values into order keys in
//! place ([`to_order_keys_gpu`]), and selects the ranks the group needs:
//! SampleSelect on the device for regions of at least `gpu_min_rows` keys (only
//! bucket counts and the selected keys come back), a download and the CPU
//! selection for smaller ones (fixed costs per device selection would dominate).
//!
//! Device memory: the partitioned chunks (tags and values) until `finish`, then
//! one group region at a time on top.
//!
//! [`region_select_reference`] is the sort-based reference the tests compare with.
use crate::array::{copy_elements, DeviceArray};
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::partition::{partition_gpu, PartitionFn};
use crate::select::{key_f64, key_i64, select_cpu, select_gpu_device, to_order_keys_gpu, RawKind};

/// Grouped selection over chunks of tagged device values.
#[derive(Debug)]
pub struct RegionSelect {
    groups: u32,
    kind: RawKind,
    /// Per chunk: the `groups + 2` region offsets and the partitioned values.
    parts: Vec<(Vec<u64>, DeviceArray)>,
}

/// How [`RegionSelect::finish`] ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionSelectStats {
    /// Rows kept (tag below `groups`).
    pub rows: u64,
    /// Regions selected on the device.
    pub gpu_regions: usize,
    /// Regions downloaded and selected on the CPU.
    pub cpu_regions: usize,
}

/// The key of a raw value.
pub fn raw_key(kind: RawKind, bits: u64) -> u64 {
    match kind {
        RawKind::I64 => key_i64(bits as i64),
        RawKind::F64 => key_f64(f64::from_bits(bits)),
    }
}

impl RegionSelect {
    /// Empty, for `groups` groups (at most 2^24 - 1) of values of `kind`.
    pub fn new(groups: u32, kind: RawKind) -> GpuResult<Self> {
        if groups == 0 || groups >= crate::partition::MAX_FANOUT {
            return Err(GpuError::Invalid(format!("{groups} groups (expected 1..{})", crate::partition::MAX_FANOUT)));
        }
        Ok(RegionSelect { groups, kind, parts: Vec::new() })
    }

    /// Adds a chunk: `tags` (`u32`) and `values` (8 bytes each) of the same rows,
    /// segmented alike. Rows tagged `groups` or above are dropped.
    pub fn add(&mut self, ctx: &GpuContext, tags: &DeviceArray, values: &DeviceArray) -> GpuResult<()> {
        if tags.elem_size() != 4 || values.elem_size() != 8 {
            return Err(GpuError::Invalid("region select takes u32 tags and 8-byte values".into()));
        }
        if tags.len() != values.len() {
            return Err(GpuError::Invalid(format!("{} tags for {} values", tags.len(), values.len())));
        }
        if tags.is_empty() {
            return Ok(());
        }
        let cols = [Column::new(tags), Column::new(values)];
        let mut p = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: self.groups + 1 })?;
        let values = p.columns.pop().expect("two columns").values;
        self.parts.push((p.offsets, values));
        Ok(())
    }

    /// Rows per group so far.
    pub fn sizes(&self) -> Vec<u64> {
        let mut n = vec![0u64; self.groups as usize];
        for (off, _) in &self.parts {
            for (g, x) in n.iter_mut().enumerate() {
                *x += off[g + 1] - off[g];
            }
        }
        n
    }

    /// Per group: its row count and the keys at `ranks_of(n)` (in that order;
    /// `ranks_of` is called only for non-empty groups, every rank below `n`).
    pub fn finish(
        self,
        ctx: &GpuContext,
        ranks_of: &dyn Fn(usize) -> Vec<u64>,
        gpu_min_rows: usize,
    ) -> GpuResult<(Vec<(usize, Vec<u64>)>, RegionSelectStats)> {
        let sizes = self.sizes();
        let mut stats = RegionSelectStats { rows: sizes.iter().sum(), ..Default::default() };
        let seg = self.parts.first().map_or(ctx.segment_rows(), |p| p.1.seg_rows());
        let mut out = Vec::with_capacity(sizes.len());
        for (g, &n) in sizes.iter().enumerate() {
            let n = n as usize;
            if n == 0 {
                out.push((0, Vec::new()));
                continue;
            }
            let ranks = ranks_of(n);
            if let Some(r) = ranks.iter().find(|&&r| r >= n as u64) {
                return Err(GpuError::Invalid(format!("rank {r} out of range for a group of {n}")));
            }
            let mut uniq = ranks.clone();
            uniq.sort_unstable();
            uniq.dedup();
            let region = DeviceArray::alloc_segmented(ctx, n, 8, seg)?;
            let mut at = 0usize;
            for (off, vals) in &self.parts {
                let (a, b) = (off[g] as usize, off[g + 1] as usize);
                copy_elements(ctx, vals, a, &region, at, b - a)?;
                at += b - a;
            }
            let got: Vec<u64> = if n >= gpu_min_rows.max(2) {
                to_order_keys_gpu(ctx, &region, self.kind)?;
                stats.gpu_regions += 1;
                select_gpu_device::<u64>(ctx, &region, n, &uniq)?.0
            } else {
                let raw: Vec<u64> = region.download(ctx)?;
                let keys: Vec<u64> = raw.iter().map(|&b| raw_key(self.kind, b)).collect();
                stats.cpu_regions += 1;
                select_cpu(&keys, &uniq)
            };
            out.push((n, ranks.iter().map(|r| got[uniq.binary_search(r).expect("a rank")]).collect()));
        }
        Ok((out, stats))
    }
}

/// The reference: per group (tags below `groups`), its row count and the keys at
/// `ranks_of(n)` by sorting the group's keys.
pub fn region_select_reference(
    tags: &[u32],
    values: &[u64],
    groups: u32,
    kind: RawKind,
    ranks_of: &dyn Fn(usize) -> Vec<u64>,
) -> Vec<(usize, Vec<u64>)> {
    let mut per: Vec<Vec<u64>> = vec![Vec::new(); groups as usize];
    for (&t, &v) in tags.iter().zip(values) {
        if t < groups {
            per[t as usize].push(raw_key(kind, v));
        }
    }
    per.into_iter()
        .map(|mut k| {
            if k.is_empty() {
                return (0, Vec::new());
            }
            k.sort_unstable();
            let n = k.len();
            (n, ranks_of(n).iter().map(|&r| k[r as usize]).collect())
        })
        .collect()
}
