// Grouped aggregation (operators/src/group_agg/) after the region-based state
// of "region-based state on SIMD streaming" (seeds: region-based-state-simd-
// streaming.txt): rows carry a dense group id; a group's state is carried either
// as DENSE TAGS (every row tagged with its group, tables of all groups in
// workgroup memory, merged into the global table) or over SPARSE REGIONS (rows
// partitioned so every group is one contiguous region given by offsets, one
// segmented reduction per region).
//
// No 64-bit types are used (WGSL lacks them on most adapters):
// * SUM of i64: a 96-bit two's-complement accumulator of three u32 words
//   (s0, s1, s2). Adding a 32-bit word with atomicAdd wraps at most once, which
//   `old + x < old` detects, so carries propagate exactly in any order of the
//   atomics: the result is the exact sum (|sum| < 2^95 for < 2^32 rows). The host
//   checks that it fits i64 (overflow is an error).
// * MIN/MAX: order-preserving 64-bit keys (i64: sign bit flipped; f64: Arrow's
//   total order, NaN canonical after +inf, the crate's select::key_f64) compared as
//   (hi, lo). Dense tags take the high word with atomicMin/Max in kernel
//   `dense_main`, then the low word of the rows whose high word equals the
//   group's final high word in kernel `dense_lo` (a second read of the rows).
// * COUNT: u32 atomics per group (non-NULL rows; COUNT(*) is the same kernel with
//   F_ROWS, which reads no values).
//
// Global table, 8 words per group: [cnt, s0, s1, s2, min_hi, max_hi, min_lo, max_lo].
//
// This file holds what both strategies share (parameters, bindings, keys, the
// table's initialisation); the host compiles it followed by dense.wgsl (dense tags)
// or sparse.wgsl (sparse regions).

struct Params {
    n: u32,        // rows of this segment
    groups: u32,   // G
    flags: u32,
    row_base: u32, // first row of this segment
    tiles: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

const WG: u32 = {{WG}}u;
const TILE: u32 = {{TILE}}u;
const GMAX: u32 = {{GMAX}}u;
const F_VALID: u32 = 1u;
const F_ROWS: u32 = 2u;
const F_F64: u32 = 4u;
const F_SUM: u32 = 8u;

@group(0) @binding(0) var<storage, read> gids: array<u32>;
@group(0) @binding(1) var<storage, read> vals: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> valid: array<u32>;
@group(0) @binding(3) var<storage, read_write> tbl: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> roffs: array<u32>;
@group(0) @binding(5) var<uniform> p: Params;


fn key_less(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}

fn is_valid(i: u32) -> bool {
    return (p.flags & F_VALID) == 0u || ((valid[i / 32u] >> (i % 32u)) & 1u) != 0u;
}

// Order-preserving key (x = low word, y = high word).
fn sort_key(v: vec2<u32>) -> vec2<u32> {
    if ((p.flags & F_F64) == 0u) {
        return vec2<u32>(v.x, v.y ^ 0x80000000u);
    }
    let exp = (v.y >> 20u) & 0x7ffu;
    if (exp == 0x7ffu && ((v.y & 0xfffffu) != 0u || v.x != 0u)) {
        return vec2<u32>(0u, 0xfff80000u);
    }
    if ((v.y & 0x80000000u) != 0u) {
        return vec2<u32>(~v.x, ~v.y);
    }
    return vec2<u32>(v.x, v.y | 0x80000000u);
}

// Fills the global table: zero, and the min words with their identity.
@compute @workgroup_size(WG)
fn init_table(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.groups * 8u) { return; }
    let k = i % 8u;
    atomicStore(&tbl[i], select(0u, 0xffffffffu, k == 4u || k == 6u));
}
