//! Running compiled expressions over a [`GpuBatch`].
use super::{codes, render, wgsl_ty, Caps, Gen, MAX_BITMAPS_PER_KERNEL, OVERFLOW_TYPES};
use crate::gpu_batch::{gpu_err, upload_column, ColumnData, GpuBatch, GpuColumn, Storage};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::error::ArrowError;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::PhysicalExpr;
use ridgeline_operators::rowwise::{run_rowwise, RowArray, RowwiseRun};
use ridgeline_operators::{DeviceArray, GpuContext};
use std::fmt::Write as _;
use std::sync::Arc;

/// A filter predicate and output expressions over one input schema, compiled to
/// one row-wise kernel.
#[derive(Debug, Clone)]
pub struct RowProgram {
    schema: SchemaRef,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    outputs: Vec<Arc<dyn PhysicalExpr>>,
    caps: Caps,
    wide: bool,
}

/// What a kernel produced for one batch.
#[derive(Debug)]
pub struct Evaluated {
    /// The selection bitmap (rows where the predicate is true), when there is a predicate.
    pub selection: Option<DeviceArray>,
    /// One column per output expression (in a filter, written only at selected rows).
    pub outputs: Vec<GpuColumn>,
    run: Option<RowwiseRun>,
    /// Host columns uploaded for the kernel: kept while the kernel may still be
    /// unsubmitted ([`RowProgram::evaluate_into`]).
    _uploaded: Vec<GpuColumn>,
}

impl Evaluated {
    /// Fails with DataFusion's error when a row raised one (waits for the kernel).
    pub fn check_errors(&self, ctx: &GpuContext) -> Result<()> {
        let Some(run) = &self.run else { return Ok(()) };
        let code = run.error_code(ctx).map_err(gpu_err)?;
        error_for(code)
    }

    /// [`Evaluated::check_errors`] over several evaluations with one readback.
    pub fn check_errors_many(ctx: &GpuContext, evals: &[Evaluated]) -> Result<()> {
        let runs: Vec<&RowwiseRun> = evals.iter().filter_map(|e| e.run.as_ref()).collect();
        let code = RowwiseRun::error_code_many(ctx, &runs).map_err(gpu_err)?;
        error_for(code)
    }
}

/// The error a kernel raises when a wide decimal (precision above 18) leaves i64.
#[derive(Debug)]
pub struct DecimalWide;

impl std::fmt::Display for DecimalWide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a decimal of precision above 18 left the GPU's 64-bit range (the CPU's 128-bit arithmetic redoes it)")
    }
}

impl std::error::Error for DecimalWide {}

/// Whether `e` is [`DecimalWide`].
pub fn is_decimal_wide(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<DecimalWide>().is_some(),
        DataFusionError::Context(_, inner) => is_decimal_wide(inner),
        DataFusionError::Shared(inner) => is_decimal_wide(inner),
        _ => false,
    }
}

/// The DataFusion error for a kernel error code (0: none).
pub(crate) fn error_for(code: u32) -> Result<()> {
    let arrow = |e: ArrowError| Err(DataFusionError::ArrowError(Box::new(e), None));
    match code {
        0 => Ok(()),
        codes::DECIMAL_WIDE => Err(DataFusionError::External(Box::new(DecimalWide))),
        codes::DIVIDE_BY_ZERO => arrow(ArrowError::DivideByZero),
        codes::CAST_OVERFLOW => arrow(ArrowError::CastError("Cannot cast a value to the target type of CAST: out of range".into())),
        c if c >= codes::OVERFLOW_BASE && ((c - codes::OVERFLOW_BASE) as usize) < OVERFLOW_TYPES.len() => {
            let (_, what) = &OVERFLOW_TYPES[(c - codes::OVERFLOW_BASE) as usize];
            arrow(ArrowError::ArithmeticOverflow(format!("Overflow happened on: {what}")))
        }
        c => Err(DataFusionError::Internal(format!("GPU kernel raised unknown error code {c}"))),
    }
}

/// Layout of a generated kernel: the arrays to bind after the error word.
#[derive(Debug)]
enum Slot {
    /// Input column values.
    ColValues(usize),
    /// Input column validity.
    ColValidity(usize),
    /// The selection bitmap.
    Selection,
    /// Output `j`'s values (or its Boolean bitmap).
    OutValues(usize),
    /// Output `j`'s validity.
    OutValidity(usize),
}

#[derive(Debug)]
struct OutSpec {
    dt: DataType,
    storage: Storage,
    nullable: bool,
}

struct Kernel {
    source: String,
    may_error: bool,
    slots: Vec<Slot>,
    outs: Vec<OutSpec>,
}

impl RowProgram {
    /// Compiles `predicate` and `outputs` over `schema`; `Err` says why they do not
    /// compile (for EXPLAIN).
    pub fn try_new(
        schema: SchemaRef,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        outputs: Vec<Arc<dyn PhysicalExpr>>,
        caps: Caps,
    ) -> std::result::Result<RowProgram, String> {
        RowProgram { schema, predicate, outputs, caps, wide: false }.checked()
    }

    /// [`RowProgram::try_new`] with decimals of precision above 18 computed in
    /// i64, every overflow checked: a row that leaves i64 makes
    /// [`Evaluated::check_errors`] fail with [`is_decimal_wide`] (the caller redoes
    /// the work on the CPU). For operators that keep such values to themselves
    /// (aggregate arguments): such outputs have no GPU layout elsewhere.
    pub fn try_new_wide(
        schema: SchemaRef,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        outputs: Vec<Arc<dyn PhysicalExpr>>,
        caps: Caps,
    ) -> std::result::Result<RowProgram, String> {
        RowProgram { schema, predicate, outputs, caps, wide: true }.checked()
    }

    fn checked(self) -> std::result::Result<RowProgram, String> {
        // Compile once assuming every nullable column carries validity.
        let schema = self.schema.clone();
        self.kernel(&|i| schema.field(i).is_nullable())?;
        Ok(self)
    }

    /// The input schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    /// The predicate.
    pub fn predicate(&self) -> Option<&Arc<dyn PhysicalExpr>> {
        self.predicate.as_ref()
    }
    /// The output expressions.
    pub fn outputs(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.outputs
    }

    /// The WGSL for a batch whose column `i` has validity iff `validity(i)`.
    pub fn source(&self, validity: &dyn Fn(usize) -> bool) -> std::result::Result<String, String> {
        Ok(self.kernel(validity)?.source)
    }

    fn kernel(&self, validity: &dyn Fn(usize) -> bool) -> std::result::Result<Kernel, String> {
        let mut g = Gen::new(&self.schema, self.caps, validity);
        g.wide = self.wide;
        let mut code = String::new();
        let mut bitmaps: Vec<(Slot, String)> = Vec::new();
        let set_bit = |b: usize| format!("atomicOr(&wbits[{b}u * WORDS + lid / 32u], 1u << (lid & 31u));");
        if let Some(p) = &self.predicate {
            let v = g.expr(p, &mut code)?;
            if v.dt != DataType::Boolean && v.dt != DataType::Null {
                return Err(format!("predicate of type {}", v.dt));
            }
            let _ = writeln!(code, "let sel = {} && {};\nif (sel) {{ {} }}", v.n, v.v, set_bit(0));
            bitmaps.push((Slot::Selection, "sel_out".into()));
        } else {
            code.push_str("let sel = true;\n");
        }
        let mut outs = Vec::new();
        let mut out_decls = Vec::new();
        code.push_str("if (sel) {\n");
        for (j, e) in self.outputs.iter().enumerate() {
            let dt = e.data_type(&self.schema).map_err(|e| e.to_string())?;
            let storage = g.st(&dt).map_err(|_| format!("output of type {dt} has no GPU layout"))?;
            let mut c = String::new();
            let v = g.expr(e, &mut c)?;
            if v.dt != dt && v.dt != DataType::Null {
                return Err(format!("output {e} compiles to {} instead of {dt}", v.dt));
            }
            code.push_str(&c);
            let value = if v.dt == DataType::Null { super::zero(storage).to_string() } else { v.v.clone() };
            if storage == Storage::Bool {
                let b = bitmaps.len();
                let _ = writeln!(code, "if ({} && {value}) {{ {} }}", v.n, set_bit(b));
                bitmaps.push((Slot::OutValues(j), format!("out{j}")));
            } else {
                let _ = writeln!(code, "out{j}[r] = {value};");
                out_decls.push((Slot::OutValues(j), format!("out{j}"), wgsl_ty(storage)));
            }
            let nullable = v.n != "true";
            if nullable {
                let b = bitmaps.len();
                let _ = writeln!(code, "if ({}) {{ {} }}", v.n, set_bit(b));
                bitmaps.push((Slot::OutValidity(j), format!("outv{j}")));
            }
            outs.push(OutSpec { dt, storage, nullable });
        }
        code.push_str("}\n");
        if bitmaps.len() > MAX_BITMAPS_PER_KERNEL {
            return Err(format!("{} bitmaps in one kernel (at most {MAX_BITMAPS_PER_KERNEL})", bitmaps.len()));
        }
        // Bindings: input columns, then the selection and outputs.
        let mut slots = Vec::new();
        let mut decls = String::new();
        let mut bind = |slots: &mut Vec<Slot>, slot: Slot, decl: String| {
            let _ = writeln!(decls, "@group(0) @binding({}) {decl}", 2 + slots.len());
            slots.push(slot);
        };
        for &i in &g.cols {
            let st = Storage::of(self.schema.field(i).data_type()).expect("compiled");
            let elem = if st == Storage::Bool { "u32" } else { wgsl_ty(st) };
            bind(&mut slots, Slot::ColValues(i), format!("var<storage, read> col{i}: array<{elem}>;"));
            if validity(i) {
                bind(&mut slots, Slot::ColValidity(i), format!("var<storage, read> val{i}: array<u32>;"));
            }
        }
        let nbitmaps = bitmaps.len();
        let mut store_bits = String::new();
        for (b, (slot, name)) in bitmaps.into_iter().enumerate() {
            bind(&mut slots, slot, format!("var<storage, read_write> {name}: array<u32>;"));
            let _ = writeln!(store_bits, "        if (which == {b}u) {{ {name}[word] = atomicLoad(&wbits[{b}u * WORDS + (lid % WORDS)]); }}");
        }
        for (slot, name, ty) in out_decls {
            bind(&mut slots, slot, format!("var<storage, read_write> {name}: array<{ty}>;"));
        }
        let max_bindings = 2 + slots.len();
        if max_bindings > 30 {
            return Err(format!("{max_bindings} buffers in one kernel"));
        }
        let body = format!("{}{}", g.loads(), code);
        let nwords = nbitmaps * (ridgeline_operators::rowwise::ROWWISE_WG as usize / 32);
        let source = render(&decls, nwords, g.helpers64(), &body, &store_bits);
        Ok(Kernel { source, slots, outs, may_error: g.may_error })
    }

    /// Runs the program over `batch`. Errors raised by rows are reported by
    /// [`Evaluated::check_errors`] (after the caller's own synchronization).
    pub fn evaluate(&self, ctx: &GpuContext, batch: &GpuBatch) -> Result<Evaluated> {
        self.evaluate_with(ctx, batch, None)
    }

    /// [`RowProgram::evaluate`] with the kernel recorded into `enc` instead of
    /// submitted: the caller submits `enc` before anything reads the outputs, and
    /// keeps the [`Evaluated`] (and the batch's columns) alive until then.
    pub fn evaluate_into(&self, ctx: &GpuContext, batch: &GpuBatch, enc: &mut ridgeline_operators::wgpu::CommandEncoder) -> Result<Evaluated> {
        self.evaluate_with(ctx, batch, Some(enc))
    }

    fn evaluate_with(&self, ctx: &GpuContext, batch: &GpuBatch, enc: Option<&mut ridgeline_operators::wgpu::CommandEncoder>) -> Result<Evaluated> {
        // Columns the kernel reads must be on the device (a Boolean column a filter
        // kept on the host, for example): upload them.
        let mut uploaded: Vec<Option<GpuColumn>> = (0..batch.columns.len()).map(|_| None).collect();
        let validity = |i: usize| match &batch.columns[i].data {
            ColumnData::Device { validity, .. } => validity.is_some(),
            ColumnData::Host(a) => a.logical_nulls().is_some_and(|n| n.null_count() > 0),
        };
        let kernel = self.kernel(&validity).map_err(|e| DataFusionError::Internal(format!("GPU expression no longer compiles: {e}")))?;
        let rows = batch.num_rows;
        let seg = ctx.segment_rows();
        for s in &kernel.slots {
            if let Slot::ColValues(i) = s {
                if let ColumnData::Host(a) = &batch.columns[*i].data {
                    uploaded[*i] = Some(upload_column(ctx, a)?);
                }
            }
        }
        let col = |i: usize| -> &GpuColumn { uploaded[i].as_ref().unwrap_or(&batch.columns[i]) };
        let selection = match self.predicate {
            Some(_) => Some(DeviceArray::alloc_segmented(ctx, rows.div_ceil(32), 4, seg / 32).map_err(gpu_err)?),
            None => None,
        };
        let mut out_values = Vec::new();
        let mut out_validity = Vec::new();
        for o in &kernel.outs {
            let v = if o.storage == Storage::Bool {
                DeviceArray::alloc_segmented(ctx, rows.div_ceil(32), 4, seg / 32)
            } else {
                DeviceArray::alloc_segmented(ctx, rows, o.storage.elem_size(), seg)
            }
            .map_err(gpu_err)?;
            out_values.push(v);
            out_validity.push(if o.nullable {
                Some(DeviceArray::alloc_segmented(ctx, rows.div_ceil(32), 4, seg / 32).map_err(gpu_err)?)
            } else {
                None
            });
        }
        let mut arrays = Vec::with_capacity(kernel.slots.len());
        for s in &kernel.slots {
            let a = match s {
                Slot::ColValues(i) => match &col(*i).data {
                    ColumnData::Device { storage: Storage::Bool, values, .. } => RowArray::Bits(values),
                    ColumnData::Device { values, .. } => RowArray::Rows(values),
                    ColumnData::Host(_) => unreachable!("uploaded above"),
                },
                Slot::ColValidity(i) => match &col(*i).data {
                    ColumnData::Device { validity: Some(v), .. } => RowArray::Bits(v),
                    _ => return Err(DataFusionError::Internal(format!("column {i} lost its validity bitmap"))),
                },
                Slot::Selection => RowArray::Bits(selection.as_ref().expect("predicate")),
                Slot::OutValues(j) => {
                    if kernel.outs[*j].storage == Storage::Bool {
                        RowArray::Bits(&out_values[*j])
                    } else {
                        RowArray::Rows(&out_values[*j])
                    }
                }
                Slot::OutValidity(j) => RowArray::Bits(out_validity[*j].as_ref().expect("nullable")),
            };
            arrays.push(a);
        }
        let name = format!("expr_{:016x}", hash(&kernel.source));
        let run = if rows == 0 {
            None
        } else {
            let r = run_rowwise(ctx, &name, &kernel.source, rows, seg, &arrays, enc).map_err(gpu_err)?;
            // Only kernels that can raise an error pay for reading the error word back.
            kernel.may_error.then_some(r)
        };
        drop(arrays);
        let outputs = kernel
            .outs
            .iter()
            .zip(out_values.into_iter().zip(out_validity))
            .map(|(o, (values, validity))| GpuColumn {
                data_type: o.dt.clone(),
                data: ColumnData::Device { storage: o.storage, values, validity },
                len: rows,
                null_count: 0,
            })
            .collect();
        Ok(Evaluated { selection, outputs, run, _uploaded: uploaded.into_iter().flatten().collect() })
    }
}

fn hash(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}
