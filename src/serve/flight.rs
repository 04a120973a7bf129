//! The Arrow Flight SQL endpoint (ADBC, JDBC and Python Flight SQL clients).
//!
//! Supported: statements (`CommandStatementQuery` -> GetFlightInfo -> DoGet),
//! prepared statements without parameters (create, GetFlightInfo, DoGet, close:
//! what JDBC does for every query), `GetSqlInfo`, and `Handshake` (basic
//! authentication whose password is the token, answered with the bearer token).
//! Every other call is refused with a clear status. The ticket carries the SQL text,
//! so any server of a group can answer it and nothing is kept between calls.
//!
//! Errors map to gRPC codes: bad SQL `INVALID_ARGUMENT`, token `UNAUTHENTICATED`,
//! timeout `DEADLINE_EXCEEDED`, memory limit `RESOURCE_EXHAUSTED`, too large a
//! request `OUT_OF_RANGE` (or tonic's own `RESOURCE_EXHAUSTED` above the message
//! limit), others `INTERNAL` (panics included: they become `INTERNAL` errors and
//! the server keeps serving). An error while an answer streams (a timeout, a
//! failed batch) ends the DoGet stream with that status.
//!
//! Answers are compacted before encoding ([`super::compact_batch`]): without it, a
//! batch whose string views share a large buffer sends that buffer again with
//! every message the encoder splits it into. The encoded messages on their way
//! are reserved in the query's memory pool.
//!
//! Transport: a connection limit (new connections wait), a deadline for a new
//! connection's first bytes, a write-stall timeout, HTTP/2 keep-alive pings, and
//! at most 64 concurrent streams per connection.
use super::{GuardedIo, QueryError, QueryErrorKind, QueryService};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandGetSqlInfo, CommandPreparedStatementQuery, CommandStatementQuery, DoPutPreparedStatementResult,
    ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc, Ticket,
};
use base64::Engine;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use prost::Message;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

/// A [`QueryError`] as a gRPC status.
pub fn status(e: &QueryError) -> Status {
    match e.kind {
        QueryErrorKind::Unauthorized => Status::unauthenticated(e.message.clone()),
        QueryErrorKind::BadRequest => Status::invalid_argument(e.message.clone()),
        QueryErrorKind::TooLarge => Status::out_of_range(e.message.clone()),
        QueryErrorKind::Timeout => Status::deadline_exceeded(e.message.clone()),
        QueryErrorKind::ResourcesExhausted => Status::resource_exhausted(e.message.clone()),
        QueryErrorKind::Internal => Status::internal(e.message.clone()),
    }
}

/// The Flight SQL service over a [`QueryService`].
#[derive(Clone)]
pub struct RidgelineFlightSql {
    service: QueryService,
}

impl RidgelineFlightSql {
    pub fn new(service: QueryService) -> Self {
        RidgelineFlightSql { service }
    }

    /// The gRPC server for it, with the message size limits of the service.
    pub fn into_server(self) -> FlightServiceServer<RidgelineFlightSql> {
        let max = self.service.options().max_request_bytes;
        FlightServiceServer::new(self).max_decoding_message_size(max).max_encoding_message_size(usize::MAX)
    }

    fn check(&self, meta: &MetadataMap) -> Result<(), Status> {
        let h = meta.get("authorization").and_then(|v| v.to_str().ok());
        self.service.authorize(h).map_err(|e| status(&e))
    }

    async fn info(&self, sql: &str, ticket: Ticket, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
        let schema = self.service.schema(sql).await.map_err(|e| status(&e))?;
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("schema encoding: {e}")))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(descriptor)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    async fn stream(&self, sql: &str) -> Result<Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>, Status> {
        let stream = self.service.execute(sql).await.map_err(|e| status(&e))?;
        let schema = stream.schema();
        let memory = stream.memory();
        let batches = stream
            .map_ok(|b| futures::stream::iter(split_compact(b).into_iter().map(Ok)))
            .try_flatten()
            .map_err(|e| FlightError::Tonic(Box::new(status(&e))));
        let out = FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map(move |r| match r {
            Ok(fd) => {
                // Hold the message on its way (in the query's pool).
                memory.hold(fd.data_body.len() + fd.data_header.len()).map_err(|e| status(&e))?;
                Ok(fd)
            }
            Err(FlightError::Tonic(s)) => Err(*s),
            Err(other) => Err(Status::internal(other.to_string())),
        });
        Ok(Response::new(Box::pin(CatchPanics { inner: Some(Box::pin(out)) })))
    }
}

/// Largest (estimated) message body the encoder is handed: below its own
/// splitting size (2 MiB), so it never slices a batch, whose slices would each
/// carry the whole of the batch's shared view buffers.
const MESSAGE_BYTES: usize = 1 << 20;

/// `b` in compact pieces of about [`MESSAGE_BYTES`] each.
fn split_compact(b: arrow::array::RecordBatch) -> Vec<arrow::array::RecordBatch> {
    let b = super::compact_batch(b);
    let size = b.get_array_memory_size();
    let rows = b.num_rows();
    if size <= MESSAGE_BYTES || rows <= 1 {
        return vec![b];
    }
    let pieces = size.div_ceil(MESSAGE_BYTES).min(rows);
    let per = rows.div_ceil(pieces);
    (0..rows).step_by(per).map(|off| super::compact_batch(b.slice(off, per.min(rows - off)))).collect()
}

/// A stream whose panics (in encoding) end it with an `INTERNAL` status.
struct CatchPanics<T> {
    inner: Option<BoxStream<T>>,
}

impl<T> Stream for CatchPanics<T> {
    type Item = Result<T, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll_next_unpin(cx))) {
            Ok(p) => {
                if let Poll::Ready(Some(Err(_)) | None) = &p {
                    self.inner = None; // an error ends the answer
                }
                p
            }
            Err(p) => {
                self.inner = None;
                Poll::Ready(Some(Err(Status::internal(crate::guard::panic_error(p.as_ref()).to_string()))))
            }
        }
    }
}

/// Awaits `f`, turning a panic into an `INTERNAL` status.
async fn caught<T>(f: impl std::future::Future<Output = Result<T, Status>>) -> Result<T, Status> {
    AssertUnwindSafe(f).catch_unwind().await.unwrap_or_else(|p| Err(Status::internal(crate::guard::panic_error(p.as_ref()).to_string())))
}

fn sql_of(handle: &[u8]) -> Result<&str, Status> {
    std::str::from_utf8(handle).map_err(|_| Status::invalid_argument("the statement handle is not UTF-8 SQL text"))
}

fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "Ridgeline");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "59");
        b.append(SqlInfo::FlightSqlServerReadOnly, true);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        b.append(SqlInfo::FlightSqlServerCancel, false);
        b.build().expect("static SqlInfo data")
    })
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl FlightSqlService for RidgelineFlightSql {
    type FlightService = RidgelineFlightSql;

    async fn do_handshake(&self, request: Request<Streaming<HandshakeRequest>>) -> Result<Response<BoxStream<HandshakeResponse>>, Status> {
        // Basic authentication (any user name, the token as password), or the token
        // itself as the handshake payload; no token configured: anyone.
        let token = self.service.options().token.clone().unwrap_or_default();
        let basic = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).and_then(|h| {
            let enc = h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic "))?;
            let dec = base64::engine::general_purpose::STANDARD.decode(enc.trim()).ok()?;
            let s = String::from_utf8(dec).ok()?;
            s.split_once(':').map(|(_, p)| p.to_string())
        });
        let accepted = match basic {
            Some(p) => self.service.token_matches(&p),
            None => {
                let bearer = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
                if self.service.authorize(bearer).is_ok() {
                    true
                } else {
                    let mut s = request.into_inner();
                    match s.next().await {
                        Some(Ok(m)) => std::str::from_utf8(&m.payload).is_ok_and(|p| self.service.token_matches(p)),
                        _ => self.service.options().token.is_none(),
                    }
                }
            }
        };
        if !accepted {
            return Err(Status::unauthenticated("wrong credentials: the password must be the server's token"));
        }
        let resp = HandshakeResponse { protocol_version: 0, payload: token.clone().into_bytes().into() };
        let mut response = Response::new(Box::pin(futures::stream::iter([Ok(resp)])) as BoxStream<HandshakeResponse>);
        if !token.is_empty() {
            if let Ok(v) = format!("Bearer {token}").parse() {
                response.metadata_mut().insert("authorization", v);
            }
        }
        Ok(response)
    }

    async fn get_flight_info_statement(&self, query: CommandStatementQuery, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = TicketStatementQuery { statement_handle: query.query.clone().into_bytes().into() };
        let ticket = Ticket::new(ticket.as_any().encode_to_vec());
        caught(self.info(&query.query, ticket, request.into_inner())).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let sql = sql_of(&cmd.prepared_statement_handle)?.to_string();
        let ticket = Ticket::new(cmd.as_any().encode_to_vec());
        caught(self.info(&sql, ticket, request.into_inner())).await
    }

    async fn get_flight_info_sql_info(&self, query: CommandGetSqlInfo, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(query.into_builder(sql_info()).schema().as_ref())
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_statement(&self, ticket: TicketStatementQuery, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let sql = sql_of(&ticket.statement_handle)?.to_string();
        caught(self.stream(&sql)).await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let sql = sql_of(&query.prepared_statement_handle)?.to_string();
        caught(self.stream(&sql)).await
    }

    async fn do_get_sql_info(&self, query: CommandGetSqlInfo, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let batch = query.into_builder(sql_info()).build().map_err(|e| Status::internal(e.to_string()))?;
        let schema = batch.schema();
        let out = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(futures::stream::iter([Ok(batch)]))
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(Box::pin(out)))
    }

    async fn do_put_prepared_statement_query(
        &self,
        _query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        self.check(request.metadata())?;
        Err(Status::unimplemented("Ridgeline's prepared statements take no parameters: put the values in the SQL text"))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        self.check(request.metadata())?;
        let schema = caught(async { self.service.schema(&query.query).await.map_err(|e| status(&e)) }).await?;
        let message: IpcMessage = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        let empty = arrow::datatypes::Schema::empty();
        let params: IpcMessage = SchemaAsIpc::new(&empty, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema: message.0,
            parameter_schema: params.0,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        // Nothing is kept per statement.
        self.check(request.metadata())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// Serves Flight SQL on `listener` until `shutdown`, with the service's
/// transport limits.
pub async fn serve_listener(
    service: QueryService,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> datafusion::error::Result<()> {
    let o = service.options().clone();
    let incoming = incoming(listener, o.max_connections, o.header_timeout, o.body_timeout);
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_concurrent_streams(Some(64))
        .add_service(RidgelineFlightSql::new(service).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| datafusion::error::DataFusionError::Execution(format!("Flight SQL server: {e}")))
}

impl tonic::transport::server::Connected for GuardedIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        <tokio::net::TcpStream as tonic::transport::server::Connected>::connect_info(&self.inner)
    }
}

/// Accepted connections of `listener` as a stream (what tonic serves from), at
/// most `max` open at once (the next waits for a slot).
fn incoming(
    listener: tokio::net::TcpListener,
    max: usize,
    first_bytes: Option<Duration>,
    write_stall: Option<Duration>,
) -> impl Stream<Item = std::io::Result<GuardedIo>> {
    let slots = Arc::new(tokio::sync::Semaphore::new(max.max(1)));
    futures::stream::unfold((listener, slots), move |(l, slots)| async move {
        let permit = slots.clone().acquire_owned().await.ok()?;
        loop {
            match l.accept().await {
                Ok((s, _)) => {
                    let io = GuardedIo::new(s, first_bytes, write_stall, Some(permit));
                    return Some((Ok(io), (l, slots)));
                }
                Err(e) => {
                    log::warn!("Flight SQL accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}
