//! `CpuNoteExec`: a pass-through node that says in EXPLAIN why the operator below
//! it stays on the CPU (a predicate that does not compile to WGSL, an input too
//! small to pay for the transfer). It changes nothing else.
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use std::sync::Arc;

/// Why the child stays on the CPU.
#[derive(Debug)]
pub struct CpuNoteExec {
    input: Arc<dyn ExecutionPlan>,
    note: String,
}

impl CpuNoteExec {
    /// Annotates `input`.
    pub fn new(input: Arc<dyn ExecutionPlan>, note: String) -> Self {
        CpuNoteExec { input, note }
    }
    /// The note.
    pub fn note(&self) -> &str {
        &self.note
    }
}

impl DisplayAs for CpuNoteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "CpuNote: {} stays on the CPU: {}", self.input.name(), self.note)
    }
}

impl ExecutionPlan for CpuNoteExec {
    fn name(&self) -> &str {
        "CpuNoteExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        super::no_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CpuNoteExec::new(children.swap_remove(0), self.note.clone())))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, ctx)
    }
    // The input's statistics, so rules that run after the note see through it.
    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<datafusion::physical_plan::ChildStats> {
        vec![datafusion::physical_plan::ChildStats::At(partition)]
    }
    fn statistics_from_inputs(&self, input_stats: &[Arc<datafusion::common::Statistics>], _args: &datafusion::physical_plan::StatisticsArgs) -> Result<Arc<datafusion::common::Statistics>> {
        Ok(input_stats[0].clone())
    }
}
