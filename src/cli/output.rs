//! Running statements and printing results as a table, CSV or JSON.
//!
//! Formats keep every column and every row (the shell's table display may be
//! bounded, see [`Display`]):
//! - `table`: an aligned table (NULL is `NULL`) and a row-count footer (`3 rows`);
//!   an empty result prints its header and `0 rows`.
//! - `csv`: a header line, then one line per row; NULL is an empty field.
//! - `json`: one JSON array of objects per statement (`[]` when empty), every
//!   column present (NULL is `null`).
//!
//! A statement without a result (DDL, `SET`: no columns) prints nothing.
//!
//! Floating-point NaN and infinities are not JSON numbers: `json` and `csv`
//! spell them `"NaN"`, `"Infinity"` and `"-Infinity"` (strings in JSON, as
//! PostgreSQL and JavaScript spell them), never a silent `null`.
//!
//! Statements are split by one tokenizer-aware scanner ([`scan`]), shared by
//! `query` and the shell: a `;` inside a quoted string or identifier, a `--`
//! comment, a (nested) `/* */` comment or a dollar-quoted string never ends a
//! statement.
use crate::exec::gpu_operator_names;
use crate::format::spell_non_finite;
pub use crate::format::json_objects;
use crate::guard::{catch, catch_stream, catch_sync};
use crate::Ridgeline;
use arrow::array::RecordBatch;
use arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::displayable;
use futures::StreamExt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Result formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned table.
    Table,
    /// Header line then rows; NULL is an empty field; NaN, Infinity, -Infinity.
    Csv,
    /// A JSON array of objects, every column kept (NULL is null); NaN and
    /// infinities are the strings "NaN", "Infinity", "-Infinity".
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

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Whether a write to standard output (through [`Stdout`]) found the reader
/// gone (a closed pipe, as in `ridgeline query ... | head -1`). The CLI then
/// ends quietly with exit code 0, as `psql` and DuckDB do.
pub fn stdout_closed() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

/// Buffered standard output that notes a closed pipe (see [`stdout_closed`]).
pub struct Stdout(std::io::BufWriter<std::io::Stdout>);

impl Stdout {
    /// Standard output, buffered.
    pub fn new() -> Self {
        Stdout(std::io::BufWriter::with_capacity(64 << 10, std::io::stdout()))
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

fn note(e: std::io::Error) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_GONE.store(true, Ordering::Relaxed);
    }
    e
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(note)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf).map_err(note)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(note)
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        // BufWriter's own drop would flush too; this keeps a closed pipe noted.
        let _ = self.flush();
    }
}

/// Whether an error stands for a closed standard output: noted by [`Stdout`],
/// or the panic of `println!` on a closed pipe (code outside this module).
pub fn is_closed_stdout(e: &DataFusionError) -> bool {
    stdout_closed() || e.to_string().contains("failed printing to stdout")
}

/// Prints `error: ...` as one line on standard error ([`error_line`]); a closed
/// standard error is ignored (no panic, unlike `eprintln!`).
pub fn report_error(e: &DataFusionError) {
    let _ = writeln!(std::io::stderr(), "error: {}", error_line(e));
}

/// A statement stopped by Ctrl-C (see [`super::shell::Interrupt`]).
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Whether an error is [`Interrupted`].
pub fn is_interrupted(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(x) => x.is::<Interrupted>(),
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => is_interrupted(inner),
        _ => false,
    }
}

/// An error as one line for people: a syntax error as its message (not the
/// parser's `ParserError("...")` debug text), a context as `context: error`, the
/// position a planner's diagnostic knows as `at Line: L, Column: C`, and file
/// paths with their leading `/` (the object store drops it).
pub fn error_line(e: &DataFusionError) -> String {
    let mut s = render(e);
    if !s.contains("Line: ") {
        if let Some(span) = e.diagnostic().and_then(|d| d.span) {
            if span.start.line > 0 {
                s.push_str(&format!(" at Line: {}, Column: {}", span.start.line, span.start.column));
            }
        }
    }
    let s = match s.find("internal error (please report it)") {
        Some(i) => &s[i..],
        None => &s,
    };
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn render(e: &DataFusionError) -> String {
    use datafusion::sql::sqlparser::parser::ParserError;
    match e {
        DataFusionError::SQL(pe, _) => match pe.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => format!("syntax error: {m}"),
            ParserError::RecursionLimitExceeded => "syntax error: the statement is nested too deeply".to_string(),
            #[allow(unreachable_patterns)]
            other => format!("syntax error: {other}"),
        },
        DataFusionError::Context(c, inner) => format!("{c}: {}", render(inner)),
        DataFusionError::Diagnostic(_, inner) => render(inner),
        DataFusionError::Shared(inner) => render(inner),
        DataFusionError::External(x) if x.is::<Interrupted>() => "interrupted (Ctrl-C)".to_string(),
        DataFusionError::External(x) => match x.downcast_ref::<DataFusionError>() {
            Some(inner) => render(inner),
            None => e.to_string(),
        },
        DataFusionError::ObjectStore(os) => rooted_paths(&e.to_string(), os),
        other => other.to_string(),
    }
}

/// The object store's message with the path it names given back its leading
/// `/` (`object_store::path::Path` is relative to the root: `tmp/x.parquet`).
fn rooted_paths(msg: &str, e: &datafusion::object_store::Error) -> String {
    let path = match e {
        datafusion::object_store::Error::NotFound { path, .. } | datafusion::object_store::Error::AlreadyExists { path, .. } => path.as_str(),
        datafusion::object_store::Error::Precondition { path, .. } | datafusion::object_store::Error::NotModified { path, .. } => path.as_str(),
        _ => "",
    };
    if path.is_empty() || path.starts_with('/') {
        return msg.to_string();
    }
    let rooted = format!("/{path}");
    let mut out = String::with_capacity(msg.len() + 4);
    let mut rest = msg;
    while let Some(i) = rest.find(path) {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'/';
        out.push_str(&rest[..i]);
        out.push_str(if before_ok { &rooted } else { path });
        rest = &rest[i + path.len()..];
    }
    out.push_str(rest);
    out
}

fn csv_batch(b: &RecordBatch) -> Result<RecordBatch> {
    let cols = b.columns().iter().map(spell_non_finite).collect::<Result<Vec<_>>>()?;
    let fields: Vec<FieldRef> = b
        .schema()
        .fields()
        .iter()
        .zip(&cols)
        .map(|(f, c)| if f.data_type() == c.data_type() { f.clone() } else { Arc::new(f.as_ref().clone().with_data_type(c.data_type().clone())) })
        .collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
}

/// How results print: the format and, for the table format, how many rows at
/// most (the shell's bound; the first half and the last half of them, with a `…`
/// row between, and a footer `N rows (M shown)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Display {
    /// The format.
    pub format: Format,
    /// The table format's row bound (`None`: every row).
    pub max_rows: Option<usize>,
}

impl Display {
    /// Every row in `format`.
    pub fn all(format: Format) -> Display {
        Display { format, max_rows: None }
    }
}

/// How the table format spells values: NULL as `NULL`.
fn table_options() -> arrow::util::display::FormatOptions<'static> {
    arrow::util::display::FormatOptions::default().with_display_error(true).with_null("NULL")
}

/// `N rows` (`1 row`), with `(M shown)` when fewer are shown.
pub fn row_footer(total: usize, shown: usize) -> String {
    let noun = if total == 1 { "row" } else { "rows" };
    if shown < total {
        format!("{total} {noun} ({shown} shown)")
    } else {
        format!("{total} {noun}")
    }
}

/// Rows of `batches` as text columns (as the table shows them), for the
/// elided table.
fn text_batch(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch> {
    let options = table_options();
    let mut cols: Vec<Vec<String>> = vec![Vec::new(); schema.fields().len()];
    for b in batches {
        for (c, col) in b.columns().iter().enumerate() {
            let f = arrow::util::display::ArrayFormatter::try_new(col.as_ref(), &options)?;
            for i in 0..b.num_rows() {
                cols[c].push(f.value(i).to_string());
            }
        }
    }
    text_columns(schema, cols)
}

fn text_columns(schema: &SchemaRef, cols: Vec<Vec<String>>) -> Result<RecordBatch> {
    use arrow::datatypes::{DataType, Field};
    let fields: Vec<Field> = schema.fields().iter().map(|f| Field::new(f.name(), DataType::Utf8, false)).collect();
    let arrays: Vec<arrow::array::ArrayRef> = cols.into_iter().map(|c| Arc::new(arrow::array::StringArray::from(c)) as arrow::array::ArrayRef).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// Writes a result in a format, batch by batch (the table format prints at the
/// end; bounded, it keeps only the rows it shows).
struct ResultWriter<'o> {
    display: Display,
    schema: SchemaRef,
    out: &'o mut dyn Write,
    /// Table: the first rows (all of them when unbounded).
    head: Vec<RecordBatch>,
    head_rows: usize,
    /// Table, bounded: the last rows after the head.
    tail: std::collections::VecDeque<RecordBatch>,
    tail_rows: usize,
    total: usize,
    /// JSON: whether the array's `[` is written.
    started: bool,
}

impl<'o> ResultWriter<'o> {
    fn new(schema: &SchemaRef, display: Display, out: &'o mut dyn Write) -> Result<Self> {
        if display.format == Format::Csv && !schema.fields().is_empty() {
            let names: Vec<String> = schema.fields().iter().map(|f| csv_field(f.name())).collect();
            writeln!(out, "{}", names.join(",")).map_err(io)?;
        }
        Ok(ResultWriter {
            display,
            schema: schema.clone(),
            out,
            head: vec![],
            head_rows: 0,
            tail: Default::default(),
            tail_rows: 0,
            total: 0,
            started: false,
        })
    }

    /// Table, bounded: rows kept at the start and at the end.
    fn halves(&self) -> Option<(usize, usize)> {
        self.display.max_rows.map(|m| (m.div_ceil(2), m / 2))
    }

    fn keep(&mut self, b: RecordBatch) {
        let Some((top, bottom)) = self.halves() else {
            self.head_rows += b.num_rows();
            self.head.push(b);
            return;
        };
        let mut b = b;
        if self.head_rows < top {
            let k = (top - self.head_rows).min(b.num_rows());
            self.head.push(b.slice(0, k));
            self.head_rows += k;
            b = b.slice(k, b.num_rows() - k);
        }
        if b.num_rows() == 0 || bottom == 0 {
            return;
        }
        self.tail_rows += b.num_rows();
        self.tail.push_back(b);
        while self.tail_rows > bottom {
            let extra = self.tail_rows - bottom;
            let first = self.tail.front().map_or(0, |f| f.num_rows());
            if first <= extra {
                self.tail.pop_front();
                self.tail_rows -= first;
            } else if let Some(f) = self.tail.front_mut() {
                *f = f.slice(extra, first - extra);
                self.tail_rows -= extra;
            }
        }
    }

    fn write(&mut self, b: RecordBatch) -> Result<()> {
        if b.num_rows() == 0 || self.schema.fields().is_empty() {
            return Ok(());
        }
        self.total += b.num_rows();
        match self.display.format {
            Format::Table => self.keep(b),
            Format::Csv => {
                let b = csv_batch(&b)?;
                let mut w = arrow::csv::WriterBuilder::new().with_header(false).build(&mut *self.out);
                catch_sync(|| Ok(w.write(&b)?))?;
            }
            Format::Json => {
                // The array across batches is framed here.
                let objects = json_objects(&b)?;
                self.out.write_all(if self.started { b"," } else { b"[" }).map_err(io)?;
                self.out.write_all(&objects).map_err(io)?;
                self.started = true;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        if self.schema.fields().is_empty() {
            // DDL, SET: no result to show.
            return self.out.flush().map_err(io);
        }
        match self.display.format {
            Format::Table => {
                let shown = self.head_rows + self.tail_rows;
                let text = if self.total == 0 {
                    catch_sync(|| Ok(arrow::util::pretty::pretty_format_batches_with_schema(self.schema.clone(), &[])?.to_string()))?
                } else if shown == self.total {
                    let all: Vec<RecordBatch> = self.head.iter().chain(self.tail.iter()).cloned().collect();
                    catch_sync(|| Ok(arrow::util::pretty::pretty_format_batches_with_options(&all, &table_options())?.to_string()))?
                } else {
                    let gap = text_columns(&self.schema, vec![vec!["…".to_string()]; self.schema.fields().len()])?;
                    let parts = [text_batch(&self.schema, &self.head)?, gap, text_batch(&self.schema, &self.tail.iter().cloned().collect::<Vec<_>>())?];
                    catch_sync(|| Ok(arrow::util::pretty::pretty_format_batches(&parts)?.to_string()))?
                };
                writeln!(self.out, "{text}\n{}", row_footer(self.total, shown)).map_err(io)?;
            }
            Format::Csv => {}
            Format::Json => writeln!(self.out, "{}", if self.started { "]" } else { "[]" }).map_err(io)?,
        }
        self.out.flush().map_err(io)
    }
}

/// Writes batches in `format`, every row.
pub fn write_batches(schema: &SchemaRef, batches: &[RecordBatch], format: Format, out: &mut dyn Write) -> Result<()> {
    write_batches_as(schema, batches, Display::all(format), out)
}

/// Writes batches as `display` says.
pub fn write_batches_as(schema: &SchemaRef, batches: &[RecordBatch], display: Display, out: &mut dyn Write) -> Result<()> {
    let mut w = ResultWriter::new(schema, display, out)?;
    for b in batches {
        w.write(b.clone())?;
    }
    w.finish()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One piece of SQL text between top-level `;`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Byte range in the text, without the `;`.
    pub start: usize,
    /// End of the range (the `;`, or the end of the text for the last piece).
    pub end: usize,
    /// Whether it holds more than whitespace and comments.
    pub meaningful: bool,
}

/// A scan of SQL text: its pieces and whether the text ends inside a string,
/// quoted identifier, block comment or dollar-quoted string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Every piece; all but the last ended with `;` (the last runs to the end).
    pub pieces: Vec<Piece>,
    /// The text ends inside a quote or block comment.
    pub open: bool,
}

impl Scan {
    /// Whether the text is a run of complete statements: it ends outside any
    /// quote or comment, and nothing but whitespace and comments follows its
    /// last top-level `;` (the shell's rule for running what it has read).
    pub fn complete(&self) -> bool {
        !self.open && self.pieces.len() > 1 && !self.pieces.last().is_some_and(|p| p.meaningful)
    }
}

fn ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// Scans SQL text the way the tokenizer reads it (the generic dialect): `'..'`
/// strings (`''` escapes; `E'..'` also `\` escapes), `".."` and `` `..` ``
/// identifiers, `--` comments to the end of the line, nested `/* */` comments
/// and `$tag$..$tag$` strings; a `;` outside all of them ends a piece.
pub fn scan(sql: &str) -> Scan {
    let b = sql.as_bytes();
    let n = b.len();
    let mut pieces = Vec::new();
    let (mut i, mut start, mut meaningful, mut open) = (0usize, 0usize, false, false);
    while i < n {
        let c = b[i];
        match c {
            b'\'' | b'"' | b'`' => {
                meaningful = true;
                let backslash = c == b'\'' && i > 0 && (b[i - 1] | 0x20) == b'e' && (i < 2 || !ident_byte(b[i - 2]));
                i += 1;
                loop {
                    if i >= n {
                        open = true;
                        break;
                    }
                    if backslash && b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == c {
                        if b.get(i + 1) == Some(&c) {
                            i += 2;
                            continue;
                        }
                        i += 1;
                        break;
                    }
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 1usize;
                i += 2;
                while depth > 0 {
                    if i >= n {
                        open = true;
                        break;
                    }
                    if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                    } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
            }
            b'$' if i == 0 || !ident_byte(b[i - 1]) => {
                meaningful = true;
                // `$tag$` opens a dollar-quoted string; `$1` is a placeholder.
                let mut j = i + 1;
                while j < n && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                let tag_ok = j < n && b[j] == b'$' && !b.get(i + 1).is_some_and(|d| d.is_ascii_digit());
                if !tag_ok {
                    i += 1;
                    continue;
                }
                let delim = &sql[i..=j];
                match sql[j + 1..].find(delim) {
                    Some(k) => i = j + 1 + k + delim.len(),
                    None => {
                        open = true;
                        i = n;
                    }
                }
            }
            b';' => {
                pieces.push(Piece { start, end: i, meaningful });
                start = i + 1;
                meaningful = false;
                i += 1;
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                meaningful = true;
                i += 1;
            }
        }
    }
    pieces.push(Piece { start, end: n, meaningful });
    Scan { pieces, open }
}

/// One statement of a longer text, and where it starts in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statement<'a> {
    /// The statement's text (without its `;`).
    pub sql: &'a str,
    /// Lines of the whole text before the statement's first line.
    pub line: usize,
    /// Characters before the statement on its first line.
    pub column: usize,
}

impl Statement<'_> {
    /// Moves the `Line: N, Column: M` positions of a parser error from the
    /// statement's text into the whole text (linear, unlike padding every
    /// statement with the text before it).
    pub fn locate(&self, e: DataFusionError) -> DataFusionError {
        use datafusion::sql::sqlparser::parser::ParserError;
        match e {
            DataFusionError::SQL(pe, bt) => {
                let pe = match *pe {
                    ParserError::ParserError(m) => ParserError::ParserError(self.shift(&m)),
                    ParserError::TokenizerError(m) => ParserError::TokenizerError(self.shift(&m)),
                    other => other,
                };
                DataFusionError::SQL(Box::new(pe), bt)
            }
            DataFusionError::Context(d, inner) => DataFusionError::Context(d, Box::new(self.locate(*inner))),
            DataFusionError::Diagnostic(mut d, inner) => {
                if let Some(span) = d.span.as_mut() {
                    for at in [&mut span.start, &mut span.end] {
                        if at.line == 1 {
                            at.column += self.column as u64;
                        }
                        if at.line > 0 {
                            at.line += self.line as u64;
                        }
                    }
                }
                DataFusionError::Diagnostic(d, Box::new(self.locate(*inner)))
            }
            other => other,
        }
    }

    fn shift(&self, msg: &str) -> String {
        const L: &str = "Line: ";
        const C: &str = ", Column: ";
        let num = |t: &str| {
            let n = t.bytes().take_while(u8::is_ascii_digit).count();
            t[..n].parse::<usize>().ok().map(|v| (v, n))
        };
        let (mut out, mut rest) = (String::with_capacity(msg.len() + 8), msg);
        while let Some(i) = rest.find(L) {
            let after = &rest[i + L.len()..];
            let Some((line, n)) = num(after) else {
                out.push_str(&rest[..i + L.len()]);
                rest = after;
                continue;
            };
            let Some(tail) = after[n..].strip_prefix(C) else {
                out.push_str(&rest[..i + L.len()]);
                rest = after;
                continue;
            };
            let Some((col, m)) = num(tail) else {
                out.push_str(&rest[..i + L.len()]);
                rest = after;
                continue;
            };
            let col = if line == 1 { col + self.column } else { col };
            out.push_str(&rest[..i]);
            out.push_str(&format!("{L}{}{C}{col}", line + self.line));
            rest = &tail[m..];
        }
        out.push_str(rest);
        out
    }
}

/// Splits SQL text into statements at top-level `;` (see [`scan`]), leaving out
/// pieces of only whitespace and comments, each with where it starts (see
/// [`Statement::locate`] for error positions in the whole text).
pub fn split_statements(sql: &str) -> Vec<Statement<'_>> {
    let (mut line_start, mut lines, mut at) = (0usize, 0usize, 0usize);
    scan(sql)
        .pieces
        .into_iter()
        .filter(|p| p.meaningful)
        .map(|p| {
            for (k, c) in sql[at..p.start].bytes().enumerate() {
                if c == b'\n' {
                    lines += 1;
                    line_start = at + k + 1;
                }
            }
            at = p.start;
            Statement { sql: &sql[p.start..p.end], line: lines, column: sql[line_start..p.start].chars().count() }
        })
        .collect()
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

/// Runs one statement (already split), printing its result as it streams in
/// (the table format prints at the end). A panic in planning, execution or
/// printing becomes an `internal error` (see [`crate::guard`]).
pub async fn run_statement(rl: &Ridgeline, sql: &str, display: Display, explain_only: bool, out: &mut dyn Write) -> Result<()> {
    if explain_only {
        let text = catch(explain(rl, sql)).await?;
        writeln!(out, "{text}").map_err(io)?;
        return out.flush().map_err(io);
    }
    let df = catch(rl.sql(sql)).await?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let mut stream = catch_stream(catch(df.execute_stream()).await?);
    let mut w = ResultWriter::new(&schema, display, out)?;
    while let Some(b) = stream.next().await {
        w.write(b?)?;
    }
    w.finish()
}

/// Runs every statement of `sql`, printing each result.
pub async fn run_statements(rl: &Ridgeline, sql: &str, format: Format, explain_only: bool, out: &mut dyn Write) -> Result<()> {
    let stmts = split_statements(sql);
    if stmts.is_empty() {
        return Err(DataFusionError::Plan("no SQL statement given".into()));
    }
    for s in stmts {
        run_statement(rl, s.sql, Display::all(format), explain_only, out).await.map_err(|e| s.locate(e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Float64Array, Int64Array};

    #[test]
    fn splits_keep_positions() {
        let sql = "select 1; select ';' as x -- ; c\n; /* ; */ select 2;\n  ";
        let v = split_statements(sql);
        let at = |sql, line, column| Statement { sql, line, column };
        assert_eq!(v, [at("select 1", 0, 0), at(" select ';' as x -- ; c\n", 0, 9), at(" /* ; */ select 2", 1, 1)]);
        assert!(split_statements("  -- nothing\n ; ").is_empty());
        assert!(split_statements("/* a /* nested ; */ still ; comment */ ;").is_empty());
        let msg = "Expected: x, found: y at Line: 1, Column: 4; also Line: 3, Column: 2 and Line: 7";
        assert_eq!(at("", 10, 5).shift(msg), "Expected: x, found: y at Line: 11, Column: 9; also Line: 13, Column: 2 and Line: 7");
    }

    #[test]
    fn semicolons_in_quotes_and_comments_do_not_split() {
        for sql in [
            "select 'a;b' as \"c;d\", `e;f` -- g;h\n",
            "select 1 /* x; /* y; */ z; */ + 1",
            "select $$a;b$$, $t$ c;$$ $t$",
            "select 'it''s; fine'",
            "select E'a\\';b'",
            "select $1;",
        ] {
            assert_eq!(split_statements(sql).len(), 1, "{sql}");
        }
        assert_eq!(split_statements("select a$b; select 2").len(), 2);
    }

    #[test]
    fn complete_statements() {
        let done = |s: &str| scan(s).complete();
        assert!(done("select 1;\n"));
        assert!(done("select 1; -- the end\n"));
        assert!(done("select 1; select 2; /* c */\n"));
        assert!(!done("select 1 -- not yet;\n"));
        assert!(!done("select 'a;\n"));
        assert!(!done("select 1 /* ; \n"));
        assert!(!done("select 1; select\n"));
        assert!(!done("-- c\n"));
        assert!(scan("select 'a").open && scan("/* a").open && scan("$q$ a").open);
    }

    #[test]
    fn json_and_csv_keep_nulls_and_spell_non_finite() {
        let b = RecordBatch::try_from_iter_with_nullable([
            ("a", Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef, true),
            ("x", Arc::new(Float64Array::from(vec![Some(f64::NAN), Some(1.5)])) as ArrayRef, true),
            ("y", Arc::new(Float64Array::from(vec![Some(f64::INFINITY), Some(f64::NEG_INFINITY)])) as ArrayRef, true),
        ])
        .unwrap();
        let s = b.schema();
        let text = |f: Format, bs: &[RecordBatch]| {
            let mut v = Vec::new();
            write_batches(&s, bs, f, &mut v).unwrap();
            String::from_utf8(v).unwrap()
        };
        assert_eq!(
            text(Format::Json, &[b.clone(), b.slice(1, 1)]),
            "[{\"a\":1,\"x\":\"NaN\",\"y\":\"Infinity\"},{\"a\":null,\"x\":1.5,\"y\":\"-Infinity\"},{\"a\":null,\"x\":1.5,\"y\":\"-Infinity\"}]\n"
        );
        assert_eq!(text(Format::Json, &[]), "[]\n");
        assert_eq!(text(Format::Json, &[b.slice(0, 0)]), "[]\n");
        assert_eq!(text(Format::Csv, &[b.clone()]), "a,x,y\n1,NaN,Infinity\n,1.5,-Infinity\n");
    }
}
