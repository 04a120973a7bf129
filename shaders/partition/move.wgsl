// Moves by destination (operators/src/partition/unfused.rs): appended to
// common.wgsl.

fn in_out(d: u32) -> bool {
    return d >= p.out_first && d - p.out_first < p.out_rows;
}

@compute @workgroup_size(WG)
fn move_values(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let d = mv_idx[i];
    if (in_out(d)) { mv_out[d - p.out_first] = mv_in[i]; }
}

@compute @workgroup_size(WG)
fn move_iota(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let d = mv_idx[i];
    if (in_out(d)) { mv_out[d - p.out_first] = {{T}}(p.row_base + i); }
}

@compute @workgroup_size(WG)
fn move_validity(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let d = mv_idx[i];
    if (in_out(d) && ((mv_vin[i / 32u] >> (i % 32u)) & 1u) != 0u) {
        let q = d - p.out_first;
        atomicOr(&mv_vout[q / 32u], 1u << (q % 32u));
    }
}

