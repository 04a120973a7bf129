//! Filter selectivities for DataFusion's statistics: the physical optimizer rule
//! `ridgeline_filter_estimates`.
//!
//! DataFusion estimates a filter's rows by interval analysis, which needs every
//! conjunct to be a comparison it can bound (numbers with min / max); any other
//! predicate (string equality, IN lists, LIKE, OR across columns) gets a fixed
//! 20%. Join selection then takes a filtered dimension table for a fifth of it:
//! TPC-H q17's parts of one brand and one container (0.1% of part) look like
//! 400,000 rows at SF 10, over DataFusion's collect-left threshold, so the hash
//! join repartitions all of lineitem instead of broadcasting 2,000 parts.
//!
//! This rule runs before join selection and sets each filter's fallback
//! selectivity (the one DataFusion uses where its analysis does not apply) to an
//! estimate from the input's column statistics: `1 / ndv` for equality with a
//! literal, the list's share of the distinct values for IN, interpolation in
//! [min, max] for ranges, 0.1 for LIKE, products for AND and inclusion-exclusion
//! for OR. The fallback is a whole percent, so 1% at least. Off with
//! `SET ridgeline.filter_estimates = false`.
use super::join_reorder::{below, eq_sel, scalar_f64, ColStat};
use crate::config::RidgelineOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr, TryCastExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct FilterEstimates;

impl PhysicalOptimizerRule for FilterEstimates {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        if !RidgelineOptions::from_config(config).filter_estimates {
            return Ok(plan);
        }
        Ok(plan
            .transform_up(|p| {
                let Some(f) = p.downcast_ref::<FilterExec>() else { return Ok(Transformed::no(p)) };
                let stats = super::span("est.stats", || crate::exec::plan_statistics(f.input().as_ref()))?;
                let pct = percent(selectivity(f.predicate(), &stats));
                if pct == f.default_selectivity() {
                    return Ok(Transformed::no(p));
                }
                let new = super::span("est.build", || FilterExecBuilder::from(f).with_default_selectivity(pct).build())?;
                Ok(Transformed::yes(Arc::new(new) as Arc<dyn ExecutionPlan>))
            })?
            .data)
    }

    fn name(&self) -> &str {
        "ridgeline_filter_estimates"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A selectivity as DataFusion's whole percent, at least 1.
pub fn percent(sel: f64) -> u8 {
    (sel * 100.0).round().clamp(1.0, 100.0) as u8
}

/// Estimated fraction of the rows for which `e` is true, given the statistics of
/// its input.
pub fn selectivity(e: &Arc<dyn PhysicalExpr>, stats: &Statistics) -> f64 {
    sel(e, stats).clamp(0.0, 1.0)
}

fn value<T: std::fmt::Debug + Clone + PartialEq + Eq + PartialOrd>(p: &Precision<T>) -> Option<T> {
    p.get_value().cloned()
}

fn col_of(cs: &ColumnStatistics, rows: Option<f64>) -> ColStat {
    ColStat {
        ndv: value(&cs.distinct_count).map(|d| d as f64),
        min: value(&cs.min_value).as_ref().and_then(scalar_f64),
        max: value(&cs.max_value).as_ref().and_then(scalar_f64),
        null_frac: match (value(&cs.null_count), rows) {
            (Some(n), Some(r)) if r > 0.0 => n as f64 / r,
            _ => 0.0,
        },
    }
}

fn strip_cast(e: &Arc<dyn PhysicalExpr>) -> &Arc<dyn PhysicalExpr> {
    if let Some(c) = e.downcast_ref::<CastExpr>() {
        return strip_cast(c.expr());
    }
    if let Some(c) = e.downcast_ref::<TryCastExpr>() {
        return strip_cast(c.expr());
    }
    e
}

/// The column under casts, with its statistics.
fn column(e: &Arc<dyn PhysicalExpr>, stats: &Statistics) -> Option<ColStat> {
    let c = strip_cast(e).downcast_ref::<Column>()?;
    let cs = stats.column_statistics.get(c.index())?;
    Some(col_of(cs, value(&stats.num_rows).map(|r| r as f64)))
}

fn literal(e: &Arc<dyn PhysicalExpr>) -> Option<&ScalarValue> {
    strip_cast(e).downcast_ref::<Literal>().map(|l| l.value())
}

#[recursive::recursive]
fn sel(e: &Arc<dyn PhysicalExpr>, stats: &Statistics) -> f64 {
    const DEFAULT: f64 = 0.2;
    if let Some(b) = e.downcast_ref::<BinaryExpr>() {
        let (l, r) = (b.left(), b.right());
        match b.op() {
            Operator::And => return sel(l, stats) * sel(r, stats),
            Operator::Or => {
                let (x, y) = (sel(l, stats), sel(r, stats));
                return x + y - x * y;
            }
            _ => {}
        }
        let (c, v, op) = match (column(l, stats), literal(r), column(r, stats), literal(l)) {
            (Some(c), Some(v), _, _) => (c, v, *b.op()),
            (_, _, Some(c), Some(v)) => match b.op().swap() {
                Some(o) => (c, v, o),
                None => return DEFAULT,
            },
            (Some(x), None, Some(y), None) if *b.op() == Operator::Eq => {
                return 1.0 / x.ndv.unwrap_or(10.0).max(y.ndv.unwrap_or(10.0)).max(1.0);
            }
            _ => return DEFAULT,
        };
        let lt = || below(&c, v).unwrap_or(1.0 / 3.0);
        return match op {
            Operator::Eq => eq_sel(&c),
            Operator::NotEq => 1.0 - eq_sel(&c),
            Operator::Lt | Operator::LtEq => lt(),
            Operator::Gt | Operator::GtEq => 1.0 - lt(),
            _ => DEFAULT,
        };
    }
    if let Some(n) = e.downcast_ref::<NotExpr>() {
        return 1.0 - sel(n.arg(), stats);
    }
    if let Some(i) = e.downcast_ref::<InListExpr>() {
        let s = match column(i.expr(), stats) {
            Some(c) => (i.list().len() as f64 * eq_sel(&c)).min(1.0),
            None => (i.list().len() as f64 * 0.1).min(1.0),
        };
        return if i.negated() { 1.0 - s } else { s };
    }
    if let Some(l) = e.downcast_ref::<LikeExpr>() {
        return if l.negated() { 0.9 } else { 0.1 };
    }
    if let Some(n) = e.downcast_ref::<IsNullExpr>() {
        return column(n.arg(), stats).map_or(0.1, |c| c.null_frac);
    }
    if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
        return column(n.arg(), stats).map_or(0.9, |c| 1.0 - c.null_frac);
    }
    if let Some(ScalarValue::Boolean(Some(b))) = literal(e) {
        return if *b { 1.0 } else { 0.0 };
    }
    DEFAULT
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::{col, in_list, lit};

    fn stats() -> (Schema, Statistics) {
        let schema = Schema::new(vec![Field::new("brand", DataType::Utf8, false), Field::new("size", DataType::Int32, false)]);
        let mut st = Statistics::new_unknown(&schema);
        st.num_rows = Precision::Exact(1000);
        st.column_statistics[0].distinct_count = Precision::Inexact(25);
        st.column_statistics[0].null_count = Precision::Exact(0);
        st.column_statistics[1].distinct_count = Precision::Inexact(50);
        st.column_statistics[1].min_value = Precision::Exact(ScalarValue::Int32(Some(1)));
        st.column_statistics[1].max_value = Precision::Exact(ScalarValue::Int32(Some(51)));
        (schema, st)
    }

    #[test]
    fn estimates_from_column_statistics() {
        let (schema, st) = stats();
        let brand = col("brand", &schema).unwrap();
        let size = col("size", &schema).unwrap();
        let eq: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(brand.clone(), Operator::Eq, lit("Brand#23")));
        assert!((selectivity(&eq, &st) - 0.04).abs() < 1e-12);
        let lt: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(size.clone(), Operator::Lt, lit(11i32)));
        assert!((selectivity(&lt, &st) - 0.2).abs() < 1e-12);
        let both: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(eq.clone(), Operator::And, lt.clone()));
        assert!((selectivity(&both, &st) - 0.008).abs() < 1e-12);
        let either: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(eq.clone(), Operator::Or, lt));
        assert!((selectivity(&either, &st) - (0.04 + 0.2 - 0.008)).abs() < 1e-12);
        let list = in_list(size, vec![lit(1i32), lit(2i32), lit(3i32)], &false, &schema).unwrap();
        assert!((selectivity(&list, &st) - 0.06).abs() < 1e-12);
        let not: Arc<dyn PhysicalExpr> = Arc::new(NotExpr::new(eq));
        assert!((selectivity(&not, &st) - 0.96).abs() < 1e-12);
        assert_eq!(percent(0.008), 1);
        assert_eq!(percent(0.06), 6);
        assert_eq!(percent(1.5), 100);
    }
}
