// SkyAlign, stage 4: one level, one invocation per point (iterate).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// Row p against the point's own ranks q (held in registers): dominance (strict:
// no worse everywhere and better somewhere), else the distinct-value test (no worse
// everywhere, Algorithm 1, line 18). Every rank is loaded (no early exit), so the D
// loads are independent and issue together.
fn dom_private(p: u32, q: ptr<function, array<u32, D>>, strict: bool) -> bool {
    let pb = p * D;
    var le = true;
    var lt = false;
    for (var j = 0u; j < D; j++) {
        let a = ranks[pb + j];
        let b = (*q)[j];
        le = le & (a <= b);
        lt = lt | (a < b);
    }
    return le & (lt | !strict);
}

//
// Resumable: P.full > 0 bounds the loop steps of one invocation per launch (llvmpipe
// stops every loop of an invocation for good once its SIMD group has taken 65535
// loop back-edges in total, LP_MAX_TGSI_LOOP_ITERATIONS; a dominance test then
// sees only its first dimension). An invocation that runs out of steps saves its
// place in res[2i], res[2i + 1] (the next partition index + 1 and position),
// counts itself in stats[4] and writes nothing else; the host launches again until
// stats[4] stays 0. res[2i] = 0xffffffff: finished. P.full = 0: no bound, and
// `res` is not used (a 4-word stand-in is bound).
// Returns this point's (dominance tests, mask tests).
fn iterate_one(i: u32) -> vec2<u32> {
    let pi = widx[i];
    let mqi = wq[i];
    let mi = mqi & 0xffffu;
    let qi = mqi >> 16u;
    let order = countOneBits(mi);
    var qr: array<u32, D>;
    for (var t = 0u; t < D; t++) {
        qr[t] = ranks[pi * D + t];
    }
    var dominated = false;
    var dts = 0u;
    var mts = 0u;
    var steps = 0u;
    let limit = select(0xffffffffu, P.full, P.full > 0u);
    var k = 0u;
    var j = 0u;
    if P.full > 0u {
        k = res[2u * i];
        j = res[2u * i + 1u];
    }
    var end = 0u;
    var same = 0u;
    if order == P.l {
        // Eq. 3: only the own partition can hold dominators.
        let lo = own_partition(mi);
        if k == 0u {
            j = aux[lo * 3u + 1u];
            k = 1u;
        }
        // Only the prefix whose keys are at most q's (see sort_level).
        end = cut_end(lo, aux[lo * 3u + 1u], aux[lo * 3u + 2u], key_of(pi, mi));
        loop {
            if dominated || j >= end || steps >= limit { break; }
            steps += 1u;
            let qj = wq[j] >> 16u;
            // Eq. 5: Q_j has a bit Q_i lacks => p_j does not dominate p_i.
            if j != i {
                mts += 1u;
                if (qj | qi) == qi {
                    dts += 1u;
                    dominated = dom_private(widx[j], &qr, true);
                }
            }
            j += 1u;
        }
    } else {
        // One flat loop over (partition k, position j).
        let notmi = ~mi;
        if k > 0u {
            let mk = aux[(k - 1u) * 3u];
            if (mk | mi) == mi {
                end = cut_end(k - 1u, aux[(k - 1u) * 3u + 1u], aux[(k - 1u) * 3u + 2u], key_of(pi, mk));
                same = mk | notmi;
            }
        }
        loop {
            if dominated || steps >= limit { break; }
            steps += 1u;
            if j >= end {
                if k >= P.npart { break; }
                let mk = aux[k * 3u];
                mts += 1u;
                // Eq. 1 (Eq. 2 holds by construction: this partition has a lower order).
                if (mk | mi) == mi {
                    j = aux[k * 3u + 1u];
                    end = cut_end(k, j, aux[k * 3u + 2u], key_of(pi, mk));
                    same = mk | notmi;
                }
                k += 1u;
                continue;
            }
            let qj = wq[j] >> 16u;
            mts += 1u;
            // Eq. 4.
            if ((same & qj) | qi) == qi {
                dts += 1u;
                dominated = dom_private(widx[j], &qr, false);
            }
            j += 1u;
        }
    }
    if !dominated && steps >= limit {
        // Out of steps: save the place, come back in the next launch.
        res[2u * i] = k;
        res[2u * i + 1u] = j;
        atomicAdd(&stats[4], 1u);
        return vec2<u32>(dts, mts);
    }
    if P.full > 0u {
        res[2u * i] = 0xffffffffu;
    }
    settle(i, pi, mi, dominated);
    return vec2<u32>(dts, mts);
}

@compute @workgroup_size(WG)
fn iterate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    // P.shift: the first working-set position of this launch.
    let i = row_index(wid, nwg, lid) + P.shift;
    if i >= level_size(P.l) { return; }
    if P.full > 0u && res[2u * i] == 0xffffffffu { return; }
    let c = iterate_one(i);
    let g = wid.x + wid.y * nwg.x;
    add64(g, 0u, c.x);
    add64(g, 2u, c.y);
}
