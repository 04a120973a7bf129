//! The CPU paths: the sequential reference ([`group_agg_reference`]) and the fast path
//! ([`group_agg_cpu`]: a stable partition by group id, then every region reduced in
//! parallel, in row order).
use super::{AggKind, ColumnAgg, F64Agg, GroupAggError, GroupAggOutput, GroupAggStrategy, HostAggColumn, HostAggValues, I64Agg};
use crate::partition::{partition_cpu, HostColumn, OwnedValues, PartitionFn};
use crate::select::{key_f64, key_i64, unkey_f64, unkey_i64};
use rayon::prelude::*;

/// Running state of one group and column.
#[derive(Clone, Copy, Debug)]
struct Acc {
    count: u64,
    isum: i128,
    fsum: f64,
    min: u64,
    max: u64,
}

impl Default for Acc {
    fn default() -> Self {
        Acc { count: 0, isum: 0, fsum: 0.0, min: u64::MAX, max: 0 }
    }
}

impl Acc {
    #[inline]
    fn add(&mut self, kind: AggKind, bits: u64) {
        self.count += 1;
        let k = match kind {
            AggKind::I64 => {
                self.isum += bits as i64 as i128;
                key_i64(bits as i64)
            }
            AggKind::F64 => {
                self.fsum += f64::from_bits(bits);
                key_f64(f64::from_bits(bits))
            }
        };
        self.min = self.min.min(k);
        self.max = self.max.max(k);
    }
}

fn kind_of(c: &HostAggColumn<'_>) -> AggKind {
    match c.values {
        HostAggValues::I64(_) => AggKind::I64,
        HostAggValues::F64(_) => AggKind::F64,
    }
}

/// Turns per-group states into results (overflow checked).
fn finish(kind: AggKind, accs: &[Acc], column: usize) -> Result<ColumnAgg, GroupAggError> {
    let count: Vec<u64> = accs.iter().map(|a| a.count).collect();
    Ok(match kind {
        AggKind::I64 => {
            let mut sum = Vec::with_capacity(accs.len());
            for (g, a) in accs.iter().enumerate() {
                if a.count == 0 {
                    sum.push(None);
                } else {
                    let s = i64::try_from(a.isum).map_err(|_| GroupAggError::Overflow { column, group: g as u32 })?;
                    sum.push(Some(s));
                }
            }
            let opt = |f: fn(&Acc) -> u64| accs.iter().map(|a| (a.count > 0).then(|| unkey_i64(f(a)))).collect();
            let sum128 = accs.iter().map(|a| (a.count > 0).then_some(a.isum)).collect();
            ColumnAgg::I64(I64Agg { count, sum, sum128, min: opt(|a| a.min), max: opt(|a| a.max) })
        }
        AggKind::F64 => {
            let opt = |f: fn(&Acc) -> u64| accs.iter().map(|a| (a.count > 0).then(|| unkey_f64(f(a)))).collect();
            let sum = accs.iter().map(|a| (a.count > 0).then_some(a.fsum)).collect();
            ColumnAgg::F64(F64Agg { count, sum, min: opt(|a| a.min), max: opt(|a| a.max) })
        }
    })
}

fn check_host(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) {
    for c in columns {
        assert_eq!(c.len(), groups.len(), "value column of a different length");
        if let Some(v) = c.validity {
            assert!(v.len() >= groups.len().div_ceil(32), "validity bitmap too short");
        }
    }
    assert!(groups.iter().all(|&x| x < g), "group id >= G");
}

/// The sequential reference: one pass over the rows with a table of all groups.
pub fn group_agg_reference(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) -> Result<GroupAggOutput, GroupAggError> {
    check_host(groups, g, columns);
    let mut rows = vec![0u64; g as usize];
    for &x in groups {
        rows[x as usize] += 1;
    }
    let mut out = Vec::new();
    for (ci, c) in columns.iter().enumerate() {
        let kind = kind_of(c);
        let bits = c.bits();
        let mut accs = vec![Acc::default(); g as usize];
        for (i, &x) in groups.iter().enumerate() {
            if c.valid(i) {
                accs[x as usize].add(kind, bits[i]);
            }
        }
        out.push(finish(kind, &accs, ci)?);
    }
    Ok(GroupAggOutput { rows, columns: out, strategy: GroupAggStrategy::DenseTags })
}

/// The CPU fast path: a stable parallel partition of the value columns by group id,
/// then every group's region reduced in parallel, in row order (bit-identical to
/// the reference).
pub fn group_agg_cpu(groups: &[u32], g: u32, columns: &[HostAggColumn<'_>]) -> Result<GroupAggOutput, GroupAggError> {
    check_host(groups, g, columns);
    let mut host = vec![HostColumn::u32(groups)];
    for c in columns {
        let mut h = HostColumn::u64(c.bits());
        if let Some(v) = c.validity {
            h = h.with_validity(v);
        }
        host.push(h);
    }
    let part = partition_cpu(&host, &[0], &PartitionFn::Direct { fanout: g.max(1) });
    let offs = &part.offsets;
    let rows: Vec<u64> = (0..g as usize).map(|x| offs[x + 1] - offs[x]).collect();
    let mut out = Vec::new();
    for (ci, c) in columns.iter().enumerate() {
        let kind = kind_of(c);
        let pc = &part.columns[ci + 1];
        let OwnedValues::U64(bits) = &pc.values else { unreachable!("8-byte column") };
        let valid = pc.validity.as_deref();
        let accs: Vec<Acc> = (0..g as usize)
            .into_par_iter()
            .map(|x| {
                let mut a = Acc::default();
                for r in offs[x] as usize..offs[x + 1] as usize {
                    if valid.is_none_or(|b| (b[r / 32] >> (r % 32)) & 1 != 0) {
                        a.add(kind, bits[r]);
                    }
                }
                a
            })
            .collect();
        out.push(finish(kind, &accs, ci)?);
    }
    Ok(GroupAggOutput { rows, columns: out, strategy: GroupAggStrategy::SparseRegions })
}
