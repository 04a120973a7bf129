//! Files straight in SQL: `SELECT * FROM 'data/x.parquet'` (a quoted path as a
//! table name) and the table functions `read_parquet`, `read_csv`, `read_json`
//! and `read_arrow`.
//!
//! Both build a DataFusion [`ListingTable`] through [`listing_table`], which picks
//! the format from the file name ([`FileKind::of`]: `.parquet`, `.csv`, `.tsv`,
//! `.json` / `.jsonl` / `.ndjson`, `.arrow` / `.arrows` / `.ipc` / `.feather`, any
//! case, CSV, TSV and JSON also compressed as `.gz`, `.bz2`, `.xz` or `.zst`).
//! A path may be a file, a directory (read as the format of its first file of a
//! known kind) or a glob (`'data/*.parquet'`). Only local files are read: a
//! remote URL (`s3://`, `https://`, ...) is refused with an error saying so.
//!
//! Quoted paths go through DataFusion's [`DynamicFileCatalog`] with Ridgeline's
//! [`FileTables`] as its factory ([`enable_file_tables`]); the table functions
//! are [`ReadFiles`]. Options are `name = value` or `name => value` arguments
//! after the path: `read_csv('x.csv', header = false, delim = ';')`. DataFusion
//! 55's planner refuses `name => value` in table functions and resolves `name`
//! in `name = value` as a column (and type-checks the comparison), so
//! [`rewrite_read_options`] turns both into `named_struct('name', value)` before
//! planning, which reaches the function as it is. Ridgeline's statement planner
//! ([`crate::sql_ext::plan_sql`]) does that; a plain DataFusion session with
//! Ridgeline installed can spell an option `named_struct('header', false)`.
//! The setting `ridgeline.file_access` (default true; the server turns it off)
//! gates both.
use crate::config::RidgelineOptions;
use datafusion::catalog::{DynamicFileCatalog, Session, TableFunctionArgs, TableFunctionImpl, TableProvider, UrlTableFactory};
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use arrow::array::Array;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
    Ident, ObjectName, ObjectNamePart, TableFactor, Value, VisitMut, VisitorMut,
};
use futures::TryStreamExt;
use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

/// A file format Ridgeline reads by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values (with a header line unless told otherwise).
    Csv,
    /// Tab-separated values (CSV with a tab delimiter).
    Tsv,
    /// Newline-delimited JSON: one object a line.
    Json,
    /// Arrow IPC, the file or the stream format.
    Arrow,
}

/// File name endings (lower case) and their kinds.
const EXTENSIONS: &[(&str, FileKind)] = &[
    (".parquet", FileKind::Parquet),
    (".csv", FileKind::Csv),
    (".tsv", FileKind::Tsv),
    (".json", FileKind::Json),
    (".jsonl", FileKind::Json),
    (".ndjson", FileKind::Json),
    (".arrow", FileKind::Arrow),
    (".arrows", FileKind::Arrow),
    (".ipc", FileKind::Arrow),
    (".feather", FileKind::Arrow),
];

/// Compression endings (lower case) of text formats.
const COMPRESSIONS: &[(&str, FileCompressionType)] = &[
    (".gz", FileCompressionType::GZIP),
    (".bz2", FileCompressionType::BZIP2),
    (".xz", FileCompressionType::XZ),
    (".zst", FileCompressionType::ZSTD),
];

/// The URL schemes that are local files.
const LOCAL_SCHEMES: &[&str] = &["file"];

/// The file endings Ridgeline knows, for error messages.
pub const KNOWN_ENDINGS: &str =
    ".parquet, .csv, .tsv, .json/.jsonl/.ndjson, .arrow/.arrows/.ipc/.feather (.csv, .tsv and .json also as .gz, .bz2, .xz, .zst)";

impl FileKind {
    /// The kind and compression a file name says (any case): `x.csv.gz` is
    /// gzip-compressed CSV. `None` for an unknown ending, and for a compressed
    /// Parquet or Arrow name (those formats compress inside the file).
    pub fn of(name: &str) -> Option<(FileKind, FileCompressionType)> {
        let lower = name.to_ascii_lowercase();
        let (rest, compression) = match COMPRESSIONS.iter().find(|(e, _)| lower.ends_with(e)) {
            Some((e, c)) => (&lower[..lower.len() - e.len()], *c),
            None => (lower.as_str(), FileCompressionType::UNCOMPRESSED),
        };
        let kind = EXTENSIONS.iter().find(|(e, _)| rest.ends_with(e)).map(|(_, k)| *k)?;
        let text = matches!(kind, FileKind::Csv | FileKind::Tsv | FileKind::Json);
        (text || !compression.is_compressed()).then_some((kind, compression))
    }

    /// Whether a file of kind `found` can be read as `self` (a `.tsv` file is CSV).
    fn accepts(self, found: FileKind) -> bool {
        self == found || (self == FileKind::Csv && found == FileKind::Tsv)
    }
}

/// How to read a path: the kind (else from the file names) and CSV options.
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// The format; `None` picks it from the first file's name.
    pub kind: Option<FileKind>,
    /// CSV: whether the first line names the columns (default true).
    pub header: bool,
    /// CSV: the delimiter (default `,`, a tab for `.tsv` files).
    pub delimiter: Option<u8>,
    /// CSV: the quote character (default `"`).
    pub quote: Option<u8>,
    /// CSV and JSON: the compression (default: from the file name).
    pub compression: Option<FileCompressionType>,
    /// JSON: one object a line (default true); false reads one JSON array.
    pub newline_delimited: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions { kind: None, header: true, delimiter: None, quote: None, compression: None, newline_delimited: true }
    }
}

/// An error unless `path` is local: a remote URL names the schemes that work.
pub fn check_local(path: &str) -> Result<()> {
    let Some((scheme, _)) = path.split_once("://") else { return Ok(()) };
    if LOCAL_SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(());
    }
    Err(DataFusionError::Plan(format!(
        "remote URLs are not supported: '{path}' ({scheme}:// has no object store here; Ridgeline reads local paths, globs, directories and file:// URLs)"
    )))
}

/// Whether `path` is a glob (DataFusion's glob characters).
fn is_glob(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

/// An error naming `path` unless it exists (globs are checked once listed).
fn check_exists(path: &str) -> Result<()> {
    let local = path.strip_prefix("file://").unwrap_or(path);
    if is_glob(local) || std::path::Path::new(local).exists() {
        return Ok(());
    }
    Err(DataFusionError::Plan(format!("file not found: '{path}'")))
}

/// Whether reading files from SQL is allowed in this session.
fn check_access(state: &dyn Session) -> Result<()> {
    if RidgelineOptions::from_config(state.config_options()).file_access {
        return Ok(());
    }
    Err(DataFusionError::Plan(
        "reading files from SQL is turned off here (ridgeline.file_access = false)".to_string(),
    ))
}

/// The first listed file that `opts` can read: its kind, compression and the
/// ending to list by (the file's own case: `.PARQUET`).
async fn first_file(
    state: &dyn Session,
    url: &ListingTableUrl,
    path: &str,
    opts: &FileOptions,
) -> Result<(FileKind, FileCompressionType, String)> {
    let store = state.runtime_env().object_store(url)?;
    let mut files: Vec<String> =
        url.list_all_files(state, store.as_ref(), "").await?.map_ok(|m| m.location.to_string()).try_collect().await?;
    files.sort();
    if files.is_empty() {
        return Err(DataFusionError::Plan(format!("no files match '{path}'")));
    }
    let fits = |f: &String| {
        let (found, c) = FileKind::of(f)?;
        let kind = opts.kind.map_or(Some(found), |k| k.accepts(found).then_some(found))?;
        Some((kind, c, f.clone()))
    };
    if let Some((kind, c, f)) = files.iter().find_map(fits) {
        let ending = ending_of(&f, kind, c);
        return Ok((kind, c, ending));
    }
    match opts.kind {
        // An explicit format reads files of any name (`read_csv('data.txt')`).
        Some(k) if !url.is_collection() => Ok((k, FileCompressionType::UNCOMPRESSED, String::new())),
        _ => Err(DataFusionError::Plan(format!(
            "cannot tell the format of '{path}': expected files ending in {KNOWN_ENDINGS}"
        ))),
    }
}

/// The ending of `file` that says `kind` and `c`, in the file's own case.
fn ending_of(file: &str, kind: FileKind, c: FileCompressionType) -> String {
    let lower = file.to_ascii_lowercase();
    let comp = COMPRESSIONS.iter().find(|(_, x)| *x == c && c.is_compressed()).map_or(0, |(e, _)| e.len());
    let ext = EXTENSIONS.iter().filter(|(e, k)| *k == kind && lower[..lower.len() - comp].ends_with(e)).map(|(e, _)| e.len()).max();
    file[file.len() - comp - ext.unwrap_or(0)..].to_string()
}

/// The DataFusion file format for `kind` with `opts`, starting from the
/// session's table options (`datafusion.format.*`, Parquet reader settings).
fn format_for(state: &dyn Session, kind: FileKind, c: FileCompressionType, opts: &FileOptions) -> Arc<dyn FileFormat> {
    let table = state.table_options();
    let c = opts.compression.unwrap_or(c);
    match kind {
        FileKind::Parquet => Arc::new(ParquetFormat::default().with_options(table.parquet.clone())),
        FileKind::Csv | FileKind::Tsv => {
            let default_delim = if kind == FileKind::Tsv { b'\t' } else { b',' };
            let mut f = CsvFormat::default()
                .with_options(table.csv.clone())
                .with_has_header(opts.header)
                .with_delimiter(opts.delimiter.unwrap_or(default_delim))
                .with_file_compression_type(c);
            if let Some(q) = opts.quote {
                f = f.with_quote(q);
            }
            Arc::new(f)
        }
        FileKind::Json => Arc::new(
            JsonFormat::default()
                .with_options(table.json.clone())
                .with_file_compression_type(c)
                .with_newline_delimited(opts.newline_delimited),
        ),
        FileKind::Arrow => Arc::new(ArrowFormat),
    }
}

/// A table over the local file, directory or glob `path`, read as `opts` says
/// (the format from the file names unless `opts.kind` is set); errors name the
/// path: remote URLs, missing files, unknown formats, unreadable files.
pub async fn listing_table(state: &dyn Session, path: &str, opts: &FileOptions) -> Result<Arc<dyn TableProvider>> {
    check_local(path)?;
    check_exists(path)?;
    let url = ListingTableUrl::parse(path).map_err(|e| DataFusionError::Plan(format!("bad path '{path}': {e}")))?;
    let (kind, c, ending) = first_file(state, &url, path, opts).await?;
    let format = format_for(state, kind, c, opts);
    let listing = ListingOptions::new(format).with_file_extension(ending);
    let config = ListingTableConfig::new(url).with_listing_options(listing);
    let config = config.infer_partitions_from_path(state).await?;
    let config = config.infer_schema(state).await.map_err(|e| read_error(path, e))?;
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// A reader's error, naming the path.
fn read_error(path: &str, e: DataFusionError) -> DataFusionError {
    DataFusionError::Plan(format!("cannot read '{path}': {}", e.strip_backtrace()))
}

/// Whether a table name looks like a file rather than a table: a URL, a path
/// with a `/`, a glob, or a known file ending.
fn looks_like_file(name: &str) -> bool {
    name.contains("://") || name.contains('/') || name.contains('\\') || is_glob(name) || FileKind::of(name).is_some()
}

/// The [`UrlTableFactory`] of Ridgeline's sessions: a table name that looks
/// like a file ([`looks_like_file`]) is read through [`listing_table`]; other
/// names stay unknown tables.
#[derive(Default)]
pub struct FileTables {
    state: OnceLock<Box<dyn Fn() -> Option<SessionState> + Send + Sync>>,
}

impl std::fmt::Debug for FileTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileTables")
    }
}

#[async_trait::async_trait]
impl UrlTableFactory for FileTables {
    async fn try_new(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if !looks_like_file(name) {
            return Ok(None);
        }
        let state = self.state.get().and_then(|f| f()).ok_or_else(|| DataFusionError::Plan("the session is gone".into()))?;
        check_access(&state)?;
        crate::guard::catch(listing_table(&state, name, &FileOptions::default())).await.map(Some)
    }
}

/// `ctx` with quoted file paths as table names (DataFusion's
/// [`DynamicFileCatalog`] over the session's catalogs, with [`FileTables`]).
pub fn enable_file_tables(ctx: SessionContext) -> SessionContext {
    let factory = Arc::new(FileTables::default());
    let catalogs = Arc::new(DynamicFileCatalog::new(
        Arc::clone(ctx.state_ref().read().catalog_list()),
        Arc::clone(&factory) as Arc<dyn UrlTableFactory>,
    ));
    let id = ctx.session_id();
    let ctx: SessionContext = ctx.into_state_builder().with_session_id(id).with_catalog_list(catalogs).build().into();
    let weak = ctx.state_weak_ref();
    let _ = factory.state.set(Box::new(move || weak.upgrade().map(|s| s.read().clone())));
    ctx
}

/// A `read_*` table function: `read_csv('x.csv', header = false, delim = ';')`.
#[derive(Debug)]
pub struct ReadFiles {
    name: &'static str,
    kind: FileKind,
}

impl ReadFiles {
    /// The table functions, by name: `read_parquet`, `read_csv`, `read_json`,
    /// `read_ndjson` and `read_arrow`.
    pub fn all() -> Vec<(&'static str, Arc<dyn TableFunctionImpl>)> {
        [
            (READ_FUNCTIONS[0], FileKind::Parquet),
            (READ_FUNCTIONS[1], FileKind::Csv),
            (READ_FUNCTIONS[2], FileKind::Json),
            (READ_FUNCTIONS[3], FileKind::Json),
            (READ_FUNCTIONS[4], FileKind::Arrow),
        ]
        .into_iter()
        .map(|(name, kind)| (name, Arc::new(ReadFiles { name, kind }) as Arc<dyn TableFunctionImpl>))
        .collect()
    }

    /// The options this function takes, for error messages.
    fn option_names(&self) -> &'static str {
        match self.kind {
            FileKind::Csv | FileKind::Tsv => "header, delim (or delimiter, sep), quote, compression",
            FileKind::Json => "compression, newline_delimited",
            FileKind::Parquet | FileKind::Arrow => "none",
        }
    }

    /// The path and options from the call's arguments.
    fn parse(&self, args: &[Expr]) -> Result<(String, FileOptions)> {
        let usage = || format!("{}: expected a path string, then name = value options ({})", self.name, self.option_names());
        let Some(path) = args.first().and_then(string_literal) else {
            return Err(DataFusionError::Plan(usage()));
        };
        let mut opts = FileOptions { kind: Some(self.kind), ..FileOptions::default() };
        for arg in &args[1..] {
            let (name, value) = named_arg(arg).ok_or_else(|| DataFusionError::Plan(format!("{}; got {arg}", usage())))?;
            self.set(&mut opts, &name, &value)?;
        }
        Ok((path, opts))
    }

    /// Sets option `name` to `value`.
    fn set(&self, opts: &mut FileOptions, name: &str, value: &ScalarValue) -> Result<()> {
        let csv = self.kind == FileKind::Csv;
        let bad = || DataFusionError::Plan(format!("{}: bad value {value} for {name}", self.name));
        match name {
            "header" if csv => opts.header = bool_value(value).ok_or_else(bad)?,
            "delim" | "delimiter" | "sep" if csv => opts.delimiter = Some(char_value(value).ok_or_else(bad)?),
            "quote" if csv => opts.quote = Some(char_value(value).ok_or_else(bad)?),
            "newline_delimited" if self.kind == FileKind::Json => {
                opts.newline_delimited = bool_value(value).ok_or_else(bad)?
            }
            "compression" if csv || self.kind == FileKind::Json => {
                opts.compression = Some(compression_value(value).ok_or_else(bad)?)
            }
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "{}: unknown option '{name}' (options: {})",
                    self.name,
                    self.option_names()
                )))
            }
        }
        Ok(())
    }
}

/// The string of a string literal.
fn string_literal(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(v, _) => v.try_as_str().flatten().map(str::to_string),
        _ => None,
    }
}

/// `named_struct('name', value)` (as [`rewrite_read_options`] leaves an option):
/// the call, or the one-field struct the planner folds it into.
fn named_arg(e: &Expr) -> Option<(String, ScalarValue)> {
    match e {
        Expr::ScalarFunction(f) => match (f.name(), f.args.as_slice()) {
            (OPTION_FUNCTION, [name, Expr::Literal(v, _)]) => Some((string_literal(name)?.to_ascii_lowercase(), v.clone())),
            _ => None,
        },
        Expr::Literal(ScalarValue::Struct(s), _) if s.num_columns() == 1 && s.len() == 1 => {
            let value = ScalarValue::try_from_array(s.column(0), 0).ok()?;
            Some((s.fields()[0].name().to_ascii_lowercase(), value))
        }
        _ => None,
    }
}

/// The function an option travels in through the planner.
const OPTION_FUNCTION: &str = "named_struct";

/// The names of the `read_*` table functions.
const READ_FUNCTIONS: &[&str] = &["read_parquet", "read_csv", "read_json", "read_ndjson", "read_arrow"];

/// Rewrites the options of every `read_*` call in `stmt`, `name => value` and
/// `name = value`, to `named_struct('name', value)`, which DataFusion's planner
/// passes on to the table function as it is (see the module docs).
pub fn rewrite_read_options(stmt: &mut DFStatement) {
    match stmt {
        DFStatement::Statement(s) => {
            let _ = s.visit(&mut ReadOptions);
        }
        DFStatement::Explain(e) => rewrite_read_options(&mut e.statement),
        _ => {}
    }
}

/// The visitor of [`rewrite_read_options`].
struct ReadOptions;

impl VisitorMut for ReadOptions {
    type Break = ();
    fn pre_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, args: Some(args), .. } = t else { return ControlFlow::Continue(()) };
        let Some(ObjectNamePart::Identifier(f)) = name.0.first_mut() else { return ControlFlow::Continue(()) };
        let lower = f.value.to_ascii_lowercase();
        if READ_FUNCTIONS.contains(&lower.as_str()) {
            // DataFusion looks table functions up by their spelling: READ_CSV is read_csv.
            if f.quote_style.is_none() {
                f.value = lower;
            }
            args.args.iter_mut().for_each(quote_option_name);
        }
        ControlFlow::Continue(())
    }
}

/// `name => value` or `name = value` as `named_struct('name', value)`; other
/// arguments stay.
fn quote_option_name(arg: &mut FunctionArg) {
    let (name, value) = match arg {
        FunctionArg::Named { name, arg: FunctionArgExpr::Expr(v), .. } => (name.value.clone(), v.clone()),
        FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::BinaryOp { left, op: BinaryOperator::Eq, right })) => {
            let SqlExpr::Identifier(name) = left.as_ref() else { return };
            (name.value.clone(), right.as_ref().clone())
        }
        _ => return,
    };
    let name = SqlExpr::Value(Value::SingleQuotedString(name).with_empty_span());
    let unnamed = |e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    let call = Function {
        name: ObjectName::from(vec![Ident::new(OPTION_FUNCTION)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![unnamed(name), unnamed(value)],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    };
    *arg = unnamed(SqlExpr::Function(call));
}

/// A boolean option: true / false, or the strings 'true' / 'false'.
fn bool_value(v: &ScalarValue) -> Option<bool> {
    match v {
        ScalarValue::Boolean(b) => *b,
        _ => v.try_as_str().flatten()?.parse().ok(),
    }
}

/// A one-byte option; `'\t'` (backslash, t) is a tab.
fn char_value(v: &ScalarValue) -> Option<u8> {
    match v.try_as_str().flatten()? {
        "\\t" => Some(b'\t'),
        s if s.len() == 1 => Some(s.as_bytes()[0]),
        _ => None,
    }
}

/// A compression option: gzip / gz, bzip2 / bz2, xz, zstd / zst or none.
fn compression_value(v: &ScalarValue) -> Option<FileCompressionType> {
    let s = v.try_as_str().flatten()?;
    if s.eq_ignore_ascii_case("none") || s.eq_ignore_ascii_case("uncompressed") {
        return Some(FileCompressionType::UNCOMPRESSED);
    }
    s.parse().ok()
}

impl TableFunctionImpl for ReadFiles {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let (path, opts) = self.parse(args.exprs())?;
        let session = args.session();
        check_access(session)?;
        block_on(listing_table(session, &path, &opts))
    }
}

/// Runs `f` to completion from synchronous code (table functions are called
/// while planning, inside the caller's runtime): on a scoped thread with its
/// own current-thread runtime; a panic there is an error.
fn block_on<T: Send>(f: impl std::future::Future<Output = Result<T>> + Send) -> Result<T> {
    std::thread::scope(|s| {
        let handle = s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(crate::guard::catch(f))
        });
        handle.join().unwrap_or_else(|p| Err(DataFusionError::Execution(crate::panic_message(p.as_ref()))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_names() {
        let of = |n: &str| FileKind::of(n).map(|(k, c)| (k, c.is_compressed()));
        assert_eq!(of("a/b.PARQUET"), Some((FileKind::Parquet, false)));
        assert_eq!(of("x.csv.gz"), Some((FileKind::Csv, true)));
        assert_eq!(of("x.TSV"), Some((FileKind::Tsv, false)));
        assert_eq!(of("x.ndjson.zst"), Some((FileKind::Json, true)));
        assert_eq!(of("x.arrows"), Some((FileKind::Arrow, false)));
        assert_eq!(of("x.parquet.gz"), None);
        assert_eq!(of("x.txt"), None);
        assert_eq!(ending_of("d/X.CSV.GZ", FileKind::Csv, FileCompressionType::GZIP), ".CSV.GZ");
        assert_eq!(ending_of("d/x.jsonl", FileKind::Json, FileCompressionType::UNCOMPRESSED), ".jsonl");
        assert!(looks_like_file("data/x") && looks_like_file("x.csv") && !looks_like_file("lineitem"));
        assert!(check_local("s3://b/x.parquet").unwrap_err().to_string().contains("remote URLs are not supported"));
        assert!(check_local("file:///tmp/x.parquet").is_ok() && check_local("x.parquet").is_ok());
    }
}
