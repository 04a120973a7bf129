// select/topk.wgsl: the top-k row filter

@group(0) @binding(0) var<storage, read> t_src: array<K>;
@group(0) @binding(1) var<storage, read> t_thr: array<K>;
@group(0) @binding(2) var<storage, read_write> t_counts: array<u32>;   // [lt per block | eq per block] or offsets
@group(0) @binding(3) var<uniform> t_p: TkParams;
@group(0) @binding(4) var<storage, read_write> t_out: array<u32>;

var<workgroup> tsum: array<u32, WG>;

// Packed per-thread counts of ITEMS consecutive rows: keys < t in bits 0-15, keys == t in bits 16-31.
fn tk_flags(inv: Inv, base: u32, t: K) -> u32 {
    var c = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + inv.lid * ITEMS + it;
        if (r < t_p.n) {
            let x = t_src[r];
            c += select(0u, 1u, kless(x, t)) + select(0u, 0x10000u, keq(x, t));
        }
    }
    return c;
}

// Inclusive Hillis-Steele scan of tsum over the workgroup.
fn tk_scan(inv: Inv, v: u32) -> u32 {
    tsum[inv.lid] = v;
    workgroupBarrier();
    for (var o = 1u; o < WG; o <<= 1u) {
        var s = tsum[inv.lid];
        if (inv.lid >= o) {
            s += tsum[inv.lid - o];
        }
        workgroupBarrier();
        tsum[inv.lid] = s;
        workgroupBarrier();
    }
    return tsum[inv.lid];
}

// The same counts of the block's rows base + it * WG + lid (contiguous loads across
// the subgroup; the count needs only the block's totals, not the rows' order).
fn tk_flags_strided(inv: Inv, base: u32, t: K) -> u32 {
    var c = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + it * WG + inv.lid;
        if (r < t_p.n) {
            let x = t_src[r];
            c += select(0u, 1u, kless(x, t)) + select(0u, 0x10000u, keq(x, t));
        }
    }
    return c;
}

@compute @workgroup_size(WG)
fn tk_count(inv: Inv) {
    let blk = group_index(inv);
    let base = blk * CHUNK;
    if (base >= t_p.n) {
        return; // whole workgroup
    }
    let t = t_thr[0];
    let total = tk_scan(inv, tk_flags_strided(inv, base, t));
    if (inv.lid == WG - 1u) {
        t_counts[t_p.block_base + blk] = total & 0xffffu;
        t_counts[t_p.blocks + t_p.block_base + blk] = total >> 16u;
    }
}

@compute @workgroup_size(WG)
fn tk_scatter(inv: Inv) {
    let blk = group_index(inv);
    let base = blk * CHUNK;
    if (base >= t_p.n) {
        return; // whole workgroup
    }
    // Blocks that take no row (every block but about k of them) stop here without
    // reading a key: by the offsets, no key < t and no taken key == t is in them.
    let gb = t_p.block_base + blk;
    let lt0 = t_counts[gb];
    var lt1 = t_p.lt_total;
    var eq_rows = true;   // the last block: its eq offset below need means it has some
    if (gb + 1u < t_p.blocks) {
        lt1 = t_counts[gb + 1u];
        eq_rows = t_counts[t_p.blocks + gb + 1u] > t_counts[t_p.blocks + gb];
    }
    if (lt1 == lt0 && !(eq_rows && t_counts[t_p.blocks + gb] < t_p.need)) {
        return; // whole workgroup
    }
    let t = t_thr[0];
    let mine = tk_flags(inv, base, t);
    let incl = tk_scan(inv, mine);
    let ex = incl - mine;
    var lt = t_counts[t_p.block_base + blk] + (ex & 0xffffu);              // keys < t before this row
    var eq = t_counts[t_p.blocks + t_p.block_base + blk] + (ex >> 16u);    // keys == t before this row
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + inv.lid * ITEMS + it;
        if (r < t_p.n) {
            let x = t_src[r];
            var take = false;
            var pos = 0u;
            if (kless(x, t)) {
                // Every row < t is taken; before it: the rows < t and the taken rows == t.
                take = true;
                pos = lt + min(eq, t_p.need);
                lt += 1u;
            } else if (keq(x, t)) {
                take = eq < t_p.need;
                pos = lt + eq;
                eq += 1u;
            }
            if (take && pos >= t_p.win_lo && pos - t_p.win_lo < t_p.win_len) {
                t_out[pos - t_p.win_lo] = t_p.row0 + r;
            }
        }
    }
}
