// Selection part of compact/block.wgsl for a selection given as a bitmap of u32 words
// (row i is bit i % 32 of word i / 32, like Arrow; the bitmap's segments hold
// seg_rows / 32 words, so a segment's bitmap starts at its first row). Bits past the
// segment's end are ignored.

@group(0) @binding(0) var<storage, read> sel: array<u32>;

fn fill_selection(lid: u32, block: u32, nb: u32) {
    for (var w = lid; w * 32u < nb; w += WG) {
        var bits = sel[block * WORDS + w];
        let rem = nb - w * 32u;
        if (rem < 32u) {
            bits &= (1u << rem) - 1u;
        }
        atomicStore(&sw[w], bits);
    }
}
