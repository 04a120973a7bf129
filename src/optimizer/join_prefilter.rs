//! The semi-join prefilter rule: sideways information passing from a hash join's
//! build side to a GPU-resident probe side.
//!
//! For a hash join whose probe (right) side reads a GPU island (a resident scan or
//! a GPU filter, possibly under projections, CPU filters, repartitions (CPU or
//! GPU) and batch coalescing), and whose equi-join keys are integer columns on
//! both sides, the rule
//! - puts a [`JoinKeysExec`] on the build side (collect-left: the build side
//!   itself; partitioned: below its hash repartition), which collects the build
//!   keys into exact key sets while the join builds its hash table, and
//! - puts a [`GpuSemiFilterExec`] on the island's output for each such key, which
//!   drops on the device the probe rows whose key is not in the set before they
//!   are downloaded and probed.
//!
//! Only join types where a probe row without a match contributes nothing qualify
//! (inner, left outer, left semi / anti / mark, right semi), and only with NULL
//! keys never equal (a NULL probe key never matches, so dropping it is right).
//! Whether a filter runs is decided at execution from the set's density over the
//! probe key's range (see `GpuSemiFilterExec`). Runs after the rules that place
//! GPU operators and before the boundary rule.
use crate::config::rule_device;
use crate::exec::join_prefilter::join_keys::{key_type_supported, JoinKeyLink, JoinKeysExec};
use crate::exec::join_prefilter::semi_filter::{best_path, row_bytes, FilterPath, MaskChoice, SemiKey};
use crate::exec::{as_gpu, gpu_filter::OutCol, CpuNoteExec, GpuFilterExec, GpuRepartitionExec, GpuScanExec, GpuSemiFilterExec};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, NullEquality, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// The rule.
#[derive(Debug, Default)]
pub struct GpuJoinPrefilter;

/// Join types for which dropping probe (right) rows without a match changes
/// nothing.
fn probe_rows_droppable(t: &JoinType) -> bool {
    matches!(t, JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark | JoinType::RightSemi)
}

fn as_i64(v: &Precision<ScalarValue>) -> Option<i64> {
    match v.get_value()? {
        ScalarValue::Int8(Some(x)) => Some(*x as i64),
        ScalarValue::Int16(Some(x)) => Some(*x as i64),
        ScalarValue::Int32(Some(x)) | ScalarValue::Date32(Some(x)) => Some(*x as i64),
        ScalarValue::Int64(Some(x)) => Some(*x),
        ScalarValue::UInt8(Some(x)) => Some(*x as i64),
        ScalarValue::UInt16(Some(x)) => Some(*x as i64),
        ScalarValue::UInt32(Some(x)) => Some(*x as i64),
        _ => None,
    }
}

/// The [min, max] of output column `col` of a GPU island, from its resident scan's
/// statistics, and the island's estimated rows.
#[recursive::recursive]
fn domain(plan: &Arc<dyn ExecutionPlan>, col: usize) -> Option<((i64, i64), usize)> {
    if let Some(s) = plan.downcast_ref::<GpuScanExec>() {
        let st = crate::exec::plan_statistics(s).ok()?;
        let cs = st.column_statistics.get(col)?;
        let rows = *st.num_rows.get_value()?;
        return Some(((as_i64(&cs.min_value)?, as_i64(&cs.max_value)?), rows));
    }
    if let Some(f) = plan.downcast_ref::<GpuFilterExec>() {
        let (dom, scan_rows) = match f.columns().get(col)? {
            OutCol::Input(i) => domain(f.input(), *i)?,
            OutCol::Computed(_) => return None,
        };
        let rows = crate::exec::plan_statistics(f).ok().and_then(|s| s.num_rows.get_value().copied()).unwrap_or(scan_rows);
        return Some((dom, rows.min(scan_rows)));
    }
    None
}

pub use crate::tuning::join_prefilter::INEXACT_BUILD_SHARE;

/// The build side's rows the plan-time check assumes: an exact count as it is,
/// an estimate scaled by [`INEXACT_BUILD_SHARE`], `None` when unknown.
fn planned_build_rows(rows: &Precision<usize>) -> Option<f64> {
    match rows {
        Precision::Exact(r) => Some(*r as f64),
        Precision::Inexact(r) => Some(*r as f64 * INEXACT_BUILD_SHARE),
        Precision::Absent => None,
    }
}

/// Outside mode on: what a filter must pay against.
#[derive(Clone, Copy)]
struct Placement {
    /// The GPU rows threshold.
    min_rows: usize,
    /// Cores probing.
    threads: usize,
    /// The build side's rows as the check assumes them ([`planned_build_rows`]).
    build_rows: Option<f64>,
}

/// A probe-side key the filter may test: its column, its key set's slot, the
/// build side's column name.
#[derive(Clone)]
struct ProbeKey {
    col: usize,
    slot: usize,
    build: String,
}

/// `plan` (the probe side, with the join keys `keys`) with a semi filter on its
/// GPU island, or `None` when no island is reachable through row-preserving nodes
/// with some key as a plain column.
/// `gpu_parent`: `plan`'s parent is a GPU operator (a `GpuRepartitionExec`).
/// `mask`: the mask path setting (`ridgeline.gpu_semi_filter_mask`).
fn with_filter(plan: &Arc<dyn ExecutionPlan>, keys: Vec<ProbeKey>, link: &Arc<JoinKeyLink>, min_rows: Option<Placement>, gpu_parent: bool, mask: MaskChoice) -> Option<Arc<dyn ExecutionPlan>> {
    if as_gpu(plan).is_some() {
        if plan.downcast_ref::<GpuScanExec>().is_none() && plan.downcast_ref::<GpuFilterExec>().is_none() {
            return None;
        }
        let mut cands = Vec::new();
        let mut rows = 0;
        for k in keys {
            if let Some((dom, r)) = domain(plan, k.col) {
                cands.push(SemiKey { col: k.col, slot: k.slot, build: k.build, domain: dom });
                rows = r;
            }
        }
        // Outside mode on: only where a filter letting through the share of rows
        // the build side's estimated size allows (every row's key distinct, all
        // in the probe key's range: the most it can drop) would pay; otherwise
        // collecting the build keys is wasted work.
        if let Some(Placement { min_rows, threads, build_rows }) = min_rows {
            let density = build_rows.map_or(0.0, |b| cands.iter().map(|k| (b / k.span()).min(1.0)).fold(1.0, f64::min));
            let partitions = plan.output_partitioning().partition_count();
            let row_bytes = row_bytes(&plan.schema());
            let paths = FilterPath::candidates(plan.downcast_ref::<GpuScanExec>().is_some(), gpu_parent, mask);
            if rows < min_rows || !best_path(rows as f64, density, row_bytes, threads, partitions, &paths).is_some_and(|(_, gain)| gain > 0.0) {
                return None;
            }
        }
        if cands.is_empty() {
            return None;
        }
        return Some(Arc::new(GpuSemiFilterExec::new(plan.clone(), cands, link.clone(), rows)));
    }
    let map: Box<dyn Fn(usize) -> Option<usize>> = if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let cols: Vec<Option<usize>> = p.expr().iter().map(|e| e.expr.downcast_ref::<Column>().map(|c| c.index())).collect();
        Box::new(move |k| *cols.get(k)?)
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let proj = f.projection().clone();
        Box::new(move |k| match &proj {
            Some(p) => p.get(k).copied(),
            None => Some(k),
        })
    } else if plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<GpuRepartitionExec>().is_some()
        || plan.name() == "CoalesceBatchesExec"
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<CpuNoteExec>().is_some()
        || plan.name() == "CooperativeExec"
    {
        Box::new(Some)
    } else {
        return None;
    };
    let keys: Vec<ProbeKey> = keys.into_iter().filter_map(|k| Some(ProbeKey { col: map(k.col)?, ..k })).collect();
    if keys.is_empty() {
        return None;
    }
    let child = plan.children().first().cloned()?.clone();
    let new_child = with_filter(&child, keys, link, min_rows, plan.downcast_ref::<GpuRepartitionExec>().is_some(), mask)?;
    datafusion::physical_plan::execution_plan::replace_children_if_necessary(plan.clone(), vec![new_child]).ok()
}

impl PhysicalOptimizerRule for GpuJoinPrefilter {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((opts, mode, dev)) = rule_device(config)? else { return Ok(plan) };
        if !opts.gpu_join_prefilter || (mode == GpuMode::Auto && dev.is_cpu_adapter()) {
            return Ok(plan);
        }
        // Mode on places it on any size (tests); auto from the GPU rows threshold,
        // where it could pay.
        let mask = MaskChoice::parse(&opts.gpu_semi_filter_mask)?;
        let place = (mode != GpuMode::On).then_some(Placement { min_rows: opts.min_gpu_rows, threads: config.execution.target_partitions, build_rows: None });
        Ok(plan
            .transform_up(|node| {
                let Some(j) = node.downcast_ref::<HashJoinExec>() else { return Ok(Transformed::no(node)) };
                // Where the keys are collected: the build side itself (collect-left:
                // one partition, read whole before the probe side), or below the
                // build side's hash repartition (partitioned: any build partition
                // ends only once the repartition has read all of its input, so the
                // keys are complete before any probe partition is read).
                let tap_at = match j.partition_mode() {
                    PartitionMode::CollectLeft if j.left().output_partitioning().partition_count() == 1 => Some(j.left().clone()),
                    PartitionMode::Partitioned => j
                        .left()
                        .downcast_ref::<RepartitionExec>()
                        .filter(|r| matches!(r.partitioning(), Partitioning::Hash(..)))
                        .map(|r| r.input().clone()),
                    _ => None,
                };
                let Some(tap_at) = tap_at else { return Ok(Transformed::no(node)) };
                if j.null_equality() != NullEquality::NullEqualsNothing
                    || !probe_rows_droppable(j.join_type())
                    || tap_at.downcast_ref::<JoinKeysExec>().is_some()
                {
                    return Ok(Transformed::no(node));
                }
                let (ls, rs) = (j.left().schema(), j.right().schema());
                let link = JoinKeyLink::new();
                let mut build_keys = Vec::new();
                let mut probe_keys = Vec::new();
                for (l, r) in j.on() {
                    let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else { continue };
                    let (lt, rt) = (ls.field(l.index()).data_type(), rs.field(r.index()).data_type());
                    if lt != rt || !key_type_supported(lt) {
                        continue;
                    }
                    probe_keys.push(ProbeKey { col: r.index(), slot: build_keys.len(), build: ls.field(l.index()).name().clone() });
                    build_keys.push(l.index());
                }
                if probe_keys.is_empty() {
                    return Ok(Transformed::no(node));
                }
                let build_rows = super::span("prefilter.stats", || crate::exec::plan_statistics(j.left().as_ref())).ok().and_then(|s| planned_build_rows(&s.num_rows));
                let min_rows = place.map(|p| Placement { build_rows, ..p });
                let Some(right) = super::span("prefilter.with_filter", || with_filter(j.right(), probe_keys, &link, min_rows, false, mask)) else { return Ok(Transformed::no(node)) };
                let tap: Arc<dyn ExecutionPlan> = Arc::new(JoinKeysExec::new(tap_at, build_keys, link));
                let left = if *j.partition_mode() == PartitionMode::Partitioned { datafusion::physical_plan::execution_plan::replace_children_if_necessary(j.left().clone(), vec![tap])? } else { tap };
                let n = datafusion::physical_plan::execution_plan::replace_children_if_necessary(node.clone(), vec![left, right])?;
                Ok(Transformed::yes(n))
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_join_prefilter"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_build_rows_stand_and_estimates_shrink() {
        assert_eq!(planned_build_rows(&Precision::Exact(1000)), Some(1000.0));
        assert_eq!(planned_build_rows(&Precision::Inexact(1000)), Some(1000.0 * INEXACT_BUILD_SHARE));
        assert_eq!(planned_build_rows(&Precision::Absent), None);
        assert_eq!(planned_build_rows(&Precision::Inexact(0)), Some(0.0));
    }
}
