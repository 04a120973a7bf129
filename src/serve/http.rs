//! The HTTP endpoint: `POST /query` with the SQL text as the body, `GET /health`.
//!
//! * `POST /query` answers JSON by default:
//!   `{"columns":[{"name":..,"type":..},..],"rows":[{..},..],"row_count":N}`, or
//!   an Arrow IPC stream (`application/vnd.apache.arrow.stream`, streamed batch by
//!   batch) when the `Accept` header asks for it.
//! * Errors answer JSON `{"error": message, "kind": kind}` with status 400 (bad
//!   SQL, unknown table or column, refused statement), 401 (token), 408 (timeout),
//!   413 (request too large), 503 (memory limit) or 500.
//! * `GET /health` answers the service's counters and memory (no token needed: it
//!   shows no data).
use super::{QueryError, QueryErrorKind, QueryService};
use arrow::ipc::writer::StreamWriter;
use arrow::json::ArrayWriter;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use std::future::Future;

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// The endpoint's routes (`/query`, `/health`), to serve alone or to nest into an
/// application's own router.
pub fn router(service: QueryService) -> Router {
    let limit = service.options().max_request_bytes;
    Router::new()
        .route("/query", post(query))
        .route("/health", get(health))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(service)
}

/// Serves [`router`] on `listener` until `shutdown`.
pub async fn serve_listener(
    service: QueryService,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> datafusion::error::Result<()> {
    axum::serve(listener, router(service))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| datafusion::error::DataFusionError::Execution(format!("HTTP server: {e}")))
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
    let body = serde_json::json!({"error": e.message, "kind": e.kind.as_str()});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn health(State(service): State<QueryService>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], service.health().to_json().to_string()).into_response()
}

async fn query(State(service): State<QueryService>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Err(e) = service.authorize(auth) {
        return error_response(&e);
    }
    let body = match body {
        Ok(b) => b,
        Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error_response(&QueryError::new(
                QueryErrorKind::TooLarge,
                format!("the request body is larger than {} bytes", service.options().max_request_bytes),
            ))
        }
        Err(rej) => return error_response(&QueryError::new(QueryErrorKind::BadRequest, rej.body_text())),
    };
    let Ok(sql) = std::str::from_utf8(&body) else {
        return error_response(&QueryError::new(QueryErrorKind::BadRequest, "the request body is not UTF-8 SQL text"));
    };
    let wants_arrow = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').any(|m| m.trim().starts_with(ARROW_STREAM)));
    if wants_arrow {
        arrow_answer(&service, sql).await
    } else {
        json_answer(&service, sql).await
    }
}

async fn json_answer(service: &QueryService, sql: &str) -> Response {
    let (schema, batches) = match service.collect(sql).await {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let mut rows = Vec::new();
    let mut n = 0usize;
    {
        let mut w = ArrayWriter::new(&mut rows);
        for b in &batches {
            n += b.num_rows();
            if let Err(e) = w.write(b) {
                return error_response(&QueryError::new(QueryErrorKind::Internal, format!("JSON encoding: {e}")));
            }
        }
        if let Err(e) = w.finish() {
            return error_response(&QueryError::new(QueryErrorKind::Internal, format!("JSON encoding: {e}")));
        }
    }
    if rows.is_empty() {
        rows.extend_from_slice(b"[]");
    }
    let columns: Vec<serde_json::Value> = schema
        .fields()
        .iter()
        .map(|f| serde_json::json!({"name": f.name(), "type": f.data_type().to_string(), "nullable": f.is_nullable()}))
        .collect();
    let mut out = Vec::with_capacity(rows.len() + 256);
    out.extend_from_slice(b"{\"columns\":");
    out.extend_from_slice(serde_json::Value::Array(columns).to_string().as_bytes());
    out.extend_from_slice(b",\"rows\":");
    out.extend_from_slice(&rows);
    out.extend_from_slice(format!(",\"row_count\":{n}}}").as_bytes());
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
}

/// Streams the answer as Arrow IPC, batch by batch. An error after the first
/// batch ends the body early (the client sees a truncated stream: no end marker).
async fn arrow_answer(service: &QueryService, sql: &str) -> Response {
    let stream = match service.execute(sql).await {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let schema = stream.schema();
    let writer = match StreamWriter::try_new(Vec::new(), &schema) {
        Ok(w) => w,
        Err(e) => return error_response(&QueryError::new(QueryErrorKind::Internal, format!("IPC encoding: {e}"))),
    };
    // State: the writer (None once finished) and the query stream.
    let body = futures::stream::unfold((Some(writer), stream), |(writer, mut stream)| async move {
        let mut writer = writer?;
        let head = std::mem::take(writer.get_mut());
        if !head.is_empty() {
            return Some((Ok::<_, std::io::Error>(Bytes::from(head)), (Some(writer), stream)));
        }
        match stream.next().await {
            Some(Ok(b)) => match writer.write(&b) {
                Ok(()) => Some((Ok(Bytes::from(std::mem::take(writer.get_mut()))), (Some(writer), stream))),
                Err(e) => Some((Err(std::io::Error::other(e)), (None, stream))),
            },
            Some(Err(e)) => Some((Err(std::io::Error::other(e)), (None, stream))),
            None => match writer.finish() {
                Ok(()) => Some((Ok(Bytes::from(std::mem::take(writer.get_mut()))), (None, stream))),
                Err(e) => Some((Err(std::io::Error::other(e)), (None, stream))),
            },
        }
    });
    ([(header::CONTENT_TYPE, ARROW_STREAM)], Body::from_stream(body)).into_response()
}
