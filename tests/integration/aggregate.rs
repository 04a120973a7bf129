//! GPU GROUP BY aggregation (`GpuAggregateExec`) against CPU mode: every key kind
//! (dictionary strings, integer ranges, NULL keys, one key, all NULL, groups of
//! one row, several keys), every aggregate (COUNT, SUM, AVG, MIN, MAX over
//! integers, decimals, wide decimal expressions and timestamps), WHERE and
//! HAVING, empty input, integer overflow, a wide decimal that leaves 64 bits (the
//! CPU redoes it), and queries that stay on the CPU. The plan check makes sure
//! the GPU path is the one answering.
use crate::common;

use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

fn table(n: usize, seed: u64) -> RecordBatch {
    let mut s = seed | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let words = ["apple", "banana", "cherry", "", "kiwi"];
    let mut cols: Vec<Vec<u64>> = Vec::new();
    for _ in 0..n {
        cols.push((0..12).map(|_| rnd()).collect());
    }
    let opt = |x: u64, p: u64| (x % p != 0).then_some(x);
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("s_one", DataType::Utf8, false),
        Field::new("s_null", DataType::Utf8, true),
        Field::new("s_many", DataType::Utf8, false),
        Field::new("k8", DataType::Int8, true),
        Field::new("k32", DataType::Int32, false),
        Field::new("kuniq", DataType::Int32, false),
        Field::new("kbig", DataType::Int64, false),
        Field::new("v64", DataType::Int64, true),
        Field::new("vbig", DataType::Int64, false),
        Field::new("v32", DataType::Int32, true),
        Field::new("dec", DataType::Decimal128(15, 2), true),
        Field::new("decbig", DataType::Decimal128(18, 0), false),
        Field::new("f", DataType::Float64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("kwide", DataType::Int64, true),
    ]));
    let c = |j: usize| cols.iter().map(move |r| r[j]);
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..n as i64)),
        Arc::new(c(0).map(|x| opt(x, 9).map(|x| words[(x >> 8) as usize % words.len()])).collect::<StringArray>()),
        Arc::new(StringArray::from_iter_values((0..n).map(|_| "x"))),
        Arc::new((0..n).map(|_| None::<&str>).collect::<StringArray>()),
        Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("row{i}")))),
        Arc::new(c(1).map(|x| opt(x, 5).map(|x| ((x >> 8) % 7) as i8 - 3)).collect::<Int8Array>()),
        Arc::new(c(2).map(|x| 1000 + ((x >> 8) % 1000) as i32).collect::<Int32Array>()),
        Arc::new((0..n).map(|i| (i % 40_000) as i32).collect::<Int32Array>()),
        Arc::new(c(3).map(|x| x as i64).collect::<Int64Array>()),
        Arc::new(c(4).map(|x| opt(x, 6).map(|x| (x % 2_000_000_000_000) as i64 - 1_000_000_000_000)).collect::<Int64Array>()),
        Arc::new(c(5).map(|x| i64::MAX / 4 + (x % 1000) as i64).collect::<Int64Array>()),
        Arc::new(c(6).map(|x| opt(x, 4).map(|x| (x % 2001) as i32 - 1000)).collect::<Int32Array>()),
        Arc::new(
            c(7).map(|x| opt(x, 7).map(|x| (x % 2_000_000_000) as i128 - 1_000_000_000))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(15, 2)
                .unwrap(),
        ),
        Arc::new(c(8).map(|x| Some(900_000_000_000_000_000i128 + (x % 1000) as i128)).collect::<Decimal128Array>().with_precision_and_scale(18, 0).unwrap()),
        Arc::new(c(9).map(|x| opt(x, 8).map(|x| (x % 10_000) as f64 / 16.0)).collect::<Float64Array>()),
        Arc::new(c(10).map(|x| opt(x, 3).map(|x| (x % 1_000_000_000_000) as i64 - 500_000_000_000)).collect::<TimestampMicrosecondArray>()),
        // A key of 70,000 values (some NULL): more groups than the per-chunk tables take.
        Arc::new(c(11).map(|x| opt(x, 11).map(|x| 5_000_000 + (x % 70_000) as i64)).collect::<Int64Array>()),
    ];
    RecordBatch::try_new(schema, arrays).unwrap()
}

async fn engine(mode: GpuMode, b: &RecordBatch) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    let parts: Vec<RecordBatch> = (0..b.num_rows()).step_by(7000).map(|o| b.slice(o, 7000.min(b.num_rows() - o))).collect();
    rl.register_resident("agg", b.schema(), parts.clone()).await.unwrap();
    rl.register_resident("empty", b.schema(), vec![]).await.unwrap();
    rl
}

async fn run(rl: &Ridgeline, q: &str) -> Result<String, String> {
    let df = rl.sql(q).await.map_err(|e| e.to_string())?;
    let b = df.collect().await.map_err(|e| e.to_string())?;
    Ok(arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string())
}

async fn plan(rl: &Ridgeline, q: &str) -> String {
    let b = rl.sql(&format!("EXPLAIN {q}")).await.unwrap().collect().await.unwrap();
    arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string()
}

/// (query, whether the GPU aggregation answers it in mode on)
const QUERIES: &[(&str, bool)] = &[
    ("SELECT s, count(*), count(v64), sum(v64), min(v64), max(v64), avg(dec), sum(dec), min(dec), max(dec) FROM agg GROUP BY s ORDER BY s", true),
    ("SELECT k8, s, count(*), sum(v32), min(v32), max(v32) FROM agg WHERE v32 > 0 GROUP BY k8, s ORDER BY k8, s", true),
    ("SELECT k32, count(*), sum(v32), min(ts), max(ts), count(ts) FROM agg GROUP BY k32 ORDER BY k32", true),
    ("SELECT kuniq, count(*), sum(v64), avg(dec) FROM agg GROUP BY kuniq ORDER BY kuniq", true),
    ("SELECT count(*), sum(dec * dec), avg(dec), sum(dec * (1 - dec) * (1 + dec)) FROM agg", true),
    ("SELECT count(*), sum(v64), min(dec) FROM agg WHERE v64 > 999999999999", true),
    ("SELECT s, count(*), sum(v64) FROM agg WHERE v64 > 999999999999 GROUP BY s ORDER BY s", true),
    ("SELECT count(*), sum(v64) FROM empty", true),
    ("SELECT s, sum(v64) FROM empty GROUP BY s ORDER BY s", true),
    ("SELECT s_null, count(*), sum(v64), count(v64) FROM agg GROUP BY s_null ORDER BY s_null", true),
    ("SELECT s_one, k8, count(*), avg(dec) FROM agg GROUP BY s_one, k8 ORDER BY s_one, k8", true),
    ("SELECT k8, sum(vbig), count(*) FROM agg GROUP BY k8 ORDER BY k8", true),
    ("SELECT k8, sum(decbig * decbig) FROM agg GROUP BY k8 ORDER BY k8", true),
    ("SELECT s, sum(v64) AS t FROM agg GROUP BY s HAVING count(*) > 1000 ORDER BY s", true),
    ("SELECT k8, sum(v64 / v32) FROM agg WHERE v32 <> 0 GROUP BY k8 ORDER BY k8", true),
    ("SELECT s, k8, k32, count(*) FROM agg WHERE k32 < 1010 GROUP BY s, k8, k32 ORDER BY s, k8, k32", true),
    // Quantiles: every group a region, one selection each (decimals, integers,
    // timestamps, floats; WHERE; several quantiles over one column; mixed with sums).
    ("SELECT s, median(dec), count(*), sum(v64) FROM agg GROUP BY s ORDER BY s", true),
    (
        "SELECT k8, median(dec), percentile_disc(0.25) WITHIN GROUP (ORDER BY v64), percentile_disc(0.9) WITHIN GROUP (ORDER BY ts DESC), \
         percentile_disc(0.1) WITHIN GROUP (ORDER BY v64) FROM agg WHERE v32 > 0 GROUP BY k8 ORDER BY k8",
        true,
    ),
    ("SELECT median(dec), percentile_disc(0.5) WITHIN GROUP (ORDER BY v32), percentile_disc(1.0) WITHIN GROUP (ORDER BY dec) FROM agg", true),
    ("SELECT s_null, median(dec), percentile_disc(0) WITHIN GROUP (ORDER BY v64) FROM agg GROUP BY s_null ORDER BY s_null", true),
    ("SELECT k8, median(dec), median(decbig) FROM agg WHERE id < 0 GROUP BY k8 ORDER BY k8", true),
    ("SELECT s, median(dec) FROM empty GROUP BY s ORDER BY s", true),
    ("SELECT k8, s, median(dec) FROM agg WHERE id % 97 = 0 GROUP BY k8, s ORDER BY k8, s", true),
    ("SELECT s, median(f), percentile_disc(0.75) WITHIN GROUP (ORDER BY f) FROM agg GROUP BY s ORDER BY s", true),
    // A thousand groups (several partition passes, many small regions in one descent).
    ("SELECT k32, median(dec), percentile_disc(0.3) WITHIN GROUP (ORDER BY v64), count(*) FROM agg GROUP BY k32 ORDER BY k32", true),
    // These stay on the CPU: too many strings, too wide a range, float sums,
    // expression keys, quantiles over too many groups.
    ("SELECT kuniq, median(dec) FROM agg GROUP BY kuniq ORDER BY kuniq", false),
    ("SELECT s, percentile_disc([0.1, 0.5]) WITHIN GROUP (ORDER BY dec) FROM agg GROUP BY s ORDER BY s", true),
    // Through the cast to Float64: median of integers, percentile_cont, DuckDB's names, lists.
    (
        "SELECT k8, median(v32), median(v64), percentile_cont(0.3) WITHIN GROUP (ORDER BY dec DESC), quantile_cont(dec, 0.5), \
         quantile_disc(v32, [0.2, 0.9]), approx_quantile(v64, 0.5), quantile_cont(dec, [0.25, 0.5, 0.75]) FROM agg GROUP BY k8 ORDER BY k8",
        true,
    ),
    ("SELECT quantile_cont(dec, [0.25, 0.5, 0.75]), quantile_cont(f, 0.5), median(k8) FROM agg WHERE v64 > 0", true),
    ("SELECT s, quantile_cont(v32, [0.5]) FROM empty GROUP BY s ORDER BY s", true),
    ("SELECT s_many, count(*) FROM agg WHERE id < 10 GROUP BY s_many ORDER BY s_many", false),
    ("SELECT kbig % 3, count(*) FROM agg GROUP BY kbig % 3 ORDER BY 1", false),
    ("SELECT count(*) FROM (SELECT kbig FROM agg GROUP BY kbig)", false),
    ("SELECT s, sum(f), min(f) FROM agg GROUP BY s ORDER BY s", false),
    ("SELECT count(DISTINCT s) FROM agg", true), // DataFusion groups by s first
    // Group tables in device memory (more groups than the per-chunk tables take).
    ("SELECT kwide, count(*), sum(v64), count(v64), sum(dec), avg(dec), count(ts) FROM agg GROUP BY kwide ORDER BY kwide", true),
    ("SELECT kwide, sum(vbig), sum(v32) FROM agg WHERE v32 > 0 GROUP BY kwide HAVING sum(v64) > 0 ORDER BY kwide", true),
    ("SELECT count(*), sum(t) FROM (SELECT kwide, sum(dec) AS t FROM agg WHERE id % 3 = 0 GROUP BY kwide)", true),
    ("SELECT kwide, sum(v64) FROM agg WHERE id < 0 GROUP BY kwide ORDER BY kwide", true),
    ("SELECT kwide, count(*), sum(v64) FROM agg GROUP BY kwide HAVING count(*) >= 2 AND sum(v64) < 0 AND 5 > count(v64) ORDER BY kwide", true),
    // MIN and MAX over that many groups (64-bit atomics), with NULL values and NULL keys.
    ("SELECT kwide, min(v64), max(v64), min(ts), max(dec), count(*) FROM agg GROUP BY kwide ORDER BY kwide", true),
    ("SELECT kwide, max(v32), min(vbig) FROM agg WHERE v32 < 0 GROUP BY kwide HAVING count(*) > 1 ORDER BY kwide", true),
    // A key pair too sparse for a table stays on the CPU.
    ("SELECT k8, kwide, count(*) FROM agg GROUP BY k8, kwide ORDER BY k8, kwide", false),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_aggregate_matches_cpu_mode() {
    let b = table(50_000, 11);
    let cpu = engine(GpuMode::Off, &b).await;
    let gpu = engine(common::gpu_mode(), &b).await;
    // The group-table path records its chunks into one submission; a flush bound
    // of 1 byte submits after every chunk, 200 KB after a few. The quantile
    // queries take the region path, which records nothing: they run once.
    for flush in [0, 1, 200_000] {
        ridgeline::exec::gpu_aggregate::set_record_flush_bytes(flush);
        let quantiles = |q: &str| ["median", "percentile", "quantile"].iter().any(|f| q.contains(f));
        for (q, _) in QUERIES.iter().filter(|(q, _)| flush == 0 || !quantiles(q)) {
            let want = run(&cpu, q).await;
            let got = run(&gpu, q).await;
            assert_eq!(got, want, "{q} (flush bound {flush})");
        }
    }
    ridgeline::exec::gpu_aggregate::set_record_flush_bytes(0);
    // A row that raises an error in any chunk fails the query in both modes (the
    // chunks' error words come back in one readback).
    let q = "SELECT k8, sum(v32 / (v32 - v32)) FROM agg GROUP BY k8";
    let (c, g) = (run(&cpu, q).await, run(&gpu, q).await);
    assert!(c.as_ref().is_err_and(|e| e.contains("ivide by zero")), "{c:?}");
    assert!(g.as_ref().is_err_and(|e| e.contains("ivide by zero")), "{g:?}");
    // The answers are not trivially empty.
    assert!(run(&cpu, QUERIES[0].0).await.unwrap().contains("banana"));
    if common::gpu_mode() == GpuMode::On {
        // decbig * decbig leaves 64 bits: the GPU hands the query to the CPU.
        let before = ridgeline::exec::gpu_aggregate::fallbacks();
        let q = "SELECT k8, sum(decbig * decbig) FROM agg GROUP BY k8 ORDER BY k8";
        assert_eq!(run(&gpu, q).await, run(&cpu, q).await);
        assert_eq!(ridgeline::exec::gpu_aggregate::fallbacks(), before + 1);
        // dec * dec fits: no fallback.
        let q = "SELECT k8, sum(dec * dec) FROM agg GROUP BY k8 ORDER BY k8";
        assert_eq!(run(&gpu, q).await, run(&cpu, q).await);
        assert_eq!(ridgeline::exec::gpu_aggregate::fallbacks(), before + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_uses_gpu_aggregate_in_mode_on() {
    if common::gpu_mode() != GpuMode::On {
        eprintln!("skipped: RIDGELINE_GPU is not on");
        return;
    }
    let b = table(20_000, 3);
    let gpu = engine(GpuMode::On, &b).await;
    for (q, on_gpu) in QUERIES {
        let p = plan(&gpu, q).await;
        assert_eq!(p.contains("GpuAggregateExec"), *on_gpu, "{q}\n{p}");
    }
    // HAVING conditions on counts and sums of a group table run on the device too.
    let p = plan(&gpu, "SELECT kwide, sum(v64) FROM agg GROUP BY kwide HAVING sum(v64) > 0 AND count(*) >= 2").await;
    assert!(p.contains("2 HAVING conditions on the device"), "{p}");
    // EXPLAIN ANALYZE reports the device pass: groups read back, rows out.
    let groups = run(&gpu, "SELECT count(*) FROM (SELECT k8 FROM agg GROUP BY k8)").await.unwrap();
    let b = gpu.sql("EXPLAIN ANALYZE SELECT k8, count(*) FROM agg GROUP BY k8").await.unwrap().collect().await.unwrap();
    let a = arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string();
    let line = a.lines().find(|l| l.contains("GpuAggregateExec")).unwrap_or_else(|| panic!("{a}"));
    let n: String = groups.lines().nth(3).unwrap().chars().filter(|c| c.is_ascii_digit()).collect();
    assert!(line.contains(&format!("groups={n}")) && line.contains(&format!("output_rows={n}")), "{n} groups\n{line}");
    assert!(line.contains("device_time=") && line.contains("deal_time="), "{line}");
    // TPC-H Q1 and Q6 run whole on the GPU, with nothing but the aggregation's
    // result above it.
    let rl = common::engine(GpuMode::On).await;
    for q in [1, 6] {
        let sql = std::fs::read_to_string(format!("{}/sql/tpch/q{q}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let p = plan(&rl, &sql).await;
        assert!(p.contains("GpuAggregateExec"), "q{q}\n{p}");
        assert!(!p.contains("GpuFilterExec") && !p.contains("AggregateExec: mode"), "q{q}\n{p}");
    }
    // So does the grouped median over resident lineitem (quantile.slt checks its answers).
    let p = plan(&rl, "SELECT l_returnflag, median(l_extendedprice) FROM lineitem GROUP BY l_returnflag").await;
    assert!(p.contains("GpuAggregateExec") && p.contains("median(l_extendedprice") && !p.contains("mode=Partial"), "{p}");
}

/// A partitioned hash join on the group keys needs the aggregation's output hash
/// partitioned as DataFusion would (TPC-H Q15's shape).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_on_the_group_keys_stays_co_partitioned() {
    let b = table(30_000, 5);
    let q = "SELECT a.k32, a.t, b.n FROM (SELECT k32, sum(v64) AS t FROM agg GROUP BY k32) a \
             JOIN (SELECT k32, count(*) AS n FROM agg WHERE id % 7 = 0 GROUP BY k32) b ON a.k32 = b.k32 ORDER BY a.k32";
    let mut answers = Vec::new();
    for mode in [GpuMode::Off, common::gpu_mode()] {
        let rl = engine(mode, &b).await;
        for set in [
            "SET datafusion.execution.target_partitions = 4",
            "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
            "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
        ] {
            rl.sql(set).await.unwrap().collect().await.unwrap();
        }
        let p = plan(&rl, q).await;
        assert!(p.contains("mode=Partitioned"), "{p}");
        if mode == GpuMode::On {
            assert!(p.contains("GpuAggregateExec"), "{p}");
            // The GPU aggregations hash their groups into the join's partitions themselves.
            assert!(!p.contains("RepartitionExec"), "{p}");
        }
        answers.push(run(&rl, q).await.unwrap());
    }
    assert!(answers[0].lines().count() > 900, "{}", answers[0].lines().count());
    assert_eq!(answers[0], answers[1]);
}
