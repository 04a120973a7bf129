//! GPU islands over host inputs (`GpuIslandExec`): with `--gpu on`, a GROUP BY
//! over Parquet, CSV and memory tables uploads its inputs when it runs and runs
//! `GpuAggregateExec` there, with CPU mode's answers; mode auto and
//! `ridgeline.gpu_islands = false` leave the plan alone; empty inputs and
//! hash-partitioned parents keep their answers.
use crate::common;
use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

fn text(batches: &[RecordBatch]) -> String {
    arrow::util::pretty::pretty_format_batches(batches).unwrap().to_string()
}

async fn rows(rl: &Ridgeline, sql: &str) -> Vec<String> {
    let b = rl.sql(sql).await.unwrap().collect().await.unwrap();
    let mut lines: Vec<String> = text(&b).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

async fn analyze(rl: &Ridgeline, sql: &str) -> String {
    text(&rl.sql(&format!("EXPLAIN ANALYZE {sql}")).await.unwrap().collect().await.unwrap())
}

/// 10,000 rows: k in 0..37, g in 0..5 (as text too), v = i, some NULL values.
fn batch() -> RecordBatch {
    let n = 10_000;
    let k: ArrayRef = Arc::new(Int32Array::from_iter_values((0..n).map(|i| (i * 7919) % 37)));
    let g: ArrayRef = Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("g{}", i % 5))));
    let v: ArrayRef = Arc::new(Int64Array::from_iter((0..n).map(|i| (i % 11 != 0).then_some(i as i64))));
    RecordBatch::try_from_iter([("k", k), ("g", g), ("v", v)]).unwrap()
}

/// The same data as a Parquet and a CSV file, and an engine in `mode` over them.
async fn files_engine(dir: &std::path::Path, mode: GpuMode) -> Ridgeline {
    let b = batch();
    let pq = dir.join("t.parquet");
    if !pq.exists() {
        let f = std::fs::File::create(&pq).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(f, b.schema(), None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        let f = std::fs::File::create(dir.join("t.csv")).unwrap();
        let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(f);
        w.write(&b).unwrap();
    }
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    rl.register_parquet("tp", pq.to_str().unwrap()).await.unwrap();
    rl.register_csv("tc", dir.join("t.csv").to_str().unwrap()).await.unwrap();
    rl.register_batches("tm", b.schema(), vec![b]).unwrap();
    rl
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_by_over_parquet_csv_and_memory_runs_on_the_gpu() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gpu = files_engine(dir.path(), GpuMode::On).await;
    let cpu = files_engine(dir.path(), GpuMode::Off).await;
    for t in ["tp", "tc", "tm"] {
        for q in [
            format!("SELECT k, count(*) c, sum(v) s, min(v) lo, max(v) hi, count(v) n FROM {t} GROUP BY k"),
            format!("SELECT g, k, sum(v) s FROM {t} WHERE v > 100 GROUP BY g, k"),
            format!("SELECT count(*), sum(v) FROM {t} WHERE g = 'g3'"),
        ] {
            let plan = text(&gpu.sql(&format!("EXPLAIN {q}")).await.unwrap().collect().await.unwrap());
            assert!(plan.contains("GpuIslandExec"), "{q}:\n{plan}");
            let a = analyze(&gpu, &q).await;
            assert!(a.contains("ran: ") && a.contains("GpuAggregateExec"), "{q}:\n{a}");
            assert_eq!(rows(&gpu, &q).await, rows(&cpu, &q).await, "{q}");
        }
    }
    // A filter that keeps nothing, and a file with no rows.
    let none = "SELECT k, count(*) FROM tp WHERE v < 0 GROUP BY k";
    assert_eq!(rows(&gpu, none).await, rows(&cpu, none).await);
    let scalar = "SELECT count(*), sum(v) FROM tc WHERE v < 0";
    assert_eq!(rows(&gpu, scalar).await, rows(&cpu, scalar).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_and_the_setting_leave_host_aggregations_alone() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let q = "EXPLAIN SELECT k, sum(v) FROM tp GROUP BY k";
    let auto = files_engine(dir.path(), GpuMode::Auto).await;
    let p = text(&auto.sql(q).await.unwrap().collect().await.unwrap());
    assert!(!p.contains("GpuIslandExec"), "{p}");
    let on = files_engine(dir.path(), GpuMode::On).await;
    on.sql("SET ridgeline.gpu_islands = false").await.unwrap().collect().await.unwrap();
    let p = text(&on.sql(q).await.unwrap().collect().await.unwrap());
    assert!(!p.contains("GpuIslandExec"), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn islands_under_joins_and_tpch_over_host_tables_match_cpu_mode() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    for rl in [&gpu, &cpu] {
        for (name, batches) in common::tpch() {
            rl.register_batches(name, batches[0].schema(), batches.clone()).unwrap();
        }
        // Several partitions, so aggregations hand hash-partitioned output to joins.
        rl.sql("SET datafusion.execution.target_partitions = 4").await.unwrap().collect().await.unwrap();
    }
    // Two aggregated sides joined on their group keys (the joins' inputs are
    // islands with hash-partitioned output).
    let q = "SELECT a.k, a.s, b.c FROM (SELECT l_orderkey k, sum(l_quantity) s FROM lineitem GROUP BY l_orderkey) a \
             JOIN (SELECT o_orderkey k, count(*) c FROM orders GROUP BY o_orderkey) b ON a.k = b.k WHERE a.s > 100";
    let a = analyze(&gpu, q).await;
    assert!(a.contains("GpuIslandExec"), "{a}");
    assert_eq!(rows(&gpu, q).await, rows(&cpu, q).await);
    for i in [1, 3, 5, 10, 12, 13, 18] {
        let sql = std::fs::read_to_string(format!("{}/sql/tpch/q{i}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(rows(&gpu, &sql).await, rows(&cpu, &sql).await, "q{i}");
    }
}
