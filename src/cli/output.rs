//! Running statements and printing results as a table, CSV or JSON.
use crate::exec::gpu_operator_names;
use crate::Ridgeline;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::displayable;
use std::io::Write;

/// Result formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned table.
    Table,
    /// Header line then rows; NULL is an empty field.
    Csv,
    /// A JSON array of objects.
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        <Format as clap::ValueEnum>::from_str(s, true)
    }
}

fn io(e: std::io::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Writes batches in `format`.
pub fn write_batches(schema: &SchemaRef, batches: &[RecordBatch], format: Format, out: &mut dyn Write) -> Result<()> {
    match format {
        Format::Table => {
            if batches.iter().all(|b| b.num_rows() == 0) {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                writeln!(out, "({}) 0 rows", names.join(", ")).map_err(io)?;
            } else {
                writeln!(out, "{}", arrow::util::pretty::pretty_format_batches(batches)?).map_err(io)?;
            }
        }
        Format::Csv => {
            let names: Vec<String> = schema.fields().iter().map(|f| csv_field(f.name())).collect();
            writeln!(out, "{}", names.join(",")).map_err(io)?;
            let mut w = arrow::csv::WriterBuilder::new().with_header(false).build(&mut *out);
            for b in batches {
                w.write(b)?;
            }
        }
        Format::Json => {
            let mut w = arrow::json::ArrayWriter::new(&mut *out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
            drop(w);
            if batches.iter().all(|b| b.num_rows() == 0) {
                write!(out, "[]").map_err(io)?;
            }
            writeln!(out).map_err(io)?;
        }
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Splits SQL text into statements at top-level `;` (not inside quotes or
/// comments). Each statement is returned as the whole text with every other
/// statement blanked out (newlines kept), so error positions from the parser point
/// into the user's original text.
pub fn split_statements(sql: &str) -> Vec<String> {
    let b = sql.as_bytes();
    let mut bounds = Vec::new();
    let (mut i, mut start) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if i + 1 < b.len() && b[i + 1] == q {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b';' => {
                bounds.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    bounds.push((start, b.len()));
    bounds
        .into_iter()
        .filter(|&(s, e)| is_meaningful(&sql[s..e.min(sql.len())]))
        .map(|(s, e)| {
            let e = e.min(sql.len());
            let blank = |t: &str| t.chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect::<String>();
            format!("{}{}{}", blank(&sql[..s]), &sql[s..e], blank(&sql[e..]))
        })
        .collect()
}

fn is_meaningful(stmt: &str) -> bool {
    // Not only whitespace and comments.
    let mut s = stmt.trim();
    loop {
        if let Some(r) = s.strip_prefix("--") {
            s = r.split_once('\n').map_or("", |x| x.1).trim();
        } else if let Some(r) = s.strip_prefix("/*") {
            s = r.split_once("*/").map_or("", |x| x.1).trim();
        } else {
            return !s.is_empty();
        }
    }
}

/// The physical plan of `sql` with GPU nodes marked `[gpu]`.
pub async fn explain(rl: &Ridgeline, sql: &str) -> Result<String> {
    let df = rl.sql(sql).await?;
    let plan = df.create_physical_plan().await?;
    let text = displayable(plan.as_ref()).indent(true).to_string();
    let marked: Vec<String> = text
        .lines()
        .map(|l| if l.trim_start().starts_with("Gpu") || l.contains("algorithm=gpu") || l.contains("algorithm=auto (gpu") { format!("[gpu] {l}") } else { format!("      {l}") })
        .collect();
    let gpu = gpu_operator_names(&plan);
    Ok(format!(
        "{}\nGPU operators: {}",
        marked.join("\n"),
        if gpu.is_empty() { "none".to_string() } else { gpu.join(", ") }
    ))
}

/// Runs every statement of `sql`, printing each result.
pub async fn run_statements(rl: &Ridgeline, sql: &str, format: Format, explain_only: bool, out: &mut dyn Write) -> Result<()> {
    let stmts = split_statements(sql);
    if stmts.is_empty() {
        return Err(DataFusionError::Plan("no SQL statement given".into()));
    }
    for s in stmts {
        if explain_only {
            writeln!(out, "{}", explain(rl, &s).await?).map_err(io)?;
            continue;
        }
        let df = rl.sql(&s).await?;
        let schema: SchemaRef = std::sync::Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        write_batches(&schema, &batches, format, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn splits_keep_positions() {
        let sql = "select 1; select ';' as x -- ; c\n; /* ; */ select 2;\n  ";
        let v = split_statements(sql);
        assert_eq!(v.len(), 3);
        for s in &v {
            assert_eq!(s.len(), sql.len());
        }
        assert_eq!(v[0].trim(), "select 1");
        assert_eq!(v[1].trim(), "select ';' as x -- ; c");
        assert!(v[2].trim().ends_with("select 2"));
        assert!(split_statements("  -- nothing\n ; ").is_empty());
    }
}
