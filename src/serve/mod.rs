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
//!   The timeout does not depend on the client reading: at the deadline a watchdog
//!   drops the query's stream (its tasks, its memory, its slot) even while nobody
//!   polls the answer, and the next read of the answer reports the timeout.
//! * **Answers within the pool.** Answers are streamed, never collected whole: what
//!   the service holds of an answer (the encoded part on its way to the client) is
//!   reserved in the query's memory pool ([`QueryStream::hold`]), and
//!   [`QueryService::collect`] reserves what it collects. Arrow answers are compacted
//!   before encoding ([`compact_batch`]): string views that share large buffers are
//!   rewritten so that each batch carries only its own bytes.
//! * **Panics** in planning or execution become internal errors
//!   ([`crate::guard`]); the server keeps serving.
//! * **Transport limits** (see [`ServiceOptions`]): header and body read timeouts,
//!   a write-stall timeout, a connection limit, and for HTTP the `Origin`/`Host`
//!   checks that keep web pages (and DNS rebinding) from using a local server.
use crate::Ridgeline;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StructArray};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub mod flight;
pub mod http;
pub mod params;

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
    /// HTTP: browser origins (`scheme://host[:port]`, or `*`) whose requests are
    /// accepted. A request carrying any other `Origin` header (or
    /// `Sec-Fetch-Site: cross-site`/`same-site`) is refused with 403. Default: none.
    pub allowed_origins: Vec<String>,
    /// HTTP: `Host` names accepted besides `localhost` and IP literals (`*`: any).
    /// A DNS-rebinding page reaches the server under its own name; refusing
    /// foreign names keeps it from reading answers.
    pub allowed_hosts: Vec<String>,
    /// Longest wait for a request's header (HTTP) or a connection's first bytes
    /// (Flight SQL), and for the next request on an idle keep-alive connection.
    pub header_timeout: Option<Duration>,
    /// Longest wait for a request body, and longest a client may leave the
    /// server's writes stalled (not reading its answer) before it is disconnected.
    pub body_timeout: Option<Duration>,
    /// Open connections per endpoint. HTTP: at the limit a new connection evicts
    /// the oldest idle one (no request in progress), or is answered 503 when none
    /// is idle. Flight SQL: new connections wait.
    pub max_connections: usize,
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
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: Some(Duration::from_secs(10)),
            body_timeout: Some(Duration::from_secs(30)),
            max_connections: 512,
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
            DataFusionError::Execution(m) if is_panic_message(m) => QueryErrorKind::Internal,
            DataFusionError::ArrowError(..) | DataFusionError::Execution(_) => QueryErrorKind::BadRequest,
            _ => QueryErrorKind::Internal,
        };
        QueryError::new(kind, crate::format::one_line(&e))
    }
}

/// Whether `m` is the message of a caught panic ([`crate::guard::panic_error`]).
fn is_panic_message(m: &str) -> bool {
    m.starts_with("internal error (please report it)")
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
    /// A service over `engine` (its registered tables are what clients see: the
    /// engine's `ridgeline.file_access` is turned off, so SQL cannot read files).
    pub fn new(engine: Ridgeline, options: ServiceOptions) -> Self {
        if let Err(e) = engine.session().state_ref().write().config_mut().options_mut().set("ridgeline.file_access", "false") {
            log::warn!("cannot turn off file access: {e}");
        }
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
    fn query_session(&self) -> datafusion::error::Result<(SessionContext, Arc<dyn MemoryPool>)> {
        let state = self.inner.engine.session().state();
        let base = state.runtime_env().clone();
        let pool: Arc<dyn MemoryPool> = Arc::new(QueryPool {
            shared: self.inner.shared_pool.clone(),
            limit: self.inner.options.query_memory_limit,
            used: AtomicUsize::new(0),
        });
        let mut rb = RuntimeEnvBuilder::new().with_memory_pool(pool.clone()).with_object_store_registry(base.object_store_registry.clone());
        rb.disk_manager = Some(base.disk_manager.clone());
        let runtime = rb.build_arc()?;
        let state = SessionStateBuilder::new_from_existing(state).with_runtime_env(runtime).build();
        Ok((SessionContext::new_with_state(state), pool))
    }

    /// Plans `sql` and returns the schema of its answer (for Flight SQL's
    /// GetFlightInfo and prepared statements).
    pub async fn schema(&self, sql: &str) -> Result<SchemaRef, QueryError> {
        self.schema_bound(sql, None).await
    }

    /// [`schema`](Self::schema) of `sql` with `values` bound to its parameters
    /// ([`params::bind`]).
    pub async fn schema_bound(&self, sql: &str, values: Option<&RecordBatch>) -> Result<SchemaRef, QueryError> {
        Ok(self.plan_only(sql, Some(values)).await?.schema)
    }

    /// Plans `sql` (whose parameters need no values yet) and returns the schema
    /// of its answer and of its parameters (Flight SQL's CreatePreparedStatement).
    pub async fn prepare(&self, sql: &str) -> Result<Prepared, QueryError> {
        self.plan_only(sql, None).await
    }

    /// Plans `sql` (with `values` bound; `None`: parameters stay unbound), within
    /// the size limit and the timeout, panics caught; a failure counts as a
    /// failed query.
    async fn plan_only(&self, sql: &str, values: Option<Option<&RecordBatch>>) -> Result<Prepared, QueryError> {
        if let Err(e) = self.check_size(sql) {
            self.inner.stats.failed.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let fut = crate::guard::catch(async {
            let (ctx, _) = self.query_session()?;
            let df = match values {
                Some(v) => plan_bound(&ctx, sql, v).await?,
                None => plan_numbered(&ctx, sql).await?,
            };
            let types = df.logical_plan().get_parameter_types()?;
            Ok::<_, DataFusionError>(Prepared {
                schema: Arc::new(df.schema().as_arrow().clone()),
                parameters: Arc::new(params::parameter_schema(&types)),
            })
        });
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
    /// The query runs while the stream is polled and stops when it is dropped or
    /// when its timeout passes (polled or not).
    pub async fn execute(&self, sql: &str) -> Result<QueryStream, QueryError> {
        self.execute_bound(sql, None).await
    }

    /// [`execute`](Self::execute) `sql` with `values` bound to its parameters
    /// ([`params::bind`]; without values, a statement with parameters fails).
    pub async fn execute_bound(&self, sql: &str, values: Option<&RecordBatch>) -> Result<QueryStream, QueryError> {
        let started = Instant::now();
        let guard = QueryGuard::new(self.inner.clone());
        let timeout = self.inner.options.query_timeout;
        let res = self.check_size(sql);
        if let Err(e) = res {
            return Err(guard.fail(e));
        }
        // A panic while planning or starting the plan becomes an internal error.
        let fut = crate::guard::catch(async {
            let permit = self.inner.slots.clone().acquire_owned().await.map_err(|e| DataFusionError::Execution(e.to_string()))?;
            let (ctx, pool) = self.query_session()?;
            let df = plan_bound(&ctx, sql, values).await?;
            let stream = df.execute_stream().await?;
            Ok::<_, DataFusionError>((permit, pool, stream))
        });
        let started_fut = match timeout {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r.map_err(QueryError::from),
                Err(_) => Err(QueryError::timeout(t)),
            },
            None => fut.await.map_err(QueryError::from),
        };
        match started_fut {
            Ok((permit, pool, stream)) => {
                let schema = stream.schema();
                let held = MemoryConsumer::new("answer on its way to the client").register(&pool);
                // The query runs in its own task, one batch ahead of its reader: a
                // long stretch of work inside one poll of the plan cannot keep the
                // timeout (or the client) waiting. Panics become one error.
                let (tx, rx) = tokio::sync::mpsc::channel::<Produced>(1);
                let mut plan_stream = crate::guard::catch_stream(stream);
                let producer = tokio::spawn(async move {
                    while let Some(item) = plan_stream.next().await {
                        let failed = item.is_err();
                        if tx.send(Produced::Batch(item)).await.is_err() || failed {
                            return;
                        }
                    }
                    let _ = tx.send(Produced::End).await;
                })
                .abort_handle();
                let state = Arc::new(Mutex::new(Running {
                    inner: Some(rx),
                    producer: Some(producer),
                    permit: Some(permit),
                    guard: Some(guard),
                    held: Some(held),
                    error: None,
                    waker: None,
                }));
                let watchdog = timeout.and_then(|t| Some((t, started.checked_add(t)?))).map(|(t, deadline)| {
                    let weak = Arc::downgrade(&state);
                    let deadline = tokio::time::Instant::from_std(deadline);
                    tokio::spawn(async move {
                        tokio::time::sleep_until(deadline).await;
                        if let Some(st) = weak.upgrade() {
                            let mut st = lock(&st);
                            if st.guard.is_some() {
                                let e = st.end(Some(QueryError::timeout(t)));
                                st.error = e;
                                if let Some(w) = st.waker.take() {
                                    w.wake();
                                }
                            }
                        }
                    })
                    .abort_handle()
                });
                Ok(QueryStream { schema, state, pool, watchdog })
            }
            Err(e) => Err(guard.fail(e)),
        }
    }

    /// Runs `sql` to completion: the schema and all batches. What is collected is
    /// reserved in the query's memory pool while it is collected, so an answer
    /// larger than the memory limit fails with `ResourcesExhausted` instead of
    /// growing without bound (stream large answers with [`execute`](Self::execute)).
    pub async fn collect(&self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        let mut stream = self.execute(sql).await?;
        let schema = stream.schema();
        let reservation = MemoryConsumer::new("collected answer").register(&stream.pool);
        let mut batches = Vec::new();
        while let Some(b) = stream.next().await {
            let b = compact_batch(b?);
            if let Err(e) = reservation.try_grow(b.get_array_memory_size()) {
                let e = QueryError::new(
                    QueryErrorKind::ResourcesExhausted,
                    format!("the answer does not fit the memory limit ({} bytes collected): {}", reservation.size(), crate::format::one_line(&e)),
                );
                return Err(stream.fail(e));
            }
            batches.push(b);
        }
        Ok((schema, batches))
    }
}

/// What a prepared statement is: the schemas of its answer and of its parameters.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub schema: SchemaRef,
    pub parameters: SchemaRef,
}

/// Plans `sql` read-only with its `?` placeholders numbered ([`params::number_placeholders`]).
async fn plan_numbered(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<datafusion::prelude::DataFrame> {
    let dialect = ctx.copied_config().options().sql_parser.dialect.to_string();
    let sql = params::number_placeholders(sql, &dialect)?;
    crate::sql_ext::plan_sql_with(ctx, &sql, &read_only()).await
}

/// [`plan_numbered`] with `values` bound to the statement's parameters.
async fn plan_bound(ctx: &SessionContext, sql: &str, values: Option<&RecordBatch>) -> datafusion::error::Result<datafusion::prelude::DataFrame> {
    let df = plan_numbered(ctx, sql).await?;
    let types = df.logical_plan().get_parameter_types()?;
    match params::bind(&types, values)? {
        Some(v) => df.with_param_values(v),
        None => Ok(df),
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

/// `batch` with its string and binary views compacted where they keep (share)
/// much more buffer space than their values use, so that its IPC encoding (which
/// writes every referenced buffer whole) carries only its own bytes. Filters,
/// slices and generators that point into a shared text pool produce such views;
/// unchanged when nothing is wasteful. Offsets-based strings need nothing: the
/// IPC writer already writes only the slice's range.
pub fn compact_batch(batch: RecordBatch) -> RecordBatch {
    if !batch.columns().iter().any(|c| wasteful(c.as_ref())) {
        return batch;
    }
    let columns: Vec<ArrayRef> = batch.columns().iter().map(compact_array).collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(batch.schema(), columns, &options).unwrap_or(batch)
}

/// Bytes of the out-of-line values of a view array's views.
fn view_bytes(views: &[u128]) -> usize {
    views.iter().map(|v| *v as u32).filter(|&l| l > 12).map(|l| l as usize).sum()
}

fn wasteful(a: &dyn Array) -> bool {
    let (buffers, used) = match a.data_type() {
        DataType::Utf8View => {
            let v = a.as_string_view();
            (v.data_buffers().iter().map(|b| b.len()).sum::<usize>(), view_bytes(v.views()))
        }
        DataType::BinaryView => {
            let v = a.as_binary_view();
            (v.data_buffers().iter().map(|b| b.len()).sum::<usize>(), view_bytes(v.views()))
        }
        DataType::Struct(_) => return a.as_struct().columns().iter().any(|c| wasteful(c.as_ref())),
        _ => return false,
    };
    buffers > used + used / 4 + 4096
}

fn compact_array(a: &ArrayRef) -> ArrayRef {
    if !wasteful(a.as_ref()) {
        return a.clone();
    }
    match a.data_type() {
        DataType::Utf8View => Arc::new(a.as_string_view().gc()),
        DataType::BinaryView => Arc::new(a.as_binary_view().gc()),
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let cols: Vec<ArrayRef> = s.columns().iter().map(compact_array).collect();
            match StructArray::try_new(fields.clone(), cols, s.nulls().cloned()) {
                Ok(n) => Arc::new(n),
                Err(_) => a.clone(),
            }
        }
        _ => a.clone(),
    }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a query's task hands to its [`QueryStream`].
enum Produced {
    Batch(datafusion::error::Result<RecordBatch>),
    End,
}

/// What a running query holds: shared by its [`QueryStream`] and its watchdog.
struct Running {
    /// The answer from the query's task.
    inner: Option<tokio::sync::mpsc::Receiver<Produced>>,
    producer: Option<tokio::task::AbortHandle>,
    permit: Option<OwnedSemaphorePermit>,
    guard: Option<QueryGuard>,
    /// The part of the answer the service holds (see [`QueryStream::hold`]).
    held: Option<MemoryReservation>,
    /// An error to report at the next poll (the watchdog's timeout).
    error: Option<QueryError>,
    waker: Option<Waker>,
}

impl Running {
    /// Ends the query: drops its stream (stopping its tasks, freeing their
    /// memory), its slot and its held bytes, and counts it.
    fn end(&mut self, err: Option<QueryError>) -> Option<QueryError> {
        // Aborting the task drops the plan's stream (and its tasks, and their
        // memory reservations) at its next await.
        if let Some(p) = self.producer.take() {
            p.abort();
        }
        self.inner = None;
        self.permit = None;
        self.held = None;
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

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = self.producer.take() {
            p.abort();
        }
    }
}

/// A running query's answer. Dropping it cancels the query.
pub struct QueryStream {
    schema: SchemaRef,
    state: Arc<Mutex<Running>>,
    pool: Arc<dyn MemoryPool>,
    watchdog: Option<tokio::task::AbortHandle>,
}

/// A handle on a running query's held-bytes reservation (see [`QueryStream::hold`]),
/// for code that keeps encoded parts of the answer after the stream was moved.
#[derive(Clone)]
pub struct AnswerMemory {
    state: std::sync::Weak<Mutex<Running>>,
}

impl AnswerMemory {
    /// Sets the bytes of the answer the caller holds now (its encoded part on the
    /// way to the client), in the query's memory pool. Fails when that does not
    /// fit the query's or the service's limit; a no-op once the query has ended.
    pub fn hold(&self, bytes: usize) -> Result<(), QueryError> {
        let Some(st) = self.state.upgrade() else { return Ok(()) };
        let mut st = lock(&st);
        let Some(r) = st.held.as_mut() else { return Ok(()) };
        r.try_resize(bytes).map_err(|e| {
            QueryError::new(
                QueryErrorKind::ResourcesExhausted,
                format!("the answer's next part ({bytes} bytes) does not fit the memory limit: {}", crate::format::one_line(&e)),
            )
        })
    }
}

impl QueryStream {
    /// The answer's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// See [`AnswerMemory::hold`].
    pub fn hold(&self, bytes: usize) -> Result<(), QueryError> {
        self.memory().hold(bytes)
    }

    /// A handle to [`hold`](Self::hold) with after the stream was moved.
    pub fn memory(&self) -> AnswerMemory {
        AnswerMemory { state: Arc::downgrade(&self.state) }
    }

    /// Ends the query with `e` (counted as failed); returns `e`.
    pub fn fail(&mut self, e: QueryError) -> QueryError {
        lock(&self.state).end(Some(e.clone())).unwrap_or(e)
    }
}

impl Drop for QueryStream {
    fn drop(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
    }
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch, QueryError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut st = lock(&self.state);
        if let Some(e) = st.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let Some(inner) = st.inner.as_mut() else { return Poll::Ready(None) };
        match inner.poll_recv(cx) {
            Poll::Pending => {
                if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            Poll::Ready(Some(Produced::Batch(Ok(b)))) => Poll::Ready(Some(Ok(b))),
            Poll::Ready(Some(Produced::Batch(Err(e)))) => Poll::Ready(st.end(Some(e.into())).map(Err)),
            Poll::Ready(Some(Produced::End)) => {
                st.end(None);
                Poll::Ready(None)
            }
            // The task ended without saying so: never take that for a complete answer.
            Poll::Ready(None) => {
                let e = QueryError::new(QueryErrorKind::Internal, "the query's task ended before its answer was complete");
                Poll::Ready(st.end(Some(e)).map(Err))
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

/// A listener on `addr` for the `what` endpoint, or an error that names the
/// address (`cannot listen on 127.0.0.1:50051: address in use (Flight SQL)`).
async fn bind(addr: SocketAddr, what: &str) -> datafusion::error::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => "address in use".to_string(),
            std::io::ErrorKind::AddrNotAvailable => "no such address on this machine".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => e.to_string(),
        };
        DataFusionError::Execution(format!("cannot listen on {addr}: {why} ({what})"))
    })
}

/// Binds the endpoints, prints one `listening` line per endpoint (with the bound
/// address, so port 0 works), and serves until `shutdown` completes.
pub async fn serve(service: QueryService, listen: Listen, shutdown: impl Future<Output = ()> + Send + 'static) -> datafusion::error::Result<()> {
    let io = |e: std::io::Error| DataFusionError::Execution(format!("serve: {e}"));
    let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut tasks = tokio::task::JoinSet::new();
    if service.options().token.is_none() {
        for (what, addr) in [("Flight SQL", listen.flight_sql), ("HTTP", listen.http)] {
            if let Some(a) = addr.filter(|a| !a.ip().is_loopback()) {
                log::warn!(
                    "{what} listens on {a}, beyond this machine, without a token: anyone who can reach it can run queries (set --token or RIDGELINE_TOKEN)"
                );
            }
        }
    }
    if let Some(addr) = listen.flight_sql {
        let listener = bind(addr, "Flight SQL").await?;
        let local = listener.local_addr().map_err(io)?;
        println!("ridgeline: Flight SQL listening on grpc://{local}");
        let mut rx = tx.subscribe();
        let svc = service.clone();
        tasks.spawn(async move { flight::serve_listener(svc, listener, async move { let _ = rx.recv().await; }).await });
    }
    if let Some(addr) = listen.http {
        let listener = bind(addr, "HTTP").await?;
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


/// A client connection with the service's transport limits: its slot in the
/// endpoint's connection limit, a deadline for its first bytes, and a
/// write-stall timeout (a client that stops reading its answer is disconnected
/// instead of keeping the connection, and what it holds, forever).
pub(crate) struct GuardedIo {
    pub(crate) inner: tokio::net::TcpStream,
    first_read: Option<Pin<Box<tokio::time::Sleep>>>,
    write_stall: Option<Duration>,
    write_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl GuardedIo {
    pub(crate) fn new(
        inner: tokio::net::TcpStream,
        first_read: Option<Duration>,
        write_stall: Option<Duration>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let _ = inner.set_nodelay(true);
        GuardedIo { inner, first_read: first_read.map(|d| Box::pin(tokio::time::sleep(d))), write_stall, write_timer: None, _permit: permit }
    }

    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(d) = self.write_stall else { return false };
        let t = self.write_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(d)));
        t.as_mut().poll(cx).is_ready()
    }

    fn write_result<T>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending if self.stalled(cx) => {
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading its answer")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl tokio::io::AsyncRead for GuardedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.first_read = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if let Some(t) = this.first_read.as_mut() {
                    if t.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client sent nothing")));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl tokio::io::AsyncWrite for GuardedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write_result(cx, r)
    }
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write_result(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_result(cx, r)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringViewArray;
    use arrow::datatypes::{Field, Schema};

    fn ipc_len(b: &RecordBatch) -> usize {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &b.schema()).unwrap();
        w.write(b).unwrap();
        w.finish().unwrap();
        w.into_inner().unwrap().len()
    }

    #[test]
    fn shared_view_buffers_are_compacted() {
        let long: Vec<String> = (0..10_000).map(|i| format!("a string long enough to live out of line {i}")).collect();
        let a = StringViewArray::from_iter_values(long.iter());
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8View, false)]));
        let whole = RecordBatch::try_new(schema, vec![Arc::new(a)]).unwrap();
        let slice = whole.slice(100, 10);
        let compact = compact_batch(slice.clone());
        assert!(ipc_len(&slice) > 100 * ipc_len(&compact), "{} vs {}", ipc_len(&slice), ipc_len(&compact));
        assert_eq!(compact, slice);
        // Nothing to do: the same batch back.
        let again = compact_batch(compact.clone());
        assert_eq!(ipc_len(&again), ipc_len(&compact));
    }
}
