// The fan-out + 1 partition offsets (operators/src/partition/gpu.rs): appended
// to common.wgsl.

// poffs[b] = first row of partition b (single pass: the scanned matrix's entry of
// (b, tile 0)); poffs[fanout] = total rows.
@compute @workgroup_size(WG)
fn gather_offsets(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = row_index(wid, nwg, lid);
    if (b < p.fanout) { poffs[b] = offs[b * p.total_tiles]; }
    if (b == p.fanout) { poffs[b] = p.total; }
}

@compute @workgroup_size(WG)
fn fill_offsets(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = row_index(wid, nwg, lid);
    if (b <= p.fanout) { poffs[b] = p.total; }
}

// Over ids sorted ascending: row j with id c, after a row with id c' < c (or the
// first row), is the first row of partitions c'+1 ..= c (0 ..= c for the first).
@compute @workgroup_size(WG)
fn bounds(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let cur = pid_in[i];
    var first = 0u;
    if (i > 0u) {
        first = pid_in[i - 1u] + 1u;
    } else if ((p.flags & F_PREV) != 0u) {
        first = pid_prev[p.out_rows - 1u] + 1u;
    }
    for (var b = first; b <= cur; b++) { poffs[b] = p.row_base + i; }
}
