//! Ridgeline as a service: `ridgeline serve` answers SQL over Arrow Flight SQL
//! ([`flight`]) and a small HTTP endpoint ([`http`]), both on one shared engine.
//!
//! [`QueryService`] is the part both protocols share (and what an embedder puts
//! behind their own endpoints, see `examples/axum_service.rs`):
//!
//! * **One engine, one GPU.** Every query plans against the same catalog and runs
//!   on the same device context (wgpu queues are thread-safe; the GPU buffer pool
//!   keeps its budget across queries). Each query gets its own copy of the session
//!   state, so settings never leak between clients.
//! * **Read only.** DDL, DML and `SET` are refused: clients share one catalog. The
//!   operator registers tables at start (`--table`, `--tpch`).
//! * **Limits.** An optional bearer token (compared in constant time); a maximum
//!   request size; a per-query timeout (planning, queueing and execution, and for
//!   streamed answers the whole stream); a per-query memory limit enforced by
//!   DataFusion's memory pool (sorts, joins and aggregations spill or fail with
//!   "resources exhausted"), all queries together drawing from one shared pool; a
//!   bound on concurrently running queries (the rest queue).
//! * **Cancellation.** A query runs only while its answer is being awaited: when a
//!   client goes away, its HTTP handler or Flight stream is dropped, which drops the
//!   DataFusion stream and aborts its tasks. [`ServiceStats`] counts such queries.
use crate::Ridgeline;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub mod flight;
pub mod http;

/// Limits and access control of a [`QueryService`].
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Clients must send `Authorization: Bearer <token>` (Flight SQL: the same
    /// header, or a handshake with the token as password).
    pub token: Option<String>,
    /// Wall-clock limit per query (queueing, planning, execution, streaming).
    pub query_timeout: Option<Duration>,
    /// Memory limit per query in bytes (DataFusion's memory pool).
    pub query_memory_limit: Option<usize>,
    /// Memory limit of all running queries together in bytes.
    pub total_memory_limit: Option<usize>,
    /// Largest accepted request (SQL text, Flight message) in bytes.
    pub max_request_bytes: usize,
    /// Queries running at once; the rest wait (their wait counts toward the timeout).
    pub max_concurrent_queries: usize,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            token: None,
            query_timeout: Some(Duration::from_secs(300)),
            query_memory_limit: None,
            total_memory_limit: None,
            max_request_bytes: 1 << 20,
            max_concurrent_queries: 4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4),
        }
    }
}

/// Why a query got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryErrorKind {
    /// Missing or wrong bearer token.
    Unauthorized,
    /// SQL syntax, unknown table or column, wrong types, a refused statement.
    BadRequest,
    /// The request is larger than `max_request_bytes`.
    TooLarge,
    /// The query ran past `query_timeout`.
    Timeout,
    /// The query needed more memory than its limit.
    ResourcesExhausted,
    /// Anything else (a bug, an I/O error).
    Internal,
}

impl QueryErrorKind {
    /// A short name, as the HTTP endpoint reports it.
    pub fn as_str(&self) -> &'static str {
        match self {
            QueryErrorKind::Unauthorized => "unauthorized",
            QueryErrorKind::BadRequest => "bad_request",
            QueryErrorKind::TooLarge => "too_large",
            QueryErrorKind::Timeout => "timeout",
            QueryErrorKind::ResourcesExhausted => "resources_exhausted",
            QueryErrorKind::Internal => "internal",
        }
    }
}

/// A query's error: its kind and a one-line message (DataFusion's, with the
/// position in the SQL text where it has one).
#[derive(Debug, Clone)]
pub struct QueryError {
    pub kind: QueryErrorKind,
    pub message: String,
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for QueryError {}

impl QueryError {
    pub fn new(kind: QueryErrorKind, message: impl Into<String>) -> Self {
        QueryError { kind, message: message.into() }
    }
    fn timeout(t: Duration) -> Self {
        QueryError::new(QueryErrorKind::Timeout, format!("query cancelled after the {:.3} s timeout", t.as_secs_f64()))
    }
}

impl From<DataFusionError> for QueryError {
    fn from(e: DataFusionError) -> Self {
        let kind = match e.find_root() {
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::Configuration(_) => QueryErrorKind::BadRequest,
            DataFusionError::ResourcesExhausted(_) => QueryErrorKind::ResourcesExhausted,
            // Casts and arithmetic that fail on the data (overflow, division by
            // zero, bad casts) are the query's fault, not the server's.
            DataFusionError::ArrowError(..) | DataFusionError::Execution(_) => QueryErrorKind::BadRequest,
            _ => QueryErrorKind::Internal,
        };
        QueryError::new(kind, crate::cli::one_line(&e))
    }
}

/// Counters of a [`QueryService`] (all since start).
#[derive(Debug, Default)]
pub struct ServiceStats {
    /// Queries answered completely.
    pub ok: AtomicU64,
    /// Queries that failed (bad SQL, limits, errors).
    pub failed: AtomicU64,
    /// Queries stopped by their timeout.
    pub timed_out: AtomicU64,
    /// Queries dropped before their answer was complete (the client went away).
    pub cancelled: AtomicU64,
    /// Queries running now.
    pub running: AtomicUsize,
}

/// A snapshot of the service's state, as `GET /health` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ok: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub cancelled: u64,
    pub running: usize,
    /// Bytes reserved in the shared memory pool now (0 when idle).
    pub memory_reserved: usize,
    /// Resident set size of the process in bytes (Linux; 0 elsewhere).
    pub rss_bytes: u64,
    /// The GPU adapter in use, or why there is none.
    pub gpu: String,
}

impl Health {
    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "status": "ok",
            "running_queries": self.running,
            "memory_reserved_bytes": self.memory_reserved,
            "rss_bytes": self.rss_bytes,
            "gpu": self.gpu,
            "queries": {"ok": self.ok, "failed": self.failed, "timed_out": self.timed_out, "cancelled": self.cancelled},
        })
    }
}

/// A per-query memory pool: enforces the query's own limit and draws from the
/// service's shared pool.
#[derive(Debug)]
struct QueryPool {
    shared: Arc<dyn MemoryPool>,
    limit: Option<usize>,
    used: AtomicUsize,
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "query pool: {} bytes reserved, limit {:?}", self.used.load(Ordering::Relaxed), self.limit)
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "ridgeline-query"
    }
    fn register(&self, consumer: &MemoryConsumer) {
        self.shared.register(consumer)
    }
    fn unregister(&self, consumer: &MemoryConsumer) {
        self.shared.unregister(consumer)
    }
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.shared.grow(reservation, additional);
        self.used.fetch_add(additional, Ordering::Relaxed);
    }
    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.shared.shrink(reservation, shrink);
        self.used.fetch_sub(shrink, Ordering::Relaxed);
    }
    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> datafusion::error::Result<()> {
        if let Some(limit) = self.limit {
            let mut cur = self.used.load(Ordering::Relaxed);
            loop {
                let next = cur + additional;
                if next > limit {
                    return Err(DataFusionError::ResourcesExhausted(format!(
                        "query memory limit of {limit} bytes reached: {} asked for {additional} more bytes with {cur} in use",
                        reservation.consumer().name()
                    )));
                }
                match self.used.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(v) => cur = v,
                }
            }
            if let Err(e) = self.shared.try_grow(reservation, additional) {
                self.used.fetch_sub(additional, Ordering::Relaxed);
                return Err(e);
            }
            Ok(())
        } else {
            self.shared.try_grow(reservation, additional)?;
            self.used.fetch_add(additional, Ordering::Relaxed);
            Ok(())
        }
    }
    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
    fn memory_limit(&self) -> MemoryLimit {
        match self.limit {
            Some(l) => MemoryLimit::Finite(l),
            None => self.shared.memory_limit(),
        }
    }
}

struct Inner {
    engine: Ridgeline,
    options: ServiceOptions,
    shared_pool: Arc<dyn MemoryPool>,
    slots: Arc<Semaphore>,
    stats: ServiceStats,
}

/// SQL answering shared by the Flight SQL and HTTP endpoints (cheap to clone).
#[derive(Clone)]
pub struct QueryService {
    inner: Arc<Inner>,
}

impl QueryService {
    /// A service over `engine` (its registered tables are what clients see).
    pub fn new(engine: Ridgeline, options: ServiceOptions) -> Self {
        let shared_pool: Arc<dyn MemoryPool> = match options.total_memory_limit {
            Some(l) => Arc::new(GreedyMemoryPool::new(l)),
            None => Arc::new(UnboundedMemoryPool::default()),
        };
        let slots = Arc::new(Semaphore::new(options.max_concurrent_queries.max(1)));
        QueryService { inner: Arc::new(Inner { engine, options, shared_pool, slots, stats: ServiceStats::default() }) }
    }

    /// The engine.
    pub fn engine(&self) -> &Ridgeline {
        &self.inner.engine
    }

    /// The options.
    pub fn options(&self) -> &ServiceOptions {
        &self.inner.options
    }

    /// The counters.
    pub fn stats(&self) -> &ServiceStats {
        &self.inner.stats
    }

    /// Checks an `Authorization` header value (`Bearer <token>`).
    pub fn authorize(&self, header: Option<&str>) -> Result<(), QueryError> {
        let Some(expected) = &self.inner.options.token else { return Ok(()) };
        let given = header.and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))).map(str::trim);
        match given {
            Some(t) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => Ok(()),
            Some(_) => Err(QueryError::new(QueryErrorKind::Unauthorized, "wrong bearer token")),
            None => Err(QueryError::new(QueryErrorKind::Unauthorized, "missing 'Authorization: Bearer <token>' header")),
        }
    }

    /// Whether `token` is the service's token (any token when there is none).
    pub fn token_matches(&self, token: &str) -> bool {
        self.inner.options.token.as_ref().is_none_or(|t| constant_time_eq(token.as_bytes(), t.as_bytes()))
    }

    /// The state now.
    pub fn health(&self) -> Health {
        let s = &self.inner.stats;
        let gpu = match ridgeline_operators::context::global() {
            Ok(ctx) => format!("{} ({:?})", ctx.info().name, ctx.info().backend),
            Err(e) => format!("none: {e}"),
        };
        Health {
            ok: s.ok.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            timed_out: s.timed_out.load(Ordering::Relaxed),
            cancelled: s.cancelled.load(Ordering::Relaxed),
            running: s.running.load(Ordering::Relaxed),
            memory_reserved: self.inner.shared_pool.reserved(),
            rss_bytes: rss_bytes(),
            gpu,
        }
    }

    fn check_size(&self, sql: &str) -> Result<(), QueryError> {
        let max = self.inner.options.max_request_bytes;
        if sql.len() > max {
            return Err(QueryError::new(
                QueryErrorKind::TooLarge,
                format!("the SQL text has {} bytes; at most {max} are accepted", sql.len()),
            ));
        }
        if sql.trim().is_empty() {
            return Err(QueryError::new(QueryErrorKind::BadRequest, "empty SQL text"));
        }
        Ok(())
    }

    /// A session for one query: the engine's state (catalog, functions, Ridgeline's
    /// rules) with its own settings and a memory pool holding the query's limit.
    fn query_session(&self) -> datafusion::error::Result<SessionContext> {
        let state = self.inner.engine.session().state();
        let base = state.runtime_env().clone();
        let pool = Arc::new(QueryPool {
            shared: self.inner.shared_pool.clone(),
            limit: self.inner.options.query_memory_limit,
            used: AtomicUsize::new(0),
        });
        let mut rb = RuntimeEnvBuilder::new().with_memory_pool(pool).with_object_store_registry(base.object_store_registry.clone());
        rb.disk_manager = Some(base.disk_manager.clone());
        let runtime = rb.build_arc()?;
        let state = SessionStateBuilder::new_from_existing(state).with_runtime_env(runtime).build();
        Ok(SessionContext::new_with_state(state))
    }

    /// Plans `sql` and returns the schema of its answer (for Flight SQL's
    /// GetFlightInfo and prepared statements).
    pub async fn schema(&self, sql: &str) -> Result<SchemaRef, QueryError> {
        if let Err(e) = self.check_size(sql) {
            self.inner.stats.failed.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let fut = async {
            let ctx = self.query_session()?;
            let df = crate::sql_ext::plan_sql_with(&ctx, sql, &read_only()).await?;
            Ok::<_, DataFusionError>(Arc::new(df.schema().as_arrow().clone()))
        };
        let r = match self.inner.options.query_timeout {
            Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| QueryError::timeout(t)).and_then(|r| r.map_err(Into::into)),
            None => fut.await.map_err(Into::into),
        };
        // A statement that fails to plan never runs: count it here (one that plans
        // is counted when it runs).
        if let Err(e) = &r {
            let s = &self.inner.stats;
            if e.kind == QueryErrorKind::Timeout { &s.timed_out } else { &s.failed }.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Starts `sql`: waits for a slot, plans it and returns its answer as a stream.
    /// The query runs while the stream is polled and stops when it is dropped.
    pub async fn execute(&self, sql: &str) -> Result<QueryStream, QueryError> {
        let started = Instant::now();
        let guard = QueryGuard::new(self.inner.clone());
        let timeout = self.inner.options.query_timeout;
        let res = self.check_size(sql);
        if let Err(e) = res {
            return Err(guard.fail(e));
        }
        let fut = async {
            let permit = self.inner.slots.clone().acquire_owned().await.map_err(|e| DataFusionError::Execution(e.to_string()))?;
            let ctx = self.query_session()?;
            let df = crate::sql_ext::plan_sql_with(&ctx, sql, &read_only()).await?;
            let stream = df.execute_stream().await?;
            Ok::<_, DataFusionError>((permit, stream))
        };
        let started_fut = match timeout {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r.map_err(QueryError::from),
                Err(_) => Err(QueryError::timeout(t)),
            },
            None => fut.await.map_err(QueryError::from),
        };
        match started_fut {
            Ok((permit, stream)) => {
                let deadline = timeout.map(|t| Box::pin(tokio::time::sleep_until((started + t).into())));
                Ok(QueryStream { schema: stream.schema(), inner: Some(stream), deadline, timeout, guard: Some(guard), _permit: Some(permit) })
            }
            Err(e) => Err(guard.fail(e)),
        }
    }

    /// Runs `sql` to completion: the schema and all batches.
    pub async fn collect(&self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        let mut stream = self.execute(sql).await?;
        let schema = stream.schema();
        let mut batches = Vec::new();
        while let Some(b) = stream.next().await {
            batches.push(b?);
        }
        Ok((schema, batches))
    }
}

fn read_only() -> SQLOptions {
    SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The process's resident set size (Linux), 0 where unknown.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

/// Counts a query as running from its start until it is finished, failed or dropped.
struct QueryGuard {
    inner: Arc<Inner>,
    done: bool,
}

impl QueryGuard {
    fn new(inner: Arc<Inner>) -> Self {
        inner.stats.running.fetch_add(1, Ordering::Relaxed);
        QueryGuard { inner, done: false }
    }
    fn finish(mut self) {
        self.inner.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.done = true;
    }
    fn fail(mut self, e: QueryError) -> QueryError {
        let s = &self.inner.stats;
        if e.kind == QueryErrorKind::Timeout {
            s.timed_out.fetch_add(1, Ordering::Relaxed);
        } else {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.done = true;
        e
    }
}

impl Drop for QueryGuard {
    fn drop(&mut self) {
        if !self.done {
            self.inner.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.stats.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A running query's answer. Dropping it cancels the query.
pub struct QueryStream {
    schema: SchemaRef,
    inner: Option<SendableRecordBatchStream>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Option<Duration>,
    guard: Option<QueryGuard>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl QueryStream {
    /// The answer's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn end(&mut self, err: Option<QueryError>) -> Option<QueryError> {
        self.inner = None; // stops the query's tasks at once
        self._permit = None;
        let guard = self.guard.take()?;
        match err {
            Some(e) => Some(guard.fail(e)),
            None => {
                guard.finish();
                None
            }
        }
    }
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch, QueryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.inner.is_none() {
            return Poll::Ready(None);
        }
        if let Some(d) = this.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                let t = this.timeout.unwrap_or_default();
                return Poll::Ready(this.end(Some(QueryError::timeout(t))).map(Err));
            }
        }
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        match inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(b))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(this.end(Some(e.into())).map(Err)),
            Poll::Ready(None) => {
                this.end(None);
                Poll::Ready(None)
            }
        }
    }
}

use std::future::Future;

/// Where `ridgeline serve` listens.
#[derive(Debug, Clone)]
pub struct Listen {
    pub flight_sql: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
}

/// Binds the endpoints, prints one `listening` line per endpoint (with the bound
/// address, so port 0 works), and serves until `shutdown` completes.
pub async fn serve(service: QueryService, listen: Listen, shutdown: impl Future<Output = ()> + Send + 'static) -> datafusion::error::Result<()> {
    let io = |e: std::io::Error| DataFusionError::Execution(format!("serve: {e}"));
    let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = listen.flight_sql {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        println!("ridgeline: Flight SQL listening on grpc://{local}");
        let mut rx = tx.subscribe();
        let svc = service.clone();
        tasks.spawn(async move { flight::serve_listener(svc, listener, async move { let _ = rx.recv().await; }).await });
    }
    if let Some(addr) = listen.http {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        println!("ridgeline: HTTP listening on http://{local}");
        let mut rx = tx.subscribe();
        let svc = service.clone();
        tasks.spawn(async move { http::serve_listener(svc, listener, async move { let _ = rx.recv().await; }).await });
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    tokio::select! {
        _ = shutdown => {
            let _ = tx.send(());
        }
        Some(r) = tasks.join_next() => {
            r.map_err(|e| DataFusionError::Execution(e.to_string()))??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| DataFusionError::Execution(e.to_string()))??;
    }
    Ok(())
}
