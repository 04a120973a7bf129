// select/approx.wgsl: after chain.wgsl and chain_first.wgsl: approximate selection in one pass over the keys

// The sorted sample (ch_smp[0, S)) gives each target rank a window of sample
// indices around its expected position (the host merges windows that overlap).
// One pass over the keys counts, per window, the keys below it, and histograms the
// keys inside it against the window's own sample keys (each splitter s_j: bucket
// 2j for the keys between s_{j-1} and s_j, bucket 2j + 1 for the keys equal to
// s_j). The host then knows the exact rank range of every sample key in a window
// and answers each rank with the nearest one: one level of SampleSelect whose
// buckets are only as fine as the sample where the ranks are, and whose count pass
// keeps no per-key state.
// Keys inside a window (a few percent) are searched where they are read; the
// kernel holds only the splitters and the histogram in workgroup memory. (Session
// 11 dropped a version that staged them per chunk for a search by the whole
// workgroup, measured with per-call timers that lowered the GPU's clock; not
// re-measured. The subgroup kernel below stages per subgroup and is the default.)

const NW: u32 = {{NW}}u;           // windows (1 ..= 8)
const AW: u32 = {{AW}}u;           // splitters held (all windows together)
const AITEMS: u32 = {{AITEMS}}u;   // keys per invocation and chunk
const ACHUNK: u32 = WG * AITEMS;

struct ApU {
    first: array<vec4<u32>, 2>,  // window w: index of its first key in the sorted sample
    len: array<vec4<u32>, 2>,    // its keys
    off: array<vec4<u32>, 2>,    // its first key in the concatenated splitters
}
@group(0) @binding(9) var<storage, read> ap_u: ApU;
// [0, 8): keys below window w; 8 + b: bucket b.
@group(0) @binding(10) var<storage, read_write> ap_cnt: array<atomic<u32>>;

var<workgroup> ap_spl: array<K, AW>;
var<workgroup> ap_bins: array<atomic<u32>, 2 * AW>;
var<workgroup> ap_below: array<atomic<u32>, 8>;

fn ap_get(a: array<vec4<u32>, 2>, w: u32) -> u32 {
    return a[w / 4u][w % 4u];
}

// Both histogram kernels start here: the histogram and the counters zeroed, the
// windows' splitters in workgroup memory.
fn ap_setup(lid: u32) {
    for (var t = lid; t < 2u * AW; t += WG) {
        atomicStore(&ap_bins[t], 0u);
    }
    for (var w = 0u; w < NW; w++) {
        let f = ap_get(ap_u.first, w);
        let o = ap_get(ap_u.off, w);
        for (var t = lid; t < ap_get(ap_u.len, w); t += WG) {
            ap_spl[o + t] = ch_smp[f + t];
        }
    }
    if (lid < 8u) {
        atomicStore(&ap_below[lid], 0u);
    }
    workgroupBarrier();
}

// Both end here: the invocations' counts of keys below each window (`below`) and
// the workgroup's histogram added to the global counts.
fn ap_finish(lid: u32, below: array<u32, NW>) {
    workgroupBarrier();
    for (var w = 0u; w < NW; w++) {
        if (below[w] != 0u) {
            atomicAdd(&ap_below[w], below[w]);
        }
    }
    workgroupBarrier();
    if (lid < NW) {
        let b = atomicLoad(&ap_below[lid]);
        if (b != 0u) {
            atomicAdd(&ap_cnt[lid], b);
        }
    }
    for (var t = lid; t < 2u * AW; t += WG) {
        let v = atomicLoad(&ap_bins[t]);
        if (v != 0u) {
            atomicAdd(&ap_cnt[8u + t], v);
        }
    }
}

@compute @workgroup_size(WG)
fn ap_hist(inv: Inv) {
    let lid = inv.lid;
    ap_setup(lid);
    var lo: array<K, NW>;
    var hi: array<K, NW>;
    var below: array<u32, NW>;
    for (var w = 0u; w < NW; w++) {
        let o = ap_get(ap_u.off, w);
        lo[w] = ap_spl[o];
        hi[w] = ap_spl[o + ap_get(ap_u.len, w) - 1u];
        below[w] = 0u;
    }
    let n = ch_piece.n;
    let chunks = (n + ACHUNK - 1u) / ACHUNK;
    let ng = inv.nwg.x * inv.nwg.y;
    for (var c = group_index(inv); c < chunks; c += ng) {
        let base = c * ACHUNK;
        for (var it = 0u; it < AITEMS; it++) {
            let i = base + it * WG + lid;
            if (i < n) {
                let x = load_src(i);
                // Its window, if any: the last one whose lower bound is at most x
                // (windows are sorted and disjoint but for a shared bound, whose
                // copies go to the later window).
                var w = NW;
                for (var v = 0u; v < NW; v++) {
                    let lt = kless(x, lo[v]);
                    below[v] += select(0u, 1u, lt);
                    if (!lt) {
                        w = v;
                    }
                }
                if (w < NW && !kless(hi[w], x)) {
                    // Lower bound of x among the window's keys (x <= its last key).
                    var a = ap_get(ap_u.off, w);
                    var len = ap_get(ap_u.len, w);
                    while (len > 0u) {
                        let h = len / 2u;
                        if (kless(ap_spl[a + h], x)) {
                            a = a + h + 1u;
                            len = len - h - 1u;
                        } else {
                            len = h;
                        }
                    }
                    atomicAdd(&ap_bins[2u * a + select(0u, 1u, keq(ap_spl[a], x))], 1u);
                }
            }
        }
    }
    ap_finish(lid, below);
}
