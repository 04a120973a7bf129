// SkyAlign, stage 4: one level, one workgroup per point (iterate_wide).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// iterate_wide: one workgroup of WGW lanes per working-set point (see the header).

const WGW: u32 = {{WGW}}u;

var<workgroup> w_found: atomic<u32>;
var<workgroup> w_cnt: atomic<u32>;
var<workgroup> w_n: u32;
var<workgroup> w_stop: u32;
var<workgroup> w_pt: vec2<u32>;
var<workgroup> w_start: array<u32, WGW>;
var<workgroup> w_same: array<u32, WGW>;
var<workgroup> w_pre: array<u32, WGW + 1u>;
var<workgroup> w_dts: atomic<u32>;
var<workgroup> w_mts: atomic<u32>;
// The point's own ranks (for its sums over the candidate partitions' masks).
var<workgroup> w_qr: array<u32, 16>;
// Positions a lane tests per step of the joint range (see scan_range); the
// positions that pass the step's mask tests, and their count.
const WQS: u32 = {{WQS}}u;
var<workgroup> w_q: array<u32, WGW * WQS>;
var<workgroup> w_qn: atomic<u32>;

// The point's sum of ranks over the dimensions in m (key_of from w_qr).
fn key_of_q(m: u32) -> u32 {
    var s = 0u;
    var mm = m;
    while mm != 0u {
        s += w_qr[firstTrailingBit(mm)] >> P.kshift;
        mm &= mm - 1u;
    }
    return s;
}

// C(n, k) for n, k <= 16: the host appends the table to ptab (at 2^d + n * 17 + k).
fn binom(n: u32, k: u32) -> u32 {
    return ptab[(1u << P.d) + n * 17u + k];
}

// The t-th k-subset of {0 .. n-1} in increasing order of its bit pattern
// (combinatorial number system: the largest b with C(b, k) <= t is the top bit).
fn unrank(t: u32, n: u32, k: u32) -> u32 {
    var x = 0u;
    var rest = t;
    var r = k;
    var b = n;
    while b > 0u && r > 0u {
        b -= 1u;
        let c = binom(b, r);
        if c <= rest {
            x |= 1u << b;
            rest -= c;
            r -= 1u;
        }
    }
    return x;
}

// Bit i of x moved to the position of the i-th set bit of m (pdep).
fn deposit(x: u32, m: u32) -> u32 {
    var r = 0u;
    var mm = m;
    var bit = 1u;
    while mm != 0u {
        let low = mm & (~mm + 1u);
        if (x & bit) != 0u {
            r |= low;
        }
        mm &= mm - 1u;
        bit <<= 1u;
    }
    return r;
}

// The dominance test of working-set position j against the point (w_qr): no
// worse in every dimension and, if strict, better in one (strict: within the
// point's own partition; elsewhere the masks differ, so the rows do); a dominator
// sets w_found.
fn dominates_q(j: u32, strict: bool) {
    let pb = widx[j] * D;
    var le = true;
    var lt = false;
    for (var t = 0u; t < D; t++) {
        let a = ranks[pb + t];
        let b = w_qr[t];
        le = le & (a <= b);
        lt = lt | (a < b);
    }
    if le & (lt | !strict) {
        atomicStore(&w_found, 1u);
    }
}

// The joint range of the candidate partitions in w_start / w_same / w_pre (its
// `total` positions, workgroup-uniform) against the point (quartile mask qi), in
// steps of WGW * WQS positions. A step has two phases: every lane loads WQS
// positions' mask words and runs Eq. 4 on them, queueing the positions that pass;
// then the lanes take the queue's distinct-value dominance tests together. A
// lane's tests thus never wait on one another's loads: about one position in
// thirty passes, so a lane that tested as it went stalled its warp on a dependent
// load chain (id, then ranks) nearly every step.
// Stops after the step in which a dominator turns up. Returns this lane's
// (dominance tests, mask tests).
fn scan_range(lid: u32, total: u32, qi: u32) -> vec2<u32> {
    var dts = 0u;
    var mts = 0u;
    var m = 0u;
    for (var t0 = 0u; t0 < total; t0 += WGW * WQS) {
        var js: array<u32, WQS>;
        var qs: array<u32, WQS>;
        var ss: array<u32, WQS>;
        for (var u = 0u; u < WQS; u++) {
            let t = t0 + u * WGW + lid;
            js[u] = 0xffffffffu;
            if t < total {
                while t >= w_pre[m + 1u] {
                    m += 1u;
                }
                let j = w_start[m] + t - w_pre[m];
                js[u] = j;
                ss[u] = w_same[m];
                qs[u] = wq[j];
            }
        }
        for (var u = 0u; u < WQS; u++) {
            if js[u] != 0xffffffffu {
                mts += 1u;
                if ((ss[u] & (qs[u] >> 16u)) | qi) == qi {
                    w_q[atomicAdd(&w_qn, 1u)] = js[u];
                }
            }
        }
        workgroupBarrier();
        let qn = atomicLoad(&w_qn);
        for (var e = lid; e < qn; e += WGW) {
            dts += 1u;
            dominates_q(w_q[e], false);
        }
        workgroupBarrier();
        if lid == 0u {
            w_stop = atomicLoad(&w_found);
            atomicStore(&w_qn, 0u);
        }
        if workgroupUniformLoad(&w_stop) != 0u { break; }
    }
    return vec2<u32>(dts, mts);
}

@compute @workgroup_size(WGW)
fn iterate_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    // P.shift: the first working-set position of this launch; one point a workgroup.
    let i = wid.x + wid.y * nwg.x + P.shift;
    if i >= level_size(P.l) { return; }
    // Lane 0 reads the point; the uniform load makes its mask workgroup-uniform, so
    // the partition loop below (with its barriers) is in uniform control flow.
    if lid == 0u {
        atomicStore(&w_found, 0u);
        w_stop = 0u;
        atomicStore(&w_qn, 0u);
        atomicStore(&w_dts, 0u);
        atomicStore(&w_mts, 0u);
        w_pt = vec2<u32>(widx[i], wq[i]);
    }
    // The point's ranks (the uniform load below is also the barrier for them).
    if lid < D {
        w_qr[lid] = ranks[widx[i] * D + lid];
    }
    let pt = workgroupUniformLoad(&w_pt);
    let pi = pt.x;
    let mqi = pt.y;
    let mi = mqi & 0xffffu;
    let qi = mqi >> 16u;
    let order = countOneBits(mi);
    var dts = 0u;
    var mts = 0u;
    if order == P.l {
        // Eq. 3: only the own partition can hold dominators. Each lane tests as
        // it goes (own partitions are mostly small: the stepped scan's barriers
        // cost more here than they save, docs/benchmarks/history/session-19.md): Eq. 5 (Q_j has
        // a bit Q_i lacks => p_j does not dominate p_i), then the full dominance
        // test; the point itself skipped; only the prefix whose keys are at most
        // q's (see sort_level).
        let lo = own_partition(mi);
        let end = cut_end(lo, aux[lo * 3u + 1u], aux[lo * 3u + 2u], key_of_q(mi));
        for (var j = aux[lo * 3u + 1u] + lid; j < end; j += WGW) {
            if atomicLoad(&w_found) != 0u { break; }
            if j == i { continue; }
            mts += 1u;
            if ((wq[j] >> 16u) | qi) == qi {
                dts += 1u;
                dominates_q(j, true);
            }
        }
    } else {
        let notmi = ~mi;
        // Candidate partitions, WGW at a time: the level-l subsets of M (looked up
        // in ptab, the level's mask -> partition + 1 table) or every partition
        // (Eq. 1). One mask test per candidate either way.
        let nsub = binom(order, P.l);
        // P.full: 0 chooses, 1 always looks subsets up, 2 never (tests).
        // Lookups where they take fewer rounds of WGW candidates than the walk
        // (a lookup costs about what a partition test does).
        let by_subsets = select((nsub + WGW - 1u) / WGW < (P.npart + WGW - 1u) / WGW, P.full == 1u, P.full != 0u);
        let ncand = select(P.npart, nsub, by_subsets);
        for (var k0 = 0u; k0 < ncand; k0 += WGW) {
            if lid == 0u {
                atomicStore(&w_cnt, 0u);
            }
            workgroupBarrier();
            let c = k0 + lid;
            if c < ncand {
                mts += 1u;
                var k = 0xffffffffu;
                if by_subsets {
                    k = ptab[deposit(unrank(c, order, P.l), mi)] - 1u;
                } else if (aux[c * 3u] | mi) == mi {
                    // Eq. 2 holds by construction: this partition has a lower order.
                    k = c;
                }
                if k != 0xffffffffu {
                    let start = aux[k * 3u + 1u];
                    let mk = aux[k * 3u];
                    // Only the prefix whose keys are at most q's sum over the
                    // partition's mask (see sort_level).
                    let len = cut_end(k, start, aux[k * 3u + 2u], key_of_q(mk)) - start;
                    // P.packed = 1: one atomic gives the slot (bits 25..) and the
                    // slot's offset in the joint range (bits 0..24), so offsets
                    // follow slot order with no scan (the host sets it only where
                    // WGW partitions cannot reach 2^25 points).
                    var slot = 0u;
                    if P.packed == 1u {
                        let old = atomicAdd(&w_cnt, (1u << 25u) | len);
                        slot = old >> 25u;
                        w_pre[slot] = old & 0x1ffffffu;
                    } else {
                        slot = atomicAdd(&w_cnt, 1u);
                        w_pre[slot + 1u] = len;
                    }
                    w_start[slot] = start;
                    w_same[slot] = mk | notmi;
                }
            }
            workgroupBarrier();
            // The matching partitions' points as one range (offsets from the packed
            // atomic, or sizes summed by lane 0), strided by the lanes: small
            // partitions do not leave lanes idle.
            if lid == 0u {
                let packed = atomicLoad(&w_cnt);
                if P.packed == 1u {
                    let cnt = packed >> 25u;
                    w_pre[cnt] = packed & 0x1ffffffu;
                    w_n = w_pre[cnt];
                } else {
                    w_pre[0] = 0u;
                    for (var m = 0u; m < packed; m++) {
                        w_pre[m + 1u] += w_pre[m];
                    }
                    w_n = w_pre[packed];
                }
            }
            let r = scan_range(lid, workgroupUniformLoad(&w_n), qi);
            dts += r.x;
            mts += r.y;
            if workgroupUniformLoad(&w_stop) != 0u { break; }
        }
    }
    if dts != 0u { atomicAdd(&w_dts, dts); }
    if mts != 0u { atomicAdd(&w_mts, mts); }
    workgroupBarrier();
    if lid == 0u {
        settle(i, pi, mi, atomicLoad(&w_found) != 0u);
        let g = wid.x + wid.y * nwg.x;
        add64(g, 0u, atomicLoad(&w_dts));
        add64(g, 2u, atomicLoad(&w_mts));
    }
}
