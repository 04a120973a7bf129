// Workgroup-wide exclusive scan and reduction on subgroup operations, for adapters
// with Features::SUBGROUP. Prepended (after a scan/element/*.wgsl part) to the scan and
// compaction kernels; scan/workgroup/shared.wgsl is the drop-in variant without subgroups.
//
// Scan order ("rank"): subgroup id, then lane. With a workgroup size that is a
// multiple of the largest subgroup size (the Rust side checks it) the subgroups are
// full, so rank = subgroup_id * subgroup_size + lane is a permutation of 0..WG.
// The subgroup size is read from the builtin, never assumed (8 or 4 on lavapipe,
// 32 on NVIDIA).
//
// Two levels: a subgroup scan of each invocation's value, then the first subgroup
// scans the per-subgroup totals, a subgroup-size chunk at a time, carrying the
// running total across chunks (there can be more subgroups than lanes: 256 / 8 = 32
// on lavapipe).

const WG: u32 = {{WG}}u;

struct Inv {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) nsg: u32,
}

struct WgScan {
    ex: T,      // exclusive prefix of this invocation's value, in rank order
    total: T,   // the workgroup's total
}

// One slot per subgroup (at most WG of them).
var<workgroup> wg_part: array<T, WG>;
var<workgroup> wg_total: T;

// The position of this invocation in the scan order.
fn rank_of(inv: Inv) -> u32 {
    return inv.sg_id * inv.sg_size + inv.lane;
}

// Exclusive scan of the per-subgroup totals in wg_part (by the first subgroup);
// leaves each subgroup's offset in wg_part and the total in wg_total.
fn wg_scan_parts(inv: Inv) {
    if (inv.sg_id == 0u) {
        var carry = zero();
        for (var base = 0u; base < inv.nsg; base += inv.sg_size) {
            let i = base + inv.lane;
            var v = zero();
            if (i < inv.nsg) {
                v = wg_part[i];
            }
            let e = from_sg(subgroupExclusiveAdd(to_sg(v)));
            let s = from_sg(subgroupAdd(to_sg(v)));
            if (i < inv.nsg) {
                wg_part[i] = add(carry, e);
            }
            carry = add(carry, s);
        }
        if (inv.lane == 0u) {
            wg_total = carry;
        }
    }
}

// Exclusive scan of x over the workgroup. Every invocation must call it (it has
// barriers); it may be called repeatedly.
fn wg_excl_scan(inv: Inv, x: T) -> WgScan {
    let ex = from_sg(subgroupExclusiveAdd(to_sg(x)));
    workgroupBarrier(); // earlier users of wg_part are done
    if (inv.lane == inv.sg_size - 1u) {
        wg_part[inv.sg_id] = add(ex, x);
    }
    workgroupBarrier();
    wg_scan_parts(inv);
    workgroupBarrier();
    return WgScan(add(wg_part[inv.sg_id], ex), wg_total);
}

// Sum of x over the workgroup, returned to every invocation. Every invocation must
// call it.
fn wg_reduce(inv: Inv, x: T) -> T {
    let s = from_sg(subgroupAdd(to_sg(x)));
    workgroupBarrier();
    if (inv.lane == 0u) {
        wg_part[inv.sg_id] = s;
    }
    workgroupBarrier();
    wg_scan_parts(inv);
    workgroupBarrier();
    return wg_total;
}
