// SkyAlign (Bøgh, Chester, Assent, VLDB 2015): a work-efficient GPU skyline over a
// static median/quartile grid. This file holds what every stage shares (the
// parameters, the bindings, the rank-matrix access and pre-filter test, the level
// table, the keys and their directories, a point's outcome and the test counters);
// the loader (operators/src/skyline/gpu/launch.rs) prepends it to the file of the
// stage that holds the entry point. Entry points, in the order the host runs them on
// one chunk of a row-major rank matrix (`ranks[r * d + j]`, smaller is better), with
// their files:
//
//   minmax     (prefilter.wgsl) tau = min over rows of (max rank of the row) and the largest rank
//              (atomics), for the pre-filter (Algorithm 1, lines 1-2) and the number
//              of radix digits of the quartile selection.
//   qhist      (quartiles.wgsl) one radix-select pass (8-bit digit at `shift`) for the three quartiles
//              of every dimension over the rows that survive the pre-filter: rows
//              whose higher digits match the (dimension, quartile) prefix add to
//              that pair's 256-bin histogram; also counts the surviving rows.
//   qpick      (quartiles.wgsl) after each qhist pass, on the device (no readback between
//              passes): one workgroup per (dimension, quartile) scans its 256
//              bins and appends the digit that holds its rank to its prefix.
//   mask_hist  (masks.wgsl) median mask M and quartile mask Q of every surviving row (mq[r] =
//              M | Q << 16; dead[r] = 1 for the rows the pre-filter drops);
//              histogram over M, followed by the surviving-row count and the
//              quartile selection's error flag (from qpick's state).
//   scatter    (masks.wgsl) counting-sort scatter of the surviving row ids by M into the
//              (|M|, M) order the host chose (cursors = each mask's first slot):
//              the initial working set. Points inside one partition land in any
//              order. The rank matrix itself stays where it is: an invocation loads
//              its own row once, and the rows it compares against are the same for
//              all invocations of a partition (broadcast loads).
//   iterate    (iterate.wgsl) one SkyAlign iteration l over the working set (row ids with
//              |M| >= l, in (|M|, M) order): a point with |M| = l
//              compares against its own partition (Eq. 3 skips the others; Eq. 5 is
//              the quartile mask test before each dominance test); a point with
//              |M| > l walks the level-l partitions, skips those with Eq. 1 (one
//              mask test each), and inside the others uses Eq. 4 before a
//              distinct-value dominance test. Dominated points are marked dead;
//              points with |M| > l that survive are counted per mask (for
//              `plan`) and moved by the repacking.
//   plan       (repack.wgsl) after each level, one workgroup: the kept points' per-mask counts
//              give each mask's first slot in the next working set, the next
//              level's partition bounds, its size and its dispatch sizes (the
//              level table), so the host records every level ahead and the levels
//              run back to back, the iterations and repacking dispatched
//              indirectly.
//   repack     (repack.wgsl) the kept points scattered to their partitions for the next level.
//   sort_level (sort_level.wgsl) before each level: every level-l partition (one workgroup each)
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
//   alive_bits (alive_bits.wgsl) the rows not marked dead as a bitmap (the skyline, read back).
//   iterate_wide (iterate_wide.wgsl)
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

// The level table: LVW words for each level l at l * LVW: [0, 3) the
// workgroups of a per-point dispatch over the level's working set (WG points a
// group), [3, 6) those of a workgroup-per-point dispatch, both as indirect dispatch
// arguments (x, y, 1) with x at most P.stride; [9] the working set's size.
const LVW: u32 = 16u;

fn level_size(l: u32) -> u32 {
    return lvl[l * LVW + 9u];
}

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
