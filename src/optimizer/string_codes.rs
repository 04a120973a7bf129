//! String predicates on the GPU by dictionary codes.
//!
//! Strings have no device layout, but a resident string column with few distinct
//! values has a dictionary ([`StringDict`]: the sorted distinct values and, per
//! device chunk, a `u32` code per row). A Boolean expression over one such column
//! (`l_shipmode IN ('AIR', 'AIR REG')`, `p_type LIKE 'PROMO%'`,
//! `o_orderstatus = 'F'`, `NOT (s < 'x')`, ...) has one answer per distinct value,
//! so the planner evaluates it once over the dictionary with DataFusion's own
//! expression code and replaces it by a test of the code: the codes whose value
//! passes, as ranges of consecutive codes (the values are sorted, so a prefix
//! `LIKE` or a range comparison is one range, an `IN` list a few). The GPU kernel
//! then reads the code column beside the table's other columns.
//!
//! NULL keeps its meaning: a column that may hold NULLs gets
//! `CASE WHEN code = <null code> THEN <the expression's answer for NULL> ...`,
//! so `NOT (s = 'a')` over a NULL stays NULL.
use crate::exec::GpuScanExec;
use crate::resident::StringDict;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, Column, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExpr;
use ridgeline_operators::GpuContext;
use std::sync::Arc;

pub use crate::tuning::limits::MAX_CODE_RANGES;

pub use crate::resident::{augmented_schema, code_field_name, is_string, CodeColumn};

/// Rewrites expressions over a resident scan's output so that their string
/// predicates test dictionary codes; collects the code columns they need.
pub struct Coder<'a> {
    dev: &'a GpuContext,
    scan: &'a GpuScanExec,
    schema: SchemaRef,
    /// Index of the first code column in the program's input.
    base: usize,
    /// Code columns, in the order they follow the scan's columns.
    pub codes: Vec<CodeColumn>,
}

impl<'a> Coder<'a> {
    /// A coder for expressions over `scan`'s output, its code columns right after
    /// the scan's.
    pub fn new(dev: &'a GpuContext, scan: &'a GpuScanExec) -> Self {
        let base = datafusion::physical_plan::ExecutionPlan::schema(scan).fields().len();
        Self::with_base(dev, scan, base)
    }

    /// A coder whose code columns start at input column `base` (after other
    /// columns a program appends to the scan's, such as a GPU aggregation's key codes).
    pub fn with_base(dev: &'a GpuContext, scan: &'a GpuScanExec, base: usize) -> Self {
        let schema = datafusion::physical_plan::ExecutionPlan::schema(scan);
        Coder { dev, base, schema, scan, codes: Vec::new() }
    }

    /// The scan's schema with the code columns so far (for a coder made by [`Coder::new`]).
    pub fn schema(&self) -> SchemaRef {
        augmented_schema(&self.schema, &self.codes)
    }

    /// `e` with every Boolean subexpression over exactly one string column replaced
    /// by a test of that column's codes; `Err` why not (a string column without a
    /// dictionary, a string used as a value, too many code ranges). Code columns
    /// added for a failed rewrite are taken back.
    pub fn rewrite(&mut self, e: &Arc<dyn PhysicalExpr>) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
        let before = self.codes.len();
        let r = self.go(e);
        if r.is_err() {
            self.codes.truncate(before);
        }
        r
    }

    #[recursive::recursive]
    fn go(&mut self, e: &Arc<dyn PhysicalExpr>) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
        let cols = collect_columns(e);
        let strings: Vec<&Column> = cols.iter().filter(|c| self.schema.fields().get(c.index()).is_some_and(|f| is_string(f.data_type()))).collect();
        if strings.is_empty() {
            return Ok(e.clone());
        }
        let boolean = e.data_type(&self.schema).map_err(|x| x.to_string())? == DataType::Boolean;
        // A volatile expression (`random() < 0.5 AND s = 'a'`) has no answer per value.
        if cols.len() == 1 && boolean && !datafusion::physical_expr_common::physical_expr::is_volatile(e) {
            return self.by_codes(e, strings[0]);
        }
        if e.downcast_ref::<Column>().is_some() {
            return Err(format!("string column {e} used as a value"));
        }
        let children: Vec<Arc<dyn PhysicalExpr>> = e.children().into_iter().cloned().collect();
        if children.is_empty() {
            return Err(format!("{e}: no children to rewrite"));
        }
        let new = children.iter().map(|c| self.go(c)).collect::<std::result::Result<Vec<_>, _>>()?;
        e.clone().with_new_children(new).map_err(|x| x.to_string())
    }

    /// Index (in the program's input) of the code column of table column `t`,
    /// whose dictionary is `dict`; added on first use.
    fn code_column(&mut self, t: usize, dict: &Arc<StringDict>) -> usize {
        let k = match self.codes.iter().position(|c| c.table_col == t) {
            Some(k) => k,
            None => {
                self.codes.push(CodeColumn { table_col: t, dict: dict.clone() });
                self.codes.len() - 1
            }
        };
        self.base + k
    }

    /// `e` (Boolean, over string column `c` only) as a test of `c`'s codes.
    fn by_codes(&mut self, e: &Arc<dyn PhysicalExpr>, c: &Column) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
        let t = self.scan.table_columns()[c.index()];
        let nullable = self.scan.data().table.column_stats[t].null_count != Precision::Exact(0);
        let field = self.schema.field(c.index()).clone();
        // Evaluate `e` over the distinct values and one NULL.
        let dict = self.scan.data().string_dict(self.dev, t).map_err(|x| x.to_string())?;
        let Some(dict) = dict else {
            return Err(format!("column {} has more than {} distinct strings (no dictionary)", field.name(), crate::resident::MAX_DICT_VALUES));
        };
        let n = dict.values.len();
        let answers = answers_over(e, c, &field, &dict.values).map_err(|x| x.to_string())?;
        let mut pass = Vec::new();
        for code in 0..n {
            if answers.is_null(code) {
                return Err(format!("{e} is NULL for the non-NULL value {code}"));
            }
            if answers.value(code) {
                pass.push(code as u32);
            }
        }
        let col_idx = self.code_column(t, &dict);
        let code = Arc::new(Column::new(&code_field_name(col_idx - self.base), col_idx)) as Arc<dyn PhysicalExpr>;
        let test = match ranges_test(&code, &pass, n as u32) {
            Some(t) => t,
            None => return Err(format!("{e}: more than {MAX_CODE_RANGES} ranges of codes")),
        };
        if !nullable {
            return Ok(test);
        }
        // The NULL row's answer.
        let on_null: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Boolean(if answers.is_null(n) { None } else { Some(answers.value(n)) })));
        let is_null = Arc::new(BinaryExpr::new(code, Operator::Eq, u32_lit(n as u32))) as Arc<dyn PhysicalExpr>;
        Ok(Arc::new(CaseExpr::try_new(None, vec![(is_null, on_null)], Some(test)).map_err(|x| x.to_string())?))
    }
}

fn u32_lit(v: u32) -> Arc<dyn PhysicalExpr> {
    Arc::new(Literal::new(ScalarValue::UInt32(Some(v))))
}

/// `e` evaluated over `values` and one NULL after them (`e`'s only column is `c`).
pub fn answers_over(e: &Arc<dyn PhysicalExpr>, c: &Column, field: &Field, values: &ArrayRef) -> datafusion::error::Result<arrow::array::BooleanArray> {
    let nulls = arrow::array::new_null_array(values.data_type(), 1);
    let all = arrow::compute::concat(&[values.as_ref(), nulls.as_ref()])?;
    let all = if all.data_type() != field.data_type() { arrow::compute::cast(&all, field.data_type())? } else { all };
    let one = Arc::new(Schema::new(vec![Field::new(field.name(), field.data_type().clone(), true)]));
    let batch = RecordBatch::try_new(one, vec![all])?;
    let e0 = e
        .clone()
        .transform_up(|x| match x.downcast_ref::<Column>() {
            Some(y) if y.index() == c.index() => Ok(Transformed::yes(Arc::new(Column::new(y.name(), 0)) as Arc<dyn PhysicalExpr>)),
            _ => Ok(Transformed::no(x)),
        })?
        .data;
    let out = e0.evaluate(&batch)?.into_array(batch.num_rows())?;
    Ok(out.as_boolean().clone())
}

/// Ranges `[lo, hi]` of consecutive codes in `pass` (sorted, distinct).
pub fn code_ranges(pass: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &p in pass {
        match out.last_mut() {
            Some((_, hi)) if *hi + 1 == p => *hi = p,
            _ => out.push((p, p)),
        }
    }
    out
}

/// A test that `code` (a value in `0..n`) is in `pass`: the ranges of `pass`, or
/// the negated ranges of the rest when those are fewer; `None` past
/// [`MAX_CODE_RANGES`].
fn ranges_test(code: &Arc<dyn PhysicalExpr>, pass: &[u32], n: u32) -> Option<Arc<dyn PhysicalExpr>> {
    let fail: Vec<u32> = (0..n).filter(|c| pass.binary_search(c).is_err()).collect();
    let (ranges, negate) = {
        let p = code_ranges(pass);
        let f = code_ranges(&fail);
        if f.len() < p.len() { (f, true) } else { (p, false) }
    };
    if ranges.len() > MAX_CODE_RANGES {
        return None;
    }
    let bool_lit = |b: bool| Arc::new(Literal::new(ScalarValue::Boolean(Some(b)))) as Arc<dyn PhysicalExpr>;
    // The NULL code (n) fails every range: `code < n` keeps a negated test false there
    // (the caller's CASE answers for NULL anyway).
    let any = ranges
        .iter()
        .map(|&(lo, hi)| -> Arc<dyn PhysicalExpr> {
            if lo == hi {
                Arc::new(BinaryExpr::new(code.clone(), Operator::Eq, u32_lit(lo)))
            } else {
                Arc::new(BinaryExpr::new(
                    Arc::new(BinaryExpr::new(code.clone(), Operator::GtEq, u32_lit(lo))),
                    Operator::And,
                    Arc::new(BinaryExpr::new(code.clone(), Operator::LtEq, u32_lit(hi))),
                ))
            }
        })
        .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::Or, b)) as Arc<dyn PhysicalExpr>);
    Some(match (any, negate) {
        (None, false) => bool_lit(false),
        (None, true) => Arc::new(BinaryExpr::new(code.clone(), Operator::Lt, u32_lit(n))),
        (Some(a), false) => a,
        (Some(a), true) => Arc::new(BinaryExpr::new(
            Arc::new(BinaryExpr::new(code.clone(), Operator::Lt, u32_lit(n))),
            Operator::And,
            Arc::new(datafusion::physical_expr::expressions::NotExpr::new(a)),
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_codes() {
        assert_eq!(code_ranges(&[]), vec![]);
        assert_eq!(code_ranges(&[3]), vec![(3, 3)]);
        assert_eq!(code_ranges(&[0, 1, 2, 5, 7, 8]), vec![(0, 2), (5, 5), (7, 8)]);
    }

    /// The rewritten test agrees with the original expression on every code.
    #[test]
    fn tests_agree_with_the_values() {
        use arrow::array::StringArray;
        let values: ArrayRef = Arc::new(StringArray::from(vec!["AIR", "AIR REG", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]));
        let field = Field::new("m", DataType::Utf8, true);
        let c = Column::new("m", 0);
        let col = Arc::new(c.clone()) as Arc<dyn PhysicalExpr>;
        let s = |v: &str| Arc::new(Literal::new(ScalarValue::Utf8(Some(v.into())))) as Arc<dyn PhysicalExpr>;
        let eq = |v: &str| Arc::new(BinaryExpr::new(col.clone(), Operator::Eq, s(v))) as Arc<dyn PhysicalExpr>;
        let exprs: Vec<Arc<dyn PhysicalExpr>> = vec![
            eq("MAIL"),
            Arc::new(BinaryExpr::new(eq("MAIL"), Operator::Or, eq("SHIP"))),
            Arc::new(BinaryExpr::new(col.clone(), Operator::NotEq, s("RAIL"))),
            Arc::new(BinaryExpr::new(col.clone(), Operator::Lt, s("M"))),
            Arc::new(datafusion::physical_expr::expressions::LikeExpr::new(false, false, col.clone(), s("%AIR%"))),
            eq("NOT THERE"),
        ];
        let n = values.len() as u32;
        for e in &exprs {
            let answers = answers_over(e, &c, &field, &values).unwrap();
            assert_eq!(answers.len(), values.len() + 1);
            assert!(answers.is_null(values.len()), "{e} over NULL");
            let pass: Vec<u32> = (0..n).filter(|&i| answers.value(i as usize)).collect();
            let code = Arc::new(Column::new("code", 0)) as Arc<dyn PhysicalExpr>;
            let test = ranges_test(&code, &pass, n).unwrap();
            // Evaluate the test over every code (and the NULL code n).
            let codes: ArrayRef = Arc::new(arrow::array::UInt32Array::from((0..=n).collect::<Vec<_>>()));
            let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![Field::new("code", DataType::UInt32, false)])), vec![codes]).unwrap();
            let got = test.evaluate(&batch).unwrap().into_array(batch.num_rows()).unwrap();
            let got = got.as_boolean();
            for i in 0..n as usize {
                assert_eq!(got.value(i), answers.value(i), "{e} at {i}: test {test}");
            }
            assert!(!got.value(n as usize), "{e}: the NULL code must fail the test {test}");
        }
        // Too many ranges: every other code.
        let pass: Vec<u32> = (0..80).step_by(2).collect();
        let code = Arc::new(Column::new("code", 0)) as Arc<dyn PhysicalExpr>;
        assert!(ranges_test(&code, &pass, 80).is_none());
        assert!(ranges_test(&code, &pass[..10], 80).is_some());
    }
}
