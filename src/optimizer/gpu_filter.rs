//! Replaces `FilterExec` by [`GpuFilterExec`] where the predicate compiles to WGSL
//! and the GPU pays for itself, and fuses a `ProjectionExec` directly above a GPU
//! filter into it when its expressions compile.
//!
//! A predicate is split into its conjuncts: the ones that compile run on the GPU,
//! the rest stay in a CPU `FilterExec` above it (string predicates, for example).
//! Where nothing runs on the GPU, a [`CpuNoteExec`] above the filter says why in
//! EXPLAIN.
//!
//! The cost model (mode `auto`): a filter over a resident table runs on the GPU
//! when downloading the surviving rows (estimated by DataFusion from the table's
//! exact column statistics) costs less than filtering the table's host copy on
//! the CPU; a filter over another GPU operator always runs there. A filter over host data pays the upload of
//! its input, so it moves only when that is cheaper than filtering on the CPU's
//! threads, estimated from rates measured on the H100 machine (BENCHMARKS.md) and
//! only from `ridgeline.min_gpu_rows` rows on. On a CPU adapter (lavapipe) no filter
//! moves in mode `auto`, resident or not.
//! Mode `on` moves every filter that compiles.
use crate::config::{rule_device, RidgelineOptions};
use crate::exec::gpu_filter::OutCol;
use crate::exec::{as_gpu, CpuNoteExec, GpuFilterExec, GpuScanExec};
use crate::gpu_expr::{Caps, RowProgram};
use super::string_codes::{self, Coder};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{conjunction, split_conjunction, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::Partitioning;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, PlanProperties};
use ridgeline_operators::compact::CompactAlgo;
use ridgeline_operators::{GpuContext, GpuMode};
use std::sync::Arc;

use crate::tuning::filter::UPLOAD_GBPS;
use crate::tuning::filter::DOWNLOAD_GBPS;
use crate::tuning::filter::GPU_FIXED_NS;
use crate::tuning::filter::CPU_NS_PER_ROW_CONJUNCT;
use crate::tuning::filter::CPU_NS_PER_ROW_STRING_CONJUNCT;
use crate::tuning::filter::CPU_NS_PER_ROW_COLUMN;
use crate::tuning::filter::DEFAULT_SELECTIVITY;

/// The GPU filter rule.
#[derive(Debug, Default)]
pub struct GpuFilterRule;

impl PhysicalOptimizerRule for GpuFilterRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((opts, mode, dev)) = rule_device(config)? else { return Ok(plan) };
        let env = Env { mode, caps: Caps::of(&dev), dev, opts, threads: cpu_threads(config.execution.target_partitions) };
        Ok(plan
            .transform_up(|node| {
                if let Some(f) = node.downcast_ref::<FilterExec>() {
                    return super::span("filter.closure", || env.filter(&node, f));
                }
                if let Some(p) = node.downcast_ref::<ProjectionExec>() {
                    if let Some(g) = p.input().downcast_ref::<GpuFilterExec>() {
                        return super::span("filter.fuse", || env.fuse(&node, p, g, p.properties().clone()));
                    }
                    // A round-robin repartition between them: the projection is
                    // row-wise, so it moves below the repartition into the filter.
                    if let Some(r) = p.input().downcast_ref::<RepartitionExec>() {
                        if let (Partitioning::RoundRobinBatch(_), Some(g)) =
                            (r.partitioning(), r.input().downcast_ref::<GpuFilterExec>())
                        {
                            let props = Arc::new(PlanProperties::new(
                                EquivalenceProperties::new(p.schema()),
                                g.properties().output_partitioning().clone(),
                                EmissionType::Incremental,
                                Boundedness::Bounded,
                            ));
                            let fused = env.fuse(&node, p, g, props)?;
                            if fused.data.downcast_ref::<GpuFilterExec>().is_some() {
                                let rep = RepartitionExec::try_new(fused.data, r.partitioning().clone())?;
                                return Ok(Transformed::yes(Arc::new(rep)));
                            }
                            return Ok(fused);
                        }
                    }
                }
                Ok(Transformed::no(node))
            })?
            .data)
    }
    fn name(&self) -> &str {
        "ridgeline_gpu_filter"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

struct Env {
    mode: GpuMode,
    caps: Caps,
    dev: Arc<GpuContext>,
    opts: RidgelineOptions,
    threads: usize,
}

/// Bytes a row of `schema` moves between host and device; strings (which stay on
/// the host, filtered beside the transfer) count as 16.
fn row_width(schema: &arrow::datatypes::Schema) -> usize {
    schema.fields().iter().map(|f| crate::gpu_batch::Storage::of(f.data_type()).map_or(16, |s| s.elem_size())).sum()
}

use crate::tuning::filter::GPU_MARGIN;

/// `Ok` when the GPU estimate is lower by [`GPU_MARGIN`], else the reason with both
/// estimates.
fn cheaper(gpu_ns: f64, cpu_ns: f64, what: &str, suffix: &str) -> std::result::Result<(), String> {
    if gpu_ns * GPU_MARGIN < cpu_ns {
        Ok(())
    } else {
        Err(format!("{what} (estimated {:.1} ms vs {:.1} ms, and the GPU must be {GPU_MARGIN}x cheaper{suffix})", gpu_ns / 1e6, cpu_ns / 1e6))
    }
}

/// The columns a filter that runs whole on the GPU hands on: its projection's, or
/// all of the input's.
fn output_columns(f: &FilterExec) -> Vec<OutCol> {
    match f.projection() {
        Some(p) => p.iter().map(|&i| OutCol::Input(i)).collect(),
        None => (0..f.input().schema().fields().len()).map(OutCol::Input).collect(),
    }
}

fn note(node: &Arc<dyn ExecutionPlan>, why: String) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    Ok(Transformed::yes(Arc::new(CpuNoteExec::new(node.clone(), why))))
}

/// CPU cost per row of `conjuncts` (ns on one core): string comparisons cost more.
fn conjunct_ns(conjuncts: &[Arc<dyn PhysicalExpr>], schema: &arrow::datatypes::Schema) -> f64 {
    conjuncts
        .iter()
        .map(|c| {
            let strings = datafusion::physical_expr::utils::collect_columns(c)
                .iter()
                .any(|col| schema.fields().get(col.index()).is_some_and(|f| string_codes::is_string(f.data_type())));
            if strings { CPU_NS_PER_ROW_STRING_CONJUNCT } else { CPU_NS_PER_ROW_CONJUNCT }
        })
        .sum()
}

/// The threads a CPU filter runs on: one per partition, but no more than the
/// machine's cores (`target_partitions` above the core count splits the work
/// finer without adding threads).
fn cpu_threads(target_partitions: usize) -> usize {
    target_partitions.clamp(1, cores())
}

/// The cores this process may use, read once: `available_parallelism` reads the
/// cgroup files on every call (55-60 us a call on the 2-core machine, a third of
/// the filter rule's planning time per query).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()).max(1))
}

impl Env {
    /// Whether moving this filter pays, or why not.
    fn worth_it(&self, f: &FilterExec, conjuncts: f64, split: Option<(&Arc<dyn PhysicalExpr>, f64)>) -> std::result::Result<(), String> {
        let input = f.input();
        if self.mode == GpuMode::On {
            return Ok(());
        }
        if input.downcast_ref::<GpuScanExec>().is_some() {
            return self.resident_worth_it(f, conjuncts, split);
        }
        if as_gpu(input).is_some() {
            return Ok(());
        }
        let stats = crate::exec::plan_statistics(input.as_ref()).map_err(|e| e.to_string())?;
        let Some(rows) = stats.num_rows.get_value().copied() else {
            return Err("the input's row count is unknown".into());
        };
        if rows < self.opts.min_gpu_rows {
            return Err(format!("about {rows} input rows, fewer than ridgeline.min_gpu_rows = {}", self.opts.min_gpu_rows));
        }
        let schema = input.schema();
        let row_bytes = row_width(&schema);
        let out_cols = f.projection().as_ref().map_or(schema.fields().len(), |p| p.len()) as f64;
        let rows_f = rows as f64;
        let gpu_ns = rows_f * row_bytes as f64 / UPLOAD_GBPS
            + rows_f * DEFAULT_SELECTIVITY * row_bytes as f64 / DOWNLOAD_GBPS
            + GPU_FIXED_NS;
        let cpu_ns = self.cpu_filter_ns(rows_f, conjuncts, out_cols, DEFAULT_SELECTIVITY);
        cheaper(gpu_ns, cpu_ns, "uploading the input costs more than filtering on the CPU", "; data made resident stays on the GPU")
    }

    /// A filter over a resident table: the GPU filters without moving the input but
    /// downloads the surviving rows; the CPU filters the table's host copy.
    ///
    /// `split`: the part of the predicate that compiles and how many conjuncts stay
    /// on the CPU; then the GPU part's survivors are downloaded with every input
    /// column and the rest of the predicate runs over them on the CPU.
    fn resident_worth_it(
        &self,
        f: &FilterExec,
        conjuncts: f64,
        split: Option<(&Arc<dyn PhysicalExpr>, f64)>,
    ) -> std::result::Result<(), String> {
        let in_stats = crate::exec::plan_statistics(f.input().as_ref()).map_err(|e| e.to_string())?;
        let Some(rows) = in_stats.num_rows.get_value().copied() else { return Ok(()) };
        let estimate = |fe: &FilterExec| {
            crate::exec::plan_statistics(fe)
                .ok()
                .and_then(|s| s.num_rows.get_value().copied())
                .unwrap_or((rows as f64 * DEFAULT_SELECTIVITY) as usize)
                .min(rows)
        };
        let out_rows = estimate(f);
        let sel = out_rows as f64 / rows.max(1) as f64;
        let out_schema = f.schema();
        let (dl_rows, dl_bytes, rest_ns) = match split {
            None => (out_rows, row_width(&out_schema), 0.0),
            Some((gpu_pred, cpu_conjuncts)) => {
                let part = FilterExec::try_new(gpu_pred.clone(), f.input().clone()).map(|fe| estimate(&fe)).unwrap_or(rows);
                let rest = self.cpu_filter_ns(part as f64, cpu_conjuncts, out_schema.fields().len() as f64, out_rows as f64 / part.max(1) as f64);
                (part, row_width(&f.input().schema()), rest)
            }
        };
        let parts = f.input().output_partitioning().partition_count().max(1) as f64;
        let gpu_ns = dl_rows as f64 * dl_bytes as f64 / DOWNLOAD_GBPS + GPU_FIXED_NS * parts + rest_ns;
        let out_rows = dl_rows;
        let cpu_ns = self.cpu_filter_ns(rows as f64, conjuncts, out_schema.fields().len() as f64, sel);
        let what = format!("downloading about {out_rows} of {rows} rows costs more than filtering the host copy on the CPU");
        cheaper(gpu_ns, cpu_ns, &what, "")
    }

    /// Estimated CPU time of a filter: every conjunct over every row (`conjuncts`:
    /// their cost per row in ns, see [`conjunct_ns`]), then the gather of the output
    /// columns over the selected rows, on all threads.
    fn cpu_filter_ns(&self, rows: f64, conjuncts: f64, out_cols: f64, sel: f64) -> f64 {
        rows * (conjuncts + CPU_NS_PER_ROW_COLUMN * out_cols * sel) / self.threads as f64
    }

    fn algo(&self, input: &Arc<dyn ExecutionPlan>) -> Result<CompactAlgo> {
        // Jumping Jack does not keep the order: only where there is none to keep.
        if input.output_ordering().is_some() {
            return Ok(CompactAlgo::Stable);
        }
        self.opts.compaction()
    }

    fn filter(&self, node: &Arc<dyn ExecutionPlan>, f: &FilterExec) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        if f.fetch().is_some() {
            return note(node, "a filter with a row limit (fetch) stays on the CPU".into());
        }
        let input = f.input();
        let in_schema = input.schema();
        // A CPU adapter (lavapipe) filters slower than DataFusion on the same cores,
        // resident table or not: on the 2-core machine, TPC-H SF 1 in mode auto took
        // 2.1x longer with resident filters on lavapipe (geomean 434 vs 208 ms).
        // Said before anything is compiled.
        if self.mode != GpuMode::On && self.dev.is_cpu_adapter() {
            return note(node, "the adapter is a CPU (DataFusion's filter on the same cores is faster)".into());
        }
        // The cost check first, as if the whole predicate compiled: compiling (and
        // coding strings) is most of this rule's planning time, and a filter the
        // GPU cannot win as a whole cannot win split either (the split downloads
        // at least as many rows, of every input column, and adds the CPU's part).
        let all_conjuncts = split_conjunction(f.predicate()).into_iter().cloned().collect::<Vec<_>>();
        if let Err(why) = super::span("filter.worth_it", || self.worth_it(f, conjunct_ns(&all_conjuncts, &in_schema), None)) {
            return note(node, why);
        }
        // The common case first: the whole predicate compiles as written (one
        // compilation instead of one per conjunct and one for their conjunction).
        if let Ok(program) = super::span("filter.compile", || RowProgram::try_new(in_schema.clone(), Some(f.predicate().clone()), vec![], self.caps)) {
            let g = GpuFilterExec::new(input.clone(), program, output_columns(f), f.schema(), self.algo(input)?, f.properties().clone());
            return Ok(Transformed::yes(Arc::new(g)));
        }
        // Over a resident scan, string tests can compile as tests of dictionary codes.
        let mut coder = super::span("filter.coder_new", || input.downcast_ref::<GpuScanExec>().map(|s| Coder::new(&self.dev, s)));
        // The conjuncts that compile (as compiled, and as written), and the rest.
        let mut gpu: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut gpu_src: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut cpu: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut reasons: Vec<String> = Vec::new();
        for c in split_conjunction(f.predicate()) {
            let why = match super::span("filter.compile", || RowProgram::try_new(in_schema.clone(), Some(c.clone()), vec![], self.caps)) {
                Ok(_) => {
                    gpu.push(c.clone());
                    gpu_src.push(c.clone());
                    continue;
                }
                Err(why) => why,
            };
            if let Some(k) = coder.as_mut() {
                let before = k.codes.len();
                match k.rewrite(c).and_then(|r| super::span("filter.compile", || RowProgram::try_new(k.schema(), Some(r.clone()), vec![], self.caps)).map(|_| r)) {
                    Ok(r) => {
                        gpu.push(r);
                        gpu_src.push(c.clone());
                        continue;
                    }
                    Err(w) => {
                        k.codes.truncate(before);
                        reasons.push(format!("{c}: {why}; by dictionary codes: {w}"));
                    }
                }
            } else {
                reasons.push(format!("{c}: {why}"));
            }
            cpu.push(c.clone());
        }
        if gpu.is_empty() {
            return note(node, format!("the predicate does not compile to WGSL ({})", reasons.join("; ")));
        }
        let codes = coder.map(|k| k.codes).unwrap_or_default();
        let prog_schema = string_codes::augmented_schema(&in_schema, &codes);
        let predicate = conjunction(gpu.clone());
        let src_predicate = conjunction(gpu_src.clone());
        let cpu_ns = conjunct_ns(&cpu, &in_schema);
        let split = (!cpu.is_empty()).then_some((&src_predicate, cpu_ns));
        if let Err(why) = super::span("filter.worth_it", || self.worth_it(f, conjunct_ns(&gpu_src, &in_schema) + cpu_ns, split)) {
            return note(node, why);
        }
        let program = match super::span("filter.compile", || RowProgram::try_new(prog_schema, Some(predicate), vec![], self.caps)) {
            Ok(p) => p,
            Err(why) => return note(node, why),
        };
        let src_predicate = (!codes.is_empty()).then_some(src_predicate);
        let algo = self.algo(input)?;
        if cpu.is_empty() {
            let g = GpuFilterExec::new(input.clone(), program, output_columns(f), f.schema(), algo, f.properties().clone()).with_codes(codes, src_predicate);
            return Ok(Transformed::yes(Arc::new(g)));
        }
        // The conjuncts that compile run first on the GPU; the rest above, on the CPU.
        let props = Arc::new(PlanProperties::new(
            input.equivalence_properties().clone(),
            input.output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let columns = (0..in_schema.fields().len()).map(OutCol::Input).collect();
        let g: Arc<dyn ExecutionPlan> =
            Arc::new(GpuFilterExec::new(input.clone(), program, columns, in_schema, algo, props).with_codes(codes, src_predicate));
        let rest = datafusion::physical_plan::filter::FilterExecBuilder::new(conjunction(cpu), g)
            .apply_projection(f.projection().as_ref().map(|p| p.to_vec()))?
            .build()?;
        let rest: Arc<dyn ExecutionPlan> = Arc::new(rest);
        note(&rest, format!("conjuncts that do not compile to WGSL ({})", reasons.join("; ")))
    }

    /// Fuses `ProjectionExec` `p` into the GPU filter `g` below it.
    fn fuse(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        p: &ProjectionExec,
        g: &GpuFilterExec,
        props: Arc<PlanProperties>,
    ) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        let program = g.program();
        let in_schema = program.schema().clone();
        let mut outputs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut columns = Vec::new();
        for pe in p.expr() {
            // Rewrite the expression over the filter's input.
            let e = pe
                .expr
                .clone()
                .transform_up(|x| {
                    if let Some(c) = x.downcast_ref::<Column>() {
                        return Ok(Transformed::yes(match g.columns()[c.index()] {
                            OutCol::Input(i) => Arc::new(Column::new(in_schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>,
                            OutCol::Computed(j) => program.outputs()[j].clone(),
                        }));
                    }
                    Ok(Transformed::no(x))
                })?
                .data;
            match e.downcast_ref::<Column>() {
                Some(c) => columns.push(OutCol::Input(c.index())),
                None => {
                    columns.push(OutCol::Computed(outputs.len()));
                    outputs.push(e);
                }
            }
        }
        let fused = match super::span("filter.compile", || RowProgram::try_new(in_schema, program.predicate().cloned(), outputs, self.caps)) {
            Ok(f) => f,
            Err(why) => return note(node, format!("projection not fused into the GPU filter: {why}")),
        };
        let f = GpuFilterExec::new(g.input().clone(), fused, columns, p.schema(), g.algo(), props).with_codes(g.codes().to_vec(), g.input_predicate().cloned());
        Ok(Transformed::yes(Arc::new(f)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_threads_are_capped_by_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(super::cpu_threads(0), 1);
        assert_eq!(super::cpu_threads(1), 1);
        assert_eq!(super::cpu_threads(cores), cores);
        assert_eq!(super::cpu_threads(4 * cores), cores);
    }
}
