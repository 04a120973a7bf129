//! A table that does not fit the device memory budget stays in host memory (with a
//! warning) and queries still answer; a GPU filter that cannot upload its input
//! within the budget runs on the CPU instead. Its own test binary, so lowering the shared
//! context's budget cannot disturb other tests.
//!
//! The fallback must never answer in part: GPU operators over Parquet, CSV and
//! Arrow files and memory tables that run out of device memory at the first
//! chunk or in the middle of a stream give the CPU's answers, and so does every
//! `.slt` file under such budgets.
mod common;
#[path = "common/slt.rs"]
mod slt;
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::Int64Type;
use ridgeline::{GpuMode, Ridgeline};
use ridgeline_operators::testing::test_context;
use std::sync::Arc;

/// The device budget is the process's: tests that change it take turns.
static BUDGET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn resident_table_over_budget_falls_back_to_host() {
    let Some(ctx) = test_context() else { return };
    let _turn = BUDGET.lock().await;
    ctx.pool().trim();
    ctx.pool().set_budget(1 << 20); // 1 MiB
    let rl = ridgeline::Ridgeline::builder().gpu_mode(ridgeline::GpuMode::On).build().unwrap();
    let rows = 1_000_000usize; // 8 MB of i64
    let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let b = RecordBatch::try_from_iter([("x", a)]).unwrap();
    let on_gpu = rl.register_resident("big", b.schema(), vec![b.clone()]).await.unwrap();
    assert!(!on_gpu, "a table larger than the budget must stay on the host");
    let n = rl.sql("SELECT count(*), sum(x) FROM big").await.unwrap().collect().await.unwrap();
    assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), rows as i64);
    assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), (rows as i64 - 1) * rows as i64 / 2);
    // a small table still fits
    let small = b.slice(0, 1000);
    assert!(rl.register_resident("small", small.schema(), vec![small]).await.unwrap());

    // A GPU filter whose input cannot be uploaded within the budget re-runs on the
    // CPU (with a warning) and answers correctly.
    rl.register_batches("host", b.schema(), vec![b.clone()]).unwrap();
    let df = rl.sql("SELECT count(*), sum(x) FROM host WHERE x % 3 = 1").await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuFilterExec"), "the filter is planned on the GPU");
    let n = df.collect().await.unwrap();
    let want: i64 = (0..rows as i64).filter(|x| x % 3 == 1).sum();
    assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), (rows as i64 + 1) / 3);
    assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), want);

    // A semi-join prefilter that cannot allocate on the device (its key set, its
    // selection) passes every probe row on (with a warning): the join drops them.
    ctx.pool().set_budget(4 << 30);
    let fk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..200_000).map(|i| (i * 7919) % 50_000)));
    let fact = RecordBatch::try_from_iter([("fk", fk)]).unwrap();
    let dk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..100).map(|i| i * 3)));
    let dim = RecordBatch::try_from_iter([("dk", dk)]).unwrap();
    assert!(rl.register_resident("fact", fact.schema(), vec![fact.clone()]).await.unwrap());
    assert!(rl.register_resident("dim", dim.schema(), vec![dim]).await.unwrap());
    let q = "SELECT count(*), sum(fk) FROM fact JOIN dim ON fk = dk";
    let want: Vec<i64> = (0..200_000i64).map(|i| (i * 7919) % 50_000).filter(|k| k % 3 == 0 && *k < 300).collect();
    for budget in [4u64 << 30, ctx.pool().stats().live_bytes] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        let df = rl.sql(q).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuSemiFilterExec"), "the prefilter is planned");
        let n = df.collect().await.unwrap();
        assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), want.len() as i64, "budget {budget}");
        assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), want.iter().sum::<i64>(), "budget {budget}");
    }
    ctx.pool().set_budget(4 << 30);
}

/// `rows` rows: x = 0.., g = x % 10 (so a tenth of them have g = 1).
fn xg_batch(rows: usize) -> RecordBatch {
    let x: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let g: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|v| v % 10)));
    RecordBatch::try_from_iter([("x", x), ("g", g)]).unwrap()
}

/// The same rows as a Parquet file (several row groups), a directory of two
/// Parquet files, a CSV file and an Arrow IPC file.
fn write_files(dir: &std::path::Path, b: &RecordBatch) -> Vec<(&'static str, String)> {
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let props = || Some(WriterProperties::builder().set_max_row_group_row_count(Some(30_000)).build());
    let pq = dir.join("t.parquet");
    let mut w = ArrowWriter::try_new(std::fs::File::create(&pq).unwrap(), b.schema(), props()).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
    let pdir = dir.join("parts");
    std::fs::create_dir_all(&pdir).unwrap();
    let half = b.num_rows() / 2;
    for (i, part) in [b.slice(0, half), b.slice(half, b.num_rows() - half)].iter().enumerate() {
        let mut w = ArrowWriter::try_new(std::fs::File::create(pdir.join(format!("p{i}.parquet"))).unwrap(), b.schema(), props()).unwrap();
        w.write(part).unwrap();
        w.close().unwrap();
    }
    let csv = dir.join("t.csv");
    let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(std::fs::File::create(&csv).unwrap());
    w.write(b).unwrap();
    drop(w);
    let arrow_path = dir.join("t.arrow");
    let mut w = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&arrow_path).unwrap(), &b.schema()).unwrap();
    for o in (0..b.num_rows()).step_by(25_000) {
        w.write(&b.slice(o, 25_000.min(b.num_rows() - o))).unwrap();
    }
    w.finish().unwrap();
    let s = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    vec![("parquet", s(pq)), ("parquet_dir", s(pdir)), ("csv", s(csv)), ("arrow", s(arrow_path))]
}

async fn answer(rl: &Ridgeline, q: &str) -> Vec<RecordBatch> {
    rl.sql(q).await.unwrap().collect().await.unwrap_or_else(|e| panic!("{q}: {e}"))
}

fn text(b: &[RecordBatch]) -> String {
    arrow::util::pretty::pretty_format_batches(b).unwrap().to_string()
}

/// GPU filters over files and memory tables under device budgets from "nothing
/// fits" to "some chunks fit, later ones do not" answer exactly as CPU mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_over_files_and_memory_tables_is_exact() {
    let Some(ctx) = test_context() else { return };
    let _turn = BUDGET.lock().await;
    let rows = 200_000usize;
    let b = xg_batch(rows);
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), &b);
    let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    let gpu = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    // Small chunks, so a budget can hold some of a partition's chunks but not all.
    gpu.sql("SET ridgeline.chunk_rows = 20000").await.unwrap().collect().await.unwrap();
    for rl in [&cpu, &gpu] {
        for (name, path) in &files {
            rl.register_file(name, path).await.unwrap();
        }
        rl.register_batches("memory", b.schema(), vec![b.clone()]).unwrap();
    }
    let queries = [
        "SELECT count(*), sum(x) FROM {t} WHERE g = 1",
        "SELECT sum(x * 2 + g) FROM {t} WHERE g < 3 AND x % 7 <> 3",
        "SELECT x, g, x + g AS s FROM {t} WHERE x % 997 = 5 ORDER BY x",
    ];
    let tables = ["parquet", "parquet_dir", "csv", "arrow", "memory"];
    let expected_count = (rows / 10) as i64;
    for budget in [1u64 << 10, 256 << 10, 1 << 20, 4 << 20, 4 << 30] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        for t in tables {
            for q in queries {
                let q = q.replace("{t}", t);
                let plan = gpu.sql(&q).await.unwrap().create_physical_plan().await.unwrap();
                assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuFilterExec"), "{q}: a GPU filter is planned");
                let (want, got) = (answer(&cpu, &q).await, answer(&gpu, &q).await);
                assert_eq!(text(&want), text(&got), "{q} under a device budget of {budget} bytes");
            }
            let n = answer(&gpu, &format!("SELECT count(*) FROM {t} WHERE g = 1")).await;
            assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), expected_count, "{t}, budget {budget}");
        }
    }
    ctx.pool().set_budget(4 << 30);
}

/// Every `.slt` file in GPU mode with device budgets under which GPU operators
/// fail at their first chunk (64 KiB) and part-way through (1 MiB, small
/// chunks): the files' expected answers (those of CPU mode) still hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_files_under_small_device_budgets() {
    let Some(ctx) = test_context() else { return };
    let _turn = BUDGET.lock().await;
    for budget in [64u64 << 10, 1 << 20] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        slt::run_all_with(GpuMode::On, &["SET ridgeline.chunk_rows = 4096"]).await;
    }
    ctx.pool().set_budget(4 << 30);
}

/// A bad value for a Ridgeline setting is refused at the SET, names the valid
/// values, and the session keeps its old value (later statements still run).
#[tokio::test]
async fn bad_settings_are_refused_and_not_kept() {
    let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    for (key, bad, valid) in [
        ("ridgeline.gpu", "'sideways'", "off, auto or on"),
        ("ridgeline.compaction", "'sideways'", "auto, stable or jumping_jack"),
        ("ridgeline.gpu_semi_filter_mask", "'maybe'", "auto, true or false"),
        ("ridgeline.min_gpu_rows", "'many'", ""),
        ("ridgeline.join_reorder", "'perhaps'", ""),
    ] {
        let before = answer(&rl, &format!("SELECT value FROM information_schema.df_settings WHERE name = '{key}'")).await;
        let r = match rl.sql(&format!("SET {key} = {bad}")).await {
            Ok(df) => df.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        let e = r.expect_err(&format!("SET {key} = {bad} must fail")).to_string();
        assert!(e.contains(valid), "{key}: {e}");
        let after = answer(&rl, &format!("SELECT value FROM information_schema.df_settings WHERE name = '{key}'")).await;
        assert_eq!(text(&before), text(&after), "{key} kept its old value");
        answer(&rl, "SELECT 1").await;
    }
    assert_eq!(rl.gpu_mode().unwrap(), GpuMode::Off);
    rl.sql("SET ridgeline.gpu = 'AUTO'").await.unwrap().collect().await.unwrap();
    assert_eq!(rl.gpu_mode().unwrap(), GpuMode::Auto);
}

/// GPU hash joins under device budgets from "nothing fits" (the build table
/// cannot be made: the CPU path of the same primitives answers) to "the table
/// fits, some probes do not" (those probe batches fall back, the others stay on
/// the device) answer exactly as CPU mode, for inner, outer, semi and anti joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_join_fallback_is_exact() {
    let Some(ctx) = test_context() else { return };
    let _turn = BUDGET.lock().await;
    let n = 300_000i64;
    let fk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n).map(|i| (i * 7919) % 60_000)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
    let fact = RecordBatch::try_from_iter([("fk", fk), ("v", v)]).unwrap();
    let dk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..40_000).map(|i| i * 2)));
    let dim = RecordBatch::try_from_iter([("dk", dk)]).unwrap();
    let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    let gpu = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    for rl in [&cpu, &gpu] {
        let parts: Vec<RecordBatch> = (0..n as usize).step_by(50_000).map(|o| fact.slice(o, 50_000)).collect();
        rl.register_batches("fact", fact.schema(), parts).unwrap();
        rl.register_batches("dim", dim.schema(), vec![dim.clone()]).unwrap();
    }
    let queries = [
        "SELECT count(*), sum(v) FROM fact JOIN dim ON fk = dk",
        "SELECT count(*), sum(v), count(dk) FROM fact LEFT JOIN dim ON fk = dk",
        "SELECT count(*), sum(v) FROM fact WHERE fk IN (SELECT dk FROM dim)",
        "SELECT count(*), sum(v) FROM fact WHERE NOT EXISTS (SELECT 1 FROM dim WHERE dk = fk)",
        "SELECT count(*) FROM dim WHERE EXISTS (SELECT 1 FROM fact WHERE dk = fk AND v > 100)",
    ];
    let live = ctx.pool().stats().live_bytes;
    for budget in [4u64 << 30, live + (3 << 20), live + (64 << 10), live] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        for q in queries {
            let plan = gpu.sql(q).await.unwrap().create_physical_plan().await.unwrap();
            assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuHashJoinExec"), "{q}: a GPU join is planned");
            assert_eq!(text(&answer(&gpu, q).await), text(&answer(&cpu, q).await), "{q} under a budget of {budget} bytes");
        }
        // where the probes ran: all on the device with room, none without
        let t = text(&answer(&gpu, &format!("EXPLAIN ANALYZE {}", queries[0])).await);
        let line = t.lines().find(|l| l.contains("GpuHashJoinExec")).unwrap().to_string();
        if budget == 4 << 30 {
            assert!(line.contains("cpu_probes=0") && !line.contains("gpu_probes=0"), "{line}");
        } else if budget == live {
            assert!(line.contains("gpu_probes=0") && !line.contains("cpu_probes=0"), "{line}");
        }
    }
    ctx.pool().set_budget(4 << 30);
}

/// A GPU island over host inputs (a GROUP BY over files and a memory table in
/// mode on) under device budgets from "nothing fits" to "everything fits":
/// always CPU mode's answer; with room it ran `GpuAggregateExec`, without it the
/// subtree as planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_island_fallback_is_exact() {
    let Some(ctx) = test_context() else { return };
    let _turn = BUDGET.lock().await;
    let b = xg_batch(100_000);
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), &b);
    let cpu = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    let gpu = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    for rl in [&cpu, &gpu] {
        for (name, path) in &files {
            rl.register_file(name, path).await.unwrap();
        }
        rl.register_batches("memory", b.schema(), vec![b.clone()]).unwrap();
    }
    for budget in [1u64 << 10, 256 << 10, 4 << 30] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        for t in ["parquet", "csv", "memory"] {
            let q = format!("SELECT g, count(*) c, sum(x) s, max(x) m FROM {t} WHERE x % 3 <> 1 GROUP BY g ORDER BY g");
            let analyzed = text(&answer(&gpu, &format!("EXPLAIN ANALYZE {q}")).await);
            assert!(analyzed.contains("GpuIslandExec"), "{analyzed}");
            if budget == 4 << 30 {
                assert!(analyzed.contains("ran: GpuAggregateExec"), "{analyzed}");
            } else if budget == 1 << 10 {
                assert!(analyzed.contains("GPU fallback"), "{analyzed}");
            }
            assert_eq!(text(&answer(&cpu, &q).await), text(&answer(&gpu, &q).await), "{q} under a budget of {budget} bytes");
        }
    }
    ctx.pool().set_budget(4 << 30);
}
