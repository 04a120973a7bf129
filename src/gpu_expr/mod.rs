//! The expression compiler: DataFusion physical expressions to WGSL.
//!
//! [`RowProgram`] holds an optional filter predicate and a list of output
//! expressions over one input schema. [`RowProgram::check`] says at planning time
//! whether they compile (and why not, for EXPLAIN); [`RowProgram::source`]
//! generates the kernel for a batch (which columns carry validity bitmaps is part
//! of the kernel, so the source depends on the batch), and
//! [`RowProgram::evaluate`] runs it through `ridgeline_operators::rowwise`.
//!
//! Semantics follow DataFusion 55 / Arrow exactly where the GPU can give the same
//! answer, and otherwise the expression does not compile (it then stays on the
//! CPU, never an error):
//! - comparisons (`= <> < <= > >=`, `IS [NOT] DISTINCT FROM`) of integers,
//!   decimals of one scale, dates, Booleans, and floats as DataFusion compares
//!   them (`-0.0` normalized to `+0.0`, then Arrow's total order: NaN equal to
//!   itself and after `+inf`);
//! - `+ - *` on integers wrap (DataFusion's default, `fail_on_overflow = false`),
//!   Int8/Int16/UInt8/UInt16 at their own width; `/` and `%` raise "Divide by zero"
//!   and `/` raises Arrow's overflow error for `MIN / -1`, as Arrow does; NULL
//!   operands raise nothing;
//! - decimal `+ - *` (precision <= 18) exactly, in i64, when the result precision
//!   is at most 18 (larger results need 128-bit arithmetic: CPU);
//! - float arithmetic does not compile: WGSL does not promise IEEE rounding (nor
//!   forbid fused multiply-add), so results could differ from the CPU's bits;
//! - AND, OR, NOT with SQL's three-valued logic; the right side of AND (OR) is
//!   evaluated only where the left is not false (not true), so a GPU filter never
//!   raises an error that DataFusion's short-circuiting evaluation would not;
//! - `IS [NOT] NULL`, `[NOT] IN (list)` (NULL semantics of SQL), `CASE` (with or
//!   without a base expression; a branch is evaluated only for its rows), BETWEEN
//!   (DataFusion plans it as two comparisons);
//! - CAST / TRY_CAST between integer types (range-checked), integer to decimal and
//!   decimal to a larger scale (range-checked: CAST errors, TRY_CAST gives NULL),
//!   Date32 to Date64 and to Timestamp without a time zone;
//! - Date32 `±` interval literals (months clamp the day to the month's end, as
//!   chrono does), `Date32 - Date32` (days, Int64).
use arrow::datatypes::{DataType, IntervalUnit, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, Literal, NegativeExpr, NotExpr,
    TryCastExpr,
};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

pub mod run;

pub use run::{is_decimal_wide, DecimalWide, Evaluated, RowProgram};

use crate::gpu_batch::Storage;

const TEMPLATE: &str = include_str!("../../shaders/expr.wgsl");

/// What the adapter offers the generated code.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// 64-bit integers in shaders (`SHADER_INT64`).
    pub int64: bool,
}

impl Caps {
    /// The capabilities of a device.
    pub fn of(ctx: &ridgeline_operators::GpuContext) -> Caps {
        Caps { int64: ctx.has_int64() }
    }
}

pub(crate) use crate::tuning::limits::MAX_BITMAPS_PER_KERNEL;

/// Error codes the kernel raises (largest wins).
pub(crate) mod codes {
    pub const CAST_OVERFLOW: u32 = 1;
    pub const DIVIDE_BY_ZERO: u32 = 2;
    /// `MIN / -1`: `OVERFLOW_BASE + the type's index in OVERFLOW_TYPES`.
    pub const OVERFLOW_BASE: u32 = 16;
    /// A wide decimal (precision above 18) left i64: not a SQL error, the
    /// operator redoes the work on the CPU (larger than every other code, so it
    /// wins: the CPU then raises whatever SQL error there is).
    pub const DECIMAL_WIDE: u32 = 1 << 20;
}

/// The types whose `MIN / -1` overflows, for the error message.
pub(crate) const OVERFLOW_TYPES: [(DataType, &str); 4] = [
    (DataType::Int8, "-128 / -1"),
    (DataType::Int16, "-32768 / -1"),
    (DataType::Int32, "-2147483648 / -1"),
    (DataType::Int64, "-9223372036854775808 / -1"),
];

/// A compiled value: WGSL expressions for its value and its validity, and its type.
#[derive(Clone, Debug)]
pub(crate) struct Val {
    pub(crate) v: String,
    /// `"true"` when it can never be NULL.
    pub(crate) n: String,
    pub(crate) dt: DataType,
}

impl Val {
    fn non_null(&self) -> bool {
        self.n == "true"
    }
}

/// The WGSL type holding a value of `st`.
fn wgsl_ty(st: Storage) -> &'static str {
    match st {
        Storage::I32 => "i32",
        Storage::U32 | Storage::F32 => "u32",
        Storage::I64 => "i64",
        Storage::U64 | Storage::F64 => "u64",
        Storage::Bool => "bool",
    }
}

fn zero(st: Storage) -> &'static str {
    match st {
        Storage::I32 => "0i",
        Storage::U32 | Storage::F32 => "0u",
        Storage::I64 => "0li",
        Storage::U64 | Storage::F64 => "0lu",
        Storage::Bool => "false",
    }
}

fn storage(dt: &DataType) -> Result<Storage, String> {
    Storage::of(dt).ok_or_else(|| format!("type {dt} has no GPU layout"))
}

fn i64_lit(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807li - 1li)".into()
    } else {
        format!("{v}li")
    }
}

fn i32_lit(v: i32) -> String {
    if v == i32::MIN {
        "(-2147483647i - 1i)".into()
    } else {
        format!("{v}i")
    }
}

/// The code generator's state for one kernel.
pub(crate) struct Gen<'a> {
    schema: &'a Schema,
    caps: Caps,
    /// Whether input column `i` has a validity bitmap in this batch.
    validity: &'a dyn Fn(usize) -> bool,
    tmp: usize,
    /// Columns read.
    pub(crate) cols: BTreeSet<usize>,
    uses64: bool,
    /// Whether the kernel can raise a SQL error (division, range-checked casts).
    pub(crate) may_error: bool,
    /// Decimals of precision above 18 compute in i64 with every overflow checked
    /// (raising [`codes::DECIMAL_WIDE`]: the work goes back to the CPU's 128-bit
    /// arithmetic); only for operators that fall back on that code.
    pub(crate) wide: bool,
    /// Nesting depth of the expression being compiled (see [`MAX_GPU_EXPR_DEPTH`]).
    depth: usize,
}

pub use crate::tuning::limits::MAX_GPU_EXPR_DEPTH;

pub use crate::tuning::limits::MAX_GPU_IN_LIST;

fn is_int(dt: &DataType) -> bool {
    dt.is_integer()
}

fn pow10(k: u32) -> i64 {
    10i64.pow(k)
}

impl<'a> Gen<'a> {
    pub(crate) fn new(schema: &'a Schema, caps: Caps, validity: &'a dyn Fn(usize) -> bool) -> Self {
        Gen { schema, caps, validity, tmp: 0, cols: BTreeSet::new(), uses64: false, may_error: false, wide: false, depth: 0 }
    }

    fn fresh(&mut self) -> usize {
        self.tmp += 1;
        self.tmp
    }

    /// The storage of a value of type `dt` in this kernel (wide decimals: i64).
    pub(crate) fn st(&self, dt: &DataType) -> Result<Storage, String> {
        match dt {
            DataType::Decimal128(p, _) if *p > 18 && self.wide => Ok(Storage::I64),
            _ => storage(dt),
        }
    }

    fn need(&mut self, dt: &DataType) -> Result<Storage, String> {
        let st = self.st(dt)?;
        if matches!(st, Storage::I64 | Storage::U64 | Storage::F64) {
            if !self.caps.int64 {
                return Err(format!("{dt} needs 64-bit integers, which this adapter lacks"));
            }
            self.uses64 = true;
        }
        Ok(st)
    }

    /// Declares `var` value/validity temporaries and returns their names.
    fn vars(&mut self, out: &mut String, st: Storage) -> (String, String) {
        let t = self.fresh();
        let (v, n) = (format!("v{t}"), format!("n{t}"));
        let _ = writeln!(out, "var {v}: {} = {};\nvar {n}: bool = false;", wgsl_ty(st), zero(st));
        (v, n)
    }

    /// `let` of an expression, returning its name.
    fn let_(&mut self, out: &mut String, ty: &str, e: &str) -> String {
        let t = self.fresh();
        let name = format!("t{t}");
        let _ = writeln!(out, "let {name}: {ty} = {e};");
        name
    }

    /// Compiles `e`, appending statements to `out`.
    pub(crate) fn expr(&mut self, e: &Arc<dyn PhysicalExpr>, out: &mut String) -> Result<Val, String> {
        self.gen(e, out)
    }

    #[recursive::recursive]
    fn gen(&mut self, e: &Arc<dyn PhysicalExpr>, out: &mut String) -> Result<Val, String> {
        if self.depth >= MAX_GPU_EXPR_DEPTH {
            return Err(format!("the expression is nested deeper than {MAX_GPU_EXPR_DEPTH} levels"));
        }
        self.depth += 1;
        let r = self.gen_node(e, out);
        self.depth -= 1;
        r
    }

    fn gen_node(&mut self, e: &Arc<dyn PhysicalExpr>, out: &mut String) -> Result<Val, String> {
        if let Some(c) = e.downcast_ref::<Column>() {
            return self.column(c.index());
        }
        if let Some(l) = e.downcast_ref::<Literal>() {
            return self.literal(l.value());
        }
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            return self.binary(e, b, out);
        }
        if let Some(x) = e.downcast_ref::<NotExpr>() {
            let a = self.gen(x.arg(), out)?;
            if a.dt != DataType::Boolean {
                return Err(format!("NOT of {}", a.dt));
            }
            return Ok(Val { v: format!("(!{})", a.v), n: a.n, dt: DataType::Boolean });
        }
        if let Some(x) = e.downcast_ref::<IsNullExpr>() {
            let a = self.gen(x.arg(), out)?;
            return Ok(Val { v: format!("(!{})", a.n), n: "true".into(), dt: DataType::Boolean });
        }
        if let Some(x) = e.downcast_ref::<IsNotNullExpr>() {
            let a = self.gen(x.arg(), out)?;
            return Ok(Val { v: a.n.clone(), n: "true".into(), dt: DataType::Boolean });
        }
        if let Some(x) = e.downcast_ref::<NegativeExpr>() {
            return self.negative(x, out);
        }
        if let Some(x) = e.downcast_ref::<CastExpr>() {
            return self.cast(x.expr(), x.cast_type(), false, out);
        }
        if let Some(x) = e.downcast_ref::<TryCastExpr>() {
            return self.cast(x.expr(), x.cast_type(), true, out);
        }
        if let Some(x) = e.downcast_ref::<InListExpr>() {
            return self.in_list(x, out);
        }
        if let Some(x) = e.downcast_ref::<CaseExpr>() {
            return self.case(e, x, out);
        }
        Err(format!("expression {e} is not supported on the GPU"))
    }

    fn column(&mut self, i: usize) -> Result<Val, String> {
        let f = self.schema.field(i);
        let dt = f.data_type().clone();
        if let DataType::Decimal128(p, _) = dt {
            if p > 18 {
                return Err(format!("column {} is {dt} (precision above 18)", f.name()));
            }
        }
        self.need(&dt).map_err(|e| format!("column {}: {e}", f.name()))?;
        self.cols.insert(i);
        let n = if (self.validity)(i) { format!("cn{i}") } else { "true".to_string() };
        Ok(Val { v: format!("c{i}"), n, dt })
    }

    /// The `let` statements loading the columns read (emitted first in the body).
    pub(crate) fn loads(&self) -> String {
        let mut s = String::new();
        for &i in &self.cols {
            let dt = self.schema.field(i).data_type();
            let st = Storage::of(dt).expect("checked");
            if st == Storage::Bool {
                let _ = writeln!(s, "let c{i}: bool = ((col{i}[r >> 5u] >> (r & 31u)) & 1u) != 0u;");
            } else {
                let _ = writeln!(s, "let c{i}: {} = col{i}[r];", wgsl_ty(st));
            }
            if (self.validity)(i) {
                let _ = writeln!(s, "let cn{i}: bool = ((val{i}[r >> 5u] >> (r & 31u)) & 1u) != 0u;");
            }
        }
        s
    }

    fn literal(&mut self, v: &ScalarValue) -> Result<Val, String> {
        let dt = v.data_type();
        let null = v.is_null();
        let lit = |dt: DataType, code: String| Val { v: code, n: (if null { "false" } else { "true" }).into(), dt };
        Ok(match v {
            ScalarValue::Boolean(b) => lit(dt, b.unwrap_or(false).to_string()),
            ScalarValue::Int8(x) => lit(dt, i32_lit(x.unwrap_or(0) as i32)),
            ScalarValue::Int16(x) => lit(dt, i32_lit(x.unwrap_or(0) as i32)),
            ScalarValue::Int32(x) | ScalarValue::Date32(x) => lit(dt, i32_lit(x.unwrap_or(0))),
            ScalarValue::UInt8(x) => lit(dt, format!("{}u", x.unwrap_or(0))),
            ScalarValue::UInt16(x) => lit(dt, format!("{}u", x.unwrap_or(0))),
            ScalarValue::UInt32(x) => lit(dt, format!("{}u", x.unwrap_or(0))),
            ScalarValue::Float32(x) => lit(dt, format!("{}u", x.unwrap_or(0.0).to_bits())),
            ScalarValue::Int64(x)
            | ScalarValue::Date64(x)
            | ScalarValue::TimestampSecond(x, _)
            | ScalarValue::TimestampMillisecond(x, _)
            | ScalarValue::TimestampMicrosecond(x, _)
            | ScalarValue::TimestampNanosecond(x, _)
            | ScalarValue::DurationSecond(x)
            | ScalarValue::DurationMillisecond(x)
            | ScalarValue::DurationMicrosecond(x)
            | ScalarValue::DurationNanosecond(x) => {
                self.need(&dt)?;
                lit(dt, i64_lit(x.unwrap_or(0)))
            }
            ScalarValue::UInt64(x) => {
                self.need(&dt)?;
                lit(dt, format!("{}lu", x.unwrap_or(0)))
            }
            ScalarValue::Float64(x) => {
                self.need(&dt)?;
                lit(dt, format!("{}lu", x.unwrap_or(0.0).to_bits()))
            }
            ScalarValue::Decimal128(x, p, _) if *p <= 18 || (self.wide && x.is_none_or(|x| i64::try_from(x).is_ok())) => {
                self.need(&dt)?;
                lit(dt, i64_lit(x.unwrap_or(0) as i64))
            }
            ScalarValue::Null => Val { v: "false".into(), n: "false".into(), dt: DataType::Null },
            other => return Err(format!("literal {other} of type {dt}")),
        })
    }

    /// Comparison of two values of one type (validity handled by the caller).
    fn compare(&mut self, op: Operator, a: &Val, b: &Val) -> Result<String, String> {
        if a.dt != b.dt {
            let same_decimal_scale = matches!((&a.dt, &b.dt), (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) if s1 == s2);
            if !same_decimal_scale {
                return Err(format!("comparison of {} with {}", a.dt, b.dt));
            }
        }
        let st = self.st(&a.dt)?;
        let (x, y) = match st {
            // DataFusion normalizes -0.0 to +0.0, then compares by Arrow's total order.
            Storage::F32 => (format!("fkey32(fnorm32({}))", a.v), format!("fkey32(fnorm32({}))", b.v)),
            Storage::F64 => (format!("fkey64(fnorm64({}))", a.v), format!("fkey64(fnorm64({}))", b.v)),
            Storage::Bool => (format!("u32({})", a.v), format!("u32({})", b.v)),
            _ => (a.v.clone(), b.v.clone()),
        };
        let o = match op {
            Operator::Eq | Operator::IsNotDistinctFrom => "==",
            Operator::NotEq | Operator::IsDistinctFrom => "!=",
            Operator::Lt => "<",
            Operator::LtEq => "<=",
            Operator::Gt => ">",
            Operator::GtEq => ">=",
            _ => return Err(format!("operator {op}")),
        };
        Ok(format!("({x} {o} {y})"))
    }

    fn binary(&mut self, whole: &Arc<dyn PhysicalExpr>, b: &BinaryExpr, out: &mut String) -> Result<Val, String> {
        let op = *b.op();
        match op {
            Operator::And | Operator::Or => return self.logic(op, b, out),
            _ => {}
        }
        if matches!(op, Operator::Plus | Operator::Minus) {
            if let Some(iv) = interval_literal(b.right()) {
                let l = self.gen(b.left(), out)?;
                if l.dt != DataType::Date32 {
                    return Err(format!("{} {op} interval", l.dt));
                }
                return self.date_interval(l, &iv, op == Operator::Minus, out);
            }
            if let (Some(iv), Operator::Plus) = (interval_literal(b.left()), op) {
                let r = self.gen(b.right(), out)?;
                if r.dt != DataType::Date32 {
                    return Err(format!("interval + {}", r.dt));
                }
                return self.date_interval(r, &iv, false, out);
            }
        }
        let l = self.gen(b.left(), out)?;
        let r = self.gen(b.right(), out)?;
        match op {
            Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => {
                if l.dt == DataType::Null || r.dt == DataType::Null {
                    return Ok(Val { v: "false".into(), n: "false".into(), dt: DataType::Boolean });
                }
                let c = self.compare(op, &l, &r)?;
                Ok(Val { v: c, n: both(&l.n, &r.n), dt: DataType::Boolean })
            }
            Operator::IsDistinctFrom | Operator::IsNotDistinctFrom => {
                // Distinct: exactly one NULL, or both valid and different.
                let ne = if l.dt == DataType::Null || r.dt == DataType::Null {
                    "false".to_string()
                } else {
                    self.compare(Operator::NotEq, &l, &r)?
                };
                let distinct = format!("(({} != {}) || ({} && {} && {ne}))", l.n, r.n, l.n, r.n);
                let v = if op == Operator::IsDistinctFrom { distinct } else { format!("(!{distinct})") };
                Ok(Val { v, n: "true".into(), dt: DataType::Boolean })
            }
            Operator::Plus | Operator::Minus | Operator::Multiply | Operator::Divide | Operator::Modulo => {
                // Checked arithmetic (DataFusion's `fail_on_overflow`, which has no
                // accessor, only its Debug form) would need overflow errors: CPU.
                if format!("{b:?}").contains("fail_on_overflow: true") {
                    return Err(format!("{op} with overflow checks"));
                }
                let rt = whole.data_type(self.schema).map_err(|e| e.to_string())?;
                self.arith(op, l, r, rt, out)
            }
            other => Err(format!("operator {other}")),
        }
    }

    fn logic(&mut self, op: Operator, b: &BinaryExpr, out: &mut String) -> Result<Val, String> {
        let l = self.gen(b.left(), out)?;
        if l.dt != DataType::Boolean && l.dt != DataType::Null {
            return Err(format!("{op} of {}", l.dt));
        }
        // The right side is evaluated only where the left does not decide the result.
        let (res_v, res_n) = self.vars(out, Storage::Bool);
        let decided = if op == Operator::And { format!("({} && !{})", l.n, l.v) } else { format!("({} && {})", l.n, l.v) };
        let mut inner = String::new();
        let r = self.gen(b.right(), &mut inner)?;
        if r.dt != DataType::Boolean && r.dt != DataType::Null {
            return Err(format!("{op} of {}", r.dt));
        }
        let (lv, rv) = (format!("({} || !{})", l.v, l.n), format!("({} || !{})", r.v, r.n));
        let _ = if op == Operator::And {
            // false if either is false; true if both true; else NULL.
            writeln!(
                out,
                "if ({decided}) {{ {res_v} = false; {res_n} = true; }} else {{\n{inner}\
                 {res_n} = ({} && !{}) || ({} && {});\n{res_v} = {res_n} && ({} && {}) && {} && {};\n}}",
                r.n, r.v, l.n, r.n, l.n, r.n, l.v, r.v
            )
        } else {
            // true if either is true; false if both false; else NULL.
            writeln!(
                out,
                "if ({decided}) {{ {res_v} = true; {res_n} = true; }} else {{\n{inner}\
                 {res_n} = ({} && {}) || ({} && {});\n{res_v} = {res_n} && ({} || {});\n}}",
                r.n, r.v, l.n, r.n, lv, rv
            )
        };
        Ok(Val { v: res_v, n: res_n, dt: DataType::Boolean })
    }

    fn arith(&mut self, op: Operator, l: Val, r: Val, rt: DataType, out: &mut String) -> Result<Val, String> {
        use DataType::*;
        let n = both(&l.n, &r.n);
        // Date arithmetic.
        if l.dt == Date32 && r.dt == Date32 && op == Operator::Minus {
            self.need(&Int64)?;
            return Ok(Val { v: format!("(sext64({}) - sext64({}))", l.v, r.v), n, dt: Int64 });
        }
        if l.dt == Date32 && matches!(r.dt, Interval(_)) && matches!(op, Operator::Plus | Operator::Minus) {
            return Err("date plus a non-literal interval".into());
        }
        if matches!((&l.dt, &r.dt), (Decimal128(..), Decimal128(..))) {
            return self.decimal_arith(op, l, r, rt, n, out);
        }
        if !(is_int(&l.dt) && l.dt == r.dt && rt == l.dt) {
            if l.dt.is_floating() || r.dt.is_floating() {
                return Err(format!(
                    "float arithmetic ({} {op} {}): WGSL does not promise IEEE rounding, so the GPU could differ from the CPU",
                    l.dt, r.dt
                ));
            }
            return Err(format!("arithmetic {} {op} {} -> {rt}", l.dt, r.dt));
        }
        let st = self.need(&rt)?;
        let ty = wgsl_ty(st);
        let wrap = |e: String| -> String {
            match rt {
                Int8 => format!("(({e} << 24u) >> 24u)"),
                Int16 => format!("(({e} << 16u) >> 16u)"),
                UInt8 => format!("({e} & 0xffu)"),
                UInt16 => format!("({e} & 0xffffu)"),
                _ => e,
            }
        };
        match op {
            Operator::Plus | Operator::Minus | Operator::Multiply => {
                let o = match op {
                    Operator::Plus => "+",
                    Operator::Minus => "-",
                    _ => "*",
                };
                let v = self.let_(out, ty, &wrap(format!("({} {o} {})", l.v, r.v)));
                Ok(Val { v, n, dt: rt })
            }
            Operator::Divide | Operator::Modulo => {
                let (res, _) = self.vars(out, st);
                let z = zero(st);
                let signed_min = match rt {
                    Int8 => Some("-128i".to_string()),
                    Int16 => Some("-32768i".to_string()),
                    Int32 => Some(i32_lit(i32::MIN)),
                    Int64 => Some(i64_lit(i64::MIN)),
                    _ => None,
                };
                let minus_one = if st == Storage::I64 { "-1li" } else { "-1i" };
                let _ = writeln!(out, "if ({n}) {{");
                self.may_error = true;
                let _ = writeln!(out, "  if ({} == {z}) {{ code = max(code, {}u); }}", r.v, codes::DIVIDE_BY_ZERO);
                match (&signed_min, op) {
                    (Some(min), Operator::Divide) => {
                        let idx = OVERFLOW_TYPES.iter().position(|(t, _)| *t == rt).unwrap() as u32;
                        let _ = writeln!(
                            out,
                            "  else if ({} == {min} && {} == {minus_one}) {{ code = max(code, {}u); }}",
                            l.v,
                            r.v,
                            codes::OVERFLOW_BASE + idx
                        );
                        let _ = writeln!(out, "  else {{ {res} = {} / {}; }}", l.v, r.v);
                    }
                    (Some(min), _) => {
                        // MIN % -1 is 0 in Arrow (wrapping remainder); WGSL leaves it to the driver.
                        let _ = writeln!(out, "  else if ({} == {min} && {} == {minus_one}) {{ {res} = {z}; }}", l.v, r.v);
                        let _ = writeln!(out, "  else {{ {res} = {} % {}; }}", l.v, r.v);
                    }
                    (None, Operator::Divide) => {
                        let _ = writeln!(out, "  else {{ {res} = {} / {}; }}", l.v, r.v);
                    }
                    (None, _) => {
                        let _ = writeln!(out, "  else {{ {res} = {} % {}; }}", l.v, r.v);
                    }
                }
                let _ = writeln!(out, "}}");
                Ok(Val { v: res, n, dt: rt })
            }
            _ => Err(format!("operator {op}")),
        }
    }

    fn decimal_arith(&mut self, op: Operator, l: Val, r: Val, rt: DataType, n: String, out: &mut String) -> Result<Val, String> {
        let (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2), DataType::Decimal128(p, s)) = (&l.dt, &r.dt, &rt) else {
            return Err(format!("decimal arithmetic to {rt}"));
        };
        if *p > 18 && self.wide && self.caps.int64 {
            return self.wide_decimal_arith(op, l, r, rt.clone(), n, out);
        }
        if *p > 18 {
            return Err(format!(
                "decimal {} {op} {} gives {rt}: precision above 18 needs 128-bit arithmetic",
                l.dt, r.dt
            ));
        }
        let (s1, s2, s) = (*s1 as i32, *s2 as i32, *s as i32);
        self.need(&rt)?;
        let v = match op {
            Operator::Plus | Operator::Minus if s == s1.max(s2) => {
                let up = |v: &str, k: i32| if k == 0 { v.to_string() } else { format!("({v} * {}li)", pow10(k as u32)) };
                let o = if op == Operator::Plus { "+" } else { "-" };
                format!("({} {o} {})", up(&l.v, s - s1), up(&r.v, s - s2))
            }
            Operator::Multiply if s == s1 + s2 => format!("({} * {})", l.v, r.v),
            _ => return Err(format!("decimal {} {op} {} -> {rt}", l.dt, r.dt)),
        };
        Ok(Val { v, n, dt: rt })
    }

    /// Decimal `+ - *` whose result precision exceeds 18, in i64: exact where it
    /// fits, else the row raises [`codes::DECIMAL_WIDE`].
    fn wide_decimal_arith(&mut self, op: Operator, l: Val, r: Val, rt: DataType, n: String, out: &mut String) -> Result<Val, String> {
        let (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2), DataType::Decimal128(_, s)) = (&l.dt, &r.dt, &rt) else {
            return Err(format!("decimal arithmetic to {rt}"));
        };
        let (s1, s2, s) = (*s1 as i32, *s2 as i32, *s as i32);
        self.uses64 = true;
        self.may_error = true;
        let flag = |out: &mut String, bad: String| {
            let _ = writeln!(out, "if ({n} && ({bad})) {{ code = max(code, {}u); }}", codes::DECIMAL_WIDE);
        };
        // `v * 10^k`, checked.
        let up = |g: &mut Self, out: &mut String, v: &str, k: i32| -> String {
            if k == 0 {
                return v.to_string();
            }
            let m = pow10(k as u32);
            let t = g.let_(out, "i64", &format!("({v} * {m}li)"));
            flag(out, format!("!mul_fits({v}, {m}li, {t})"));
            t
        };
        let v = match op {
            Operator::Plus | Operator::Minus if s == s1.max(s2) => {
                let a = up(self, out, &l.v, s - s1);
                let b = up(self, out, &r.v, s - s2);
                if op == Operator::Plus {
                    let t = self.let_(out, "i64", &format!("({a} + {b})"));
                    flag(out, format!("(({a} ^ {t}) & ({b} ^ {t})) < 0li"));
                    t
                } else {
                    let t = self.let_(out, "i64", &format!("({a} - {b})"));
                    flag(out, format!("(({a} ^ {b}) & ({a} ^ {t})) < 0li"));
                    t
                }
            }
            Operator::Multiply if s == s1 + s2 => {
                let t = self.let_(out, "i64", &format!("({} * {})", l.v, r.v));
                flag(out, format!("!mul_fits({}, {}, {t})", l.v, r.v));
                t
            }
            _ => return Err(format!("decimal {} {op} {} -> {rt}", l.dt, r.dt)),
        };
        Ok(Val { v, n, dt: rt })
    }

    fn negative(&mut self, x: &NegativeExpr, out: &mut String) -> Result<Val, String> {
        let a = self.gen(x.arg(), out)?;
        let st = self.st(&a.dt)?;
        let v = match (&a.dt, st) {
            (DataType::Int8, _) => format!("(((-{}) << 24u) >> 24u)", a.v),
            (DataType::Int16, _) => format!("(((-{}) << 16u) >> 16u)", a.v),
            (_, Storage::I32 | Storage::I64) => format!("(-{})", a.v),
            (_, Storage::F32) => format!("({} ^ 0x80000000u)", a.v),
            (_, Storage::F64) => format!("({} ^ 0x8000000000000000lu)", a.v),
            _ => return Err(format!("negation of {}", a.dt)),
        };
        let ty = wgsl_ty(st);
        let v = self.let_(out, ty, &v);
        Ok(Val { v, n: a.n, dt: a.dt })
    }

    fn cast(&mut self, e: &Arc<dyn PhysicalExpr>, to: &DataType, try_: bool, out: &mut String) -> Result<Val, String> {
        use DataType::*;
        // A cast of a literal is folded here, by Arrow's own cast.
        if let Some(l) = e.downcast_ref::<Literal>() {
            let folded = if try_ {
                let opts = arrow::compute::CastOptions { safe: true, ..Default::default() };
                l.value().cast_to_with_options(to, &opts)
            } else {
                l.value().cast_to(to)
            };
            return match folded {
                Ok(v) => self.literal(&v),
                Err(e) => Err(format!("cast of literal {} to {to} fails: {e}", l.value())),
            };
        }
        let a = self.gen(e, out)?;
        if &a.dt == to {
            return Ok(a);
        }
        if a.dt == Null {
            let st = self.need(to)?;
            return Ok(Val { v: zero(st).into(), n: "false".into(), dt: to.clone() });
        }
        let from_st = storage(&a.dt)?;
        let to_st = self.need(to)?;
        // A range check: valid (in range) or, for CAST, an error.
        let checked = |g: &mut Self, out: &mut String, in_range: String, value: String| -> Val {
            let (v, n) = g.vars(out, to_st);
            if try_ {
                let _ = writeln!(out, "if ({} && {in_range}) {{ {v} = {value}; {n} = true; }}", a.n);
            } else {
                g.may_error = true;
                let _ = writeln!(
                    out,
                    "if ({}) {{ if ({in_range}) {{ {v} = {value}; {n} = true; }} else {{ code = max(code, {}u); }} }}",
                    a.n,
                    codes::CAST_OVERFLOW
                );
            }
            Val { v, n, dt: to.clone() }
        };
        // Integer to integer.
        if is_int(&a.dt) && is_int(to) {
            let (lo, hi) = int_range(to);
            let (flo, fhi) = int_range(&a.dt);
            // naga converts u32 to i64 by sign extension: go through u64.
            let conv = |x: &str| {
                if from_st == Storage::U32 && to_st == Storage::I64 {
                    format!("i64(u64({x}))")
                } else if from_st == Storage::I32 && to_st == Storage::I64 {
                    format!("sext64({x})")
                } else {
                    format!("{}({x})", wgsl_ty(to_st))
                }
            };
            if flo >= lo && fhi <= hi {
                let v = self.let_(out, wgsl_ty(to_st), &conv(&a.v));
                return Ok(Val { v, n: a.n, dt: to.clone() });
            }
            // Compare in a type that holds both ranges.
            let wide = |x: &str| -> String {
                match from_st {
                    Storage::U64 => x.to_string(),
                    Storage::I64 => x.to_string(),
                    Storage::U32 => format!("i64(u64({x}))"),
                    _ => format!("sext64({x})"),
                }
            };
            self.uses64 = true;
            if !self.caps.int64 {
                return Err("range-checked casts need 64-bit integers".into());
            }
            let cond = if from_st == Storage::U64 {
                if hi < 0 {
                    "false".to_string()
                } else {
                    format!("({} <= {}lu)", a.v, hi as u64)
                }
            } else {
                let w = wide(&a.v);
                let hi_c = if hi > i64::MAX as i128 { "true".to_string() } else { format!("{w} <= {}", i64_lit(hi as i64)) };
                let lo_c = format!("{w} >= {}", i64_lit(lo.max(i64::MIN as i128) as i64));
                format!("({lo_c} && {hi_c})")
            };
            let value = conv(&a.v);
            return Ok(checked(self, out, cond, value));
        }
        // Integer or decimal to decimal.
        if let Decimal128(p2, s2) = to {
            let (p2, s2) = (*p2 as i32, *s2 as i32);
            if p2 > 18 {
                return Err(format!("cast to {to}: precision above 18"));
            }
            let (digits_before, k) = match &a.dt {
                Decimal128(p1, s1) => (*p1 as i32 - *s1 as i32, s2 - *s1 as i32),
                t if is_int(t) => (int_digits(t), s2),
                _ => return Err(format!("cast from {} to {to}", a.dt)),
            };
            if k < 0 {
                return Err(format!("cast from {} to {to} (rounding to a smaller scale)", a.dt));
            }
            let src = match from_st {
                Storage::I64 => a.v.clone(),
                Storage::U64 => return Err(format!("cast from {} to {to}", a.dt)),
                Storage::U32 => format!("i64(u64({}))", a.v),
                _ => format!("sext64({})", a.v),
            };
            let value = if k == 0 { src.clone() } else { format!("({src} * {}li)", pow10(k as u32)) };
            // In range iff |v| < 10^(p2 - k).
            if digits_before <= p2 - s2 {
                let v = self.let_(out, "i64", &value);
                return Ok(Val { v, n: a.n, dt: to.clone() });
            }
            let bound = if p2 - k >= 0 { pow10((p2 - k) as u32) } else { 1 };
            let cond = if p2 - k >= 0 { format!("({src} > -{bound}li && {src} < {bound}li)") } else { format!("({src} == 0li)") };
            return Ok(checked(self, out, cond, value));
        }
        // Float32 to Float64 is exact: widen the bits.
        if a.dt == Float32 && *to == Float64 {
            let v = self.let_(out, "u64", &format!("f32_to_f64({})", a.v));
            return Ok(Val { v, n: a.n, dt: to.clone() });
        }
        // Dates to Date64 / timestamps without a time zone.
        if a.dt == Date32 {
            let mult: i64 = match to {
                Date64 => 86_400_000,
                Timestamp(TimeUnit::Second, None) => 86_400,
                Timestamp(TimeUnit::Millisecond, None) => 86_400_000,
                Timestamp(TimeUnit::Microsecond, None) => 86_400_000_000,
                Timestamp(TimeUnit::Nanosecond, None) => 86_400_000_000_000,
                _ => return Err(format!("cast from Date32 to {to}")),
            };
            let value = format!("(sext64({}) * {mult}li)", a.v);
            let limit = i64::MAX / mult;
            if limit >= i32::MAX as i64 {
                let v = self.let_(out, "i64", &value);
                return Ok(Val { v, n: a.n, dt: to.clone() });
            }
            let cond = format!("({} >= {} && {} <= {})", a.v, i32_lit(-limit as i32), a.v, i32_lit(limit as i32));
            return Ok(checked(self, out, cond, value));
        }
        Err(format!("cast from {} to {to}", a.dt))
    }

    fn in_list(&mut self, x: &InListExpr, out: &mut String) -> Result<Val, String> {
        if x.list().len() > MAX_GPU_IN_LIST {
            return Err(format!("an IN list of {} values (the GPU takes up to {MAX_GPU_IN_LIST})", x.list().len()));
        }
        let a = self.gen(x.expr(), out)?;
        let mut any_match = Vec::new();
        let mut list_nulls = Vec::new();
        for item in x.list() {
            let b = self.gen(item, out)?;
            if b.dt == DataType::Null {
                list_nulls.push("true".to_string());
                continue;
            }
            let eq = self.compare(Operator::Eq, &a, &b)?;
            any_match.push(format!("({} && {eq})", b.n));
            if !b.non_null() {
                list_nulls.push(format!("(!{})", b.n));
            }
        }
        let m = if any_match.is_empty() { "false".to_string() } else { any_match.join(" || ") };
        let has_null = if list_nulls.is_empty() { "false".to_string() } else { list_nulls.join(" || ") };
        let mv = self.let_(out, "bool", &m);
        // Valid when the probe is valid and (it matched, or the list has no NULL).
        let n = format!("({} && ({mv} || !({has_null})))", a.n);
        let v = if x.negated() { format!("(!{mv})") } else { mv };
        Ok(Val { v, n, dt: DataType::Boolean })
    }

    fn case(&mut self, whole: &Arc<dyn PhysicalExpr>, x: &CaseExpr, out: &mut String) -> Result<Val, String> {
        let rt = whole.data_type(self.schema).map_err(|e| e.to_string())?;
        let st = self.need(&rt)?;
        let base = match x.expr() {
            Some(b) => Some(self.gen(b, out)?),
            None => None,
        };
        let (res_v, res_n) = self.vars(out, st);
        // Nested if / else: each WHEN is evaluated only where no earlier one matched.
        let mut closing = 0;
        for (when, then) in x.when_then_expr() {
            let mut cond_code = String::new();
            let w = self.gen(when, &mut cond_code)?;
            let cond = match &base {
                Some(b) => {
                    if w.dt == DataType::Null {
                        "false".to_string()
                    } else {
                        let eq = self.compare(Operator::Eq, b, &w)?;
                        format!("({} && {} && {eq})", b.n, w.n)
                    }
                }
                None => {
                    if w.dt != DataType::Boolean && w.dt != DataType::Null {
                        return Err(format!("CASE WHEN of {}", w.dt));
                    }
                    format!("({} && {})", w.n, w.v)
                }
            };
            let mut then_code = String::new();
            let t = self.gen(then, &mut then_code)?;
            if t.dt != rt && t.dt != DataType::Null {
                return Err(format!("CASE branch of {} in a CASE of {rt}", t.dt));
            }
            let _ = writeln!(out, "{cond_code}if ({cond}) {{\n{then_code}{res_v} = {}; {res_n} = {};\n}} else {{", t.v_as(st), t.n);
            closing += 1;
        }
        if let Some(e) = x.else_expr() {
            let mut code = String::new();
            let v = self.gen(e, &mut code)?;
            if v.dt != rt && v.dt != DataType::Null {
                return Err(format!("CASE ELSE of {} in a CASE of {rt}", v.dt));
            }
            let _ = writeln!(out, "{code}{res_v} = {}; {res_n} = {};", v.v_as(st), v.n);
        }
        for _ in 0..closing {
            out.push_str("}\n");
        }
        Ok(Val { v: res_v, n: res_n, dt: rt })
    }

    /// The interval literal arithmetic `date ± interval` (the right side is a literal).
    fn date_interval(&mut self, date: Val, iv: &ScalarValue, minus: bool, out: &mut String) -> Result<Val, String> {
        let (months, days) = match iv {
            ScalarValue::IntervalYearMonth(Some(m)) => (*m, 0),
            ScalarValue::IntervalDayTime(Some(d)) if d.milliseconds == 0 => (0, d.days),
            ScalarValue::IntervalMonthDayNano(Some(x)) if x.nanoseconds == 0 => (x.months, x.days),
            other => return Err(format!("date plus interval {other} (only whole days and months)")),
        };
        let (months, days) = if minus { (-months, -days) } else { (months, days) };
        let v = self.let_(out, "i32", &format!("(add_months({}, {}) + {})", date.v, i32_lit(months), i32_lit(days)));
        Ok(Val { v, n: date.n, dt: DataType::Date32 })
    }

    pub(crate) fn helpers64(&self) -> &'static str {
        if self.uses64 {
            "\n// Order-preserving key of an f64's bits.\nfn fkey64(b: u64) -> u64 {\n    return select(b ^ 0x8000000000000000lu, ~b, (b & 0x8000000000000000lu) != 0lu);\n}\n\n// i32 to i64 by zero extension and a correction: naga's OpSConvert of an i32\n// compares wrongly on lavapipe (Mesa 25), so no signed widening conversion is used.\nfn sext64(x: i32) -> i64 {\n    return i64(u64(bitcast<u32>(x))) - select(0li, 4294967296li, x < 0i);\n}\n\n// The bits of an f32 widened to f64 (exact; NaN payloads kept, as Rust's `as`).\nfn f32_to_f64(b: u32) -> u64 {\n    let sign = u64(b >> 31u) << 63u;\n    let e = (b >> 23u) & 0xffu;\n    let m = b & 0x7fffffu;\n    if (e == 0xffu) {\n        return sign | 0x7ff0000000000000lu | (u64(m) << 29u);\n    }\n    if (e == 0u) {\n        if (m == 0u) {\n            return sign;\n        }\n        let p = 31u - countLeadingZeros(m);\n        return sign | (u64(p + 874u) << 52u) | (u64(m ^ (1u << p)) << (52u - p));\n    }\n    return sign | (u64(e + 896u) << 52u) | (u64(m) << 29u);\n}\n\n// -0.0 as +0.0.\nfn fnorm64(b: u64) -> u64 {\n    return select(b, 0lu, b == 0x8000000000000000lu);\n}\n\n// Whether t = a * b (wrapped) is the exact product.\nfn mul_fits(a: i64, b: i64, t: i64) -> bool {\n    let m = 3037000499li;\n    if (a <= m && a >= -m && b <= m && b >= -m) {\n        return true;\n    }\n    if (a == 0li) {\n        return true;\n    }\n    if (a == -1li) {\n        return b != (-9223372036854775807li - 1li);\n    }\n    return t / a == b;\n}\n"
        } else {
            ""
        }
    }
}

impl Val {
    /// The value in storage `st` (a NULL literal becomes that storage's zero).
    fn v_as(&self, st: Storage) -> String {
        if self.dt == DataType::Null {
            zero(st).to_string()
        } else {
            self.v.clone()
        }
    }
}

fn both(a: &str, b: &str) -> String {
    match (a, b) {
        ("true", x) | (x, "true") => x.to_string(),
        _ => format!("({a} && {b})"),
    }
}

fn int_range(dt: &DataType) -> (i128, i128) {
    use DataType::*;
    match dt {
        Int8 => (i8::MIN as i128, i8::MAX as i128),
        Int16 => (i16::MIN as i128, i16::MAX as i128),
        Int32 => (i32::MIN as i128, i32::MAX as i128),
        Int64 => (i64::MIN as i128, i64::MAX as i128),
        UInt8 => (0, u8::MAX as i128),
        UInt16 => (0, u16::MAX as i128),
        UInt32 => (0, u32::MAX as i128),
        _ => (0, u64::MAX as i128),
    }
}

fn int_digits(dt: &DataType) -> i32 {
    use DataType::*;
    match dt {
        Int8 | UInt8 => 3,
        Int16 | UInt16 => 5,
        Int32 | UInt32 => 10,
        Int64 => 19,
        _ => 20,
    }
}

/// Date ± interval literal is recognised before the general binary path.
pub(crate) fn interval_literal(e: &Arc<dyn PhysicalExpr>) -> Option<ScalarValue> {
    let l = e.downcast_ref::<Literal>()?;
    matches!(l.value().data_type(), DataType::Interval(IntervalUnit::YearMonth | IntervalUnit::DayTime | IntervalUnit::MonthDayNano))
        .then(|| l.value().clone())
}

/// Renders the full kernel from its generated parts.
pub(crate) fn render(bindings: &str, nwords: usize, helpers64: &str, body: &str, store_bits: &str) -> String {
    TEMPLATE
        .replace("/*BINDINGS*/", bindings)
        .replace("/*NWORDS*/", &nwords.max(1).to_string())
        .replace("/*HELPERS64*/", helpers64)
        .replace("/*BODY*/", body)
        .replace("/*STORE_BITS*/", store_bits)
}

