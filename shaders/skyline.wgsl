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
//   qpick      after each qhist pass, on the device (no readback between
//              passes): one workgroup per (dimension, quartile) scans its 256
//              bins and appends the digit that holds its rank to its prefix.
//   mask_hist  median mask M and quartile mask Q of every surviving row (mq[r] =
//              M | Q << 16; dead[r] = 1 for the rows the pre-filter drops);
//              histogram over M, followed by the surviving-row count and the
//              quartile selection's error flag (from qpick's state).
//   scatter    counting-sort scatter of the surviving row ids by M into the
//              (|M|, M) order the host chose (cursors = each mask's first slot):
//              the initial working set. Points inside one partition land in any
//              order. The rank matrix itself stays where it is: an invocation loads
//              its own row once, and the rows it compares against are the same for
//              all invocations of a partition (broadcast loads).
//   iterate    one SkyAlign iteration l over the working set (row ids with
//              |M| >= l, in (|M|, M) order): a point with |M| = l
//              compares against its own partition (Eq. 3 skips the others; Eq. 5 is
//              the quartile mask test before each dominance test); a point with
//              |M| > l walks the level-l partitions, skips those with Eq. 1 (one
//              mask test each), and inside the others uses Eq. 4 before a
//              distinct-value dominance test. Dominated points are marked dead;
//              points with |M| > l that survive are counted per mask (for
//              `plan`) and moved by the repacking.
//   plan       after each level, one workgroup: the kept points' per-mask counts
//              give each mask's first slot in the next working set, the next
//              level's partition bounds, its size and its dispatch sizes (the
//              level table), so the host records every level ahead and the levels
//              run back to back, the iterations and repacking dispatched
//              indirectly.
//   repack     the kept points scattered to their partitions for the next level.
//   sort_level before each level: every level-l partition (one workgroup each)
//              sorted by its points' key, the sum of their ranks over the
//              partition's own mask M' (ids and masks permuted; the keys stay in
//              workgroup memory), and a directory of KDIR keys written per
//              partition (the key at every KDIR-th of its length). A point q
//              with M' a subset of its mask is dominated by p of M' only if p is
//              no worse in every dimension, so in particular the key of p is at
//              most q's own sum over M' (the dimensions of M' are the ones that
//              discriminate: outside M' either p is below and q above the median,
//              which always holds, or both are below, which q's sum does not
//              see). The iterations therefore scan only the prefix of each
//              partition up to the first directory key above q's sum (independent
//              loads, no search chain), which skips about half of a partition's
//              points before any mask test. Partitions too large for workgroup
//              memory get an all-zero directory (no cut); so does every partition
//              when the cut is off.
//   alive_bits the rows not marked dead as a bitmap (the skyline, read back).
//   iterate_wide
//              the same iteration with one workgroup per point instead of one
//              invocation: the point's lanes test 64 level-l partitions at a time
//              with Eq. 1 (or Eq. 3: its own partition only), then stride through
//              every matching partition's points together in steps (each lane
//              runs Eq. 4 / Eq. 5 on a few positions and queues those that pass,
//              then the lanes take the queued dominance tests together; see
//              scan_range), stopping after the step that finds a dominator. A
//              point's work grows with the number of level-l partitions below its
//              mask (C(|M|, l) of them), so one invocation per point leaves the
//              warps of high-|M| points running long after the rest; spreading each
//              point over a workgroup balances it.
//
// Mask bits (Algorithm 1, lines 8-9): M[j] = p[j] > q2[j]; Q[j] = p[j] > (M[j] ? q3[j]
// : q1[j]). d <= 16, so M | Q << 16 packs into one u32.
//
// Counters (u64 as lo/hi u32 pairs, carry by atomics, striped, see add64): ctr
// holds the dominance and mask tests; stats[4] counts unfinished invocations (see
// `iterate`); stats[5..] is the per-mask histogram of kept points.

struct Params {
    n: u32,
    d: u32,
    l: u32,
    tau: u32,
    shift: u32,
    full: u32,
    npart: u32,
    stride: u32,
    kshift: u32,   // right shift of every rank in a key (sort_level)
    packed: u32,   // iterate_wide: slot offsets from one packed atomic
    sort_lanes: u32, // sort_level's SWG (host side only)
    pad: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ranks: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> aux: array<u32>;
@group(0) @binding(4) var<storage, read_write> res: array<u32>;
@group(0) @binding(5) var<storage, read_write> mq: array<u32>;
@group(0) @binding(6) var<storage, read_write> wq: array<u32>;
@group(0) @binding(7) var<storage, read> widx: array<u32>;
@group(0) @binding(8) var<storage, read_write> dead: array<u32>;
@group(0) @binding(9) var<storage, read_write> keep: array<u32>;
@group(0) @binding(10) var<storage, read> ptab: array<u32>;
@group(0) @binding(11) var<storage, read_write> idx_out: array<u32>;
@group(0) @binding(12) var<storage, read_write> wq_out: array<u32>;
// Working-set ids, writable (sort_level only; the iterations read `widx`).
@group(0) @binding(13) var<storage, read_write> widx_rw: array<u32>;
// Each level-l partition's key directory (see sort_level), written by sort_level ...
@group(0) @binding(14) var<storage, read_write> kdir: array<u32>;
// ... and read by the iterations (KDIR / 4 vectors a partition).
@group(0) @binding(15) var<storage, read> kdir_r: array<vec4<u32>>;
// qpick's state (see qpick).
@group(0) @binding(16) var<storage, read_write> qst: array<u32>;
// The level table (see `plan`): LVW words per level, written by plan ...
@group(0) @binding(17) var<storage, read_write> lvl_w: array<u32>;
// ... and read by the iterations and the repacking (the working set's size).
@group(0) @binding(18) var<storage, read> lvl: array<u32>;
// The masks in (|M|, M) order (plan).
@group(0) @binding(19) var<storage, read> ordm: array<u32>;
// Each mask's first slot in the next working set (plan writes, repack counts on).
@group(0) @binding(20) var<storage, read_write> cur_w: array<u32>;
// The next level's partition table (plan fills in the bounds).
@group(0) @binding(21) var<storage, read_write> aux_w: array<u32>;
// The test counters (see add64).
@group(0) @binding(22) var<storage, read_write> ctr: array<atomic<u32>>;
// `stats` read plainly (plan: the per-mask counts the iteration left).
@group(0) @binding(25) var<storage, read> cnt: array<u32>;

const WG: u32 = {{WG}}u;
// The number of dimensions (= P.d), a constant so the dominance tests' loops unroll
// and issue all of a row's loads at once.
const D: u32 = {{D}}u;

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

var<workgroup> mm_min: atomic<u32>;
var<workgroup> mm_max: atomic<u32>;

// Reduced in workgroup memory first: one global atomic each per workgroup (one per
// row put a million atomics on two addresses).
@compute @workgroup_size(WG)
fn minmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    if lid == 0u {
        atomicStore(&mm_min, 0xffffffffu);
        atomicStore(&mm_max, 0u);
    }
    workgroupBarrier();
    let r = row_index(wid, nwg, lid);
    if r < P.n {
        let base = r * P.d;
        var mx = 0u;
        for (var j = 0u; j < P.d; j++) {
            mx = max(mx, ranks[base + j]);
        }
        atomicMin(&mm_min, mx);
        atomicMax(&mm_max, mx);
    }
    workgroupBarrier();
    if lid == 0u {
        atomicMin(&stats[0], atomicLoad(&mm_min));
        atomicMax(&stats[1], atomicLoad(&mm_max));
    }
}

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

// Writes mq[r] = M | Q << 16 and dead[r] = 0 for the surviving rows (dead[r] = 1
// for the rest) and counts the surviving rows per M.
@compute @workgroup_size(WG)
fn mask_hist(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n { return; }
    if r == 0u {
        // aux is qpick's state: the surviving rows and the error flag follow the
        // 2^d counts, so one readback brings all three.
        atomicStore(&stats[1u << P.d], aux[6u * P.d]);
        atomicStore(&stats[(1u << P.d) + 1u], aux[6u * P.d + 1u]);
    }
    if !survives(r) {
        dead[r] = 1u;
        return;
    }
    let m = masks(r);
    mq[r] = m.x | (m.y << 16u);
    dead[r] = 0u;
    atomicAdd(&stats[m.x], 1u);
}

// Counting-sort scatter: the surviving row ids in (|M|, M) order (stats = each
// mask's next slot); the order inside one partition is arbitrary.
@compute @workgroup_size(WG)
fn scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let r = row_index(wid, nwg, lid);
    if r >= P.n || dead[r] != 0u { return; }
    let m = mq[r];
    let pos = atomicAdd(&stats[m & 0xffffu], 1u);
    keep[pos] = r;
    wq[pos] = m;
}

// The level table: LVW words for each level l at l * LVW: [0, 3) the
// workgroups of a per-point dispatch over the level's working set (WG points a
// group), [3, 6) those of a workgroup-per-point dispatch, both as indirect dispatch
// arguments (x, y, 1) with x at most P.stride; [9] the working set's size.
const LVW: u32 = 16u;

fn level_size(l: u32) -> u32 {
    return lvl[l * LVW + 9u];
}

// Repacking after level P.l: the kept working-set points (not dead, |M| > l) go
// to their mask's next slot (stats = each mask's first slot in (|M|, M) order, from
// `plan`), ids and masks together; the order inside a partition is arbitrary.
@compute @workgroup_size(WG)
fn repack(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = row_index(wid, nwg, lid);
    if i >= level_size(P.l) { return; }
    let m = wq[i];
    let r = widx[i];
    if dead[r] != 0u || countOneBits(m & 0xffffu) <= P.l { return; }
    let pos = atomicAdd(&stats[m & 0xffffu], 1u);
    idx_out[pos] = r;
    wq_out[pos] = m;
}

// plan: after level P.l's iteration, on the device, so that the levels run without
// a readback. One workgroup: the kept points' per-mask counts (cnt[5 ..]) in
// (|M|, M) order, from order position P.tau on (the masks with |M| > l; the others
// hold no kept point), give each mask's first slot in the next working set
// (cur_w, the repacking's cursors); the next level's partition table (aux_w, P.npart
// triples whose masks the host wrote) gets its bounds; the level table's entry of
// the next level (P.shift) gets the working set's size and its dispatch sizes.
const PWG: u32 = 256u;
var<workgroup> p_tot: array<u32, PWG>;

fn dispatch_args(at: u32, groups: u32) {
    var x = groups;
    var y = 1u;
    if groups > P.stride {
        x = P.stride;
        y = (groups + P.stride - 1u) / P.stride;
    }
    lvl_w[at] = x;
    lvl_w[at + 1u] = y;
    lvl_w[at + 2u] = 1u;
}

@compute @workgroup_size(PWG)
fn plan(@builtin(local_invocation_index) lid: u32) {
    let masks = 1u << P.d;
    let off = min(P.tau, masks);
    let per = (masks - off + PWG - 1u) / PWG;
    let a = min(off + lid * per, masks);
    let b = min(a + per, masks);
    // Each lane sums a run of the order, the runs' sums are scanned, and each lane
    // walks its run again writing first slots; four masks a step, so their loads
    // overlap (plain loads through `cnt`: atomic ones were not overlapped).
    var s = 0u;
    var t = a;
    for (; t + 4u <= b; t += 4u) {
        let m0 = ordm[t];
        let m1 = ordm[t + 1u];
        let m2 = ordm[t + 2u];
        let m3 = ordm[t + 3u];
        s += cnt[5u + m0] + cnt[5u + m1] + cnt[5u + m2] + cnt[5u + m3];
    }
    for (; t < b; t++) {
        s += cnt[5u + ordm[t]];
    }
    p_tot[lid] = s;
    workgroupBarrier();
    for (var o = 1u; o < PWG; o <<= 1u) {
        var v = p_tot[lid];
        if lid >= o { v += p_tot[lid - o]; }
        workgroupBarrier();
        p_tot[lid] = v;
        workgroupBarrier();
    }
    var run = p_tot[lid] - s;
    t = a;
    for (; t + 4u <= b; t += 4u) {
        let m0 = ordm[t];
        let m1 = ordm[t + 1u];
        let m2 = ordm[t + 2u];
        let m3 = ordm[t + 3u];
        let c0 = cnt[5u + m0];
        let c1 = cnt[5u + m1];
        let c2 = cnt[5u + m2];
        let c3 = cnt[5u + m3];
        cur_w[m0] = run;
        cur_w[m1] = run + c0;
        cur_w[m2] = run + c0 + c1;
        cur_w[m3] = run + c0 + c1 + c2;
        run += c0 + c1 + c2 + c3;
    }
    for (; t < b; t++) {
        let m = ordm[t];
        cur_w[m] = run;
        run += cnt[5u + m];
    }
    storageBarrier();
    workgroupBarrier();
    for (var k = lid; k < P.npart; k += PWG) {
        let m = aux_w[3u * k];
        let st = cur_w[m];
        aux_w[3u * k + 1u] = st;
        aux_w[3u * k + 2u] = st + cnt[5u + m];
    }
    if lid == 0u {
        let total = p_tot[PWG - 1u];
        let at = P.shift * LVW;
        dispatch_args(at, (total + WG - 1u) / WG);
        dispatch_args(at + 3u, total);
        lvl_w[at + 9u] = total;
    }
}

// ---------------------------------------------------------------------------------
// sort_level: one workgroup per level-l partition (aux triples, P.npart of them).

const SCAP: u32 = {{SCAP}}u;
// Lanes of sort_level: 64 to 256 by the level's average partition size.
const SWG: u32 = {{SWG}}u;

var<workgroup> s_key: array<u32, SCAP>;
var<workgroup> s_pos: array<u32, SCAP>;
var<workgroup> s_part: vec3<u32>;

// Sum of row p's ranks (each shifted right by P.kshift, so d of them fit a u32) over
// the dimensions in m. Monotone: p no worse than q everywhere => key(p) <= key(q).
fn key_of(p: u32, m: u32) -> u32 {
    let base = p * P.d;
    var s = 0u;
    var mm = m;
    while mm != 0u {
        s += ranks[base + firstTrailingBit(mm)] >> P.kshift;
        mm &= mm - 1u;
    }
    return s;
}

const KDIR: u32 = 16u;

// The end of the prefix of level-l partition `part` (working-set positions
// [lo, hi), sorted by key) that can hold a dominator of a point whose sum over the
// partition's mask is k: the start of the first directory slice whose first key
// exceeds k (every later key does too), or hi.
fn cut_end(part: u32, lo: u32, hi: u32, k: u32) -> u32 {
    let a = kdir_r[part * 4u];
    let b = kdir_r[part * 4u + 1u];
    let c = kdir_r[part * 4u + 2u];
    let e = kdir_r[part * 4u + 3u];
    let kv = vec4<u32>(k);
    let one = vec4<u32>(1u);
    let zero = vec4<u32>(0u);
    let cnt = select(zero, one, a <= kv) + select(zero, one, b <= kv)
        + select(zero, one, c <= kv) + select(zero, one, e <= kv);
    let slices = cnt.x + cnt.y + cnt.z + cnt.w;
    if slices >= KDIR { return hi; }
    return lo + slices * (hi - lo) / KDIR;
}

@compute @workgroup_size(SWG)
fn sort_level(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let k = wid.x + wid.y * nwg.x;
    if k >= P.npart { return; }
    if lid == 0u {
        s_part = vec3<u32>(aux[k * 3u], aux[k * 3u + 1u], aux[k * 3u + 2u]);
    }
    let part = workgroupUniformLoad(&s_part);
    let m = part.x;
    let start = part.y;
    let len = part.z - part.y;
    if len > SCAP {
        // Too large to sort here: no cut (every key 0 <= any q's sum).
        if lid < KDIR {
            kdir[k * KDIR + lid] = 0u;
        }
        return;
    }
    var size = 1u;
    while size < len { size <<= 1u; }
    for (var t = lid; t < size; t += SWG) {
        var key = 0xffffffffu;
        if t < len {
            key = key_of(widx_rw[start + t], m);
        }
        s_key[t] = key;
        s_pos[t] = t;
    }
    workgroupBarrier();
    // Bitonic sort of (key, position) by key; padding keys (all ones) go last.
    for (var kk = 2u; kk <= size; kk <<= 1u) {
        for (var jj = kk >> 1u; jj > 0u; jj >>= 1u) {
            for (var t = lid; t < size; t += SWG) {
                let o = t ^ jj;
                if o > t {
                    let a = s_key[t];
                    let b = s_key[o];
                    if (a > b) == ((t & kk) == 0u) && a != b {
                        s_key[t] = b;
                        s_key[o] = a;
                        let pa = s_pos[t];
                        s_pos[t] = s_pos[o];
                        s_pos[o] = pa;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    // The directory (slice b starts at position b * len / KDIR); then ids and
    // masks permuted through workgroup memory (each partition's entries are read
    // and written by its own workgroup only).
    if lid < KDIR {
        kdir[k * KDIR + lid] = s_key[lid * len / KDIR];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        s_key[t] = widx_rw[start + s_pos[t]];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        widx_rw[start + t] = s_key[t];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        s_key[t] = wq[start + s_pos[t]];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        wq[start + t] = s_key[t];
    }
}

// The survivors as bits: keep[w] bit b set iff row 32 w + b (< n) is not dead, so
// the host reads n / 8 bytes back instead of 4 n.
@compute @workgroup_size(WG)
fn alive_bits(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = row_index(wid, nwg, lid);
    if w * 32u >= P.n { return; }
    var bits = 0u;
    for (var b = 0u; b < 32u; b++) {
        let r = w * 32u + b;
        if r < P.n && dead[r] == 0u {
            bits |= 1u << b;
        }
    }
    keep[w] = bits;
}

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

// The outcome of working-set point i (row pi, median mask mi) at level P.l: a
// dominated row is dead; a survivor above the level stays in the working set
// (counted under its mask for the next partition starts; `repack` moves it).
fn settle(i: u32, pi: u32, mi: u32, dominated: bool) {
    if dominated {
        dead[pi] = 1u;
    }
    let kept = !dominated && countOneBits(mi) > P.l;
    if kept {
        atomicAdd(&stats[5u + mi], 1u);
    }
}

// The index of the level-l partition with mask m in aux (sorted by mask).
fn own_partition(m: u32) -> u32 {
    var lo = 0u;
    var hi = P.npart;
    while lo + 1u < hi {
        let mid = (lo + hi) / 2u;
        if aux[mid * 3u] <= m { lo = mid; } else { hi = mid; }
    }
    return lo;
}

// The test counters, striped: CSTRIPES copies of (dominance tests lo, hi, mask
// tests lo, hi), chosen by workgroup, summed by the host (one pair of addresses
// taking an atomic from every point serialised the iterations' last step).
const CSTRIPES: u32 = 256u;

// Adds x to the u64 counter `at` (0: dominance tests, 2: mask tests) of the
// stripe of workgroup g.
fn add64(g: u32, at: u32, x: u32) {
    if x == 0u { return; }
    let a = (g % CSTRIPES) * 4u + at;
    let old = atomicAdd(&ctr[a], x);
    if old + x < old {
        atomicAdd(&ctr[a + 1u], 1u);
    }
}

// aux: the level-l partitions as (mask, start, end) triples sorted by mask,
// P.npart of them; positions are working-set positions.
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

// ---------------------------------------------------------------------------------
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
        // cost more here than they save, BENCHMARKS.md session 19): Eq. 5 (Q_j has
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
