//! Replaces a `GROUP BY` aggregation over a resident table (DataFusion's final
//! and partial `AggregateExec`, or a single-mode one, with the repartitions,
//! filters and projections between the aggregation and the resident scan) by
//! one [`GpuAggregateExec`].
//!
//! It applies when everything compiles:
//! - the rows come from a resident table through filters, projections,
//!   repartitions and coalesces only (their predicates and expressions are
//!   composed into one predicate and the arguments over the table's columns);
//! - every GROUP BY key is a column of the table: a string column with a resident
//!   dictionary (at most [`MAX_DICT_VALUES`] distinct values) or an integer
//!   column whose exact range (from the table's statistics) is small; the product
//!   of the keys' codes (the dense group tags) is at most [`MAX_GROUPS`] for the
//!   per-chunk tables of all groups, or, without quantiles, as many as a
//!   group table in device memory holds (`ridgeline_operators::group_table`: one
//!   storage binding per state word, and at most 4 groups per table row; TPC-H
//!   Q18's `GROUP BY l_orderkey`; `SET ridgeline.gpu_group_tables = false` turns
//!   these off);
//! - every aggregate is COUNT, SUM or AVG over integers or decimals (AVG:
//!   decimals; DataFusion averages integers as floats), or MIN / MAX over
//!   integers, decimals and timestamps, without DISTINCT, FILTER or ORDER BY,
//!   and the arguments compile to WGSL (decimals wider than 18 digits compute in
//!   64 bits, checked, falling back to the CPU if a value leaves them);
//! - no grouping sets, no limit pushed into the aggregation.
//!
//! Floating-point SUM and AVG stay on the CPU: the GPU would add in another order
//! and could differ from DataFusion in the last bits.
//!
//! Mode `on`: wherever it applies. Mode `auto`: on a GPU that is not a CPU
//! adapter, for tables of at least `ridgeline.min_gpu_rows` rows (the pass reads
//! only resident columns and downloads only the groups), and only as many groups
//! as the dense per-workgroup tables hold (the region path's fixed costs lost to
//! the CPU on TPC-H Q15 at SF 1).
use crate::config::rule_device;
use crate::exec::gpu_aggregate::{AggState, GpuAggregatePlan, GroupKey, QuantileAgg};
use crate::functions::percentile::{uncast, GpuQuantile};
use datafusion::functions_aggregate::min_max::max_udaf;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use ridgeline_operators::select::RawKind;
use crate::exec::gpu_filter::OutCol;
use crate::exec::{cpu_equivalent, CpuNoteExec, GpuAggregateExec, GpuFilterExec, GpuScanExec};
use crate::gpu_expr::{Caps, RowProgram};
use super::string_codes::{self, Coder};
use crate::resident::MAX_DICT_VALUES;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, CastExpr, Column, IsNullExpr, Literal};
use datafusion::physical_expr::{conjunction, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use ridgeline_operators::{GpuContext, GpuMode};
use std::sync::Arc;

pub use crate::tuning::aggregate::MAX_GROUPS;
pub use crate::tuning::aggregate::MAX_QUANTILE_GROUPS;
pub use crate::tuning::aggregate::REGION_GPU_MIN_ROWS;

pub use crate::tuning::aggregate::TABLE_MIN_ROWS_PER_GROUP;

pub use crate::tuning::aggregate::CPU_AGG_NS_PER_ROW;
pub use crate::tuning::aggregate::TABLE_FIXED_MS;

/// Mode auto: whether a group table of `groups` groups over `rows` table rows
/// pays on `threads` cores without HAVING on the device: enough rows per group
/// ([`TABLE_MIN_ROWS_PER_GROUP`]) and more CPU wall time to save than the device
/// pass costs.
pub fn table_pays(rows: u64, groups: u64, threads: usize) -> bool {
    rows >= TABLE_MIN_ROWS_PER_GROUP * groups && rows as f64 * CPU_AGG_NS_PER_ROW * 1e-6 / threads.max(1) as f64 > TABLE_FIXED_MS
}

/// The GPU aggregation rule.
#[derive(Debug, Default)]
pub struct GpuAggregateRule;

impl PhysicalOptimizerRule for GpuAggregateRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((opts, mode, dev)) = rule_device(config)? else { return Ok(plan) };
        if mode == GpuMode::Auto && dev.is_cpu_adapter() {
            return Ok(plan);
        }
        // Mode auto keeps to the dense per-workgroup tables: the region path's fixed
        // costs per chunk made TPC-H Q15 at SF 1 (10,000 groups over 16 chunks) take
        // 102 ms on the H100 against 21.6 ms in CPU mode.
        let auto = mode == GpuMode::Auto;
        let (min_rows, max_groups) = if mode == GpuMode::On {
            (0, MAX_GROUPS)
        } else {
            (opts.min_gpu_rows, ridgeline_operators::group_agg::dense_capacity(&dev) as u64)
        };
        // Without a filter over an aggregation anywhere, no HAVING can reach the
        // device: group tables that only pay with one are ruled out before they
        // are prepared (TPC-H Q15 at SF 1 prepared two and dropped both).
        let having_possible = auto && filter_over_aggregate(&plan);
        Ok(plan
            .transform_up(|node| {
                if let Some(t) = super::span("agg.having", || having(&node)) {
                    return Ok(Transformed::yes(t));
                }
                let Some(agg) = node.downcast_ref::<AggregateExec>() else { return Ok(Transformed::no(node)) };
                let src = match agg.mode() {
                    AggregateMode::Single | AggregateMode::SinglePartitioned => agg,
                    AggregateMode::Final | AggregateMode::FinalPartitioned => match partial_below(agg.input()) {
                        Some(p) => p,
                        None => return Ok(Transformed::no(node)),
                    },
                    _ => return Ok(Transformed::no(node)),
                };
                let region_min = if mode == GpuMode::On { 2 } else { REGION_GPU_MIN_ROWS };
                let auto = auto.then_some((config.execution.target_partitions, having_possible));
                match super::span("agg.prepare", || prepare(&dev, &node, src, min_rows, max_groups, region_min, opts.gpu_group_tables, auto)) {
                    Ok(Some(p)) => {
                        // Parents may rely on the replaced node's hash partitioning (a
                        // partitioned hash join on the group keys, say): the node keeps it
                        // (hashing its groups as DataFusion's repartition would), or, for
                        // partitioning expressions other than key columns, DataFusion's own
                        // repartition restores it from the one partition of groups.
                        let nkeys = p.keys.len();
                        let out: Arc<dyn ExecutionPlan> = match node.output_partitioning() {
                            // On the group keys (which lead both the partial state and the
                            // result): the node deals its groups out with DataFusion's hash
                            // partitioner itself.
                            Partitioning::Hash(exprs, n)
                                if *n > 1 && exprs.iter().all(|x| x.downcast_ref::<Column>().is_some_and(|c| c.index() < nkeys)) =>
                            {
                                Arc::new(GpuAggregateExec::with_partitioning(p, node.schema(), node.output_partitioning().clone()))
                            }
                            Partitioning::Hash(exprs, n) if *n > 1 => Arc::new(RepartitionExec::try_new(
                                Arc::new(GpuAggregateExec::new(p, node.schema(), 1)),
                                Partitioning::Hash(exprs.clone(), *n),
                            )?),
                            other => Arc::new(GpuAggregateExec::new(p, node.schema(), other.partition_count())),
                        };
                        Ok(Transformed::yes(out))
                    }
                    Ok(None) => Ok(Transformed::no(node)),
                    Err(why) => {
                        log::debug!("aggregation stays on the CPU: {why}");
                        Ok(Transformed::no(node))
                    }
                }
            })?
            .data
            // Group tables that only pay with HAVING on the device and got none: back to
            // the replaced plan.
            .transform_up(|node| {
                if let Some(g) = node.downcast_ref::<GpuAggregateExec>() {
                    if let (Some(orig), true) = (&g.plan().unless_having, g.having().is_empty()) {
                        return Ok(Transformed::yes(orig.clone()));
                    }
                }
                Ok(Transformed::no(node))
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_aggregate"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether some filter in `plan` sits on an aggregation (through filters that
/// keep every column, as [`having`] looks) with a condition of the shape it moves
/// to the device (a column, or a cast of one, compared with a literal). TPC-H
/// Q15's `total_revenue = (SELECT max(..))` is a filter over its aggregation too,
/// but against a subquery's value.
fn filter_over_aggregate(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let column = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<Column>().is_some() || e.downcast_ref::<CastExpr>().is_some_and(|c| c.expr().downcast_ref::<Column>().is_some())
    };
    let literal = |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<Literal>().is_some();
    let movable = |p: &Arc<dyn PhysicalExpr>| {
        datafusion::physical_expr::split_conjunction(p).into_iter().any(|c| {
            c.downcast_ref::<BinaryExpr>().is_some_and(|b| {
                cmp_op(b.op()).is_some() && ((column(b.left()) && literal(b.right())) || (literal(b.left()) && column(b.right())))
            })
        })
    };
    let here = filter_predicate(plan).is_some_and(|p| movable(&p))
        && below_keeping_filters(plan).is_some_and(|(_, c)| c.downcast_ref::<AggregateExec>().is_some() || c.downcast_ref::<GpuAggregateExec>().is_some());
    here || plan.children().into_iter().any(filter_over_aggregate)
}

/// The predicate of a CPU filter, or of a GPU filter's input.
fn filter_predicate(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn PhysicalExpr>> {
    match node.downcast_ref::<FilterExec>() {
        Some(f) => Some(f.predicate().clone()),
        None => node.downcast_ref::<GpuFilterExec>()?.input_predicate().cloned(),
    }
}

/// Down from `node` through filters that keep every column (a CPU and a GPU part
/// of one HAVING clause, say) and notes: the nodes passed and the first other one.
fn below_keeping_filters(node: &Arc<dyn ExecutionPlan>) -> Option<(Vec<Arc<dyn ExecutionPlan>>, Arc<dyn ExecutionPlan>)> {
    let mut between: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    let mut child = node.children().into_iter().next()?.clone();
    loop {
        let n_in = match child.children().first() {
            Some(c) => c.schema().fields().len(),
            None => return Some((between, child)),
        };
        let keeps = if let Some(f) = child.downcast_ref::<FilterExec>() {
            f.projection().as_ref().is_none_or(|p| p.iter().copied().eq(0..n_in))
        } else if let Some(f) = child.downcast_ref::<GpuFilterExec>() {
            f.columns().iter().copied().eq((0..n_in).map(OutCol::Input))
        } else {
            child.downcast_ref::<CpuNoteExec>().is_some()
        };
        if !keeps {
            return Some((between, child));
        }
        between.push(child.clone());
        let next = child.children().into_iter().next()?.clone();
        child = next;
    }
}

/// A comparison as a group table's condition operator.
fn cmp_op(op: &Operator) -> Option<ridgeline_operators::group_table::CmpOp> {
    use ridgeline_operators::group_table::CmpOp;
    Some(match op {
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        _ => return None,
    })
}

/// A filter (CPU or GPU) right above a group-table [`GpuAggregateExec`] whose state
/// columns are its results (through filters that keep every column): its conjuncts
/// `state op constant` on COUNT or SUM columns also go into the aggregation, which then reads back only the groups
/// that meet them (TPC-H Q18's `HAVING sum(l_quantity) > 300`: 600 of 15 million
/// groups at SF 10). The filter stays (the node's groups are a superset of its rows).
fn having(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    use ridgeline_operators::group_table::{TableCond, TableWord};
    let pred = filter_predicate(node)?;
    let (between, child) = below_keeping_filters(node)?;
    let g = child.downcast_ref::<GpuAggregateExec>()?;
    let p = g.plan();
    if !p.table || !p.direct {
        return None;
    }
    let schema = child.schema();
    let nkeys = p.keys.len();
    // A state column, looking through a cast that keeps its values (a wider decimal
    // of the same scale, a wider integer).
    let state = |e: &Arc<dyn PhysicalExpr>| -> Option<(TableWord, DataType)> {
        let (c, cast) = match e.downcast_ref::<CastExpr>() {
            Some(x) => (x.expr().downcast_ref::<Column>()?, Some(x.cast_type())),
            None => (e.downcast_ref::<Column>()?, None),
        };
        let own = schema.field(c.index()).data_type();
        let ty = cast.unwrap_or(own).clone();
        let keeps = match (own, &ty) {
            (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) => s1 == s2,
            (a, b) => a == b || (a.is_integer() && matches!(b, DataType::Int64 | DataType::Decimal128(_, 0))),
        };
        if !keeps || c.index() < nkeys {
            return None;
        }
        let word = match p.states.get(c.index() - nkeys)? {
            AggState::CountRows => TableWord::Rows,
            AggState::Count(i) => TableWord::Count(*i),
            AggState::Sum(i) => TableWord::Sum(*i),
            _ => return None,
        };
        Some((word, ty))
    };
    let constant = |e: &Arc<dyn PhysicalExpr>, ty: &DataType| -> Option<i128> {
        let v = e.downcast_ref::<Literal>()?.value();
        match (v, ty) {
            (ScalarValue::Decimal128(Some(x), _, s), DataType::Decimal128(_, s2)) if s == s2 => Some(*x),
            (ScalarValue::Int64(Some(x)), t) if t.is_integer() => Some(*x as i128),
            (ScalarValue::Int32(Some(x)), t) if t.is_integer() => Some(*x as i128),
            (ScalarValue::UInt64(Some(x)), t) if t.is_integer() => Some(*x as i128),
            _ => None,
        }
    };
    let mut conds = Vec::new();
    for c in datafusion::physical_expr::split_conjunction(&pred) {
        let Some(b) = c.downcast_ref::<BinaryExpr>() else { continue };
        let Some(op) = cmp_op(b.op()) else { continue };
        let found = match state(b.left()) {
            Some((word, ty)) => constant(b.right(), &ty).map(|v| TableCond { word, op, value: v }),
            None => state(b.right()).and_then(|(word, ty)| constant(b.left(), &ty).map(|v| TableCond { word, op: op.flipped(), value: v })),
        };
        conds.extend(found);
    }
    conds.retain(|c| !g.having().contains(c));
    if conds.is_empty() {
        return None;
    }
    conds.extend_from_slice(g.having());
    let mut rebuilt: Arc<dyn ExecutionPlan> = Arc::new(g.with_having(conds));
    for n in between.iter().rev().chain(std::iter::once(node)) {
        let up = datafusion::physical_plan::execution_plan::replace_children_if_necessary(n.clone(), vec![rebuilt]).ok()?;
        rebuilt = up;
    }
    Some(rebuilt)
}

/// Nodes that only move rows between partitions or batches.
pub(crate) fn passes_rows(p: &Arc<dyn ExecutionPlan>) -> bool {
    p.downcast_ref::<RepartitionExec>().is_some()
        || p.downcast_ref::<CoalescePartitionsExec>().is_some()
        || p.downcast_ref::<CpuNoteExec>().is_some()
        || matches!(p.name(), "CoalesceBatchesExec" | "CooperativeExec")
}

/// The partial aggregation under a final one.
fn partial_below(mut p: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
    while passes_rows(p) {
        p = p.children()[0];
    }
    p.downcast_ref::<AggregateExec>().filter(|a| *a.mode() == AggregateMode::Partial)
}

fn col(name: &str, i: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(Column::new(name, i))
}

fn lit(v: ScalarValue) -> Arc<dyn PhysicalExpr> {
    Arc::new(Literal::new(v))
}

/// `e` with every column replaced by its expression in `exprs`.
fn subst(e: &Arc<dyn PhysicalExpr>, exprs: &[Arc<dyn PhysicalExpr>]) -> Result<Arc<dyn PhysicalExpr>> {
    Ok(e.clone()
        .transform_up(|x| match x.downcast_ref::<Column>() {
            Some(c) => Ok(Transformed::yes(exprs[c.index()].clone())),
            None => Ok(Transformed::no(x)),
        })?
        .data)
}

fn as_i64(v: &Precision<ScalarValue>) -> Option<i64> {
    match v.get_value()? {
        ScalarValue::Int8(Some(x)) => Some(*x as i64),
        ScalarValue::Int16(Some(x)) => Some(*x as i64),
        ScalarValue::Int32(Some(x)) => Some(*x as i64),
        ScalarValue::Int64(Some(x)) => Some(*x),
        ScalarValue::UInt8(Some(x)) => Some(*x as i64),
        ScalarValue::UInt16(Some(x)) => Some(*x as i64),
        ScalarValue::UInt32(Some(x)) => Some(*x as i64),
        _ => None,
    }
}

type Why = String;

/// The GPU plan for aggregation `node` (whose raw-input aggregation is `src`),
/// `Ok(None)` when the table is too small, `Err` why not. The steps: the shape
/// DataFusion gave the aggregation ([`check_shape`]), the chain down to the
/// resident scan composed into expressions over its columns ([`scan_chain`]),
/// the group keys as dense codes ([`group_keys`]), whether a group table pays,
/// one program output per value and quantile input ([`Aggregates`]), the group
/// table's limits ([`check_group_table`]), then the final aggregation over the
/// GPU's partial state ([`final_aggregation`]).
fn prepare(
    dev: &Arc<GpuContext>,
    node: &Arc<dyn ExecutionPlan>,
    src: &AggregateExec,
    min_rows: usize,
    max_groups: u64,
    region_gpu_min_rows: usize,
    group_tables: bool,
    auto: Option<(usize, bool)>,
) -> std::result::Result<Option<GpuAggregatePlan>, Why> {
    let table_cap = if group_tables { ridgeline_operators::group_table::max_groups(dev) as u64 } else { 0 };
    check_shape(src)?;
    let (scan, exprs, predicate) = scan_chain(src)?;
    let data = scan.data().clone();
    if data.table.num_rows < min_rows {
        return Ok(None);
    }
    let scan_schema = scan.schema();
    let table_cols = scan.table_columns();
    let (mut fields, keys, key_codes, groups) = group_keys(dev, src, scan, &exprs, max_groups, table_cap)?;
    // A group table that pays only with HAVING on the device, where no filter
    // could bring one: the CPU's, before anything is compiled.
    let table = groups + 1 > max_groups;
    if let Some((threads, false)) = auto {
        if table && !table_pays(data.table.num_rows as u64, groups, threads) {
            return Err(format!("a group table of {groups} groups over {} rows saves less than its fixed cost on {threads} cores", data.table.num_rows));
        }
    }
    // String tests in the predicate and the arguments: by dictionary codes, whose
    // columns follow the keys' codes.
    let mut coder = Coder::with_base(dev, scan, fields.len());
    let coded_predicate = match &predicate {
        Some(p) => Some(super::span("agg.prepare.coder", || coder.rewrite(p)).map_err(|w| format!("the predicate's strings: {w}"))?),
        None => None,
    };
    let gid = group_id(&keys, key_codes);
    let mut aggs = Aggregates::new(&exprs, &scan_schema, coded_predicate, gid, groups)?;
    for a in src.aggr_expr() {
        aggs.add(a, &mut coder)?;
    }
    let Aggregates { mut outputs, states, min_max, shown, quantile_outputs, quantile_inputs, quantiles, .. } = aggs;
    let nvals = outputs.len() - 1;
    if table {
        check_group_table(dev, groups, nvals, data.table.num_rows, !quantiles.is_empty(), min_max)?;
    }
    for (tag, v, _) in quantile_outputs {
        outputs.push(tag);
        outputs.push(v);
    }
    fields.extend((0..coder.codes.len()).map(|k| Field::new(string_codes::code_field_name(k), DataType::UInt32, false)));
    let str_codes: Vec<_> = coder.codes.iter().map(|c| c.dict.clone()).collect();
    let aug_schema = Arc::new(Schema::new(fields));
    let program = super::span("agg.prepare.compile", || RowProgram::try_new_wide(aug_schema, None, outputs, Caps::of(dev)))?;
    let (final_agg, partial_schema, direct) = final_aggregation(node, src, keys.len(), &states)?;
    let cpu = match super::span("agg.prepare.cpu_equivalent", || cpu_equivalent(node)) {
        Some(Ok(c)) => c,
        Some(Err(err)) => return Err(err.to_string()),
        None => return Err("no CPU plan to fall back to".into()),
    };
    let gby: Vec<String> = src.group_expr().expr().iter().map(|(x, _)| subst(x, &exprs).map(|x| x.to_string()).unwrap_or_default()).collect();
    let display = format!(
        "predicate={}, gby=[{}], aggr=[{}]",
        predicate.as_ref().map_or("true".to_string(), |p| p.to_string()),
        gby.join(", "),
        shown.join(", ")
    );
    let table_rows = data.table.num_rows;
    Ok(Some(GpuAggregatePlan {
        data,
        table_cols,
        keys,
        str_codes,
        groups: groups as u32,
        program,
        nvals,
        states,
        quantile_inputs,
        quantiles,
        region_gpu_min_rows,
        min_max,
        table,
        direct,
        // Fewer than TABLE_MIN_ROWS_PER_GROUP rows per group: reading back almost as
        // many groups as rows loses to the CPU (measured: 1M groups over 1M-4M rows);
        // nor does a pass whose fixed cost exceeds the cores' time (TPC-H Q15 at
        // SF 1 on 16 cores); unless HAVING cuts the groups on the device (TPC-H Q18).
        unless_having: auto.filter(|&(threads, _)| table && !table_pays(table_rows as u64, groups, threads)).map(|_| node.clone()),
        final_agg: Arc::new(final_agg),
        partial_schema,
        cpu,
        display,
    }))
}

fn why(e: datafusion::error::DataFusionError) -> Why {
    e.to_string()
}

/// What the GPU aggregation cannot take whatever its input.
fn check_shape(src: &AggregateExec) -> std::result::Result<(), Why> {
    if src.limit_options().is_some() {
        return Err("a limit is pushed into the aggregation".into());
    }
    if !src.group_expr().is_single() {
        return Err("grouping sets".into());
    }
    if src.filter_expr().iter().any(|f| f.is_some()) {
        return Err("an aggregate with FILTER".into());
    }
    Ok(())
}

/// The resident scan under `src` (through projections, filters and nodes that
/// pass rows), the aggregation input's columns as expressions over the scan's
/// columns, and the conjunction of the filters on the way.
fn scan_chain(src: &AggregateExec) -> std::result::Result<(&GpuScanExec, Vec<Arc<dyn PhysicalExpr>>, Option<Arc<dyn PhysicalExpr>>), Why> {
    let e = why;
    // Down to the resident scan.
    let mut chain: Vec<&Arc<dyn ExecutionPlan>> = Vec::new();
    let mut p = src.input();
    let scan = loop {
        if let Some(s) = p.downcast_ref::<GpuScanExec>() {
            break s;
        }
        let ok = passes_rows(p)
            || p.downcast_ref::<ProjectionExec>().is_some()
            || p.downcast_ref::<FilterExec>().is_some()
            || p.downcast_ref::<GpuFilterExec>().is_some();
        if !ok {
            return Err(format!("the input is not a resident table ({} in between)", p.name()));
        }
        chain.push(p);
        p = p.children()[0];
    };
    let scan_schema = scan.schema();
    // Compose the chain bottom-up into expressions over the scan's columns.
    let mut exprs: Vec<Arc<dyn PhysicalExpr>> = scan_schema.fields().iter().enumerate().map(|(i, f)| col(f.name(), i)).collect();
    let mut conjuncts: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
    for n in chain.iter().rev() {
        if let Some(f) = n.downcast_ref::<FilterExec>() {
            conjuncts.push(subst(f.predicate(), &exprs).map_err(e)?);
            if let Some(proj) = f.projection() {
                exprs = proj.iter().map(|&i| exprs[i].clone()).collect();
            }
        } else if let Some(g) = n.downcast_ref::<GpuFilterExec>() {
            if let Some(pred) = g.input_predicate() {
                conjuncts.push(subst(pred, &exprs).map_err(e)?);
            }
            exprs = g
                .columns()
                .iter()
                .map(|c| match c {
                    OutCol::Input(i) => Ok(exprs[*i].clone()),
                    OutCol::Computed(j) => subst(&g.program().outputs()[*j], &exprs),
                })
                .collect::<Result<Vec<_>>>()
                .map_err(e)?;
        } else if let Some(pr) = n.downcast_ref::<ProjectionExec>() {
            exprs = pr.expr().iter().map(|pe| subst(&pe.expr, &exprs)).collect::<Result<Vec<_>>>().map_err(e)?;
        }
    }
    let predicate = (!conjuncts.is_empty()).then(|| conjunction(conjuncts));
    Ok((scan, exprs, predicate))
}

/// The group keys: a dense code per key (dictionary codes of strings, offsets in
/// an exact integer range), the program input's fields with the string codes'
/// columns appended, each key's code expression, and the number of groups.
fn group_keys(
    dev: &Arc<GpuContext>,
    src: &AggregateExec,
    scan: &GpuScanExec,
    exprs: &[Arc<dyn PhysicalExpr>],
    max_groups: u64,
    table_cap: u64,
) -> std::result::Result<(Vec<Field>, Vec<GroupKey>, Vec<Arc<dyn PhysicalExpr>>, u64), Why> {
    let e = why;
    let data = scan.data();
    let scan_schema = scan.schema();
    let table_cols = scan.table_columns();
    let mut fields: Vec<Field> = scan_schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut keys = Vec::new();
    let mut key_codes: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
    let mut groups: u64 = 1;
    for (ge, _) in src.group_expr().expr() {
        let k = subst(ge, exprs).map_err(e)?;
        let Some(c) = k.downcast_ref::<Column>() else { return Err(format!("GROUP BY {k}: not a column")) };
        let t = table_cols[c.index()];
        let dt = scan_schema.field(c.index()).data_type().clone();
        let stats = &data.table.column_stats[t];
        let has_nulls = stats.null_count != Precision::Exact(0);
        match &dt {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let Some(dict) = data.string_dict(dev, t).map_err(e)? else {
                    return Err(format!("GROUP BY {k}: more than {MAX_DICT_VALUES} distinct strings"));
                };
                let card = (dict.values.len() + has_nulls as usize).max(1) as u32;
                key_codes.push(col(&format!("__rl_code{}", keys.len()), fields.len()));
                fields.push(Field::new(format!("__rl_code{}", keys.len()), DataType::UInt32, false));
                keys.push(GroupKey::Dict { dict, card });
            }
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => {
                let (min, max) = match (as_i64(&stats.min_value), as_i64(&stats.max_value)) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ if stats.null_count == Precision::Exact(data.table.num_rows) => (0, -1),
                    _ => return Err(format!("GROUP BY {k}: no exact range")),
                };
                let span = (max as i128 - min as i128 + 1) as u64 + has_nulls as u64;
                if span > MAX_GROUPS.max(table_cap) {
                    return Err(format!("GROUP BY {k}: {span} values in its range"));
                }
                let card = span.max(1) as u32;
                let code: Arc<dyn PhysicalExpr> = Arc::new(CastExpr::new(
                    Arc::new(BinaryExpr::new(
                        Arc::new(CastExpr::new(k.clone(), DataType::Int64, None)),
                        Operator::Minus,
                        lit(ScalarValue::Int64(Some(min))),
                    )),
                    DataType::UInt32,
                    None,
                ));
                let code = if has_nulls {
                    Arc::new(
                        CaseExpr::try_new(None, vec![(Arc::new(IsNullExpr::new(k.clone())) as _, lit(ScalarValue::UInt32(Some(card - 1))))], Some(code))
                            .map_err(e)?,
                    )
                } else {
                    code
                };
                key_codes.push(code);
                keys.push(GroupKey::Range { min, card, nullable: has_nulls, data_type: dt.clone() });
            }
            other => return Err(format!("GROUP BY {k} of type {other}")),
        }
        groups *= keys.last().expect("pushed").card() as u64;
        if groups + 1 > max_groups.max(table_cap + 1) {
            return Err(format!("more than {} groups", max_groups.max(table_cap + 1) - 1));
        }
    }
    Ok((fields, keys, key_codes, groups))
}

/// The group id in mixed radix over the keys' codes (0 without keys).
fn group_id(keys: &[GroupKey], key_codes: Vec<Arc<dyn PhysicalExpr>>) -> Arc<dyn PhysicalExpr> {
    let mut gid: Option<Arc<dyn PhysicalExpr>> = None;
    for (k, code) in keys.iter().zip(key_codes) {
        gid = Some(match gid {
            None => code,
            Some(acc) => Arc::new(BinaryExpr::new(
                Arc::new(BinaryExpr::new(acc, Operator::Multiply, lit(ScalarValue::UInt32(Some(k.card()))))),
                Operator::Plus,
                code,
            )),
        });
    }
    gid.unwrap_or_else(|| lit(ScalarValue::UInt32(Some(0))))
}

/// The program's outputs and the aggregates' states as they are added: output 0
/// is the group id (rejected rows get `groups`), then one output per distinct
/// value column, and per distinct quantile input a tag and a value.
struct Aggregates<'a> {
    exprs: &'a [Arc<dyn PhysicalExpr>],
    scan_schema: &'a Schema,
    coded_predicate: Option<Arc<dyn PhysicalExpr>>,
    gid: Arc<dyn PhysicalExpr>,
    groups: u64,
    dropped: Arc<dyn PhysicalExpr>,
    outputs: Vec<Arc<dyn PhysicalExpr>>,
    value_keys: Vec<String>,
    states: Vec<AggState>,
    min_max: bool,
    shown: Vec<String>,
    /// Quantile inputs: (tag expression, value expression, key).
    quantile_outputs: Vec<(Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>, String)>,
    quantile_inputs: Vec<RawKind>,
    quantiles: Vec<QuantileAgg>,
}

impl<'a> Aggregates<'a> {
    fn new(
        exprs: &'a [Arc<dyn PhysicalExpr>],
        scan_schema: &'a Schema,
        coded_predicate: Option<Arc<dyn PhysicalExpr>>,
        gid: Arc<dyn PhysicalExpr>,
        groups: u64,
    ) -> std::result::Result<Self, Why> {
        let dropped = lit(ScalarValue::UInt32(Some(groups as u32)));
        let mut a = Aggregates {
            exprs,
            scan_schema,
            coded_predicate,
            gid: gid.clone(),
            groups,
            dropped: dropped.clone(),
            outputs: Vec::new(),
            value_keys: Vec::new(),
            states: Vec::new(),
            min_max: false,
            shown: Vec::new(),
            quantile_outputs: Vec::new(),
            quantile_inputs: Vec::new(),
            quantiles: Vec::new(),
        };
        let first = a.when(gid, Some(dropped))?;
        a.outputs.push(first);
        Ok(a)
    }

    /// `v` where the WHERE clause passes, else `otherwise`.
    fn when(&self, v: Arc<dyn PhysicalExpr>, otherwise: Option<Arc<dyn PhysicalExpr>>) -> std::result::Result<Arc<dyn PhysicalExpr>, Why> {
        Ok(match &self.coded_predicate {
            Some(p) => Arc::new(CaseExpr::try_new(None, vec![(p.clone(), v)], otherwise).map_err(why)?),
            None => v,
        })
    }

    /// Adds aggregate `a`: a quantile (selected per group on the device) or COUNT,
    /// SUM, AVG, MIN, MAX over a value column.
    fn add(&mut self, a: &AggregateFunctionExpr, coder: &mut Coder) -> std::result::Result<(), Why> {
        if self.add_quantile(a)? {
            return Ok(());
        }
        self.add_plain(a, coder)
    }

    /// Adds `a` if it is a quantile the GPU selects; `Ok(false)` if it is not one.
    fn add_quantile(&mut self, a: &AggregateFunctionExpr) -> std::result::Result<bool, Why> {
        let e = why;
        let (exprs, scan_schema, groups) = (self.exprs, self.scan_schema, self.groups);
        let name = a.fun().name().to_ascii_lowercase();
        let Some(first) = a.expressions().first().cloned() else { return Ok(false) };
        let v = subst(&first, exprs).map_err(e)?;
        let dt = v.data_type(scan_schema).map_err(e)?;
        let same_value = |o: &Arc<dyn PhysicalExpr>| subst(o, exprs).is_ok_and(|o| uncast(&o).to_string() == uncast(&v).to_string());
        let Some(q) = GpuQuantile::of(a, &dt, &same_value).map_err(e)? else { return Ok(false) };
        // Look through a cast of an integer or a decimal to Float64 (the coercion
        // of median(int), percentile_cont and quantile_cont): select the exact values.
        let (v, dt, q) = match v.downcast_ref::<CastExpr>() {
            Some(c) if dt == DataType::Float64 => {
                let src = c.expr().data_type(&scan_schema).map_err(e)?;
                let exact = matches!(src, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64)
                    || matches!(src, DataType::Decimal128(p, _) if p <= 18);
                if exact {
                    (c.expr().clone(), src.clone(), q.through_cast(src))
                } else {
                    (v, dt, q)
                }
            }
            _ => (v, dt, q),
        };
        if groups > MAX_QUANTILE_GROUPS {
            return Err(format!("{name} over more than {MAX_QUANTILE_GROUPS} groups"));
        }
        let (v, kind) = match &dt {
            DataType::Float64 => (v, RawKind::F64),
            DataType::Int64 | DataType::Decimal128(..) | DataType::Timestamp(..) | DataType::Date64 => (v, RawKind::I64),
            DataType::Int8 | DataType::Int16 | DataType::Int32 => {
                (Arc::new(CastExpr::new(v, DataType::Int64, None)) as Arc<dyn PhysicalExpr>, RawKind::I64)
            }
            other => return Err(format!("{name} of {other}")),
        };
        self.shown.push(format!("{name}({v})"));
        let key = v.to_string();
        let input = match self.quantile_outputs.iter().position(|x| x.2 == key) {
            Some(i) => i,
            None => {
                // A row's tag: its group, or `groups` (dropped) when the WHERE
                // clause rejects it or the value is NULL.
                let tag: Arc<dyn PhysicalExpr> = Arc::new(
                    CaseExpr::try_new(None, vec![(Arc::new(IsNullExpr::new(v.clone())) as _, self.dropped.clone())], Some(self.gid.clone()))
                        .map_err(e)?,
                );
                let tag = self.when(tag, Some(self.dropped.clone()))?;
                self.quantile_outputs.push((tag, v, key));
                self.quantile_inputs.push(kind);
                self.quantile_outputs.len() - 1
            }
        };
        self.states.push(AggState::Quantile(self.quantiles.len()));
        self.quantiles.push(QuantileAgg { quantile: q, input });
        Ok(true)
    }

    /// Adds COUNT, SUM, AVG, MIN or MAX of one value column (shared by the
    /// aggregates over the same value).
    fn add_plain(&mut self, a: &AggregateFunctionExpr, coder: &mut Coder) -> std::result::Result<(), Why> {
        let e = why;
        let (exprs, scan_schema) = (self.exprs, self.scan_schema);
        let name = a.fun().name().to_ascii_lowercase();
        if a.is_distinct() {
            return Err(format!("{name}(DISTINCT ..)"));
        }
        if !a.order_bys().is_empty() {
            return Err(format!("{name}(.. ORDER BY ..)"));
        }
        let args = a.expressions();
        if args.len() != 1 {
            return Err(format!("{name} with {} arguments", args.len()));
        }
        let arg = subst(&args[0], exprs).map_err(e)?;
        self.shown.push(format!("{name}({arg})"));
        let dt = arg.data_type(scan_schema).map_err(e)?;
        if name == "count" {
            if let Some(l) = arg.downcast_ref::<Literal>() {
                if !l.value().is_null() {
                    self.states.push(AggState::CountRows);
                    return Ok(());
                }
            }
        }
        let ok_type = match name.as_str() {
            "count" | "min" | "max" => matches!(
                dt,
                DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Decimal128(..) | DataType::Timestamp(..) | DataType::Date64
            ),
            "sum" => matches!(dt, DataType::Int64 | DataType::Decimal128(..)),
            "avg" => matches!(dt, DataType::Decimal128(..)),
            _ => return Err(format!("aggregate {name} of {dt}")),
        };
        if !ok_type {
            return Err(format!("{name} of {dt}"));
        }
        let v = if matches!(dt, DataType::Int8 | DataType::Int16 | DataType::Int32) {
            Arc::new(CastExpr::new(arg.clone(), DataType::Int64, None)) as Arc<dyn PhysicalExpr>
        } else {
            arg.clone()
        };
        let key = v.to_string();
        let c = match self.value_keys.iter().position(|x| *x == key) {
            Some(c) => c,
            None => {
                self.value_keys.push(key);
                let v = coder.rewrite(&v).map_err(|w| format!("{name}'s argument: {w}"))?;
                let out = self.when(v, None)?;
                self.outputs.push(out);
                self.value_keys.len() - 1
            }
        };
        let state = match name.as_str() {
            "count" => AggState::Count(c),
            "sum" => AggState::Sum(c),
            "avg" => AggState::Avg(c),
            "min" => {
                self.min_max = true;
                AggState::Min(c)
            }
            _ => {
                self.min_max = true;
                AggState::Max(c)
            }
        };
        self.states.push(state);
        Ok(())
    }
}

/// Beyond the per-chunk tables of all groups: one group table in device memory,
/// for COUNT, SUM, AVG, MIN and MAX (64-bit atomics) over a key range the table's
/// rows fill densely enough.
fn check_group_table(dev: &GpuContext, groups: u64, nvals: usize, rows: usize, quantiles: bool, min_max: bool) -> std::result::Result<(), Why> {
    if quantiles {
        return Err(format!("a quantile over {groups} groups"));
    }
    if min_max && !ridgeline_operators::group_table::supports_min_max(dev) {
        return Err(format!("MIN or MAX over {groups} groups without 64-bit atomics"));
    }
    if groups > 4 * rows.max(1) as u64 {
        return Err(format!("{groups} groups for {rows} rows: too sparse for a group table"));
    }
    let bytes = ridgeline_operators::group_table::table_bytes(groups as u32, nvals);
    if bytes > dev.pool().budget() / 4 {
        return Err(format!("a group table of {} MiB", bytes >> 20));
    }
    Ok(())
}

/// DataFusion's final aggregation over the GPU's partial state (each quantile's
/// answer kept as its state), the partial state's schema, and whether the state
/// is already the answer (no final aggregation needed).
fn final_aggregation(node: &Arc<dyn ExecutionPlan>, src: &AggregateExec, nkeys: usize, states: &[AggState]) -> std::result::Result<(AggregateExec, SchemaRef, bool), Why> {
    let e = why;
    // DataFusion's partial state and the final aggregation over it.
    let partial = if *src.mode() == AggregateMode::Partial {
        None
    } else {
        Some(
            AggregateExec::try_new(
                AggregateMode::Partial,
                src.group_expr().clone(),
                src.aggr_expr().to_vec(),
                src.filter_expr().to_vec(),
                src.input().clone(),
                src.input_schema(),
            )
            .map_err(e)?,
        )
    };
    let partial_ref = partial.as_ref().unwrap_or(src);
    // The final aggregation takes each quantile's answer as its state and keeps
    // it (MAX of the one row per group, under the quantile's name).
    let final_aggrs = src
        .aggr_expr()
        .iter()
        .zip(states)
        .map(|(a, st)| match st {
            AggState::Quantile(_) => {
                let dt = a.field().data_type().clone();
                let schema = Arc::new(Schema::new(vec![Field::new("answer", dt, true)]));
                AggregateExprBuilder::new(max_udaf(), vec![col("answer", 0)]).schema(schema).alias(a.name()).build().map(Arc::new)
            }
            _ => Ok(a.clone()),
        })
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let mut partial_fields: Vec<Arc<Field>> = partial_ref.schema().fields()[..nkeys].to_vec();
    for a in &final_aggrs {
        partial_fields.extend(a.state_fields().map_err(e)?);
    }
    let partial_schema = Arc::new(Schema::new(partial_fields));
    let final_agg = AggregateExec::try_new(
        AggregateMode::Final,
        partial_ref.group_expr().as_final(),
        final_aggrs,
        src.filter_expr().to_vec(),
        Arc::new(EmptyExec::new(partial_schema.clone())),
        src.input_schema(),
    )
    .map_err(e)?;
    // COUNT, SUM, MIN and MAX states of the same types as the results need no final aggregation
    // (with GROUP BY: without, an empty input still gives one row).
    let same_types = |a: &Schema, b: &Schema| {
        a.fields().len() == b.fields().len() && a.fields().iter().zip(b.fields()).all(|(x, y)| x.data_type() == y.data_type())
    };
    let direct = nkeys > 0
        && states.iter().all(|s| matches!(s, AggState::CountRows | AggState::Count(_) | AggState::Sum(_) | AggState::Min(_) | AggState::Max(_)))
        && same_types(&partial_schema, &node.schema());
    let same = |a: &Schema, b: &Schema| same_types(a, b) && a.fields().iter().zip(b.fields()).all(|(x, y)| x.name() == y.name());
    if !same(&final_agg.schema(), &node.schema()) {
        return Err("the final aggregation's schema differs".into());
    }
    // The state columns must be the ones the node builds.
    let expected: usize = nkeys + states.iter().map(|s| if matches!(s, AggState::Avg(_)) { 2 } else { 1 }).sum::<usize>();
    if partial_schema.fields().len() != expected {
        return Err(format!("partial state of {} columns, expected {expected}", partial_schema.fields().len()));
    }
    Ok((final_agg, partial_schema, direct))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn filters_over_aggregations_are_found() {
        use datafusion::prelude::SessionContext;
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t AS VALUES (1, 10), (2, 20), (2, 30)").await.unwrap();
        let plan = |q: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.sql(q).await.unwrap().create_physical_plan().await.unwrap() }
        };
        let having = plan("SELECT column1, sum(column2) FROM t GROUP BY column1 HAVING sum(column2) > 15").await;
        assert!(filter_over_aggregate(&having));
        // Against a subquery's value (TPC-H Q15's shape): nothing to move.
        let q15 = plan("SELECT column1, sum(column2) FROM t GROUP BY column1 HAVING sum(column2) = (SELECT max(column2) FROM t)").await;
        assert!(!filter_over_aggregate(&q15));
        // A filter below the aggregation, and no filter at all.
        let below = plan("SELECT column1, sum(column2) FROM t WHERE column2 > 15 GROUP BY column1").await;
        assert!(!filter_over_aggregate(&below));
        let plain = plan("SELECT column1, count(*) FROM t GROUP BY column1").await;
        assert!(!filter_over_aggregate(&plain));
    }

    #[test]
    fn group_table_pays_with_many_rows_per_group_and_enough_cpu_work() {
        // TPC-H Q15: 10,000 suppliers over lineitem. SF 1 on 16 cores: 2.2 ms of CPU
        // wall time against the device pass's fixed cost; SF 10, or SF 1 on 4 cores: pays.
        assert!(!table_pays(6_001_215, 10_000, 16));
        assert!(table_pays(59_986_052, 100_000, 16));
        assert!(table_pays(6_001_215, 10_000, 4));
        // Too few rows a group, however many cores' time there is to save.
        assert!(!table_pays(4_000_000, 1_000_000, 1));
        assert!(table_pays(16_000_000, 1_000_000, 1));
        // Nothing to save: no rows, or no groups on an empty table.
        assert!(!table_pays(0, 0, 16));
        assert!(!table_pays(0, 1, 0));
    }
}
