// Probe, pass 1 (appended to common.wgsl): every probe row's number of matching
// build rows (summed over the rounds of a long bucket), and their 64-bit total (so the host can tell whether the pairs
// fit before the u32 prefix sum of the counts is trusted). The total is summed
// per workgroup with a carry word, then added to the global low/high words the
// same way: a carry out of the low word is detected by the wrap of the atomic's
// old value, exactly once per addition.

@group(0) @binding(7) var<storage, read_write> counts: array<u32>;
@group(0) @binding(8) var<storage, read_write> total: array<atomic<u32>, 2>;

var<workgroup> wlo: atomic<u32>;
var<workgroup> whi: atomic<u32>;

@compute @workgroup_size(WG)
fn count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&wlo, 0u);
        atomicStore(&whi, 0u);
    }
    workgroupBarrier();
    let i = dispatch_row(wid, lid);
    let w = walk_of(i);
    var c = 0u;
    for (var j = w.first; j < w.last; j++) {
        if (build_match(j, w.key)) { c += 1u; }
    }
    if (i < p.rows) {
        if (p.skip == 0u) { counts[i] = c; } else { counts[i] += c; }
    }
    if (c != 0u) {
        let old = atomicAdd(&wlo, c);
        if (old + c < old) { atomicAdd(&whi, 1u); }
    }
    workgroupBarrier();
    if (lid == 0u) {
        let lo = atomicLoad(&wlo);
        let hi = atomicLoad(&whi);
        if (lo != 0u) {
            let old = atomicAdd(&total[0], lo);
            if (old + lo < old) { atomicAdd(&total[1], 1u); }
        }
        if (hi != 0u) { atomicAdd(&total[1], hi); }
    }
}
