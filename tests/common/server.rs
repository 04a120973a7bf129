//! A `ridgeline serve` child process and a minimal HTTP/1.1 client for the
//! serving tests.
#![allow(dead_code)]
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const TOKEN: &str = "s3cret-token";

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub http: SocketAddr,
    pub flight: SocketAddr,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `ridgeline serve --tpch 0.01` on free ports with the test token and
    /// `extra` arguments.
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["serve", "--tpch", "0.01", "--flight-sql", "127.0.0.1:0", "--http", "127.0.0.1:0", "--token", TOKEN];
        args.extend_from_slice(extra);
        Server::start_args(&args, true)
    }

    /// Starts `ridgeline ARGS` (a `serve` command line) and waits for its HTTP
    /// endpoint, and its Flight SQL one when `flight` (else `flight` is 0.0.0.0:0).
    pub fn start_args(args: &[&str], flight: bool) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ridgeline"));
        cmd.args(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start ridgeline serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let err_text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            let err_text = err_text.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut t = err_text.lock().unwrap();
                    t.push_str(&line);
                    t.push('\n');
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut http, mut flight) = (None, if flight { None } else { Some("0.0.0.0:0".parse().unwrap()) });
        let deadline = Instant::now() + Duration::from_secs(120);
        while http.is_none() || flight.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(_) => {
                    let _ = child.kill();
                    panic!("ridgeline serve did not start:\n{}", err_text.lock().unwrap());
                }
            };
            if let Some(a) = line.strip_prefix("ridgeline: HTTP listening on http://") {
                http = Some(a.trim().parse().unwrap());
            }
            if let Some(a) = line.strip_prefix("ridgeline: Flight SQL listening on grpc://") {
                flight = Some(a.trim().parse().unwrap());
            }
        }
        Server { child, http: http.unwrap(), flight: flight.unwrap(), stderr: err_text }
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// CPU time the server process has used so far (Linux).
    pub fn cpu_time(&self) -> Duration {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which is in parentheses): utime is 14th, stime 15th.
        let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
        let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
        Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
    }

    /// The resident set size of the server process (Linux).
    pub fn rss(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/statm", self.child.id())).unwrap_or_default();
        s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
    }

    /// `GET /health` as JSON.
    pub async fn health(&self) -> serde_json::Value {
        let r = http(self.http, "GET", "/health", &[], b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpAnswer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// The request bytes of `method path` with `headers` and `body` (Connection: close).
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One HTTP/1.1 request (Connection: close; chunked answers decoded).
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpAnswer {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(&request_bytes(method, path, headers, body)).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    parse_answer(&raw)
}

/// `POST /query` with the test token.
pub async fn query(addr: SocketAddr, sql: &str, accept: Option<&str>) -> HttpAnswer {
    let auth = format!("Bearer {TOKEN}");
    let mut h = vec![("Authorization", auth.as_str())];
    if let Some(a) = accept {
        h.push(("Accept", a));
    }
    http(addr, "POST", "/query", &h, sql.as_bytes()).await
}

pub fn parse_answer(raw: &[u8]) -> HttpAnswer {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no header end: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest: &[u8] = &body;
        loop {
            let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else { break };
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).split(';').next().unwrap().trim(), 16).unwrap();
            rest = &rest[eol + 2..];
            if size == 0 || rest.len() < size {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[(size + 2).min(rest.len())..];
        }
        body = out;
    }
    HttpAnswer { status, headers, body }
}

/// Reads an Arrow IPC stream.
pub fn read_ipc(body: &[u8]) -> Vec<arrow::array::RecordBatch> {
    let r = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body.to_vec()), None).expect("IPC stream");
    r.map(|b| b.expect("IPC batch")).collect()
}

/// Rows as JSON objects (arrow's JSON writer, as the server writes them).
pub fn json_rows(batches: &[arrow::array::RecordBatch]) -> serde_json::Value {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::ArrayWriter::new(&mut buf);
        for b in batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
    }
    if buf.is_empty() {
        return serde_json::json!([]);
    }
    serde_json::from_slice(&buf).unwrap()
}

/// Reads `n` bytes or less without blocking forever (for tests that drop a
/// connection mid-answer).
pub fn read_some(s: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let k = s.read(&mut buf).unwrap_or(0);
    buf.truncate(k);
    buf
}

/// What [`raw_exchange`] got: the first and last bytes, the size, and whether the
/// server closed the connection.
pub struct RawAnswer {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    pub total: usize,
    pub closed: bool,
}

/// A raw exchange: sends `request`, then reads what comes back until the server
/// closes or `wait` passes, keeping the first and the last 64 KiB; calls `each`
/// after every read with the bytes so far.
pub fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration, mut each: impl FnMut(usize)) -> RawAnswer {
    use std::io::Write;
    const KEEP: usize = 64 << 10;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(request).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let deadline = Instant::now() + wait;
    let mut a = RawAnswer { head: Vec::new(), tail: Vec::new(), total: 0, closed: false };
    let mut buf = vec![0u8; 1 << 20];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => {
                a.closed = true;
                break;
            }
            Ok(n) => {
                let got = &buf[..n];
                if a.head.len() < KEEP {
                    let k = (KEEP - a.head.len()).min(n);
                    a.head.extend_from_slice(&got[..k]);
                }
                a.tail.extend_from_slice(got);
                if a.tail.len() > 2 * KEEP {
                    a.tail.drain(..a.tail.len() - KEEP);
                }
                a.total += n;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => {
                a.closed = true;
                break;
            }
        }
        each(a.total);
    }
    a
}

/// Whether a raw chunked HTTP answer ends with its terminating zero-size chunk.
pub fn chunked_complete(tail: &[u8]) -> bool {
    tail.ends_with(b"\r\n0\r\n\r\n")
}
