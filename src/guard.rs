//! Robustness guards shared by the CLI, the shell and the server: panics become
//! errors, deep SQL gets a stack, and execution errors name what went wrong.
//!
//! A panic anywhere in planning or execution (a corrupt file that trips an
//! assertion in a reader, a bug) must not abort the process or leave a client
//! without an answer. DataFusion re-raises the panics of its spawned tasks in the
//! task that awaits them, so catching at the future or stream that the caller
//! polls covers the whole query.
use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{FutureExt, Stream, StreamExt};
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Stack size of the threads that plan and run queries (the CLI's runtime and
/// main thread, the server's workers). Only touched pages cost memory; deep
/// expressions (a 10,000-term `OR`, thousands of `UNION ALL` branches) recurse in
/// places that DataFusion's own stack growth does not cover (sqlparser, our rules).
pub const WORKER_STACK_BYTES: usize = 64 << 20;

/// The message of a caught panic.
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic without a message".to_string()
    }
}

const PANIC_PREFIX: &str = "internal error (please report it): ";

/// The error that stands for a caught panic.
pub fn panic_error(p: &(dyn Any + Send)) -> DataFusionError {
    DataFusionError::Execution(format!("{PANIC_PREFIX}{}", panic_message(p)))
}

/// Whether `e` stands for a caught panic.
pub fn is_panic_error(e: &DataFusionError) -> bool {
    matches!(e, DataFusionError::Execution(m) if m.starts_with(PANIC_PREFIX))
}

/// The panic message inside an error of [`panic_error`].
pub fn panic_detail(e: &DataFusionError) -> String {
    match e {
        DataFusionError::Execution(m) => m.strip_prefix(PANIC_PREFIX).unwrap_or(m).to_string(),
        other => other.to_string(),
    }
}

/// Runs `f`, turning a panic into an error.
pub fn catch_sync<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(panic_error(p.as_ref())))
}

/// Awaits `f`, turning a panic into an error.
pub async fn catch<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    AssertUnwindSafe(f).catch_unwind().await.unwrap_or_else(|p| Err(panic_error(p.as_ref())))
}

/// A record batch stream whose panics become one error, after which it ends.
pub fn catch_stream(inner: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let schema = inner.schema();
    Box::pin(RecordBatchStreamAdapter::new(schema, CatchStream { inner: Some(inner) }))
}

struct CatchStream {
    inner: Option<SendableRecordBatchStream>,
}

impl Stream for CatchStream {
    type Item = Result<RecordBatch>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll_next_unpin(cx))) {
            Ok(p) => p,
            Err(p) => {
                // Drop the stream (and with it the query's tasks) after a panic.
                self.inner = None;
                Poll::Ready(Some(Err(panic_error(p.as_ref()))))
            }
        }
    }
}

/// Installs the process's panic hook: a panic that a guard catches is reported
/// by it as one error line, so the hook prints nothing unless `RUST_BACKTRACE` is
/// set (it always logs at debug level, target `ridgeline::panic`).
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        log::debug!(target: "ridgeline::panic", "{info}");
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            default(info);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Schema;
    use std::sync::Arc;

    #[test]
    fn panics_become_errors() {
        let e = catch_sync::<()>(|| panic!("boom {}", 7)).unwrap_err();
        assert!(e.to_string().contains("internal error") && e.to_string().contains("boom 7"), "{e}");
        assert_eq!(catch_sync(|| Ok(3)).unwrap(), 3);
        let e = futures::executor::block_on(catch::<()>(async { panic!("async boom") })).unwrap_err();
        assert!(e.to_string().contains("async boom"), "{e}");
    }

    #[test]
    fn a_panicking_stream_ends_with_one_error() {
        let schema = Arc::new(Schema::empty());
        let s = futures::stream::iter(0..3).map(|i| -> Result<RecordBatch> {
            if i == 1 {
                panic!("stream boom");
            }
            Ok(RecordBatch::new_empty(Arc::new(Schema::empty())))
        });
        let s = catch_stream(Box::pin(RecordBatchStreamAdapter::new(schema, s)));
        let got: Vec<Result<RecordBatch>> = futures::executor::block_on(s.collect());
        assert_eq!(got.len(), 2, "one batch, one error, then the end");
        assert!(got[0].is_ok());
        assert!(got[1].as_ref().unwrap_err().to_string().contains("stream boom"));
    }
}
