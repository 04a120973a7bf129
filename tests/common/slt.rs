//! The sqllogictest runner of Ridgeline's `.slt` files, shared by
//! `tests/sqllogictests.rs` (CPU and GPU mode) and `tests/budget_fallback.rs`
//! (GPU mode under device budgets too small for the operators).
#![allow(dead_code)]
use crate::common;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::error::DataFusionError;
use ridgeline::{GpuMode, Ridgeline};
use sqllogictest::{DBOutput, DefaultColumnType};
use std::time::Duration;

struct Db {
    rl: Ridgeline,
    name: String,
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    if dt.is_integer() {
        DefaultColumnType::Integer
    } else if dt.is_floating() || matches!(dt, DataType::Decimal128(_, _)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts = b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &opts)).collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .zip(b.columns())
                    .map(|(f, c)| {
                        let s = f.value(r).to_string();
                        if s.is_empty() && !c.is_null(r) { "(empty)".to_string() } else { s }
                    })
                    .collect(),
            );
        }
    }
    Ok(out)
}

#[async_trait]
impl sqllogictest::AsyncDB for Db {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;
    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.rl.sql(sql).await?;
        let schema = df.schema().as_arrow().clone();
        let batches = df.collect().await?;
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows { types: schema.fields().iter().map(|f| column_type(f.data_type())).collect(), rows: rows(&batches)? })
    }
    async fn shutdown(&mut self) {}
    fn engine_name(&self) -> &str {
        &self.name
    }
    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await
    }
}

pub fn slt_files() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut v: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "slt")).collect();
    v.sort();
    assert!(!v.is_empty(), "no .slt files");
    v
}

/// Runs every `.slt` file in `mode`; `setup` statements run on each fresh engine first.
pub async fn run_all(mode: GpuMode) {
    run_all_with(mode, &[]).await
}

/// [`run_all`] with `setup` statements (e.g. `SET ridgeline.chunk_rows = ...`).
pub async fn run_all_with(mode: GpuMode, setup: &'static [&'static str]) {
    let complete = std::env::var("RIDGELINE_SLT_COMPLETE").is_ok_and(|v| v == "1") && mode == GpuMode::Off;
    let mut failures = Vec::new();
    for file in slt_files() {
        let mut runner = sqllogictest::Runner::new(move || async move {
            let rl = common::engine(mode).await;
            for s in setup {
                rl.sql(s).await?.collect().await?;
            }
            Ok::<_, DataFusionError>(Db { rl, name: format!("ridgeline-{mode}") })
        });
        runner.with_column_validator(sqllogictest::default_column_validator);
        if complete {
            runner
                .update_test_file(&file, " ", sqllogictest::default_validator, sqllogictest::default_normalizer, sqllogictest::default_column_validator)
                .await
                .unwrap();
            continue;
        }
        if let Err(e) = runner.run_file_async(&file).await {
            failures.push(format!("{} in mode {mode}:\n{e}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

