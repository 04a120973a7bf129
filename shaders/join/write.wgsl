// Probe, pass 2 (appended to common.wgsl): every probe row writes its
// (probe index, build row) pairs at the exclusive prefix sum of its count, in
// bucket order (build order); a round of a long bucket moves the row's start on
// past what it wrote, for the next round. Slots at or past the output's capacity are not
// written: the host reruns the pass with room for the total when it was short.

@group(0) @binding(6) var<storage, read> brows: array<u32>;
@group(0) @binding(7) var<storage, read_write> starts: array<u32>;
@group(0) @binding(8) var<storage, read_write> out_probe: array<u32>;
@group(0) @binding(9) var<storage, read_write> out_build: array<u32>;

@compute @workgroup_size(WG)
fn write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = dispatch_row(wid, lid);
    if (i >= p.rows) { return; }
    let w = walk_of(i);
    var o = starts[i];
    for (var j = w.first; j < w.last; j++) {
        if (build_match(j, w.key)) {
            if (o < p.capacity) {
                out_probe[o] = p.out_base + i;
                out_build[o] = brows[j];
            }
            o += 1u;
        }
    }
    starts[i] = o;
}
