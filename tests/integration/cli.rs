//! Smoke tests of the `ridgeline` binary: the contract users and scripts rely on.
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ridgeline"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "ridgeline {args:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn gpu_expected() -> bool {
    std::env::var("RIDGELINE_GPU").is_ok_and(|v| v == "on")
}

fn write_csv(dir: &std::path::Path) -> String {
    let p = dir.join("people.csv");
    std::fs::write(&p, "id,name,score\n1,ann,3.5\n2,bob,\n3,,7.25\n").unwrap();
    p.display().to_string()
}

#[test]
fn query_csv_formats() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let t = format!("people={csv}");
    let out = ok(&["query", "SELECT id, name, score FROM people ORDER BY id", "--table", &t, "--format", "csv"]);
    assert_eq!(out, "id,name,score\n1,ann,3.5\n2,bob,\n3,,7.25\n");
    let out = ok(&["query", "SELECT count(*) AS n FROM people; SELECT max(id) AS m FROM people", "--table", &t, "--format", "json"]);
    assert_eq!(out, "[{\"n\":3}]\n[{\"m\":3}]\n");
    let out = ok(&["query", "SELECT name FROM people WHERE id = 1", "--table", &t]);
    assert!(out.contains("| ann  |"), "{out}");
    let out = ok(&["query", "SELECT id FROM people WHERE id > 10", "--table", &t, "--format", "csv"]);
    assert_eq!(out, "id\n");
}

#[test]
fn query_files_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let semi = dir.path().join("semi.csv");
    std::fs::write(&semi, "id;name\n1;ann\n2;bob\n").unwrap();
    let q = format!("SELECT count(*) AS n, sum(id) AS s FROM '{csv}'");
    assert_eq!(ok(&["query", &q, "--format", "csv"]), "n,s\n3,6\n");
    let q = format!("SELECT name FROM read_csv('{}', delim = ';') WHERE id = 2", semi.display());
    assert_eq!(ok(&["query", &q, "--format", "csv"]), "name\nbob\n");
    let o = run(&["query", "SELECT * FROM 's3://bucket/x.parquet'"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("remote URLs are not supported"), "{err}");
}

#[test]
fn sql_errors_are_one_line_with_position() {
    let o = run(&["query", "SELECT 1;\nSELEC x FROM y"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("Line: 2, Column: 1"), "position should point into the original text: {err}");
    let o = run(&["--gpu", "off", "query", "SELECT 1; SELEC x"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("Line: 1, Column: 11"), "{o:?}");
    let o = run(&["query", "SELECT nope FROM (SELECT 1 AS a)"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope"));
    let o = run(&["query", "SELECT 1", "--table", "x=/no/such/file.txt"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot tell the format"));
}

#[test]
fn gen_tpch_then_count_lineitem() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tpch");
    let o = ok(&["gen", "tpch", "--sf", "0.01", "--out", out.to_str().unwrap()]);
    assert_eq!(o.lines().count(), 8, "{o}");
    let li = format!("lineitem={}", out.join("lineitem.parquet").display());
    let or = format!("orders={}", out.join("orders.parquet").display());
    for extra in [&[][..], &["--resident"][..]] {
        let mut args = vec!["query", "SELECT count(*) AS n FROM lineitem; SELECT count(*) AS n FROM orders", "--table", &li, "--table", &or, "--format", "csv"];
        args.extend_from_slice(extra);
        assert_eq!(ok(&args), "n\n60175\nn\n15000\n");
    }
    // Every TPC-H query file: the files are SQL that starts with a `--` comment.
    // Once through `-f` (all 22 in one run), once as the positional argument (the
    // 22 texts in one argument, planned only, to keep the test fast).
    let tables: Vec<String> = ["lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region"]
        .iter()
        .map(|t| format!("{t}={}", out.join(format!("{t}.parquet")).display()))
        .collect();
    let sqldir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/tpch");
    let files: Vec<String> = (1..=22).map(|q| sqldir.join(format!("q{q}.sql")).display().to_string()).collect();
    let mut args = vec!["--gpu", "off", "query", "--format", "csv"];
    for t in &tables {
        args.extend(["--table", t.as_str()]);
    }
    let mut with_files = args.clone();
    for f in &files {
        with_files.extend(["-f", f.as_str()]);
    }
    let o = ok(&with_files);
    assert!(o.starts_with("l_returnflag,l_linestatus,sum_qty,"), "{o}");
    assert!(o.contains("\ncntrycode,numcust,totacctbal\n"), "q22 ran last: {o}");
    let all: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap() + "\n").collect();
    assert!(all.starts_with("--"));
    let mut positional = args.clone();
    positional.extend(["--explain", all.as_str()]);
    let o = ok(&positional);
    assert_eq!(o.matches("GPU operators:").count(), 22, "{o}");
    let csvdir = dir.path().join("tpchcsv");
    ok(&["gen", "tpch", "--sf", "0.01", "--out", csvdir.to_str().unwrap(), "--format", "csv"]);
    let na = format!("nation={}", csvdir.join("nation.csv").display());
    assert_eq!(ok(&["query", "SELECT count(*) AS n FROM nation", "--table", &na, "--format", "csv"]), "n\n25\n");
}

#[test]
fn gen_skyline_files() {
    let dir = tempfile::tempdir().unwrap();
    for ext in ["csv", "parquet", "arrow"] {
        let f = dir.path().join(format!("sky.{ext}"));
        ok(&["gen", "skyline", "--dist", "anticorrelated", "--dims", "3", "--rows", "1000", "--out", f.to_str().unwrap()]);
        let t = format!("s={}", f.display());
        let out = ok(&["query", "SELECT count(*) AS n, count(d2) AS c FROM s WHERE d0 >= 0 AND d0 < 1", "--table", &t, "--format", "csv"]);
        assert_eq!(out, "n,c\n1000,1000\n", "{ext}");
    }
    let o = run(&["gen", "skyline", "--dist", "weird", "--dims", "3", "--rows", "10", "--out", "x.csv"]);
    assert!(!o.status.success());
}

#[test]
fn gpu_report_and_modes() {
    let o = run(&["gpu"]);
    if gpu_expected() {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(s.contains("adapter:") && s.contains("max storage binding"), "{s}");
        assert!(s.contains("Vulkan"), "{s}");
    }
    // mode on without an adapter: a clear error
    let o = bin().args(["--gpu", "on", "query", "SELECT 1 AS x"]).env("RIDGELINE_ADAPTER", "no-such-adapter-xyz").output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("GPU mode is 'on' but the GPU is unavailable"), "{err}");
    // mode auto without an adapter: falls back to the CPU with one warning
    let o = bin().args(["--gpu", "auto", "query", "SELECT 1 AS x", "--format", "csv"]).env("RIDGELINE_ADAPTER", "no-such-adapter-xyz").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "x\n1\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("warning: no GPU").count(), 1, "{err}");
    // ... printed once, not again by the logger with its own prefix
    assert_eq!(err.matches("running on the CPU").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // a bad SET keeps the old value: the statement after it still runs (exit 1 for the failed one)
    let o = bin()
        .args(["--gpu", "off", "query", "SET ridgeline.gpu = 'sideways'; SELECT 2 AS y", "--format", "csv"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("ridgeline.gpu must be off, auto or on, not 'sideways'"), "{err}");
    // a bad mode name
    let o = bin().args(["query", "SELECT 1"]).env("RIDGELINE_GPU", "sometimes").output().unwrap();
    assert!(!o.status.success());
}

#[test]
fn explain_marks_gpu_nodes_on_resident_tables() {
    let dir = tempfile::tempdir().unwrap();
    let t = format!("people={}", write_csv(dir.path()));
    let out = ok(&["query", "SELECT id FROM people WHERE id > 1", "--table", &t, "--resident", "--explain"]);
    if gpu_expected() {
        assert!(out.contains("[gpu]") && out.contains("GpuScanExec: table=people"), "{out}");
        assert!(out.contains("GpuFilterExec") && out.contains("GpuUnloadExec"), "{out}");
        // An aggregation over the filter becomes one GPU node reading the resident columns.
        let agg = ok(&["query", "SELECT sum(id) FROM people WHERE id > 1", "--table", &t, "--resident", "--explain"]);
        assert!(agg.contains("[gpu] GpuAggregateExec: table=people") && agg.contains("predicate=id@0 > 1"), "{agg}");
    } else {
        assert!(out.contains("GPU operators:"), "{out}");
    }
    let cpu = ok(&["--gpu", "off", "query", "SELECT sum(id) FROM people", "--table", &t, "--resident", "--explain"]);
    assert!(cpu.contains("GPU operators: none"), "{cpu}");
}

#[test]
fn shell_reads_piped_statements() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["--gpu", "off"])
        .env("HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"CREATE TABLE t AS VALUES (1), (2);\nSELECT\n sum(column1) AS total\nFROM t;\n.tables\n.schema t\n.timer on\nSELECT 40 + 2 AS answer;\n.gpu\n.quit\nSELECT 'not run';\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("| 3     |"), "{out}");
    assert!(out.contains("column1 Int64"), "{out}");
    assert!(out.contains("| 42     |") && out.contains("time:"), "{out}");
    assert!(out.contains("gpu mode: off"), "{out}");
    assert!(!out.contains("not run"), "{out}");
    assert!(!err.contains("error"), "{err}");
}

/// Runs the shell on a script given as standard input.
fn script(text: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["--gpu", "off"])
        .args(args)
        .env("HOME", dir.path())
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn error_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.starts_with("error:")).map(String::from).collect()
}

/// A script on standard input stops at its first error (exit code 1), as DuckDB's
/// shell does; `;` inside comments and strings does not end a statement.
#[test]
fn scripts_stop_at_the_first_error() {
    let o = script(
        ".format csv\n-- a script; with a header\nSELECT 1 AS a; -- trailing; comment\nSELECT 'x;y' AS s, 1 -- not the end;\n + 1 AS two /* still; */;\n\
         SELECT $$p;q$$ AS d;\nSELECT nope;\nSELECT 'after' AS z;\n",
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(out, "a\n1\ns,two\nx;y,2\nd\np;q\n");
    let errs = error_lines(&o);
    assert_eq!(errs.len(), 1, "{o:?}");
    assert!(errs[0].contains("nope"), "{errs:?}");
    // Parser error positions count lines from the start of the script.
    let o = script("SELECT 1;\n-- two\n\nSELECT 2; SELEC 3;\n", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_lines(&o)[0].contains("Line: 4, Column: 11"), "{o:?}");
    // A failed dot command stops it too; a last statement without `;` runs.
    let o = script(".bogus\nSELECT 1;\n", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_lines(&o)[0].contains("unknown command .bogus"), "{o:?}");
    assert!(o.stdout.is_empty());
    let o = script(".format csv\nSELECT 5 AS five -- no semicolon\n", &[]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "five\n5\n");
}

/// JSON keeps every column (NULL as null), prints `[]` for no rows, and spells
/// NaN and the infinities as strings; CSV spells them the same way.
#[test]
fn json_and_csv_keep_every_column() {
    let sql = "SELECT 1 AS a, NULL AS b, CAST(NULL AS VARCHAR) AS c; SELECT 1 AS a WHERE false; \
               SELECT CAST('NaN' AS DOUBLE) AS x, CAST('inf' AS DOUBLE) AS y, CAST('-inf' AS DOUBLE) AS z, 1.5 AS w, \
               CAST(NULL AS DOUBLE) AS n, [CAST('inf' AS DOUBLE), 2.0] AS l";
    let o = ok(&["--gpu", "off", "query", sql, "--format", "json"]);
    assert_eq!(
        o,
        "[{\"a\":1,\"b\":null,\"c\":null}]\n[]\n\
         [{\"x\":\"NaN\",\"y\":\"Infinity\",\"z\":\"-Infinity\",\"w\":1.5,\"n\":null,\"l\":[\"Infinity\",2.0]}]\n"
    );
    let sql = "SELECT 1 AS a, NULL AS b; SELECT 1 AS a WHERE false; \
               SELECT CAST('NaN' AS DOUBLE) AS x, CAST('inf' AS DOUBLE) AS y, CAST('-inf' AS DOUBLE) AS z, 1.5 AS w, CAST(NULL AS DOUBLE) AS n";
    let o = ok(&["--gpu", "off", "query", sql, "--format", "csv"]);
    assert_eq!(o, "a,b\n1,\na\nx,y,z,w,n\nNaN,Infinity,-Infinity,1.5,\n");
}

/// SQL from `-f FILE` (repeatable), `-f -` and `-` (standard input), and SQL that
/// starts with a `--` comment as the argument.
#[test]
fn sql_from_files_stdin_and_leading_comments() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.sql");
    let b = dir.path().join("b.sql");
    std::fs::write(&a, "-- first; file\nSELECT 1 AS a;\n").unwrap();
    std::fs::write(&b, "/* second */ SELECT 2 AS b; SELECT 3 AS c").unwrap();
    let (a, b) = (a.display().to_string(), b.display().to_string());
    let q = |args: &[&str]| {
        let mut v = vec!["--gpu", "off", "query", "--format", "csv"];
        v.extend_from_slice(args);
        ok(&v)
    };
    assert_eq!(q(&["-- a comment; with a semicolon\nSELECT 1 AS a"]), "a\n1\n");
    assert_eq!(q(&["-f", &a, "--file", &b]), "a\n1\nb\n2\nc\n3\n");
    for arg in [&["-f", "-"][..], &["-"][..]] {
        let mut child = bin()
            .args(["--gpu", "off", "query", "--format", "csv"])
            .args(arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"-- from stdin\nSELECT 4 AS d;").unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "d\n4\n");
    }
    // A missing file, and an error in the second of two files: one line, exit 1.
    std::fs::write(dir.path().join("bad.sql"), "SELECT 1 AS fine;\nSELECT nope;").unwrap();
    let bad = dir.path().join("bad.sql").display().to_string();
    for args in [vec!["--gpu", "off", "query", "-f", "/no/such/file.sql"], vec!["--gpu", "off", "query", "-f", &a, "-f", &bad]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        let errs = error_lines(&o);
        assert_eq!(errs.len(), 1, "{o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1, "{o:?}");
    }
    assert!(error_lines(&run(&["query", "-f", "/no/such/file.sql"]))[0].contains("/no/such/file.sql"));
}

/// A reader that goes away (`| head -1`) ends the output quietly with exit code
/// 0; a closed standard error never makes a panic.
#[test]
fn closed_pipes_end_quietly() {
    use std::io::BufRead;
    let sql = "SELECT value, value * 2 AS twice FROM generate_series(1, 5000000)";
    for close_stderr in [false, true] {
        let mut child = bin()
            .args(["--gpu", "off", "query", sql, "--format", "csv"])
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let stderr = if close_stderr {
            drop(stderr);
            None
        } else {
            Some(stderr)
        };
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        assert_eq!(first, "value,twice\n");
        drop(lines);
        let status = child.wait().unwrap();
        let err = stderr.map(|mut e| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            s
        });
        assert_eq!(status.code(), Some(0), "closed stderr: {close_stderr}; stderr: {err:?}");
        assert_eq!(err.unwrap_or_default(), "");
    }
    // The reproduction: standard output and error are one pipe that `head` closes.
    let o = Command::new("bash")
        .args(["-c", "\"$0\" --gpu off query \"$1\" --format csv 2>&1 | head -1; exit ${PIPESTATUS[0]}", env!("CARGO_BIN_EXE_ridgeline"), sql])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "value,twice\n");
    // An error with standard error closed: exit code 1, not a panic.
    let mut child = bin().args(["--gpu", "off", "query", "SELECT nope"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(1));
}

/// A Parquet file whose footer length is corrupt: one `error:` line, exit code
/// 1, no panic message, from `query` and from a script.
#[test]
fn corrupt_parquet_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    {
        use std::sync::Arc;
        let col = Arc::new(arrow::array::Int64Array::from_iter_values(0..100)) as arrow::array::ArrayRef;
        let batch = arrow::array::RecordBatch::try_from_iter([("x", col)]).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&good).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let bytes = std::fs::read(&good).unwrap();
    let n = bytes.len();
    assert_eq!(&bytes[n - 4..], b"PAR1");
    let footer = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    // n - 7, n and u32::MAX made the parquet reader panic (`attempt to subtract
    // with overflow` in debug builds, `range start must not be greater than end` in
    // release ones: exit code 101 before the guards); the others are clear errors.
    let mut cases = Vec::new();
    for len in [footer + 1, footer + 7, n - 8, n - 7, u32::MAX as usize, footer / 2] {
        let mut b = bytes.clone();
        b[n - 8..n - 4].copy_from_slice(&(len as u32).to_le_bytes());
        let p = dir.path().join(format!("bad{len}.parquet"));
        std::fs::write(&p, b).unwrap();
        cases.push(p.display().to_string());
    }
    for p in &cases {
        let t = format!("t={p}");
        let o = bin().args(["--gpu", "off", "query", "SELECT sum(x) FROM t", "--table", &t]).env_remove("RUST_BACKTRACE").output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{p}: {err}");
        assert_eq!(error_lines(&o).len(), 1, "{p}: {err}");
        assert_eq!(err.lines().count(), 1, "{p}: {err}");
        assert!(!err.contains("panicked"), "{p}: {err}");
    }
    let sql = format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}';\nSELECT sum(x) FROM t;\n", cases[3]);
    let o = script(&sql, &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(error_lines(&o).len(), 1, "{o:?}");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{o:?}");
}

#[test]
fn demo_prints_the_showcase() {
    let out = ok(&["demo", "--sf", "0.01"]);
    assert!(out.contains("TPC-H Q1") && out.contains("TPC-H Q6"), "{out}");
    assert!(out.contains("l_returnflag"), "{out}");
    assert!(out.contains("GPU operators:"), "{out}");
    if gpu_expected() {
        assert!(out.contains("GpuScanExec"), "{out}");
    }
}

/// Deep SQL answers in the CLI instead of overflowing its stack: a 5,000-term
/// `OR` chain and a `UNION ALL` of 2,000 SELECTs (the CLI aborted at about
/// 10,000 terms and a few thousand branches).
#[test]
fn deep_sql_answers() {
    let dir = tempfile::tempdir().unwrap();
    let or = format!(
        "SELECT count(*) AS n FROM (VALUES (1), (2), (3), (7000)) t(a) WHERE {};",
        (0..5000).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR ")
    );
    let union = format!(
        "SELECT count(*) AS m, sum(v) AS s FROM ({});",
        (0..2000).map(|i| format!("SELECT {i} AS v")).collect::<Vec<_>>().join(" UNION ALL ")
    );
    let f = dir.path().join("deep.sql");
    std::fs::write(&f, format!("{or}\n{union}\n")).unwrap();
    let o = bin().args(["--gpu", "off", "query", "--format", "csv", "-f", f.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "n\n3\nm,s\n2000,1999000\n");
}

/// A headless machine without `XDG_RUNTIME_DIR` (a service's environment): the
/// GPU starts without driver noise on standard error (the library creates its
/// Vulkan instance without window-system extensions, so Mesa does not look for a
/// Wayland display), and a GPU query answers.
#[test]
fn gpu_start_is_quiet_without_a_display() {
    for args in [&["gpu"][..], &["--gpu", "auto", "query", "SELECT 1 + 1 AS two", "--format", "csv"][..]] {
        let o = bin().args(args).env_remove("XDG_RUNTIME_DIR").env_remove("WAYLAND_DISPLAY").output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "ridgeline {args:?}: {err}");
        assert!(!err.contains("XDG_RUNTIME_DIR"), "ridgeline {args:?} printed driver noise:\n{err}");
    }
    let out = String::from_utf8(bin().args(["query", "SELECT 1 + 1 AS two", "--format", "csv"]).env_remove("XDG_RUNTIME_DIR").output().unwrap().stdout).unwrap();
    assert_eq!(out.trim(), "two\n2");
}

/// `ridgeline` without a command: `--help` names the shell and its options;
/// `--table` registers tables for it, and `-c` / `-f` run SQL over them and exit.
#[test]
fn shell_arguments_register_tables_and_run_sql() {
    let help = ok(&["--help"]);
    assert!(help.contains("interactive shell") && help.contains("--table") && help.contains("-c <SQL>"), "{help}");
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let t = format!("people={csv}");
    let out = ok(&["--gpu", "off", "--table", &t, "-c", "SELECT count(*) AS n FROM people"]);
    assert!(out.contains('3'), "{out}");
    let sql = dir.path().join("q.sql");
    std::fs::write(&sql, "SELECT max(id) AS top FROM people;").unwrap();
    let out = ok(&["--gpu", "off", "--table", &t, "-f", sql.to_str().unwrap()]);
    assert!(out.contains("top") && out.contains('3'), "{out}");
    // a bad table is one error line and exit status 1
    let o = run(&["--gpu", "off", "--table", "nope", "-c", "SELECT 1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NAME=PATH"));
}

/// `gen` refuses to overwrite data without `--force`.
#[test]
fn gen_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let sky = dir.path().join("sky.csv");
    let sky_s = sky.to_str().unwrap();
    let args = ["gen", "skyline", "--dist", "independent", "--dims", "2", "--rows", "10", "--out", sky_s];
    ok(&args);
    std::fs::write(&sky, "keep me").unwrap();
    let o = run(&args);
    assert_eq!(o.status.code(), Some(1));
    let errs = error_lines(&o);
    assert!(errs.len() == 1 && errs[0].ends_with(&format!("{sky_s} exists; --force overwrites it")), "{errs:?}");
    assert_eq!(std::fs::read_to_string(&sky).unwrap(), "keep me");
    let mut forced = args.to_vec();
    forced.push("--force");
    ok(&forced);
    assert!(std::fs::read_to_string(&sky).unwrap().starts_with("d0,d1"));
    let tpch = dir.path().join("tpch");
    std::fs::create_dir_all(&tpch).unwrap();
    std::fs::write(tpch.join("nation.csv"), "old").unwrap();
    let o = run(&["gen", "tpch", "--sf", "0.01", "--format", "csv", "--out", tpch.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let errs = error_lines(&o);
    assert!(errs.len() == 1 && errs[0].contains("already holds TPC-H data (nation.csv); --force overwrites it"), "{errs:?}");
    assert_eq!(std::fs::read_to_string(tpch.join("nation.csv")).unwrap(), "old");
    // Parquet files of the same directory are another data set: no conflict.
    assert_eq!(ok(&["gen", "tpch", "--sf", "0.01", "--out", tpch.to_str().unwrap()]).lines().count(), 8);
}

/// `--help` names the shell and its options; `--gpu` is where it applies.
#[test]
fn help_names_the_shell_and_gpu_is_where_it_applies() {
    let help = ok(&["--help"]);
    assert!(help.contains("(the shell)") && help.contains("--table <NAME=PATH>") && help.contains("--gpu <MODE>"), "{help}");
    assert!(help.contains(".help lists") && help.contains("Ctrl-C cancels"), "{help}");
    for sub in [&["gen", "tpch", "--help"][..], &["gen", "--help"][..], &["gpu", "--help"][..], &["bench", "scan", "--help"][..]] {
        let h = ok(sub);
        assert!(!h.contains("--gpu"), "ridgeline {sub:?} lists --gpu:\n{h}");
    }
    for sub in ["query", "demo", "serve"] {
        assert!(ok(&[sub, "--help"]).contains("--gpu <MODE>"), "{sub}");
    }
    // Before or after the command.
    assert_eq!(ok(&["query", "--gpu", "off", "SELECT 1 AS x", "--format", "csv"]), "x\n1\n");
    assert_eq!(ok(&["--gpu", "off", "query", "SELECT 1 AS x", "--format", "csv"]), "x\n1\n");
    let o = run(&["--gpu", "off", "gen", "skyline", "--dist", "independent", "--dims", "2", "--rows", "1", "--out", "/nonexistent/x.csv"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_lines(&o)[0].contains("--gpu does not apply to `ridgeline gen`"), "{o:?}");
    let o = run(&["--table", "t=x.csv", "gpu"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_lines(&o)[0].contains("are the shell's"), "{o:?}");
}

/// `-c` and `-f` run through the shell: dot commands work, a file's error names it.
#[test]
fn shell_c_and_f_take_dot_commands() {
    let out = ok(&["--gpu", "off", "-c", ".mode csv\nSELECT 1 AS a; SELECT NULL AS b"]);
    assert_eq!(out, "a\n1\nb\n\"\"\n");
    let out = ok(&["--gpu", "off", "-c", "SELECT value FROM generate_series(1, 100)"]);
    assert!(out.ends_with("100 rows (40 shown)\n"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.sql");
    std::fs::write(&f, "SELECT 1 AS fine;\n\nSELEC 2;\n").unwrap();
    let o = run(&["--gpu", "off", "-f", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let errs = error_lines(&o);
    assert_eq!(errs.len(), 1, "{o:?}");
    assert!(errs[0].starts_with(&format!("error: in {}: syntax error: Expected: an SQL statement, found: SELEC at Line: 3, Column: 1", f.display())), "{errs:?}");
}

/// Errors: no parser debug text, positions of planner errors, paths with their `/`.
#[test]
fn error_lines_for_people() {
    let o = run(&["--gpu", "off", "query", "SELECT 1;\nSELEC x FROM y"]);
    let errs = error_lines(&o);
    assert_eq!(errs, ["error: syntax error: Expected: an SQL statement, found: SELEC at Line: 2, Column: 1"], "{o:?}");
    let o = run(&["--gpu", "off", "query", "SELECT 1 AS a;\nSELECT\n   nope FROM (SELECT 1 AS a)"]);
    let errs = error_lines(&o);
    assert!(errs.len() == 1 && errs[0].contains("nope") && errs[0].contains("Line: 3, Column: 4"), "{errs:?}");
    let o = run(&["--gpu", "off", "query", "SELECT * FROM '/no/such/dir/x.parquet'"]);
    let errs = error_lines(&o);
    assert_eq!(errs.len(), 1, "{o:?}");
    assert!(errs[0].contains("/no/such/dir/x.parquet"), "{errs:?}");
}

/// The demo: every `N rows` line matches the rows it printed (or says how many
/// are shown), and the adapter line says what the adapter is.
#[test]
fn demo_says_what_it_shows() {
    let out = ok(&["demo", "--sf", "0.01"]);
    let mut sections = 0;
    for part in out.split("\n== ").skip(1) {
        sections += 1;
        let lines: Vec<&str> = part.lines().collect();
        let body = lines.iter().filter(|l| l.starts_with('|')).count().saturating_sub(1);
        let summary = lines.iter().find(|l| l.contains("GPU operators:")).unwrap_or_else(|| panic!("{part}"));
        let total: usize = summary.split_whitespace().next().unwrap().parse().unwrap();
        if summary.contains("shown)") {
            assert!(summary.contains(&format!("({body} shown)")) && total > body, "{part}");
        } else {
            assert_eq!(total, body, "{part}");
        }
        assert!(summary.contains("planned in") && summary.contains("ran in"), "{summary}");
    }
    assert_eq!(sections, 5, "{out}");
    let adapter = out.lines().find(|l| l.starts_with("GPU:")).unwrap();
    if gpu_expected() {
        let report = ok(&["gpu"]);
        if report.contains("Cpu") || report.to_ascii_lowercase().contains("llvmpipe") {
            assert!(adapter.contains("CPU adapter"), "{adapter}");
        }
    }
    let off = ok(&["demo", "--sf", "0.01", "--gpu", "off"]);
    assert!(off.contains("GPU: off") && off.contains("GPU operators: none (--gpu off)"), "{off}");
}

/// The interactive shell under a pseudo-terminal (through `script`): Tab
/// completes, a long statement shows a progress line, Ctrl-C cancels it and
/// the shell goes on, history is saved as it goes.
#[test]
fn interactive_shell_under_a_terminal() {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    if Command::new("script").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("skipped: no `script` (util-linux) to give the shell a terminal");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // `exec`: `script` runs the command through $SHELL (dash where SHELL is
    // unset), and a dash that waits on the shell gets the Ctrl-C too and then
    // exits with SIGINT's status after the shell quits.
    let cmd = format!("exec '{}' --gpu off", env!("CARGO_BIN_EXE_ridgeline"));
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("HOME", home.path())
        .env("TERM", "xterm")
        .env("SHELL", "/bin/sh")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let s2 = seen.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            s2.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let wait_for = |what: &str, after: usize| -> usize {
        let t = Instant::now();
        loop {
            {
                let s = seen.lock().unwrap();
                if let Some(i) = s[after.min(s.len())..].find(what) {
                    return after + i + what.len();
                }
            }
            assert!(t.elapsed() < Duration::from_secs(60), "no {what:?} in:\n{}", seen.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut at = wait_for("ridgeline> ", 0);
    // Tab completes `SEL` to `SELECT`.
    stdin.write_all(b"SEL\t 40 + 2 AS answer;\r").unwrap();
    at = wait_for("| 42     |", at);
    at = wait_for("1 row", at);
    // History is on disk before the shell ends.
    let history = home.path().join(".ridgeline_history");
    let t = Instant::now();
    while !std::fs::read_to_string(&history).unwrap_or_default().contains("SELECT 40 + 2 AS answer;") {
        assert!(t.elapsed() < Duration::from_secs(10), "history not saved: {:?}", std::fs::read_to_string(&history));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Input typed before the editor takes the terminal again may be flushed: wait for each prompt.
    stdin.write_all(b".progress 0.2\r").unwrap();
    at = wait_for(".progress 0.2", at);
    at = wait_for("ridgeline> ", at);
    stdin.write_all(b"SELECT max(value % 7) FROM generate_series(1, 1000000000000);\r").unwrap();
    at = wait_for("running for", at);
    stdin.write_all(b"\x03").unwrap();
    at = wait_for("error: interrupted (Ctrl-C)", at);
    at = wait_for("ridgeline> ", at);
    stdin.write_all(b"SELECT 'still here' AS s;\r").unwrap();
    at = wait_for("still here", at);
    at = wait_for("ridgeline> ", at);
    // Ctrl-C at the prompt drops the line being typed.
    stdin.write_all(b"SELECT 'dropped'\x03").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stdin.write_all(b"SELECT 'kept' AS k;\r").unwrap();
    at = wait_for("| kept |", at);
    stdin.write_all(b".quit\r").unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the shell did not quit:\n{}", seen.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    let all = seen.lock().unwrap().clone();
    assert!(status.success(), "{status}:\n{all}");
    assert!(!all[at..].contains("dropped"), "{all}");
    assert!(!all.contains("panicked"), "{all}");
}
