//! `ridgeline serve`: HTTP and Flight SQL answers, limits, bad input over the wire,
//! cancellation, and 50 concurrent clients under load.
#[path = "common/server.rs"]
mod server;

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
    let s = Server::start(&[]);
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
        let h = wait_for(&s, "query cancelled", |h| h["running_queries"] == 0).await;
        assert_eq!(h["queries"]["cancelled"].as_u64().unwrap(), before + 1, "{h}");
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
