// select/approx_kc.wgsl: after approx.wgsl: 32-bit keys, each window cut into cells of key space

// The one pass with cells of key space instead of the sample's keys: window w
// spans the keys from lo = its first sample key to its last, lo + span, and cell c
// holds the keys x with (x - lo) >> shift = c, shift the least that leaves at most
// KCW cells. A key costs a compare (below the window), a subtraction and a compare
// (inside), and, inside, a shift and an atomic add to workgroup memory: no
// staging, no search, so the rare inside keys are handled where they are read.
// The host gives each sample key of a window the rank range of its cell and
// answers a rank by the key whose range is nearest; where cells are too coarse in
// rank (keys clustered within one cell), the splitter kernels answer instead.
const KCW: u32 = {{KCW}}u;   // cells per window (a power of two)
const LOG_KCW: u32 = firstLeadingBit(KCW);
var<workgroup> kc_bins: array<atomic<u32>, NW * KCW>;

// operators/src/select/approx.rs's kc_shift does the same.
fn kc_shift(span: u32) -> u32 {
    return select(0u, firstLeadingBit(span) + 1u - LOG_KCW, span >= KCW);
}

@compute @workgroup_size(WG)
fn ap_hist_kc(inv: Inv) {
    let lid = inv.lid;
    for (var t = lid; t < NW * KCW; t += WG) {
        atomicStore(&kc_bins[t], 0u);
    }
    if (lid < 8u) {
        atomicStore(&ap_below[lid], 0u);
    }
    var lo: array<u32, NW>;
    var span: array<u32, NW>;
    var sh: array<u32, NW>;
    var below: array<u32, NW>;
    for (var w = 0u; w < NW; w++) {
        let f = ap_get(ap_u.first, w);
        lo[w] = ch_smp[f];
        span[w] = ch_smp[f + ap_get(ap_u.len, w) - 1u] - lo[w];
        sh[w] = kc_shift(span[w]);
        below[w] = 0u;
    }
    workgroupBarrier();
    let n = ch_piece.n;
    let whole = n / ACHUNK;
    let chunks = (n + ACHUNK - 1u) / ACHUNK;
    let ng = inv.nwg.x * inv.nwg.y;
    for (var c = group_index(inv); c < chunks; c += ng) {
        let base = c * ACHUNK;
        let part = c >= whole;
        var xs: array<u32, AITEMS>;
        for (var it = 0u; it < AITEMS; it++) {
            xs[it] = load_src(select(base + it * WG + lid, min(base + it * WG + lid, n - 1u), part));
        }
        for (var it = 0u; it < AITEMS; it++) {
            let valid = !part || base + it * WG + lid < n;
            let x = xs[it];
            for (var w = 0u; w < NW; w++) {
                below[w] += select(0u, 1u, x < lo[w] && valid);
                let d = x - lo[w];
                if (d <= span[w] && valid) {
                    atomicAdd(&kc_bins[w * KCW + (d >> sh[w])], 1u);
                }
            }
        }
    }
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
    for (var t = lid; t < NW * KCW; t += WG) {
        let v = atomicLoad(&kc_bins[t]);
        if (v != 0u) {
            atomicAdd(&ap_cnt[8u + t], v);
        }
    }
}
