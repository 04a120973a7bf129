// select/window.wgsl: the bracketing first level: key windows around the target ranks

// Floyd & Rivest's idea applied as SampleSelect's first level: the host picks, per
// distinct target rank, a window [lo, hi] of the sorted sample (indices about 3
// standard deviations of the sample rank either side of the target), so the key at
// that rank lies inside it with high probability; windows overlapping in sample
// index are merged. Two lean passes over the keys, with no search tree and no
// per-key arrays, so both run near memory bandwidth:
// * `window_count`: per window, the keys below it and inside it (global totals),
//   and each workgroup's count of keys inside (w_wg);
// * `window_copy`: workgroups holding keys inside a window reserve their part of the
//   window's region with one global atomic (cursor word), then copy those keys
//   there (order not kept); workgroups with none stop at once.
// A key inside several windows (only possible when two windows share a boundary
// value) is counted in each; the host detects that case by the bound values and
// falls back. NWIN: windows of this pipeline (1..=4).
//
// w_counts per window (8 words): below, inside, lo (2 words), hi (2 words), cursor,
// unused.

struct WinParams {
    off: u32,           // first element of the piece in `w_src`
    n: u32,             // elements in the piece
    pad: u32,
    wg_base: u32,       // the piece's first workgroup in w_wg
    lo_idx: vec4<u32>,  // sample index of each window's lower bound, NONE: none
    hi_idx: vec4<u32>,  // sample index of each window's upper bound, NONE: none
    woff: vec4<u32>,    // first element of each window's region in w_out
    cap: vec4<u32>,     // capacity of each window's region
}

@group(0) @binding(0) var<storage, read> w_src: array<K>;
@group(0) @binding(1) var<storage, read> w_smp: array<K>;
@group(0) @binding(2) var<storage, read_write> w_counts: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> w_p: WinParams;
@group(0) @binding(4) var<storage, read_write> w_out: array<K>;
@group(0) @binding(5) var<storage, read_write> w_wg: array<u32>;

const NWIN: u32 = {{NWIN}}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> wb_lo: array<K, NWIN>;
var<workgroup> wb_hi: array<K, NWIN>;
var<workgroup> wb_flag: array<u32, NWIN>;          // 1: has lo, 2: has hi
var<workgroup> wb_cnt: array<atomic<u32>, 8>;      // below per window, then inside per window
var<workgroup> wb_base: array<u32, NWIN>;
var<workgroup> wb_any: u32;

var<private> pw_lo: array<K, NWIN>;
var<private> pw_hi: array<K, NWIN>;
var<private> pw_fl: array<u32, NWIN>;

// Loads the windows' bounds from the sorted sample and clears the workgroup
// counters; then every invocation copies the bounds.
fn window_setup(inv: Inv) {
    if (inv.lid < NWIN) {
        let w = inv.lid;
        var f = 0u;
        if (w_p.lo_idx[w] != NONE) {
            wb_lo[w] = w_smp[w_p.lo_idx[w]];
            f |= 1u;
        }
        if (w_p.hi_idx[w] != NONE) {
            wb_hi[w] = w_smp[w_p.hi_idx[w]];
            f |= 2u;
        }
        wb_flag[w] = f;
        atomicStore(&wb_cnt[w], 0u);
        atomicStore(&wb_cnt[NWIN + w], 0u);
    }
    workgroupBarrier();
    for (var w = 0u; w < NWIN; w++) {
        pw_lo[w] = wb_lo[w];
        pw_hi[w] = wb_hi[w];
        pw_fl[w] = wb_flag[w];
    }
}

fn below_window(x: K, w: u32) -> bool {
    return (pw_fl[w] & 1u) != 0u && kless(x, pw_lo[w]);
}

fn above_window(x: K, w: u32) -> bool {
    return (pw_fl[w] & 2u) != 0u && kless(pw_hi[w], x);
}

@compute @workgroup_size(WG)
fn window_count(inv: Inv) {
    window_setup(inv);
    let g = group_index(inv);
    let base = g * CHUNK;
    var below: array<u32, NWIN>;
    var inside: array<u32, NWIN>;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < w_p.n) {
            let x = w_src[w_p.off + i];
            for (var w = 0u; w < NWIN; w++) {
                let lt = below_window(x, w);
                below[w] += select(0u, 1u, lt);
                inside[w] += select(0u, 1u, !lt && !above_window(x, w));
            }
        }
    }
    for (var w = 0u; w < NWIN; w++) {
        if (below[w] != 0u) {
            atomicAdd(&wb_cnt[w], below[w]);
        }
        if (inside[w] != 0u) {
            atomicAdd(&wb_cnt[NWIN + w], inside[w]);
        }
    }
    workgroupBarrier();
    if (inv.lid < NWIN) {
        let w = inv.lid;
        let b = atomicLoad(&wb_cnt[w]);
        if (b != 0u) {
            atomicAdd(&w_counts[w * 8u], b);
        }
        let c = atomicLoad(&wb_cnt[NWIN + w]);
        if (c != 0u) {
            atomicAdd(&w_counts[w * 8u + 1u], c);
        }
        w_wg[(w_p.wg_base + g) * NWIN + w] = c;
        if (g == 0u) {
            atomicStore(&w_counts[w * 8u + 2u], kword(pw_lo[w], 0u));
            atomicStore(&w_counts[w * 8u + 3u], kword(pw_lo[w], 1u));
            atomicStore(&w_counts[w * 8u + 4u], kword(pw_hi[w], 0u));
            atomicStore(&w_counts[w * 8u + 5u], kword(pw_hi[w], 1u));
        }
    }
}

@compute @workgroup_size(WG)
fn window_copy(inv: Inv) {
    let g = group_index(inv);
    if (inv.lid == 0u) {
        var any = 0u;
        for (var w = 0u; w < NWIN; w++) {
            any |= w_wg[(w_p.wg_base + g) * NWIN + w];
        }
        wb_any = any;
    }
    if (workgroupUniformLoad(&wb_any) == 0u) {
        return;
    }
    window_setup(inv);
    if (inv.lid < NWIN) {
        let w = inv.lid;
        let c = w_wg[(w_p.wg_base + g) * NWIN + w];
        var b = 0u;
        if (c != 0u) {
            b = atomicAdd(&w_counts[w * 8u + 6u], c);
        }
        wb_base[w] = b;
    }
    workgroupBarrier();
    let base = g * CHUNK;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < w_p.n) {
            let x = w_src[w_p.off + i];
            for (var w = 0u; w < NWIN; w++) {
                if (!below_window(x, w) && !above_window(x, w)) {
                    let j = wb_base[w] + atomicAdd(&wb_cnt[NWIN + w], 1u);
                    if (j < w_p.cap[w]) {
                        w_out[w_p.woff[w] + j] = x;
                    }
                }
            }
        }
    }
}
