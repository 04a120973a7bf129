// Blocked tile layout of scan/single_pass.wgsl (any adapter): invocation r (in the
// workgroup scan's rank order) owns the VPT consecutive vectors r * VPT ..; with
// XPOSE the tile goes through workgroup memory (invocations load and store
// neighbouring 16-byte vectors, one padding vector every 8 to spread the blocked
// accesses over the banks) so global accesses are coalesced; without it each
// invocation reads and writes its own vectors.

const XPOSE: bool = {{XPOSE}};
var<workgroup> xbuf: array<S, {{XPOSE_VECS}}>;

// This invocation's exclusive prefix inside the tile (set by tile_scan).
var<private> blk_ex: T;

fn xi(i: u32) -> u32 {
    return i + i / 8u;
}

// Loads this invocation's vectors of local tile tl into `vals` and returns their sum.
fn load_tile(tl: u32, r: u32, lid: u32) -> T {
    let first = tl * TILE_VECS + r * VPT;
    var sum = zero();
    if (XPOSE) {
        for (var j = 0u; j < VPT; j++) {
            let li = j * WG + lid;
            xbuf[xi(li)] = load_vec(tl * TILE_VECS + li);
        }
        workgroupBarrier();
        for (var j = 0u; j < VPT; j++) {
            vals[j] = xbuf[xi(r * VPT + j)];
        }
    } else {
        for (var j = 0u; j < VPT; j++) {
            vals[j] = load_vec(first + j);
        }
    }
    for (var j = 0u; j < VPT; j++) {
        sum = add_vec(sum, vals[j]);
    }
    return sum;
}

// Loads and scans local tile tl; returns the tile's total. Every invocation calls it.
fn tile_scan(tl: u32, inv: Inv) -> T {
    let sc = wg_excl_scan(inv, load_tile(tl, rank_of(inv), inv.lid));
    blk_ex = sc.ex;
    return sc.total;
}

// The same total as tile_scan, computed in the same order (so even f32 bits agree),
// without keeping the values: the fallback's reduction of a predecessor tile.
fn tile_sum(tl: u32, inv: Inv) -> T {
    let first = tl * TILE_VECS + rank_of(inv) * VPT;
    var sum = zero();
    for (var j = 0u; j < VPT; j++) {
        sum = add_vec(sum, load_vec(first + j));
    }
    return wg_excl_scan(inv, sum).total;
}

// Writes the prefix sums of the tile scanned last, after `prefix`.
fn tile_store(tl: u32, inv: Inv, prefix: T, exclusive: bool) {
    let r = rank_of(inv);
    var carry = add(prefix, blk_ex);
    let first = tl * TILE_VECS + r * VPT;
    for (var j = 0u; j < VPT; j++) {
        let vi = first + j;
        let pc = vec_prefix(carry, vals[j], exclusive);
        carry = pc[1].x;
        if (XPOSE) {
            xbuf[xi(r * VPT + j)] = pc[0];
        } else if (vi < p.nvec) {
            dst[vi] = pc[0];
        }
    }
    if (XPOSE) {
        workgroupBarrier();
        for (var j = 0u; j < VPT; j++) {
            let li = j * WG + inv.lid;
            let vi = tl * TILE_VECS + li;
            if (vi < p.nvec) {
                dst[vi] = xbuf[xi(li)];
            }
        }
    }
}
