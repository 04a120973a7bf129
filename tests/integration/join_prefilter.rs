//! The GPU semi-join prefilter (`JoinKeysExec` on a hash join's build side,
//! `GpuSemiFilterExec` on its GPU-resident probe side): where the rule puts it,
//! that it really drops probe rows, and that answers equal CPU mode for every
//! join type, NULL keys, empty build sides, key ranges too wide for a set, and
//! 32-bit, 64-bit and date keys.
use crate::common;
use arrow::array::{ArrayRef, Date32Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;
use ridgeline::exec::{GpuSemiFilterExec, JoinKeysExec};
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

async fn rows(rl: &Ridgeline, sql: &str) -> Vec<String> {
    let b = rl.sql(sql).await.unwrap().collect().await.unwrap();
    let s = pretty_format_batches(&b).unwrap().to_string();
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

async fn plan(rl: &Ridgeline, sql: &str) -> Arc<dyn ExecutionPlan> {
    rl.sql(sql).await.unwrap().create_physical_plan().await.unwrap()
}

/// Every semi filter hangs below a hash join whose build side collects its keys,
/// and only joins that drop unmatched probe rows get one. Returns how many joins
/// got the prefilter.
fn check_placement(p: &Arc<dyn ExecutionPlan>) -> usize {
    let mut n = 0;
    // a GPU join keeps the hash join it replaced (children, keys, mode)
    let hj = p.downcast_ref::<HashJoinExec>().or_else(|| p.downcast_ref::<ridgeline::exec::GpuHashJoinExec>().map(|g| g.hash_join().as_ref()));
    if let Some(j) = hj {
        let collect_left = j.left().downcast_ref::<JoinKeysExec>().is_some();
        let partitioned = j.left().downcast_ref::<RepartitionExec>().is_some_and(|r| r.input().downcast_ref::<JoinKeysExec>().is_some());
        if collect_left || partitioned {
            use datafusion::common::JoinType::*;
            let mode = if collect_left { PartitionMode::CollectLeft } else { PartitionMode::Partitioned };
            assert_eq!(*j.partition_mode(), mode);
            assert!(matches!(j.join_type(), Inner | Left | LeftSemi | LeftAnti | LeftMark | RightSemi), "prefilter under a {:?} join", j.join_type());
            n += 1;
        }
    }
    for c in p.children() {
        n += check_placement(c);
    }
    n
}

/// Metric `name` of an EXPLAIN ANALYZE line (`12`, `1.50 K`, `2.00 M`).
fn metric(line: &str, name: &str) -> f64 {
    let at = line.find(&format!("{name}=")).unwrap_or_else(|| panic!("{name} in {line}")) + name.len() + 1;
    let v: String = line[at..].chars().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | ' ' | 'K' | 'M')).collect();
    let v = v.trim();
    let (num, mul) = if let Some(x) = v.strip_suffix('K') { (x, 1e3) } else if let Some(x) = v.strip_suffix('M') { (x, 1e6) } else { (v, 1.0) };
    num.trim().parse::<f64>().unwrap() * mul
}

/// Rows into and out of the semi filters that ran, over an EXPLAIN ANALYZE text.
fn filtered_rows(text: &str) -> (f64, f64) {
    let mut io = (0.0, 0.0);
    for line in text.lines().filter(|l| l.contains("GpuSemiFilterExec")) {
        if metric(line, "prefiltered_partitions") >= 1.0 {
            io.0 += metric(line, "input_rows");
            io.1 += metric(line, "output_rows");
        }
    }
    io
}

fn has_semi(p: &Arc<dyn ExecutionPlan>) -> bool {
    p.downcast_ref::<GpuSemiFilterExec>().is_some() || p.children().iter().any(|c| has_semi(c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_prefilters_drop_probe_rows() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let rl = common::engine(GpuMode::On).await;
    let cpu = common::engine(GpuMode::Off).await;
    let mut with = 0;
    for q in 1..=22 {
        let sql = std::fs::read_to_string(format!("{}/sql/tpch/q{q}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let p = plan(&rl, &sql).await;
        if check_placement(&p) > 0 {
            with += 1;
        }
        assert!(!has_semi(&plan(&cpu, &sql).await), "q{q}: no prefilter in CPU mode");
    }
    assert!(with >= 5, "only {with} TPC-H queries got a prefilter");

    // The filters run (mode on) and drop most of the probe rows on the device
    // (Q8: lineitem against one part type's keys; Q9: against green parts'; Q21:
    // against one nation's suppliers).
    let (mut inp, mut out) = (0.0, 0.0);
    for q in [8, 9, 21] {
        let sql = std::fs::read_to_string(format!("{}/sql/tpch/q{q}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let b = rl.sql(&format!("EXPLAIN ANALYZE {sql}")).await.unwrap().collect().await.unwrap();
        let (i, o) = filtered_rows(&pretty_format_batches(&b).unwrap().to_string());
        inp += i;
        out += o;
        assert_eq!(rows(&rl, &sql).await, rows(&cpu, &sql).await, "q{q}");
    }
    assert!(inp > 50_000.0 && out < inp / 4.0, "probe rows {inp} -> {out}");
}

/// `fact` (probe side: 20k rows, keys 0..5000 with NULLs, 32- and 64-bit and
/// date keys) and `dim` (build side: 300 rows, keys 0..3000 by 10, some outside
/// fact's range), plus `wide` (keys 2^40 apart: no dense set).
fn tables() -> Vec<(&'static str, RecordBatch)> {
    let n = 20_000;
    let key = |i: usize| if i % 97 == 5 { None } else { Some(((i * 7919) % 5000) as i64) };
    let fact = RecordBatch::try_from_iter([
        ("fk", Arc::new((0..n).map(key).collect::<Int64Array>()) as ArrayRef),
        ("fk32", Arc::new((0..n).map(|i| key(i).map(|k| k as i32)).collect::<Int32Array>()) as ArrayRef),
        ("fd", Arc::new((0..n).map(|i| key(i).map(|k| 18_000 + k as i32)).collect::<Date32Array>()) as ArrayRef),
        ("v", Arc::new((0..n as i64).collect::<Int64Array>()) as ArrayRef),
    ])
    .unwrap();
    let m = 300;
    let dim = RecordBatch::try_from_iter([
        ("dk", Arc::new((0..m).map(|i| Some(i as i64 * 10 + if i > 280 { 5000 } else { 0 })).collect::<Int64Array>()) as ArrayRef),
        ("dk32", Arc::new((0..m).map(|i| if i == 7 { None } else { Some(i as i32 * 10) }).collect::<Int32Array>()) as ArrayRef),
        ("dd", Arc::new((0..m).map(|i| Some(18_000 + i as i32 * 10)).collect::<Date32Array>()) as ArrayRef),
        ("name", Arc::new((0..m).map(|i| Some(if i % 3 == 0 { "a" } else { "b" })).collect::<StringArray>()) as ArrayRef),
    ])
    .unwrap();
    let wide = RecordBatch::try_from_iter([
        ("wk", Arc::new(Int64Array::from(vec![0i64, 1 << 40, 1234, 4999])) as ArrayRef),
    ])
    .unwrap();
    vec![("fact", fact), ("dim", dim), ("wide", wide)]
}

async fn engine(mode: GpuMode) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    for (name, b) in tables() {
        rl.register_resident(name, b.schema(), vec![b]).await.unwrap();
    }
    rl
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_types_nulls_and_key_kinds_match_cpu_mode() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let gpu = engine(GpuMode::On).await;
    let cpu = engine(GpuMode::Off).await;
    let queries = [
        // inner joins on 64-bit, 32-bit (NULLs on both sides) and date keys
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk = dk WHERE name = 'a'",
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk32 = dk32",
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fd = dd",
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk = dk AND fk32 = dk32",
        // outer joins: build rows keep their unmatched side, probe rows never
        "SELECT dk, count(v) FROM dim LEFT JOIN fact ON fk = dk GROUP BY dk",
        "SELECT count(*), count(dk), sum(v) FROM fact LEFT JOIN dim ON fk = dk",
        "SELECT count(*), count(fk), count(dk) FROM dim RIGHT JOIN fact ON fk = dk",
        "SELECT count(*), count(fk), count(dk) FROM dim FULL JOIN fact ON fk = dk",
        // semi and anti joins both ways
        "SELECT count(*), sum(v) FROM fact WHERE fk IN (SELECT dk FROM dim WHERE name = 'b')",
        "SELECT count(*), sum(v) FROM fact WHERE fk NOT IN (SELECT dk FROM dim)",
        "SELECT count(*), sum(v) FROM fact WHERE NOT EXISTS (SELECT 1 FROM dim WHERE dk = fk)",
        "SELECT count(*) FROM dim WHERE EXISTS (SELECT 1 FROM fact WHERE fk = dk)",
        "SELECT count(*) FROM dim WHERE NOT EXISTS (SELECT 1 FROM fact WHERE fk = dk)",
        // an empty build side; a build side whose keys span more than a set
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk = dk WHERE name = 'zzz'",
        "SELECT count(*), sum(v) FROM fact JOIN wide ON fk = wk",
        // a probe side below a GPU filter and a projection
        "SELECT count(*), sum(w) FROM (SELECT fk, v * 2 AS w FROM fact WHERE v % 3 = 0) f JOIN dim ON f.fk = dk",
    ];
    let mut with = 0;
    for q in queries {
        assert_eq!(rows(&gpu, q).await, rows(&cpu, q).await, "{q}");
        if check_placement(&plan(&gpu, q).await) > 0 {
            with += 1;
        }
    }
    assert!(with >= 8, "only {with} of the queries got a prefilter");
    // The first query's filter ran: fact's rows were dropped on the device.
    let b = gpu.sql(&format!("EXPLAIN ANALYZE {}", queries[0])).await.unwrap().collect().await.unwrap();
    let text = pretty_format_batches(&b).unwrap().to_string();
    assert!(text.contains("JoinKeysExec"), "{text}");
    let (inp, out) = filtered_rows(&text);
    assert!(inp == 20_000.0 && out < 1000.0, "fact {inp} -> {out} rows: {text}");
    // Partitioned joins (collect-left thresholds at zero): the keys are collected
    // below the build side's repartition, and answers stay the same.
    for k in ["datafusion.optimizer.hash_join_single_partition_threshold", "datafusion.optimizer.hash_join_single_partition_threshold_rows"] {
        for rl in [&gpu, &cpu] {
            rl.sql(&format!("SET {k} = 0")).await.unwrap().collect().await.unwrap();
        }
    }
    let mut partitioned = 0;
    for q in queries {
        assert_eq!(rows(&gpu, q).await, rows(&cpu, q).await, "partitioned: {q}");
        let p = plan(&gpu, q).await;
        check_placement(&p);
        if format!("{}", datafusion::physical_plan::displayable(p.as_ref()).indent(true)).contains("mode=Partitioned") && has_semi(&p) {
            partitioned += 1;
        }
    }
    assert!(partitioned >= 1, "only {partitioned} partitioned joins got a prefilter: {}", datafusion::physical_plan::displayable(plan(&gpu, queries[0]).await.as_ref()).indent(true));
    // Turned off, nothing is placed.
    gpu.sql("SET ridgeline.gpu_join_prefilter = false").await.unwrap().collect().await.unwrap();
    assert!(!has_semi(&plan(&gpu, queries[0]).await));
}

/// The mask path (a resident scan under a CPU parent: every chunk's selection
/// computed on the device in one pass, the host copy filtered with it) over more
/// chunks than partitions, chunks of an odd length (3001 rows: masks sliced at
/// bit offsets), batches that cut chunks (1000 rows) and batches larger than a
/// chunk (4000 rows), with and without the
/// CPU's dynamic filters alongside: answers equal CPU mode, the scan's rows are
/// really dropped, and every partition is filtered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mask_path_over_many_chunks_and_cut_batches() {
    if ridgeline_operators::testing::test_context().is_none() {
        return;
    }
    let mut engines = Vec::new();
    for mode in [GpuMode::On, GpuMode::Off] {
        let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
        for s in ["SET ridgeline.chunk_rows = 3001", "SET datafusion.execution.batch_size = 1000"] {
            rl.sql(s).await.unwrap().collect().await.unwrap();
        }
        for (name, b) in tables() {
            rl.register_resident(name, b.schema(), vec![b]).await.unwrap();
        }
        engines.push(rl);
    }
    let (gpu, cpu) = (&engines[0], &engines[1]);
    let queries = [
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk = dk WHERE name = 'a'",
        "SELECT fk, count(*), min(v) FROM fact JOIN dim ON fk32 = dk32 GROUP BY fk",
        "SELECT count(*), sum(v) FROM fact WHERE fk IN (SELECT dk FROM dim WHERE name = 'b')",
        "SELECT count(*), count(dk), sum(v) FROM fact LEFT JOIN dim ON fk = dk",
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fd = dd WHERE dk < 100",
    ];
    // batches of 1000 rows cut the 3001-row chunks; batches of 4000 are larger
    // than any chunk
    for (dynamic, batch) in [("true", 1000), ("false", 4000)] {
        for rl in [gpu, cpu] {
            rl.sql(&format!("SET datafusion.execution.batch_size = {batch}")).await.unwrap().collect().await.unwrap();
            for k in ["datafusion.optimizer.enable_join_dynamic_filter_pushdown", "ridgeline.scan_dynamic_filters"] {
                rl.sql(&format!("SET {k} = {dynamic}")).await.unwrap().collect().await.unwrap();
            }
        }
        for q in queries {
            assert_eq!(rows(gpu, q).await, rows(cpu, q).await, "dynamic filters {dynamic}: {q}");
        }
        let b = gpu.sql(&format!("EXPLAIN ANALYZE {}", queries[0])).await.unwrap().collect().await.unwrap();
        let text = pretty_format_batches(&b).unwrap().to_string();
        assert!(text.contains("table=fact") && text.contains("chunks=7"), "{text}");
        let line = text.lines().find(|l| l.contains("GpuSemiFilterExec") && l.contains("fk@")).unwrap_or_else(|| panic!("{text}"));
        let parts = gpu.sql("SELECT 1").await.unwrap().task_ctx().session_config().target_partitions();
        assert_eq!(metric(line, "prefiltered_partitions"), parts.min(7) as f64, "{line}");
        let (inp, out) = (metric(line, "input_rows"), metric(line, "output_rows"));
        assert!(inp == 20_000.0 && out < 1000.0, "fact {inp} -> {out} rows: {line}");
    }
    // The mask path and the device path (compacted per partition, downloaded)
    // forced over the same scans; auto picked one of them above.
    for (setting, path) in [("true", "mask path"), ("false", "device path")] {
        gpu.sql(&format!("SET ridgeline.gpu_semi_filter_mask = {setting}")).await.unwrap().collect().await.unwrap();
        for q in queries {
            assert_eq!(rows(gpu, q).await, rows(cpu, q).await, "{path}: {q}");
        }
        let b = gpu.sql(&format!("EXPLAIN ANALYZE {}", queries[0])).await.unwrap().collect().await.unwrap();
        let text = pretty_format_batches(&b).unwrap().to_string();
        let line = text.lines().find(|l| l.contains("GpuSemiFilterExec") && l.contains("fk@")).unwrap_or_else(|| panic!("{text}"));
        let (inp, out) = (metric(line, "input_rows"), metric(line, "output_rows"));
        assert!(inp == 20_000.0 && out < 1000.0, "{path}: fact {inp} -> {out} rows: {line}");
    }
    // A setting that is none of auto, true and false is an error, not a guess:
    // the SET fails with the message and the session keeps its old value, so
    // the statements after it still run.
    let set = match gpu.sql("SET ridgeline.gpu_semi_filter_mask = 'sometimes'").await {
        Ok(df) => df.collect().await.err(),
        Err(e) => Some(e),
    };
    let err = set.expect("a bad gpu_semi_filter_mask value must fail").to_string();
    assert!(err.contains("gpu_semi_filter_mask must be auto, true or false, not 'sometimes'"), "{err}");
    assert_eq!(rows(gpu, queries[0]).await, rows(cpu, queries[0]).await, "the old value stays");
    gpu.sql("SET ridgeline.gpu_semi_filter_mask = auto").await.unwrap().collect().await.unwrap();
    assert_eq!(rows(gpu, queries[0]).await, rows(cpu, queries[0]).await);
}
