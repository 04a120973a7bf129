//! Aggregate functions Ridgeline adds.
pub mod percentile;
pub mod quantile;

use crate::config::RidgelineOptions;
use datafusion::logical_expr::function::AggregateFunctionSimplification;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{expr::AggregateFunction, AggregateUDF, Expr};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// The GPU mode a statement is planned under: the session's `ridgeline.gpu`, or
/// `registered` (the mode the function was made for) in a session without
/// Ridgeline's settings.
fn planning_mode(info: &SimplifyContext, registered: GpuMode) -> GpuMode {
    info.config_options().extensions.get::<RidgelineOptions>().and_then(|o| o.mode().ok()).unwrap_or(registered)
}

/// The `simplify` hook of the quantile functions: when the statement is planned
/// under another GPU mode than the instance was made for (`SET ridgeline.gpu`
/// after the session was built), the call is swapped for `make(mode)`, so every
/// statement's quantiles run where its mode says, like the other operators.
pub(crate) fn follow_session_mode(
    registered: GpuMode,
    make: impl Fn(GpuMode) -> AggregateUDF + 'static,
) -> Option<AggregateFunctionSimplification> {
    Some(Box::new(move |mut af: AggregateFunction, info: &SimplifyContext| {
        let mode = planning_mode(info, registered);
        if mode != registered {
            af.func = Arc::new(make(mode));
        }
        Ok(Expr::AggregateFunction(af))
    }))
}

#[cfg(test)]
mod tests {
    use crate::{GpuMode, Ridgeline};
    use datafusion::common::tree_node::TreeNode;
    use datafusion::logical_expr::{Expr, LogicalPlan};

    /// The modes of the quantile calls in an optimized plan.
    fn modes(plan: &LogicalPlan) -> Vec<(String, GpuMode)> {
        let mut out = Vec::new();
        plan.apply(|p| {
            if let LogicalPlan::Aggregate(a) = p {
                for e in &a.aggr_expr {
                    let e = match e {
                        Expr::Alias(al) => al.expr.as_ref(),
                        e => e,
                    };
                    if let Expr::AggregateFunction(af) = e {
                        let inner = af.func.inner();
                        let mode = inner
                            .downcast_ref::<super::quantile::Quantile>()
                            .map(|q| q.mode())
                            .or_else(|| inner.downcast_ref::<super::percentile::Percentile>().map(|q| q.mode()));
                        if let Some(m) = mode {
                            out.push((af.func.name().to_string(), m));
                        }
                    }
                }
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        out
    }

    #[tokio::test]
    async fn quantiles_follow_set_gpu() {
        let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        rl.sql("CREATE TABLE t AS VALUES (1.0), (2.0), (5.0)").await.unwrap().collect().await.unwrap();
        let q = "SELECT median(column1), percentile_disc(column1, 0.5), quantile_cont(column1, 0.5), approx_quantile(column1, 0.5) FROM t";
        for mode in [GpuMode::Off, GpuMode::Auto, GpuMode::Off] {
            rl.sql(&format!("SET ridgeline.gpu = '{mode}'")).await.unwrap().collect().await.unwrap();
            let df = rl.sql(q).await.unwrap();
            let plan = df.clone().into_optimized_plan().unwrap();
            let got = modes(&plan);
            assert_eq!(got.len(), 4, "{got:?}\n{plan}");
            assert!(got.iter().all(|(_, m)| *m == mode), "under {mode}: {got:?}");
            // The answers do not depend on the mode.
            let b = df.collect().await.unwrap();
            assert_eq!(arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string().matches("2.0").count(), 4);
        }
    }
}
