// Workgroup-wide exclusive scan and reduction in workgroup memory only (no subgroup
// operations): the portable variant of scan/workgroup/subgroup.wgsl, with the same
// interface (Inv, WgScan, rank_of, wg_excl_scan, wg_reduce).
//
// Scan: Hillis-Steele (recursive doubling) over WG values, double-buffered in one
// array of 2 * WG slots so each of the log2(WG) steps needs a single barrier.
// Reduction: a binary tree in workgroup memory. Scan order: local_invocation_index.

const WG: u32 = {{WG}}u;

struct Inv {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
}

struct WgScan {
    ex: T,      // exclusive prefix of this invocation's value, in rank order
    total: T,   // the workgroup's total
}

var<workgroup> wg_buf: array<T, 2 * WG>;

fn rank_of(inv: Inv) -> u32 {
    return inv.lid;
}

// Exclusive scan of x over the workgroup. Every invocation must call it (it has
// barriers); it may be called repeatedly.
fn wg_excl_scan(inv: Inv, x: T) -> WgScan {
    let r = inv.lid;
    workgroupBarrier(); // earlier users of wg_buf are done
    wg_buf[r] = x;
    workgroupBarrier();
    var pin = 0u;
    for (var off = 1u; off < WG; off <<= 1u) {
        var v = wg_buf[pin + r];
        if (r >= off) {
            v = add(wg_buf[pin + r - off], v);
        }
        wg_buf[(WG - pin) + r] = v;
        pin = WG - pin;
        workgroupBarrier();
    }
    var ex = zero();
    if (r > 0u) {
        ex = wg_buf[pin + r - 1u];
    }
    return WgScan(ex, wg_buf[pin + WG - 1u]);
}

// Sum of x over the workgroup, returned to every invocation. Every invocation must
// call it.
fn wg_reduce(inv: Inv, x: T) -> T {
    let r = inv.lid;
    workgroupBarrier();
    wg_buf[r] = x;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (r < s) {
            wg_buf[r] = add(wg_buf[r], wg_buf[r + s]);
        }
    }
    workgroupBarrier();
    return wg_buf[0];
}
