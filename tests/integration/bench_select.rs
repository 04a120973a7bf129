//! `ridgeline bench select` through the built binary, at 2^12 keys: the table, the
//! interleaved variants of the approximate median (`--approx-variants`) and
//! DuckDB's quantile_cont column (`--duckdb`, where a Python with duckdb exists).
use crate::common;

use common::duckdb_python;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ridgeline"))
}

fn gpu_expected() -> bool {
    std::env::var("RIDGELINE_GPU").is_ok_and(|v| v == "on")
}

fn ok(o: Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{what} failed:\n{out}\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// The cells of the first line whose first cell is `first`.
fn row(out: &str, first: &str) -> Vec<String> {
    out.lines()
        .find(|l| l.split('|').nth(1).is_some_and(|c| c.trim() == first))
        .unwrap_or_else(|| panic!("no row for {first}:\n{out}"))
        .split('|')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn table_and_approximate_variants() {
    if !gpu_expected() {
        eprintln!("skipped: RIDGELINE_GPU=on runs it (bench select needs an adapter)");
        return;
    }
    let args = ["bench", "select", "--min-log2", "12", "--max-log2", "12", "--iterations", "1", "--approx-variants"];
    let out = ok(bin().args(args).output().unwrap(), "bench select --approx-variants");
    let r = row(&out, "2^12");
    assert_eq!(r.len(), 17, "{out}");
    // Times are numbers; without --duckdb its column is '-'.
    for c in [&r[1], &r[2], &r[3], &r[9], &r[14], &r[15]] {
        assert!(c.parse::<f64>().is_ok(), "'{c}' is not a number:\n{out}");
    }
    assert_eq!(r[16], "-", "{out}");
    // Every variant: min and median ms, a rank error within its bound (the bench
    // fails otherwise) and the algorithm that answered.
    assert!(out.contains("approximate median variants at n = 4096"), "{out}");
    for v in [
        "cells of key space, 4 keys an invocation",
        "splitters, 4 keys an invocation, windows of 3 sd",
        "splitters, ap_hist (no subgroups)",
        "the chain (exact)",
        "sample sorted through workgroup memory only",
    ] {
        let r = row(&out, v);
        assert_eq!(r.len(), 5, "{v}:\n{out}");
        let (min, med): (f64, f64) = (r[1].parse().unwrap(), r[2].parse().unwrap());
        assert!(min > 0.0 && min <= med, "{v}: min {min}, median {med}");
        assert!(r[4].starts_with("gpu-sampleselect"), "{v}: {}", r[4]);
    }
}

#[test]
fn duckdb_quantile_cont_column() {
    if !gpu_expected() {
        eprintln!("skipped: RIDGELINE_GPU=on runs it (bench select needs an adapter)");
        return;
    }
    let Some(py) = duckdb_python() else {
        eprintln!("skipped: no python that can import duckdb (set RIDGELINE_PYTHON, or create .venv-duckdb)");
        return;
    };
    let args = ["bench", "select", "--min-log2", "12", "--max-log2", "13", "--iterations", "1", "--duckdb"];
    let out = ok(bin().args(args).env("RIDGELINE_PYTHON", &py).output().unwrap(), "bench select --duckdb");
    for n in ["2^12", "2^13"] {
        let r = row(&out, n);
        // The bench checks DuckDB's answer against the CPU path's interpolated median.
        assert!(r[16].parse::<f64>().is_ok_and(|ms| ms > 0.0), "{n}: DuckDB column '{}':\n{out}", r[16]);
    }
}
