//! The shell through its library API (`Shell::line` into a `Vec<u8>`): dot
//! commands, the bounded table display, output redirection, `.read`, exit
//! words, Ctrl-C (the `Interrupt` handle), completion and error lines. The
//! terminal itself (SIGINT, Tab, history, the progress line) is tested under a
//! pseudo-terminal in `cli.rs`.
use datafusion::error::DataFusionError;
use ridgeline::cli::complete::Names;
use ridgeline::cli::demo::{adapter_line, result_line};
use ridgeline::cli::output::error_line;
use ridgeline::cli::shell::Shell;
use ridgeline::GpuMode;
use std::time::{Duration, Instant};

fn shell() -> Shell {
    Shell::new(ridgeline::cli::engine(Some(GpuMode::Off)).unwrap())
}

/// Feeds lines; returns what they printed, or the first error's line.
async fn feed(sh: &mut Shell, text: &str) -> Result<String, String> {
    let mut out = Vec::new();
    for l in text.lines() {
        sh.line(l, &mut out).await.map_err(|e| error_line(&e))?;
    }
    Ok(String::from_utf8(out).unwrap())
}

async fn ok(sh: &mut Shell, text: &str) -> String {
    feed(sh, text).await.unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The first cells of a table's body rows.
fn first_cells(table: &str) -> Vec<String> {
    let lines: Vec<&str> = table.lines().filter(|l| l.starts_with('|')).collect();
    lines.iter().skip(1).map(|l| l.split('|').nth(1).unwrap().trim().to_string()).collect()
}

#[tokio::test]
async fn nulls_footer_and_ddl() {
    let mut sh = shell();
    assert_eq!(ok(&mut sh, "CREATE TABLE t AS VALUES (1, 'a'), (2, NULL), (NULL, 'c');").await, "", "DDL prints nothing");
    assert_eq!(ok(&mut sh, "SET datafusion.execution.batch_size = 4096;").await, "");
    let out = ok(&mut sh, "SELECT column1 AS x, column2 AS y FROM t ORDER BY x NULLS LAST;").await;
    assert_eq!(first_cells(&out), ["1", "2", "NULL"], "{out}");
    assert!(out.contains("| 2    | NULL |"), "{out}");
    assert!(out.ends_with("+\n3 rows\n"), "{out}");
    assert!(ok(&mut sh, "SELECT 1 AS one;").await.ends_with("\n1 row\n"));
    // No rows: the header and `0 rows`.
    let out = ok(&mut sh, "SELECT column1 AS a FROM t WHERE false;").await;
    assert!(out.contains("| a |") && out.ends_with("0 rows\n"), "{out}");
    // INSERT reports its count like a query.
    let out = ok(&mut sh, "INSERT INTO t VALUES (4, 'd');").await;
    assert!(out.contains("count") && out.ends_with("1 row\n"), "{out}");
    // CSV and JSON keep NULL as an empty field and null.
    assert_eq!(ok(&mut sh, ".mode csv\nSELECT column2 AS y FROM t WHERE column1 = 2;").await, "y\n\"\"\n");
    assert_eq!(ok(&mut sh, ".format json\nSELECT column2 AS y FROM t WHERE column1 = 2;").await, "[{\"y\":null}]\n");
    assert_eq!(ok(&mut sh, ".format\n").await, "format: json\n");
}

#[tokio::test]
async fn the_table_display_is_bounded() {
    let mut sh = shell();
    let out = ok(&mut sh, "SELECT value FROM generate_series(1, 1000) ORDER BY value;").await;
    let cells = first_cells(&out);
    let want: Vec<String> = (1..=20).map(|i| i.to_string()).chain(["…".to_string()]).chain((981..=1000).map(|i| i.to_string())).collect();
    assert_eq!(cells, want, "{out}");
    assert!(out.ends_with("1000 rows (40 shown)\n"), "{out}");
    // Bounds that split unevenly, and batches smaller than the bound.
    ok(&mut sh, ".maxrows 3\nSET datafusion.execution.batch_size = 2;").await;
    let out = ok(&mut sh, "SELECT value FROM generate_series(1, 9) ORDER BY value;").await;
    assert_eq!(first_cells(&out), ["1", "2", "…", "9"], "{out}");
    assert!(out.ends_with("9 rows (3 shown)\n"), "{out}");
    let out = ok(&mut sh, "SELECT value FROM generate_series(1, 3) ORDER BY value;").await;
    assert_eq!(first_cells(&out), ["1", "2", "3"], "{out}");
    assert!(out.ends_with("3 rows\n"), "{out}");
    // .maxrows 0 shows every row; CSV always does.
    let out = ok(&mut sh, ".maxrows 0\nSELECT value FROM generate_series(1, 100) ORDER BY value;").await;
    assert_eq!(first_cells(&out).len(), 100);
    assert!(out.ends_with("100 rows\n"), "{out}");
    let out = ok(&mut sh, ".maxrows 2\n.mode csv\nSELECT value FROM generate_series(1, 100);").await;
    assert_eq!(out.lines().count(), 101);
    let e = feed(&mut sh, ".maxrows many").await.unwrap_err();
    assert!(e.contains(".maxrows expects a number"), "{e}");
}

#[tokio::test]
async fn enum_options_list_their_values() {
    let mut sh = shell();
    for (cmd, want) in [
        (".mode box", ".mode expects table, csv or json, not 'box'"),
        (".format xml", ".format expects table, csv or json, not 'xml'"),
        (".timer maybe", ".timer expects on or off, not 'maybe'"),
        (".gpu sideways", ".gpu expects off, auto or on, not 'sideways'"),
        (".progress soon", ".progress expects on, off or a number of seconds, not 'soon'"),
    ] {
        let e = feed(&mut sh, cmd).await.unwrap_err();
        assert!(e.contains(want), "{cmd}: {e}");
    }
    let e = feed(&mut sh, "SET ridgeline.gpu = 'sideways';").await.unwrap_err();
    assert!(e.contains("must be off, auto or on"), "{e}");
}

#[tokio::test]
async fn output_and_once_redirect_results() {
    let dir = tempfile::tempdir().unwrap();
    let (once, all) = (dir.path().join("once.txt"), dir.path().join("all.csv"));
    let mut sh = shell();
    let out = ok(&mut sh, &format!(".once {}\nSELECT 1 AS a;\nSELECT 2 AS b;", once.display())).await;
    assert!(!out.contains("| a |") && out.contains("| b |"), "only the next result goes to the file: {out}");
    let text = std::fs::read_to_string(&once).unwrap();
    assert!(text.contains("| a |") && text.ends_with("1 row\n"), "{text}");
    let out = ok(&mut sh, &format!(".mode csv\n.output {}\nSELECT 3 AS c;\n.tables\nSELECT 4 AS d;\n.output\nSELECT 5 AS e;", all.display())).await;
    assert_eq!(out, "e\n5\n");
    assert_eq!(std::fs::read_to_string(&all).unwrap(), "c\n3\ntable_name\nd\n4\n");
    let e = feed(&mut sh, ".output /no/such/dir/x.txt").await.unwrap_err();
    assert!(e.contains("cannot write /no/such/dir/x.txt"), "{e}");
    assert_eq!(ok(&mut sh, "SELECT 6 AS f;").await, "f\n6\n", "a failed .output leaves results on the terminal");
}

/// `.read` nests futures: run it on a stack as large as the binary's threads'.
#[test]
fn read_runs_a_file_and_stops_at_its_first_error() {
    std::thread::Builder::new()
        .stack_size(ridgeline::WORKER_STACK_BYTES)
        .spawn(|| tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(read_file_checks()))
        .unwrap()
        .join()
        .unwrap();
}

async fn read_file_checks() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("script.sql");
    std::fs::write(&f, ".mode csv\n-- a comment\nSELECT 7 AS s;\nSELECT\n  nope FROM (SELECT 1 AS a);\nSELECT 8 AS not_run;\n").unwrap();
    let mut sh = shell();
    let mut out = Vec::new();
    let e = sh.line(&format!(".read {}", f.display()), &mut out).await.unwrap_err();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out, "s\n7\n");
    let line = error_line(&e);
    assert!(line.starts_with(&format!("in {}: ", f.display())), "{line}");
    assert!(line.contains("nope") && line.contains("Line: 5, Column: 3"), "the position counts from the file's start: {line}");
    // The mode the file set carries on; the shell goes on.
    assert_eq!(ok(&mut sh, "SELECT 9 AS n;").await, "n\n9\n");
    // A file that reads itself stops, and .read of a missing file is one error.
    let me = dir.path().join("me.sql");
    std::fs::write(&me, format!(".read {}\n", me.display())).unwrap();
    let e = feed(&mut sh, &format!(".read {}", me.display())).await.unwrap_err();
    assert!(e.contains("more than 8 deep"), "{e}");
    let e = feed(&mut sh, ".read /no/such/file.sql").await.unwrap_err();
    assert!(e.contains("cannot read /no/such/file.sql"), "{e}");
    // .quit inside a file ends the shell.
    let q = dir.path().join("quit.sql");
    std::fs::write(&q, "SELECT 1 AS x;\n.quit\nSELECT 2 AS y;\n").unwrap();
    let mut out = Vec::new();
    assert!(!sh.line(&format!(".read {}", q.display()), &mut out).await.unwrap());
    assert!(!String::from_utf8(out).unwrap().contains('y'));
}

#[tokio::test]
async fn exit_words_leave() {
    let mut out = Vec::new();
    for w in [".quit", ".exit", "\\q", "exit", "quit;", "  EXIT ; "] {
        assert!(!shell().line(w, &mut out).await.unwrap(), "{w}");
    }
    // Inside a statement, `exit` is SQL text, not a command.
    let mut sh = shell();
    assert!(sh.line("SELECT 1 AS", &mut out).await.unwrap());
    assert!(sh.line("exit", &mut out).await.unwrap());
    assert!(sh.has_pending());
    assert!(sh.line(";", &mut out).await.unwrap());
    assert!(String::from_utf8(out).unwrap().contains("| exit |"));
    let e = feed(&mut shell(), "\\dt").await.unwrap_err();
    assert!(e.contains("unknown command \\dt"), "{e}");
    let help = ok(&mut shell(), ".help").await;
    for c in [".read FILE", ".output [FILE]", ".once FILE", ".mode", ".maxrows", ".quit"] {
        assert!(help.contains(c), "{c}: {help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_cancels_the_running_statement() {
    let mut sh = shell();
    let stop = sh.interrupter();
    // An interrupt while nothing runs is forgotten.
    stop.interrupt();
    assert_eq!(ok(&mut sh, ".mode csv\nSELECT 1 AS one;").await, "one\n1\n");
    let t = Instant::now();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.interrupt();
    });
    let e = feed(&mut sh, "SELECT max(value % 7) FROM generate_series(1, 1000000000000);").await.unwrap_err();
    timer.await.unwrap();
    assert_eq!(e, "interrupted (Ctrl-C)");
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
    // The shell goes on, with nothing pending.
    assert!(!sh.has_pending());
    assert_eq!(ok(&mut sh, "SELECT 2 AS two;").await, "two\n2\n");
}

#[tokio::test]
async fn completion_offers_tables_columns_and_words() {
    let mut sh = shell();
    ok(&mut sh, "CREATE TABLE people (id INT, name VARCHAR, \"Score\" DOUBLE);\nCREATE TABLE orders (o_id INT, o_total DOUBLE);").await;
    sh.refresh_names().await;
    let (start, v) = sh.complete("SELECT na FROM people", 9);
    assert_eq!(start, 7);
    assert!(v.contains(&"name".to_string()) && !v.contains(&"o_id".to_string()), "{v:?}");
    assert_eq!(sh.complete("select * from peo", 17), (14, vec!["people".to_string()]));
    assert_eq!(sh.complete("SELECT people.", 14).1, ["\"Score\"", "id", "name"]);
    assert!(sh.complete("SELECT coun", 11).1.contains(&"count".to_string()));
    // The statement's earlier lines count: orders is named on the line before.
    ok(&mut sh, "SELECT * FROM orders WHERE").await;
    assert_eq!(sh.complete("o_t", 3).1, ["o_total"]);
    sh.clear();

    let n = Names {
        tables: vec![("orders".into(), vec!["o_id".into(), "o_total".into()]), ("people".into(), vec!["id".into(), "name".into(), "Score".into()])],
        functions: vec!["count".into(), "nanvl".into()],
    };
    assert_eq!(n.complete("", "SEL", 3), (0, vec!["SELECT".to_string()]));
    assert_eq!(n.complete("", "sel", 3), (0, vec!["select".to_string()]));
    assert_eq!(n.complete("", "select na from people", 9), (7, vec!["name".to_string(), "nanvl".into(), "natural".into()]));
    assert_eq!(n.complete("select *\n", "from people where s", 19).1, ["\"Score\"", "select", "semi", "set", "show", "skyline", "smallint", "stored"]);
    assert_eq!(n.complete("", "select o_ from people, orders", 9).1, ["o_id", "o_total"]);
    assert_eq!(n.complete("", ".ti", 3), (0, vec![".timer".to_string()]));
    assert_eq!(n.complete("", ".mode c", 7), (6, vec!["csv".to_string()]));
    assert_eq!(n.complete("", ".schema or", 10), (8, vec!["orders".to_string()]));
    assert_eq!(n.complete("", ".explain select o_ from orders", 18), (16, vec!["o_id".to_string(), "o_total".into()]));
    assert!(n.complete("select\n", ".ti", 3).1.is_empty(), "a dot command only starts a statement");
    assert!(n.complete("", "select ", 7).1.is_empty());
}

#[tokio::test]
async fn errors_are_one_line_with_positions() {
    let mut sh = shell();
    let e = feed(&mut sh, "SELECT 1;\nSELEC 2;").await.unwrap_err();
    assert!(e.starts_with("syntax error: Expected: an SQL statement, found: SELEC"), "{e}");
    assert!(e.contains("Line: 1, Column: 1") && !e.contains("ParserError"), "{e}");
    let e = feed(&mut sh, "SELECT 'open;").await;
    assert!(e.is_ok(), "an open string waits for more");
    sh.clear();
    // A planner error knows its position (the statement's second line).
    let e = feed(&mut sh, "SELECT\n  nope FROM (SELECT 1 AS a);").await.unwrap_err();
    assert!(e.contains("nope") && e.contains("Line: 2, Column: 3"), "{e}");
    // Inside SKYLINE OF, the error names the user's expression.
    let e = feed(&mut sh, "SELECT a FROM (SELECT 1 AS a) SKYLINE OF nope MIN;").await.unwrap_err();
    assert!(e.contains("nope") && !e.contains("__ridgeline"), "{e}");
}

#[test]
fn demo_lines_say_what_they_show() {
    assert_eq!(result_line(4, 4, 1.0, 2.0, &[], Some("no GPU")), "4 rows; planned in 1.0 ms, ran in 2.0 ms; GPU operators: none (no GPU)");
    assert!(result_line(17, 5, 1.0, 2.0, &["GpuScanExec".into()], None).starts_with("17 rows (5 shown);"));
    assert!(result_line(1, 1, 0.0, 0.0, &[], None).starts_with("1 row;"));
    let l = adapter_line(GpuMode::Auto, "llvmpipe", "Vulkan", true);
    assert!(l.contains("is a CPU adapter") && l.contains("--gpu on"), "{l}");
    assert_eq!(adapter_line(GpuMode::Auto, "H200", "Vulkan", false), "GPU: H200 (Vulkan)");
}

#[test]
fn error_lines_have_no_debug_text() {
    use datafusion::sql::sqlparser::parser::ParserError;
    let e = DataFusionError::Context(
        "in a.sql".into(),
        Box::new(DataFusionError::SQL(Box::new(ParserError::TokenizerError("Unterminated string literal at Line: 3, Column: 8".into())), None)),
    );
    assert_eq!(error_line(&e), "in a.sql: syntax error: Unterminated string literal at Line: 3, Column: 8");
}
