//! The join-order rule (`ridgeline_join_reorder`) and the dynamic filters of host
//! scans: all 22 TPC-H queries give the same answers with both on as with both off,
//! the rule really changes the plans it is meant to change and leaves alone what it
//! cannot estimate, and the scans take the filters.
use crate::common;

use arrow::array::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use ridgeline::cli::bench_tpch::query_sql;
use ridgeline::{GpuMode, Ridgeline};

fn engine() -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    for (name, batches) in common::tpch() {
        rl.register_batches(name, batches[0].schema(), batches.clone()).unwrap();
    }
    rl
}

async fn set(rl: &Ridgeline, on: bool) {
    rl.sql(&format!("SET ridgeline.join_reorder = {on}")).await.unwrap().collect().await.unwrap();
}

async fn set_dynamic(rl: &Ridgeline, on: bool) {
    rl.sql(&format!("SET datafusion.optimizer.enable_dynamic_filter_pushdown = {on}")).await.unwrap().collect().await.unwrap();
}

/// Rows as text lines, sorted unless the query orders them.
fn lines(batches: &[RecordBatch], ordered: bool) -> Vec<String> {
    let text = pretty_format_batches(batches).unwrap().to_string();
    let mut v: Vec<String> = text.lines().filter(|l| l.starts_with('|')).skip(1).map(str::to_string).collect();
    if !ordered {
        v.sort();
    }
    v
}

async fn logical_plan(rl: &Ridgeline, sql: &str) -> String {
    let df = rl.sql(sql).await.unwrap();
    df.into_optimized_plan().unwrap().display_indent().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_answers_do_not_change() {
    let rl = engine();
    let mut changed = Vec::new();
    for q in 1..=22 {
        let sql = query_sql(q);
        let ordered = sql.to_lowercase().contains("order by");
        // The reference: the text's join order, no dynamic filters in the scans.
        set(&rl, false).await;
        set_dynamic(&rl, false).await;
        let plan_off = logical_plan(&rl, sql).await;
        let off = lines(&rl.sql(sql).await.unwrap().collect().await.unwrap(), ordered);
        set(&rl, true).await;
        set_dynamic(&rl, true).await;
        rl.sql("SET ridgeline.scan_dynamic_filters = true").await.unwrap().collect().await.unwrap();
        let plan_on = logical_plan(&rl, sql).await;
        let on = lines(&rl.sql(sql).await.unwrap().collect().await.unwrap(), ordered);
        assert!(!off.is_empty() || q == 11 || q == 20, "q{q}: no rows");
        assert_eq!(off, on, "q{q}: answers differ with the join order rule\nplan with the rule:\n{plan_on}");
        if plan_off != plan_on {
            changed.push(q);
        }
    }
    // The multi-way joins written in an unfavourable order are rewritten.
    for q in [5, 7, 8, 9] {
        assert!(changed.contains(&q), "q{q}'s plan did not change (changed: {changed:?})");
    }
}

/// The deepest join of q7 must not be supplier with all of lineitem's date slice:
/// with the rule, lineitem meets the join of supplier and the filtered nation first
/// (or the orders of the filtered customers), both of which keep 8% of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q7_joins_the_nation_filter_early() {
    let rl = engine();
    let plan = logical_plan(&rl, query_sql(7)).await;
    // The join that reads lineitem's scan directly.
    let lines: Vec<&str> = plan.lines().collect();
    let scan = lines.iter().position(|l| l.trim_start().starts_with("TableScan: lineitem")).expect("lineitem scan");
    let depth = |l: &str| l.len() - l.trim_start().len();
    let parent_join = (0..scan).rev().find(|&i| lines[i].trim_start().starts_with("Inner Join") && depth(lines[i]) < depth(lines[scan])).expect("join above lineitem");
    // Its other input is the sibling subtree: everything under the join that is not
    // on lineitem's own path.
    let d = depth(lines[parent_join]);
    let end = (parent_join + 1..lines.len()).find(|&i| depth(lines[i]) <= d).unwrap_or(lines.len());
    let under = lines[parent_join + 1..end].join("\n");
    assert!(under.contains("TableScan: nation"), "lineitem is joined before the nation filter:\n{plan}");
    set(&rl, false).await;
    let plan_off = logical_plan(&rl, query_sql(7)).await;
    assert_ne!(plan, plan_off);
}

/// Tables without statistics (a CSV file) keep the order of the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_without_statistics_keep_their_order() {
    let dir = std::env::temp_dir().join(format!("ridgeline-join-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    for (t, body) in [("a", "x,y\n1,10\n2,20\n3,30\n"), ("b", "y,z\n10,100\n20,200\n"), ("c", "z,w\n100,7\n")] {
        let p = dir.join(format!("{t}.csv"));
        std::fs::write(&p, body).unwrap();
        rl.register_csv(t, p.to_str().unwrap()).await.unwrap();
    }
    let sql = "SELECT x, w FROM a, b, c WHERE a.y = b.y AND b.z = c.z";
    let on = logical_plan(&rl, sql).await;
    set(&rl, false).await;
    let off = logical_plan(&rl, sql).await;
    assert_eq!(on, off);
    let rows = lines(&rl.sql(sql).await.unwrap().collect().await.unwrap(), false);
    assert_eq!(rows, vec!["| 1 | 7 |".to_string()]);
    std::fs::remove_dir_all(&dir).ok();
}

/// q17's lineitem scans take the hash joins' dynamic filters (the one under the
/// per-part average included), and the answer is the one without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_take_dynamic_filters() {
    let rl = engine();
    rl.sql("SET ridgeline.scan_dynamic_filters = true").await.unwrap().collect().await.unwrap();
    let sql = query_sql(17);
    let df = rl.sql(sql).await.unwrap();
    let plan = datafusion::physical_plan::displayable(df.create_physical_plan().await.unwrap().as_ref()).indent(true).to_string();
    let with_filters = plan.lines().filter(|l| l.contains("HostScanExec: table=lineitem") && l.contains("dynamic_filters=[")).count();
    assert!(with_filters >= 1, "no lineitem scan took a dynamic filter:\n{plan}");
    let on = lines(&rl.sql(sql).await.unwrap().collect().await.unwrap(), true);
    set_dynamic(&rl, false).await;
    let df = rl.sql(sql).await.unwrap();
    let plan_off = datafusion::physical_plan::displayable(df.create_physical_plan().await.unwrap().as_ref()).indent(true).to_string();
    assert!(!plan_off.contains("dynamic_filters=["), "{plan_off}");
    let off = lines(&rl.sql(sql).await.unwrap().collect().await.unwrap(), true);
    assert_eq!(on, off);
}

/// q17's per-part average, q2's cheapest supply cost and q20's per-part-and-supplier
/// sums are aggregated only for the parts the filtered part table passes (a semi
/// join below the aggregation), and not twice after the optimizer's later passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_subqueries_get_the_keys() {
    let rl = engine();
    for q in [17, 2, 20] {
        let plan = logical_plan(&rl, query_sql(q)).await;
        assert_eq!(plan.matches("SubqueryAlias: __ridgeline_sip_").count(), 1, "q{q}:\n{plan}");
        // The key relation's semi join has an aggregation among its ancestors.
        let lines: Vec<&str> = plan.lines().collect();
        let depth = |l: &str| l.len() - l.trim_start().len();
        let sip = lines.iter().position(|l| l.contains("SubqueryAlias: __ridgeline_sip_")).unwrap();
        let mut d = depth(lines[sip]);
        let mut below_agg = false;
        for l in lines[..sip].iter().rev() {
            if depth(l) < d {
                d = depth(l);
                below_agg |= l.trim_start().starts_with("Aggregate:");
            }
        }
        assert!(below_agg, "q{q}: the semi join is not below the aggregation:\n{plan}");
    }
    set(&rl, false).await;
    let plan = logical_plan(&rl, query_sql(17)).await;
    assert!(!plan.contains("__ridgeline_sip_"), "{plan}");
}

/// By default the scans leave dynamic filters to the joins that make them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_leave_dynamic_filters_by_default() {
    let rl = engine();
    let df = rl.sql(query_sql(17)).await.unwrap();
    let plan = datafusion::physical_plan::displayable(df.create_physical_plan().await.unwrap().as_ref()).indent(true).to_string();
    assert!(plan.contains("HostScanExec: table=lineitem") && !plan.contains("dynamic_filters=["), "{plan}");
}

/// The subtree under the plan line `at` (its indented block).
fn subtree(plan: &str, at: usize) -> String {
    let lines: Vec<&str> = plan.lines().collect();
    let depth = |l: &str| l.len() - l.trim_start().len();
    let d = depth(lines[at]);
    let end = (at + 1..lines.len()).find(|&i| depth(lines[i]) <= d).unwrap_or(lines.len());
    lines[at..end].join("\n")
}

/// q18's IN subquery (the orders whose lineitems sum above 300) becomes a semi join
/// on orders itself, below the joins with customer and lineitem; q21's EXISTS on all
/// of lineitem, which drops nothing, stays above the joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semi_joins_go_onto_the_leaf_they_cut() {
    let rl = engine();
    let plan = logical_plan(&rl, query_sql(18)).await;
    let at = plan.lines().position(|l| l.contains("LeftSemi Join")).unwrap_or_else(|| panic!("no semi join:\n{plan}"));
    let under = subtree(&plan, at);
    assert!(!under.contains("Inner Join") && under.contains("TableScan: orders") && !under.contains("TableScan: customer"), "q18's semi join is not on orders:\n{plan}");
    assert!(plan.lines().take(at).any(|l| l.contains("Inner Join")), "no join above q18's semi join:\n{plan}");
    let plan = logical_plan(&rl, query_sql(21)).await;
    let at = plan.lines().position(|l| l.contains("LeftSemi Join")).unwrap_or_else(|| panic!("no semi join:\n{plan}"));
    assert!(subtree(&plan, at).contains("Inner Join"), "q21's semi join went below the joins:\n{plan}");
    set(&rl, false).await;
    let plan = logical_plan(&rl, query_sql(18)).await;
    let at = plan.lines().position(|l| l.contains("LeftSemi Join")).unwrap();
    assert!(subtree(&plan, at).contains("Inner Join"), "{plan}");
}

/// The rows DataFusion's statistics give the filter on `p_brand` in `sql`, and
/// its input's rows.
async fn part_filter_rows(rl: &Ridgeline, sql: &str) -> (usize, usize) {
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::ExecutionPlan;
    use std::sync::Arc;
    let plan = rl.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    fn find(p: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if let Some(f) = p.downcast_ref::<FilterExec>() {
            if f.predicate().to_string().contains("p_brand") {
                return Some(p.clone());
            }
        }
        p.children().into_iter().find_map(find)
    }
    let f = find(&plan).expect("a filter on p_brand");
    let out = *ridgeline::exec::plan_statistics(f.as_ref()).unwrap().num_rows.get_value().expect("rows estimated");
    let input = *ridgeline::exec::plan_statistics(f.children()[0].as_ref()).unwrap().num_rows.get_value().expect("rows known");
    (out, input)
}

/// Filters DataFusion cannot analyse (string equalities) get estimates from the
/// column statistics instead of a fixed 20%: one of 25 brands is 4%, q17's brand
/// and container (1 / 25 x 1 / 40) 1% at least; `ridgeline.filter_estimates =
/// false` restores DataFusion's 20%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_get_estimates_from_statistics() {
    let rl = engine();
    let brand = "SELECT p_partkey FROM part WHERE p_brand = 'Brand#23'";
    let (out, input) = part_filter_rows(&rl, brand).await;
    assert!(input > 0 && out * 25 >= input - 25 && out * 25 <= input + 25, "{out} of {input} rows");
    let (out, input) = part_filter_rows(&rl, query_sql(17)).await;
    assert!(out * 100 <= input + 100, "{out} of {input} rows");
    rl.sql("SET ridgeline.filter_estimates = false").await.unwrap().collect().await.unwrap();
    for sql in [brand, query_sql(17)] {
        let (out, input) = part_filter_rows(&rl, sql).await;
        assert_eq!(out, input / 5, "DataFusion's 20%");
    }
}

/// Joins inside an uncorrelated scalar subquery are reordered too: q11's total over
/// partsupp, supplier and the one nation joins nation and supplier first, as its
/// outer query does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scalar_subqueries_are_reordered() {
    let rl = engine();
    let plan = logical_plan(&rl, query_sql(11)).await;
    let at = plan.lines().position(|l| l.trim_start().starts_with("Subquery:")).unwrap_or_else(|| panic!("no subquery:\n{plan}"));
    let sub = subtree(&plan, at);
    let lines: Vec<&str> = sub.lines().collect();
    let deepest = lines.iter().rposition(|l| l.contains("Inner Join")).unwrap_or_else(|| panic!("no join in the subquery:\n{plan}"));
    let inner = subtree(&sub, deepest);
    assert!(inner.contains("TableScan: nation") && !inner.contains("TableScan: partsupp"), "q11's subquery joins partsupp first:\n{plan}");
    set(&rl, false).await;
    let plan = logical_plan(&rl, query_sql(11)).await;
    let at = plan.lines().position(|l| l.trim_start().starts_with("Subquery:")).unwrap();
    let sub = subtree(&plan, at);
    let lines: Vec<&str> = sub.lines().collect();
    let deepest = lines.iter().rposition(|l| l.contains("Inner Join")).unwrap();
    assert!(subtree(&sub, deepest).contains("TableScan: partsupp"), "{plan}");
}
