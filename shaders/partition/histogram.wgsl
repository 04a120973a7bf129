// Per-tile digit histograms (operators/src/partition/kernels.rs): appended to
// common.wgsl; used by both scatter paths.

var<workgroup> hist: array<atomic<u32>, NB>;

@compute @workgroup_size(WG)
fn histogram(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    for (var b = lid; b < NB; b += WG) { atomicStore(&hist[b], 0u); }
    workgroupBarrier();
    let start = tile * TILE;
    let end = min(start + TILE, p.n);
    for (var r = start + lid; r < end; r += WG) {
        atomicAdd(&hist[digit(row_pid(r))], 1u);
    }
    workgroupBarrier();
    for (var b = lid; b < p.nb; b += WG) {
        counts[b * p.total_tiles + p.tile_base + tile] = atomicLoad(&hist[b]);
    }
}

