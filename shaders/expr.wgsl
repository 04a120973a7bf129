// Row-wise evaluation of compiled SQL expressions: filter predicates and the
// projections fused with them (Ridgeline's expression compiler, src/gpu_expr).
//
// Algorithm: one invocation per row. Each row's predicate bit, and the bits of
// Boolean and validity outputs, are gathered into 32-bit words in workgroup
// memory (atomicOr), then one invocation per word stores it, so bitmaps are
// written with whole-word coalesced stores. Value outputs are stored per row (in
// a fused filter only for selected rows: the compaction that follows reads only
// those). SQL errors (division by zero, overflow) raise err[0] by atomicMax with
// an error code the host turns into DataFusion's error.
//
// Values: integers as i32/u32/i64/u64 (Int8/Int16 widened and wrapped to their
// width after arithmetic); Decimal128 (precision <= 18) as its scaled i64; Date32
// as i32 days; floats as their raw bits, compared by the IEEE total order Arrow
// uses (NaN after +inf, NaN equal to itself) through order-preserving integer
// keys, after normalizing -0.0 to +0.0 as DataFusion does before comparing.
//
// Generated parts: BINDINGS (the arrays), BODY (the row's code), STORE_BITS
// (bitmap word stores), HELPERS64 (64-bit helpers, only where the adapter has
// 64-bit integers).

struct Params { rows: u32, grid: u32, row0_lo: u32, row0_hi: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> err: array<atomic<u32>, 4>;
/*BINDINGS*/

const WG: u32 = {{WG}}u;
const WORDS: u32 = {{WG}}u / 32u;
const NWORDS: u32 = /*NWORDS*/u;
var<workgroup> wbits: array<atomic<u32>, NWORDS>;

// Order-preserving key of an f32's bits (Arrow's total order).
fn fkey32(b: u32) -> u32 {
    return select(b ^ 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// -0.0 as +0.0 (DataFusion normalizes zeros before comparing).
fn fnorm32(b: u32) -> u32 {
    return select(b, 0u, b == 0x80000000u);
}

// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y0: i32, m: i32, d: i32) -> i32 {
    let y = select(y0, y0 - 1, m <= 2);
    let era = select(y, y - 399, y < 0) / 400;
    let yoe = y - era * 400;
    let mp = select(m - 3, m + 9, m <= 2);
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

// (year, month, day) of days since 1970-01-01.
fn civil_from_days(z0: i32) -> vec3<i32> {
    let z = z0 + 719468;
    let era = select(z, z - 146096, z < 0) / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = select(mp + 3, mp - 9, mp >= 10);
    return vec3<i32>(select(yoe + era * 400, yoe + era * 400 + 1, m <= 2), m, d);
}

fn is_leap(y: i32) -> bool {
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

// A date plus whole months, the day clamped to the end of the month (as chrono,
// hence Arrow, does).
fn add_months(date: i32, months: i32) -> i32 {
    if (months == 0) {
        return date;
    }
    let c = civil_from_days(date);
    let total = c.x * 12 + (c.y - 1) + months;
    let y = select(total / 12, (total - 11) / 12, total < 0);
    let m = total - y * 12 + 1;
    var last = 31;
    if (m == 4 || m == 6 || m == 9 || m == 11) {
        last = 30;
    } else if (m == 2) {
        last = select(28, 29, is_leap(y));
    }
    return days_from_civil(y, m, min(c.z, last));
}
/*HELPERS64*/

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let base = wid.y * params.grid + wid.x * WG;
    let r = base + lid;
    if (lid < NWORDS) {
        atomicStore(&wbits[lid], 0u);
    }
    workgroupBarrier();
    var code = 0u;
    if (r < params.rows) {
/*BODY*/
    }
    workgroupBarrier();
    let nwords = (params.rows + 31u) / 32u;
    let word = base / 32u + (lid % WORDS);
    let which = lid / WORDS;
    if (word < nwords) {
/*STORE_BITS*/
    }
    if (code != 0u) {
        atomicMax(&err[0], code);
    }
}
