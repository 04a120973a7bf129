// Selection part of compact/block.wgsl for a selection given as one u32 flag per row
// (0 = not selected, anything else = selected), read as vec4 (4 rows per 16-byte
// load, neighbouring invocations on neighbouring vectors). Builds the block's
// bitmap in workgroup memory with one atomic OR per vector that has a selected row.

@group(0) @binding(0) var<storage, read> sel: array<vec4<u32>>;

fn fill_selection(lid: u32, block: u32, nb: u32) {
    let base = block * (BLOCK / 4u);
    for (var v = lid; v * 4u < nb; v += WG) {
        let f = sel[base + v];
        var bits = select(0u, 1u, f.x != 0u) | select(0u, 2u, f.y != 0u)
            | select(0u, 4u, f.z != 0u) | select(0u, 8u, f.w != 0u);
        let rem = nb - v * 4u;
        if (rem < 4u) {
            bits &= (1u << rem) - 1u; // rows past the segment's end
        }
        if (bits != 0u) {
            atomicOr(&sw[v / 8u], bits << ((v % 8u) * 4u));
        }
    }
}
