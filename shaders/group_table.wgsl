// Grouped aggregation with DENSE TAGS IN DEVICE MEMORY (operators/src/group_table.rs),
// after the region-based state paper (seeds: region-based-state-simd-streaming.txt):
// every row carries its group's dense tag, as in shaders/group_agg/dense.wgsl's dense
// strategy, but each group's state lives in device memory instead of a workgroup
// table, so the group count is bounded by one storage binding (millions of groups,
// e.g. GROUP BY an order key) rather than by workgroup memory. Each row adds itself
// to its group's words with global atomics; the tables outlive a call (one call per
// resident chunk), and at the end only the groups that received rows are compacted
// and read back (operators/src/compact.rs, the group's row count as the flag).
//
// State, one u32 array per word (structure of arrays): `cnt` (rows, or non-NULL
// values of a column) and a 96-bit two's-complement sum `s0 s1 s2`. Adding a 32-bit
// word with atomicAdd wraps at most once, which `old + x < old` detects, so the
// carries propagate exactly in any order of the atomics (as in group_agg/dense.wgsl); an
// addend word of zero is not added at all (small positive values touch cnt and s0
// only).

struct Params {
    n: u32,      // rows of this segment
    groups: u32, // G: rows with an id >= G are skipped (rejected rows)
    flags: u32,
    pad: u32,
}

const WG: u32 = {{WG}}u;
const F_VALID: u32 = 1u;
const F_COUNT: u32 = 2u;

@group(0) @binding(0) var<storage, read> gids: array<u32>;
@group(0) @binding(1) var<storage, read> vals: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> valid: array<u32>;
@group(0) @binding(3) var<storage, read_write> cnt: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> s0: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> s1: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> s2: array<atomic<u32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<storage, read_write> ids: array<u32>;

fn row_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// COUNT(*): one atomic per accepted row.
@compute @workgroup_size(WG)
fn table_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let g = gids[i];
    if (g >= p.groups) { return; }
    atomicAdd(&cnt[g], 1u);
}

// SUM (and the non-NULL count with F_COUNT) of one i64 column.
@compute @workgroup_size(WG)
fn table_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let g = gids[i];
    if (g >= p.groups) { return; }
    if ((p.flags & F_VALID) != 0u && ((valid[i / 32u] >> (i % 32u)) & 1u) == 0u) { return; }
    if ((p.flags & F_COUNT) != 0u) {
        atomicAdd(&cnt[g], 1u);
    }
    let v = vals[i];
    var c0 = 0u;
    if (v.x != 0u) {
        let o0 = atomicAdd(&s0[g], v.x);
        c0 = select(0u, 1u, o0 + v.x < o0);
    }
    // The middle addend is the value's high word plus the low word's carry; it wraps
    // (to 0) only when that word is 0xffffffff and the carry 1: one more carry up.
    let a1 = v.y + c0;
    var c1 = select(0u, 1u, a1 < c0);
    if (a1 != 0u) {
        let o1 = atomicAdd(&s1[g], a1);
        c1 += select(0u, 1u, o1 + a1 < o1);
    }
    let a2 = select(0u, 0xffffffffu, (v.y & 0x80000000u) != 0u) + c1;
    if (a2 != 0u) {
        atomicAdd(&s2[g], a2);
    }
}

// ids[g] = g: the group ids, compacted beside the tables.
@compute @workgroup_size(WG)
fn table_ids(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    ids[i] = i;
}

// HAVING on the device, before the compaction: `ids` holds one flag per group
// (kernel `table_live`: the group received rows), and each condition (kernel
// `table_cond`) clears the flags of the groups it rejects. A condition compares a
// group's count (`cnt`, zero-extended) or its 96-bit sum (`s0 s1 s2`; false where the
// group has no values, SQL's NULL) with the 96-bit constant (c0, c1, c2).
struct CondParams {
    n: u32,
    op: u32,   // 0 <, 1 <=, 2 >, 3 >=, 4 =, 5 <>
    pad0: u32,
    pad: u32,
    c0: u32,
    c1: u32,
    c2: u32,
    pad2: u32,
}

@group(0) @binding(9) var<uniform> cp: CondParams;

@compute @workgroup_size(WG)
fn table_live(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= cp.n) { return; }
    ids[i] = select(0u, 1u, atomicLoad(&cnt[i]) != 0u);
}

// -1, 0 or 1 as (a2 a1 a0) compares with (b2 b1 b0), both signed 96-bit.
fn cmp96(a0: u32, a1: u32, a2: u32, b0: u32, b1: u32, b2: u32) -> i32 {
    if (a2 != b2) { return select(1, -1, bitcast<i32>(a2) < bitcast<i32>(b2)); }
    if (a1 != b1) { return select(1, -1, a1 < b1); }
    if (a0 != b0) { return select(1, -1, a0 < b0); }
    return 0;
}

fn keep(c: i32) -> bool {
    switch cp.op {
        case 0u: { return c < 0; }
        case 1u: { return c <= 0; }
        case 2u: { return c > 0; }
        case 3u: { return c >= 0; }
        case 4u: { return c == 0; }
        default: { return c != 0; }
    }
}

// A condition on a sum (`cnt`: the column's non-NULL count).
@compute @workgroup_size(WG)
fn table_cond_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= cp.n || ids[i] == 0u) { return; }
    if (atomicLoad(&cnt[i]) == 0u ||
        !keep(cmp96(atomicLoad(&s0[i]), atomicLoad(&s1[i]), atomicLoad(&s2[i]), cp.c0, cp.c1, cp.c2))) {
        ids[i] = 0u;
    }
}

// A condition on a count.
@compute @workgroup_size(WG)
fn table_cond_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= cp.n || ids[i] == 0u) { return; }
    if (!keep(cmp96(atomicLoad(&cnt[i]), 0u, 0u, cp.c0, cp.c1, cp.c2))) {
        ids[i] = 0u;
    }
}
