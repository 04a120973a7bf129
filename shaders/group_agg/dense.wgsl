// Grouped aggregation, dense tags (after common.wgsl): every row tagged with its
// group, the tables of all groups in workgroup memory, merged into the global
// table.

var<workgroup> w_cnt: array<atomic<u32>, GMAX>;
var<workgroup> w_s0: array<atomic<u32>, GMAX>;
var<workgroup> w_s1: array<atomic<u32>, GMAX>;
var<workgroup> w_s2: array<atomic<u32>, GMAX>;
var<workgroup> w_mn: array<atomic<u32>, GMAX>;
var<workgroup> w_mx: array<atomic<u32>, GMAX>;

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
