// SkyAlign, stage 3: masks and the counting sort by (|M|, M) (mask_hist, scatter).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// aux[j * 3 + q]: quartile q + 1 of dimension j.
fn masks(r: u32) -> vec2<u32> {
    let base = r * P.d;
    var m = 0u;
    var qm = 0u;
    for (var j = 0u; j < P.d; j++) {
        let v = ranks[base + j];
        let above = v > aux[j * 3u + 1u];
        let pivot = select(aux[j * 3u], aux[j * 3u + 2u], above);
        m |= select(0u, 1u << j, above);
        qm |= select(0u, 1u << j, v > pivot);
    }
    return vec2<u32>(m, qm);
}

// Writes mq[r] = M | Q << 16 and dead[r] = 0 for the surviving rows (dead[r] = 1
// for the rest) and counts the surviving rows per M.
@compute @workgroup_size(WG)
fn mask_hist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n { return; }
    if r == 0u {
        // aux is qpick's state: the surviving rows and the error flag follow the
        // 2^d counts, so one readback brings all three.
        atomicStore(&stats[1u << P.d], aux[6u * P.d]);
        atomicStore(&stats[(1u << P.d) + 1u], aux[6u * P.d + 1u]);
    }
    if !survives(r) {
        dead[r] = 1u;
        return;
    }
    let m = masks(r);
    mq[r] = m.x | (m.y << 16u);
    dead[r] = 0u;
    atomicAdd(&stats[m.x], 1u);
}

// Counting-sort scatter: the surviving row ids in (|M|, M) order (stats = each
// mask's next slot); the order inside one partition is arbitrary.
@compute @workgroup_size(WG)
fn scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n || dead[r] != 0u { return; }
    let m = mq[r];
    let pos = atomicAdd(&stats[m & 0xffffu], 1u);
    keep[pos] = r;
    wq[pos] = m;
}
