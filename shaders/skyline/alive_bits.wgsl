// SkyAlign, stage 5: the skyline as a bitmap (alive_bits).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// The survivors as bits: keep[w] bit b set iff row 32 w + b (< n) is not dead, so
// the host reads n / 8 bytes back instead of 4 n.
@compute @workgroup_size(WG)
fn alive_bits(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = row_index(wid, nwg, lid);
    if w * 32u >= P.n { return; }
    var bits = 0u;
    for (var b = 0u; b < 32u; b++) {
        let r = w * 32u + b;
        if r < P.n && dead[r] == 0u {
            bits |= 1u << b;
        }
    }
    keep[w] = bits;
}
