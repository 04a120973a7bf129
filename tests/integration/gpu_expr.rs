//! The expression compiler's kernels against DataFusion's own evaluation of the
//! same physical expressions (the CPU reference), on random, adversarial and edge
//! inputs: sizes 0, 1, 2^k +- 1 and many segments (this binary shrinks the
//! segment size to 8192 rows, so 100k rows cross 13 segments, as a table above
//! the adapter's binding limit does).
use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ridgeline::gpu_batch::{download_column, GpuBatch};
use ridgeline::gpu_expr::{Caps, RowProgram};
use ridgeline_operators::context::ContextOptions;
use ridgeline_operators::GpuContext;
use std::sync::{Arc, OnceLock};

/// A context of its own with 64 KiB segments, so that kernels cross segment
/// boundaries at test sizes.
fn ctx() -> Option<Arc<GpuContext>> {
    static C: OnceLock<Option<Arc<GpuContext>>> = OnceLock::new();
    C.get_or_init(|| {
        let opts = ContextOptions { max_segment_bytes: Some(64 << 10), ..ContextOptions::from_env() };
        let c = ridgeline_operators::testing::test_context_with(&opts)?;
        assert!(c.segment_rows() <= 8192, "segment rows {}", c.segment_rows());
        Some(c)
    })
    .clone()
}

/// A batch of `n` rows with adversarial values and NULLs in every column kind.
fn batch(n: usize, seed: u64) -> RecordBatch {
    let mut rng = SmallRng::seed_from_u64(seed);
    let null = |p: f64| move |rng: &mut SmallRng| rng.random_bool(p);
    let isnull = null(0.1);
    let i32s: Int32Array = (0..n)
        .map(|_| {
            if isnull(&mut rng) {
                return None;
            }
            Some(match rng.random_range(0..6) {
                0 => i32::MIN,
                1 => i32::MAX,
                2 => 0,
                3 => -1,
                _ => rng.random_range(-1000..1000),
            })
        })
        .collect();
    let i64s: Int64Array = (0..n)
        .map(|_| {
            if isnull(&mut rng) {
                return None;
            }
            Some(match rng.random_range(0..6) {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => 0,
                _ => rng.random_range(-1_000_000..1_000_000),
            })
        })
        .collect();
    let i8s: Int8Array = (0..n).map(|_| (!isnull(&mut rng)).then(|| rng.random::<i8>())).collect();
    let u16s: UInt16Array = (0..n).map(|_| (!isnull(&mut rng)).then(|| rng.random::<u16>())).collect();
    let f64s: Float64Array = (0..n)
        .map(|_| {
            if isnull(&mut rng) {
                return None;
            }
            Some(match rng.random_range(0..8) {
                0 => f64::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => f64::INFINITY,
                4 => f64::NEG_INFINITY,
                _ => rng.random_range(-100.0..100.0),
            })
        })
        .collect();
    let f32s: Float32Array = (0..n)
        .map(|_| {
            (!isnull(&mut rng)).then(|| {
                [f32::NAN, -0.0, 0.0, 1.5, -2.5, f32::INFINITY, 1e-40, -3e-45, f32::MIN_POSITIVE, rng.random::<f32>() * 1e30][rng.random_range(0..10)]
            })
        })
        .collect();
    let dec: Decimal128Array = (0..n)
        .map(|_| (!isnull(&mut rng)).then(|| rng.random_range(-10_000_000i128..10_000_000)))
        .collect::<Decimal128Array>()
        .with_precision_and_scale(15, 2)
        .unwrap();
    let dates: Date32Array = (0..n).map(|_| (!isnull(&mut rng)).then(|| rng.random_range(-800_000..100_000))).collect();
    let bools: BooleanArray = (0..n).map(|_| (!isnull(&mut rng)).then(|| rng.random_bool(0.5))).collect();
    let all_null: Int32Array = (0..n).map(|_| None).collect();
    let all_eq: Int32Array = (0..n).map(|_| Some(7)).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("a", Arc::new(i32s)),
        ("b", Arc::new(i64s)),
        ("c", Arc::new(i8s)),
        ("u", Arc::new(u16s)),
        ("x", Arc::new(f64s)),
        ("y", Arc::new(f32s)),
        ("d", Arc::new(dec)),
        ("dt", Arc::new(dates)),
        ("flag", Arc::new(bools)),
        ("nul", Arc::new(all_null)),
        ("eq", Arc::new(all_eq)),
    ];
    let fields: Vec<Field> = cols.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols.into_iter().map(|(_, a)| a).collect()).unwrap()
}

/// The physical predicate (`filter`) or output expression DataFusion plans for
/// `sql` over `batch` (simplified, coerced, as real plans see them), and `batch`
/// restricted to the operator's input columns.
fn planned(batch: &RecordBatch, sql: &str, filter: bool) -> (Arc<dyn PhysicalExpr>, RecordBatch) {
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    use datafusion::physical_plan::ExecutionPlan;
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let sc = SessionContext::new();
    sc.register_batch("t", batch.clone()).unwrap();
    let q = if filter { format!("SELECT * FROM t WHERE {sql}") } else { format!("SELECT {sql} FROM t") };
    let plan = rt.block_on(async { sc.sql(&q).await?.create_physical_plan().await }).unwrap_or_else(|e| panic!("{sql}: {e}"));
    fn find(p: &Arc<dyn ExecutionPlan>, filter: bool) -> Option<(Arc<dyn PhysicalExpr>, Arc<dyn ExecutionPlan>)> {
        if filter {
            if let Some(f) = p.downcast_ref::<FilterExec>() {
                return Some((f.predicate().clone(), f.input().clone()));
            }
        } else if let Some(pr) = p.downcast_ref::<ProjectionExec>() {
            return Some((pr.expr()[0].expr.clone(), pr.input().clone()));
        }
        p.children().into_iter().find_map(|c| find(c, filter))
    }
    let (e, input) = find(&plan, filter).unwrap_or_else(|| panic!("{sql}: no operator in {plan:?}"));
    let s = input.schema();
    let idx: Vec<usize> = s.fields().iter().map(|f| batch.schema().index_of(f.name()).unwrap()).collect();
    (e, batch.project(&idx).unwrap())
}

fn physical(batch: &RecordBatch, sql: &str) -> Arc<dyn PhysicalExpr> {
    let sc = SessionContext::new();
    let df_schema = DFSchema::try_from(batch.schema().as_ref().clone()).unwrap();
    let e = sc.parse_sql_expr(sql, &df_schema).unwrap_or_else(|e| panic!("{sql}: {e}"));
    sc.create_physical_expr(e, &df_schema).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Filters `batch` by `pred` on the GPU and checks the selection against
/// DataFusion's evaluation (an error where DataFusion errors).
fn check_filter(dev: &GpuContext, batch: &RecordBatch, pred: &str) {
    let (e, batch) = planned(batch, pred, true);
    let batch = &batch;
    let prog = match RowProgram::try_new(batch.schema(), Some(e.clone()), vec![], Caps::of(dev)) {
        Ok(p) => p,
        Err(why) => panic!("{pred} ({e}) does not compile: {why}"),
    };
    let cpu = e.evaluate(batch).and_then(|v| v.into_array(batch.num_rows()));
    let g = GpuBatch::upload(dev, batch).unwrap();
    let eval = prog.evaluate(dev, &g).unwrap();
    let gpu_err = eval.check_errors(dev);
    match (cpu, gpu_err) {
        (Err(c), Err(g)) => {
            eprintln!("{pred}: both error ({c} / {g})");
        }
        (Ok(c), Ok(())) => {
            let c = c.as_boolean();
            let bits: Vec<u32> = eval.selection.as_ref().unwrap().download(dev).unwrap();
            for i in 0..batch.num_rows() {
                let want = c.is_valid(i) && c.value(i);
                let got = bits[i / 32] >> (i % 32) & 1 == 1;
                assert_eq!(got, want, "{pred}: row {i} of {} ({:?})", batch.num_rows(), batch.slice(i, 1));
            }
        }
        (Ok(_), Err(g)) => panic!("{pred}: GPU raised {g}, DataFusion did not"),
        (Err(c), Ok(())) => {
            // DataFusion evaluates whole batches; the GPU skips the right side of AND/OR
            // where the left decides, and CASE branches: fewer errors are allowed there.
            assert!(pred.contains("AND") || pred.contains("OR") || pred.contains("CASE"), "{pred}: DataFusion raised {c}, the GPU did not");
        }
    }
}

/// Evaluates `expr` as an output on the GPU (no filter) and compares with DataFusion.
fn check_output(dev: &GpuContext, batch: &RecordBatch, expr: &str) {
    let (e, batch) = planned(batch, expr, false);
    let batch = &batch;
    let prog = RowProgram::try_new(batch.schema(), None, vec![e.clone()], Caps::of(dev))
        .unwrap_or_else(|why| panic!("{expr} does not compile: {why}"));
    let cpu = e.evaluate(batch).and_then(|v| v.into_array(batch.num_rows()));
    let g = GpuBatch::upload(dev, batch).unwrap();
    let eval = prog.evaluate(dev, &g).unwrap();
    let gpu_err = eval.check_errors(dev);
    match (cpu, gpu_err) {
        (Ok(c), Ok(())) => {
            let got = download_column(dev, &eval.outputs[0]).unwrap();
            assert_eq!(got.data_type(), c.data_type(), "{expr}");
            for i in 0..batch.num_rows() {
                assert_eq!(got.is_valid(i), c.is_valid(i), "{expr}: validity of row {i}");
                if c.is_valid(i) {
                    assert_eq!(got.slice(i, 1).to_data(), c.slice(i, 1).to_data(), "{expr}: row {i} ({:?})", batch.slice(i, 1));
                }
            }
        }
        (Err(_), Err(_)) => {}
        (Ok(_), Err(g)) => panic!("{expr}: GPU raised {g}, DataFusion did not"),
        (Err(c), Ok(())) => assert!(expr.contains("CASE"), "{expr}: DataFusion raised {c}, the GPU did not"),
    }
}

const PREDICATES: &[&str] = &[
    "a < 0",
    "a >= b",
    "b <> 0",
    "c = -128",
    "u > 60000",
    "x > 0",
    "x = 0.0",
    "x < 'NaN'::double",
    "x = 'NaN'::double",
    "y <= -0.0",
    "y > 1",
    "d > 100.00",
    "d BETWEEN -5.00 AND 5.00",
    "dt >= DATE '1990-01-01'",
    "dt + INTERVAL '1' MONTH < DATE '1970-03-31'",
    "dt - INTERVAL '25 months 3 days' > DATE '1900-02-28'",
    "dt - DATE '2000-01-01' > 100",
    "flag",
    "NOT flag",
    "flag IS NULL",
    "a + 1 > 0",
    "a * a > 0",
    "c + c < 0",
    "c * c < 0",
    "u * u > 100",
    "b - 1 < b",
    "a / 7 = 1",
    "a % 5 = -2",
    "a / 2 > 100",
    "-a > 0",
    "-x < 0",
    "a > 0 AND b < 0",
    "a > 0 OR b < 0",
    "NOT (a > 0 OR flag)",
    "(a > 0 AND flag) IS NULL",
    "a IS DISTINCT FROM b",
    "a IS NOT DISTINCT FROM nul",
    "a IN (0, -1, 5, 2147483647)",
    "a NOT IN (0, -1)",
    "a NOT IN (0, NULL)",
    "x IN (0.0, 'NaN'::double)",
    "nul IS NULL",
    "nul > 0",
    "eq = 7",
    "eq <> 7",
    "CASE WHEN a > 0 THEN b ELSE -b END > 0",
    "CASE c WHEN 0 THEN true WHEN 1 THEN false ELSE a > 0 END",
    "CASE WHEN a <> 0 THEN 100 / a ELSE 0 END > 1",
    "CAST(c AS BIGINT) + b > 0",
    "TRY_CAST(b AS INT) IS NULL",
    "CAST(a AS DECIMAL(14, 2)) > d",
    "TRY_CAST(b AS DECIMAL(10, 2)) > d",
    "d + d > 0.00",
];

const ERRORING: &[&str] = &["a / (a - a) > 0", "b % (b - b) > 0", "a / CAST(-1 AS INT) > 0", "CAST(b AS INT) * 2 > 0"];

const OUTPUTS: &[&str] = &[
    "a + 1",
    "c * c",
    "b * 2",
    "d + d",
    "d * CAST(2 AS DECIMAL(2, 0))",
    "a > b",
    "CASE WHEN a > 0 THEN a END",
    "dt + INTERVAL '1' MONTH",
    "dt - DATE '1970-01-01'",
    "TRY_CAST(b AS INT)",
    "-x",
    "CAST(y AS DOUBLE)",
    "flag OR a > 0",
    "nul + 1",
];

#[test]
fn predicates_match_datafusion() {
    let Some(dev) = ctx() else { return };
    for (n, seed) in [(0usize, 1u64), (1, 2), (31, 3), (32, 4), (33, 5), (255, 6), (257, 7), (4095, 8), (8193, 9), (100_000, 10)] {
        let b = batch(n, seed);
        for p in PREDICATES {
            check_filter(&dev, &b, p);
        }
    }
}

#[test]
fn errors_match_datafusion() {
    let Some(dev) = ctx() else { return };
    let b = batch(5000, 11);
    for p in ERRORING {
        check_filter(&dev, &b, p);
        // These really fail on this data.
        let (e, pb) = planned(&b, p, true);
        assert!(e.evaluate(&pb).is_err(), "{p} should fail on the CPU");
    }
}

#[test]
fn outputs_match_datafusion() {
    let Some(dev) = ctx() else { return };
    for (n, seed) in [(1usize, 21u64), (33, 22), (9000, 23)] {
        let b = batch(n, seed);
        for e in OUTPUTS {
            check_output(&dev, &b, e);
        }
    }
}

#[test]
fn unsupported_forms_say_why() {
    let Some(dev) = ctx() else { return };
    let b = batch(4, 30);
    for (sql, why) in [("x + 1.0 > 0", "float arithmetic"), ("d * d * d > 0", "precision above 18")] {
        let e = physical(&b, sql);
        let err = RowProgram::try_new(b.schema(), Some(e), vec![], Caps::of(&dev)).unwrap_err();
        assert!(err.contains(why), "{sql}: {err}");
    }
    let s = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
    let sb = RecordBatch::try_new(s.clone(), vec![Arc::new(StringArray::from(vec!["a"]))]).unwrap();
    let e = physical(&sb, "s = 'a'");
    assert!(RowProgram::try_new(s, Some(e), vec![], Caps::of(&dev)).unwrap_err().contains("Utf8"));
}

#[test]
fn checked_arithmetic_stays_on_the_cpu() {
    let Some(dev) = ctx() else { return };
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
    let b = batch(4, 40);
    let plus = BinaryExpr::new(Arc::new(Column::new("a", 0)), Operator::Plus, Arc::new(Literal::new(datafusion::scalar::ScalarValue::Int32(Some(1)))));
    let wrapping: Arc<dyn PhysicalExpr> = Arc::new(plus.clone());
    let checked: Arc<dyn PhysicalExpr> = Arc::new(plus.with_fail_on_overflow(true));
    assert!(RowProgram::try_new(b.schema(), None, vec![wrapping], Caps::of(&dev)).is_ok());
    let err = RowProgram::try_new(b.schema(), None, vec![checked], Caps::of(&dev)).unwrap_err();
    assert!(err.contains("overflow checks"), "{err}");
}
