// SkyAlign, stage 4, after each level: the next level's plan and the repacking (plan, repack).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// Repacking after level P.l: the kept working-set points (not dead, |M| > l) go
// to their mask's next slot (stats = each mask's first slot in (|M|, M) order, from
// `plan`), ids and masks together; the order inside a partition is arbitrary.
@compute @workgroup_size(WG)
fn repack(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if i >= level_size(P.l) { return; }
    let m = wq[i];
    let r = widx[i];
    if dead[r] != 0u || countOneBits(m & 0xffffu) <= P.l { return; }
    let pos = atomicAdd(&stats[m & 0xffffu], 1u);
    idx_out[pos] = r;
    wq_out[pos] = m;
}

// plan: after level P.l's iteration, on the device, so that the levels run without
// a readback. One workgroup: the kept points' per-mask counts (cnt[5 ..]) in
// (|M|, M) order, from order position P.tau on (the masks with |M| > l; the others
// hold no kept point), give each mask's first slot in the next working set
// (cur_w, the repacking's cursors); the next level's partition table (aux_w, P.npart
// triples whose masks the host wrote) gets its bounds; the level table's entry of
// the next level (P.shift) gets the working set's size and its dispatch sizes.
const PWG: u32 = 256u;
var<workgroup> p_tot: array<u32, PWG>;

fn dispatch_args(at: u32, groups: u32) {
    var x = groups;
    var y = 1u;
    if groups > P.stride {
        x = P.stride;
        y = (groups + P.stride - 1u) / P.stride;
    }
    lvl_w[at] = x;
    lvl_w[at + 1u] = y;
    lvl_w[at + 2u] = 1u;
}

@compute @workgroup_size(PWG)
fn plan(@builtin(local_invocation_index) lid: u32) {
    let masks = 1u << P.d;
    let off = min(P.tau, masks);
    let per = (masks - off + PWG - 1u) / PWG;
    let a = min(off + lid * per, masks);
    let b = min(a + per, masks);
    // Each lane sums a run of the order, the runs' sums are scanned, and each lane
    // walks its run again writing first slots; four masks a step, so their loads
    // overlap (plain loads through `cnt`: atomic ones were not overlapped).
    var s = 0u;
    var t = a;
    for (; t + 4u <= b; t += 4u) {
        let m0 = ordm[t];
        let m1 = ordm[t + 1u];
        let m2 = ordm[t + 2u];
        let m3 = ordm[t + 3u];
        s += cnt[5u + m0] + cnt[5u + m1] + cnt[5u + m2] + cnt[5u + m3];
    }
    for (; t < b; t++) {
        s += cnt[5u + ordm[t]];
    }
    p_tot[lid] = s;
    workgroupBarrier();
    for (var o = 1u; o < PWG; o <<= 1u) {
        var v = p_tot[lid];
        if lid >= o { v += p_tot[lid - o]; }
        workgroupBarrier();
        p_tot[lid] = v;
        workgroupBarrier();
    }
    var run = p_tot[lid] - s;
    t = a;
    for (; t + 4u <= b; t += 4u) {
        let m0 = ordm[t];
        let m1 = ordm[t + 1u];
        let m2 = ordm[t + 2u];
        let m3 = ordm[t + 3u];
        let c0 = cnt[5u + m0];
        let c1 = cnt[5u + m1];
        let c2 = cnt[5u + m2];
        let c3 = cnt[5u + m3];
        cur_w[m0] = run;
        cur_w[m1] = run + c0;
        cur_w[m2] = run + c0 + c1;
        cur_w[m3] = run + c0 + c1 + c2;
        run += c0 + c1 + c2 + c3;
    }
    for (; t < b; t++) {
        let m = ordm[t];
        cur_w[m] = run;
        run += cnt[5u + m];
    }
    storageBarrier();
    workgroupBarrier();
    for (var k = lid; k < P.npart; k += PWG) {
        let m = aux_w[3u * k];
        let st = cur_w[m];
        aux_w[3u * k + 1u] = st;
        aux_w[3u * k + 2u] = st + cnt[5u + m];
    }
    if lid == 0u {
        let total = p_tot[PWG - 1u];
        let at = P.shift * LVW;
        dispatch_args(at, (total + WG - 1u) / WG);
        dispatch_args(at + 3u, total);
        lvl_w[at + 9u] = total;
    }
}
