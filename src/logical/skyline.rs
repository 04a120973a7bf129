//! The logical `Skyline` node, the marker function that carries `SKYLINE OF`
//! dimensions through DataFusion's SQL planner, and the DataFrame API.
//!
//! Semantics (Börzsönyi, Kossmann, Stocker, ICDE 2001): row p dominates row q if p
//! is no worse than q in every MIN/MAX dimension, strictly better in at least one,
//! and equal to q in every DIFF dimension (so DIFF gives one skyline per group).
//! The skyline is every row no other row dominates; rows equal on every dimension
//! all stay, and `DISTINCT` keeps one of each such set. Values compare in Arrow's
//! sort order (floats: -0.0 before +0.0, NaN largest). NULL in a MIN/MAX dimension
//! is worse than every value (so dominance stays transitive); in DIFF dimensions
//! NULLs form one group, as in GROUP BY.
use crate::sql_ext::skyline::{error_at, Rewritten, SkylineDirection, MARKER};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchemaRef, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::{ScalarFunction, Sort};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, Extension, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, UserDefinedLogicalNodeCore, Volatility,
};
use datafusion::prelude::DataFrame;
use std::sync::Arc;

/// One skyline dimension: an expression and its direction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd)]
pub struct SkylineDim {
    pub expr: Expr,
    pub direction: SkylineDirection,
}

impl SkylineDim {
    /// Smaller is better.
    pub fn min(expr: Expr) -> Self {
        SkylineDim { expr, direction: SkylineDirection::Min }
    }
    /// Larger is better.
    pub fn max(expr: Expr) -> Self {
        SkylineDim { expr, direction: SkylineDirection::Max }
    }
    /// Rows are compared only with rows of equal value.
    pub fn diff(expr: Expr) -> Self {
        SkylineDim { expr, direction: SkylineDirection::Diff }
    }
}

/// The skyline of its input (same schema; a subset of the rows, in input order).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd)]
pub struct SkylineNode {
    pub input: LogicalPlan,
    pub dims: Vec<SkylineDim>,
    pub distinct: bool,
}

/// Whether values of `dt` have an order a skyline can use.
pub fn orderable(dt: &DataType) -> bool {
    use DataType::*;
    match dt {
        Dictionary(_, v) => orderable(v),
        RunEndEncoded(_, v) => orderable(v.data_type()),
        List(_) | LargeList(_) | FixedSizeList(..) | ListView(_) | LargeListView(_) | Struct(_) | Map(..) | Union(..) => {
            false
        }
        _ => true,
    }
}

impl SkylineNode {
    /// Checks the dimensions (at least one; each of a type with an order).
    pub fn try_new(input: LogicalPlan, dims: Vec<SkylineDim>, distinct: bool) -> Result<Self> {
        if dims.is_empty() {
            return Err(DataFusionError::Plan("SKYLINE OF needs at least one dimension".into()));
        }
        for d in &dims {
            let dt = d.expr.get_type(input.schema())?;
            if !orderable(&dt) {
                return Err(DataFusionError::Plan(format!(
                    "SKYLINE OF: dimension {} has type {dt}, which has no order",
                    d.expr
                )));
            }
        }
        Ok(SkylineNode { input, dims, distinct })
    }
    /// The node as a plan.
    pub fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension { node: Arc::new(self) })
    }
}

impl UserDefinedLogicalNodeCore for SkylineNode {
    fn name(&self) -> &str {
        "Skyline"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }
    fn expressions(&self) -> Vec<Expr> {
        self.dims.iter().map(|d| d.expr.clone()).collect()
    }
    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| format!("{} {}", d.expr, d.direction)).collect();
        write!(f, "Skyline: {}dims=[{}]", if self.distinct { "DISTINCT " } else { "" }, dims.join(", "))
    }
    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, mut inputs: Vec<LogicalPlan>) -> Result<Self> {
        let dims = exprs
            .into_iter()
            .zip(&self.dims)
            .map(|(expr, d)| SkylineDim { expr, direction: d.direction })
            .collect();
        Ok(SkylineNode { input: inputs.swap_remove(0), dims, distinct: self.distinct })
    }
}

/// The marker `__ridgeline_skyline(k, j, expr)`: stands for dimension `j` of clause
/// `k` in the ORDER BY keys the rewrite produces; replaced before optimization.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SkylineMarker {
    signature: Signature,
}

impl Default for SkylineMarker {
    fn default() -> Self {
        SkylineMarker { signature: Signature::any(3, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for SkylineMarker {
    fn name(&self) -> &str {
        MARKER
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args.get(2).cloned().unwrap_or(DataType::Null))
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Plan("SKYLINE OF is not supported in this position".into()))
    }
}

/// The marker function, for registration in a session.
pub fn skyline_marker_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(SkylineMarker::default())
}

/// (clause, dimension, expression) of a marker call.
fn as_marker(e: &Expr) -> Option<(usize, usize, &Expr)> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = e else { return None };
    if func.name() != MARKER || args.len() != 3 {
        return None;
    }
    let idx = |a: &Expr| match a {
        Expr::Literal(v, _) => match v {
            ScalarValue::Int64(Some(x)) => Some(*x as usize),
            ScalarValue::UInt64(Some(x)) => Some(*x as usize),
            ScalarValue::Int32(Some(x)) => Some(*x as usize),
            _ => None,
        },
        _ => None,
    };
    Some((idx(&args[0])?, idx(&args[1])?, &args[2]))
}

#[recursive::recursive]
fn contains_marker(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|p| {
        for e in p.expressions() {
            let _ = e.apply(|x| {
                if as_marker(x).is_some() {
                    found = true;
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            });
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

/// Replaces every Sort whose leading keys are skyline markers by a Skyline node
/// (and a Sort of the remaining keys above it).
pub fn replace_skyline_markers(plan: LogicalPlan, rw: &Rewritten) -> Result<LogicalPlan> {
    let out = plan
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::Sort(sort) = &node else { return Ok(Transformed::no(node)) };
            let lead: Vec<(usize, usize, &Expr)> = sort.expr.iter().map_while(|s| as_marker(&s.expr)).collect();
            let Some(&(k, _, _)) = lead.first() else { return Ok(Transformed::no(node)) };
            let clause = rw
                .clauses
                .get(k)
                .ok_or_else(|| DataFusionError::Internal(format!("skyline clause {k} not found")))?;
            if lead.len() != clause.dims.len() || lead.iter().enumerate().any(|(j, m)| m.0 != k || m.1 != j) {
                return Err(error_at("the clause could not be planned here", clause.line, clause.column));
            }
            let mut dims = Vec::new();
            for (j, m) in lead.iter().enumerate() {
                let spec = &clause.dims[j];
                let dt = m.2.get_type(sort.input.schema())?;
                if !orderable(&dt) {
                    return Err(error_at(
                        format!("dimension '{}' has type {dt}, which has no order", spec.text),
                        spec.line,
                        spec.column,
                    ));
                }
                dims.push(SkylineDim { expr: m.2.clone(), direction: spec.direction });
            }
            let rest: Vec<Sort> = sort.expr[lead.len()..].to_vec();
            let sky = SkylineNode::try_new(sort.input.as_ref().clone(), dims, clause.distinct)?.into_plan();
            let plan = if rest.is_empty() {
                match sort.fetch {
                    Some(f) => datafusion::logical_expr::LogicalPlanBuilder::from(sky).limit(0, Some(f))?.build()?,
                    None => sky,
                }
            } else {
                datafusion::logical_expr::LogicalPlanBuilder::from(sky).sort_with_limit(rest, sort.fetch)?.build()?
            };
            Ok(Transformed::yes(plan))
        })?
        .data;
    if contains_marker(&out) {
        let c = &rw.clauses[0];
        return Err(error_at("the clause is not supported in this position", c.line, c.column));
    }
    Ok(out)
}

/// The skyline as a DataFrame operation.
pub trait SkylineDataFrameExt {
    /// The rows of `self` that no other row dominates in `dims` (see the module
    /// docs); `distinct` keeps one row of each set equal on every dimension.
    fn skyline(self, dims: Vec<SkylineDim>, distinct: bool) -> Result<DataFrame>;
}

impl SkylineDataFrameExt for DataFrame {
    fn skyline(self, dims: Vec<SkylineDim>, distinct: bool) -> Result<DataFrame> {
        let (state, plan) = self.into_parts();
        let plan = SkylineNode::try_new(plan, dims, distinct)?.into_plan();
        Ok(DataFrame::new(state, plan))
    }
}
