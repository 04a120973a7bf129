// Partition ids (operators/src/partition/kernels.rs): appended to common.wgsl.

@compute @workgroup_size(WG)
fn pid_radix(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    pids[i] = radix_pid(i);
}

@compute @workgroup_size(WG)
fn pid_hash(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    var h = 0u;
    if ((p.flags & F_FIRST) == 0u) { h = pids[i]; }
    h = fold_key(h, i);
    if ((p.flags & F_LAST) != 0u) { h = mod_fanout(h); }
    pids[i] = h;
}

