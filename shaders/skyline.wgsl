// SkyAlign (Bøgh, Chester, Assent, VLDB 2015): a work-efficient GPU skyline over a
// static median/quartile grid. Entry points, in the order the host runs them on one
// chunk of a row-major rank matrix (`ranks[r * d + j]`, smaller is better):
//
//   minmax     tau = min over rows of (max rank of the row) and the largest rank
//              (atomics), for the pre-filter (Algorithm 1, lines 1-2) and the number
//              of radix digits of the quartile selection.
//   qhist      one radix-select pass (8-bit digit at `shift`) for the three quartiles
//              of every dimension over the rows that survive the pre-filter: rows
//              whose higher digits match the (dimension, quartile) prefix add to
//              that pair's 256-bin histogram; also counts the surviving rows.
//   mask_hist  median mask M of every surviving row; histogram over M.
//   scatter    counting-sort scatter by M into the (|M|, M) order the host chose
//              (cursors = each mask's first slot): the row's ranks, M | Q << 16 and
//              its row id. Points inside one partition land in any order.
//   iota       the identity working set 0..n.
//   iterate    one SkyAlign iteration l over the working set (indices into the
//              sorted points, |M| >= l, in (|M|, M) order): a point with |M| = l
//              compares against its own partition (Eq. 3 skips the others; Eq. 5 is
//              the quartile mask test before each dominance test); a point with
//              |M| > l walks the level-l partitions, skips those with Eq. 1 (one
//              mask test each), and inside the others uses Eq. 4 before a
//              distinct-value dominance test. Dominated points are marked dead;
//              points with |M| > l that survive are flagged for the repacking
//              (stream compaction on the host side) and counted per mask so the
//              host can record the next partition starts.
//
// Mask bits (Algorithm 1, lines 8-9): M[j] = p[j] > q2[j]; Q[j] = p[j] > (M[j] ? q3[j]
// : q1[j]). d <= 16, so M | Q << 16 packs into one u32.
//
// Counters (u64 as lo/hi u32 pairs, carry by atomics; summed per workgroup in
// workgroup memory first): stats[0..2] dominance tests, stats[2..4] mask tests;
// stats[4..] is the per-mask histogram of kept points.

struct Params {
    n: u32,
    d: u32,
    l: u32,
    tau: u32,
    shift: u32,
    full: u32,
    npart: u32,
    stride: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ranks: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> aux: array<u32>;
@group(0) @binding(4) var<storage, read_write> out_ranks: array<u32>;
@group(0) @binding(5) var<storage, read_write> mq: array<u32>;
@group(0) @binding(6) var<storage, read_write> ids: array<u32>;
@group(0) @binding(7) var<storage, read> widx: array<u32>;
@group(0) @binding(8) var<storage, read_write> dead: array<u32>;
@group(0) @binding(9) var<storage, read_write> keep: array<u32>;

const WG: u32 = {{WG}}u;

fn row_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// The pre-filter: a row survives iff some rank is below tau or all ranks equal tau
// (the row whose max is tau weakly dominates every row with all ranks >= tau, and
// strictly unless that row is all tau).
fn survives(r: u32) -> bool {
    let base = r * P.d;
    var mn = 0xffffffffu;
    var mx = 0u;
    for (var j = 0u; j < P.d; j++) {
        let v = ranks[base + j];
        mn = min(mn, v);
        mx = max(mx, v);
    }
    return mn < P.tau || mx == P.tau;
}

@compute @workgroup_size(WG)
fn minmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n { return; }
    let base = r * P.d;
    var mx = 0u;
    for (var j = 0u; j < P.d; j++) {
        mx = max(mx, ranks[base + j]);
    }
    atomicMin(&stats[0], mx);
    atomicMax(&stats[1], mx);
}

// aux[j * 3 + q] = the prefix (digits above `shift + 8`) selected so far for
// quartile q + 1 of dimension j; P.full = 1 on the first pass (no prefix yet).
// stats[0] counts surviving rows; stats[1 + (j * 3 + q) * 256 + digit] the bins.
@compute @workgroup_size(WG)
fn qhist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n || !survives(r) { return; }
    atomicAdd(&stats[0], 1u);
    let base = r * P.d;
    for (var j = 0u; j < P.d; j++) {
        let v = ranks[base + j];
        let digit = (v >> P.shift) & 255u;
        for (var q = 0u; q < 3u; q++) {
            let k = j * 3u + q;
            if P.full == 1u || (v >> (P.shift + 8u)) == aux[k] {
                atomicAdd(&stats[1u + k * 256u + digit], 1u);
            }
        }
    }
}

// aux[j * 3 + q]: quartile q + 1 of dimension j.
fn masks(r: u32) -> vec2<u32> {
    let base = r * P.d;
    var m = 0u;
    var qm = 0u;
    for (var j = 0u; j < P.d; j++) {
        let v = ranks[base + j];
        let above = v > aux[j * 3u + 1u];
        let pivot = select(aux[j * 3u], aux[j * 3u + 2u], above);
        m |= select(0u, 1u << j, above);
        qm |= select(0u, 1u << j, v > pivot);
    }
    return vec2<u32>(m, qm);
}

@compute @workgroup_size(WG)
fn mask_hist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n || !survives(r) { return; }
    let m = masks(r);
    atomicAdd(&stats[m.x], 1u);
}

@compute @workgroup_size(WG)
fn scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n || !survives(r) { return; }
    let m = masks(r);
    let pos = atomicAdd(&stats[m.x], 1u);
    let src = r * P.d;
    let dst = pos * P.d;
    for (var j = 0u; j < P.d; j++) {
        out_ranks[dst + j] = ranks[src + j];
    }
    mq[pos] = m.x | (m.y << 16u);
    ids[pos] = r;
}

@compute @workgroup_size(WG)
fn iota(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n { return; }
    keep[r] = r;
}

// p dominates q (no worse everywhere, better somewhere).
fn dominates(p: u32, q: u32) -> bool {
    let pb = p * P.d;
    let qb = q * P.d;
    var strict = false;
    for (var j = 0u; j < P.d; j++) {
        let a = ranks[pb + j];
        let b = ranks[qb + j];
        if a > b { return false; }
        strict = strict || a < b;
    }
    return strict;
}

// p is no worse than q everywhere: dominance when p and q are known to differ
// (the "distinct-value" test of Algorithm 1, line 18).
fn no_worse(p: u32, q: u32) -> bool {
    let pb = p * P.d;
    let qb = q * P.d;
    for (var j = 0u; j < P.d; j++) {
        if ranks[pb + j] > ranks[qb + j] { return false; }
    }
    return true;
}

fn add64(at: u32, x: u32) {
    if x == 0u { return; }
    let old = atomicAdd(&stats[at], x);
    if old + x < old {
        atomicAdd(&stats[at + 1u], 1u);
    }
}

// aux: the level-l partitions as (mask, start, end) triples sorted by mask,
// P.npart of them; positions are working-set positions.
// Returns this point's (dominance tests, mask tests).
fn iterate_one(i: u32) -> vec2<u32> {
    let pi = widx[i];
    let mqi = mq[pi];
    let mi = mqi & 0xffffu;
    let qi = mqi >> 16u;
    let order = countOneBits(mi);
    var dominated = false;
    var dts = 0u;
    var mts = 0u;
    if order == P.l {
        // Eq. 3: only the own partition can hold dominators; find it.
        var lo = 0u;
        var hi = P.npart;
        while lo + 1u < hi {
            let mid = (lo + hi) / 2u;
            if aux[mid * 3u] <= mi { lo = mid; } else { hi = mid; }
        }
        let start = aux[lo * 3u + 1u];
        let end = aux[lo * 3u + 2u];
        for (var j = start; j < end; j++) {
            if j == i { continue; }
            let pj = widx[j];
            let qj = mq[pj] >> 16u;
            mts += 1u;
            // Eq. 5: Q_j has a bit Q_i lacks => p_j does not dominate p_i.
            if (qj | qi) == qi {
                dts += 1u;
                if dominates(pj, pi) {
                    dominated = true;
                    break;
                }
            }
        }
    } else {
        let notmi = ~mi;
        for (var k = 0u; k < P.npart; k++) {
            let mk = aux[k * 3u];
            mts += 1u;
            // Eq. 1 (Eq. 2 holds by construction: this partition has a lower order).
            if (mk | mi) != mi { continue; }
            let start = aux[k * 3u + 1u];
            let end = aux[k * 3u + 2u];
            let same = mk | notmi;
            for (var j = start; j < end; j++) {
                let pj = widx[j];
                let qj = mq[pj] >> 16u;
                mts += 1u;
                // Eq. 4.
                if ((same & qj) | qi) == qi {
                    dts += 1u;
                    if no_worse(pj, pi) {
                        dominated = true;
                        break;
                    }
                }
            }
            if dominated { break; }
        }
    }
    if dominated {
        dead[pi] = 1u;
    }
    let kept = !dominated && order > P.l;
    keep[i] = select(0u, 1u, kept);
    if kept {
        atomicAdd(&stats[4u + mi], 1u);
    }
    return vec2<u32>(dts, mts);
}

// Workgroup sums of the counters (u64 as lo/hi with carry), added to the global
// counters by one invocation.
var<workgroup> wg_cnt: array<atomic<u32>, 4>;

fn wg_add64(at: u32, x: u32) {
    if x == 0u { return; }
    let old = atomicAdd(&wg_cnt[at], x);
    if old + x < old {
        atomicAdd(&wg_cnt[at + 1u], 1u);
    }
}

@compute @workgroup_size(WG)
fn iterate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    var c = vec2<u32>(0u, 0u);
    if i < P.n {
        c = iterate_one(i);
    }
    wg_add64(0u, c.x);
    wg_add64(2u, c.y);
    workgroupBarrier();
    if lid == 0u {
        add64(0u, atomicLoad(&wg_cnt[0]));
        atomicAdd(&stats[1], atomicLoad(&wg_cnt[1]));
        add64(2u, atomicLoad(&wg_cnt[2]));
        atomicAdd(&stats[3], atomicLoad(&wg_cnt[3]));
    }
}
