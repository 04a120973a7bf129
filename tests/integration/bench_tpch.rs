//! `ridgeline bench tpch` through the built binary, at SF 0.01.
use crate::common;

use common::duckdb_python;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ridgeline"))
}

fn gpu_expected() -> bool {
    std::env::var("RIDGELINE_GPU").is_ok_and(|v| v == "on")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn ok(o: Output, what: &str) -> String {
    assert!(o.status.success(), "{what} failed:\n{}\n{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    stdout(&o)
}

/// The table row of query `q` (cells trimmed).
fn row(out: &str, q: &str) -> Vec<String> {
    out.lines()
        .find(|l| l.split('|').next().is_some_and(|c| c.trim() == q))
        .unwrap_or_else(|| panic!("no row for {q}:\n{out}"))
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn cpu_and_gpu_side_by_side_with_check() {
    let args = ["bench", "tpch", "--sf", "0.01", "--queries", "1,6", "--iterations", "1", "--check", "--gpu", "both"];
    let out = ok(bin().args(args).output().unwrap(), "bench tpch");
    let header = out.lines().find(|l| l.starts_with("query")).unwrap_or_else(|| panic!("no header:\n{out}"));
    assert!(header.contains("CPU min ms") && header.contains("CPU med ms") && header.contains("rows"), "{out}");
    let gpu = !out.contains("GPU: unavailable");
    if gpu_expected() {
        assert!(gpu, "RIDGELINE_GPU=on but no GPU:\n{out}");
    }
    for q in ["q1", "q6"] {
        let r = row(&out, q);
        let expected_rows = if q == "q1" { "4" } else { "1" };
        if gpu {
            assert!(header.contains("GPU med ms") && header.contains("CPU/GPU") && header.contains("GPU operators"), "{out}");
            assert_eq!(r.last().unwrap(), "OK", "{q} check:\n{out}");
            assert!(r.iter().any(|c| c == expected_rows), "{q} rows:\n{out}");
            // CPU min, CPU med, GPU min, GPU med, ratio are numbers
            for c in &r[1..6] {
                assert!(c.parse::<f64>().is_ok(), "{q}: '{c}' is not a number:\n{out}");
            }
        } else {
            assert_eq!(r.last().unwrap(), "-", "{out}");
        }
    }
    assert!(out.lines().any(|l| l.starts_with("geomean")), "{out}");
    assert!(out.contains("check: "), "{out}");
}

#[test]
fn gpu_only_on_resident_tables() {
    if !gpu_expected() {
        eprintln!("skipped: RIDGELINE_GPU is not 'on'");
        return;
    }
    let args = ["bench", "tpch", "--sf", "0.01", "--queries", "6", "--iterations", "1", "--gpu", "on", "--gpu-column", "on", "--resident"];
    let out = ok(bin().args(args).output().unwrap(), "bench tpch --gpu on --resident");
    assert!(out.contains("GPU-resident"), "{out}");
    let header = out.lines().find(|l| l.starts_with("query")).unwrap();
    assert!(!header.contains("CPU min ms") && header.contains("GPU min ms"), "{out}");
    let r = row(&out, "q6");
    // Q6 over a resident table runs as one GPU aggregation reading the resident columns.
    assert!(r.last().unwrap().contains("Aggregate"), "GpuAggregateExec expected on a resident table:\n{out}");
}

#[test]
fn errors_are_clear() {
    let o = bin().args(["bench", "tpch", "--sf", "0.01", "--queries", "23"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a TPC-H query number"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let o = bin()
        .args(["bench", "tpch", "--sf", "0.01", "--queries", "6", "--gpu", "on"])
        .env("RIDGELINE_ADAPTER", "no-such-adapter-xyz")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("GPU is unavailable"), "{err}");
    let o = bin().args(["bench", "tpch", "--sf", "0.01", "--gpu", "sometimes"]).output().unwrap();
    assert!(!o.status.success());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nation.parquet"), b"not parquet").unwrap();
    let o = bin().args(["bench", "tpch", "--sf", "0.01", "--data", dir.path().to_str().unwrap()]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds some TPC-H tables but not"), "{err}");
}

#[test]
fn duckdb_column_on_the_same_parquet_files() {
    let Some(py) = duckdb_python() else {
        eprintln!("skipped: no python that can import duckdb (set RIDGELINE_PYTHON, or create .venv-duckdb)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tpch");
    let args = ["bench", "tpch", "--sf", "0.01", "--queries", "1,6,13", "--iterations", "1", "--gpu", "off", "--duckdb", "--data"];
    let out = ok(bin().args(args).arg(&data).env("RIDGELINE_PYTHON", &py).output().unwrap(), "bench tpch --duckdb");
    assert!(data.join("lineitem.parquet").is_file(), "the data should have been written to --data");
    let header = out.lines().find(|l| l.starts_with("query")).unwrap();
    assert!(header.contains("DuckDB min ms") && header.contains("DuckDB med ms"), "{out}");
    assert!(out.contains("DuckDB ") && out.contains("threads"), "{out}");
    for q in ["q1", "q6", "q13"] {
        let r = row(&out, q);
        // query | CPU min | CPU med | DuckDB min | DuckDB med | rows
        assert_eq!(r.len(), 6, "{out}");
        for c in &r[1..5] {
            assert!(c.parse::<f64>().is_ok(), "{q}: '{c}' is not a number:\n{out}");
        }
        assert!(r[5].parse::<usize>().is_ok(), "{q}: DuckDB's row count differs: {}\n{out}", r[5]);
    }
    // the second run reuses the files
    let out2 = ok(bin().args(args).arg(&data).env("RIDGELINE_PYTHON", &py).output().unwrap(), "bench tpch --duckdb again");
    assert!(out2.contains(&format!("read from {}", data.display())), "{out2}");
}
