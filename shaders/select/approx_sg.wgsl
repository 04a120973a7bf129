// select/approx_sg.wgsl: after approx.wgsl, where the adapter has subgroup operations

// ap_hist with the keys inside a window staged per subgroup: each subgroup appends
// its inside keys (slots from a ballot per item) to two subgroups' worth of slots
// and, whenever a subgroup's worth is staged, searches them with every lane busy.
// ap_hist searches a key where it reads it, so a subgroup runs a search for every
// item in which any lane's key is inside (most items, with windows holding 5-8% of
// the keys); this runs about one per subgroup-size inside keys. The search is
// branchless with a trip count fixed by AW, so lanes stay converged; stores that
// must not happen go to the invocation's own spare slot instead of branching.
// (Measured and not kept, docs/benchmarks/history/session-12.md: one subgroup scan per chunk
// of AITEMS keys instead of a ballot per key, 0.94-1.23 ms at 2^28 against
// 0.85-1.05 ms; two subgroup scans per key instead of the ballot, 1.0-1.2 ms.)

struct InvS {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
}

const LOG_AW: u32 = firstLeadingBit(AW);
const SGW: u32 = {{SGW}}u;   // 32-bit words of a ballot that subgroups of this adapter use

// [0, 2 WG): two slots per invocation, a subgroup's together; [2 WG, 3 WG): one
// spare slot per invocation.
var<workgroup> ap_stage: array<K, 3u * WG>;

// Bucket of x (x inside the window of `len` splitters from `off`): 2j for the
// keys between splitters j - 1 and j, 2j + 1 for those equal to splitter j.
fn ap_bucket(x: K, off: u32, len: u32) -> u32 {
    var b = off;
    var l = len;
    for (var t = 0u; t < LOG_AW; t++) {
        let half = l / 2u;
        let lt = kless(ap_spl[b + max(half, 1u) - 1u], x) && half > 0u;
        b = select(b, b + half, lt);
        l = select(select(half, l, half == 0u), l - half, lt);
    }
    return 2u * b + select(0u, 1u, keq(ap_spl[b], x));
}

// Counts staged key y (inside a window) in the histogram: its window is the last
// whose first key (lo) is at most y; wo and wl are the windows' first splitters
// and lengths.
fn ap_add_staged(y: K, lo: array<K, NW>, wo: array<u32, NW>, wl: array<u32, NW>) {
    var yo = 0u;
    var yl = 1u;
    for (var v = 0u; v < NW; v++) {
        let lt = kless(y, lo[v]);
        yo = select(wo[v], yo, lt);
        yl = select(wl[v], yl, lt);
    }
    atomicAdd(&ap_bins[ap_bucket(y, yo, yl)], 1u);
}

@compute @workgroup_size(WG)
fn ap_hist_sg(inv: InvS) {
    let lid = inv.lid;
    ap_setup(lid);
    var lo: array<K, NW>;
    var hi: array<K, NW>;
    var wo: array<u32, NW>;
    var wl: array<u32, NW>;
    var below: array<u32, NW>;
    for (var w = 0u; w < NW; w++) {
        wo[w] = ap_get(ap_u.off, w);
        wl[w] = ap_get(ap_u.len, w);
        lo[w] = ap_spl[wo[w]];
        hi[w] = ap_spl[wo[w] + wl[w] - 1u];
        below[w] = 0u;
    }
    let sgs = inv.sg_size;
    let lane = inv.lane;
    let sbase = inv.sg_id * 2u * sgs;
    let spare = 2u * WG + lid;
    // The ballot bits of the lanes below this one.
    var lmask = vec4<u32>(0u);
    for (var q = 0u; q < 4u; q++) {
        let lo_bit = q * 32u;
        lmask[q] = select(select(0u, (1u << (lane - lo_bit)) - 1u, lane > lo_bit), 0xffffffffu, lane >= lo_bit + 32u);
    }
    var fill = 0u;
    let n = ch_piece.n;
    let chunks = (n + ACHUNK - 1u) / ACHUNK;
    let ng = inv.nwg.x * inv.nwg.y;
    for (var c = inv.wid.x + inv.wid.y * inv.nwg.x; c < chunks; c += ng) {
        let base = c * ACHUNK;
        var xs: array<K, AITEMS>;
        for (var it = 0u; it < AITEMS; it++) {
            xs[it] = load_src(min(base + it * WG + lid, n - 1u));
        }
        for (var it = 0u; it < AITEMS; it++) {
            let valid = base + it * WG + lid < n;
            let x = xs[it];
            // Its window, if any: the last one whose lower bound is at most x.
            var w = NW;
            var h = x;
            for (var v = 0u; v < NW; v++) {
                let lt = kless(x, lo[v]);
                below[v] += select(0u, 1u, lt && valid);
                w = select(v, w, lt);
                h = select(hi[v], h, lt);
            }
            let inside = valid && w < NW && !kless(h, x);
            // Slots from one ballot (two subgroup scans cost several times more).
            let b = subgroupBallot(inside);
            var tot = countOneBits(b.x);
            var pos = countOneBits(b.x & lmask.x);
            if (SGW > 1u) {
                tot += countOneBits(b.y) + countOneBits(b.z) + countOneBits(b.w);
                pos += countOneBits(b.y & lmask.y) + countOneBits(b.z & lmask.z) + countOneBits(b.w & lmask.w);
            }
            ap_stage[select(spare, sbase + fill + pos, inside)] = x;
            fill += tot;
            if (fill >= sgs) {
                subgroupBarrier();
                let z = ap_stage[sbase + sgs + lane];
                ap_add_staged(ap_stage[sbase + lane], lo, wo, wl);
                fill -= sgs;
                subgroupBarrier();
                ap_stage[select(spare, sbase + lane, lane < fill)] = z;
            }
        }
    }
    subgroupBarrier();
    if (lane < fill) {
        ap_add_staged(ap_stage[sbase + lane], lo, wo, wl);
    }
    ap_finish(lid, below);
}
