// SkyAlign, stage 1: the pre-filter's tau (minmax).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

var<workgroup> mm_min: atomic<u32>;
var<workgroup> mm_max: atomic<u32>;

// Reduced in workgroup memory first: one global atomic each per workgroup (one per
// row put a million atomics on two addresses).
@compute @workgroup_size(WG)
fn minmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    if lid == 0u {
        atomicStore(&mm_min, 0xffffffffu);
        atomicStore(&mm_max, 0u);
    }
    workgroupBarrier();
    let r = row_index(wid, nwg, lid);
    if r < P.n {
        let base = r * P.d;
        var mx = 0u;
        for (var j = 0u; j < P.d; j++) {
            mx = max(mx, ranks[base + j]);
        }
        atomicMin(&mm_min, mx);
        atomicMax(&mm_max, mx);
    }
    workgroupBarrier();
    if lid == 0u {
        atomicMin(&stats[0], atomicLoad(&mm_min));
        atomicMax(&stats[1], atomicLoad(&mm_max));
    }
}
