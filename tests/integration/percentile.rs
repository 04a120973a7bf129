//! `median` and `percentile_cont` through SampleSelect give DataFusion's own answers:
//! the same queries on a Ridgeline engine (CPU and GPU mode) and on a stock
//! DataFusion session, over adversarial data, compared exactly.
use crate::common;

use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::FunctionRegistry;
use datafusion::prelude::SessionContext;
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

/// Columns: g (group, 0..groups), f (f64), r (f32), d (decimal 12,2), i (i64), t (date).
fn table(n: usize, groups: i64, shape: &str, seed: u64) -> RecordBatch {
    let mut s = seed | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut f = Vec::with_capacity(n);
    for k in 0..n {
        let x = rnd();
        let v: Option<f64> = match shape {
            "uniform" => Some((x % 1_000_000) as f64 / 1000.0),
            "normal" => Some({
                let u: f64 = (0..6).map(|_| (rnd() % 10_000) as f64 / 10_000.0).sum();
                (u - 3.0) * 100.0
            }),
            "few1" => Some(7.25),
            "few16" => Some((x % 16) as f64),
            "few1024" => Some((x % 1024) as f64 - 512.0),
            "sorted" => Some(k as f64 * 0.5),
            "reverse" => Some((n - k) as f64 * 0.5),
            "nulls" => None,
            "special" => Some([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300, 5e-324, 3.5][(x % 8) as usize]),
            "sparse_nulls" => (x % 3 != 0).then_some((x % 1000) as f64),
            other => panic!("{other}"),
        };
        f.push(v);
    }
    let g: Vec<i64> = (0..n).map(|k| (k as i64 * 7 + (rnd() % 3) as i64) % groups.max(1)).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("f", DataType::Float64, true),
        Field::new("r", DataType::Float32, true),
        Field::new("d", DataType::Decimal128(12, 2), true),
        Field::new("i", DataType::Int64, true),
        Field::new("t", DataType::Date32, true),
    ]));
    let clamp = |v: f64| v.clamp(-9e8, 9e8);
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(g)),
            Arc::new(Float64Array::from(f.clone())),
            Arc::new(f.iter().map(|v| v.map(|v| v as f32)).collect::<Float32Array>()),
            Arc::new(
                f.iter()
                    .map(|v| v.filter(|x| x.is_finite()).map(|x| (clamp(x) * 100.0).round() as i128))
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
            Arc::new(
                f.iter()
                    .enumerate()
                    .map(|(k, v)| v.filter(|x| x.is_finite()).map(|x| if k % 97 == 5 { i64::MAX - (k as i64) } else { clamp(x) as i64 }))
                    .collect::<Int64Array>(),
            ),
            Arc::new(f.iter().map(|v| v.filter(|x| x.is_finite()).map(|x| (clamp(x) as i64 % 20000) as i32)).collect::<Date32Array>()),
        ],
    )
    .unwrap()
}

const QUERIES: &[&str] = &[
    "SELECT median(f), median(r), median(d), median(i) FROM t",
    "SELECT g, median(f), median(r), median(d), median(i) FROM t GROUP BY g ORDER BY g",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY f), percentile_cont(0.0) WITHIN GROUP (ORDER BY f), \
     percentile_cont(1.0) WITHIN GROUP (ORDER BY r), percentile_cont(0.37) WITHIN GROUP (ORDER BY i), \
     percentile_cont(0.9) WITHIN GROUP (ORDER BY d DESC), percentile_cont(f, 0.123456789) FROM t",
    "SELECT g, percentile_cont(0.25) WITHIN GROUP (ORDER BY f), percentile_cont(0.999) WITHIN GROUP (ORDER BY r DESC), \
     percentile_cont(0.5) WITHIN GROUP (ORDER BY i) FROM t GROUP BY g ORDER BY g",
    "SELECT g, median(DISTINCT f), median(f) FILTER (WHERE i > 0) FROM t GROUP BY g ORDER BY g",
    "SELECT median(f) FROM t WHERE f > 1e308",
];

async fn answers(run: impl AsyncFn(&str) -> Vec<RecordBatch>) -> Vec<String> {
    let mut out = Vec::new();
    for q in QUERIES {
        let b = run(q).await;
        out.push(format!("{q}\n{}", arrow::util::pretty::pretty_format_batches(&b).unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn median_and_percentile_cont_match_datafusion() {
    for (shape, n, groups) in [
        ("uniform", 20_000, 5),
        ("normal", 3_001, 3),
        ("few1", 1_000, 4),
        ("few16", 5_000, 1),
        ("few1024", 4_096, 700),
        ("sorted", 2_000, 2),
        ("reverse", 2_001, 2),
        ("nulls", 100, 3),
        ("special", 999, 4),
        ("sparse_nulls", 1_500, 1_500),
        ("uniform", 1, 1),
        ("uniform", 2, 1),
        ("uniform", 0, 1),
    ] {
        let batch = table(n, groups, shape, 42 + n as u64);
        let stock = SessionContext::new();
        stock.register_batch("t", batch.clone()).unwrap();
        let expected = answers(async |q: &str| stock.sql(q).await.unwrap().collect().await.unwrap()).await;
        for mode in [GpuMode::Off, common::gpu_mode()] {
            let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
            rl.register_batches("t", batch.schema(), vec![batch.clone()]).unwrap();
            let got = answers(async |q: &str| rl.sql(q).await.unwrap().collect().await.unwrap()).await;
            for (e, g) in expected.iter().zip(&got) {
                assert_eq!(g, e, "{shape} n={n} groups={groups} mode {mode}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_uses_ridgelines_median() {
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    let b = table(10, 2, "uniform", 1);
    rl.register_batches("t", b.schema(), vec![b]).unwrap();
    let udaf = rl.session().udaf("median").unwrap();
    assert!(format!("{:?}", udaf.inner()).contains("Percentile"), "{:?}", udaf.inner());
    let udaf = rl.session().udaf("percentile_cont").unwrap();
    assert!(format!("{:?}", udaf.inner()).contains("Percentile"), "{:?}", udaf.inner());
    assert!(rl.session().udaf("percentile_disc").is_ok());
}
