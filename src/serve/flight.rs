//! The Arrow Flight SQL endpoint (ADBC, JDBC and Python Flight SQL clients).
//!
//! Supported: statements (`CommandStatementQuery` -> GetFlightInfo -> DoGet);
//! prepared statements with parameters (create, bind values with DoPut,
//! GetFlightInfo, DoGet, close: what JDBC and ADBC do), whose placeholders are
//! `?` or `$1` ([`super::params`]); the catalog calls BI tools browse with
//! (`GetCatalogs`, `GetDbSchemas`, `GetTables` with or without the tables'
//! schemas, `GetTableTypes`, `GetPrimaryKeys`, which is always empty, and
//! `GetXdbcTypeInfo`); `GetSqlInfo`; and `Handshake` (basic authentication whose
//! password is the token, answered with the bearer token). Every other call is
//! refused with a clear status. Every call checks the token.
//!
//! Nothing is kept between calls, so any server of a group can answer any of
//! them: a ticket carries the SQL text (and the bound values), a prepared
//! statement's handle is its SQL text, and binding values answers with a new
//! handle that carries them too (`DoPutPreparedStatementResult`; clients since
//! Arrow 15 use it).
//!
//! The catalog calls list the tables of the engine's catalogs (DataFusion's
//! `datafusion.public` unless the embedder registered others), with the filters
//! of the request: catalog name, schema and table name `LIKE` patterns, table
//! types (`TABLE`, `VIEW`, `LOCAL TEMPORARY`).
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
use super::params::Statement;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::sql::metadata::{
    GetDbSchemasBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo,
    XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandStatementQuery,
    DoPutPreparedStatementResult, Nullable, ProstMessageExt, Searchable, SqlInfo, TicketStatementQuery, XdbcDataType,
    XdbcDatetimeSubcode,
};
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::datasource::TableType;
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

    async fn info(
        &self,
        st: &Statement,
        ticket: Ticket,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = self.service.schema_bound(&st.sql, st.values.as_ref()).await.map_err(|e| status(&e))?;
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("schema encoding: {e}")))?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(descriptor)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    async fn stream(&self, st: &Statement) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        let stream = self.service.execute_bound(&st.sql, st.values.as_ref()).await.map_err(|e| status(&e))?;
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

impl RidgelineFlightSql {
    /// The engine's catalogs by name (only `only`'s, when given).
    fn catalogs(&self, only: Option<&str>) -> Vec<(String, Arc<dyn CatalogProvider>)> {
        let ctx = self.service.engine().session();
        let mut names = ctx.catalog_names();
        names.sort_unstable();
        names.into_iter().filter(|n| only.is_none_or(|o| o == n)).filter_map(|n| ctx.catalog(&n).map(|c| (n, c))).collect()
    }

    /// The parameter values of a DoPut (one record batch; its size within the
    /// request limit, read within the query timeout).
    async fn read_values(&self, stream: PeekableFlightDataStream) -> Result<RecordBatch, Status> {
        let max = self.service.options().max_request_bytes;
        let mut seen = 0usize;
        let limited = stream
            .map(move |r| {
                let fd = r?;
                seen = seen.saturating_add(fd.data_body.len() + fd.data_header.len() + fd.app_metadata.len());
                if seen > max {
                    return Err(Status::out_of_range(format!("the parameter values exceed {max} bytes, the request limit")));
                }
                Ok(fd)
            })
            .map_err(|s| FlightError::Tonic(Box::new(s)));
        let read = async move {
            let mut batches = FlightRecordBatchStream::new_from_flight_data(limited);
            let mut got = Vec::new();
            while let Some(b) = batches.next().await {
                got.push(b?);
            }
            Ok::<_, FlightError>((batches.schema().cloned(), got))
        };
        let read = match self.service.options().query_timeout {
            Some(t) => tokio::time::timeout(t, read)
                .await
                .map_err(|_| Status::deadline_exceeded(format!("the parameter values took longer than {:.3} s", t.as_secs_f64())))?,
            None => read.await,
        };
        let (schema, batches) = read.map_err(|e| match e {
            FlightError::Tonic(s) => *s,
            other => Status::invalid_argument(format!("parameter values: {other}")),
        })?;
        let schema = schema.ok_or_else(|| Status::invalid_argument("the parameter values carry no schema"))?;
        arrow::compute::concat_batches(&schema, &batches).map_err(|e| Status::invalid_argument(format!("parameter values: {e}")))
    }
}

/// The schemas of catalog `c` by name.
fn schemas(c: &dyn CatalogProvider) -> Vec<(String, Arc<dyn SchemaProvider>)> {
    let mut names = c.schema_names();
    names.sort_unstable();
    names.into_iter().filter_map(|n| c.schema(&n).map(|s| (n, s))).collect()
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

/// The statement of a ticket or prepared statement handle.
fn statement_of(handle: &[u8]) -> Result<Statement, Status> {
    Statement::decode(handle).map_err(Status::invalid_argument)
}

/// A FlightInfo whose one endpoint's ticket is `ticket` (a command, answered by
/// DoGet), for an answer of `schema`.
fn metadata_info(ticket: Vec<u8>, schema: &Schema, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("schema encoding: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor)
        .with_ordered(true);
    Ok(Response::new(info))
}

/// `batch` as a DoGet answer.
fn batch_answer(batch: Result<RecordBatch, FlightError>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let out = FlightDataEncoderBuilder::new()
        .with_schema(batch.schema())
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(|e| Status::internal(e.to_string()));
    Ok(Response::new(Box::pin(out)))
}

/// The Flight SQL name of a DataFusion table type (as `information_schema` spells it).
fn table_type_name(t: TableType) -> &'static str {
    match t {
        TableType::Base => "TABLE",
        TableType::View => "VIEW",
        TableType::Temporary => "LOCAL TEMPORARY",
    }
}

/// The schema of GetPrimaryKeys answers (Flight SQL's `CommandGetPrimaryKeys`).
fn primary_keys_schema() -> Schema {
    Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ])
}

/// The SQL types DataFusion plans, for GetXdbcTypeInfo.
fn xdbc_types() -> &'static XdbcTypeInfoData {
    static TYPES: OnceLock<XdbcTypeInfoData> = OnceLock::new();
    TYPES.get_or_init(|| {
        let mut b = XdbcTypeInfoDataBuilder::new();
        let base = |name: &str, t: XdbcDataType| XdbcTypeInfo {
            type_name: name.into(),
            data_type: t,
            nullable: Nullable::NullabilityNullable,
            searchable: Searchable::Basic,
            local_type_name: Some(name.into()),
            sql_data_type: t,
            ..Default::default()
        };
        let number = |name: &str, t: XdbcDataType, digits: i32| XdbcTypeInfo {
            column_size: Some(digits),
            unsigned_attribute: Some(false),
            auto_increment: Some(false),
            num_prec_radix: Some(10),
            ..base(name, t)
        };
        let quoted = |name: &str, t: XdbcDataType, prefix: &str, sub: Option<XdbcDatetimeSubcode>| XdbcTypeInfo {
            literal_prefix: Some(prefix.into()),
            literal_suffix: Some("'".into()),
            // ODBC: dates and times are SQL_DATETIME with a subcode.
            sql_data_type: if sub.is_some() { XdbcDataType::XdbcDatetime } else { t },
            datetime_subcode: sub,
            ..base(name, t)
        };
        b.append(XdbcTypeInfo { column_size: Some(1), ..base("BOOLEAN", XdbcDataType::XdbcBit) });
        b.append(number("TINYINT", XdbcDataType::XdbcTinyint, 3));
        b.append(number("SMALLINT", XdbcDataType::XdbcSmallint, 5));
        b.append(number("INTEGER", XdbcDataType::XdbcInteger, 10));
        b.append(number("BIGINT", XdbcDataType::XdbcBigint, 19));
        b.append(number("REAL", XdbcDataType::XdbcReal, 7));
        b.append(number("DOUBLE", XdbcDataType::XdbcDouble, 15));
        b.append(XdbcTypeInfo {
            create_params: Some(vec!["precision".into(), "scale".into()]),
            fixed_prec_scale: true,
            minimum_scale: Some(0),
            maximum_scale: Some(38),
            ..number("DECIMAL", XdbcDataType::XdbcDecimal, 38)
        });
        b.append(XdbcTypeInfo {
            case_sensitive: true,
            searchable: Searchable::Full,
            ..quoted("VARCHAR", XdbcDataType::XdbcVarchar, "'", None)
        });
        b.append(quoted("BYTEA", XdbcDataType::XdbcVarbinary, "X'", None));
        // Subcode 1 is ODBC's SQL_CODE_DATE (the enum calls it "year").
        b.append(quoted("DATE", XdbcDataType::XdbcDate, "DATE '", Some(XdbcDatetimeSubcode::XdbcSubcodeYear)));
        b.append(quoted("TIME", XdbcDataType::XdbcTime, "TIME '", Some(XdbcDatetimeSubcode::XdbcSubcodeTime)));
        b.append(quoted("TIMESTAMP", XdbcDataType::XdbcTimestamp, "TIMESTAMP '", Some(XdbcDatetimeSubcode::XdbcSubcodeTimestamp)));
        b.append(quoted("INTERVAL", XdbcDataType::XdbcInterval, "INTERVAL '", None));
        b.build().expect("static XDBC type data")
    })
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
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, false);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlSearchStringEscape, "\\");
        b.append(SqlInfo::SqlAllTablesAreSelectable, true);
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
        let st = Statement { sql: query.query, values: None };
        let ticket = TicketStatementQuery { statement_handle: st.sql.clone().into_bytes().into() };
        let ticket = Ticket::new(ticket.as_any().encode_to_vec());
        caught(self.info(&st, ticket, request.into_inner())).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let st = statement_of(&cmd.prepared_statement_handle)?;
        let ticket = Ticket::new(cmd.as_any().encode_to_vec());
        caught(self.info(&st, ticket, request.into_inner())).await
    }

    async fn get_flight_info_sql_info(&self, query: CommandGetSqlInfo, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder(sql_info()).schema().as_ref(), request.into_inner())
    }

    async fn get_flight_info_catalogs(&self, query: CommandGetCatalogs, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder().schema().as_ref(), request.into_inner())
    }

    async fn get_flight_info_schemas(&self, query: CommandGetDbSchemas, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder().schema().as_ref(), request.into_inner())
    }

    async fn get_flight_info_tables(&self, query: CommandGetTables, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder().schema().as_ref(), request.into_inner())
    }

    async fn get_flight_info_table_types(&self, query: CommandGetTableTypes, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder().schema().as_ref(), request.into_inner())
    }

    async fn get_flight_info_primary_keys(&self, query: CommandGetPrimaryKeys, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        metadata_info(query.as_any().encode_to_vec(), &primary_keys_schema(), request.into_inner())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let ticket = query.as_any().encode_to_vec();
        metadata_info(ticket, query.into_builder(xdbc_types()).schema().as_ref(), request.into_inner())
    }

    async fn do_get_statement(&self, ticket: TicketStatementQuery, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let st = statement_of(&ticket.statement_handle)?;
        caught(self.stream(&st)).await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let st = statement_of(&query.prepared_statement_handle)?;
        caught(self.stream(&st)).await
    }

    async fn do_get_sql_info(&self, query: CommandGetSqlInfo, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        batch_answer(query.into_builder(sql_info()).build())
    }

    async fn do_get_catalogs(&self, query: CommandGetCatalogs, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let mut b = query.into_builder();
        for (name, _) in self.catalogs(None) {
            b.append(name);
        }
        batch_answer(b.build())
    }

    async fn do_get_schemas(&self, query: CommandGetDbSchemas, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let catalogs = self.catalogs(query.catalog.as_deref());
        let mut b: GetDbSchemasBuilder = query.into_builder();
        for (catalog, c) in catalogs {
            for (schema, _) in schemas(c.as_ref()) {
                b.append(&catalog, schema);
            }
        }
        batch_answer(b.build())
    }

    async fn do_get_tables(&self, query: CommandGetTables, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let catalogs = self.catalogs(query.catalog.as_deref());
        let include_schema = query.include_schema;
        let b = query.into_builder();
        caught(async move {
            let mut b = b;
            let empty = Schema::empty();
            for (catalog, c) in catalogs {
                for (schema_name, schema) in schemas(c.as_ref()) {
                    let mut names = schema.table_names();
                    names.sort_unstable();
                    for table in names {
                        let (kind, table_schema) = if include_schema {
                            match schema.table(&table).await.map_err(|e| Status::internal(e.to_string()))? {
                                Some(t) => (t.table_type(), Some(t.schema())),
                                None => continue, // dropped meanwhile
                            }
                        } else {
                            match schema.table_type(&table).await.map_err(|e| Status::internal(e.to_string()))? {
                                Some(t) => (t, None),
                                None => continue,
                            }
                        };
                        b.append(&catalog, &schema_name, &table, table_type_name(kind), table_schema.as_deref().unwrap_or(&empty))
                            .map_err(|e| Status::internal(e.to_string()))?;
                    }
                }
            }
            // Patterns the LIKE kernel refuses are the client's fault.
            let batch = b.build().map_err(|e| Status::invalid_argument(format!("GetTables: {e}")))?;
            batch_answer(Ok(batch))
        })
        .await
    }

    async fn do_get_table_types(&self, query: CommandGetTableTypes, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        let mut b = query.into_builder();
        for t in [TableType::Base, TableType::View, TableType::Temporary] {
            b.append(table_type_name(t));
        }
        batch_answer(b.build())
    }

    async fn do_get_primary_keys(&self, _query: CommandGetPrimaryKeys, request: Request<Ticket>) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        // Ridgeline's tables have no primary keys.
        batch_answer(Ok(RecordBatch::new_empty(Arc::new(primary_keys_schema()))))
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
        self.check(request.metadata())?;
        batch_answer(query.into_builder(xdbc_types()).build())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        self.check(request.metadata())?;
        let st = statement_of(&query.prepared_statement_handle)?;
        let values = self.read_values(request.into_inner()).await?;
        let st = Statement { sql: st.sql, values: Some(values) };
        // Planned with its values now, so that wrong values fail here, not later.
        caught(async { self.service.schema_bound(&st.sql, st.values.as_ref()).await.map_err(|e| status(&e)) }).await?;
        let handle = st.encode().map_err(|e| Status::invalid_argument(crate::format::one_line(&e)))?;
        Ok(DoPutPreparedStatementResult { prepared_statement_handle: Some(handle.into()) })
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        self.check(request.metadata())?;
        let prepared = caught(async { self.service.prepare(&query.query).await.map_err(|e| status(&e)) }).await?;
        let ipc = |schema: &Schema| -> Result<IpcMessage, Status> {
            SchemaAsIpc::new(schema, &IpcWriteOptions::default())
                .try_into()
                .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))
        };
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema: ipc(&prepared.schema)?.0,
            parameter_schema: ipc(&prepared.parameters)?.0,
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
