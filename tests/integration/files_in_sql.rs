//! Files straight in SQL (`src/files.rs`): quoted paths as table names, globs,
//! directories, upper-case endings, compressed CSV, the `read_*` table functions
//! with options, and the errors for remote URLs, missing files and bad options,
//! in CPU mode and the suite's GPU mode.
use crate::common;
use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use ridgeline::{GpuMode, Ridgeline};
use std::path::Path;
use std::sync::Arc;

const ROWS: i64 = 1000;
const SUM: i64 = ROWS * (ROWS - 1) / 2;

fn batch() -> RecordBatch {
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(0..ROWS));
    let name: ArrayRef = Arc::new(StringArray::from_iter_values((0..ROWS).map(|i| format!("n{}", i % 7))));
    let x: ArrayRef = Arc::new(Float64Array::from_iter_values((0..ROWS).map(|i| i as f64 / 4.0)));
    RecordBatch::try_from_iter([("id", id), ("name", name), ("x", x)]).unwrap()
}

fn write_parquet(path: &Path, b: &RecordBatch) {
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
}

fn write_csv<W: std::io::Write>(out: W, b: &RecordBatch, delimiter: u8, header: bool) {
    let mut w = arrow::csv::WriterBuilder::new().with_header(header).with_delimiter(delimiter).build(out);
    w.write(b).unwrap();
}

/// Every file the tests read, in `dir`.
fn write_files(dir: &Path) {
    let b = batch();
    write_parquet(&dir.join("t.parquet"), &b);
    write_parquet(&dir.join("UPPER.PARQUET"), &b);
    let parts = dir.join("parts");
    std::fs::create_dir_all(&parts).unwrap();
    write_parquet(&parts.join("p0.parquet"), &b.slice(0, 400));
    write_parquet(&parts.join("p1.parquet"), &b.slice(400, 600));
    let f = |n: &str| std::fs::File::create(dir.join(n)).unwrap();
    write_csv(f("t.csv"), &b, b',', true);
    write_csv(f("t.tsv"), &b, b'\t', true);
    write_csv(f("semi.csv"), &b, b';', true);
    write_csv(f("noheader.csv"), &b, b',', false);
    write_csv(f("data.txt"), &b, b',', true);
    let mut gz = flate2::write::GzEncoder::new(f("t.csv.gz"), flate2::Compression::default());
    write_csv(&mut gz, &b, b',', true);
    gz.finish().unwrap();
    let mut w = arrow::json::LineDelimitedWriter::new(f("t.json"));
    w.write(&b).unwrap();
    w.finish().unwrap();
    let mut w = arrow::json::ArrayWriter::new(f("array.json"));
    w.write(&b).unwrap();
    w.finish().unwrap();
    let mut w = arrow::ipc::writer::FileWriter::try_new(f("t.arrow"), &b.schema()).unwrap();
    w.write(&b).unwrap();
    w.finish().unwrap();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(f("t.arrows"), &b.schema()).unwrap();
    w.write(&b.slice(0, 500)).unwrap();
    w.write(&b.slice(500, 500)).unwrap();
    w.finish().unwrap();
}

/// The one row of `sql` as text cells.
async fn row(rl: &Ridgeline, sql: &str) -> Vec<String> {
    let df = rl.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = df.collect().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let b = arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
    assert_eq!(b.num_rows(), 1, "{sql}");
    (0..b.num_columns()).map(|c| arrow::util::display::array_value_to_string(b.column(c), 0).unwrap()).collect()
}

/// The error of `sql` (planning or running) as text.
async fn error(rl: &Ridgeline, sql: &str) -> String {
    let r = match rl.sql(sql).await {
        Ok(df) => df.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let e = r.expect_err(sql).to_string();
    assert!(!e.contains("panicked") && !e.contains("Internal error"), "{sql}: {e}");
    e
}

fn engines() -> Vec<Ridgeline> {
    [GpuMode::Off, common::gpu_mode()].map(|m| Ridgeline::builder().gpu_mode(m).build().unwrap()).into()
}

fn counts(n: i64, sum: i64) -> Vec<String> {
    vec![n.to_string(), sum.to_string()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quoted_paths_read_every_format() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path());
    let d = dir.path().display();
    for rl in engines() {
        for f in ["t.parquet", "UPPER.PARQUET", "t.csv", "t.tsv", "t.csv.gz", "t.json", "t.arrow", "t.arrows", "parts", "parts/*.parquet", "parts/"] {
            let q = format!("SELECT count(*), sum(id) FROM '{d}/{f}'");
            assert_eq!(row(&rl, &q).await, counts(ROWS, SUM), "{q}");
        }
        let q = format!("SELECT count(*), sum(id) FROM 'file://{d}/t.parquet'");
        assert_eq!(row(&rl, &q).await, counts(ROWS, SUM));
        // Filters, aggregates and joins over file tables (GPU operators in GPU mode).
        let q = format!("SELECT count(*), sum(p.id) FROM '{d}/t.parquet' p JOIN '{d}/t.csv' c ON p.id = c.id WHERE c.x >= 100");
        assert_eq!(row(&rl, &q).await, counts(600, (400..ROWS).sum()));
        let q = format!("SELECT count(DISTINCT name), max(x) FROM '{d}/t.json' WHERE id % 2 = 0");
        assert_eq!(row(&rl, &q).await, vec!["7".to_string(), "249.5".to_string()]);
        // A quoted name that is no file and a plain unknown table keep their errors.
        assert!(error(&rl, "SELECT * FROM nosuch").await.contains("nosuch"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_functions_take_options() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path());
    let d = dir.path().display();
    for rl in engines() {
        for call in [
            format!("read_parquet('{d}/t.parquet')"),
            format!("read_parquet('{d}/parts/*.parquet')"),
            format!("read_parquet('{d}/parts')"),
            format!("read_csv('{d}/t.csv')"),
            format!("read_csv('{d}/t.csv', header = true)"),
            format!("read_csv('{d}/t.tsv')"),
            format!("read_csv('{d}/t.tsv', delim = '\\t')"),
            format!("read_csv('{d}/t.csv.gz')"),
            format!("read_csv('{d}/semi.csv', delim = ';')"),
            format!("read_csv('{d}/semi.csv', delimiter = ';', header = 'true')"),
            format!("READ_CSV('{d}/semi.csv', Delim => ';', header => true)"),
            format!("read_csv('{d}/semi.csv', named_struct('delim', ';'))"),
            format!("read_csv('{d}/t.csv.gz', compression = 'gzip')"),
            format!("read_csv('{d}/data.txt')"),
            format!("read_json('{d}/t.json')"),
            format!("read_ndjson('{d}/t.json')"),
            format!("read_json('{d}/array.json', newline_delimited = false)"),
            format!("read_arrow('{d}/t.arrow')"),
            format!("read_arrow('{d}/t.arrows')"),
        ] {
            let q = format!("SELECT count(*), sum(id) FROM {call}");
            assert_eq!(row(&rl, &q).await, counts(ROWS, SUM), "{q}");
        }
        let q = format!("SELECT count(*), sum(column_1) FROM read_csv('{d}/noheader.csv', header = false)");
        assert_eq!(row(&rl, &q).await, counts(ROWS, SUM));
        let q = format!("SELECT count(*), sum(t.id) FROM read_csv('{d}/t.csv') AS t WHERE t.name = 'n3'");
        assert_eq!(row(&rl, &q).await, counts(143, (0..ROWS).filter(|i| i % 7 == 3).sum()));
        // In a subquery and under EXPLAIN the options are rewritten too.
        let q = format!("SELECT count(*), sum(id) FROM (SELECT * FROM read_csv('{d}/semi.csv', delim => ';')) s");
        assert_eq!(row(&rl, &q).await, counts(ROWS, SUM));
        let plan = rl.sql(&format!("EXPLAIN SELECT * FROM read_csv('{d}/semi.csv', header => true)")).await.unwrap().collect().await;
        assert!(plan.is_ok(), "{plan:?}");
        let e = error(&rl, &format!("SELECT * FROM read_csv('{d}/t.csv', nope = 1)")).await;
        assert!(e.contains("unknown option 'nope'") && e.contains("delim"), "{e}");
        let e = error(&rl, &format!("SELECT * FROM read_parquet('{d}/t.parquet', header = true)")).await;
        assert!(e.contains("unknown option 'header'"), "{e}");
        let e = error(&rl, "SELECT * FROM read_csv(42)").await;
        assert!(e.contains("expected a path string"), "{e}");
        let e = error(&rl, &format!("SELECT * FROM read_csv('{d}/t.csv', 7)")).await;
        assert!(e.contains("name = value"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_urls_and_missing_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path());
    let d = dir.path().display();
    for rl in engines() {
        for url in ["s3://bucket/x.parquet", "https://example.com/x.csv", "gs://b/*.parquet"] {
            for q in [format!("SELECT * FROM '{url}'"), format!("SELECT * FROM read_parquet('{url}')")] {
                let e = error(&rl, &q).await;
                assert!(e.contains("remote URLs are not supported") && e.contains(url) && e.contains("file://"), "{q}: {e}");
                assert_eq!(e.lines().count(), 1, "{e}");
            }
        }
        for q in [format!("SELECT * FROM '{d}/missing.parquet'"), format!("SELECT * FROM read_csv('{d}/missing.parquet')")] {
            let e = error(&rl, &q).await;
            assert!(e.contains("file not found") && e.contains("missing.parquet"), "{q}: {e}");
        }
        let e = error(&rl, &format!("SELECT * FROM '{d}/parts/*.csv'")).await;
        assert!(e.contains("no files match"), "{e}");
        let e = error(&rl, &format!("SELECT * FROM '{d}/data.txt'")).await;
        assert!(e.contains("cannot tell the format") && e.contains("data.txt"), "{e}");
        // Off (as the server sets it), no path is read.
        rl.sql("SET ridgeline.file_access = false").await.unwrap();
        for q in [format!("SELECT * FROM '{d}/t.parquet'"), format!("SELECT * FROM read_parquet('{d}/t.parquet')")] {
            assert!(error(&rl, &q).await.contains("ridgeline.file_access"), "{q}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_file_reads_the_same_formats() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path());
    let rl = Ridgeline::builder().gpu_mode(common::gpu_mode()).build().unwrap();
    for (i, f) in ["UPPER.PARQUET", "t.tsv", "t.csv.gz", "t.json", "t.arrows", "parts"].iter().enumerate() {
        rl.register_file(&format!("t{i}"), dir.path().join(f).to_str().unwrap()).await.unwrap();
        assert_eq!(row(&rl, &format!("SELECT count(*), sum(id) FROM t{i}")).await, counts(ROWS, SUM), "{f}");
    }
    let e = rl.register_file("x", dir.path().join("data.txt").to_str().unwrap()).await.unwrap_err().to_string();
    assert!(e.contains("cannot tell the format"), "{e}");
}
