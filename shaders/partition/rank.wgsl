// The rank kernel of the unfused path (operators/src/partition/unfused.rs):
// appended to common.wgsl.

var<workgroup> ballot: array<atomic<u32>, 2048>; // NB * MW for WG <= 256
var<workgroup> run: array<u32, NB>;
var<workgroup> base: array<u32, NB>;

@compute @workgroup_size(WG)
fn rank(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    for (var b = lid; b < NB; b += WG) {
        run[b] = 0u;
        if (b < p.nb) { base[b] = offs[b * p.total_tiles + p.tile_base + tile]; }
    }
    for (var w = lid; w < NB * MW; w += WG) { atomicStore(&ballot[w], 0u); }
    workgroupBarrier();
    let word = lid / 32u;
    let bit = 1u << (lid % 32u);
    for (var c = 0u; c < CHUNKS; c++) {
        let row = tile * TILE + c * WG + lid;
        let valid = row < p.n;
        var d = 0u;
        if (valid) {
            d = digit(row_pid(row));
            atomicOr(&ballot[d * MW + word], bit);
        }
        workgroupBarrier();
        var r = 0u;
        var cnt = 0u;
        if (valid) {
            for (var k = 0u; k < MW; k++) {
                let m = atomicLoad(&ballot[d * MW + k]);
                if (k < word) { r += countOneBits(m); }
                if (k == word) { r += countOneBits(m & (bit - 1u)); }
                cnt += countOneBits(m);
            }
            dst[row] = base[d] + run[d] + r;
        }
        workgroupBarrier();
        if (valid) {
            if (r + 1u == cnt) { run[d] += cnt; }
            atomicStore(&ballot[d * MW + word], 0u);
        }
        workgroupBarrier();
        if (tile * TILE + (c + 1u) * WG >= p.n) { break; }
    }
}

