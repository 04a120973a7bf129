// Semi, anti and mark joins (appended to common.wgsl): one bit per probe row,
// set when some valid build key equals the row's valid key (the walk stops at
// the first match). Bit i % 32 of word i / 32 for dispatch row i, gathered in
// workgroup memory and OR-ed into the output a word at a time (rounds of a long
// bucket add their bits); `rows` rows of a dispatch start
// at a multiple of 32 (the host splits ranges that way).

@group(0) @binding(8) var<storage, read_write> bits: array<u32>;

var<workgroup> wbits: array<atomic<u32>, WG / 32u>;

@compute @workgroup_size(WG)
fn matched(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid < WG / 32u) { atomicStore(&wbits[lid], 0u); }
    workgroupBarrier();
    let i = dispatch_row(wid, lid);
    let w = walk_of(i);
    for (var j = w.first; j < w.last; j++) {
        if (build_match(j, w.key)) {
            atomicOr(&wbits[lid >> 5u], 1u << (lid & 31u));
            break;
        }
    }
    workgroupBarrier();
    if ((lid & 31u) == 0u && i < p.rows) {
        bits[(p.out_base >> 5u) + (i >> 5u)] |= atomicLoad(&wbits[lid >> 5u]);
    }
}
