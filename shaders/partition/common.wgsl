// GPU partitioning (operators/src/partition/): histogram -> exclusive scan ->
// stable scatter, the radix-partitioning scheme (one pass per 8-bit digit, LSD
// order over the partition id) with the prefix-sum step of Zhang, Wang & Ross
// ("Parallel Prefix Sum with SIMD", ADMS 2020) done by the crate's GPU scan.
//
// This file is the shared prelude (Params, bindings, the ids and digits every
// kernel computes); each kernel is its own file appended to it by
// operators/src/partition/kernels.rs (every variable on its own binding so each
// entry point's automatic layout holds only what it uses):
//
// * ids.wgsl, `pid_radix`, `pid_hash`: the partition id of every row of one segment:
//   radix digits `(key >> shift) & mask` of a u32/u64 key, a direct id
//   `min(key, fanout - 1)`, or a 32-bit mixing hash of one key column folded
//   into the running hash of the previous key columns (`hash_combine` below,
//   the murmur3 finalizer; computed identically by partition/mod.rs's
//   `hash_combine`), taken modulo the fan-out after the last key column. NULL
//   keys hash the fixed word NULL_TAG (twice for 64-bit keys); radix/direct put
//   NULL keys in partition 0.
// * `histogram` and `rank` read each row's id from `pid_in`, or (one key column,
//   one digit pass) compute it from the key as they go (`row_pid`, `key_pid`).
// * histogram.wgsl: per tile of TILE = WG * CHUNKS rows, counts of each digit
//   `(pid >> dshift) & 255` in workgroup memory (workgroup atomics), written to
//   `counts[b * total_tiles + tile]` (partition-major, so one exclusive scan of
//   the matrix gives every (digit, tile) its first output row).
// * rank.wgsl (unfused path): the stable destination of every row of a tile: the
//   tile walks its rows in chunks of WG rows in order; each row sets its bit in a
//   per-digit ballot mask in workgroup memory (WG / 32 words per digit), its rank
//   among the rows of the chunk with the same digit is the popcount of the mask
//   bits before its own, plus the running count of the digit in the tile's
//   earlier chunks, plus the scanned offset of (digit, tile). Deterministic and
//   stable.
// * scatter.wgsl: the fused rank-and-scatter kernel (the default on GPUs); it
//   replaces `rank` and the moves.
// * move.wgsl (unfused path), `move_values` / `move_iota` / `move_validity`:
//   `out[idx[i]] = in[i]` (or the row number, or the validity bit) restricted to
//   one output segment.
// * offsets.wgsl, `gather_offsets`, `bounds`: the fan-out + 1 partition offsets
//   (from the scanned matrix in one pass, or by binary search of the sorted ids).

struct Params {
    n: u32,            // rows of this segment
    tiles: u32,        // tiles of this segment (histogram, rank)
    tile_base: u32,    // first tile of this segment in the matrix
    total_tiles: u32,  // tiles of the whole array
    shift: u32,        // radix shift
    mask: u32,         // radix mask
    fanout: u32,       // partitions
    flags: u32,        // F_*
    out_first: u32,    // first row of the output segment (moves)
    out_rows: u32,     // rows of the output segment (moves); rows of the previous segment (bounds)
    row_base: u32,     // first row of this segment in the whole array
    nb: u32,           // digits of this pass
    dshift: u32,       // digit shift of this pass
    total: u32,        // rows of the whole array
    pad0: u32,
    pad1: u32,
}

const WG: u32 = {{WG}}u;
const CHUNKS: u32 = {{CHUNKS}}u;
const TILE: u32 = WG * CHUNKS;
const NB: u32 = 256u;
const MW: u32 = WG / 32u;
const NULL_TAG: u32 = 0x6e756c6cu;

const F_FIRST: u32 = 1u;
const F_LAST: u32 = 2u;
const F_VALID: u32 = 4u;
const F_DIRECT: u32 = 8u;
const F_PREV: u32 = 16u;
const F_HASH: u32 = 32u;
const F_MULTI: u32 = 64u;

{{KEY_FNS}}

@group(0) @binding(0) var<storage, read> keys: array<{{KT}}>;
@group(0) @binding(1) var<storage, read> kvalid: array<u32>;
@group(0) @binding(2) var<storage, read_write> pids: array<u32>;
@group(0) @binding(3) var<storage, read> pid_in: array<u32>;
@group(0) @binding(4) var<storage, read_write> counts: array<u32>;
@group(0) @binding(5) var<storage, read> offs: array<u32>;
@group(0) @binding(6) var<storage, read_write> dst: array<u32>;
@group(0) @binding(7) var<storage, read> mv_idx: array<u32>;
@group(0) @binding(8) var<storage, read> mv_in: array<{{T}}>;
@group(0) @binding(9) var<storage, read_write> mv_out: array<{{T}}>;
@group(0) @binding(10) var<storage, read> mv_vin: array<u32>;
@group(0) @binding(11) var<storage, read_write> mv_vout: array<atomic<u32>>;
@group(0) @binding(12) var<storage, read_write> poffs: array<u32>;
@group(0) @binding(13) var<storage, read> pid_prev: array<u32>;
@group(0) @binding(15) var<uniform> p: Params;

// mix32 and hash_combine: shaders/hash.wgsl, prepended.

fn row_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

fn is_valid(i: u32) -> bool {
    return (p.flags & F_VALID) == 0u || ((kvalid[i / 32u] >> (i % 32u)) & 1u) != 0u;
}

// h modulo the fan-out; a mask when the fan-out is a power of two (the GPU
// has no integer divide: `%` by a runtime value is a few dozen instructions).
fn mod_fanout(h: u32) -> u32 {
    let f = p.fanout;
    if ((f & (f - 1u)) == 0u) { return h & (f - 1u); }
    return h % f;
}

// Radix digits or a direct id of a key given by its low and high words
// (NULL: partition 0).
fn radix_pid_of(lo: u32, hi: u32, valid: bool) -> u32 {
    if (!valid) { return 0u; }
    if ((p.flags & F_DIRECT) != 0u) {
        return select(p.fanout - 1u, lo, hi == 0u && lo < p.fanout);
    }
    var v = lo;
    if (p.shift >= 32u) {
        v = hi >> (p.shift - 32u);
    } else if (p.shift > 0u) {
        v = (lo >> p.shift) | (hi << (32u - p.shift));
    }
    return v & p.mask;
}

// A key's hash folded into h.
fn fold_of(h0: u32, lo: u32, hi: u32, valid: bool) -> u32 {
    var h = h0;
    if (valid) {
        h = hash_combine(h, lo);
        if (KWIDE) { h = hash_combine(h, hi); }
    } else {
        h = hash_combine(h, NULL_TAG);
        if (KWIDE) { h = hash_combine(h, NULL_TAG); }
    }
    return h;
}

// Row i's key as (low word, high word, valid).
fn key_words(i: u32) -> vec3<u32> {
    let k = keys[i];
    return vec3<u32>(klo(k), khi(k), select(0u, 1u, is_valid(i)));
}

fn radix_pid(i: u32) -> u32 {
    let w = key_words(i);
    return radix_pid_of(w.x, w.y, w.z != 0u);
}

// The hash of row i's key folded into h.
fn fold_key(h0: u32, i: u32) -> u32 {
    let w = key_words(i);
    return fold_of(h0, w.x, w.y, w.z != 0u);
}

// The partition id of a key given as (low word, high word, valid) (F_HASH:
// the hash modulo the fan-out, else radix/direct): what `histogram` and
// `rank` use instead of reading `pid_in` when one key column and one digit
// pass suffice.
fn words_pid(w: vec3<u32>) -> u32 {
    if ((p.flags & F_HASH) != 0u) { return mod_fanout(fold_of(0u, w.x, w.y, w.z != 0u)); }
    return radix_pid_of(w.x, w.y, w.z != 0u);
}

fn key_pid(i: u32) -> u32 {
    return words_pid(key_words(i));
}

// What the digit kernels read of row r (`row_raw`: loads only) and the
// partition id computed from it (`raw_pid`), split so the fused kernel can
// issue the loads a round ahead.
fn row_raw(r: u32) -> vec3<u32> {
    {{ROW_RAW}}
}

fn raw_pid(w: vec3<u32>) -> u32 {
    {{RAW_PID}}
}

// The partition id of row r as the digit kernels see it.
fn row_pid(r: u32) -> u32 {
    return raw_pid(row_raw(r));
}

fn digit(x: u32) -> u32 {
    return (x >> p.dshift) & 255u;
}

