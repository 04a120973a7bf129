// Grouped aggregation (operators/src/group_agg.rs) after the region-based state
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

var<workgroup> w_cnt: array<atomic<u32>, GMAX>;
var<workgroup> w_s0: array<atomic<u32>, GMAX>;
var<workgroup> w_s1: array<atomic<u32>, GMAX>;
var<workgroup> w_s2: array<atomic<u32>, GMAX>;
var<workgroup> w_mn: array<atomic<u32>, GMAX>;
var<workgroup> w_mx: array<atomic<u32>, GMAX>;

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

// Adds the 96-bit value (a0, a1, a2) to the global words at `b`.
fn global_add96(b: u32, a0: u32, a1: u32, a2: u32) {
    let o0 = atomicAdd(&tbl[b], a0);
    let c0 = select(0u, 1u, o0 + a0 < o0);
    let o1 = atomicAdd(&tbl[b + 1u], a1);
    var c1 = select(0u, 1u, o1 + a1 < o1);
    if (c0 != 0u) {
        let o1b = atomicAdd(&tbl[b + 1u], 1u);
        c1 += select(0u, 1u, o1b == 0xffffffffu);
    }
    atomicAdd(&tbl[b + 2u], a2 + c1);
}

// Adds the i64 `v` (sign-extended to 96 bits) to group g's workgroup sum.
fn local_add96(g: u32, v: vec2<u32>) {
    local_add96w(g, v.x, v.y, select(0u, 0xffffffffu, (v.y & 0x80000000u) != 0u));
}

// Adds the 96-bit value (a0, a1, a2) to group g's workgroup sum.
fn local_add96w(g: u32, a0: u32, a1: u32, a2: u32) {
    let o0 = atomicAdd(&w_s0[g], a0);
    let c0 = select(0u, 1u, o0 + a0 < o0);
    let o1 = atomicAdd(&w_s1[g], a1);
    var c1 = select(0u, 1u, o1 + a1 < o1);
    if (c0 != 0u) {
        let o1b = atomicAdd(&w_s1[g], 1u);
        c1 += select(0u, 1u, o1b == 0xffffffffu);
    }
    atomicAdd(&w_s2[g], a2 + c1);
}

// Adds the workgroup table into the global one (after a barrier); `minmax`: with
// the high words of min/max.
fn flush_wg_table(lid: u32, minmax: bool) {
    for (var g = lid; g < p.groups; g += WG) {
        let c = atomicLoad(&w_cnt[g]);
        if (c == 0u) { continue; }
        let b = g * 8u;
        atomicAdd(&tbl[b], c);
        if ((p.flags & F_ROWS) != 0u) { continue; }
        if ((p.flags & F_SUM) != 0u) {
            global_add96(b + 1u, atomicLoad(&w_s0[g]), atomicLoad(&w_s1[g]), atomicLoad(&w_s2[g]));
        }
        if (minmax) {
            atomicMin(&tbl[b + 4u], atomicLoad(&w_mn[g]));
            atomicMax(&tbl[b + 5u], atomicLoad(&w_mx[g]));
        }
    }
}

// Empties the workgroup table (every invocation its share of the groups).
fn clear_wg_table(lid: u32) {
    for (var g = lid; g < p.groups; g += WG) {
        atomicStore(&w_cnt[g], 0u);
        atomicStore(&w_s0[g], 0u);
        atomicStore(&w_s1[g], 0u);
        atomicStore(&w_s2[g], 0u);
        atomicStore(&w_mn[g], 0xffffffffu);
        atomicStore(&w_mx[g], 0u);
    }
}

@compute @workgroup_size(WG)
fn init_table(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.groups * 8u) { return; }
    let k = i % 8u;
    atomicStore(&tbl[i], select(0u, 0xffffffffu, k == 4u || k == 6u));
}

// Dense tags, kernel 1: counts, sums, high words of min/max per tile.
@compute @workgroup_size(WG)
fn dense_main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    clear_wg_table(lid);
    workgroupBarrier();
    let end = min(tile * TILE + TILE, p.n);
    for (var r = tile * TILE + lid; r < end; r += WG) {
        let g = gids[r];
        if (g >= p.groups) { continue; } // caller error: ids >= G are ignored, never written out of bounds
        if ((p.flags & F_ROWS) != 0u) {
            atomicAdd(&w_cnt[g], 1u);
        } else if (is_valid(r)) {
            atomicAdd(&w_cnt[g], 1u);
            let v = vals[r];
            if ((p.flags & F_SUM) != 0u) { local_add96(g, v); }
            let k = sort_key(v);
            atomicMin(&w_mn[g], k.y);
            atomicMax(&w_mx[g], k.y);
        }
    }
    workgroupBarrier();
    flush_wg_table(lid, true);
}

// Dense tags with at most SMALL_G groups (`dense_small`, replacing `dense_main`):
// with so few groups nearly every row of a tile hits the same few workgroup words,
// and the atomics serialise (TPC-H Q1: 4 groups, 2 ms a chunk of 3.75M rows on an
// H100). Here every invocation first folds its own rows into private state for
// all SMALL_G groups (a constant loop over the groups with selects, so the state
// stays in registers: exact 96-bit sums with carries, counts, high words of
// min/max), then adds that state to the workgroup table once: one set of atomics
// per invocation and group instead of one per row. The workgroup table goes to
// the global table as in `dense_main`. F_MINMAX off skips the min/max words
// (`dense_main` always keeps them). The host runs it in tiles of at most 2,048
// rows. Off by default (`GroupAggOptions::small_groups`) until measured faster.
const SMALL_G: u32 = 8u;
const F_MINMAX: u32 = 16u;

@compute @workgroup_size(WG)
fn dense_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    clear_wg_table(lid);
    var cnt: array<u32, SMALL_G>;
    var s0: array<u32, SMALL_G>;
    var s1: array<u32, SMALL_G>;
    var s2: array<u32, SMALL_G>;
    var mn: array<u32, SMALL_G>;
    var mx: array<u32, SMALL_G>;
    for (var k = 0u; k < SMALL_G; k++) {
        mn[k] = 0xffffffffu;
    }
    let rows_only = (p.flags & F_ROWS) != 0u;
    let sums = (p.flags & F_SUM) != 0u;
    let minmax = (p.flags & F_MINMAX) != 0u;
    let end = min(tile * TILE + TILE, p.n);
    for (var r = tile * TILE + lid; r < end; r += WG) {
        let g = gids[r];
        // ids >= G are ignored (caller error), as in dense_main
        if (g >= p.groups || !(rows_only || is_valid(r))) { continue; }
        var v = vec2<u32>(0u, 0u);
        if (!rows_only) { v = vals[r]; }
        let a2 = select(0u, 0xffffffffu, (v.y & 0x80000000u) != 0u);
        let key = sort_key(v).y;
        for (var k = 0u; k < SMALL_G; k++) {
            let m = g == k;
            cnt[k] += select(0u, 1u, m);
            if (sums) {
                let x0 = select(0u, v.x, m);
                let x1 = select(0u, v.y, m);
                let n0 = s0[k] + x0;
                let c0 = select(0u, 1u, n0 < x0);
                let n1 = s1[k] + x1;
                let c1 = select(0u, 1u, n1 < x1);
                let n1c = n1 + c0;
                let c1c = select(0u, 1u, n1c < c0);
                s0[k] = n0;
                s1[k] = n1c;
                s2[k] += select(0u, a2, m) + c1 + c1c;
            }
            if (minmax) {
                mn[k] = select(mn[k], min(mn[k], key), m);
                mx[k] = select(mx[k], max(mx[k], key), m);
            }
        }
    }
    workgroupBarrier();
    for (var k = 0u; k < SMALL_G; k++) {
        if (k >= p.groups || cnt[k] == 0u) { continue; }
        atomicAdd(&w_cnt[k], cnt[k]);
        if (sums) { local_add96w(k, s0[k], s1[k], s2[k]); }
        if (minmax) {
            atomicMin(&w_mn[k], mn[k]);
            atomicMax(&w_mx[k], mx[k]);
        }
    }
    workgroupBarrier();
    flush_wg_table(lid, minmax);
}

// Dense tags, kernel 2: low words of min/max among rows whose high word is the
// group's final one.
@compute @workgroup_size(WG)
fn dense_lo(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    for (var g = lid; g < p.groups; g += WG) {
        atomicStore(&w_mn[g], 0xffffffffu);
        atomicStore(&w_mx[g], 0u);
        atomicStore(&w_cnt[g], 0u);
    }
    workgroupBarrier();
    let end = min(tile * TILE + TILE, p.n);
    for (var r = tile * TILE + lid; r < end; r += WG) {
        let g = gids[r];
        if (g < p.groups && is_valid(r)) {
            let k = sort_key(vals[r]);
            if (k.y == atomicLoad(&tbl[g * 8u + 4u])) { atomicMin(&w_mn[g], k.x); atomicStore(&w_cnt[g], 1u); }
            if (k.y == atomicLoad(&tbl[g * 8u + 5u])) { atomicMax(&w_mx[g], k.x); atomicStore(&w_cnt[g], 1u); }
        }
    }
    workgroupBarrier();
    for (var g = lid; g < p.groups; g += WG) {
        if (atomicLoad(&w_cnt[g]) == 0u) { continue; }
        atomicMin(&tbl[g * 8u + 6u], atomicLoad(&w_mn[g]));
        atomicMax(&tbl[g * 8u + 7u], atomicLoad(&w_mx[g]));
    }
}

// Sparse regions, two-level segmented reduction. The host cuts every group's
// region (roffs[g] .. roffs[g + 1] of the partitioned columns) into pieces of at
// most PIECE rows that do not cross a segment (pieces[2k], pieces[2k + 1]: first
// and end row). `piece_reduce` (one dispatch per segment, one invocation per
// piece of the segment) reduces a piece into its 8-word partial in ptbl;
// `piece_merge` (one invocation per group) folds the group's pieces
// (poffs[g] .. poffs[g + 1], in row order) into the table. No atomics are needed
// for the arithmetic, and a huge (skewed) region is spread over many invocations.

struct St {
    cnt: u32,
    s0: u32,
    s1: u32,
    s2: u32,
    mn: vec2<u32>,
    mx: vec2<u32>,
}

fn st_new() -> St {
    return St(0u, 0u, 0u, 0u, vec2<u32>(0xffffffffu, 0xffffffffu), vec2<u32>(0u, 0u));
}

// Adds the 96-bit (a0, a1, a2) into the state's sum.
fn st_add96(st: ptr<function, St>, a0: u32, a1: u32, a2: u32) {
    let t0 = (*st).s0 + a0;
    let c0 = select(0u, 1u, t0 < (*st).s0);
    let t1 = (*st).s1 + a1;
    var c1 = select(0u, 1u, t1 < (*st).s1);
    let t1b = t1 + c0;
    c1 += select(0u, 1u, t1b < t1);
    (*st).s0 = t0;
    (*st).s1 = t1b;
    (*st).s2 = (*st).s2 + a2 + c1;
}

fn st_key(st: ptr<function, St>, kmn: vec2<u32>, kmx: vec2<u32>) {
    if (key_less(kmn, (*st).mn)) { (*st).mn = kmn; }
    if (key_less((*st).mx, kmx)) { (*st).mx = kmx; }
}

@group(0) @binding(6) var<storage, read> pieces: array<u32>;
@group(0) @binding(7) var<storage, read_write> ptbl: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn piece_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = (wid.x + wid.y * nwg.x) * WG + lid;
    if (k >= p.tiles) { return; }
    let pc = p.groups + k; // p.groups: first piece of this segment
    let lo = pieces[2u * pc];
    let hi = pieces[2u * pc + 1u];
    var st = st_new();
    for (var gr = lo; gr < hi; gr++) {
        let r = gr - p.row_base;
        if (!is_valid(r)) { continue; }
        st.cnt += 1u;
        let v = vals[r];
        if ((p.flags & F_SUM) != 0u) {
            st_add96(&st, v.x, v.y, select(0u, 0xffffffffu, (v.y & 0x80000000u) != 0u));
        }
        let key = sort_key(v);
        st_key(&st, key, key);
    }
    let b = pc * 8u;
    atomicStore(&ptbl[b], st.cnt);
    atomicStore(&ptbl[b + 1u], st.s0);
    atomicStore(&ptbl[b + 2u], st.s1);
    atomicStore(&ptbl[b + 3u], st.s2);
    atomicStore(&ptbl[b + 4u], st.mn.y);
    atomicStore(&ptbl[b + 5u], st.mx.y);
    atomicStore(&ptbl[b + 6u], st.mn.x);
    atomicStore(&ptbl[b + 7u], st.mx.x);
}

@compute @workgroup_size(WG)
fn piece_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = (wid.x + wid.y * nwg.x) * WG + lid;
    if (g >= p.groups) { return; }
    var st = st_new();
    for (var pc = roffs[g]; pc < roffs[g + 1u]; pc++) {
        let b = pc * 8u;
        st.cnt += atomicLoad(&ptbl[b]);
        st_add96(&st, atomicLoad(&ptbl[b + 1u]), atomicLoad(&ptbl[b + 2u]), atomicLoad(&ptbl[b + 3u]));
        let kmn = vec2<u32>(atomicLoad(&ptbl[b + 6u]), atomicLoad(&ptbl[b + 4u]));
        let kmx = vec2<u32>(atomicLoad(&ptbl[b + 7u]), atomicLoad(&ptbl[b + 5u]));
        st_key(&st, kmn, kmx);
    }
    let b = g * 8u;
    atomicStore(&tbl[b], st.cnt);
    atomicStore(&tbl[b + 1u], st.s0);
    atomicStore(&tbl[b + 2u], st.s1);
    atomicStore(&tbl[b + 3u], st.s2);
    atomicStore(&tbl[b + 4u], st.mn.y);
    atomicStore(&tbl[b + 5u], st.mx.y);
    atomicStore(&tbl[b + 6u], st.mn.x);
    atomicStore(&tbl[b + 7u], st.mx.x);
}
