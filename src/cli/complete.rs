//! Tab completion in the shell: SQL key words, table names, column names (of
//! the tables the statement names, else of every table; `t.` completes the
//! columns of `t`), function names, dot commands and their arguments (file
//! names after `.read`, `.output` and `.once`).
//!
//! The names are a snapshot of the catalog ([`Names::of`]), refreshed by the
//! shell after each input line: completion runs inside the line editor, which
//! cannot wait for the catalog's async calls.
use crate::Ridgeline;
use std::sync::{Arc, Mutex};

/// Key words offered by completion (the common ones, and `SKYLINE OF`'s).
const KEYWORDS: &[&str] = &[
    "ALL", "ALTER", "ANALYZE", "AND", "ANTI", "ARRAY", "AS", "ASC", "BETWEEN", "BIGINT", "BOOLEAN", "BY", "CASE", "CAST", "COPY",
    "CREATE", "CROSS", "CURRENT_DATE", "DATE", "DECIMAL", "DEFAULT", "DELETE", "DESC", "DESCRIBE", "DIFF", "DISTINCT", "DOUBLE",
    "DROP", "ELSE", "END", "EXCEPT", "EXISTS", "EXPLAIN", "EXTERNAL", "FALSE", "FILTER", "FIRST", "FLOAT", "FOLLOWING", "FROM",
    "FULL", "GROUP", "HAVING", "IF", "ILIKE", "IN", "INNER", "INSERT", "INT", "INTEGER", "INTERSECT", "INTERVAL", "INTO", "IS",
    "JOIN", "LAST", "LATERAL", "LEFT", "LIKE", "LIMIT", "LOCATION", "MAX", "MIN", "NATURAL", "NOT", "NULL", "NULLS", "OF", "OFFSET",
    "ON", "OR", "ORDER", "OUTER", "OVER", "PARQUET", "PARTITION", "PRECEDING", "RANGE", "RECURSIVE", "REPLACE", "RIGHT", "ROW",
    "ROWS", "SELECT", "SEMI", "SET", "SHOW", "SKYLINE", "SMALLINT", "STORED", "TABLE", "TABLES", "THEN", "TIMESTAMP", "TRUE",
    "UNBOUNDED", "UNION", "UNNEST", "UPDATE", "USING", "VALUES", "VARCHAR", "VIEW", "WHEN", "WHERE", "WINDOW", "WITH",
];

/// Dot commands offered by completion.
pub const DOT_COMMANDS: &[&str] = &[
    ".exit", ".explain", ".format", ".gpu", ".help", ".maxrows", ".mode", ".once", ".output", ".progress", ".quit", ".read",
    ".schema", ".tables", ".timer",
];

/// A snapshot of the names completion offers.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Tables (with their schema when not `public`) and their columns.
    pub tables: Vec<(String, Vec<String>)>,
    /// Scalar, aggregate and window function names.
    pub functions: Vec<String>,
}

impl Names {
    /// The names of `rl`'s catalog: every table of every schema (but
    /// `information_schema`) and every function.
    pub async fn of(rl: &Ridgeline) -> Names {
        let ctx = rl.session();
        let mut tables = Vec::new();
        for cat_name in ctx.catalog_names() {
            let Some(cat) = ctx.catalog(&cat_name) else { continue };
            for schema_name in cat.schema_names() {
                if schema_name == "information_schema" {
                    continue;
                }
                let Some(schema) = cat.schema(&schema_name) else { continue };
                for t in schema.table_names() {
                    let cols = match schema.table(&t).await {
                        Ok(Some(p)) => p.schema().fields().iter().map(|f| f.name().clone()).collect(),
                        _ => vec![],
                    };
                    let name = if schema_name == "public" { t } else { format!("{schema_name}.{t}") };
                    tables.push((name, cols));
                }
            }
        }
        tables.sort();
        let state = ctx.state();
        let mut functions: Vec<String> = state
            .scalar_functions()
            .keys()
            .chain(state.aggregate_functions().keys())
            .chain(state.window_functions().keys())
            .filter(|f| !f.starts_with("__"))
            .cloned()
            .collect();
        functions.sort();
        functions.dedup();
        Names { tables, functions }
    }

    fn columns_of(&self, table: &str) -> Option<&[String]> {
        self.tables.iter().find(|(t, _)| t.eq_ignore_ascii_case(table) || t.rsplit('.').next().is_some_and(|s| s.eq_ignore_ascii_case(table))).map(|(_, c)| c.as_slice())
    }

    /// Completions of the word before `pos` in `line`, `pending` being the
    /// statement's earlier lines: where the word starts, and the candidates
    /// (sorted, without duplicates).
    pub fn complete(&self, pending: &str, line: &str, pos: usize) -> (usize, Vec<String>) {
        let pos = pos.min(line.len());
        let before = &line[..pos];
        let start = before.rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).map_or(0, |i| i + before[i..].chars().next().map_or(1, char::len_utf8));
        let word = &before[start..];
        // Dot commands, at the start of a statement.
        if pending.trim().is_empty() && line.trim_start().starts_with('.') {
            let lead = line.len() - line.trim_start().len();
            let cmd_end = line[lead..].find(char::is_whitespace).map_or(line.len(), |i| lead + i);
            if pos <= cmd_end {
                let w = &line[lead..pos];
                return (lead, DOT_COMMANDS.iter().filter(|c| c.starts_with(w)).map(|c| c.to_string()).collect());
            }
            let cmd = &line[lead..cmd_end];
            let options: &[&str] = match cmd {
                ".format" | ".mode" => &["table", "csv", "json"],
                ".gpu" => &["off", "auto", "on"],
                ".timer" | ".progress" => &["on", "off"],
                ".schema" => return (start, self.tables.iter().map(|(t, _)| t.clone()).filter(|t| starts_with_ci(t, word)).collect()),
                ".explain" => return self.complete("", &line[cmd_end..], pos - cmd_end).map_start(cmd_end),
                _ => &[],
            };
            return (start, options.iter().filter(|o| o.starts_with(word)).map(|o| o.to_string()).collect());
        }
        // `t.c`: the columns of t.
        if let Some(dot) = word.rfind('.') {
            let (qual, col) = (&word[..dot], &word[dot + 1..]);
            let mut v: Vec<String> = self.columns_of(qual).unwrap_or(&[]).iter().filter(|c| starts_with_ci(c, col)).map(|c| quoted(c)).collect();
            v.sort();
            v.dedup();
            return (start + dot + 1, v);
        }
        if word.is_empty() {
            return (start, vec![]);
        }
        let lower = word.chars().all(|c| !c.is_uppercase());
        let statement = format!("{pending} {line}").to_ascii_lowercase();
        let named: Vec<&(String, Vec<String>)> = self.tables.iter().filter(|(t, _)| mentions(&statement, &t.to_ascii_lowercase())).collect();
        let column_tables: Vec<&(String, Vec<String>)> = if named.is_empty() { self.tables.iter().collect() } else { named };
        let mut v: Vec<String> = KEYWORDS
            .iter()
            .filter(|k| starts_with_ci(k, word))
            .map(|k| if lower { k.to_ascii_lowercase() } else { k.to_string() })
            .chain(self.tables.iter().map(|(t, _)| t.clone()).filter(|t| starts_with_ci(t, word)))
            .chain(column_tables.iter().flat_map(|(_, cols)| cols.iter()).filter(|c| starts_with_ci(c, word)).map(|c| quoted(c)))
            .chain(self.functions.iter().filter(|f| starts_with_ci(f, word)).cloned())
            .collect();
        v.sort();
        v.dedup();
        (start, v)
    }
}

trait MapStart {
    fn map_start(self, by: usize) -> Self;
}

impl MapStart for (usize, Vec<String>) {
    fn map_start(self, by: usize) -> Self {
        (self.0 + by, self.1)
    }
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.is_char_boundary(prefix.len()) && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Whether `text` names the table `t` as a word.
fn mentions(text: &str, t: &str) -> bool {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    text.match_indices(t).any(|(i, _)| (i == 0 || !word(b[i - 1])) && b.get(i + t.len()).is_none_or(|&c| !word(c)))
}

/// A column name as SQL must spell it: quoted unless a plain lower-case identifier.
fn quoted(c: &str) -> String {
    let plain = c.chars().next().is_some_and(|f| f.is_ascii_lowercase() || f == '_')
        && c.chars().all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_');
    if plain {
        c.to_string()
    } else {
        format!("\"{}\"", c.replace('"', "\"\""))
    }
}

/// What the line editor's helper reads: the names and the statement's earlier lines.
#[derive(Default)]
pub struct State {
    /// The catalog snapshot.
    pub names: Names,
    /// SQL read but not yet run.
    pub pending: String,
}

/// The line editor's helper: completion (no hints, highlighting or validation).
pub struct Helper {
    /// Shared with the shell, which refreshes it.
    pub state: Arc<Mutex<State>>,
    files: rustyline::completion::FilenameCompleter,
}

impl Helper {
    /// A helper over shared state.
    pub fn new(state: Arc<Mutex<State>>) -> Helper {
        Helper { state, files: rustyline::completion::FilenameCompleter::new() }
    }
}

impl rustyline::completion::Completer for Helper {
    type Candidate = rustyline::completion::Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &rustyline::Context<'_>) -> rustyline::Result<(usize, Vec<Self::Candidate>)> {
        let t = line.trim_start();
        let file_arg = [".read", ".output", ".once"].iter().any(|c| t.strip_prefix(c).is_some_and(|r| r.starts_with(char::is_whitespace)));
        if file_arg {
            return self.files.complete_path(line, pos);
        }
        let Ok(state) = self.state.lock() else { return Ok((pos, vec![])) };
        let (start, v) = state.names.complete(&state.pending, line, pos);
        Ok((start, v.into_iter().map(|s| rustyline::completion::Pair { display: s.clone(), replacement: s }).collect()))
    }
}

impl rustyline::hint::Hinter for Helper {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for Helper {}
impl rustyline::validate::Validator for Helper {}
impl rustyline::Helper for Helper {}

