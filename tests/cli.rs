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
fn sql_errors_are_one_line_with_position() {
    let o = run(&["query", "SELECT 1;\nSELEC x FROM y"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("Line: 2, Column: 1"), "position should point into the original text: {err}");
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
        .write_all(b"CREATE TABLE t AS VALUES (1), (2);\nSELECT\n sum(column1) AS total\nFROM t;\n.tables\n.schema t\n.timer on\nSELECT 40 + 2 AS answer;\n.gpu\n.bogus\n.quit\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("| 3     |"), "{out}");
    assert!(out.contains("column1 Int64"), "{out}");
    assert!(out.contains("| 42     |") && out.contains("time:"), "{out}");
    assert!(out.contains("gpu mode: off"), "{out}");
    assert!(err.contains("unknown command .bogus"), "{err}");
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
