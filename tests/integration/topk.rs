//! GPU top-k (`ORDER BY .. LIMIT k`): the plan uses GpuTopKExec in GPU mode, and
//! answers equal CPU mode's on random data with many ties, NULLs and special
//! floats, for every direction, NULL placement, k and offset.
use crate::common;

use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema};
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

fn batch(n: usize, seed: u64) -> RecordBatch {
    let mut s = seed | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let specials = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -f64::NAN];
    let (mut a, mut f, mut id) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let x = rnd();
        id.push(i as i64);
        a.push((x % 7 != 0).then_some((x % 50) as i32 - 25)); // many ties, some NULLs
        f.push(match x % 11 {
            0 => None,
            1 => Some(specials[(x >> 8) as usize % specials.len()]),
            _ => Some(((x >> 20) % 1000) as f64 / 8.0),
        });
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("a", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
    ]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(id)), Arc::new(Int32Array::from(a)), Arc::new(Float64Array::from(f))]).unwrap()
}

async fn engine(mode: GpuMode, b: &RecordBatch) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    // Several batches, so the input has several partitions.
    let parts: Vec<RecordBatch> = (0..b.num_rows()).step_by(1000).map(|o| b.slice(o, 1000.min(b.num_rows() - o))).collect();
    rl.register_batches("t", b.schema(), parts).unwrap();
    rl
}

async fn run(rl: &Ridgeline, q: &str) -> String {
    let b = rl.sql(q).await.unwrap().collect().await.unwrap();
    arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_topk_matches_cpu_mode() {
    let b = batch(20_000, 7);
    let cpu = engine(GpuMode::Off, &b).await;
    let gpu = engine(common::gpu_mode(), &b).await;
    let mut n = 0;
    for key in ["a", "f", "a + 1", "CAST(f AS FLOAT)"] {
        for dir in ["ASC", "DESC"] {
            for nulls in ["NULLS FIRST", "NULLS LAST"] {
                for (k, off) in [(0, 0), (1, 0), (10, 0), (100, 5), (2_000, 0), (19_999, 0), (20_000, 0), (30_000, 3)] {
                    // Only the key is compared where ties may pick different rows;
                    // with id as a second key the whole row is.
                    let q1 = format!("SELECT {key} AS k FROM t ORDER BY {key} {dir} {nulls} LIMIT {k} OFFSET {off}");
                    let q2 = format!("SELECT id, {key} AS k FROM t ORDER BY {key} {dir} {nulls}, id DESC LIMIT {k} OFFSET {off}");
                    for q in [q1, q2] {
                        assert_eq!(run(&gpu, &q).await, run(&cpu, &q).await, "{q}");
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 4 * 2 * 2 * 8 * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_uses_gpu_topk_in_mode_on() {
    if common::gpu_mode() != GpuMode::On {
        eprintln!("skipped: RIDGELINE_GPU is not on");
        return;
    }
    let b = batch(5_000, 3);
    let gpu = engine(GpuMode::On, &b).await;
    let plan = run(&gpu, "EXPLAIN SELECT id FROM t ORDER BY f DESC LIMIT 10").await;
    assert!(plan.contains("GpuTopKExec: SampleSelect threshold, fetch=10"), "{plan}");
    let plan = run(&gpu, "EXPLAIN ANALYZE SELECT id FROM t ORDER BY a LIMIT 10").await;
    assert!(plan.contains("GpuTopKExec") && plan.contains("gpu_rows=5.00 K"), "{plan}");
    // A string key has no order-preserving key: DataFusion's sort stays.
    let plan = run(&gpu, "EXPLAIN SELECT id FROM t ORDER BY CAST(a AS VARCHAR) LIMIT 10").await;
    assert!(!plan.contains("GpuTopKExec"), "{plan}");
    let cpu = engine(GpuMode::Off, &b).await;
    let plan = run(&cpu, "EXPLAIN SELECT id FROM t ORDER BY f DESC LIMIT 10").await;
    assert!(!plan.contains("GpuTopKExec"), "{plan}");
}

/// A resident table whose first sort key is an 8-byte column without NULLs: the
/// device path (keys, threshold and candidates on the GPU, rows from the host
/// copy). Ties are many, so the candidates include every tied row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resident_topk_matches_cpu_mode() {
    let n = 30_000usize;
    let mut s = 99u64;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mut id, mut d, mut v, mut ts, mut nv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let x = rnd();
        id.push(i as i64);
        d.push((x % 2000) as i128 - 1000);
        v.push(if x % 5 == 0 { i64::MIN + (x % 3) as i64 } else { (x >> 8) as i64 % 40 });
        ts.push((x >> 16) as i64 % 1_000_000);
        nv.push((x % 9 != 0).then_some((x % 100) as i64));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("d", DataType::Decimal128(15, 2), false),
        Field::new("v", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None), false),
        Field::new("nv", DataType::Int64, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(id)),
            Arc::new(Decimal128Array::from(d).with_precision_and_scale(15, 2).unwrap()),
            Arc::new(Int64Array::from(v)),
            Arc::new(TimestampMicrosecondArray::from(ts)),
            Arc::new(Int64Array::from(nv)),
        ],
    )
    .unwrap();
    let parts: Vec<RecordBatch> = (0..n).step_by(7000).map(|o| b.slice(o, 7000.min(n - o))).collect();
    let mut engines = Vec::new();
    for mode in [GpuMode::Off, common::gpu_mode()] {
        let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
        rl.register_resident("r", schema.clone(), parts.clone()).await.unwrap();
        engines.push(rl);
    }
    let (cpu, gpu) = (&engines[0], &engines[1]);
    for key in ["d", "v", "ts", "nv"] {
        for dir in ["ASC", "DESC"] {
            for (k, off) in [(0, 0), (1, 0), (10, 0), (100, 7), (3_000, 0), (29_999, 0), (40_000, 0)] {
                let q1 = format!("SELECT {key} FROM r ORDER BY {key} {dir} LIMIT {k} OFFSET {off}");
                let q2 = format!("SELECT id, {key} AS k, d AS dd FROM r ORDER BY {key} {dir}, id DESC LIMIT {k} OFFSET {off}");
                for q in [q1, q2] {
                    assert_eq!(run(gpu, &q).await, run(cpu, &q).await, "{q}");
                }
            }
        }
    }
    if common::gpu_mode() == GpuMode::On {
        let plan = run(gpu, "EXPLAIN ANALYZE SELECT id, d FROM r ORDER BY d DESC, id LIMIT 10").await;
        assert!(plan.contains("on the resident key") && plan.contains("gpu_rows=30.00 K"), "{plan}");
        // NULLs in the key: the host path.
        let plan = run(gpu, "EXPLAIN SELECT id FROM r ORDER BY nv LIMIT 10").await;
        assert!(plan.contains("GpuTopKExec") && !plan.contains("on the resident key"), "{plan}");
    }
}
