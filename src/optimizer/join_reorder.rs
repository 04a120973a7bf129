//! Join order for clusters of inner joins: the logical optimizer rule
//! `ridgeline_join_reorder`.
//!
//! DataFusion joins the relations of `FROM a, b, c WHERE ...` in the order the
//! query names them and only swaps the two inputs of each join; TPC-H q7, for
//! example, then joins all of a shipping-date slice of lineitem with orders and
//! customer before the two-nation filter cuts it to 8%. This rule flattens every
//! tree of inner equi-joins (through the column-only projections between them) into
//! its leaves, equality classes of join columns and residual filters, and rebuilds
//! it by greedy operator ordering (Fegaras, 1998): repeatedly join the two connected
//! inputs whose estimated result is smallest. Estimates come from the tables'
//! statistics (rows; per column NULLs, min / max and a HyperLogLog distinct count,
//! see `crate::hll`): `|S| |T| / max(ndv_S(k), ndv_T(k))` for a join on key class
//! k, textbook selectivities for filters (`1 / ndv` for equality, interpolation in
//! [min, max] for ranges). Equality classes add the joins the text implies
//! (`a = b and b = c` lets a join c directly).
//!
//! An input that aggregates by a join key (a decorrelated subquery) and whose key
//! class has a far smaller filtered leaf elsewhere also gets a semi join with that
//! leaf's keys below its aggregation (sideways information passing): dropping the
//! groups that cannot join changes no group that can.
//!
//! Only inner joins with `NULL != NULL` keys are reordered, which keeps the answer
//! the same; a cluster whose leaves have no row estimate keeps its order. The
//! output columns keep their order (a projection restores it). Off with
//! `SET ridgeline.join_reorder = false`.
use crate::config::RidgelineOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::expr::{Between, InList, Like};
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, Join, JoinConstraint, JoinType, LogicalPlan, LogicalPlanBuilder, Operator, Projection};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use std::collections::HashMap;
use std::sync::Arc;

use crate::tuning::join_order::MAX_LEAVES;

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct JoinReorder;

impl OptimizerRule for JoinReorder {
    fn name(&self) -> &str {
        "ridgeline_join_reorder"
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        if !RidgelineOptions::from_config(&config.options()).join_reorder {
            return Ok(Transformed::no(plan));
        }
        let new = reorder(&plan)?;
        if new == plan {
            Ok(Transformed::no(plan))
        } else {
            Ok(Transformed::yes(new))
        }
    }
}

/// Keys compared with `NULL != NULL` and no null-aware (`NOT IN`) semantics.
fn plain_keys(j: &Join) -> bool {
    j.null_equality == NullEquality::NullEqualsNothing && !j.null_aware
}

fn eligible(j: &Join) -> bool {
    j.join_type == JoinType::Inner && plain_keys(j)
}

/// An inner or semi join with plain keys: its output keeps only key values the
/// other side has.
fn inner_or_semi(j: &Join) -> bool {
    matches!(j.join_type, JoinType::Inner | JoinType::LeftSemi) && plain_keys(j)
}

/// A semi join (a decorrelated `IN` / `EXISTS`) the rule may move into a leaf of
/// the cluster below it.
fn semi_eligible(j: &Join) -> bool {
    j.join_type == JoinType::LeftSemi && plain_keys(j) && !j.on.is_empty()
}

/// An inner join of a cluster, or a semi join over one.
fn is_cluster_root(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Join(j) if eligible(j) => true,
        LogicalPlan::Join(j) if semi_eligible(j) => below_semi(&j.left),
        _ => false,
    }
}

/// The left input of a semi join that belongs to a cluster: a cluster root, seen
/// through column-only projections and filters.
fn below_semi(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => below_semi(&p.input),
        LogicalPlan::Filter(f) => below_semi(&f.input),
        _ => is_cluster_root(p),
    }
}

/// `plan` with every inner-join cluster in it reordered.
fn reorder(plan: &LogicalPlan) -> Result<LogicalPlan> {
    if is_cluster_root(plan) {
        if let Some(p) = reorder_cluster(plan)? {
            return Ok(p);
        }
    }
    let p = plan.clone().map_children(|c| Ok(Transformed::yes(reorder(&c)?)))?.data;
    let p = pass_keys(p)?;
    // Subqueries in expressions too (an uncorrelated scalar subquery stays one:
    // TPC-H q11's total over the same three-table join as its groups).
    Ok(p.map_subqueries(|s| Ok(Transformed::yes(reorder(&s)?)))?.data)
}

/// A flattened cluster.
#[derive(Default)]
struct Cluster {
    leaves: Vec<LogicalPlan>,
    pairs: Vec<(Expr, Expr)>,
    filters: Vec<Expr>,
    /// Semi joins over the cluster (their left input is the cluster).
    semis: Vec<Join>,
    /// The topmost inner join (below the semi joins).
    inner: Option<LogicalPlan>,
}

#[recursive::recursive]
fn collect(plan: &LogicalPlan, c: &mut Cluster) {
    match plan {
        LogicalPlan::Join(j) if eligible(j) => {
            if c.inner.is_none() {
                c.inner = Some(plan.clone());
            }
            collect(&j.left, c);
            collect(&j.right, c);
            c.pairs.extend(j.on.iter().cloned());
            if let Some(f) = &j.filter {
                c.filters.extend(split_conjunction_owned(f.clone()));
            }
        }
        LogicalPlan::Join(j) if semi_eligible(j) && below_semi(&j.left) => {
            c.semis.push(j.clone());
            collect(&j.left, c);
        }
        LogicalPlan::Projection(p) if is_cluster_root(&p.input) && p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => collect(&p.input, c),
        LogicalPlan::Filter(f) if is_cluster_root(&f.input) => {
            c.filters.extend(split_conjunction_owned(f.predicate.clone()));
            collect(&f.input, c);
        }
        _ => c.leaves.push(plan.clone()),
    }
}

/// One input of the greedy ordering: a leaf or a join built so far.
struct Node {
    plan: LogicalPlan,
    /// Leaves inside, as a bit set.
    leaves: u64,
    rows: f64,
}

/// A predicate still to place, with the leaves it reads.
struct Pending {
    expr: Expr,
    leaves: u64,
    done: bool,
}

/// A non-column equi-join pair, with the leaves of each side.
struct Pair {
    left: Expr,
    right: Expr,
    lleaves: u64,
    rleaves: u64,
    done: bool,
}

fn leaves_of(e: &Expr, cols: &HashMap<Column, usize>) -> Option<u64> {
    let mut set = 0u64;
    for c in e.column_refs() {
        set |= 1u64 << *cols.get(c)?;
    }
    Some(set)
}

fn reorder_cluster(root: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let mut cl = Cluster::default();
    collect(root, &mut cl);
    let n = cl.leaves.len();
    let fewest = if cl.semis.is_empty() { 3 } else { 2 };
    if !(fewest..=MAX_LEAVES).contains(&n) {
        return Ok(None);
    }
    let Some((mut leaves, mut rows)) = canonical_leaves(&cl)? else { return Ok(None) };
    let on_top = place_semis(&cl, &mut leaves, &mut rows)?;
    let Some(col_leaf) = column_leaves(&cl, &leaves) else { return Ok(None) };
    let Some((classes, mut complex)) = equality_classes(&cl, &leaves, &rows, &col_leaf) else { return Ok(None) };
    pass_sideways(&classes, &mut leaves, &mut rows)?;
    let mut pending: Vec<Pending> = Vec::new();
    for f in &cl.filters {
        let Some(set) = leaves_of(f, &col_leaf) else { return Ok(None) };
        pending.push(Pending { expr: f.clone(), leaves: set, done: false });
    }
    let nodes = leaf_nodes(leaves, &rows, &classes, &mut pending, &mut complex)?;
    // Columns the root must output.
    let out_cols: Vec<Column> = root.schema().columns();
    let nodes = join_greedily(nodes, &classes, &mut complex, &mut pending, &out_cols)?;
    finish_cluster(root, nodes, on_top, &pending, &complex, &out_cols)
}

/// The cluster's leaves, each reordered inside first, in a canonical order (so
/// the result does not depend on the order of the text, and a second pass
/// changes nothing), with their estimated rows; `None` without estimates.
fn canonical_leaves(cl: &Cluster) -> Result<Option<(Vec<LogicalPlan>, Vec<f64>)>> {
    let n = cl.leaves.len();
    let mut leaves: Vec<(String, LogicalPlan)> = Vec::with_capacity(n);
    for l in &cl.leaves {
        let l = reorder(l)?;
        let key = l.display_indent().to_string();
        leaves.push((key, l));
    }
    leaves.sort_by(|a, b| a.0.cmp(&b.0));
    let leaves: Vec<LogicalPlan> = leaves.into_iter().map(|(_, l)| l).collect();
    let mut rows = Vec::with_capacity(n);
    for l in &leaves {
        match est_rows(l) {
            Some(r) => rows.push(r.max(1.0)),
            None => return Ok(None),
        }
    }
    Ok(Some((leaves, rows)))
}

/// Places the semi joins over the cluster; returns those that stay on top.
fn place_semis(cl: &Cluster, leaves: &mut [LogicalPlan], rows: &mut [f64]) -> Result<Vec<Join>> {
    // Semi joins over the cluster go onto the leaf that owns their keys when that
    // leaf is no larger than the cluster's estimated result or the semi join is
    // estimated to drop three quarters of its rows (TPC-H q18: the orders whose
    // lineitems sum above 300 are picked before orders meets customer and
    // lineitem); the others stay on top (q21's EXISTS on all of lineitem).
    let top_rows = cl.inner.as_ref().and_then(est_rows);
    let n = leaves.len();
    let mut on_top: Vec<Join> = Vec::new();
    for sj in &cl.semis {
        let right = Arc::new(reorder(&sj.right)?);
        let mut owner: Option<usize> = None;
        let mut single = true;
        for c in left_refs(sj) {
            let owners: Vec<usize> = (0..n).filter(|&i| leaves[i].schema().has_column(c)).collect();
            if owners.len() != 1 || owner.is_some_and(|o| o != owners[0]) {
                single = false;
                break;
            }
            owner = Some(owners[0]);
        }
        if let (true, Some(i)) = (single, owner) {
            let join = Join::try_new(Arc::new(leaves[i].clone()), right.clone(), sj.on.clone(), sj.filter.clone(), JoinType::LeftSemi, sj.join_constraint, NullEquality::NullEqualsNothing, false)?;
            let new = LogicalPlan::Join(join);
            if let Some(r) = est_rows(&new) {
                if top_rows.is_some_and(|t| rows[i] <= t) || r <= 0.25 * rows[i] {
                    leaves[i] = new;
                    rows[i] = r.max(1.0);
                    continue;
                }
            }
        }
        let mut kept = sj.clone();
        kept.right = right;
        on_top.push(kept);
    }
    Ok(on_top)
}

/// Which leaf every column the pairs and filters reference comes from; `None`
/// when a column is in no leaf or in several.
fn column_leaves(cl: &Cluster, leaves: &[LogicalPlan]) -> Option<HashMap<Column, usize>> {
    let n = leaves.len();
    let mut col_leaf: HashMap<Column, usize> = HashMap::new();
    let mut refs: Vec<&Column> = Vec::new();
    for (a, b) in &cl.pairs {
        refs.extend(a.column_refs());
        refs.extend(b.column_refs());
    }
    for f in &cl.filters {
        refs.extend(f.column_refs());
    }
    for c in refs {
        if col_leaf.contains_key(c) {
            continue;
        }
        let owners: Vec<usize> = (0..n).filter(|&i| leaves[i].schema().has_column(c)).collect();
        if owners.len() != 1 {
            return None;
        }
        col_leaf.insert(c.clone(), owners[0]);
    }
    Some(col_leaf)
}

/// Equality classes of columns (union-find over the column pairs), each member
/// with its leaf and distinct-value estimate, and the other (non-column) pairs.
#[allow(clippy::type_complexity)]
fn equality_classes(cl: &Cluster, leaves: &[LogicalPlan], rows: &[f64], col_leaf: &HashMap<Column, usize>) -> Option<(Vec<Vec<(Column, usize, f64)>>, Vec<Pair>)> {
    let mut class_cols: Vec<Column> = Vec::new();
    let mut class_idx: HashMap<Column, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut complex: Vec<Pair> = Vec::new();
    for (a, b) in &cl.pairs {
        match (a, b) {
            (Expr::Column(x), Expr::Column(y)) => {
                let mut id = |c: &Column, parent: &mut Vec<usize>| -> usize {
                    *class_idx.entry(c.clone()).or_insert_with(|| {
                        class_cols.push(c.clone());
                        parent.push(parent.len());
                        parent.len() - 1
                    })
                };
                let (i, j) = (id(x, &mut parent), id(y, &mut parent));
                let (ri, rj) = (find(&mut parent, i), find(&mut parent, j));
                if ri != rj {
                    parent[ri.max(rj)] = ri.min(rj);
                }
            }
            _ => {
                let (Some(lleaves), Some(rleaves)) = (leaves_of(a, col_leaf), leaves_of(b, col_leaf)) else { return None };
                complex.push(Pair { left: a.clone(), right: b.clone(), lleaves, rleaves, done: false });
            }
        }
    }
    // classes[k] = members (column, leaf, distinct estimate)
    let mut classes: Vec<Vec<(Column, usize, f64)>> = Vec::new();
    {
        let mut root_of: HashMap<usize, usize> = HashMap::new();
        for i in 0..class_cols.len() {
            let r = find(&mut parent, i);
            let k = *root_of.entry(r).or_insert_with(|| {
                classes.push(Vec::new());
                classes.len() - 1
            });
            let c = &class_cols[i];
            let leaf = col_leaf[c];
            let ndv = col_stats(&leaves[leaf], c).and_then(|s| s.ndv).unwrap_or(rows[leaf]);
            classes[k].push((c.clone(), leaf, ndv));
        }
    }
    Some((classes, complex))
}

/// Sideways information passing over the classes (below).
fn pass_sideways(classes: &[Vec<(Column, usize, f64)>], leaves: &mut [LogicalPlan], rows: &mut [f64]) -> Result<()> {
    // Sideways information passing: an aggregated input grouped by a join key
    // whose class has a much smaller (filtered) leaf elsewhere gets a semi join
    // with that leaf's keys below its aggregation, so it only aggregates the groups
    // that can join (TPC-H q17: the per-part average over lineitem for the parts
    // of one brand and container; q2: the cheapest supplier of the parts wanted).
    for (k, members) in classes.iter().enumerate() {
        for m in members {
            let i = m.1;
            let Some(j) = members.iter().filter(|x| x.1 != i).min_by(|a, b| rows[a.1].total_cmp(&rows[b.1])).map(|x| x.1) else { continue };
            if rows[j] > SIP_MAX_ROWS {
                continue;
            }
            let small = members.iter().find(|x| x.1 == j).map(|x| x.0.clone()).expect("member of leaf j");
            let Ok(idx) = leaves[i].schema().index_of_column(&m.0) else { continue };
            let alias = format!("{SIP_ALIAS}{i}_{k}");
            let keys = rows[j];
            let make = |input: &LogicalPlan, key: &Column| key_semi_join(input, key, &leaves[j], &small, keys, &alias);
            if let Some(new) = inject(&leaves[i], idx, &make)? {
                if let Some(r) = est_rows(&new) {
                    rows[i] = r.max(1.0);
                }
                leaves[i] = new;
            }
        }
    }
    Ok(())
}

/// One node per leaf, with the equalities a class implies inside the leaf and
/// the single-leaf filters and pairs on top of it.
fn leaf_nodes(leaves: Vec<LogicalPlan>, rows: &[f64], classes: &[Vec<(Column, usize, f64)>], pending: &mut [Pending], complex: &mut [Pair]) -> Result<Vec<Node>> {
    let n = leaves.len();
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    for (i, leaf) in leaves.into_iter().enumerate() {
        let mut preds: Vec<Expr> = Vec::new();
        for members in classes {
            let mine: Vec<&Column> = members.iter().filter(|m| m.1 == i).map(|m| &m.0).collect();
            for other in mine.iter().skip(1) {
                preds.push(Expr::Column(mine[0].clone()).eq(Expr::Column((*other).clone())));
            }
        }
        for p in pending.iter_mut().filter(|p| !p.done && p.leaves == 1u64 << i) {
            preds.push(p.expr.clone());
            p.done = true;
        }
        for p in complex.iter_mut().filter(|p| !p.done && (p.lleaves | p.rleaves) == 1u64 << i) {
            preds.push(p.left.clone().eq(p.right.clone()));
            p.done = true;
        }
        let plan = match conjunction(preds) {
            Some(pred) => LogicalPlan::Filter(Filter::try_new(pred, Arc::new(leaf))?),
            None => leaf,
        };
        nodes.push(Node { plan, leaves: 1u64 << i, rows: rows[i] });
    }
    Ok(nodes)
}

/// Joins the nodes greedily, smallest estimated result first, placing every
/// pair and filter at the first join that has its leaves and dropping columns
/// nothing above needs; returns the one node left.
fn join_greedily(mut nodes: Vec<Node>, classes: &[Vec<(Column, usize, f64)>], complex: &mut [Pair], pending: &mut [Pending], out_cols: &[Column]) -> Result<Vec<Node>> {
    while nodes.len() > 1 {
        // The connected pair with the smallest estimated result; else the two
        // smallest inputs (a cross join).
        let mut best: Option<(f64, usize, usize)> = None;
        for i in 0..nodes.len() {
            for j in i + 1..nodes.len() {
                if let Some(size) = join_size(&nodes[i], &nodes[j], classes, complex) {
                    if best.is_none_or(|b| size < b.0) {
                        best = Some((size, i, j));
                    }
                }
            }
        }
        let (size, i, j) = match best {
            Some(b) => b,
            None => {
                let mut idx: Vec<usize> = (0..nodes.len()).collect();
                idx.sort_by(|&a, &b| nodes[a].rows.total_cmp(&nodes[b].rows));
                let (a, b) = (idx[0].min(idx[1]), idx[0].max(idx[1]));
                (nodes[a].rows * nodes[b].rows, a, b)
            }
        };
        let b = nodes.remove(j);
        let a = nodes.remove(i);
        // The smaller input on the left (DataFusion builds the hash table there).
        let (l, r) = if a.rows <= b.rows { (a, b) } else { (b, a) };
        let mut on: Vec<(Expr, Expr)> = Vec::new();
        for members in classes {
            let lm = members.iter().find(|m| l.leaves & (1u64 << m.1) != 0);
            let rm = members.iter().find(|m| r.leaves & (1u64 << m.1) != 0);
            if let (Some(x), Some(y)) = (lm, rm) {
                on.push((Expr::Column(x.0.clone()), Expr::Column(y.0.clone())));
            }
        }
        let both = l.leaves | r.leaves;
        let mut filters: Vec<Expr> = Vec::new();
        for p in complex.iter_mut().filter(|p| !p.done && (p.lleaves | p.rleaves) & !both == 0) {
            if p.lleaves & !l.leaves == 0 && p.rleaves & !r.leaves == 0 {
                on.push((p.left.clone(), p.right.clone()));
            } else if p.lleaves & !r.leaves == 0 && p.rleaves & !l.leaves == 0 {
                on.push((p.right.clone(), p.left.clone()));
            } else {
                filters.push(p.left.clone().eq(p.right.clone()));
            }
            p.done = true;
        }
        for p in pending.iter_mut().filter(|p| !p.done && p.leaves & !both == 0) {
            filters.push(p.expr.clone());
            p.done = true;
        }
        let join = Join::try_new(Arc::new(l.plan), Arc::new(r.plan), on, conjunction(filters), JoinType::Inner, JoinConstraint::On, NullEquality::NullEqualsNothing, false)?;
        let mut plan = LogicalPlan::Join(join);
        // Drop the columns nothing above needs.
        if !nodes.is_empty() {
            let needed = |c: &Column| -> bool {
                out_cols.contains(c)
                    || classes.iter().any(|m| m.iter().any(|x| &x.0 == c) && m.iter().any(|x| both & (1u64 << x.1) == 0))
                    || pending.iter().any(|p| !p.done && p.expr.column_refs().contains(c))
                    || complex.iter().any(|p| !p.done && (p.left.column_refs().contains(c) || p.right.column_refs().contains(c)))
            };
            let cols = plan.schema().columns();
            let keep: Vec<Expr> = cols.iter().filter(|c| needed(c)).map(|c| Expr::Column(c.clone())).collect();
            if keep.len() < cols.len() && !keep.is_empty() {
                plan = LogicalPlan::Projection(Projection::try_new(keep, Arc::new(plan))?);
            }
        }
        nodes.push(Node { plan, leaves: both, rows: size.max(1.0) });
    }
    Ok(nodes)
}

/// The joined cluster with the semi joins that stay on top and the root's
/// columns, or `None` when something could not be placed or the schema differs.
fn finish_cluster(root: &LogicalPlan, mut nodes: Vec<Node>, on_top: Vec<Join>, pending: &[Pending], complex: &[Pair], out_cols: &[Column]) -> Result<Option<LogicalPlan>> {
    if pending.iter().any(|p| !p.done) || complex.iter().any(|p| !p.done) {
        return Ok(None);
    }
    let mut plan = nodes.pop().map(|n| n.plan).expect("one node left");
    // The semi joins that stay on top, innermost first.
    for sj in on_top.into_iter().rev() {
        if !left_refs(&sj).iter().all(|c| plan.schema().has_column(c)) {
            return Ok(None);
        }
        plan = LogicalPlan::Join(Join::try_new(Arc::new(plan), sj.right, sj.on, sj.filter, JoinType::LeftSemi, sj.join_constraint, NullEquality::NullEqualsNothing, false)?);
    }
    if plan.schema().columns() != out_cols {
        let exprs = out_cols.iter().map(|c| Expr::Column(c.clone())).collect();
        plan = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(plan))?);
    }
    // Same columns, types and nullability as before, or the cluster stays as it was.
    if !plan.schema().logically_equivalent_names_and_types(root.schema()) || plan.schema().columns() != out_cols {
        return Ok(None);
    }
    Ok(Some(plan))
}


/// The columns of a semi join's left input that its keys and filter read.
fn left_refs(sj: &Join) -> Vec<&Column> {
    let mut refs: Vec<&Column> = sj.on.iter().flat_map(|(a, _)| a.column_refs()).collect();
    if let Some(f) = &sj.filter {
        refs.extend(f.column_refs().into_iter().filter(|c| !sj.right.schema().has_column(c)));
    }
    refs
}

/// Sideways information passing across one join outside a cluster (TPC-H q20's
/// `IN` over partsupp and the per-part-and-supplier sums of lineitem): when the
/// right input aggregates by a join key, a semi join with the smallest set of
/// keys the left input can hold for that key goes below the aggregation.
fn pass_keys(plan: LogicalPlan) -> Result<LogicalPlan> {
    let LogicalPlan::Join(j) = &plan else { return Ok(plan) };
    if !inner_or_semi(j) {
        return Ok(plan);
    }
    for (n, (a, b)) in j.on.iter().enumerate() {
        let (Expr::Column(lc), Expr::Column(rc)) = (a, b) else { continue };
        let Ok(idx) = j.right.schema().index_of_column(rc) else { continue };
        let mut sources = Vec::new();
        key_sources(&j.left, lc, &mut sources);
        let Some((src, scol, keys)) = sources.into_iter().filter_map(|(p, c)| est_rows(&p).map(|r| (p, c, r))).min_by(|x, y| x.2.total_cmp(&y.2)) else { continue };
        if keys > SIP_MAX_ROWS {
            continue;
        }
        let alias = format!("{SIP_ALIAS}j{n}");
        let make = |input: &LogicalPlan, key: &Column| key_semi_join(input, key, &src, &scol, keys, &alias);
        if let Some(right) = inject(&j.right, idx, &make)? {
            let join = Join::try_new(j.left.clone(), Arc::new(right), j.on.clone(), j.filter.clone(), j.join_type, j.join_constraint, j.null_equality, j.null_aware)?;
            return Ok(LogicalPlan::Join(join));
        }
    }
    Ok(plan)
}

/// `input` semi-joined on `key` with column `col` of `src` (about `keys` rows),
/// under the relation name `alias`; `None` when those keys are more than
/// [`SIP_MAX_SHARE`] of `key`'s distinct values (too few groups dropped).
fn key_semi_join(input: &LogicalPlan, key: &Column, src: &LogicalPlan, col: &Column, keys: f64, alias: &str) -> Result<Option<LogicalPlan>> {
    let ndv = col_stats(input, key).and_then(|s| s.ndv).or_else(|| est_rows(input)).unwrap_or(0.0);
    if keys > SIP_MAX_SHARE * ndv {
        return Ok(None);
    }
    let right = LogicalPlanBuilder::from(src.clone()).project(vec![Expr::Column(col.clone())])?.alias(alias)?.build()?;
    let rcol = Column::new(Some(alias), col.name.as_str());
    Ok(Some(LogicalPlanBuilder::from(input.clone()).join(right, JoinType::LeftSemi, (vec![key.clone()], vec![rcol]), None)?.build()?))
}

/// Plans whose column `col` (second) holds every value column `c` of `plan` can
/// have: `plan` itself, and below its column-only projections, filters and
/// joins, the other side of an inner or semi join on `c`.
fn key_sources(plan: &LogicalPlan, c: &Column, out: &mut Vec<(LogicalPlan, Column)>) {
    if !plan.schema().has_column(c) {
        return;
    }
    out.push((plan.clone(), c.clone()));
    match plan {
        LogicalPlan::Filter(f) => key_sources(&f.input, c, out),
        LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => key_sources(&p.input, c, out),
        LogicalPlan::Join(j) if inner_or_semi(j) => {
            for (a, b) in &j.on {
                if let (Expr::Column(x), Expr::Column(y)) = (a, b) {
                    if x == c {
                        out.push((j.right.as_ref().clone(), y.clone()));
                    } else if y == c && j.join_type == JoinType::Inner {
                        out.push((j.left.as_ref().clone(), x.clone()));
                    }
                }
            }
            key_sources(&j.left, c, out);
            if j.join_type == JoinType::Inner {
                key_sources(&j.right, c, out);
            }
        }
        _ => {}
    }
}

use crate::tuning::join_order::SIP_MAX_ROWS;
use crate::tuning::join_order::SIP_MAX_SHARE;
/// Alias of the key relation of a semi join the rule added (so a later pass does
/// not add another).
const SIP_ALIAS: &str = "__ridgeline_sip_";

/// `plan` (an aggregated subquery: aliases, projections and HAVING filters over an
/// aggregation grouped by plain columns) with `make(input, group column)` placed
/// below its aggregation, where output column `idx` is a grouping column; `None`
/// when the plan has another shape, already carries such a semi join, or `make`
/// declines.
fn inject(plan: &LogicalPlan, idx: usize, make: &dyn Fn(&LogicalPlan, &Column) -> Result<Option<LogicalPlan>>) -> Result<Option<LogicalPlan>> {
    let rebuild = |new_input: Option<LogicalPlan>| -> Result<Option<LogicalPlan>> {
        match new_input {
            Some(n) => Ok(Some(plan.with_new_exprs(plan.expressions(), vec![n])?)),
            None => Ok(None),
        }
    };
    match plan {
        LogicalPlan::SubqueryAlias(a) => rebuild(inject(&a.input, idx, make)?),
        LogicalPlan::Filter(f) => rebuild(inject(&f.input, idx, make)?),
        LogicalPlan::Projection(p) => {
            let c = match p.expr.get(idx) {
                Some(Expr::Column(c)) => c,
                Some(Expr::Alias(a)) => match a.expr.as_ref() {
                    Expr::Column(c) => c,
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            };
            let Ok(j) = p.input.schema().index_of_column(c) else { return Ok(None) };
            rebuild(inject(&p.input, j, make)?)
        }
        LogicalPlan::Aggregate(a) => {
            if !a.group_expr.iter().all(|e| matches!(e, Expr::Column(_))) {
                return Ok(None);
            }
            let Some(Expr::Column(key)) = a.group_expr.get(idx) else { return Ok(None) };
            let passed = a.input.exists(|p| Ok(matches!(p, LogicalPlan::SubqueryAlias(s) if s.alias.table().starts_with(SIP_ALIAS))))?;
            if passed {
                return Ok(None);
            }
            rebuild(make(&a.input, key)?)
        }
        _ => Ok(None),
    }
}

/// Estimated rows of joining `a` and `b`, or `None` when no key connects them.
fn join_size(a: &Node, b: &Node, classes: &[Vec<(Column, usize, f64)>], complex: &[Pair]) -> Option<f64> {
    let mut divisor: Option<f64> = None;
    for members in classes {
        let nd = |node: &Node| {
            members
                .iter()
                .filter(|m| node.leaves & (1u64 << m.1) != 0)
                .map(|m| m.2.min(node.rows))
                .fold(None, |acc: Option<f64>, x| Some(acc.map_or(x, |y| y.max(x))))
        };
        if let (Some(x), Some(y)) = (nd(a), nd(b)) {
            let d = x.max(y).max(1.0);
            divisor = Some(divisor.map_or(d, |v| v.max(d)));
        }
    }
    let both = a.leaves | b.leaves;
    for p in complex.iter().filter(|p| !p.done && (p.lleaves | p.rleaves) & !both == 0) {
        let spans = (p.lleaves & !a.leaves == 0 && p.rleaves & !b.leaves == 0) || (p.lleaves & !b.leaves == 0 && p.rleaves & !a.leaves == 0);
        if spans {
            let d = a.rows.max(b.rows);
            divisor = Some(divisor.map_or(d, |v| v.max(d)));
        }
    }
    divisor.map(|d| a.rows * b.rows / d)
}

/// What the rule knows of one column (also used by `filter_estimates`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ColStat {
    pub(crate) ndv: Option<f64>,
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
    pub(crate) null_frac: f64,
}

/// A number, date or timestamp literal as a float (days for dates, seconds for
/// timestamps).
pub(crate) fn scalar_f64(v: &ScalarValue) -> Option<f64> {
    use ScalarValue as S;
    Some(match v {
        S::Int8(Some(x)) => *x as f64,
        S::Int16(Some(x)) => *x as f64,
        S::Int32(Some(x)) => *x as f64,
        S::Int64(Some(x)) => *x as f64,
        S::UInt8(Some(x)) => *x as f64,
        S::UInt16(Some(x)) => *x as f64,
        S::UInt32(Some(x)) => *x as f64,
        S::UInt64(Some(x)) => *x as f64,
        S::Float32(Some(x)) => *x as f64,
        S::Float64(Some(x)) => *x,
        S::Decimal128(Some(x), _, s) => *x as f64 / 10f64.powi(*s as i32),
        S::Date32(Some(x)) => *x as f64,
        S::Date64(Some(x)) => *x as f64 / 86_400_000.0,
        S::TimestampSecond(Some(x), _) => *x as f64,
        S::TimestampMillisecond(Some(x), _) => *x as f64 / 1e3,
        S::TimestampMicrosecond(Some(x), _) => *x as f64 / 1e6,
        S::TimestampNanosecond(Some(x), _) => *x as f64 / 1e9,
        _ => return None,
    })
}

/// Statistics of column `col` of `plan`, traced down to a table scan.
fn col_stats(plan: &LogicalPlan, col: &Column) -> Option<ColStat> {
    let idx = plan.schema().index_of_column(col).ok()?;
    col_stats_at(plan, idx)
}

fn col_stats_at(plan: &LogicalPlan, idx: usize) -> Option<ColStat> {
    match plan {
        LogicalPlan::TableScan(s) => {
            let st = source_as_provider(&s.source).ok()?.statistics()?;
            let src = match &s.projection {
                Some(p) => *p.get(idx)?,
                None => idx,
            };
            let cs = st.column_statistics.get(src)?;
            let rows = st.num_rows.get_value().map(|r| *r as f64);
            Some(ColStat {
                ndv: cs.distinct_count.get_value().map(|d| *d as f64),
                min: cs.min_value.get_value().and_then(scalar_f64),
                max: cs.max_value.get_value().and_then(scalar_f64),
                null_frac: match (cs.null_count.get_value(), rows) {
                    (Some(nc), Some(r)) if r > 0.0 => *nc as f64 / r,
                    _ => 0.0,
                },
            })
        }
        LogicalPlan::Filter(f) => col_stats_at(&f.input, idx),
        LogicalPlan::SubqueryAlias(a) => col_stats_at(&a.input, idx),
        LogicalPlan::Sort(s) => col_stats_at(&s.input, idx),
        LogicalPlan::Limit(l) => col_stats_at(&l.input, idx),
        LogicalPlan::Projection(p) => match p.expr.get(idx)? {
            Expr::Column(c) => col_stats(&p.input, c),
            Expr::Alias(a) => match a.expr.as_ref() {
                Expr::Column(c) => col_stats(&p.input, c),
                _ => None,
            },
            _ => None,
        },
        LogicalPlan::Join(j) => {
            let nl = j.left.schema().fields().len();
            match j.join_type {
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                    if idx < nl {
                        col_stats_at(&j.left, idx)
                    } else {
                        col_stats_at(&j.right, idx - nl)
                    }
                }
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => col_stats_at(&j.left, idx),
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => col_stats_at(&j.right, idx),
            }
        }
        LogicalPlan::Aggregate(a) => match a.group_expr.get(idx)? {
            Expr::Column(c) if a.group_expr.iter().all(|e| matches!(e, Expr::Column(_))) => col_stats(&a.input, c),
            _ => None,
        },
        _ => None,
    }
}

/// Estimated output rows of `plan`, or `None` where nothing is known.
#[recursive::recursive]
fn est_rows(plan: &LogicalPlan) -> Option<f64> {
    match plan {
        LogicalPlan::TableScan(s) => {
            let st = source_as_provider(&s.source).ok()?.statistics()?;
            let mut r = *st.num_rows.get_value()? as f64;
            for f in &s.filters {
                r *= selectivity(f, plan);
            }
            if let Some(k) = s.fetch {
                r = r.min(k as f64);
            }
            Some(r)
        }
        LogicalPlan::Filter(f) => Some(est_rows(&f.input)? * selectivity(&f.predicate, &f.input)),
        LogicalPlan::Projection(p) => est_rows(&p.input),
        LogicalPlan::SubqueryAlias(a) => est_rows(&a.input),
        LogicalPlan::Sort(s) => {
            let r = est_rows(&s.input)?;
            Some(s.fetch.map_or(r, |k| r.min(k as f64)))
        }
        LogicalPlan::Limit(l) => est_rows(&l.input),
        LogicalPlan::Distinct(d) => est_rows(d.input()),
        LogicalPlan::Union(u) => u.inputs.iter().map(|i| est_rows(i)).sum(),
        LogicalPlan::EmptyRelation(e) => Some(if e.produce_one_row { 1.0 } else { 0.0 }),
        LogicalPlan::Values(v) => Some(v.values.len() as f64),
        LogicalPlan::Aggregate(a) => {
            if a.group_expr.is_empty() {
                return Some(1.0);
            }
            let input = est_rows(&a.input)?;
            let mut groups = 1.0f64;
            for g in &a.group_expr {
                let ndv = match g {
                    Expr::Column(c) => col_stats(&a.input, c).and_then(|s| s.ndv),
                    _ => None,
                };
                groups *= ndv.unwrap_or(input);
                if groups >= input {
                    break;
                }
            }
            Some(groups.min(input))
        }
        LogicalPlan::Join(j) => {
            let (l, r) = (est_rows(&j.left)?, est_rows(&j.right)?);
            // Keys: the join's pairs and the column equalities across its filter
            // (joins not yet split into keys and filter, as early in a pass).
            let mut keys: Vec<(Expr, Expr)> = j.on.clone();
            if let Some(f) = &j.filter {
                for e in split_conjunction_owned(f.clone()) {
                    if let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = &e {
                        if let (Expr::Column(x), Expr::Column(y)) = (left.as_ref(), right.as_ref()) {
                            let (ls, rs) = (j.left.schema(), j.right.schema());
                            if ls.has_column(x) && rs.has_column(y) {
                                keys.push((left.as_ref().clone(), right.as_ref().clone()));
                            } else if ls.has_column(y) && rs.has_column(x) {
                                keys.push((right.as_ref().clone(), left.as_ref().clone()));
                            }
                        }
                    }
                }
            }
            let mut d: f64 = 1.0;
            for (a, b) in &keys {
                let nd = |e: &Expr, p: &LogicalPlan, rows: f64| match e {
                    Expr::Column(c) => col_stats(p, c).and_then(|s| s.ndv).unwrap_or(rows).min(rows),
                    _ => rows,
                };
                d = d.max(nd(a, &j.left, l)).max(nd(b, &j.right, r));
            }
            let inner = if keys.is_empty() { l * r } else { l * r / d.max(1.0) };
            Some(match j.join_type {
                JoinType::Inner => inner,
                JoinType::Left => inner.max(l),
                JoinType::Right => inner.max(r),
                JoinType::Full => inner.max(l).max(r),
                // A semi join keeps the share of the kept side's keys the other
                // side has (at most its rows); an anti join the rest.
                JoinType::LeftSemi => l * semi_share(j, true, r),
                JoinType::LeftAnti => l * (1.0 - semi_share(j, true, r)).max(0.1),
                JoinType::RightSemi => r * semi_share(j, false, l),
                JoinType::RightAnti => r * (1.0 - semi_share(j, false, l)).max(0.1),
                JoinType::LeftMark => l,
                JoinType::RightMark => r,
            })
        }
        _ => None,
    }
}

/// The share of the kept side's rows a semi join keeps: the other side's rows
/// (`other`, an upper bound of its distinct keys) over the kept side's distinct
/// keys, at most 1; one half when the keys are not columns.
fn semi_share(j: &Join, keep_left: bool, other: f64) -> f64 {
    let mut share: f64 = 1.0;
    let mut known = false;
    for (a, b) in &j.on {
        let (e, p) = if keep_left { (a, &j.left) } else { (b, &j.right) };
        if let Expr::Column(c) = e {
            if let Some(d) = col_stats(p, c).and_then(|s| s.ndv) {
                share = share.min(other / d.max(1.0));
                known = true;
            }
        }
    }
    if known { share.min(1.0) } else { 0.5 }
}

fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip_cast(&c.expr),
        Expr::TryCast(c) => strip_cast(&c.expr),
        _ => e,
    }
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match strip_cast(e) {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

fn column_of<'a>(e: &'a Expr, input: &LogicalPlan) -> Option<(&'a Column, ColStat)> {
    match strip_cast(e) {
        Expr::Column(c) => Some((c, col_stats(input, c).unwrap_or_default())),
        _ => None,
    }
}

/// Selectivity of `column = literal`: one distinct value's share.
pub(crate) fn eq_sel(s: &ColStat) -> f64 {
    s.ndv.map_or(0.1, |d| 1.0 / d.max(1.0))
}

/// Fraction of the column's range below `v`, if known.
pub(crate) fn below(s: &ColStat, v: &ScalarValue) -> Option<f64> {
    let (lo, hi, x) = (s.min?, s.max?, scalar_f64(v)?);
    if hi <= lo {
        return Some(if x > lo { 1.0 } else { 0.0 });
    }
    Some(((x - lo) / (hi - lo)).clamp(0.0, 1.0))
}

/// Estimated fraction of `input`'s rows for which `e` is true.
fn selectivity(e: &Expr, input: &LogicalPlan) -> f64 {
    sel(e, input).clamp(1e-7, 1.0)
}

#[recursive::recursive]
fn sel(e: &Expr, input: &LogicalPlan) -> f64 {
    const DEFAULT: f64 = 0.25;
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => sel(left, input) * sel(right, input),
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            let (a, b) = (sel(left, input), sel(right, input));
            a + b - a * b
        }
        Expr::Not(x) => 1.0 - sel(x, input),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, lit, op) = match (column_of(left, input), literal(right), column_of(right, input), literal(left)) {
                (Some(c), Some(v), _, _) => (c, v, *op),
                (_, _, Some(c), Some(v)) => match op.swap() {
                    Some(o) => (c, v, o),
                    None => return DEFAULT,
                },
                (Some(a), None, Some(b), None) if *op == Operator::Eq => {
                    return 1.0 / a.1.ndv.unwrap_or(10.0).max(b.1.ndv.unwrap_or(10.0)).max(1.0);
                }
                _ => return DEFAULT,
            };
            let s = &col.1;
            let lt = || below(s, lit).unwrap_or(1.0 / 3.0);
            match op {
                Operator::Eq => eq_sel(s),
                Operator::NotEq => 1.0 - eq_sel(s),
                Operator::Lt | Operator::LtEq => lt(),
                Operator::Gt | Operator::GtEq => 1.0 - lt(),
                _ => DEFAULT,
            }
        }
        Expr::Between(Between { expr, negated, low, high }) => {
            let s = match (column_of(expr, input), literal(low), literal(high)) {
                (Some((_, s)), Some(lo), Some(hi)) => match (below(&s, lo), below(&s, hi)) {
                    (Some(a), Some(b)) => (b - a).max(eq_sel(&s)),
                    _ => 1.0 / 9.0,
                },
                _ => 1.0 / 9.0,
            };
            if *negated { 1.0 - s } else { s }
        }
        Expr::InList(InList { expr, list, negated }) => {
            let s = match column_of(expr, input) {
                Some((_, s)) => (list.len() as f64 * eq_sel(&s)).min(1.0),
                None => (list.len() as f64 * 0.1).min(1.0),
            };
            if *negated { 1.0 - s } else { s }
        }
        Expr::Like(Like { negated, .. }) | Expr::SimilarTo(Like { negated, .. }) => {
            if *negated { 0.9 } else { 0.1 }
        }
        Expr::IsNull(x) => column_of(x, input).map_or(0.1, |(_, s)| s.null_frac),
        Expr::IsNotNull(x) => column_of(x, input).map_or(0.9, |(_, s)| 1.0 - s.null_frac),
        Expr::Literal(ScalarValue::Boolean(Some(b)), _) => {
            if *b { 1.0 } else { 0.0 }
        }
        _ => DEFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectivity_of_ranges_and_equalities() {
        let s = ColStat { ndv: Some(25.0), min: Some(0.0), max: Some(100.0), null_frac: 0.0 };
        assert!((eq_sel(&s) - 0.04).abs() < 1e-12);
        assert!((below(&s, &ScalarValue::Int64(Some(25))).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(below(&s, &ScalarValue::Int64(Some(-5))).unwrap(), 0.0);
        assert_eq!(below(&s, &ScalarValue::Int64(Some(500))).unwrap(), 1.0);
        assert_eq!(below(&s, &ScalarValue::Utf8(Some("x".into()))), None);
        assert!((scalar_f64(&ScalarValue::Decimal128(Some(12345), 15, 2)).unwrap() - 123.45).abs() < 1e-9);
    }
}
