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

// Over ids sorted ascending, one invocation per partition b (0 ..= fanout): the
// number of this segment's rows with an id below b, by binary search, is where
// partition b starts within the segment; segments after the first add theirs
// (dispatches of one pass run in order). So poffs[b] = rows with id < b, and
// poffs[fanout] = all rows. (Every invocation does log2(rows) reads: no thread
// walks a run of empty partitions, however skewed the ids.)
@compute @workgroup_size(WG)
fn bounds(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = row_index(wid, nwg, lid);
    if (b > p.fanout) { return; }
    var lo = 0u;
    var hi = p.n;
    while (lo < hi) {
        let mid = lo + (hi - lo) / 2u;
        if (pid_in[mid] < b) { lo = mid + 1u; } else { hi = mid; }
    }
    if ((p.flags & F_PREV) != 0u) { poffs[b] += lo; } else { poffs[b] = lo; }
}
