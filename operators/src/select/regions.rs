//! Grouped order statistics on the GPU: every group a region, all regions
//! selected together (the grouped quantiles of `GROUP BY`).
//!
//! [`select_regions_gpu`] selects ranks in many regions of one device array in one
//! SampleSelect descent (every region a task).
//!
//! Rows arrive in chunks, each with a dense group tag per row (MERCATOR's
//! enumeration, Timcheck & Buhler: tag `g < groups`, any larger tag drops the
//! row) and a raw 8-byte value. [`RegionSelect::add`] copies each chunk into one
//! device array of all rows; [`RegionSelect::finish`] partitions it by tag once
//! (histogram, scan, stable scatter: [`crate::partition`], several digit passes
//! past 256 groups), so each group is one contiguous region with sparse region
//! offsets, turns the values into order keys in place ([`to_order_keys_gpu`]), and
//! selects every group's ranks in one SampleSelect descent over all regions
//! ([`select_regions_gpu`]: one submission and one readback of bucket
//! counts per level for all groups; regions of at most one sample are sorted whole
//! by one workgroup). Only the selected keys come back.
//!
//! Dense tags or sparse regions, by the measured region size (the region paper's
//! choice): when the non-empty regions average fewer than `gpu_min_rows` rows,
//! the per-region costs of the device descent (a few dispatches per region and
//! level) outweigh its speed, so the partitioned values are downloaded and the
//! regions selected on the CPU in parallel (small regions sorted whole). On the
//! H100, 1000 regions of about 2000 rows took 150 ms through the device descent
//! against 81 ms for the CPU aggregation (docs/benchmarks/history/session-08.md).
//!
//! Device memory: the rows (tags and values, 12 bytes a row) twice during the
//! partition, then the partitioned values and the selection's scratch.
//!
//! [`region_select_reference`] is the sort-based reference the tests compare with.
use super::bracket::bracket;
use super::contract::{SelectKey, SelectOptions};
use super::cpu::select_cpu;
use super::descent::{check_device_input, sample_select_tasks, Src, Start, Task};
use super::keys::{key_f64, key_i64, to_order_keys_gpu, RawKind};
use super::record::GpuClock;
use crate::array::{copy_elements, DeviceArray};
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::partition::{partition_gpu, PartitionFn};
use crate::tuning::select::{RANKS_PER_DESCENT, REGION_SORT_MAX as SORT_MAX};
use rayon::prelude::*;

/// Exact GPU selection in many regions of one device array at once: region `i`
/// is elements `regions[i].0 .. regions[i].0 + regions[i].1`, and its answers are
/// its keys at `ranks[i]` (ranks within the region). All regions descend together,
/// level by level (one submission and one readback of bucket counts per level for
/// all of them); regions of at most one sample's keys are sorted whole in one
/// workgroup. Regions with more than [`RANKS_PER_DESCENT`] distinct ranks are
/// served over several rounds; regions of at least
/// [`SelectOptions::bracket_min`] keys start with the bracketing level.
pub fn select_regions_gpu<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    regions: &[(u64, u64)],
    ranks: &[Vec<u64>],
    opts: &SelectOptions,
) -> GpuResult<Vec<Vec<K>>> {
    if regions.len() != ranks.len() {
        return Err(GpuError::Invalid(format!("{} regions, {} rank lists", regions.len(), ranks.len())));
    }
    let len = regions.iter().map(|r| r.0 + r.1).max().unwrap_or(0) as usize;
    check_device_input::<K>(ctx, keys, len)?;
    for (&(_, n), rs) in regions.iter().zip(ranks) {
        if let Some(r) = rs.iter().find(|&&r| r >= n) {
            return Err(GpuError::Invalid(format!("rank {r} out of range for a region of {n} keys")));
        }
    }
    // Distinct ranks per region, in rounds of at most RANKS_PER_DESCENT each.
    let uniq: Vec<Vec<u64>> = ranks
        .iter()
        .map(|r| {
            let mut u = r.clone();
            u.sort_unstable();
            u.dedup();
            u
        })
        .collect();
    let mut vals: Vec<Vec<K>> = uniq.iter().map(|u| vec![K::default(); u.len()]).collect();
    let rounds = uniq.iter().map(|u| u.len().div_ceil(RANKS_PER_DESCENT)).max().unwrap_or(0);
    let opts = *opts;
    for round in 0..rounds {
        let mut tasks = Vec::new();
        let mut slots: Vec<(usize, usize)> = Vec::new(); // output index -> (region, index in uniq)
        for (ri, u) in uniq.iter().enumerate() {
            let lo = round * RANKS_PER_DESCENT;
            if lo >= u.len() {
                continue;
            }
            let hi = (lo + RANKS_PER_DESCENT).min(u.len());
            let mut tr = Vec::with_capacity(hi - lo);
            for (j, &r) in u.iter().enumerate().take(hi).skip(lo) {
                tr.push((slots.len(), r));
                slots.push((ri, j));
            }
            tasks.push(Task { src: Src::Range { start: regions[ri].0 }, n: regions[ri].1, lo: 0, ranks: tr, below: None, above: None });
        }
        let mut clock = GpuClock::new(ctx, &opts);
        // Large regions start with the bracketing level (one pass each over the
        // region); their windows' buffers join the descent's.
        let mut start = Start::default();
        let mut first = Vec::with_capacity(tasks.len());
        for t in tasks {
            match bracket::<K>(ctx, keys, len, &t, &opts, &mut clock)? {
                Some((wtasks, st)) => {
                    let shift = start.bufs.len();
                    for mut wt in wtasks {
                        if let Src::Buf { buf, off } = wt.src {
                            wt.src = Src::Buf { buf: buf + shift, off };
                        }
                        first.push(wt);
                    }
                    start.bufs.extend(st.bufs);
                    start.bytes += st.bytes;
                    start.answered.extend(st.answered);
                    start.level = 1;
                }
                None => first.push(t),
            }
        }
        let (out, _) = sample_select_tasks::<K>(ctx, keys, len, first, slots.len(), None, &opts, clock, start)?;
        for (o, &(ri, j)) in out.into_iter().zip(&slots) {
            vals[ri][j] = o;
        }
    }
    Ok(ranks
        .iter()
        .zip(uniq.iter().zip(&vals))
        .map(|(rs, (u, v))| rs.iter().map(|r| v[u.binary_search(r).expect("a rank")]).collect())
        .collect())
}

/// Grouped selection over chunks of tagged device values.
#[derive(Debug)]
pub struct RegionSelect {
    groups: u32,
    kind: RawKind,
    /// All rows: tags and raw values.
    tags: DeviceArray,
    values: DeviceArray,
    /// Rows added so far.
    filled: usize,
}

/// How [`RegionSelect::finish`] ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionSelectStats {
    /// Rows kept (tag below `groups`).
    pub rows: u64,
    /// Non-empty regions selected on the device.
    pub gpu_regions: usize,
    /// Non-empty regions selected on the CPU.
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
    /// Empty, for `rows` rows in all, `groups` groups (at most 2^24 - 1) of values
    /// of `kind`, with the context's segment size.
    pub fn new(ctx: &GpuContext, groups: u32, kind: RawKind, rows: usize) -> GpuResult<Self> {
        Self::new_segmented(ctx, groups, kind, rows, ctx.segment_rows())
    }

    /// [`RegionSelect::new`] with `seg_rows` rows per buffer segment (tests).
    pub fn new_segmented(ctx: &GpuContext, groups: u32, kind: RawKind, rows: usize, seg_rows: usize) -> GpuResult<Self> {
        if groups == 0 || groups >= crate::partition::MAX_FANOUT {
            return Err(GpuError::Invalid(format!("{groups} groups (expected 1..{})", crate::partition::MAX_FANOUT)));
        }
        Ok(RegionSelect {
            groups,
            kind,
            tags: DeviceArray::alloc_segmented(ctx, rows, 4, seg_rows)?,
            values: DeviceArray::alloc_segmented(ctx, rows, 8, seg_rows)?,
            filled: 0,
        })
    }

    /// Adds a chunk: `tags` (`u32`) and `values` (8 bytes each) of the same rows.
    /// Rows tagged `groups` or above are dropped.
    pub fn add(&mut self, ctx: &GpuContext, tags: &DeviceArray, values: &DeviceArray) -> GpuResult<()> {
        if tags.elem_size() != 4 || values.elem_size() != 8 {
            return Err(GpuError::Invalid("region select takes u32 tags and 8-byte values".into()));
        }
        if tags.len() != values.len() {
            return Err(GpuError::Invalid(format!("{} tags for {} values", tags.len(), values.len())));
        }
        let n = tags.len();
        if self.filled + n > self.tags.len() {
            return Err(GpuError::Invalid(format!("{} rows added to a region select of {}", self.filled + n, self.tags.len())));
        }
        copy_elements(ctx, tags, 0, &self.tags, self.filled, n)?;
        copy_elements(ctx, values, 0, &self.values, self.filled, n)?;
        self.filled += n;
        Ok(())
    }

    /// Per group: its row count and the keys at `ranks_of(n)` (in that order;
    /// `ranks_of` is called only for non-empty groups, every rank below `n`).
    /// Every row the select was made for must have been added.
    pub fn finish(
        self,
        ctx: &GpuContext,
        ranks_of: &dyn Fn(usize) -> Vec<u64>,
        gpu_min_rows: usize,
    ) -> GpuResult<(Vec<(usize, Vec<u64>)>, RegionSelectStats)> {
        let g = self.groups as usize;
        if self.filled != self.tags.len() {
            return Err(GpuError::Invalid(format!("region select of {} rows finished after {}", self.tags.len(), self.filled)));
        }
        let mut stats = RegionSelectStats::default();
        if self.filled == 0 {
            return Ok((vec![(0, Vec::new()); g], stats));
        }
        let (offsets, values) = {
            let cols = [Column::new(&self.tags), Column::new(&self.values)];
            let mut p = partition_gpu(ctx, &cols, &[0], &PartitionFn::Direct { fanout: self.groups + 1 }, &crate::partition::PartitionOptions::default())?;
            (p.offsets, p.columns.pop().expect("two columns").values)
        };
        drop(self.tags);
        drop(self.values);
        let sizes: Vec<u64> = (0..g).map(|x| offsets[x + 1] - offsets[x]).collect();
        stats.rows = offsets[g];
        let ranks: Vec<Vec<u64>> = sizes.iter().map(|&n| if n == 0 { Vec::new() } else { ranks_of(n as usize) }).collect();
        for (r, &n) in ranks.iter().zip(&sizes) {
            if let Some(x) = r.iter().find(|&&x| x >= n) {
                return Err(GpuError::Invalid(format!("rank {x} out of range for a group of {n}")));
            }
        }
        let nonempty = sizes.iter().filter(|&&n| n > 0).count();
        let avg = stats.rows as usize / nonempty.max(1);
        let got: Vec<Vec<u64>> = if avg >= gpu_min_rows.max(2) {
            to_order_keys_gpu(ctx, &values, self.kind, false)?;
            stats.gpu_regions = nonempty;
            let regions: Vec<(u64, u64)> = (0..g).map(|x| (offsets[x], sizes[x])).collect();
            select_regions_gpu::<u64>(ctx, &values, &regions, &ranks, &SelectOptions::default())?
        } else {
            let raw: Vec<u64> = values.download(ctx)?;
            stats.cpu_regions = nonempty;
            let kind = self.kind;
            (0..g)
                .into_par_iter()
                .map(|x| {
                    if sizes[x] == 0 {
                        return Vec::new();
                    }
                    let mut keys: Vec<u64> = raw[offsets[x] as usize..offsets[x + 1] as usize].iter().map(|&b| raw_key(kind, b)).collect();
                    if keys.len() <= SORT_MAX {
                        keys.sort_unstable();
                        return ranks[x].iter().map(|&r| keys[r as usize]).collect();
                    }
                    let mut uniq = ranks[x].clone();
                    uniq.sort_unstable();
                    uniq.dedup();
                    let v = select_cpu(&keys, &uniq);
                    ranks[x].iter().map(|r| v[uniq.binary_search(r).expect("a rank")]).collect()
                })
                .collect()
        };
        Ok((sizes.iter().zip(got).map(|(&n, v)| (n as usize, v)).collect(), stats))
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
