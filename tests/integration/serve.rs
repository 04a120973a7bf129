//! `ridgeline serve`: HTTP and Flight SQL answers, limits, bad input over the wire,
//! cancellation, and 50 concurrent clients under load.
use crate::server;

use arrow::array::RecordBatch;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use ridgeline::Ridgeline;
use server::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Queries the tests check, each with ORDER BY so answers are deterministic.
const QUERIES: &[&str] = &[
    "SELECT n_name, r_name FROM nation JOIN region ON n_regionkey = r_regionkey ORDER BY n_name",
    "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, count(*) AS c FROM lineitem GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= DATE '1994-01-01' \
     AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    "SELECT o_orderpriority, count(*) AS n FROM orders WHERE o_totalprice > 100000 GROUP BY 1 ORDER BY 1",
    "SELECT c_custkey, c_acctbal FROM customer ORDER BY c_acctbal DESC, c_custkey LIMIT 7",
    "SELECT p_partkey, p_retailprice FROM part WHERE p_size = 15 ORDER BY p_partkey LIMIT 20",
];

/// The same answers from an embedded engine over the same generated data.
async fn expected() -> HashMap<&'static str, serde_json::Value> {
    let rl = Ridgeline::builder().gpu_mode(ridgeline::GpuMode::Off).build().unwrap();
    for (name, batches) in ridgeline::gen::tpch::generate_all(0.01).unwrap() {
        rl.register_batches(&name, ridgeline::gen::tpch::table_schema(&name).unwrap(), batches).unwrap();
    }
    let mut out = HashMap::new();
    for q in QUERIES {
        let b = rl.sql(q).await.unwrap().collect().await.unwrap();
        out.insert(*q, json_rows(&b));
    }
    out
}

async fn flight_client(s: &Server) -> FlightSqlServiceClient<Channel> {
    let ch = Channel::from_shared(format!("http://{}", s.flight)).unwrap().connect().await.expect("connect Flight SQL");
    let mut c = FlightSqlServiceClient::new(ch);
    c.set_header("authorization", format!("Bearer {TOKEN}"));
    c
}

async fn flight_query(c: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let info = c.execute(sql.to_string(), None).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for ep in info.endpoint {
        let ticket = ep.ticket.ok_or("no ticket")?;
        let s = c.do_get(ticket).await.map_err(|e| e.to_string())?;
        out.extend(s.try_collect::<Vec<_>>().await.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_json_arrow_and_flight_sql_answers() {
    let mut s = Server::start(&[]);
    let exp = expected().await;
    let mut fc = flight_client(&s).await;
    for q in QUERIES {
        let r = query(s.http, q, None).await;
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        assert!(r.header("content-type").unwrap().starts_with("application/json"));
        let j = r.json();
        assert_eq!(j["rows"], exp[q], "HTTP JSON answer of {q}");
        assert_eq!(j["row_count"].as_u64().unwrap() as usize, exp[q].as_array().unwrap().len());
        assert!(j["columns"].as_array().unwrap().iter().all(|c| c["name"].is_string() && c["type"].is_string()));

        let r = query(s.http, q, Some("application/vnd.apache.arrow.stream")).await;
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/vnd.apache.arrow.stream"));
        assert_eq!(json_rows(&read_ipc(&r.body)), exp[q], "HTTP Arrow answer of {q}");

        let b = flight_query(&mut fc, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(json_rows(&b), exp[q], "Flight SQL answer of {q}");
    }
    // JSON answers keep NULL columns and spell non-finite floats (as the CLI does).
    let r = query(s.http, "SELECT 1 AS a, NULL AS b, 'NaN'::double AS c", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rows"], serde_json::json!([{"a": 1, "b": null, "c": "NaN"}]), "{}", r.text());
    // Prepared statements (what JDBC uses), without parameters.
    let mut p = fc.prepare(QUERIES[0].to_string(), None).await.expect("prepare");
    assert_eq!(p.dataset_schema().unwrap().fields().len(), 2);
    let info = p.execute().await.expect("execute prepared");
    let t = info.endpoint[0].ticket.clone().unwrap();
    let b: Vec<RecordBatch> = fc.do_get(t).await.unwrap().try_collect().await.unwrap();
    assert_eq!(json_rows(&b), exp[QUERIES[0]]);
    p.close().await.expect("close prepared");
    // SKYLINE OF over the wire.
    let r = query(s.http, "SELECT count(*) AS n FROM (SELECT * FROM part SKYLINE OF p_retailprice MIN, p_size MAX)", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["rows"][0]["n"].as_u64().unwrap() >= 1);
    let h = s.health().await;
    assert_eq!(h["queries"]["failed"], 0, "{h}");
    assert!(h["queries"]["ok"].as_u64().unwrap() >= 3 * QUERIES.len() as u64, "{h}");

    // Deep expressions (they used to overflow a worker's stack and abort the
    // server): an answer or a clear error, over HTTP and Flight SQL, and the
    // server keeps serving.
    let or_chain = |n: usize| {
        let terms: Vec<String> = (0..n).map(|i| format!("n_nationkey = {i}")).collect();
        format!("SELECT count(*) AS n FROM nation WHERE {}", terms.join(" OR "))
    };
    let union = {
        let parts: Vec<String> = (0..1000).map(|i| format!("SELECT {i} AS v")).collect();
        format!("SELECT count(*) AS n FROM ({})", parts.join(" UNION ALL "))
    };
    for (sql, n) in [(or_chain(1000), 25), (or_chain(5000), 25), (union, 1000)] {
        let r = query(s.http, &sql, None).await;
        let what = &sql[..60];
        match r.status {
            200 => assert_eq!(r.json()["rows"][0]["n"], n, "{what}"),
            400 | 500 | 503 => assert!(r.json()["error"].is_string(), "{what}: {}", r.text()),
            other => panic!("{what}: status {other}: {}", r.text()),
        }
        eprintln!("{what}...: HTTP {}", r.status);
        match flight_query(&mut fc, &sql).await {
            Ok(b) => assert_eq!(json_rows(&b)[0]["n"], n, "{what}"),
            Err(e) => assert!(!e.is_empty() && !e.contains("transport error"), "{what}: {e}"),
        }
        assert!(s.alive(), "server died on {what}:\n{}", s.stderr());
        let r = query(s.http, "SELECT count(*) AS n FROM region", None).await;
        assert_eq!(r.json()["rows"][0]["n"], 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_error_answers_and_the_server_keeps_serving() {
    let mut s = Server::start(&["--max-request-bytes", "4096"]);
    // Malformed SQL: 400 with the position.
    let r = query(s.http, "SELECT * FRM nation", None).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let j = r.json();
    assert_eq!(j["kind"], "bad_request");
    assert!(j["error"].as_str().unwrap().contains("Line: 1, Column"), "{j}");
    // Unknown table and column.
    let r = query(s.http, "SELECT * FROM no_such_table", None).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("no_such_table"), "{}", r.text());
    let r = query(s.http, "SELECT no_such_column FROM nation", None).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("no_such_column"), "{}", r.text());
    // Statements that would change the shared catalog are refused.
    for ddl in ["CREATE TABLE t AS SELECT 1", "DROP TABLE nation", "SET datafusion.execution.batch_size = 1", "INSERT INTO nation VALUES (1,'x',1,'y')"] {
        let r = query(s.http, ddl, None).await;
        assert_eq!(r.status, 400, "{ddl}: {}", r.text());
    }
    // SQL cannot read the server's files (the service turns ridgeline.file_access off).
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("secret.csv");
    std::fs::write(&csv, "a\n1\n").unwrap();
    for q in [format!("SELECT * FROM '{}'", csv.display()), format!("SELECT * FROM read_csv('{}')", csv.display())] {
        let r = query(s.http, &q, None).await;
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("ridgeline.file_access"), "{}", r.text());
    }
    // Oversized request: 413.
    let big = format!("SELECT 1 /* {} */", "x".repeat(10_000));
    let r = query(s.http, &big, None).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["kind"], "too_large");
    // Empty and non-UTF-8 bodies.
    let r = query(s.http, "   ", None).await;
    assert_eq!(r.status, 400);
    let auth = format!("Bearer {TOKEN}");
    let r = http(s.http, "POST", "/query", &[("Authorization", &auth)], &[0xff, 0xfe, 0x00]).await;
    assert_eq!(r.status, 400);
    // Token: missing and wrong.
    let r = http(s.http, "POST", "/query", &[], b"SELECT 1").await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = http(s.http, "POST", "/query", &[("Authorization", "Bearer nope")], b"SELECT 1").await;
    assert_eq!(r.status, 401);
    // Unknown path.
    let r = http(s.http, "GET", "/nope", &[], b"").await;
    assert_eq!(r.status, 404);
    // A request that is not HTTP at all.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(s.http).await.unwrap();
        c.write_all(b"\x16\x03\x01 garbage\r\n\r\n").await.unwrap();
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut sink)).await;
    }
    // Flight SQL: the same errors as gRPC statuses.
    let mut fc = flight_client(&s).await;
    let e = flight_query(&mut fc, "SELECT * FRM nation").await.unwrap_err();
    assert!(e.contains("InvalidArgument") || e.contains("invalid argument") || e.contains("Invalid argument"), "{e}");
    let e = flight_query(&mut fc, "SELECT * FROM no_such_table").await.unwrap_err();
    assert!(e.contains("no_such_table"), "{e}");
    let e = flight_query(&mut fc, &big).await.unwrap_err();
    assert!(e.contains("too large") || e.contains("larger"), "{e}");
    let mut anon = FlightSqlServiceClient::new(Channel::from_shared(format!("http://{}", s.flight)).unwrap().connect().await.unwrap());
    let e = flight_query(&mut anon, "SELECT 1").await.unwrap_err();
    assert!(e.contains("authentication credentials") && e.contains("Bearer"), "{e}");
    // Handshake with the token as password gives the bearer token.
    anon.handshake("anyone", TOKEN).await.expect("handshake");
    assert_eq!(flight_query(&mut anon, "SELECT 1 AS one").await.unwrap()[0].num_rows(), 1);
    let mut fresh = FlightSqlServiceClient::new(Channel::from_shared(format!("http://{}", s.flight)).unwrap().connect().await.unwrap());
    assert!(fresh.handshake("anyone", "wrong").await.is_err());
    // Still serving, nothing left running.
    let r = query(s.http, "SELECT count(*) AS n FROM nation", None).await;
    assert_eq!(r.json()["rows"][0]["n"], 25);
    assert!(s.alive(), "server died:\n{}", s.stderr());
    assert!(!s.stderr().contains("panicked"), "{}", s.stderr());
    let h = s.health().await;
    assert_eq!(h["running_queries"], 0, "{h}");
}

/// A query that runs for many seconds (a 60k x 60k nested-loop join).
const SLOW: &str = "SELECT count(*) AS n FROM lineitem a, lineitem b WHERE a.l_orderkey + b.l_partkey < 0";

async fn wait_for(s: &Server, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = s.health().await;
        if f(&h) {
            return h;
        }
        assert!(Instant::now() < deadline, "{what}: {h}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeout_memory_limit_and_cancellation() {
    let s = Server::start(&["--query-timeout", "1.0", "--query-memory-mib", "2"]);
    // Timeout: 408 within about the limit.
    let t = Instant::now();
    let r = query(s.http, SLOW, None).await;
    assert_eq!(r.status, 408, "{}", r.text());
    assert_eq!(r.json()["kind"], "timeout");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let mut fc = flight_client(&s).await;
    let e = flight_query(&mut fc, SLOW).await.unwrap_err();
    assert!(e.contains("DeadlineExceeded") || e.to_lowercase().contains("deadline") || e.contains("timeout"), "{e}");
    // Memory limit: a hash join that needs far more than 2 MiB.
    let r = query(s.http, "SELECT count(*) FROM lineitem a JOIN lineitem b ON a.l_comment = b.l_comment", None).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["kind"], "resources_exhausted");
    wait_for(&s, "timeouts counted, memory released", |h| {
        h["queries"]["timed_out"] == 2 && h["running_queries"] == 0 && h["memory_reserved_bytes"] == 0
    })
    .await;
    drop(fc);

    // Cancellation: a client that goes away mid-query stops it.
    let s = Server::start(&["--query-timeout", "600"]);
    for accept in [None, Some("application/vnd.apache.arrow.stream")] {
        let before = s.health().await["queries"]["cancelled"].as_u64().unwrap();
        let mut c = std::net::TcpStream::connect(s.http).unwrap();
        let auth = format!("Bearer {TOKEN}");
        let mut h = vec![("Authorization", auth.as_str())];
        if let Some(a) = accept {
            h.push(("Accept", a));
        }
        std::io::Write::write_all(&mut c, &request_bytes("POST", "/query", &h, SLOW.as_bytes())).unwrap();
        wait_for(&s, "query started", |h| h["running_queries"] == 1).await;
        drop(c);
        let h = wait_for(&s, "query cancelled", |h| h["running_queries"] == 0 && h["memory_reserved_bytes"] == 0).await;
        assert_eq!(h["queries"]["cancelled"].as_u64().unwrap(), before + 1, "{h}");
        // Stopped for real: the server is idle right after.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cpu0 = s.cpu_time();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let used = s.cpu_time() - cpu0;
        assert!(used < Duration::from_millis(600), "a cancelled query still runs: {used:?} of CPU in 1.5 s");
    }
    // Flight SQL: the client drops the DoGet stream.
    let mut fc = flight_client(&s).await;
    let before = s.health().await["queries"]["cancelled"].as_u64().unwrap();
    let info = fc.execute(SLOW.to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut fc2 = fc.clone();
    let task = tokio::spawn(async move {
        let s = fc2.do_get(ticket).await;
        if let Ok(st) = s {
            let _ = st.try_collect::<Vec<_>>().await;
        }
    });
    wait_for(&s, "flight query started", |h| h["running_queries"] == 1).await;
    task.abort();
    drop(fc);
    let h = wait_for(&s, "flight query cancelled", |h| h["running_queries"] == 0 && h["memory_reserved_bytes"] == 0).await;
    assert_eq!(h["queries"]["cancelled"].as_u64().unwrap(), before + 1, "{h}");
}

/// 50 concurrent clients mix HTTP JSON, HTTP Arrow and Flight SQL queries, with
/// failing ones, for a bounded time; every answer is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_clients_under_load() {
    let mut s = Server::start(&["--query-timeout", "60"]);
    let exp = std::sync::Arc::new(expected().await);
    let http_addr = s.http;
    let flight = flight_client(&s).await;

    let round = |secs: u64| {
        let exp = exp.clone();
        let flight = flight.clone();
        async move {
            let stop = Instant::now() + Duration::from_secs(secs);
            let mut tasks = tokio::task::JoinSet::new();
            for client in 0..50usize {
                let exp = exp.clone();
                let mut fc = flight.clone();
                tasks.spawn(async move {
                    let (mut ok, mut failed) = (0u64, 0u64);
                    let mut i = client;
                    while Instant::now() < stop {
                        i += 1;
                        let q = QUERIES[i % QUERIES.len()];
                        match i % 5 {
                            0 => {
                                let r = query(http_addr, q, None).await;
                                assert_eq!(r.status, 200, "{q}: {}", r.text());
                                assert_eq!(r.json()["rows"], exp[q], "{q}");
                                ok += 1;
                            }
                            1 => {
                                let r = query(http_addr, q, Some("application/vnd.apache.arrow.stream")).await;
                                assert_eq!(r.status, 200, "{q}: {}", r.text());
                                assert_eq!(json_rows(&read_ipc(&r.body)), exp[q], "{q}");
                                ok += 1;
                            }
                            2 => {
                                let b = flight_query(&mut fc, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
                                assert_eq!(json_rows(&b), exp[q], "{q}");
                                ok += 1;
                            }
                            3 => {
                                let bad = ["SELEC 1", "SELECT * FROM nope", "SELECT n_name + 1 FROM nation WHERE", "SELECT CAST('x' AS INT)"]
                                    [i % 4];
                                let r = query(http_addr, bad, None).await;
                                assert_eq!(r.status, 400, "{bad}: {}", r.text());
                                assert!(r.json()["error"].is_string());
                                failed += 1;
                            }
                            _ => {
                                let e = flight_query(&mut fc, "SELECT * FROM no_table_here").await.unwrap_err();
                                assert!(e.contains("no_table_here"), "{e}");
                                failed += 1;
                            }
                        }
                    }
                    (ok, failed)
                });
            }
            let (mut ok, mut failed) = (0, 0);
            while let Some(r) = tasks.join_next().await {
                let (o, f) = r.expect("client task panicked");
                ok += o;
                failed += f;
            }
            (ok, failed)
        }
    };
    // Warm-up round (allocator arenas, caches), then the baseline.
    round(2).await;
    let h0 = wait_for(&s, "idle after warm-up", |h| h["running_queries"] == 0).await;
    let rss0 = s.rss();
    let (ok, failed) = round(8).await;
    assert!(ok >= 50 && failed >= 50, "too few queries ran: {ok} ok, {failed} failed");
    let h = wait_for(&s, "idle after load", |h| h["running_queries"] == 0 && h["memory_reserved_bytes"] == 0).await;
    assert!(s.alive(), "server died:\n{}", s.stderr());
    assert!(!s.stderr().contains("panicked"), "{}", s.stderr());
    assert_eq!(h["memory_reserved_bytes"], 0, "{h}");
    let counted = |h: &serde_json::Value, k: &str| h["queries"][k].as_u64().unwrap();
    assert_eq!(counted(&h, "ok") - counted(&h0, "ok"), ok, "{h}");
    assert_eq!(counted(&h, "failed") - counted(&h0, "failed"), failed, "{h}");
    assert_eq!(counted(&h, "cancelled"), 0, "{h}");
    let rss1 = s.rss();
    eprintln!("load: {ok} answers, {failed} errors in 8 s; RSS {:.1} MiB before, {:.1} MiB after", rss0 as f64 / 1048576.0, rss1 as f64 / 1048576.0);
    assert!(rss1 <= rss0 + rss0 / 4 + (64 << 20), "memory did not come back: {rss0} -> {rss1} bytes");
}

/// Bad `serve` options: one error line and exit code 1, before any work.
#[test]
fn bad_serve_options_are_one_error_line() {
    let huge = u64::MAX.to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["--query-timeout", "inf"], "--query-timeout"),
        (&["--query-timeout", "nan"], "--query-timeout"),
        (&["--query-timeout=-1"], "--query-timeout"),
        (&["--header-timeout", "inf"], "--header-timeout"),
        (&["--body-timeout", "NaN"], "--body-timeout"),
        (&["--total-memory-mib", &huge], "--total-memory-mib"),
        (&["--query-memory-mib", "17592186044416"], "--query-memory-mib"),
        (&["--max-connections", "0"], "--max-connections"),
    ];
    for (args, flag) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ridgeline"))
            .args(["serve", "--http", "127.0.0.1:0", "--flight-sql", "none", "--tpch", "0.01"])
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].starts_with("error:") && lines[0].contains(flag), "{args:?}: {err}");
    }
}

/// Without a token, a server that listens beyond loopback says so at start; the
/// `Origin` and `Host` checks hold whether or not there is a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_beyond_loopback_warns() {
    let s = Server::start_args(&["serve", "--http", "0.0.0.0:0", "--flight-sql", "none"], false);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", s.http.port()).parse().unwrap();
    let r = http(addr, "POST", "/query", &[], b"SELECT 1 AS one").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = http(addr, "POST", "/query", &[("Origin", "http://evil.example"), ("Content-Type", "text/plain")], b"SELECT 1").await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(s.stderr().contains("without a token"), "{}", s.stderr());
}

/// Slow, half-sent, oversized and cross-origin requests, and more idle
/// connections than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_http_clients() {
    use std::io::Write;
    let mut s = Server::start(&[
        "--header-timeout", "3", "--body-timeout", "2", "--max-connections", "8", "--max-request-bytes", "4096",
        "--allow-origin", "http://app.example", "--allow-host", "db.example",
    ]);
    let auth = format!("Bearer {TOKEN}");
    // A huge Content-Length: 413 at once, without waiting for the body.
    let t = Instant::now();
    let req = format!("POST /query HTTP/1.1\r\nHost: localhost\r\nAuthorization: {auth}\r\nContent-Length: 1000000000000\r\n\r\nSELECT");
    let a = raw_exchange(s.http, req.as_bytes(), Duration::from_secs(10), |_| {});
    let r = parse_answer(&a.head);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["kind"], "too_large");
    assert!(t.elapsed() < Duration::from_secs(2), "413 took {:?}", t.elapsed());
    // Also without a token (the size is checked first).
    let a = raw_exchange(s.http, b"POST /query HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999\r\n\r\n", Duration::from_secs(10), |_| {});
    assert_eq!(parse_answer(&a.head).status, 413);
    // A body that grows too large without a Content-Length (chunked).
    let big = "x".repeat(5000);
    let req = format!("POST /query HTTP/1.1\r\nHost: localhost\r\nAuthorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let a = raw_exchange(s.http, req.as_bytes(), Duration::from_secs(10), |_| {});
    assert_eq!(parse_answer(&a.head).status, 413);
    // A half-sent header: the connection is closed after the header timeout.
    let t = Instant::now();
    let a = raw_exchange(s.http, b"POST /query HTTP/1.1\r\nHost: localhost\r\n", Duration::from_secs(20), |_| {});
    assert!(a.closed, "a half-sent request stayed open");
    assert!(t.elapsed() >= Duration::from_millis(2500) && t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    // A half-sent body: 408 after the body timeout.
    let t = Instant::now();
    let req = format!("POST /query HTTP/1.1\r\nHost: localhost\r\nAuthorization: {auth}\r\nContent-Length: 100\r\n\r\nSELECT");
    let a = raw_exchange(s.http, req.as_bytes(), Duration::from_secs(20), |_| {});
    assert!(a.closed);
    assert_eq!(parse_answer(&a.head).status, 408, "{}", String::from_utf8_lossy(&a.head));
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    // Many more idle, half-sent connections than the limit (8): a real query is
    // still answered at once (the oldest idle ones are evicted for it).
    let mut idle = Vec::new();
    for _ in 0..40 {
        let mut c = std::net::TcpStream::connect(s.http).unwrap();
        c.write_all(b"POST /query HTTP/1.1\r\nHost: loc").unwrap();
        idle.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let r = query(s.http, "SELECT count(*) AS n FROM nation", None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rows"][0]["n"], 25);
    assert!(t.elapsed() < Duration::from_millis(2500), "answered after {:?}", t.elapsed());
    drop(idle);

    // Browsers: a foreign Origin, a cross-site fetch, a foreign Host (DNS rebinding).
    let q = b"SELECT 1 AS one";
    let plain = ("Content-Type", "text/plain");
    for (h, what) in [
        (vec![("Authorization", auth.as_str()), ("Origin", "http://evil.example"), plain], "foreign Origin"),
        (vec![("Authorization", auth.as_str()), ("Origin", "null"), plain], "null Origin"),
        (vec![("Authorization", auth.as_str()), ("Sec-Fetch-Site", "cross-site")], "cross-site fetch"),
    ] {
        let r = http(s.http, "POST", "/query", &h, q).await;
        assert_eq!(r.status, 403, "{what}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("--allow-origin"), "{}", r.text());
    }
    let rebind = |host: &str| {
        format!("POST /query HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\nConnection: close\r\nContent-Length: {}\r\n\r\nSELECT 1 AS one", q.len())
    };
    for (host, status) in [("evil.example:8080", 403), ("127.0.0.1.evil.example", 403), ("db.example:1234", 200), ("127.0.0.1:80", 200), ("[::1]", 200)] {
        let a = raw_exchange(s.http, rebind(host).as_bytes(), Duration::from_secs(10), |_| {});
        let r = parse_answer(&a.head);
        assert_eq!(r.status, status, "Host {host}: {}", r.text());
    }
    let a = raw_exchange(s.http, b"GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n", Duration::from_secs(10), |_| {});
    assert_eq!(parse_answer(&a.head).status, 403, "health through a rebinding name");
    // The allowed origin: answered, with CORS headers; its preflight too.
    let r = http(s.http, "POST", "/query", &[("Authorization", &auth), ("Origin", "http://app.example"), plain], q).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("http://app.example"));
    let r = http(s.http, "OPTIONS", "/query", &[("Origin", "http://app.example"), ("Access-Control-Request-Method", "POST")], b"").await;
    assert_eq!(r.status, 204);
    assert!(r.header("access-control-allow-headers").unwrap().contains("authorization"));
    let r = http(s.http, "OPTIONS", "/query", &[("Origin", "http://evil.example"), ("Access-Control-Request-Method", "POST")], b"").await;
    assert_eq!(r.status, 403);
    assert!(s.alive(), "{}", s.stderr());
    assert_eq!(s.health().await["running_queries"], 0);
}

/// Writes a small valid Parquet file and one whose footer length is corrupt.
fn parquet_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use arrow::array::{Int64Array, StringArray};
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, false),
        arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Utf8, false),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(Int64Array::from_iter_values(0..1000)),
            std::sync::Arc::new(StringArray::from_iter_values((0..1000).map(|i| format!("value {i}")))),
        ],
    )
    .unwrap();
    let good = dir.join("good.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&good).unwrap(), schema, None).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let mut bytes = std::fs::read(&good).unwrap();
    let n = bytes.len();
    // The 4-byte footer length before the final "PAR1": longer than the file.
    bytes[n - 8..n - 4].copy_from_slice(&(n as u32).to_le_bytes());
    let bad = dir.join("bad.parquet");
    std::fs::write(&bad, bytes).unwrap();
    (good, bad)
}

const ARROW: Option<&str> = Some("application/vnd.apache.arrow.stream");

/// Raw DoGet bytes (message headers and bodies) of `sql` over Flight SQL.
async fn flight_bytes(s: &Server, sql: &str) -> Result<usize, tonic::Status> {
    let mut c = flight_client(s).await;
    let info = c.execute(sql.to_string(), None).await.map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let ch = Channel::from_shared(format!("http://{}", s.flight)).unwrap().connect().await.unwrap();
    let mut raw = arrow_flight::flight_service_client::FlightServiceClient::new(ch).max_decoding_message_size(usize::MAX);
    let mut req = tonic::Request::new(ticket);
    req.metadata_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let mut st = raw.do_get(req).await?.into_inner();
    let mut n = 0;
    while let Some(fd) = st.message().await? {
        n += fd.data_header.len() + fd.data_body.len();
    }
    Ok(n)
}

/// The IPC stream size of `batches` with every string view compacted.
fn compact_ipc_size(batches: &[RecordBatch]) -> usize {
    use arrow::array::{Array, ArrayRef, AsArray};
    let schema = batches[0].schema();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
    for b in batches {
        let cols: Vec<ArrayRef> = b
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                arrow::datatypes::DataType::Utf8View => std::sync::Arc::new(c.as_string_view().gc()) as ArrayRef,
                _ => c.clone(),
            })
            .collect();
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap()).unwrap();
    }
    w.finish().unwrap();
    w.into_inner().unwrap().len()
}

/// Answers stream within the memory pool, break off visibly when they fail
/// midway, carry no shared string buffers, and panics become internal errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_stream_within_the_pool_and_fail_visibly() {
    let dir = tempfile::tempdir().unwrap();
    let (good, bad) = parquet_files(dir.path());
    // `t` is valid when the server registers it, and gets a corrupt footer length
    // (longer than the file) afterwards: the Parquet reader panics on it while
    // the query is planned (it re-reads changed files).
    let swapped = dir.path().join("swapped.parquet");
    std::fs::copy(&good, &swapped).unwrap();
    let (ok_arg, t_arg) = (format!("ok={}", good.display()), format!("t={}", swapped.display()));
    let mut s = Server::start(&["--total-memory-mib", "256", "--query-memory-mib", "100", "--query-timeout", "10", "--table", &ok_arg, "--table", &t_arg]);
    let auth = format!("Bearer {TOKEN}");
    let mut fc = flight_client(&s).await;
    assert_eq!(query(s.http, "SELECT count(*) AS n FROM t", None).await.json()["rows"][0]["n"], 1000);
    std::fs::copy(&bad, &swapped).unwrap();

    // The panic: an internal error (500 / INTERNAL) and the server goes on.
    for _ in 0..2 {
        let r = query(s.http, "SELECT * FROM t", None).await;
        assert_eq!(r.status, 500, "{}", r.text());
        assert_eq!(r.json()["kind"], "internal", "{}", r.text());
        let r = query(s.http, "SELECT count(*) AS n FROM ok", None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["rows"][0]["n"], 1000);
        let e = flight_query(&mut fc, "SELECT * FROM t").await.unwrap_err();
        assert!(e.contains("Internal") || e.contains("internal"), "{e}");
        assert_eq!(flight_query(&mut fc, "SELECT count(*) AS n FROM ok").await.unwrap()[0].num_rows(), 1);
    }

    // An answer part larger than the memory limit: a clear 503 before any data.
    let r = query(s.http, "SELECT repeat('x', 120000000) AS s", None).await;
    assert_eq!(r.status, 503, "{}", &r.text()[..r.text().len().min(300)]);
    assert_eq!(r.json()["kind"], "resources_exhausted");
    assert!(r.json()["error"].as_str().unwrap().contains("memory limit"), "{}", r.text());

    // Arrow answers carry each batch's own bytes only (string views that share
    // buffers are compacted): within 1.5x of the compact IPC size, over HTTP and
    // Flight SQL.
    let rl = Ridgeline::builder().gpu_mode(ridgeline::GpuMode::Off).build().unwrap();
    let li = ridgeline::gen::tpch::generate_table("lineitem", 0.01).unwrap();
    rl.register_batches("lineitem", ridgeline::gen::tpch::table_schema("lineitem").unwrap(), li).unwrap();
    for sql in ["SELECT * FROM lineitem", "SELECT l_orderkey, l_comment, l_shipinstruct FROM lineitem WHERE l_orderkey % 3 = 0"] {
        let local = rl.sql(sql).await.unwrap().collect().await.unwrap();
        let compact = compact_ipc_size(&local);
        let r = query(s.http, sql, ARROW).await;
        assert_eq!(r.status, 200, "{sql}: {} {}", r.text(), s.health().await);
        let rows: usize = read_ipc(&r.body).iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, local.iter().map(|b| b.num_rows()).sum::<usize>());
        let over_flight = flight_bytes(&s, sql).await.unwrap();
        eprintln!("{sql}: compact IPC {compact} bytes, HTTP {} bytes, Flight SQL {over_flight} bytes", r.body.len());
        assert!(r.body.len() as f64 <= 1.5 * compact as f64, "HTTP sent {} bytes for {compact}", r.body.len());
        assert!(over_flight as f64 <= 1.5 * compact as f64, "Flight SQL sent {over_flight} bytes for {compact}");
    }

    // A cross join's JSON answer (billions of rows) streams within the pool: the
    // server's memory stays flat, and at the timeout the answer breaks off with
    // an error marker and without the chunked body's end.
    let cross = "SELECT a.l_comment, b.l_orderkey, b.l_comment AS c2 FROM lineitem a, lineitem b";
    let rss0 = s.rss();
    let mut peak = rss0;
    let req = request_bytes("POST", "/query", &[("Authorization", &auth)], cross.as_bytes());
    let a = raw_exchange(s.http, &req, Duration::from_secs(60), |_| peak = peak.max(s.rss()));
    eprintln!("cross join over JSON: {} bytes in the answer, RSS {} -> peak {} MiB", a.total, rss0 >> 20, peak >> 20);
    assert!(a.closed);
    assert_eq!(parse_answer(&a.head).status, 200, "{}", String::from_utf8_lossy(&a.head[..a.head.len().min(500)]));
    assert!(a.total > 4 << 20, "only {} bytes streamed", a.total);
    assert!(peak < rss0 + (200 << 20), "RSS grew from {rss0} to {peak}");
    assert!(!chunked_complete(&a.tail), "a broken answer must not end like a complete one");
    let tail = String::from_utf8_lossy(&a.tail);
    assert!(tail.contains(r#""kind":"timeout""#), "{}", &tail[tail.len().saturating_sub(400)..]);
    // The same over Arrow IPC: no end, no terminating chunk.
    let req = request_bytes("POST", "/query", &[("Authorization", &auth), ("Accept", ARROW.unwrap())], cross.as_bytes());
    let a = raw_exchange(s.http, &req, Duration::from_secs(60), |_| {});
    assert!(a.closed);
    assert_eq!(parse_answer(&a.head).status, 200);
    assert!(!chunked_complete(&a.tail), "a timed-out Arrow answer must not end like a complete one");
    // Over Flight SQL the timeout is the stream's status.
    let e = flight_query(&mut fc, cross).await.unwrap_err();
    assert!(e.contains("DeadlineExceeded") || e.to_lowercase().contains("deadline") || e.contains("timeout"), "{e}");

    // A client that goes away mid-answer: the query stops at once (cancelled, not
    // timed out), its memory is released.
    let before = s.health().await;
    let req = request_bytes("POST", "/query", &[("Authorization", &auth)], cross.as_bytes());
    let a = raw_exchange(s.http, &req, Duration::from_millis(800), |_| {});
    assert!(!a.closed && a.total > 0);
    drop(a);
    let h = wait_for(&s, "cancelled mid-answer", |h| h["running_queries"] == 0 && h["memory_reserved_bytes"] == 0).await;
    assert_eq!(h["queries"]["cancelled"].as_u64().unwrap(), before["queries"]["cancelled"].as_u64().unwrap() + 1, "{h}");
    assert_eq!(h["queries"]["timed_out"], before["queries"]["timed_out"], "{h}");

    let r = query(s.http, "SELECT count(*) AS n FROM nation", None).await;
    assert_eq!(r.json()["rows"][0]["n"], 25);
    assert!(s.alive(), "{}", s.stderr());
}

/// Every batch of a Flight SQL answer (all endpoints).
async fn fetch(c: &mut FlightSqlServiceClient<Channel>, info: arrow_flight::FlightInfo) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for ep in info.endpoint {
        let s = c.do_get(ep.ticket.expect("ticket")).await.expect("do_get");
        out.extend(s.try_collect::<Vec<_>>().await.expect("answer"));
    }
    out
}

/// Column `col` of `batches` as strings (NULL as "NULL").
fn column_strings(batches: &[RecordBatch], col: &str) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let a = b.column_by_name(col).unwrap_or_else(|| panic!("no column {col} in {:?}", b.schema()));
        let a = arrow::compute::cast(a, &arrow::datatypes::DataType::Utf8).unwrap();
        let s = a.as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
        out.extend(s.iter().map(|v| v.unwrap_or("NULL").to_string()));
    }
    out
}

const TPCH_TABLES: [&str; 8] = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"];

/// What BI tools browse with: catalogs, schemas, tables (with their schemas),
/// table types, primary keys, type info, all behind the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flight_sql_catalog_calls() {
    use arrow_flight::sql::{CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, CommandGetXdbcTypeInfo, XdbcDataType};
    let mut s = Server::start(&[]);
    let mut c = flight_client(&s).await;

    let info = c.get_catalogs().await.expect("GetCatalogs");
    assert_eq!(column_strings(&fetch(&mut c, info).await, "catalog_name"), ["datafusion"]);

    let schemas = |catalog: Option<&str>, pattern: Option<&str>| CommandGetDbSchemas {
        catalog: catalog.map(String::from),
        db_schema_filter_pattern: pattern.map(String::from),
    };
    for (catalog, pattern, want) in [
        (None, None, vec!["public"]),
        (Some("datafusion"), Some("pub%"), vec!["public"]),
        (None, Some("p_blic"), vec!["public"]),
        (None, Some("x%"), vec![]),
        (Some("nope"), None, vec![]),
    ] {
        let info = c.get_db_schemas(schemas(catalog, pattern)).await.expect("GetDbSchemas");
        let b = fetch(&mut c, info).await;
        assert_eq!(column_strings(&b, "db_schema_name"), want, "{catalog:?} {pattern:?}");
        assert!(column_strings(&b, "catalog_name").iter().all(|c| c == "datafusion"));
    }

    let tables = |name: Option<&str>, types: &[&str], include_schema: bool| CommandGetTables {
        catalog: None,
        db_schema_filter_pattern: None,
        table_name_filter_pattern: name.map(String::from),
        table_types: types.iter().map(|t| t.to_string()).collect(),
        include_schema,
    };
    let info = c.get_tables(tables(None, &[], false)).await.expect("GetTables");
    let b = fetch(&mut c, info).await;
    assert_eq!(column_strings(&b, "table_name"), TPCH_TABLES);
    assert!(column_strings(&b, "table_type").iter().all(|t| t == "TABLE"));
    assert!(column_strings(&b, "db_schema_name").iter().all(|t| t == "public"));
    assert!(b.iter().all(|b| b.column_by_name("table_schema").is_none()));
    for (name, types, want) in [
        (Some("part%"), vec![], vec!["part", "partsupp"]),
        (Some("n_tion"), vec!["TABLE"], vec!["nation"]),
        (Some("%"), vec!["VIEW"], vec![]),
        (Some("no_such_table"), vec![], vec![]),
    ] {
        let info = c.get_tables(tables(name, &types, false)).await.expect("GetTables");
        assert_eq!(column_strings(&fetch(&mut c, info).await, "table_name"), want, "{name:?} {types:?}");
    }
    // With schemas: each table's schema, IPC-encoded, as the server has it.
    let info = c.get_tables(tables(None, &[], true)).await.expect("GetTables with schemas");
    let b = fetch(&mut c, info).await;
    let names = column_strings(&b, "table_name");
    assert_eq!(names, TPCH_TABLES);
    let mut i = 0;
    for batch in &b {
        let col = batch.column_by_name("table_schema").expect("table_schema column");
        let col = col.as_any().downcast_ref::<arrow::array::BinaryArray>().expect("binary");
        for bytes in col.iter() {
            let got = arrow::ipc::convert::try_schema_from_ipc_buffer(bytes.unwrap()).expect("IPC schema");
            let want = ridgeline::gen::tpch::table_schema(&names[i]).unwrap();
            let f = |s: &arrow::datatypes::Schema| s.fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect::<Vec<_>>();
            assert_eq!(f(&got), f(&want), "schema of {}", names[i]);
            i += 1;
        }
    }
    assert_eq!(i, 8);

    let info = c.get_table_types().await.expect("GetTableTypes");
    assert_eq!(column_strings(&fetch(&mut c, info).await, "table_type"), ["LOCAL TEMPORARY", "TABLE", "VIEW"]);

    let pk = CommandGetPrimaryKeys { catalog: None, db_schema: None, table: "nation".into() };
    let info = c.get_primary_keys(pk).await.expect("GetPrimaryKeys");
    let pk_schema = info.clone().try_decode_schema().unwrap();
    assert_eq!(
        pk_schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(),
        ["catalog_name", "db_schema_name", "table_name", "column_name", "key_name", "key_sequence"]
    );
    assert_eq!(fetch(&mut c, info).await.iter().map(|b| b.num_rows()).sum::<usize>(), 0);

    let info = c.get_xdbc_type_info(CommandGetXdbcTypeInfo { data_type: None }).await.expect("GetXdbcTypeInfo");
    let names = column_strings(&fetch(&mut c, info).await, "type_name");
    for t in ["BOOLEAN", "INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "VARCHAR", "DATE", "TIMESTAMP"] {
        assert!(names.iter().any(|n| n == t), "{t} in {names:?}");
    }
    let info = c.get_xdbc_type_info(CommandGetXdbcTypeInfo { data_type: Some(XdbcDataType::XdbcInteger as i32) }).await.unwrap();
    let b = fetch(&mut c, info).await;
    assert_eq!(column_strings(&b, "type_name"), ["INTEGER"]);
    assert_eq!(column_strings(&b, "column_size"), ["10"]);

    // No token, no catalog: every call, and a ticket taken from an authorized one.
    let mut anon = FlightSqlServiceClient::new(Channel::from_shared(format!("http://{}", s.flight)).unwrap().connect().await.unwrap());
    let unauth = |e: arrow_flight::error::FlightError| {
        let e = e.to_string();
        assert!(e.contains("Unauthenticated") || e.contains("authentication"), "{e}");
    };
    unauth(anon.get_catalogs().await.unwrap_err());
    unauth(anon.get_db_schemas(schemas(None, None)).await.unwrap_err());
    unauth(anon.get_tables(tables(None, &[], true)).await.unwrap_err());
    unauth(anon.get_table_types().await.unwrap_err());
    unauth(anon.get_xdbc_type_info(CommandGetXdbcTypeInfo { data_type: None }).await.unwrap_err());
    unauth(anon.get_primary_keys(CommandGetPrimaryKeys { catalog: None, db_schema: None, table: "nation".into() }).await.unwrap_err());
    unauth(anon.prepare("SELECT 1".into(), None).await.unwrap_err());
    let info = c.get_tables(tables(None, &[], true)).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let e = match anon.do_get(ticket).await {
        Err(e) => e.to_string(),
        Ok(stream) => stream.try_collect::<Vec<_>>().await.unwrap_err().to_string(),
    };
    assert!(e.contains("Unauthenticated") || e.contains("authentication"), "{e}");
    assert!(s.alive(), "{}", s.stderr());
}

/// Prepared statements with `?` and `$1` parameters, bound as record batches;
/// wrong values are clear errors and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flight_sql_prepared_statements_with_parameters() {
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use std::sync::Arc;
    let mut s = Server::start(&[]);
    let mut c = flight_client(&s).await;
    let params = |cols: Vec<(&str, ArrayRef)>| RecordBatch::try_from_iter(cols).unwrap();
    let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
    let text = |v: &str| Arc::new(StringArray::from(vec![v])) as ArrayRef;

    // `?`: the parameter schema has the column's type; values are cast to it.
    let mut p = c.prepare("SELECT n_name FROM nation WHERE n_nationkey = ? ORDER BY 1".into(), None).await.expect("prepare");
    let ps = p.parameter_schema().unwrap().clone();
    assert_eq!(ps.fields().len(), 1, "{ps:?}");
    assert_eq!(ps.field(0).name(), "$1");
    let key_type = ridgeline::gen::tpch::table_schema("nation").unwrap().field(0).data_type().clone();
    assert_eq!(ps.field(0).data_type(), &key_type);
    assert_eq!(p.dataset_schema().unwrap().field(0).name(), "n_name");
    for key in [5, 7, 24] {
        p.set_parameters(params(vec![("0", int(key))])).unwrap();
        let info = p.execute().await.expect("execute with a parameter");
        let want = flight_query(&mut c, &format!("SELECT n_name FROM nation WHERE n_nationkey = {key}")).await.unwrap();
        assert_eq!(json_rows(&fetch(&mut c, info).await), json_rows(&want), "key {key}");
        assert_eq!(json_rows(&want).as_array().unwrap().len(), 1);
    }
    p.close().await.unwrap();

    // `$1`, `$2` of other types (decimal and text), and a parameter used twice.
    let sql = "SELECT count(*) AS n FROM lineitem WHERE l_quantity < $1 AND l_returnflag = $2 AND l_linestatus <> $2";
    let mut p = c.prepare(sql.into(), None).await.expect("prepare $n");
    assert_eq!(p.parameter_schema().unwrap().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), ["$1", "$2"]);
    for (q, flag) in [(24, "R"), (10, "N"), (50, "A")] {
        p.set_parameters(params(vec![("a", int(q)), ("b", text(flag))])).unwrap();
        let info = p.execute().await.expect("execute $n");
        let want = format!("SELECT count(*) AS n FROM lineitem WHERE l_quantity < {q} AND l_returnflag = '{flag}' AND l_linestatus <> '{flag}'");
        let want = flight_query(&mut c, &want).await.unwrap();
        let got = fetch(&mut c, info).await;
        assert_eq!(json_rows(&got), json_rows(&want), "{q} {flag}");
    }

    // Wrong values: clear errors, at bind time.
    let err = |e: arrow_flight::error::FlightError| e.to_string();
    p.set_parameters(params(vec![("a", int(1))])).unwrap();
    let e = err(p.execute().await.unwrap_err());
    assert!(e.contains("2 positional parameter(s) ($1, $2), but 1 value(s) are bound"), "{e}");
    p.set_parameters(params(vec![("a", text("many")), ("b", text("R"))])).unwrap();
    let e = err(p.execute().await.unwrap_err());
    assert!(e.contains("parameter $1") && e.contains("does not convert"), "{e}");
    let two = RecordBatch::try_from_iter(vec![
        ("a", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
        ("b", Arc::new(StringArray::from(vec!["R", "N"])) as ArrayRef),
    ])
    .unwrap();
    p.set_parameters(two).unwrap();
    let e = err(p.execute().await.unwrap_err());
    assert!(e.contains("exactly one row"), "{e}");
    p.close().await.unwrap();

    // Without values: the statement says which parameters it has.
    let p = c.prepare("SELECT $1 + 1 AS v".into(), None).await.unwrap();
    let e = err(p.clone().execute().await.unwrap_err());
    assert!(e.contains("no values are bound") && e.contains("$1"), "{e}");
    let e = flight_query(&mut c, "SELECT n_name FROM nation WHERE n_nationkey = ?").await.unwrap_err();
    assert!(e.contains("no values are bound"), "{e}");
    let e = flight_query(&mut c, "SELECT ? + $1").await.unwrap_err();
    assert!(e.contains("mixes"), "{e}");
    // Values for a statement without parameters.
    let mut p = c.prepare("SELECT 1 AS one".into(), None).await.unwrap();
    assert_eq!(p.parameter_schema().unwrap().fields().len(), 0);
    p.set_parameters(params(vec![("a", int(1))])).unwrap();
    let e = err(p.execute().await.unwrap_err());
    assert!(e.contains("no parameters"), "{e}");
    // A `?` in a literal is no placeholder.
    let b = flight_query(&mut c, "SELECT '?' AS q").await.unwrap();
    assert_eq!(json_rows(&b), serde_json::json!([{"q": "?"}]));

    // A forged handle is refused, not trusted.
    use prost::Message as _;
    let cmd = arrow_flight::sql::CommandPreparedStatementQuery { prepared_statement_handle: b"\xffRL1\x05\x00\x00\x00SELECTgarbage".to_vec().into() };
    let ticket = arrow_flight::Ticket::new(arrow_flight::sql::ProstMessageExt::as_any(&cmd).encode_to_vec());
    let e = match c.do_get(ticket).await {
        Err(e) => e.to_string(),
        Ok(st) => st.try_collect::<Vec<_>>().await.unwrap_err().to_string(),
    };
    assert!(e.contains("damaged"), "{e}");

    assert!(s.alive(), "{}", s.stderr());
    assert!(!s.stderr().contains("panicked"), "{}", s.stderr());
    let h = s.health().await;
    assert_eq!(h["running_queries"], 0, "{h}");
}

/// An endpoint whose address is taken: one error line that names the address.
#[test]
fn serve_names_an_address_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flight, http, what) in [(addr.as_str(), "127.0.0.1:0", "Flight SQL"), ("127.0.0.1:0", addr.as_str(), "HTTP")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ridgeline"))
            .args(["serve", "--flight-sql", flight, "--http", http])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{what}: {err}");
        assert!(errors[0].contains(&format!("cannot listen on {addr}: address in use ({what})")), "{what}: {err}");
    }
    drop(taken);
}
