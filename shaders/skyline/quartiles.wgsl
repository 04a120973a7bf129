// SkyAlign, stage 2: the quartiles by radix select (qhist, qpick).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// aux[j * 3 + q] = the prefix (digits above `shift + 8`) selected so far for
// quartile q + 1 of dimension j; P.full = 1 on the first pass (no prefix yet).
// stats[0] counts surviving rows; stats[1 + (j * 3 + q) * 256 + digit] the bins
// (on the first pass, where the three quartiles of a dimension share one
// histogram, stats[1 + j * 256 + digit]).
//
// A grid-stride loop (the host launches a few hundred workgroups). The first pass
// counts every surviving row's digit of every dimension: in workgroup memory, then
// one global atomic per bin and workgroup (a global atomic per row and dimension
// was most of the quartiles' time). Later passes count only the rows inside a
// quartile's prefix (about 1/256 of them), straight into the global bins.
const QBINS: u32 = 4096u;
var<workgroup> q_loc: array<atomic<u32>, QBINS>;
var<workgroup> q_rows: atomic<u32>;

@compute @workgroup_size(WG)
fn qhist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let full = P.full == 1u;
    let bins = P.d * 256u;
    if full {
        for (var b = lid; b < bins; b += WG) {
            atomicStore(&q_loc[b], 0u);
        }
        if lid == 0u {
            atomicStore(&q_rows, 0u);
        }
    }
    workgroupBarrier();
    let groups = nwg.x * nwg.y;
    var kept = 0u;
    for (var r = (wid.x + wid.y * nwg.x) * WG + lid; r < P.n; r += groups * WG) {
        if !survives(r) { continue; }
        kept += 1u;
        let base = r * P.d;
        for (var j = 0u; j < P.d; j++) {
            let v = ranks[base + j];
            let digit = (v >> P.shift) & 255u;
            if full {
                atomicAdd(&q_loc[j * 256u + digit], 1u);
                continue;
            }
            for (var q = 0u; q < 3u; q++) {
                let k = j * 3u + q;
                if (v >> (P.shift + 8u)) == aux[k] {
                    atomicAdd(&stats[1u + k * 256u + digit], 1u);
                }
            }
        }
    }
    if full {
        if kept != 0u {
            atomicAdd(&q_rows, kept);
        }
        workgroupBarrier();
        for (var b = lid; b < bins; b += WG) {
            let c = atomicLoad(&q_loc[b]);
            if c != 0u {
                atomicAdd(&stats[1u + b], c);
            }
        }
        if lid == 0u {
            atomicAdd(&stats[0], atomicLoad(&q_rows));
        }
    }
}

// qpick's state `qst`: [0, 3d) the prefixes (the quartiles after the last pass),
// [3d, 6d) the ranks still sought inside them, 6d the surviving rows, 6d + 1 an
// error flag (no surviving row, or a rank past the bins: never for a consistent
// histogram). stats: qhist's histogram of this pass. P.full = 1 on the first pass.
var<workgroup> q_scan: array<u32, 256>;

@compute @workgroup_size(256)
fn qpick(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = wid.x;
    let n1 = atomicLoad(&stats[0]);
    var kth = 0u;
    if P.full == 1u {
        // (n1 = 0 is reported below, after the barriers.)
        kth = min((k % 3u + 1u) * (n1 / 4u) + ((k % 3u + 1u) * (n1 % 4u)) / 4u, max(n1, 1u) - 1u);
    } else {
        kth = qst[3u * P.d + k];
    }
    let prev = qst[k];
    // Every lane has read the state before the winner rewrites it.
    storageBarrier();
    // (The first pass's histogram is per dimension, see qhist.)
    let c = atomicLoad(&stats[1u + select(k, k / 3u, P.full == 1u) * 256u + lid]);
    // Inclusive scan of the bins (Hillis-Steele).
    q_scan[lid] = c;
    workgroupBarrier();
    for (var o = 1u; o < 256u; o <<= 1u) {
        var v = q_scan[lid];
        if lid >= o { v += q_scan[lid - o]; }
        workgroupBarrier();
        q_scan[lid] = v;
        workgroupBarrier();
    }
    if P.full == 1u && n1 == 0u {
        if lid == 0u { qst[6u * P.d + 1u] = 1u; }
        return;
    }
    let incl = q_scan[lid];
    let excl = incl - c;
    if excl <= kth && kth < incl {
        qst[k] = (select(prev, 0u, P.full == 1u) << 8u) | lid;
        qst[3u * P.d + k] = kth - excl;
    }
    if lid == 255u && kth >= incl {
        qst[6u * P.d + 1u] = 1u;
    }
    if k == 0u && lid == 0u && P.full == 1u {
        qst[6u * P.d] = n1;
    }
}
