//! Ridgeline's query planner: DataFusion's physical planner with extension
//! planners for Ridgeline's logical nodes (the skyline).
use crate::config::RidgelineOptions;
use crate::exec::skyline::{placement_for, PhysicalSkylineDim, SkylinePlacement, SkylineExec, SkylineStage};
use crate::logical::SkylineNode;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use std::sync::Arc;

/// The query planner installed by `with_ridgeline`.
#[derive(Debug, Default)]
pub struct RidgelineQueryPlanner;

#[async_trait]
impl QueryPlanner for RidgelineQueryPlanner {
    async fn create_physical_plan(&self, logical_plan: &LogicalPlan, session: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(SkylinePlanner)])
            .create_physical_plan(logical_plan, session)
            .await
    }
}

/// Plans [`SkylineNode`] as [`SkylineExec`]: one stage over all rows where the
/// GPU may run it (one device call over everything), local skylines per
/// partition under a final one on the CPU.
#[derive(Debug)]
pub struct SkylinePlanner;

#[async_trait]
impl ExtensionPlanner for SkylinePlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(sky) = node.as_any().downcast_ref::<SkylineNode>() else { return Ok(None) };
        let input_schema = logical_inputs[0].schema();
        let dims = sky
            .dims
            .iter()
            .map(|d| {
                Ok(PhysicalSkylineDim {
                    expr: planner.create_physical_expr(&d.expr, input_schema, session, planning_ctx)?,
                    direction: d.direction,
                    name: match &d.expr {
                        datafusion::logical_expr::Expr::Column(c) => c.name.clone(),
                        e => e.human_display().to_string(),
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let opts = RidgelineOptions::from_config(session.config_options());
        let placement = placement_for(&opts).map_err(|e| DataFusionError::Plan(e.to_string()))?;
        let input = physical_inputs[0].clone();
        let parts = input.output_partitioning().partition_count();
        let plan: Arc<dyn ExecutionPlan> = if parts > 1 && placement == SkylinePlacement::Cpu {
            let partial = Arc::new(SkylineExec::new(input, dims.clone(), sky.distinct, SkylineStage::Partial, placement.clone()));
            let merged = Arc::new(CoalescePartitionsExec::new(partial));
            Arc::new(SkylineExec::new(merged, dims, sky.distinct, SkylineStage::Final, placement))
        } else {
            let input: Arc<dyn ExecutionPlan> = if parts > 1 { Arc::new(CoalescePartitionsExec::new(input)) } else { input };
            Arc::new(SkylineExec::new(input, dims, sky.distinct, SkylineStage::Single, placement))
        };
        Ok(Some(plan))
    }
}
