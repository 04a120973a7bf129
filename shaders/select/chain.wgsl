// select/chain.wgsl: device-driven bracketing descent; the common part of the chain kernels
//
// The chain runs a whole exact selection of one narrow rank range (a median, or
// the k-th smallest of a top-k) in one submission with no readback between
// levels. Each level is the bracketing level above (Floyd & Rivest windows from a
// sorted sample) with its decisions taken on the device:
// * `ch_gather`: S keys at pseudo-random positions of the current region;
// * `sort_sample` (sample_sort.wgsl): sorts them in one workgroup;
// * `ch_plan`: one invocation turns the target ranks and the sorted sample into
//   the window [lo, hi] (sample elements 3 standard deviations either side, or
//   open below for top-k; the whole region once it holds at most S keys; the
//   host starts lo and hi at the smallest and largest key) and
//   writes the window pass's indirect dispatch size;
// * `ch_window` (indirect): each workgroup counts its keys below and inside the
//   window, reserves its part of the next region with one global atomic, reads
//   its keys again (from cache) and copies those inside, on the first level
//   (the whole input) too: one fused pass took the 2^28 median on the H100 from
//   1.93 to 1.34 ms against a count pass and a copy pass
//   (docs/benchmarks/history/session-12.md);
// * `ch_check`: the ranks must lie inside the window (else fail = 1: the sample
//   missed), a window of one value answers them (done), a window larger than the
//   next region's capacity fails (2); otherwise the window becomes the region.
// `ch_pad` pads the last region (at most S keys) to S with kmax() and
// `sort_sample` sorts it into the output for the host.
// A failed or answered chain turns every later kernel into a no-op; the host reads
// the state once at the end and reruns the host-driven descent when it failed.
//
// The first level reads the input, one dispatch of ch_gather and ch_window per
// segment (binding ch_in, element type SRC, converted to K by src_key: top-k
// packs a 32-bit key and its row as one 64-bit key, so every key is distinct and
// ties go to the first rows); later levels read the previous level's region
// (ch_src) and write the next (ch_dst).

alias SRC = {{SRC}};

fn src_key(x: SRC, row: u32) -> K {
    {{SRCKEY}}
}

struct ChainU {
    rlo: u32,       // smallest target rank
    rhi: u32,       // largest target rank
    topk: u32,      // 1: windows open below (every key under the window is kept)
    seed: u32,
    sig: f32,       // half-width of a window in standard deviations
    pad0: u32,
    pad1: u32,
    pad2: u32,
    cap: array<vec4<u32>, 4>,   // capacity of level L's region: cap[L / 4][L % 4]
}

@group(0) @binding(0) var<storage, read> ch_in: array<SRC>;
@group(0) @binding(1) var<storage, read> ch_src: array<K>;
@group(0) @binding(2) var<storage, read_write> ch_dst: array<K>;
@group(0) @binding(3) var<storage, read_write> ch_st: array<atomic<u32>>;
// ch_smp: [0, S) the sample, SLOT: window's lo, SLOT + 1: hi, SLOT + 2 ..: the
// final region (SLOT: the first level's sample size; later levels may sample
// fewer keys, S of their pipelines).
const SLOT: u32 = {{SLOT}}u;
@group(0) @binding(4) var<storage, read_write> ch_smp: array<K>;
@group(0) @binding(5) var<storage, read> ch_u: ChainU;
@group(0) @binding(6) var<storage, read_write> ch_args: array<u32>;
// The first level runs once per input segment (a piece): its elements in ch_in,
// its first row, and its share of the sample.
struct PieceU {
    off: u32,       // first element in ch_in
    n: u32,         // elements
    row0: u32,      // row of its first element
    dst: u32,       // first sample slot it fills
    cnt: u32,       // samples it takes
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(7) var<storage, read> ch_piece: PieceU;

// State words (ch_st).
const ST_M: u32 = 0u;       // keys in the current region
const ST_SHIFT: u32 = 1u;   // keys of the input below the current region
const ST_FAIL: u32 = 2u;    // 0, or why the chain stopped: 1 missed, 2 overflow, 3 too large at the end
const ST_DONE: u32 = 3u;    // 1: a one-value window answered every rank (the value is lo)
const ST_LEVEL: u32 = 4u;   // levels completed
const ST_BELOW: u32 = 5u;   // window pass: keys below the window
const ST_CUR: u32 = 6u;     // window pass: keys inside (the next region's cursor)

fn chain_stopped() -> bool {
    return atomicLoad(&ch_st[ST_FAIL]) != 0u || atomicLoad(&ch_st[ST_DONE]) != 0u;
}

fn chain_cap(level: u32) -> u32 {
    return ch_u.cap[min(level, 15u) / 4u][min(level, 15u) % 4u];
}
