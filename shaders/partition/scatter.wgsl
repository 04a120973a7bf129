// Fused rank-and-scatter of a one-pass partition (operators/src/partition/fused.rs):
// the stable scatter step of radix partitioning (histogram -> exclusive scan -> scatter), with the rows of each tile sorted by digit in
// workgroup memory first so every partition's rows of a tile leave as one
// contiguous run: the local-sort-then-write idea of GPU radix sorts (Merrill &
// Grimshaw's tile ranking; the subgroup "match" ranking of one-sweep sorts),
// here driven by the per-tile histograms and their prefix sums (Zhang, Wang &
// Ross, ADMS 2020, computed by the crate's scan) instead of a chained scan.
//
// Appended to shaders/partition/common.wgsl (Params, bindings 0-15,
// `row_pid`, `digit`). One workgroup per histogram tile of TILE rows, walked in
// rounds of R = SWG * ITEMS rows:
//
// 1. Rank. Subgroup g of the workgroup owns rows [g * S * ITEMS, (g + 1) * S *
//    ITEMS) of the round (S = subgroup size), item k of lane l being row
//    g * S * ITEMS + k * S + l, so rows stay in input order. Per item, the lanes
//    holding the same digit are found by one ballot per digit bit (DBITS of
//    them); the lowest such lane adds their count to the subgroup's counter of
//    the digit (`wcnt`, workgroup atomics) and the old value is shuffled to the
//    others: a row's rank among the subgroup's rows of its digit is that old
//    value plus the popcount of the matching lanes below it.
// 2. Scan. Per digit, an exclusive sum over the subgroups' counters (in
//    subgroup order, which is row order), then an exclusive scan of the digits'
//    totals over the digits (the digit's first slot in the round's sorted
//    order), added to every subgroup's counter of the digit: each counter
//    becomes the subgroup's first slot for the digit. `delta[d]` is the
//    distance from a slot of digit d to its output row: the scanned histogram
//    entry of (digit, tile) plus the digit's rows in the tile's earlier rounds
//    (`run`), less the digit's first slot.
// 3. Slots. Every row's slot is its subgroup's counter plus its rank (`pos`),
//    and the row writes its digit into that slot of `sb`; every invocation
//    then reads the digits of slots lid, lid + SWG, ... and keeps their output
//    rows, slot + delta[digit], in registers (`gd`). The slots of a warp are
//    mostly of one digit, so `delta` is read almost without bank conflicts;
//    the only randomly placed accesses per row are the counter, the digit and
//    the staged values.
// 4. Columns (code generated per column by partition/fused.rs). Each row
//    stores its value into its slot (`sa`, and `sb` for the high words of 8-byte
//    values), then the invocations write the slots in order: consecutive
//    invocations write consecutive rows of one partition. Validity bits go the
//    same way and are set with atomicOr in the zeroed output bitmap.
//
// Loads are issued ahead of their use (partition/fused.rs picks the column
// variant per pass): the key words of the next round while this round's digits are
// computed, and the column values at the start of the round or right after
// the previous round staged its own, so a round does not wait on the key's
// and each column's load one after another. A moved column that is the key
// column itself takes its values from the key words already in registers.
//
// The counters, the scan and `delta` cover NBS digits (the pass's digit count
// rounded up to a power of two), so a 2- or 16-way pass does not scan 256
// counters per subgroup and round.
//
// With several output segments (F_MULTI) each dispatch covers one (input
// segment, output segment) pair and writes only the rows landing in its output
// segment; a tile whose rows all land elsewhere (its digits' output ranges,
// from the histogram and its scan, miss the segment) returns at once.
//
// The loops over a round's items are written once between //@unroll and
// //@end and repeated per item by partition/fused.rs (`unroll_items`), so the
// per-item arrays (`dig`, `pos`, `gd`) are indexed by constants and stay in
// registers.
//
// On the H100 (2^26..2^28 rows) ranking by ballots beat two alternatives:
// lanes setting bits in per-subgroup mask words in workgroup memory with
// subgroup barriers (1.1-1.8x slower), and the rank kernel's scheme of
// workgroup-wide mask words per chunk of SWG rows (1.5-2x slower).
//
// Assumes full subgroups of at most 32 lanes and SWG a multiple of the
// subgroup size; NSGMAX = SWG / smallest subgroup size counters (partition/fused.rs
// picks SWG = 8 x the smallest subgroup size, at most 256).

const SWG: u32 = {{SWG}}u;
const ITEMS: u32 = {{ITEMS}}u;
const R: u32 = SWG * ITEMS;
// NBS: the pass's digit count rounded up to a power of two (counters and
// the per-round scan cover only those); DPT digits per invocation
const NBS: u32 = {{NBS}}u;
const WCNT: u32 = NSGMAX * NBS;
const NSGMAX: u32 = {{NSGMAX}}u;
const DPT: u32 = {{DPT}}u;
const DBITS: u32 = {{DBITS}}u;

{{COL_DECLS}}

var<workgroup> wcnt: array<atomic<u32>, WCNT>;
var<workgroup> sa: array<u32, R>;
var<workgroup> sb: array<u32, R>;
var<workgroup> run: array<u32, NBS>;
var<workgroup> delta: array<u32, NBS>;
var<workgroup> part: array<u32, NSGMAX>;
var<workgroup> lo_hi: array<atomic<u32>, 2>;
var<workgroup> skip_tile: u32;

fn in_out(d: u32) -> bool {
    return d >= p.out_first && d - p.out_first < p.out_rows;
}

@compute @workgroup_size(SWG)
fn scatter(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sgs: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) { return; }
    let tstart = tile * TILE;
    let tend = min(tstart + TILE, p.n);
    let col = p.tile_base + tile;
    for (var e = 0u; e < DPT; e++) {
        let d = lid * DPT + e;
        if (d < NBS) {
            var b = 0u;
            if (d < p.nb) { b = offs[d * p.total_tiles + col]; }
            run[d] = b;
        }
    }
    if ((p.flags & F_MULTI) != 0u) {
        // Skip the tile when none of its rows lands in this output segment.
        if (lid == 0u) {
            atomicStore(&lo_hi[0], 0xffffffffu);
            atomicStore(&lo_hi[1], 0u);
        }
        workgroupBarrier();
        for (var e = 0u; e < DPT; e++) {
            let d = lid * DPT + e;
            if (d < p.nb && d < NBS) {
                let c = counts[d * p.total_tiles + col];
                if (c > 0u) {
                    atomicMin(&lo_hi[0], run[d]);
                    atomicMax(&lo_hi[1], run[d] + c);
                }
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            let lo = atomicLoad(&lo_hi[0]);
            let hi = atomicLoad(&lo_hi[1]);
            skip_tile = select(0u, 1u, hi <= p.out_first || lo >= p.out_first + p.out_rows);
        }
        if (workgroupUniformLoad(&skip_tile) != 0u) { return; }
    }
    let lt = (1u << lane) - 1u;
    // item k of this invocation is row sbase + k * istride of its round;
    // sbase0 is the tile's first round's
    let istride = sgs;
    let sbase0 = tstart + sg_id * sgs * ITEMS + lane;
    // the key words of the first round (`pk`), loaded before the loop
    var pk: array<vec3<u32>, ITEMS>;
    //@unroll
    if (sbase0 + @K * istride < tend) { pk[@K] = row_raw(sbase0 + @K * istride); }
    //@end
{{COL_PREFETCH}}
    for (var w = lid; w < WCNT; w += SWG) { atomicStore(&wcnt[w], 0u); }
    workgroupBarrier();
    // Barriers per round: after the ranking, the subgroup totals, the
    // scan and the destinations, then two per column (see partition/fused.rs). The
    // counters are zeroed for the next round once the destinations are read,
    // and the column barriers order that before the next round's ranking.
    for (var rb = tstart; rb < tend; rb += R) {
        let rcount = min(R, tend - rb);
        let sbase = sbase0 + (rb - tstart);
        var dig: array<u32, ITEMS>;
        var pos: array<u32, ITEMS>;
        var gd: array<u32, ITEMS>;
{{COL_PRELOAD}}
        // 1. rank (the item loops are unrolled by partition/fused.rs, so the
        // per-item arrays are indexed by constants and stay in registers)
        // the digits from the key words loaded a round earlier, issuing the
        // next round's loads at once
        //@unroll
        {
            let row = sbase + @K * istride;
            var d = 0u;
            if (row < tend) { d = digit(raw_pid(pk[@K])); }
            dig[@K] = d;
{{KEY_KEEP}}            if (row + R < tend) { pk[@K] = row_raw(row + R); }
        }
        //@end
        //@unroll
        {
            let valid = sbase + @K * istride < tend;
            let d = dig[@K];
            var m = subgroupBallot(valid).x;
            for (var b = 0u; b < DBITS; b++) {
                let on = ((d >> b) & 1u) != 0u;
                let bb = subgroupBallot(on).x;
                m &= select(~bb, bb, on);
            }
            let cnt = countOneBits(m);
            let r = countOneBits(m & lt);
            var old = 0u;
            if (valid && r == 0u) { old = atomicAdd(&wcnt[sg_id * NBS + d], cnt); }
            old = subgroupShuffle(old, min(firstTrailingBit(m), sgs - 1u));
            dig[@K] = ((old + r) << 8u) | d;
        }
        //@end
        workgroupBarrier();
        // 2. scan: per digit over the subgroups, then over the digits; each
        // subgroup's counter of a digit becomes its first slot in the round's
        // sorted order, and `delta[d]` the distance from a slot of digit d to
        // its output row
        var sum = 0u;
        var tot: array<u32, DPT>;
        for (var e = 0u; e < DPT; e++) {
            let d = lid * DPT + e;
            var s = 0u;
            if (d < NBS) {
                for (var w = 0u; w < nsg; w++) {
                    let c = atomicLoad(&wcnt[w * NBS + d]);
                    atomicStore(&wcnt[w * NBS + d], s);
                    s += c;
                }
            }
            tot[e] = s;
            sum += s;
        }
        let ex = subgroupExclusiveAdd(sum);
        if (lane == sgs - 1u) { part[sg_id] = ex + sum; }
        workgroupBarrier();
        var pre = ex;
        for (var w = 0u; w < sg_id; w++) { pre += part[w]; }
        for (var e = 0u; e < DPT; e++) {
            let d = lid * DPT + e;
            if (d < NBS) {
                for (var w = 0u; w < nsg; w++) {
                    atomicAdd(&wcnt[w * NBS + d], pre);
                }
                delta[d] = run[d] - pre;
                run[d] += tot[e];
            }
            pre += tot[e];
        }
        workgroupBarrier();
        // 3. each row's slot, and the digit of every slot into `sb`
        //@unroll
        pos[@K] = 0u;
        if (sbase + @K * istride < tend) {
            let d = dig[@K] & 255u;
            pos[@K] = atomicLoad(&wcnt[sg_id * NBS + d]) + (dig[@K] >> 8u);
            sb[pos[@K]] = d;
        }
        //@end
        workgroupBarrier();
        // every invocation's output rows: slots lid, lid + SWG, ...
        //@unroll
        gd[@K] = 0u;
        if (@K * SWG + lid < rcount) { gd[@K] = @K * SWG + lid + delta[sb[@K * SWG + lid]]; }
        //@end
        for (var w = lid; w < WCNT; w += SWG) { atomicStore(&wcnt[w], 0u); }
        // 4. columns (the first one's staging needs no barrier of its own
        // unless it writes `sb`, read just above)
{{COL_MOVES}}
    }
}
