//! `SKYLINE OF [DISTINCT] expr {MIN|MAX|DIFF} [, ...]` at the token level.
//!
//! [`rewrite`] finds every clause (at any query level: subqueries, CTEs, views),
//! checks where it stands (after WHERE / GROUP BY / HAVING, before ORDER BY /
//! LIMIT) and that every dimension has a direction, and replaces it by ORDER BY
//! keys `__ridgeline_skyline(k, j, expr)` placed before the level's own ORDER BY
//! keys. [`Rewritten::map_error`] maps `Line: L, Column: C` positions in errors
//! about the rewritten text back into the original text.
use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// The name of the marker function that carries a dimension through DataFusion's
/// planner (never evaluated).
pub const MARKER: &str = "__ridgeline_skyline";

/// A dimension's direction: smaller is better (MIN), larger is better (MAX), or
/// rows are only compared with rows of equal value (DIFF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkylineDirection {
    Min,
    Max,
    Diff,
}

impl std::fmt::Display for SkylineDirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkylineDirection::Min => "MIN",
            SkylineDirection::Max => "MAX",
            SkylineDirection::Diff => "DIFF",
        })
    }
}

/// One dimension of a clause as written.
#[derive(Clone, Debug)]
pub struct DimSpec {
    pub direction: SkylineDirection,
    /// The expression's text.
    pub text: String,
    /// Where the expression starts in the original text (1-based).
    pub line: u64,
    pub column: u64,
}

/// One `SKYLINE OF` clause.
#[derive(Clone, Debug)]
pub struct ClauseSpec {
    pub distinct: bool,
    pub dims: Vec<DimSpec>,
    /// Where `SKYLINE` stands in the original text.
    pub line: u64,
    pub column: u64,
}

/// A piece of the rewritten text: a copy of the original from byte `src`, or
/// synthetic text attributed to original byte `src`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    out: usize,
    len: usize,
    src: usize,
    copy: bool,
}

/// A statement with its clauses rewritten.
#[derive(Clone, Debug)]
pub struct Rewritten {
    pub sql: String,
    pub clauses: Vec<ClauseSpec>,
    original: String,
    pieces: Vec<Piece>,
}

/// An error at a position of the original text.
pub fn error_at(msg: impl std::fmt::Display, line: u64, column: u64) -> DataFusionError {
    DataFusionError::Plan(format!("SKYLINE OF: {msg} at Line: {line}, Column: {column}"))
}

/// Byte offset of a 1-based (line, column) position, columns counted in chars.
fn byte_of(text: &str, line: u64, column: u64) -> usize {
    let mut start = 0usize;
    for _ in 1..line.max(1) {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return text.len(),
        }
    }
    let mut b = start;
    for (n, (i, c)) in text[start..].char_indices().enumerate() {
        if n as u64 + 1 >= column.max(1) {
            return start + i;
        }
        if c == '\n' {
            return start + i;
        }
        b = start + i + c.len_utf8();
    }
    b
}

/// 1-based (line, column) of a byte offset.
fn line_col(text: &str, byte: usize) -> (u64, u64) {
    let byte = byte.min(text.len());
    let before = &text[..byte];
    let line = before.matches('\n').count() as u64 + 1;
    let ls = before.rfind('\n').map_or(0, |i| i + 1);
    (line, text[ls..byte].chars().count() as u64 + 1)
}

struct Tok {
    token: Token,
    start: usize,
    end: usize,
    line: u64,
    column: u64,
}

impl Tok {
    fn word(&self) -> Option<String> {
        match &self.token {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }
    fn is(&self, kw: &str) -> bool {
        self.word().is_some_and(|w| w == kw)
    }
}

fn tokens(sql: &str) -> Result<Vec<Tok>> {
    let dialect = GenericDialect {};
    let toks = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| DataFusionError::SQL(Box::new(ParserError::TokenizerError(e.to_string())), None))?;
    Ok(toks
        .into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .map(|t| Tok {
            start: byte_of(sql, t.span.start.line, t.span.start.column),
            end: byte_of(sql, t.span.end.line, t.span.end.column),
            line: t.span.start.line,
            column: t.span.start.column,
            token: t.token,
        })
        .collect())
}

const ENDS: &[&str] = &["ORDER", "LIMIT", "OFFSET", "FETCH", "UNION", "EXCEPT", "INTERSECT", "WINDOW", "QUALIFY"];
const BEFORE: &[&str] = &["WHERE", "GROUP", "HAVING", "FROM", "SELECT"];

/// Rewrites every `SKYLINE OF` clause of one statement; `None` when there is none.
pub fn rewrite(sql: &str) -> Result<Option<Rewritten>> {
    if !sql.to_ascii_lowercase().contains("skyline") {
        return Ok(None);
    }
    let toks = tokens(sql)?;
    let is_clause = |i: usize| toks[i].is("SKYLINE") && toks.get(i + 1).is_some_and(|t| t.is("OF"));
    if !(0..toks.len()).any(is_clause) {
        return Ok(None);
    }
    let mut out = String::new();
    let mut pieces = Vec::new();
    let mut push = |out: &mut String, text: &str, src: usize, copy: bool| {
        if !text.is_empty() {
            pieces.push(Piece { out: out.len(), len: text.len(), src, copy });
            out.push_str(text);
        }
    };
    let mut clauses = Vec::new();
    let mut cur = 0usize;
    // Per parenthesis depth: whether this query level has had ORDER BY / LIMIT.
    let mut ordered = vec![false];
    let mut i = 0usize;
    while i < toks.len() {
        let t = &toks[i];
        match &t.token {
            Token::LParen => ordered.push(false),
            Token::RParen => {
                if ordered.len() > 1 {
                    ordered.pop();
                }
            }
            _ => {}
        }
        let depth = ordered.len() - 1;
        if let Some(w) = t.word() {
            match w.as_str() {
                "SELECT" | "UNION" | "EXCEPT" | "INTERSECT" => ordered[depth] = false,
                "ORDER" | "LIMIT" | "OFFSET" | "FETCH" => ordered[depth] = true,
                _ => {}
            }
        }
        if !is_clause(i) {
            i += 1;
            continue;
        }
        if ordered[depth] {
            return Err(error_at("the clause must come before ORDER BY and LIMIT", t.line, t.column));
        }
        let k = clauses.len();
        let (sky_line, sky_col, sky_start) = (t.line, t.column, t.start);
        let mut j = i + 2;
        let distinct = toks.get(j).is_some_and(|t| t.is("DISTINCT"));
        if distinct {
            j += 1;
        }
        // The clause's tokens up to its end at this depth, split at top-level commas.
        let mut items: Vec<Vec<usize>> = vec![Vec::new()];
        let mut d = 0i64;
        let mut end_tok = toks.len();
        while j < toks.len() {
            let tj = &toks[j];
            match tj.token {
                Token::LParen => d += 1,
                Token::RParen if d == 0 => {
                    end_tok = j;
                    break;
                }
                Token::RParen => d -= 1,
                Token::SemiColon if d == 0 => {
                    end_tok = j;
                    break;
                }
                Token::Comma if d == 0 => {
                    items.push(Vec::new());
                    j += 1;
                    continue;
                }
                _ => {}
            }
            if d == 0 {
                if let Some(w) = tj.word() {
                    if ENDS.contains(&w.as_str()) {
                        end_tok = j;
                        break;
                    }
                    if BEFORE.contains(&w.as_str()) {
                        return Err(error_at(
                            format!("the clause must follow WHERE, GROUP BY and HAVING (found {w} after it)"),
                            sky_line,
                            sky_col,
                        ));
                    }
                }
            }
            items.last_mut().unwrap().push(j);
            j += 1;
        }
        let mut dims = Vec::new();
        for (n, item) in items.iter().enumerate() {
            let Some(&last) = item.last() else {
                let (l, c) = match (n, items.get(n + 1).and_then(|x| x.first())) {
                    (_, _) if end_tok < toks.len() => (toks[end_tok].line, toks[end_tok].column),
                    _ => line_col(sql, sql.len()),
                };
                return Err(error_at("expected a dimension (an expression followed by MIN, MAX or DIFF)", l, c));
            };
            let lt = &toks[last];
            let direction = match lt.word().as_deref() {
                Some("MIN") => SkylineDirection::Min,
                Some("MAX") => SkylineDirection::Max,
                Some("DIFF") => SkylineDirection::Diff,
                _ => {
                    let (l, c) = line_col(sql, lt.end);
                    let text = sql[toks[item[0]].start..lt.end].trim();
                    return Err(error_at(format!("dimension '{text}' needs a direction: MIN, MAX or DIFF"), l, c));
                }
            };
            if item.len() < 2 {
                return Err(error_at(format!("expected an expression before {direction}"), lt.line, lt.column));
            }
            let first = &toks[item[0]];
            let e_end = toks[item[item.len() - 2]].end;
            dims.push((direction, first.start, e_end, first.line, first.column));
        }
        // Emit: the text before the clause, then the ORDER BY keys.
        push(&mut out, &sql[cur..sky_start], cur, true);
        push(&mut out, "ORDER BY ", sky_start, false);
        let mut specs = Vec::new();
        for (n, &(direction, s, e, line, column)) in dims.iter().enumerate() {
            if n > 0 {
                push(&mut out, ", ", s, false);
            }
            push(&mut out, &format!("{MARKER}({k}, {n}, "), s, false);
            push(&mut out, &sql[s..e], s, true);
            push(&mut out, ")", e, false);
            specs.push(DimSpec { direction, text: sql[s..e].to_string(), line, column });
        }
        let clause_end = if end_tok > i + 2 { toks[end_tok - 1].end } else { toks[i + 1].end };
        if end_tok < toks.len() && toks[end_tok].is("ORDER") && toks.get(end_tok + 1).is_some_and(|t| t.is("BY")) {
            // Merge with the level's own ORDER BY: the skyline keys come first.
            push(&mut out, ", ", toks[end_tok].start, false);
            cur = toks[end_tok + 1].end;
            i = end_tok + 2;
            ordered[depth] = true;
        } else {
            cur = clause_end;
            i = end_tok;
        }
        clauses.push(ClauseSpec { distinct, dims: specs, line: sky_line, column: sky_col });
    }
    push(&mut out, &sql[cur..], cur, true);
    Ok(Some(Rewritten { sql: out, clauses, original: sql.to_string(), pieces }))
}

impl Rewritten {
    /// The original (line, column) of a (line, column) in the rewritten text.
    pub fn original_position(&self, line: u64, column: u64) -> (u64, u64) {
        let b = byte_of(&self.sql, line, column);
        let p = self
            .pieces
            .iter()
            .rev()
            .find(|p| p.out <= b)
            .copied()
            .unwrap_or(Piece { out: 0, len: 0, src: 0, copy: true });
        let src = if p.copy { p.src + (b - p.out).min(p.len) } else { p.src };
        line_col(&self.original, src)
    }

    /// `msg` with every `Line: L, Column: C` mapped into the original text.
    pub fn map_message(&self, msg: &str) -> String {
        let reworded = aggregate_dimension_message(msg);
        let msg = reworded.as_str();
        let mut out = String::new();
        let mut rest = msg;
        while let Some(i) = rest.find("Line: ") {
            out.push_str(&rest[..i]);
            let tail = &rest[i + 6..];
            let parsed = (|| {
                let ld = tail.find(|c: char| !c.is_ascii_digit())?;
                let line: u64 = tail[..ld].parse().ok()?;
                let after = tail[ld..].strip_prefix(", Column: ")?;
                let cd = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
                let col: u64 = after[..cd].parse().ok()?;
                Some((line, col, &after[cd..]))
            })();
            match parsed {
                Some((line, col, after)) => {
                    let (l, c) = self.original_position(line, col);
                    out.push_str(&format!("Line: {l}, Column: {c}"));
                    rest = after;
                }
                None => {
                    out.push_str("Line: ");
                    rest = tail;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// An error about the rewritten text, its positions mapped into the original.
    /// DataFusion's error for a selected column that is neither grouped nor
    /// aggregated, in a statement with a skyline: the "wildcard" it names is the
    /// rewrite's, not the user's; say what happened instead (an aggregate dimension
    /// such as `count(*)` makes the query an aggregation).
    pub fn map_error(&self, e: DataFusionError) -> DataFusionError {
        match e {
            DataFusionError::SQL(pe, bt) => {
                let pe = match *pe {
                    ParserError::ParserError(s) => ParserError::ParserError(self.map_message(&s)),
                    ParserError::TokenizerError(s) => ParserError::TokenizerError(self.map_message(&s)),
                    other => other,
                };
                DataFusionError::SQL(Box::new(pe), bt)
            }
            DataFusionError::Plan(s) => DataFusionError::Plan(self.map_message(&s)),
            DataFusionError::Context(c, inner) => DataFusionError::Context(c, Box::new(self.map_error(*inner))),
            DataFusionError::Diagnostic(mut d, inner) => {
                // The span points into the rewritten text too.
                if let Some(span) = d.span.as_mut() {
                    for at in [&mut span.start, &mut span.end] {
                        if at.line > 0 {
                            (at.line, at.column) = self.original_position(at.line, at.column);
                        }
                    }
                }
                DataFusionError::Diagnostic(d, Box::new(self.map_error(*inner)))
            }
            other => other,
        }
    }
}

/// [`Rewrite::map_message`]'s rewording of DataFusion's "While expanding
/// wildcard, column .. must appear in the GROUP BY clause" in a skyline statement.
fn aggregate_dimension_message(msg: &str) -> String {
    const WILDCARD: &str = "While expanding wildcard, column ";
    const MUST: &str = " must appear in the GROUP BY clause or must be part of an aggregate function";
    let (Some(a), Some(b)) = (msg.find(WILDCARD), msg.find(MUST)) else { return msg.to_string() };
    if b < a {
        return msg.to_string();
    }
    let column = &msg[a + WILDCARD.len()..b];
    // Keep a position DataFusion gave (" at Line: L, Column: C") at the end.
    let at = msg[b..].find(" at Line: ").map(|i| &msg[b + i..]).unwrap_or("");
    format!(
        "{}an aggregate (such as count(*)) in SKYLINE OF or ORDER BY makes the query an aggregation, so every selected column must be grouped or aggregated: column {column} is neither; add GROUP BY or aggregate it{at}",
        &msg[..msg.find("Column in SELECT must be in GROUP BY").unwrap_or(a)]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aggregate_dimension_is_explained() {
        let df = "Error during planning: Column in SELECT must be in GROUP BY or an aggregate function: While expanding wildcard, column \"a\" must appear in the GROUP BY clause or must be part of an aggregate function, currently only \"count(Int64(1))\" appears in the SELECT clause satisfies this requirement at Line: 1, Column: 8";
        let m = aggregate_dimension_message(df);
        assert!(m.contains("column \"a\" is neither; add GROUP BY") && m.ends_with("at Line: 1, Column: 8"), "{m}");
        assert!(!m.contains("wildcard"), "{m}");
        assert_eq!(aggregate_dimension_message("other"), "other");
    }

    #[test]
    fn no_clause_is_untouched() {
        assert!(rewrite("select skyline from t").unwrap().is_none());
        assert!(rewrite("select 1").unwrap().is_none());
    }

    #[test]
    fn rewrites_at_each_level() {
        let sql = "SELECT * FROM (SELECT a, b FROM t WHERE c > 0 SKYLINE OF a MIN, b + 1 MAX) x\nSKYLINE OF DISTINCT a DIFF ORDER BY a LIMIT 3";
        let rw = rewrite(sql).unwrap().unwrap();
        assert_eq!(rw.clauses.len(), 2);
        assert_eq!(
            rw.sql,
            "SELECT * FROM (SELECT a, b FROM t WHERE c > 0 ORDER BY __ridgeline_skyline(0, 0, a), __ridgeline_skyline(0, 1, b + 1)) x\nORDER BY __ridgeline_skyline(1, 0, a),  a LIMIT 3"
        );
        assert!(!rw.clauses[0].distinct && rw.clauses[1].distinct);
        assert_eq!(rw.clauses[0].dims[1].direction, SkylineDirection::Max);
        assert_eq!(rw.clauses[0].dims[1].text, "b + 1");
        assert_eq!((rw.clauses[1].line, rw.clauses[1].column), (2, 1));
        // A position inside a copied expression maps back to the original.
        let (l, c) = line_col(&rw.sql, rw.sql.find("b + 1").unwrap());
        assert_eq!(rw.original_position(l, c), (1, sql.find("b + 1").unwrap() as u64 + 1));
        let (l, c) = line_col(&rw.sql, rw.sql.find("LIMIT").unwrap());
        assert_eq!(rw.original_position(l, c), (2, sql.lines().nth(1).unwrap().find("LIMIT").unwrap() as u64 + 1));
        assert_eq!(rw.map_message("x at Line: 2, Column: 1 y"), "x at Line: 2, Column: 1 y");
    }

    #[test]
    fn errors_point_at_the_clause() {
        let e = rewrite("SELECT * FROM t SKYLINE OF a MIN WHERE b > 1").unwrap_err().to_string();
        assert!(e.contains("must follow WHERE") && e.contains("Line: 1, Column: 17"), "{e}");
        let e = rewrite("SELECT * FROM t ORDER BY a SKYLINE OF a MIN").unwrap_err().to_string();
        assert!(e.contains("before ORDER BY") && e.contains("Column: 28"), "{e}");
        let e = rewrite("SELECT * FROM t SKYLINE OF a MIN, b").unwrap_err().to_string();
        assert!(e.contains("'b' needs a direction") && e.contains("Column: 36"), "{e}");
        let e = rewrite("SELECT * FROM t SKYLINE OF").unwrap_err().to_string();
        assert!(e.contains("expected a dimension"), "{e}");
        let e = rewrite("SELECT * FROM t SKYLINE OF MIN").unwrap_err().to_string();
        assert!(e.contains("expected an expression before MIN"), "{e}");
        // Multi-byte text before the clause: columns count characters.
        let e = rewrite("SELECT 'ü' AS x FROM t SKYLINE OF x").unwrap_err().to_string();
        assert!(e.contains("Column: 36"), "{e}");
    }
}
