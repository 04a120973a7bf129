// Scatter pass of the fast stable compaction (operators/src/compact.rs,
// CompactPath::Fast): one pass over the columns after the count pass
// (compact/count.wgsl) and the single-pass scan of the block counts (boffs: the
// output row of each block's first selected row).
//
// One workgroup per block of BLOCK rows, one dispatch per segment (and group of
// columns). The workgroup loads its block's selection bitmap (WORDS = BLOCK / 32
// words; the selection's own bitmap, or the one the count pass built from flags)
// into workgroup memory with the exclusive popcount prefix of its words (wpre).
// Then invocations walk the block in 4-row vectors, neighbours on neighbouring
// vectors, so every column is read with coalesced 16-byte loads (8-byte columns:
// two per vector); a vector with no selected row is not read at all. The rank of
// the vector's first row in the block is wpre[word] + popcount(bits below it), and
// its selected rows go, in order, to output rows boffs[block] + rank, +1, ...
// (stable). Writes of neighbouring invocations are neighbours in the output.
//
// Validity: the bits of the block's output rows are assembled in workgroup memory
// (VBW words per column, since the block's output starts anywhere in a word), then
// written out: the block's first and last output words may be shared with the
// neighbouring blocks and are merged with atomicOr (the outputs are zeroed
// beforehand); the words in between belong to this block alone and are stored.
//
// Output arrays have the input's segmentation (out_rows rows per segment); a
// segment's selected rows land in at most two consecutive output segments, `lo`
// (first row out_first) and `hi`.
//
// Prepended: scan/element/vec4.wgsl (T = u32) and a scan/workgroup/*.wgsl part. Placeholders:
// WG, BLOCK, VB_WORDS, COLUMN_DECLS, COPY_COLUMNS, FLUSH_COLUMNS (generated for the
// batch's columns by the Rust side).

struct Params {
    n: u32,              // rows of this input segment
    blocks: u32,         // blocks of this segment (the dispatch's workgroups)
    block_base: u32,     // index of the segment's first block in boffs
    out_first: u32,      // first output row of the `lo` output segment
    out_rows: u32,       // rows per output segment
    out_first_word: u32, // out_first / 32
    out_words: u32,      // out_rows / 32 (validity words per output segment)
    pad: u32,
}

const BLOCK: u32 = {{BLOCK}}u;
const WORDS: u32 = BLOCK / 32u;
const VECS: u32 = BLOCK / 4u;
const VBW: u32 = WORDS + 1u;

@group(0) @binding(0) var<storage, read> selbits: array<u32>;
@group(0) @binding(2) var<storage, read> boffs: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> selw: array<u32, WORDS>;
var<workgroup> wpre: array<u32, WORDS>;
var<workgroup> vb: array<atomic<u32>, {{VB_WORDS}}>;

{{COLUMN_DECLS}}

fn flush_validity(lid: u32, boff: u32, cnt: u32) {
    let nw = ((boff % 32u) + cnt + 31u) / 32u;
    for (var w = lid; w < nw; w += WG) {
        let gw = boff / 32u + w - p.out_first_word;
        let in_lo = gw < p.out_words;
        let widx = select(gw - p.out_words, gw, in_lo);
        let shared_word = w == 0u || w + 1u == nw;
        {{FLUSH_COLUMNS}}
    }
}

@compute @workgroup_size(WG)
fn scatter(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    for (var w = inv.lid; w < {{VB_WORDS}}u; w += WG) {
        atomicStore(&vb[w], 0u);
    }
    let nb = min(BLOCK, p.n - block * BLOCK);
    let r = rank_of(inv);
    // Branch-free up to the workgroup scan (subgroup lanes need not reconverge
    // after a divergent branch): invocations past the block's words count zero.
    let nw = (nb + 31u) / 32u;
    let rw = min(r, nw - 1u);
    let rem = nb - rw * 32u;
    let mask = select(0xffffffffu, (1u << min(rem, 31u)) - 1u, rem < 32u);
    let word = select(0u, selbits[block * WORDS + rw] & mask, r < nw);
    let sc = wg_excl_scan(inv, countOneBits(word));
    if (r < WORDS) {
        selw[r] = word;
        wpre[r] = sc.ex;
    }
    workgroupBarrier();
    let cnt = sc.total;
    if (cnt == 0u) {
        return; // uniform: the workgroup total
    }
    let boff = boffs[p.block_base + block];
    let bq = boff % 32u;
    for (var lv = inv.lid; lv < VECS; lv += WG) {
        if (lv * 4u >= nb) {
            break;
        }
        let w = lv / 8u;
        let sh = (lv % 8u) * 4u;
        let word = selw[w];
        let nib = (word >> sh) & 15u;
        if (nib == 0u) {
            continue;
        }
        var q = wpre[w] + countOneBits(word & ((1u << sh) - 1u));
        let v = block * VECS + lv;
{{COPY_COLUMNS}}
    }
    workgroupBarrier();
    flush_validity(inv.lid, boff, cnt);
}
