//! The HTTP endpoint: `POST /query` with the SQL text as the body, `GET /health`.
//!
//! * `POST /query` answers JSON by default:
//!   `{"columns":[{"name":..,"type":..},..],"rows":[{..},..],"row_count":N}`, or
//!   an Arrow IPC stream (`application/vnd.apache.arrow.stream`) when the `Accept`
//!   header asks for it. Both are streamed (chunked), encoded part by part as the
//!   query produces batches; the part on its way is reserved in the query's
//!   memory pool, so an answer of any size needs no more memory than one part.
//! * Errors answer JSON `{"error": message, "kind": kind}` with status 400 (bad
//!   SQL, unknown table or column, refused statement), 401 (token), 403 (foreign
//!   `Origin` or `Host`), 408 (timeout, also a request body sent too slowly), 413
//!   (request too large: refused from its `Content-Length` before the body is
//!   read), 503 (memory limit, too many connections) or 500 (internal errors,
//!   panics included).
//! * **Errors after the answer has begun.** The status line is sent with the first
//!   part of the answer, so an error before it (including a timeout or a memory
//!   limit while the first batch is computed) gets its own status. One that comes
//!   later (a timeout while streaming, a failure in a later batch) cannot change
//!   the status any more; the answer is then *broken off*: the chunked body ends
//!   without its terminating zero-size chunk and the connection closes, so every
//!   HTTP client reports an incomplete body (curl: exit 18) instead of a short
//!   answer. A JSON answer first gets the rest of a valid-looking object, `],
//!   "error": message, "kind": kind}` (no `row_count`), for clients that parse
//!   what they got anyway; an Arrow answer ends without its end-of-stream marker.
//! * **Browsers.** Requests carrying an `Origin` header are refused with 403 unless
//!   the origin is in [`ServiceOptions::allowed_origins`] (allowed ones get CORS
//!   headers and preflight answers), as are those marked `Sec-Fetch-Site:
//!   cross-site` or `same-site`. `Host` must be `localhost`, an IP literal, or one
//!   of [`ServiceOptions::allowed_hosts`]: a DNS-rebinding page reaches the
//!   server under the attacker's own name, which is refused.
//! * **Transport limits** ([`serve_listener`]): a header read timeout (also for
//!   the next request on an idle keep-alive connection), a body read timeout, a
//!   write-stall timeout, and a connection limit at which the oldest idle
//!   connection is evicted for a new one.
//! * `GET /health` answers the service's counters and memory (no token needed: it
//!   shows no data).
use super::{compact_batch, GuardedIo, QueryError, QueryErrorKind, QueryService, QueryStream, ServiceOptions};
use arrow::array::RecordBatch;
use arrow::ipc::writer::StreamWriter;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::{FutureExt, StreamExt};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// Rows per encoded part of an answer (larger batches are sliced).
const PART_ROWS: usize = 2048;

/// The endpoint's routes (`/query`, `/health`), to serve alone or to nest into an
/// application's own router. The `Origin`/`Host` checks, the size check and the
/// body timeout are part of the routes; the header timeout, the write-stall
/// timeout and the connection limit are [`serve_listener`]'s.
pub fn router(service: QueryService) -> Router {
    Router::new()
        .route("/query", post(query).options(preflight))
        .route("/health", get(health))
        .with_state(service)
}

/// A [`QueryError`] as an HTTP answer.
pub fn error_response(e: &QueryError) -> Response {
    let status = match e.kind {
        QueryErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        QueryErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        QueryErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        QueryErrorKind::Timeout => StatusCode::REQUEST_TIMEOUT,
        QueryErrorKind::ResourcesExhausted => StatusCode::SERVICE_UNAVAILABLE,
        QueryErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json_error(status, &e.message, e.kind.as_str())
}

fn json_error(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = serde_json::json!({"error": message, "kind": kind});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn forbidden(message: String) -> Response {
    json_error(StatusCode::FORBIDDEN, &message, "forbidden")
}

/// The name part of a `Host` header value (no port, no brackets), lower case.
fn host_name(host: &str) -> String {
    let h = host.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match h.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => h,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn host_allowed(options: &ServiceOptions, host: &str) -> bool {
    let name = host_name(host);
    // An IP literal is only sent by a page served from that address itself (and
    // its cross-origin requests carry an Origin header): no rebinding through it.
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok()
        || options.allowed_hosts.iter().any(|a| a == "*" || host_name(a) == name)
}

/// Checks `Host`, `Origin` and `Sec-Fetch-Site`; the allowed `Origin` if any.
fn check_access(options: &ServiceOptions, headers: &HeaderMap) -> Result<Option<HeaderValue>, Box<Response>> {
    if let Some(h) = headers.get(header::HOST) {
        let host = h.to_str().unwrap_or("");
        if !host_allowed(options, host) {
            return Err(Box::new(forbidden(format!(
                "the Host '{host}' is not allowed (a browser page on another site may be trying to reach this server); \
                 allow it with --allow-host {}",
                host_name(host)
            ))));
        }
    }
    if let Some(o) = headers.get(header::ORIGIN) {
        let origin = o.to_str().unwrap_or("").trim_end_matches('/');
        if options.allowed_origins.iter().any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
            return Ok(Some(o.clone()));
        }
        return Err(Box::new(forbidden(format!(
            "cross-origin requests are refused (Origin: {origin}); allow an origin with --allow-origin"
        ))));
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        if matches!(site.as_bytes(), b"cross-site" | b"same-site") {
            return Err(Box::new(forbidden("cross-site requests are refused; allow an origin with --allow-origin".into())));
        }
    }
    Ok(None)
}

fn with_cors(mut r: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(o) = origin {
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    r
}

async fn preflight(State(service): State<QueryService>, headers: HeaderMap) -> Response {
    match check_access(service.options(), &headers) {
        Err(r) => *r,
        Ok(origin) => {
            let mut r = StatusCode::NO_CONTENT.into_response();
            let h = r.headers_mut();
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST, GET"));
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("authorization, content-type, accept"));
            h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
            with_cors(r, origin)
        }
    }
}

async fn health(State(service): State<QueryService>, headers: HeaderMap) -> Response {
    match check_access(service.options(), &headers) {
        Err(r) => *r,
        Ok(origin) => with_cors(
            ([(header::CONTENT_TYPE, "application/json")], service.health().to_json().to_string()).into_response(),
            origin,
        ),
    }
}

async fn query(State(service): State<QueryService>, req: Request) -> Response {
    let origin = match check_access(service.options(), req.headers()) {
        Ok(o) => o,
        Err(r) => return *r,
    };
    // A panic anywhere in answering (planning, the first batch) is a 500.
    let r = match AssertUnwindSafe(answer(&service, req)).catch_unwind().await {
        Ok(r) => r,
        Err(p) => error_response(&QueryError::new(QueryErrorKind::Internal, crate::guard::panic_error(p.as_ref()).to_string())),
    };
    with_cors(r, origin)
}

/// Reads the SQL text: refused at once when its `Content-Length` is too large,
/// cut off when it grows too large or arrives too slowly.
async fn read_sql(service: &QueryService, req: Request) -> Result<String, QueryError> {
    let max = service.options().max_request_bytes;
    let too_large = |n: String| QueryError::new(QueryErrorKind::TooLarge, format!("the request body has {n} bytes; at most {max} are accepted"));
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
        let n = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok());
        match n {
            Some(n) if n > max as u64 => return Err(too_large(n.to_string())),
            Some(_) => {}
            None => return Err(QueryError::new(QueryErrorKind::BadRequest, "a malformed Content-Length header")),
        }
    }
    let mut body = req.into_body().into_data_stream();
    let read = async {
        let mut buf = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| QueryError::new(QueryErrorKind::BadRequest, format!("reading the request body: {e}")))?;
            if buf.len() + chunk.len() > max {
                return Err(too_large(format!("more than {max}")));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    let buf = match service.options().body_timeout {
        Some(t) => tokio::time::timeout(t, read).await.map_err(|_| {
            QueryError::new(QueryErrorKind::Timeout, format!("the request body did not arrive within {:.3} s", t.as_secs_f64()))
        })??,
        None => read.await?,
    };
    String::from_utf8(buf).map_err(|_| QueryError::new(QueryErrorKind::BadRequest, "the request body is not UTF-8 SQL text"))
}

async fn answer(service: &QueryService, req: Request) -> Response {
    let wants_arrow = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').any(|m| m.trim().starts_with(ARROW_STREAM)));
    // Size first (a huge Content-Length is answered at once), then the token.
    let auth = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|s| s.trim().parse::<u64>().ok()) {
        let max = service.options().max_request_bytes;
        if len > max as u64 {
            return error_response(&QueryError::new(
                QueryErrorKind::TooLarge,
                format!("the request body has {len} bytes; at most {max} are accepted"),
            ));
        }
    }
    if let Err(e) = service.authorize(auth.as_deref()) {
        return error_response(&e);
    }
    let sql = match read_sql(service, req).await {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let stream = match service.execute(&sql).await {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let mut answer = match Answer::new(stream, wants_arrow) {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    // The status goes with the first part: an error until then gets its own.
    let first = match answer.produce().await {
        Some(Ok(b)) => b,
        Some(Err(e)) => return error_response(&e),
        None => Vec::new(),
    };
    let mut head = std::mem::take(&mut answer.head);
    head.extend_from_slice(&first);
    let content_type = if wants_arrow { ARROW_STREAM } else { "application/json" };
    let rest = futures::stream::unfold(Body_::Run(Box::new(answer)), |st| async move {
        match st {
            Body_::Done => None,
            Body_::Abort(msg) => {
                // Let the connection flush what was written before breaking it off.
                tokio::task::yield_now().await;
                Some((Err(std::io::Error::other(msg)), Body_::Done))
            }
            Body_::Run(mut a) => {
                let r = match AssertUnwindSafe(a.produce()).catch_unwind().await {
                    Ok(r) => r,
                    Err(p) => Some(Err(QueryError::new(QueryErrorKind::Internal, crate::guard::panic_error(p.as_ref()).to_string()))),
                };
                match r {
                    Some(Ok(b)) => Some((Ok(Bytes::from(b)), Body_::Run(a))),
                    None => None,
                    Some(Err(e)) => {
                        let tail = a.error_tail(&e);
                        drop(a); // ends the query now
                        let msg = e.to_string();
                        if tail.is_empty() {
                            Some((Err(std::io::Error::other(msg)), Body_::Done))
                        } else {
                            Some((Ok(Bytes::from(tail)), Body_::Abort(msg)))
                        }
                    }
                }
            }
        }
    });
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(head)) }).chain(rest);
    ([(header::CONTENT_TYPE, content_type)], Body::from_stream(body)).into_response()
}

/// The state of a streamed answer body.
enum Body_ {
    Run(Box<Answer>),
    Abort(String),
    Done,
}

/// An answer being encoded part by part.
struct Answer {
    stream: QueryStream,
    /// The Arrow IPC writer (None: JSON).
    arrow: Option<StreamWriter<Vec<u8>>>,
    /// The bytes before the first part (JSON's column list, Arrow's schema).
    head: Vec<u8>,
    parts: VecDeque<RecordBatch>,
    rows: usize,
    finished: bool,
}

impl Answer {
    fn new(stream: QueryStream, arrow: bool) -> Result<Self, QueryError> {
        let schema = stream.schema();
        let internal = |e: arrow::error::ArrowError| QueryError::new(QueryErrorKind::Internal, format!("IPC encoding: {e}"));
        let (arrow, head) = if arrow {
            let mut w = StreamWriter::try_new(Vec::new(), &schema).map_err(internal)?;
            let head = std::mem::take(w.get_mut());
            (Some(w), head)
        } else {
            let columns: Vec<serde_json::Value> = schema
                .fields()
                .iter()
                .map(|f| serde_json::json!({"name": f.name(), "type": f.data_type().to_string(), "nullable": f.is_nullable()}))
                .collect();
            let mut head = b"{\"columns\":".to_vec();
            head.extend_from_slice(serde_json::Value::Array(columns).to_string().as_bytes());
            head.extend_from_slice(b",\"rows\":[");
            (None, head)
        };
        Ok(Answer { stream, arrow, head, parts: VecDeque::new(), rows: 0, finished: false })
    }

    /// The next part of the answer, held in the query's memory pool until the
    /// next call; the end (JSON's `row_count`, Arrow's end marker) is the last
    /// part, then None.
    async fn produce(&mut self) -> Option<Result<Vec<u8>, QueryError>> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(b) = self.parts.pop_front() {
                let r = self.encode(&b).and_then(|bytes| self.stream.hold(bytes.len()).map(|_| bytes));
                return Some(r.map_err(|e| self.stream.fail(e)));
            }
            match self.stream.next().await {
                Some(Ok(b)) => {
                    let n = b.num_rows();
                    if n == 0 {
                        continue;
                    }
                    let mut off = 0;
                    while off < n {
                        let len = PART_ROWS.min(n - off);
                        self.parts.push_back(b.slice(off, len));
                        off += len;
                    }
                }
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    self.finished = true;
                    let _ = self.stream.hold(0);
                    return Some(match self.arrow.as_mut() {
                        Some(w) => match w.finish() {
                            Ok(()) => Ok(std::mem::take(w.get_mut())),
                            Err(e) => Err(QueryError::new(QueryErrorKind::Internal, format!("IPC encoding: {e}"))),
                        },
                        None => Ok(format!("],\"row_count\":{}}}", self.rows).into_bytes()),
                    });
                }
            }
        }
    }

    fn encode(&mut self, b: &RecordBatch) -> Result<Vec<u8>, QueryError> {
        let first = self.rows == 0;
        self.rows += b.num_rows();
        match self.arrow.as_mut() {
            Some(w) => {
                let b = compact_batch(b.clone());
                w.write(&b).map_err(|e| QueryError::new(QueryErrorKind::Internal, format!("IPC encoding: {e}")))?;
                Ok(std::mem::take(w.get_mut()))
            }
            None => {
                // The CLI's JSON objects (every column kept, NaN spelled), after a
                // comma unless first.
                let inner = crate::format::json_objects(b)
                    .map_err(|e| QueryError::new(QueryErrorKind::Internal, format!("JSON encoding: {e}")))?;
                let mut part = Vec::with_capacity(inner.len() + 1);
                if !first {
                    part.push(b',');
                }
                part.extend_from_slice(&inner);
                Ok(part)
            }
        }
    }

    /// What ends a broken-off answer before the connection is cut (see the
    /// module's documentation).
    fn error_tail(&self, e: &QueryError) -> Vec<u8> {
        if self.arrow.is_some() {
            return Vec::new();
        }
        let msg = serde_json::Value::String(e.message.clone()).to_string();
        format!("],\"error\":{msg},\"kind\":\"{}\"}}", e.kind.as_str()).into_bytes()
    }
}

/// The open connections of an HTTP endpoint, oldest first.
#[derive(Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, (Arc<AtomicUsize>, Arc<tokio::sync::Notify>)>,
}

/// A connection's entry; removed when dropped.
struct Slot {
    id: u64,
    busy: Arc<AtomicUsize>,
    evict: Arc<tokio::sync::Notify>,
    table: Arc<Mutex<Connections>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        super::lock(&self.table).open.remove(&self.id);
    }
}

/// A slot for a new connection: at the limit, the oldest idle connection (no
/// request in progress: waiting for, or in the middle of, a request header) is
/// evicted; None when every connection is busy.
fn admit(table: &Arc<Mutex<Connections>>, max: usize) -> Option<Slot> {
    let mut t = super::lock(table);
    if t.open.len() >= max.max(1) {
        let idle = t.open.iter().find(|(_, (busy, _))| busy.load(Ordering::Acquire) == 0).map(|(id, _)| *id)?;
        if let Some((_, evict)) = t.open.remove(&idle) {
            evict.notify_one();
        }
    }
    let id = t.next;
    t.next += 1;
    let busy = Arc::new(AtomicUsize::new(0));
    let evict = Arc::new(tokio::sync::Notify::new());
    t.open.insert(id, (busy.clone(), evict.clone()));
    Some(Slot { id, busy, evict, table: table.clone() })
}

/// Marks a connection busy while one of its requests is being answered (until
/// its response body is done or dropped).
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(c: Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, Ordering::AcqRel);
        Busy(c)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection marked busy.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;
    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The router as a hyper service of one connection.
#[derive(Clone)]
struct ConnService {
    app: Router,
    busy: Arc<AtomicUsize>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for ConnService {
    type Response = hyper::Response<BusyBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let busy = Busy::new(self.busy.clone());
        let mut app = self.app.clone();
        Box::pin(async move {
            let r = tower_service::Service::call(&mut app, req).await?;
            Ok(r.map(|inner| BusyBody { inner, _busy: busy }))
        })
    }
}

/// Answers a connection that finds every slot busy with 503 and closes it.
async fn refuse(io: GuardedIo) {
    use tokio::io::AsyncWriteExt;
    let mut io = io;
    let body = r#"{"error":"too many connections: every connection is answering a query; retry later","kind":"too_many_connections"}"#;
    let msg = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = io.write_all(msg.as_bytes()).await;
        let _ = io.shutdown().await;
    })
    .await;
}

/// Serves [`router`] on `listener` until `shutdown`, with the service's transport
/// limits (see the module's documentation).
pub async fn serve_listener(
    service: QueryService,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> datafusion::error::Result<()> {
    let options = service.options().clone();
    serve_router(router(service), &options, listener, shutdown).await
}

/// Serves `app` (for instance an application's router with [`router`] nested
/// in it) on `listener` until `shutdown`, with the transport limits of
/// `options`: header timeout, write-stall timeout, connection limit. Use it
/// instead of `axum::serve`, which has none of them.
pub async fn serve_router(
    app: Router,
    options: &ServiceOptions,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> datafusion::error::Result<()> {
    let options = options.clone();
    let table = Arc::new(Mutex::new(Connections::default()));
    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, go on.
                    log::warn!("HTTP accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let io = GuardedIo::new(tcp, None, options.body_timeout, None);
        let Some(slot) = admit(&table, options.max_connections) else {
            tasks.spawn(refuse(io));
            continue;
        };
        let svc = ConnService { app: app.clone(), busy: slot.busy.clone() };
        let header_timeout = options.header_timeout;
        let mut close = close_rx.clone();
        tasks.spawn(async move {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true);
            let conn = b.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
            let mut conn = std::pin::pin!(conn);
            let evict = slot.evict.clone();
            let closing = tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        log::debug!("HTTP connection: {e}");
                    }
                    false
                }
                // Evicted for a new connection: dropped (closed) here.
                _ = evict.notified() => false,
                _ = close.changed() => true,
            };
            if closing {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
            drop(slot);
        });
    }
    let _ = close_tx.send(true);
    // Requests in progress get a moment to finish; the rest are cut.
    let _ = tokio::time::timeout(Duration::from_secs(10), async { while tasks.join_next().await.is_some() {} }).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert_eq!(host_name("localhost:8080"), "localhost");
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("Example.COM."), "example.com");
        let o = ServiceOptions { allowed_hosts: vec!["db.internal".into()], ..Default::default() };
        for ok in ["localhost", "127.0.0.1:1", "[::1]:9", "10.1.2.3", "db.internal:8080", "a.localhost"] {
            assert!(host_allowed(&o, ok), "{ok}");
        }
        for bad in ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io"] {
            assert!(!host_allowed(&o, bad), "{bad}");
        }
    }
}
