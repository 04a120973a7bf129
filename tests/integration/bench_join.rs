//! `ridgeline bench join` through the built binary, at sizes lavapipe runs in
//! seconds: both tables print, the whole-query table covers one key column and
//! two (packed and hashed), and the bench's own checks (GPU pairs against the
//! CPU path and DataFusion, and a plan with `GpuHashJoinExec`) pass.
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ridgeline"))
}

/// The table rows (lines starting with `| 2^`).
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines().filter(|l| l.starts_with("| 2^")).map(|l| l.split('|').map(|c| c.trim().to_string()).collect()).collect()
}

#[test]
fn primitives_and_whole_queries_with_one_and_two_key_columns() {
    let o = bin()
        .args(["bench", "join", "--build-log2", "8", "--probe-log2", "11", "--rates", "50,100", "--iterations", "1", "--sql-max-log2", "11"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "bench join failed:\n{out}\n{}", String::from_utf8_lossy(&o.stderr));
    let rows = rows(&out);
    // 2 primitive rows (one per rate), then 2 rates x 3 layouts.
    assert_eq!(rows.len(), 8, "{out}");
    let prim: Vec<_> = rows.iter().filter(|r| r.len() == 13).collect();
    assert_eq!(prim.len(), 2, "{out}");
    // At 100% every probe row meets its one build row.
    assert!(prim.iter().any(|r| r[3] == "100" && r[4] == "2048"), "{out}");
    let whole: Vec<_> = rows.iter().filter(|r| r.len() == 10).collect();
    assert_eq!(whole.len(), 6, "{out}");
    for layout in ["1", "2 packed", "2 hashed"] {
        let r = whole.iter().find(|r| r[4] == layout && r[3] == "100").unwrap_or_else(|| panic!("no {layout} row:\n{out}"));
        assert_eq!(r[5], "2048", "{out}");
    }
    // The pairs at 50% are the same for every layout (the same single keys).
    let half: Vec<_> = whole.iter().filter(|r| r[3] == "50").map(|r| r[5].clone()).collect();
    assert!(half.windows(2).all(|w| w[0] == w[1]), "{out}");
}

#[test]
fn unknown_key_layout_is_a_clear_error() {
    let o = bin().args(["bench", "join", "--build-log2", "4", "--probe-log2", "4", "--sql-keys", "3"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--sql-keys: '3' is not one of 1, 2, 2h"), "{err}");
}
