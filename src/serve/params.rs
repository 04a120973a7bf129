//! Query parameters: `?` and `$1` placeholders, the parameter schema of a
//! statement, values bound from an Arrow record batch, and the prepared
//! statement handle that carries them.
//!
//! Placeholders are DataFusion's: `$1`, `$2`, ... by position, `$name` by name.
//! `?` (JDBC and ODBC style) is numbered in order of appearance before planning,
//! so `WHERE a = ? AND b = ?` means `WHERE a = $1 AND b = $2`; a statement may
//! use one style or the other, not both.
//!
//! Values come as one row of a record batch (Flight SQL's DoPut of a prepared
//! statement): column `i` is `$i+1` (or, for named placeholders, the column of
//! that name). A value whose type differs from the one the planner inferred for
//! its placeholder is cast to it; one that does not cast is an error.
//!
//! The handle keeps the server stateless: a prepared statement's handle is its
//! SQL text, and binding values answers with a new handle that carries the SQL
//! and the values (Flight SQL's `DoPutPreparedStatementResult`). Any server of a
//! group can run it and nothing is kept per statement, so clients that never
//! close their statements cost nothing.
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::borrow::Cow;
use std::collections::HashMap;

fn plan_err(m: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(m.into())
}

/// `sql` with each `?` placeholder replaced by `$1`, `$2`, ... in order of
/// appearance (tokens of the session's `dialect`: a `?` in a string literal, a
/// quoted name or a comment stays). Unchanged without `?`, or when it does not
/// tokenize (the parser reports that). Mixing `?` with `$n`/`$name` is an error.
pub fn number_placeholders<'a>(sql: &'a str, dialect: &str) -> Result<Cow<'a, str>, DataFusionError> {
    if !sql.contains('?') {
        return Ok(Cow::Borrowed(sql));
    }
    let Some(d) = dialect_from_str(dialect) else { return Ok(Cow::Borrowed(sql)) };
    let Ok(tokens) = Tokenizer::new(d.as_ref(), sql).tokenize_with_location() else { return Ok(Cow::Borrowed(sql)) };
    let mut marks = Vec::new();
    let mut others = false;
    for t in &tokens {
        if let Token::Placeholder(p) = &t.token {
            if p == "?" {
                marks.push((t.span.start.line, t.span.start.column));
            } else {
                others = true;
            }
        }
    }
    if marks.is_empty() {
        return Ok(Cow::Borrowed(sql));
    }
    if others {
        return Err(plan_err("the statement mixes ? placeholders with numbered or named ones ($1, $name): use one style"));
    }
    // Line and column (1-based, in characters, as the tokenizer counts them) to
    // byte offsets.
    let mut out = String::with_capacity(sql.len() + 2 * marks.len());
    let (mut line, mut col) = (1u64, 1u64);
    let mut next = marks.iter().peekable();
    let mut n = 0usize;
    for ch in sql.chars() {
        if next.peek().is_some_and(|&&(l, c)| l == line && c == col) && ch == '?' {
            next.next();
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(ch);
        }
        if ch == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    if next.next().is_some() {
        // The positions did not line up with the text: never guess.
        return Err(plan_err("cannot number the ? placeholders of this statement: use $1, $2, ... instead"));
    }
    Ok(Cow::Owned(out))
}

/// A placeholder's id (`$3`, `?3`) as its 1-based position, `None` for a named one.
fn position(id: &str) -> Option<usize> {
    id.get(1..)?.parse::<usize>().ok().filter(|&i| i > 0)
}

/// The parameters of a plan, in order: positional ones by position, then named
/// ones by name.
fn ordered(types: &HashMap<String, Option<DataType>>) -> Vec<(String, Option<DataType>)> {
    let mut v: Vec<(String, Option<DataType>)> = types.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
    v.sort_by(|a, b| match (position(&a.0), position(&b.0)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    });
    v
}

/// The parameter schema of a statement whose placeholders have `types`: one
/// nullable field per placeholder, named after it (`$1`, ...), typed as the
/// planner inferred it (`Null` where it could not: any value is taken).
pub fn parameter_schema(types: &HashMap<String, Option<DataType>>) -> Schema {
    Schema::new(
        ordered(types).into_iter().map(|(id, t)| Field::new(id, t.unwrap_or(DataType::Null), true)).collect::<Vec<_>>(),
    )
}

fn names(types: &HashMap<String, Option<DataType>>) -> String {
    ordered(types).into_iter().map(|(k, _)| k).collect::<Vec<_>>().join(", ")
}

/// The values of `batch` (one row) for placeholders of `types`, cast to the
/// inferred types. `None` for `batch`: an error when the statement has
/// parameters.
pub fn bind(types: &HashMap<String, Option<DataType>>, batch: Option<&RecordBatch>) -> Result<Option<ParamValues>, DataFusionError> {
    let Some(batch) = batch else {
        if types.is_empty() {
            return Ok(None);
        }
        return Err(plan_err(format!(
            "the statement has {} parameter(s) ({}) and no values are bound: prepare it and bind one row of values",
            types.len(),
            names(types)
        )));
    };
    if types.is_empty() {
        if batch.num_columns() == 0 {
            return Ok(None);
        }
        return Err(plan_err(format!("the statement has no parameters, but {} value(s) are bound", batch.num_columns())));
    }
    if batch.num_rows() != 1 {
        return Err(plan_err(format!("bind exactly one row of parameter values (got {} rows)", batch.num_rows())));
    }
    let value = |i: usize, id: &str, want: &Option<DataType>| -> Result<ScalarValue, DataFusionError> {
        let v = ScalarValue::try_from_array(batch.column(i), 0)?;
        match want {
            Some(t) if t != &v.data_type() && !v.is_null() => v.cast_to(t).map_err(|e| {
                plan_err(format!("parameter {id}: the value {v} ({}) does not convert to {t}: {}", v.data_type(), crate::format::one_line(&e)))
            }),
            Some(t) if t != &v.data_type() => ScalarValue::try_from(t).map_err(|_| plan_err(format!("parameter {id}: no NULL of type {t}"))),
            _ => Ok(v),
        }
    };
    let positional: Vec<usize> = types.keys().filter_map(|k| position(k)).collect();
    if positional.len() == types.len() {
        let count = positional.iter().copied().max().unwrap_or(0);
        if batch.num_columns() != count {
            return Err(plan_err(format!(
                "the statement has {count} positional parameter(s) ({}), but {} value(s) are bound",
                names(types),
                batch.num_columns()
            )));
        }
        let mut by_pos: HashMap<usize, &Option<DataType>> = HashMap::new();
        for (k, t) in types {
            if let Some(p) = position(k) {
                by_pos.insert(p, t);
            }
        }
        let values = (0..count)
            .map(|i| value(i, &format!("${}", i + 1), by_pos.get(&(i + 1)).copied().unwrap_or(&None)))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Some(ParamValues::from(values)));
    }
    if !positional.is_empty() {
        return Err(plan_err(format!("the statement mixes positional and named parameters ({}): use one style", names(types))));
    }
    let schema = batch.schema();
    let mut values = HashMap::new();
    for (id, t) in ordered(types) {
        let name = id.get(1..).unwrap_or("");
        let i = schema
            .index_of(name)
            .or_else(|_| schema.index_of(&id))
            .map_err(|_| plan_err(format!("no value is bound for parameter {id} (bind a column named '{name}')")))?;
        values.insert(name.to_string(), value(i, &id, &t)?);
    }
    Ok(Some(ParamValues::from(values)))
}

/// The first bytes of a handle that carries values (never valid UTF-8, so never
/// SQL text).
const BOUND: &[u8; 4] = b"\xffRL1";

/// A prepared statement: its SQL and the values bound to it.
#[derive(Debug, Clone)]
pub struct Statement {
    pub sql: String,
    pub values: Option<RecordBatch>,
}

impl Statement {
    /// The handle: the SQL text alone, or the marker, the SQL's length, the SQL
    /// and the values as an Arrow IPC stream.
    pub fn encode(&self) -> Result<Vec<u8>, DataFusionError> {
        let Some(values) = &self.values else { return Ok(self.sql.as_bytes().to_vec()) };
        let len = u32::try_from(self.sql.len()).map_err(|_| plan_err("the SQL text is too long"))?;
        let mut out = Vec::with_capacity(8 + self.sql.len());
        out.extend_from_slice(BOUND);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(self.sql.as_bytes());
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &values.schema())?;
        w.write(values)?;
        w.finish()?;
        drop(w);
        Ok(out)
    }

    /// The statement of a handle from [`encode`](Self::encode) (or a client).
    pub fn decode(handle: &[u8]) -> Result<Statement, String> {
        let Some(rest) = handle.strip_prefix(BOUND.as_slice()) else {
            let sql = std::str::from_utf8(handle).map_err(|_| "the statement handle is neither SQL text nor a Ridgeline handle")?;
            return Ok(Statement { sql: sql.to_string(), values: None });
        };
        let damaged = |what: &str| format!("the statement handle is damaged ({what})");
        let len = rest.get(..4).ok_or_else(|| damaged("too short"))?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let sql = rest.get(4..4usize.saturating_add(len)).ok_or_else(|| damaged("too short"))?;
        let sql = std::str::from_utf8(sql).map_err(|_| damaged("SQL text"))?;
        let ipc = &rest[4 + len..];
        let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None).map_err(|e| damaged(&e.to_string()))?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>().map_err(|e| damaged(&e.to_string()))?;
        let values = arrow::compute::concat_batches(&schema, &batches).map_err(|e| damaged(&e.to_string()))?;
        Ok(Statement { sql: sql.to_string(), values: Some(values) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn question_marks_are_numbered_outside_literals() {
        let n = |s| number_placeholders(s, "generic").unwrap().into_owned();
        assert_eq!(n("SELECT 1"), "SELECT 1");
        assert_eq!(n("SELECT * FROM t WHERE a = ? AND b = ?"), "SELECT * FROM t WHERE a = $1 AND b = $2");
        assert_eq!(
            n("SELECT '?', \"q?\" -- ?\nFROM t /* ? */ WHERE x = ? AND y = 'é?' AND z = ?"),
            "SELECT '?', \"q?\" -- ?\nFROM t /* ? */ WHERE x = $1 AND y = 'é?' AND z = $2"
        );
        assert_eq!(n("SELECT 'it''s ?', ?"), "SELECT 'it''s ?', $1");
        assert!(number_placeholders("SELECT ?, $1", "generic").unwrap_err().to_string().contains("mixes"));
        // Unknown dialects and bad tokens are the parser's business.
        assert_eq!(n("SELECT 'open ?"), "SELECT 'open ?");
    }

    fn types(v: &[(&str, Option<DataType>)]) -> HashMap<String, Option<DataType>> {
        v.iter().map(|(k, t)| (k.to_string(), t.clone())).collect()
    }

    fn row(cols: Vec<(&str, arrow::array::ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).unwrap()
    }

    #[test]
    fn values_bind_by_position_and_cast() {
        let t = types(&[("$2", Some(DataType::Utf8)), ("$1", Some(DataType::Int32))]);
        assert_eq!(parameter_schema(&t).fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), ["$1", "$2"]);
        let b = row(vec![("0", Arc::new(Int64Array::from(vec![5]))), ("1", Arc::new(StringArray::from(vec!["x"])))]);
        let Some(ParamValues::List(v)) = bind(&t, Some(&b)).unwrap() else { panic!("positional") };
        assert_eq!(v[0].value, ScalarValue::Int32(Some(5)));
        assert_eq!(v[1].value, ScalarValue::Utf8(Some("x".into())));
        // Too few values, more rows, a value that does not convert, none at all.
        let one = row(vec![("0", Arc::new(Int64Array::from(vec![5])))]);
        assert!(bind(&t, Some(&one)).unwrap_err().to_string().contains("2 positional parameter(s) ($1, $2), but 1"));
        let two = row(vec![("0", Arc::new(Int64Array::from(vec![5, 6]))), ("1", Arc::new(StringArray::from(vec!["x", "y"])))]);
        assert!(bind(&t, Some(&two)).unwrap_err().to_string().contains("one row"));
        let big = row(vec![("0", Arc::new(Int64Array::from(vec![1 << 40]))), ("1", Arc::new(StringArray::from(vec!["x"])))]);
        assert!(bind(&t, Some(&big)).unwrap_err().to_string().contains("parameter $1"));
        assert!(bind(&t, None).unwrap_err().to_string().contains("no values are bound"));
        assert!(bind(&HashMap::new(), Some(&one)).unwrap_err().to_string().contains("no parameters"));
        assert!(bind(&HashMap::new(), None).unwrap().is_none());
    }

    #[test]
    fn values_bind_by_name() {
        let t = types(&[("$id", Some(DataType::Int64))]);
        let b = row(vec![("id", Arc::new(Int32Array::from(vec![7])))]);
        let Some(ParamValues::Map(m)) = bind(&t, Some(&b)).unwrap() else { panic!("named") };
        assert_eq!(m["id"].value, ScalarValue::Int64(Some(7)));
        let other = row(vec![("x", Arc::new(Int32Array::from(vec![7])))]);
        assert!(bind(&t, Some(&other)).unwrap_err().to_string().contains("no value is bound for parameter $id"));
    }

    #[test]
    fn handles_carry_sql_and_values() {
        let s = Statement { sql: "SELECT $1".into(), values: None };
        assert_eq!(s.encode().unwrap(), b"SELECT $1");
        let b = row(vec![("0", Arc::new(StringArray::from(vec!["é"])))]);
        let h = Statement { sql: "SELECT $1 AS v".into(), values: Some(b.clone()) }.encode().unwrap();
        let back = Statement::decode(&h).unwrap();
        assert_eq!(back.sql, "SELECT $1 AS v");
        assert_eq!(back.values.unwrap(), b);
        assert_eq!(Statement::decode(b"SELECT 1").unwrap().sql, "SELECT 1");
        // Damaged handles are errors, whatever their bytes.
        for cut in 0..h.len() {
            if let Ok(s) = Statement::decode(&h[..cut]) {
                assert!(s.values.is_none_or(|v| v.num_rows() <= 1));
            }
        }
        assert!(Statement::decode(b"\xff\xfe").unwrap_err().contains("neither"));
        assert!(Statement::decode(b"\xffRL1\xff\xff\xff\xff").unwrap_err().contains("damaged"));
    }
}
