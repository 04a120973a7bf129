//! Where GPU filters land in plans, and what EXPLAIN says when they do not.
use crate::common;
use arrow::util::pretty::pretty_format_batches;
use ridgeline::{GpuMode, Ridgeline};

async fn explain(rl: &Ridgeline, sql: &str) -> String {
    let b = rl.sql(&format!("EXPLAIN {sql}")).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&b).unwrap().to_string()
}

async fn rows(rl: &Ridgeline, sql: &str) -> Vec<String> {
    let b = rl.sql(sql).await.unwrap().collect().await.unwrap();
    let s = pretty_format_batches(&b).unwrap().to_string();
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_on_the_gpu_and_notes_why_not() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let rl = common::engine(GpuMode::On).await;
    let cpu = common::engine(GpuMode::Off).await;

    // A predicate on a string column with too many distinct values for a
    // dictionary stays on the CPU, and EXPLAIN says why.
    let p = explain(&rl, "SELECT l_orderkey FROM lineitem WHERE l_comment LIKE '%fox%'").await;
    assert!(p.contains("CpuNote: FilterExec stays on the CPU") && p.contains("no dictionary"), "{p}");
    assert!(!p.contains("GpuFilterExec"), "{p}");

    // A conjunction splits: the numeric part on the GPU, the string part above it.
    let p = explain(&rl, "SELECT l_orderkey FROM lineitem WHERE l_comment LIKE '%fox%' AND l_quantity >= 10").await;
    assert!(p.contains("GpuFilterExec: l_quantity@") && p.contains("FilterExec: l_comment@"), "{p}");

    // Strings with a dictionary are tested by their codes on the GPU: nothing stays above.
    for q in [
        "SELECT id FROM types WHERE s <> 'a' AND i32 >= 0",
        "SELECT l_orderkey, l_shipmode FROM lineitem WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate",
        "SELECT p_partkey FROM part WHERE p_type LIKE 'PROMO%' OR p_size > 45",
    ] {
        let p = explain(&rl, q).await;
        assert!(p.contains("GpuFilterExec") && p.contains("strings by dictionary codes"), "{p}");
        assert!(!p.contains("CpuNote"), "{p}");
        assert_eq!(rows(&rl, q).await, rows(&cpu, q).await, "{q}");
    }

    // A GPU aggregation whose predicate and arguments test strings reads their codes.
    for q in [
        "SELECT l_returnflag, count(*) FROM lineitem WHERE l_shipmode IN ('AIR', 'MAIL') GROUP BY l_returnflag",
        "SELECT l_shipmode, sum(CASE WHEN l_shipinstruct = 'DELIVER IN PERSON' THEN 1 ELSE 0 END) FROM lineitem GROUP BY l_shipmode",
    ] {
        let p = explain(&rl, q).await;
        assert!(p.contains("GpuAggregateExec"), "{p}");
        assert!(!p.contains("AggregateExec: mode=Partial"), "{p}");
        assert_eq!(rows(&rl, q).await, rows(&cpu, q).await, "{q}");
    }

    // A projection above a GPU filter runs in its kernel.
    let p = explain(&rl, "SELECT id, i32 * 2 AS twice FROM types WHERE i32 > -10").await;
    assert!(p.contains("GpuFilterExec") && p.contains("* 2 as twice]"), "{p}");
    assert!(!p.contains("ProjectionExec"), "{p}");

    // Q6's filter on resident lineitem runs on the GPU and downloads only the surviving rows.
    let q6_rows = "SELECT l_extendedprice, l_discount FROM lineitem WHERE l_shipdate >= date '1994-01-01' \
              AND l_shipdate < date '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
    let p = explain(&rl, q6_rows).await;
    assert!(p.contains("GpuFilterExec") && p.contains("GpuScanExec"), "{p}");
    assert_eq!(rows(&rl, q6_rows).await, rows(&cpu, q6_rows).await);
    // The whole of Q6 (filter and aggregation) is one GPU aggregation.
    let q6 = "SELECT sum(l_extendedprice * l_discount) FROM lineitem WHERE l_shipdate >= date '1994-01-01' \
              AND l_shipdate < date '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
    let p = explain(&rl, q6).await;
    assert!(p.contains("GpuAggregateExec") && p.contains("predicate=l_shipdate"), "{p}");
    assert_eq!(rows(&rl, q6).await, rows(&cpu, q6).await);

    // Jumping Jack where the order is free: same rows as the stable compaction.
    let q = "SELECT l_orderkey, l_linenumber FROM lineitem WHERE l_quantity > 45";
    rl.sql("SET ridgeline.compaction = 'jumping_jack'").await.unwrap().collect().await.unwrap();
    assert!(explain(&rl, q).await.contains("compaction=jumping_jack"));
    let jj = rows(&rl, q).await;
    rl.sql("SET ridgeline.compaction = 'stable'").await.unwrap().collect().await.unwrap();
    assert!(explain(&rl, q).await.contains("compaction=stable"));
    assert_eq!(jj, rows(&rl, q).await);
    assert_eq!(jj, rows(&cpu, q).await);
    assert!(rl.sql("SET ridgeline.compaction = 'sideways'").await.is_err() || {
        let r = rl.sql(q).await.unwrap().collect().await;
        r.is_err()
    });

    // Auto compaction picks Jumping Jack for a filter keeping ~96% of the rows (the
    // order is free): the same rows as the CPU.
    rl.sql("SET ridgeline.compaction = 'auto'").await.unwrap().collect().await.unwrap();
    let q = "SELECT l_orderkey, l_linenumber, l_tax FROM lineitem WHERE l_quantity > 2";
    assert!(explain(&rl, q).await.contains("compaction=auto"));
    assert_eq!(rows(&rl, q).await, rows(&cpu, q).await);

    // In mode auto, a small host table stays on the CPU with the reason.
    let auto = Ridgeline::builder().gpu_mode(GpuMode::Auto).build().unwrap();
    let t = common::types_batch();
    auto.register_batches("t", t.schema(), vec![t]).unwrap();
    let p = explain(&auto, "SELECT id FROM t WHERE i32 > 0").await;
    assert!(p.contains("CpuNote") && (p.contains("min_gpu_rows") || p.contains("adapter is a CPU")), "{p}");
}
