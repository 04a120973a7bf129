//! The GPU hash join (`GpuHashJoinExec`): the plan uses it in GPU mode for every
//! join it takes, EXPLAIN ANALYZE shows its build and probe rows, and TPC-H
//! q1..q22 at SF 0.01 over host (memory) tables give CPU mode's answers, with
//! every probe on the device. (The `.slt` files run the same joins over resident
//! tables in both modes: tests/slt/joins.slt and tpch.slt.)
use crate::common;
use arrow::array::RecordBatch;
use ridgeline::{GpuMode, Ridgeline};

fn plan_text(batches: &[RecordBatch]) -> String {
    arrow::util::pretty::pretty_format_batches(batches).unwrap().to_string()
}

async fn memory_engine(mode: GpuMode) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    for (name, batches) in common::tpch() {
        rl.register_batches(name, batches[0].schema(), batches.clone()).unwrap();
    }
    rl
}

/// Rows as sorted text lines (TPC-H answers are compared order aside where the
/// query leaves it free; the ORDER BY queries sort the same either way).
async fn answer(rl: &Ridgeline, sql: &str) -> Vec<String> {
    let b = rl.sql(sql).await.unwrap().collect().await.unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn tpch_query(i: usize) -> String {
    std::fs::read_to_string(format!("{}/sql/tpch/q{i}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_mode_plans_gpu_joins() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = memory_engine(GpuMode::On).await;
    let cpu = memory_engine(GpuMode::Off).await;
    let q = "EXPLAIN SELECT count(*) FROM orders o JOIN customer c ON o.o_custkey = c.c_custkey LEFT JOIN nation n ON c.c_nationkey = n.n_nationkey";
    let g = plan_text(&gpu.sql(q).await.unwrap().collect().await.unwrap());
    assert!(g.matches("GpuHashJoinExec").count() >= 2, "{g}");
    assert!(!g.contains(" HashJoinExec"), "{g}");
    let c = plan_text(&cpu.sql(q).await.unwrap().collect().await.unwrap());
    assert!(c.contains("HashJoinExec") && !c.contains("GpuHashJoinExec"), "{c}");
    // several key columns: one packed key
    let two = plan_text(&gpu.sql("EXPLAIN SELECT count(*) FROM lineitem l JOIN partsupp ps ON l.l_partkey = ps.ps_partkey AND l.l_suppkey = ps.ps_suppkey").await.unwrap().collect().await.unwrap());
    assert!(two.contains("GpuHashJoinExec"), "{two}");
    // a join the GPU does not take stays DataFusion's: string keys
    let s = plan_text(&gpu.sql("EXPLAIN SELECT count(*) FROM nation a JOIN nation b ON a.n_name = b.n_name").await.unwrap().collect().await.unwrap());
    assert!(s.contains("HashJoinExec") && !s.contains("GpuHashJoinExec"), "{s}");
    // the setting turns it off
    gpu.sql("SET ridgeline.gpu_joins = false").await.unwrap().collect().await.unwrap();
    let off = plan_text(&gpu.sql(q).await.unwrap().collect().await.unwrap());
    assert!(!off.contains("GpuHashJoinExec"), "{off}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_build_and_probe_rows() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = memory_engine(GpuMode::On).await;
    let b = gpu.sql("EXPLAIN ANALYZE SELECT count(*) FROM orders o JOIN customer c ON o.o_custkey = c.c_custkey").await.unwrap().collect().await.unwrap();
    let t = plan_text(&b);
    let line = t.lines().find(|l| l.contains("GpuHashJoinExec:")).unwrap_or_else(|| panic!("{t}"));
    assert!(line.contains("build_rows=") && line.contains("probe_rows=") && line.contains("gpu_probes="), "{line}");
    assert!(!line.contains("gpu_probes=0"), "every probe ran on the device: {line}");
    assert!(line.contains("cpu_probes=0") || !line.contains("cpu_probes="), "no probe fell back: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_over_memory_tables_equals_cpu_mode() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = memory_engine(GpuMode::On).await;
    let cpu = memory_engine(GpuMode::Off).await;
    let mut with_joins = 0;
    for i in 1..=22 {
        let q = tpch_query(i);
        let plan = gpu.sql(&q).await.unwrap().create_physical_plan().await.unwrap();
        if ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuHashJoinExec") {
            with_joins += 1;
        }
        assert_eq!(answer(&gpu, &q).await, answer(&cpu, &q).await, "TPC-H q{i}");
    }
    assert!(with_joins >= 15, "only {with_joins} queries planned a GPU join");
}

/// A many-to-many join's output comes in batches of at most
/// `gpu_hash_join::OUTPUT_ROWS` rows, with every pair in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_to_many_output_is_batched() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    gpu.sql("CREATE TABLE big AS SELECT value % 10 AS k, value AS v FROM generate_series(1, 20000)").await.unwrap().collect().await.unwrap();
    let q = "SELECT a.v, b.v FROM big a JOIN big b ON a.k = b.k";
    let plan = gpu.sql(q).await.unwrap().create_physical_plan().await.unwrap();
    assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuHashJoinExec"));
    let batches = gpu.sql(q).await.unwrap().collect().await.unwrap();
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(total, 10 * 2000 * 2000);
    let widest = batches.iter().map(|b| b.num_rows()).max().unwrap();
    assert!(widest <= ridgeline::exec::gpu_hash_join::OUTPUT_ROWS, "a batch of {widest} rows");
}
