// select/chain_window.wgsl: after chain.wgsl and chain_first.wgsl or chain_next.wgsl

var<workgroup> cw_m: u32;
var<workgroup> cw_below: atomic<u32>;
var<workgroup> cw_in: atomic<u32>;
var<workgroup> cw_base: u32;
var<workgroup> cw_cnt: u32;

// Counts the workgroup's keys of base .. base + CHUNK (below m) below and inside
// [lo, hi] into cw_below and cw_in (cleared by the caller before a barrier).
fn count_chunk(lid: u32, base: u32, m: u32, lo: K, hi: K) {
    var below = 0u;
    var inside = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i < m) {
            let x = load_src(i);
            let lt = kless(x, lo);
            below += select(0u, 1u, lt);
            inside += select(0u, 1u, !lt && !kless(hi, x));
        }
    }
    if (below != 0u) {
        atomicAdd(&cw_below, below);
    }
    if (inside != 0u) {
        atomicAdd(&cw_in, inside);
    }
    workgroupBarrier();
}

// Copies the workgroup's keys inside [lo, hi] to ch_dst from slot `at` on (slots
// from cap on are dropped: the check fails the chain then); cw_in counts them.
fn copy_chunk(lid: u32, base: u32, m: u32, lo: K, hi: K, at: u32, cap: u32) {
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i < m) {
            let x = load_src(i);
            if (!kless(x, lo) && !kless(hi, x)) {
                let j = at + atomicAdd(&cw_in, 1u);
                if (j < cap) {
                    ch_dst[j] = x;
                }
            }
        }
    }
}

// (One invocation.) Reserves c slots of the next region for the workgroup: their
// first in cw_base, c in cw_cnt; clears cw_in for the copy.
fn reserve(c: u32) {
    var at = 0u;
    if (c != 0u) {
        at = atomicAdd(&ch_st[ST_CUR], c);
    }
    cw_base = at;
    cw_cnt = c;
    atomicStore(&cw_in, 0u);
}

// One level's window pass: count, reserve, copy (on the first level once per
// input piece, the chunk read twice, the second time mostly from the cache).
@compute @workgroup_size(WG)
fn ch_window(inv: Inv) {
    if (inv.lid == 0u) {
        cw_m = region_len();
        atomicStore(&cw_below, 0u);
        atomicStore(&cw_in, 0u);
    }
    let m = workgroupUniformLoad(&cw_m);
    let base = group_index(inv) * CHUNK;
    if (base >= m) {
        return;
    }
    let lo = ch_smp[SLOT];
    let hi = ch_smp[SLOT + 1u];
    count_chunk(inv.lid, base, m, lo, hi);
    if (inv.lid == 0u) {
        let b = atomicLoad(&cw_below);
        if (b != 0u) {
            atomicAdd(&ch_st[ST_BELOW], b);
        }
        reserve(atomicLoad(&cw_in));
    }
    if (workgroupUniformLoad(&cw_cnt) == 0u) {
        return;
    }
    copy_chunk(inv.lid, base, m, lo, hi, cw_base, chain_cap(atomicLoad(&ch_st[ST_LEVEL])));
}

// Before the final sort (sort_sample over S keys): the last region's slots past
// its m keys get kmax(); a region of more than S keys fails the chain (3).
@compute @workgroup_size(WG)
fn ch_pad(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (chain_stopped()) {
        return;
    }
    let m = atomicLoad(&ch_st[ST_M]);
    if (m > S) {
        if (i == 0u) {
            atomicStore(&ch_st[ST_FAIL], 3u);
        }
        return;
    }
    if (i >= m && i < S) {
        ch_dst[i] = kmax();
    }
}

@compute @workgroup_size(1)
fn ch_check() {
    if (chain_stopped()) {
        return;
    }
    let shift = atomicLoad(&ch_st[ST_SHIFT]);
    let below = atomicLoad(&ch_st[ST_BELOW]);
    let inside = atomicLoad(&ch_st[ST_CUR]);
    let rl = ch_u.rlo - shift;
    let rh = ch_u.rhi - shift;
    if (rl < below || rh - below >= inside) {
        atomicStore(&ch_st[ST_FAIL], 1u);
        return;
    }
    if (ch_u.topk == 0u && keq(ch_smp[SLOT], ch_smp[SLOT + 1u])) {
        atomicStore(&ch_st[ST_DONE], 1u);
        return;
    }
    let level = atomicLoad(&ch_st[ST_LEVEL]);
    if (inside > chain_cap(level)) {
        atomicStore(&ch_st[ST_FAIL], 2u);
        return;
    }
    atomicStore(&ch_st[ST_M], inside);
    atomicStore(&ch_st[ST_SHIFT], shift + below);
    atomicStore(&ch_st[ST_LEVEL], level + 1u);
}
