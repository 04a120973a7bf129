// Count pass of the fast stable compaction (operators/src/compact.rs,
// CompactPath::Fast): the number of selected rows of each block of BLOCK rows ->
// counts[block_base + block]. One workgroup per block, one dispatch per segment.
//
// * `count_flags`: 0/1 u32 flags (any non-zero selects), read as vec4 (coalesced:
//   neighbouring invocations on neighbouring vectors). Besides the counts it writes
//   the block's selection as a bitmap (bits_out, the segment's bitmap in the Arrow
//   layout: word w holds rows 32w .. 32w+31), so the scatter pass reads n/8 bytes of
//   selection instead of the 4n bytes of flags.
// * `count_bitmap`: popcount of the bitmap's words (reads n/8 bytes).
//
// The Rust side then scans the counts exclusively with the single-pass scan
// (scan/single_pass.wgsl): the output row of each block's first selected row.
//
// Prepended: scan/element/vec4.wgsl (T = u32) and a scan/workgroup/*.wgsl part (wg_reduce).
// Placeholders: WG, BLOCK.

struct Params {
    n: u32,              // rows of this segment
    blocks: u32,         // blocks of this segment
    block_base: u32,     // index of the segment's first block in counts
    out_first: u32,
    out_rows: u32,
    out_first_word: u32,
    out_words: u32,
    pad: u32,
}

const BLOCK: u32 = {{BLOCK}}u;
const WORDS: u32 = BLOCK / 32u;
const VECS: u32 = BLOCK / 4u;

@group(0) @binding(0) var<storage, read> flags: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> counts: array<u32>;
@group(0) @binding(2) var<storage, read_write> bits_out: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> bits_in: array<u32>;

var<workgroup> nib: array<u32, VECS>;

fn block_rows(block: u32) -> u32 {
    return min(BLOCK, p.n - block * BLOCK);
}

@compute @workgroup_size(WG)
fn count_flags(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    let nb = block_rows(block);
    let base = block * VECS;
    for (var v = inv.lid; v < VECS; v += WG) {
        var bits = 0u;
        if (v * 4u < nb) {
            let f = flags[base + v];
            bits = select(0u, 1u, f.x != 0u) | select(0u, 2u, f.y != 0u)
                | select(0u, 4u, f.z != 0u) | select(0u, 8u, f.w != 0u);
            let rem = nb - v * 4u;
            if (rem < 4u) {
                bits &= (1u << rem) - 1u; // rows past the segment's end
            }
        }
        nib[v] = bits;
    }
    workgroupBarrier();
    // One word per invocation (WORDS <= WG), branch-free up to the reduction
    // (subgroup lanes need not reconverge after a divergent branch).
    let w = min(inv.lid, WORDS - 1u);
    var word = 0u;
    for (var k = 0u; k < 8u; k++) {
        word |= nib[w * 8u + k] << (4u * k);
    }
    let mine = inv.lid < WORDS && inv.lid * 32u < nb;
    let total = wg_reduce(inv, select(0u, countOneBits(word), mine));
    if (mine) {
        bits_out[block * WORDS + w] = word;
    }
    if (inv.lid == 0u) {
        counts[p.block_base + block] = total;
    }
}

@compute @workgroup_size(WG)
fn count_bitmap(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    let nb = block_rows(block);
    // Branch-free up to the reduction, as in count_flags.
    let nw = (nb + 31u) / 32u;
    let w = min(inv.lid, nw - 1u);
    let rem = nb - w * 32u;
    let mask = select(0xffffffffu, (1u << min(rem, 31u)) - 1u, rem < 32u);
    let word = select(0u, bits_in[block * WORDS + w] & mask, inv.lid < nw);
    let total = wg_reduce(inv, countOneBits(word));
    if (inv.lid == 0u) {
        counts[p.block_base + block] = total;
    }
}
