//! Bounded, seeded fuzzing (a fixed number of cases per run, so CI time stays
//! fixed; `RIDGELINE_FUZZ_CASES=N` runs more, `RIDGELINE_FUZZ_SEED=S` another
//! sequence):
//!
//! * SQL text to plan: random statements (SKYLINE OF, quantiles, joins, deep
//!   nesting) and byte-level mutations of the TPC-H query texts are planned;
//!   each gives a plan or an error, never a panic, and errors are one line.
//! * File readers: Parquet, CSV and Arrow IPC files with flipped bytes, cut
//!   tails and corrupt footers are registered and scanned; each gives an answer
//!   or an error, never a panic or an abort.
//! * CPU vs GPU: random filters, projections and aggregations over a random
//!   table (NULLs, extremes, duplicates) answer the same in CPU mode and in GPU
//!   mode, over a host table and a GPU-resident one.
use crate::common;
use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

fn cases(default: usize) -> usize {
    std::env::var("RIDGELINE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rng(salt: u64) -> SmallRng {
    let seed = std::env::var("RIDGELINE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20261201u64);
    SmallRng::seed_from_u64(seed ^ salt)
}

/// Plans (and, when `run`, executes) `sql`, panics turned into a test failure
/// that names the statement.
async fn outcome(rl: &Ridgeline, sql: &str, run: bool) -> Result<Vec<RecordBatch>, String> {
    let fut = async {
        let df = rl.sql(sql).await?;
        if run {
            df.collect().await
        } else {
            df.create_physical_plan().await.map(|_| Vec::new())
        }
    };
    match futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(fut)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => panic!("panic on {sql:?}: {}", ridgeline::panic_message(p.as_ref())),
    }
}

// ---------------------------------------------------------------- SQL text

const COLS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn pick<'a>(r: &mut SmallRng, xs: &[&'a str]) -> &'a str {
    xs[r.random_range(0..xs.len())]
}

fn scalar(r: &mut SmallRng, depth: u32) -> String {
    if depth == 0 || r.random_bool(0.35) {
        return match r.random_range(0..6) {
            0 => pick(r, &COLS).to_string(),
            1 => r.random_range(-5i64..100).to_string(),
            2 => format!("{:.2}", r.random_range(-10.0f64..10.0)),
            3 => "NULL".into(),
            4 => format!("'{}'", pick(r, &["x", "y", "", "it''s", "%"])),
            _ => "DATE '2020-01-31'".into(),
        };
    }
    let a = scalar(r, depth - 1);
    let b = scalar(r, depth - 1);
    match r.random_range(0..10) {
        0 => format!("({a} + {b})"),
        1 => format!("({a} * {b})"),
        2 => format!("({a} / {b})"),
        3 => format!("({a} % {b})"),
        4 => format!("CAST({a} AS {})", pick(r, &["BIGINT", "INT", "DOUBLE", "VARCHAR", "DATE", "DECIMAL(10,2)"])),
        5 => format!("CASE WHEN {} THEN {a} ELSE {b} END", predicate(r, depth - 1)),
        6 => format!("coalesce({a}, {b})"),
        7 => format!("abs({a})"),
        8 => format!("-{a}"),
        _ => format!("({a} - {b})"),
    }
}

fn predicate(r: &mut SmallRng, depth: u32) -> String {
    if depth == 0 || r.random_bool(0.3) {
        let a = scalar(r, depth.saturating_sub(1));
        let b = scalar(r, depth.saturating_sub(1));
        return match r.random_range(0..7) {
            0 => format!("{a} {} {b}", pick(r, &["=", "<>", "<", "<=", ">", ">="])),
            1 => format!("{a} IS {}NULL", pick(r, &["", "NOT "])),
            2 => format!("{a} BETWEEN {b} AND {}", scalar(r, 0)),
            3 => format!("{a} IN ({b}, {}, {})", scalar(r, 0), scalar(r, 0)),
            4 => format!("{a} LIKE '{}'", pick(r, &["%x%", "y_", "%", ""])),
            5 => pick(r, &["TRUE", "FALSE", "NULL"]).to_string(),
            _ => format!("{a} = {b}"),
        };
    }
    let a = predicate(r, depth - 1);
    let b = predicate(r, depth - 1);
    match r.random_range(0..3) {
        0 => format!("({a} AND {b})"),
        1 => format!("({a} OR {b})"),
        _ => format!("NOT ({a})"),
    }
}

fn statement(r: &mut SmallRng) -> String {
    let d = r.random_range(0..4);
    match r.random_range(0..9) {
        0 => format!("SELECT {}, {} FROM f WHERE {}", scalar(r, d), scalar(r, d), predicate(r, d)),
        1 => format!(
            "SELECT {} AS k, count(*), sum(a), min(c), max(d) FROM f WHERE {} GROUP BY 1 HAVING count(*) > {}",
            scalar(r, d),
            predicate(r, d),
            r.random_range(0..3)
        ),
        2 => {
            let dims: Vec<String> = (0..r.random_range(1..4))
                .map(|_| format!("{} {}", pick(r, &["a", "b", "c", "a + b", "-c", "d"]), pick(r, &["MIN", "MAX", "DIFF", "min", ""])))
                .collect();
            format!("SELECT * FROM f WHERE {} SKYLINE OF {}{}", predicate(r, d), pick(r, &["", "DISTINCT "]), dims.join(", "))
        }
        3 => format!(
            "SELECT {}({}, {}) FROM f",
            pick(r, &["median", "percentile_cont", "percentile_disc", "approx_quantile", "quantile"]),
            pick(r, &["a", "c", "b", "d", "e"]),
            pick(r, &["0.5", "1.5", "-1", "NULL", "'x'", "0.25"])
        ),
        4 => format!(
            "SELECT f.a, g.b FROM f JOIN f g ON f.{} = g.{} AND {} ORDER BY 1 LIMIT {}",
            pick(r, &COLS),
            pick(r, &COLS),
            predicate(r, d),
            r.random_range(0..5)
        ),
        5 => {
            let n = r.random_range(1..40);
            (0..n).map(|i| format!("SELECT {i} AS v")).collect::<Vec<_>>().join(" UNION ALL ")
        }
        6 => format!("SELECT * FROM f ORDER BY {} {} LIMIT {}", scalar(r, d), pick(r, &["ASC", "DESC", "NULLS FIRST"]), r.random_range(0..10)),
        7 => format!("SELECT * FROM f WHERE {}", (0..r.random_range(50..400)).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR ")),
        _ => format!("SELECT * FROM f {}", pick(r, &["SKYLINE OF", "SKYLINE OF a", "SKYLINE OF a SIDEWAYS", "SKYLINE", "WHERE", "GROUP BY"])),
    }
}

fn mutate_text(r: &mut SmallRng, s: &str) -> String {
    let mut b: Vec<u8> = s.as_bytes().to_vec();
    for _ in 0..r.random_range(1..4) {
        if b.is_empty() {
            break;
        }
        let i = r.random_range(0..b.len());
        match r.random_range(0..4) {
            0 => {
                b.remove(i);
            }
            1 => {
                let pool = b"(),;'\"-*/ \n0aZ";
                b.insert(i, pool[r.random_range(0..pool.len())])
            }
            2 => b.truncate(i),
            _ => {
                let j = r.random_range(0..b.len());
                b.swap(i, j);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn small_table() -> RecordBatch {
    let n = 64;
    let a: ArrayRef = Arc::new((0..n).map(|i| if i % 9 == 4 { None } else { Some((i * 37 % 23) as i64 - 5) }).collect::<Int64Array>());
    let b: ArrayRef = Arc::new((0..n).map(|i| Some((i % 7) as i32)).collect::<Int32Array>());
    let c: ArrayRef = Arc::new((0..n).map(|i| if i % 11 == 0 { None } else { Some(i as f64 * 0.5 - 3.0) }).collect::<Float64Array>());
    let d: ArrayRef = Arc::new((0..n).map(|i| if i % 13 == 0 { None } else { Some(["x", "y", "zz", ""][i % 4]) }).collect::<StringArray>());
    let e: ArrayRef = Arc::new((0..n).map(|i| Some(18000 + (i as i32 % 40))).collect::<Date32Array>());
    RecordBatch::try_from_iter([("a", a), ("b", b), ("c", c), ("d", d), ("e", e)]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_text_to_plan_never_panics() {
    let rl = Ridgeline::builder().gpu_mode(common::gpu_mode()).build().unwrap();
    let t = small_table();
    rl.register_batches("f", t.schema(), vec![t]).unwrap();
    let mut r = rng(1);
    let tpch: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/tpch"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let (mut ok, mut err) = (0, 0);
    for i in 0..cases(400) {
        let sql = if i % 3 == 2 {
            let k = r.random_range(0..tpch.len());
            mutate_text(&mut r, &tpch[k])
        } else {
            statement(&mut r)
        };
        // Execute the small-table statements too: evaluation must not panic either.
        match outcome(&rl, &sql, i % 3 != 2).await {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(!e.trim().is_empty(), "{sql}: empty error");
                err += 1
            }
        }
    }
    // The generator must reach both outcomes, or it tests nothing.
    assert!(ok > 20 && err > 20, "ok {ok}, errors {err}");
}

/// Deep expressions give an answer or a clear error, never a stack overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_expressions_answer_or_fail_cleanly() {
    // The stacks the CLI and the server give their threads (`WORKER_STACK_BYTES`):
    // DataFusion grows its stack where its rules recurse, and so do Ridgeline's,
    // but cloning and dropping a deep expression tree recurse without a check,
    // so a 5,000-term chain needs more than tokio's default 2 MiB. (DataFusion's
    // type coercion is quadratic in a chain's depth: 10,000 terms answer too, in
    // about 50 s in a debug build, which is why the test stops at 5,000.)
    let h = std::thread::Builder::new()
        .stack_size(ridgeline::WORKER_STACK_BYTES)
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(ridgeline::WORKER_STACK_BYTES)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let rl = Ridgeline::builder().gpu_mode(common::gpu_mode()).build().unwrap();
                let t = small_table();
                rl.register_batches("f", t.schema(), vec![t]).unwrap();
                let or_chain = |n: usize| format!("SELECT count(*) FROM f WHERE {}", (0..n).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR "));
                for n in [1000, 5000] {
                    let got = outcome(&rl, &or_chain(n), true).await.unwrap_or_else(|e| panic!("{n}-term OR: {e}"));
                    let want = outcome(&rl, "SELECT count(*) FROM f WHERE a >= 0", true).await.unwrap();
                    assert_eq!(got[0].column(0).as_ref(), want[0].column(0).as_ref(), "{n}-term OR");
                }
                let sum_chain = format!("SELECT {} FROM f LIMIT 1", (0..1000).map(|i| format!("{i}")).collect::<Vec<_>>().join(" + "));
                let r = outcome(&rl, &sum_chain, true).await;
                assert!(r.is_ok() || !r.as_ref().unwrap_err().is_empty());
                let union = (0..2000).map(|i| format!("SELECT {i} AS v")).collect::<Vec<_>>().join(" UNION ALL ");
                let u = outcome(&rl, &format!("SELECT count(*), sum(v) FROM ({union})"), true).await.unwrap();
                assert_eq!(u[0].column(0).as_primitive::<arrow::datatypes::Int64Type>().value(0), 2000);
                // Deep parentheses: a clear error (the parser's recursion limit) or an answer.
                let nested = format!("SELECT {}1{} FROM f", "(".repeat(5000), ")".repeat(5000));
                let r = outcome(&rl, &nested, true).await;
                if let Err(e) = r {
                    assert!(e.to_lowercase().contains("recursion") || e.contains("depth"), "{e}");
                }
            })
        })
        .unwrap();
    h.join().expect("no stack overflow, no panic");
}

// ---------------------------------------------------------------- files

fn write_parquet(b: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(20)).build();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, b.schema(), Some(props)).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
    out
}

fn write_csv(b: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(&mut out);
    w.write(b).unwrap();
    drop(w);
    out
}

fn write_arrow(b: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::FileWriter::try_new(&mut out, &b.schema()).unwrap();
    w.write(b).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

fn corrupt(r: &mut SmallRng, data: &[u8], kind: &str) -> Vec<u8> {
    let mut d = data.to_vec();
    let n = d.len();
    // The Arrow schema Parquet writers embed (base64 in the footer's key-value
    // metadata): other base64 characters keep the footer readable and feed the
    // IPC decoder a corrupt schema.
    let embedded = d.windows(12).position(|w| w == b"ARROW:schema");
    match r.random_range(0..6) {
        5 if kind == "parquet" && embedded.is_some() => {
            let at = embedded.unwrap() + 14;
            for _ in 0..r.random_range(1..6) {
                let i = at + r.random_range(0..40usize).min(n - at - 9);
                d[i] = b"AZaz09+/"[r.random_range(0..8)];
            }
        }
        // The footer length (Parquet) or the last bytes (others).
        0 if kind == "parquet" && n > 8 => {
            let v: u32 = match r.random_range(0..4) {
                0 => u32::MAX,
                1 => (n as u32).saturating_add(r.random_range(0..1000)),
                2 => 0,
                _ => r.random(),
            };
            d[n - 8..n - 4].copy_from_slice(&v.to_le_bytes());
        }
        1 => d.truncate(r.random_range(0..n.max(1))),
        2 => {
            // Flip bytes in the metadata region at the end.
            for _ in 0..r.random_range(1..8) {
                let i = n.saturating_sub(1 + r.random_range(0..n.min(400)));
                d[i] ^= 1 << r.random_range(0..8);
            }
        }
        _ => {
            for _ in 0..r.random_range(1..16) {
                let i = r.random_range(0..n);
                d[i] = r.random();
            }
        }
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_files_give_errors_not_panics() {
    let t = small_table();
    let dir = tempfile::tempdir().unwrap();
    let originals = [("parquet", write_parquet(&t)), ("csv", write_csv(&t)), ("arrow", write_arrow(&t))];
    let mut r = rng(2);
    let rl = Ridgeline::builder().gpu_mode(common::gpu_mode()).build().unwrap();
    let (mut errors, mut answers) = (0, 0);
    for i in 0..cases(90) {
        let (kind, data) = &originals[i % originals.len()];
        let bad = corrupt(&mut r, data, kind);
        let path = dir.path().join(format!("f{i}.{kind}"));
        std::fs::write(&path, &bad).unwrap();
        let name = format!("t{i}");
        let reg = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(rl.register_file(&name, path.to_str().unwrap()))).await;
        match reg {
            Err(p) => panic!("registering a corrupt {kind} file panicked: {}", ridgeline::panic_message(p.as_ref())),
            Ok(Err(_)) => {
                errors += 1;
                continue;
            }
            Ok(Ok(())) => {}
        }
        // Execution is guarded the way the CLI and the server run statements.
        let q = format!("SELECT count(*), sum(a), max(d) FROM {name}");
        let r = ridgeline::guard::catch(async {
            let df = rl.sql(&q).await?;
            let s = df.execute_stream().await?;
            let s = ridgeline::guard::catch_stream(s);
            datafusion::physical_plan::common::collect(s).await
        })
        .await;
        match r {
            Ok(_) => answers += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errors += 1
            }
        }
    }
    assert!(errors > 10, "the corruptions must be noticed: {errors} errors, {answers} answers");
}

// ---------------------------------------------------------------- CPU vs GPU

fn random_table(r: &mut SmallRng, rows: usize) -> RecordBatch {
    let null = |r: &mut SmallRng, p: f64| r.random_bool(p);
    let a: Int64Array = (0..rows)
        .map(|_| {
            if null(r, 0.1) {
                None
            } else {
                Some(match r.random_range(0..20) {
                    0 => i64::MAX,
                    1 => i64::MIN + 1,
                    _ => r.random_range(-1000..1000),
                })
            }
        })
        .collect();
    let b: Int32Array = (0..rows).map(|_| if null(r, 0.05) { None } else { Some(r.random_range(-50..50)) }).collect();
    let c: Float64Array = (0..rows).map(|_| if null(r, 0.1) { None } else { Some(r.random_range(-100i32..100) as f64 / 4.0) }).collect();
    let d: StringArray = (0..rows).map(|_| if null(r, 0.1) { None } else { Some(["alpha", "beta", "gamma", "", "delta"][r.random_range(0..5)]) }).collect();
    let e: Date32Array = (0..rows).map(|_| if null(r, 0.05) { None } else { Some(19000 + r.random_range(0..365)) }).collect();
    let k: Int64Array = (0..rows).map(|_| Some(r.random_range(0..8))).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int32, true),
        Field::new("c", DataType::Float64, true),
        Field::new("d", DataType::Utf8, true),
        Field::new("e", DataType::Date32, true),
        Field::new("k", DataType::Int64, true),
    ]));
    RecordBatch::try_new(schema, vec![Arc::new(a), Arc::new(b), Arc::new(c), Arc::new(d), Arc::new(e), Arc::new(k)]).unwrap()
}

/// Predicates whose answers do not depend on evaluation order or float rounding.
fn diff_predicate(r: &mut SmallRng, depth: u32) -> String {
    if depth == 0 || r.random_bool(0.4) {
        let int = |r: &mut SmallRng| r.random_range(-60i64..60).to_string();
        return match r.random_range(0..9) {
            0 => format!("a {} {}", pick(r, &["=", "<>", "<", ">=", ">"]), r.random_range(-1000..1000)),
            1 => format!("b {} {}", pick(r, &["=", "<", "<=", ">"]), int(r)),
            2 => format!("c {} {}", pick(r, &["<", ">", "=", "<="]), r.random_range(-100i32..100) as f64 / 4.0),
            3 => format!("{} IS {}NULL", pick(r, &["a", "b", "c", "d", "e"]), pick(r, &["", "NOT "])),
            4 => format!("b BETWEEN {} AND {}", int(r), int(r)),
            5 => format!("d {} '{}'", pick(r, &["=", "<>"]), pick(r, &["alpha", "beta", "", "zeta"])),
            6 => format!("e {} DATE '2022-{:02}-15'", pick(r, &["<", ">=", "="]), r.random_range(1..13)),
            7 => format!("(b + {}) % {} = {}", int(r), r.random_range(1..7), r.random_range(0..3)),
            _ => format!("k IN ({}, {})", r.random_range(0..8), r.random_range(0..8)),
        };
    }
    let a = diff_predicate(r, depth - 1);
    let b = diff_predicate(r, depth - 1);
    match r.random_range(0..3) {
        0 => format!("({a} AND {b})"),
        1 => format!("({a} OR {b})"),
        _ => format!("NOT ({a})"),
    }
}

fn diff_query(r: &mut SmallRng, t: &str) -> String {
    let depth = r.random_range(0..4);
    let p = diff_predicate(r, depth);
    match r.random_range(0..5) {
        0 => format!("SELECT count(*), count(a), sum(a % 1000), min(c), max(b), min(d), max(e) FROM {t} WHERE {p}"),
        1 => format!("SELECT k, count(*), sum(b), min(a), max(c) FROM {t} WHERE {p} GROUP BY k ORDER BY k"),
        2 => format!("SELECT a, b, c, d, e, b * 2 + 1 AS f FROM {t} WHERE {p} ORDER BY a, b, c, d, e"),
        3 => format!("SELECT a, b FROM {t} WHERE {p} ORDER BY a DESC NULLS LAST, b LIMIT {}", r.random_range(1..20)),
        _ => format!("SELECT d, count(*), sum(k) FROM {t} WHERE {p} GROUP BY d ORDER BY d NULLS FIRST"),
    }
}

/// The rows as text (empty batches, which engines may or may not send, left out).
fn pretty(b: &[RecordBatch]) -> String {
    let rows: Vec<RecordBatch> = b.iter().filter(|b| b.num_rows() > 0).cloned().collect();
    if rows.is_empty() {
        return "(no rows)".into();
    }
    arrow::util::pretty::pretty_format_batches(&rows).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_and_gpu_answer_random_queries_alike() {
    let mut r = rng(3);
    let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    let gpu = Ridgeline::builder().gpu_mode(common::gpu_mode()).build().unwrap();
    // Small device chunks so that several chunks (and workgroup tails) are exercised.
    gpu.sql("SET ridgeline.chunk_rows = 3000").await.unwrap().collect().await.unwrap();
    for round in 0..2 {
        let rows = [1, 10_007][round];
        let t = random_table(&mut r, rows);
        let (h, res) = (format!("h{round}"), format!("r{round}"));
        for rl in [&cpu, &gpu] {
            rl.register_batches(&h, t.schema(), vec![t.clone()]).unwrap();
            rl.register_resident(&res, t.schema(), vec![t.clone()]).await.unwrap();
        }
        for _ in 0..cases(40) {
            for table in [&h, &res] {
                let q = diff_query(&mut r, table);
                let want = outcome(&cpu, &q, true).await;
                let got = outcome(&gpu, &q, true).await;
                match (want, got) {
                    (Ok(w), Ok(g)) => assert_eq!(pretty(&w), pretty(&g), "{q}"),
                    (Err(w), Err(_)) => assert!(!w.is_empty()),
                    (w, g) => panic!("{q}: CPU {:?} vs GPU {:?}", w.map(|b| pretty(&b)), g.map(|b| pretty(&b))),
                }
            }
        }
    }
}
