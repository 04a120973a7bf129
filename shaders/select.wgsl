// SampleSelect (Ribizel & Anzt, "Parallel selection on GPUs", 2019): GPU selection
// by sample-based bucketing, and the top-k row filter built on it
// (operators/src/select.rs).
//
// One level of SampleSelect on a region of keys (a task):
// * `gather`: S keys at pseudo-random positions of the task's data -> samples
//   (one dispatch per input segment, each taking its share of S).
// * `sort_sample`: one workgroup sorts up to S keys in workgroup memory with a
//   bitonic network; in splitter mode it writes the NS = B - 1 splitters
//   (equidistant sample elements) of the task, in base-case mode the whole sorted
//   region (the base case of the recursion: a bucket of at most S keys).
//   `sort_sample_sg` (section sortsg) is the same with subgroup shuffles.
// * `count`: every key finds its bucket by a branch-free binary search over the
//   splitters held in workgroup memory (the search tree of the paper in its
//   breadth-first (Eytzinger) form: log2(B) steps), and counts it in a per-workgroup
//   histogram (workgroup atomics), flushed once per workgroup into the task's global
//   counts with one atomicAdd per non-empty bucket.
// * `filter_buckets`: recomputes each key's bucket and copies the keys of the
//   target buckets into their output regions; positions are aggregated per
//   workgroup (workgroup atomics, then one global atomicAdd per bucket and
//   workgroup). The order of keys inside a bucket is not kept (selection needs none).
// * `count_oracle` / `filter_oracle` (the default, section `oracle`): the count also
//   stores a 4-bit oracle per key (bucket id mod 16) and the filter reads a key only
//   where its nibble matches a target bucket's residue.
//
// Buckets with equality buckets: with splitters s_0 <= .. <= s_{NS-1} and
// j = #{splitters < x}, key x goes to bucket 2j + 1 if j < NS and x == s_j (the
// equality bucket of s_j: one distinct value, so the recursion ends there at once,
// even for all-equal or few-distinct data), else to bucket 2j (the open interval
// (s_{j-1}, s_j)). NB = 2 NS + 1 buckets.
//
// Kernel sections start with a line `//@@ name`; the Rust side compiles the header
// and the sections a kernel needs ("bucket+oracle"), so each kernel declares
// only its own workgroup memory.
//
// Top-k (threshold t = the k-th smallest key, found by SampleSelect):
// * `tk_count`: per block of BLOCK rows, the number of keys < t and == t.
// * `tk_scatter`: the host turns the block counts into offsets; each block writes
//   the row index of every key < t and of the first `need` keys == t (in row order),
//   so the output is the ascending row indices of the k smallest keys, ties broken
//   by row order.
//
// Placeholders: WG, S, NS, ITEMS, and the key part (alias K,
// kless, keq, kmax) prepended by the Rust side for u32, u64 or vec2<u32> (emulated
// 64-bit: x = low word, y = high word).

const WG: u32 = {{WG}}u;
const S: u32 = {{S}}u;
const NS: u32 = {{NS}}u;
const ITEMS: u32 = {{ITEMS}}u;     // keys per invocation in filter and top-k
const CITEMS: u32 = {{CITEMS}}u;   // keys per invocation in count (larger: fewer histogram flushes)
const NB: u32 = 2u * NS + 1u;
const CHUNK: u32 = WG * ITEMS;
const CCHUNK: u32 = WG * CITEMS;

struct Params {
    off: u32,      // first element of the region in `src`
    n: u32,        // elements in the region
    cnt: u32,      // gather: samples to take; sort: elements to sort
    dst_off: u32,  // gather / sort: first output element
    seed: u32,     // gather: hash seed
    task: u32,     // counts at task * NB, splitters at task * NS, slots at task * NB
    mode: u32,     // sort: 1 = write splitters, 0 = write the sorted region
    pad: u32,
}

struct TkParams {
    n: u32,         // rows of this segment
    block_base: u32,// index of the segment's first block
    row0: u32,      // global row of the segment's first row
    need: u32,      // keys == t to take (the first ones in row order)
    win_lo: u32,    // output window [win_lo, win_lo + win_len)
    win_len: u32,
    blocks: u32,    // blocks of the whole input (the eq counts start there)
    lt_total: u32,  // scatter: keys < t in the whole input
}

struct Inv {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
}

fn group_index(inv: Inv) -> u32 {
    return inv.wid.x + inv.wid.y * inv.nwg.x;
}

fn hash(x: u32) -> u32 {
    let s = x * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

//@@ gather

@group(0) @binding(0) var<storage, read> g_src: array<K>;
@group(0) @binding(1) var<storage, read_write> g_dst: array<K>;
@group(0) @binding(2) var<uniform> g_p: Params;

@compute @workgroup_size(WG)
fn gather(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= g_p.cnt || g_p.n == 0u) {
        return;
    }
    let pos = hash(hash(i) ^ g_p.seed) % g_p.n;
    g_dst[g_p.dst_off + i] = g_src[g_p.off + pos];
}

//@@ bitonic (the sort network over `sh`, shared by sort_sample and the chain)

var<workgroup> sh: array<K, S>;

// Sorts sh[0..S) ascending; the caller has filled it (kmax() as padding) and
// passed a workgroup barrier.
fn bitonic_sort(lid: u32) {
    for (var k = 2u; k <= S; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            for (var t = lid; t < S / 2u; t += WG) {
                let i = ((t & ~(j - 1u)) << 1u) | (t & (j - 1u));
                let l = i | j;
                let a = sh[i];
                let b = sh[l];
                let asc = (i & k) == 0u;
                if ((asc && kless(b, a)) || (!asc && kless(a, b))) {
                    sh[i] = b;
                    sh[l] = a;
                }
            }
            workgroupBarrier();
        }
    }
}

//@@ sort (bitonic sort of up to S keys in workgroup memory; compiled after section bitonic)

@group(0) @binding(0) var<storage, read> s_src: array<K>;
@group(0) @binding(1) var<storage, read_write> s_dst: array<K>;
@group(0) @binding(2) var<uniform> s_p: Params;

@compute @workgroup_size(WG)
fn sort_sample(inv: Inv) {
    let m = s_p.cnt;
    for (var i = inv.lid; i < S; i += WG) {
        var v = kmax();
        if (i < m) {
            v = s_src[s_p.off + i];
        }
        sh[i] = v;
    }
    workgroupBarrier();
    bitonic_sort(inv.lid);
    sort_write(inv.lid, WG, m);
}

// Writes the sorted sh[0..m) (after a workgroup barrier): in splitter mode the
// NS splitters, else the whole region; invocation t of `count`.
fn sort_write(t: u32, count: u32, m: u32) {
    if (s_p.mode == 1u) {
        // Splitter j: the sample element at (j + 1) m / (NS + 1).
        for (var j = t; j < NS; j += count) {
            let idx = ((j + 1u) * (m / (NS + 1u))) + (((j + 1u) * (m % (NS + 1u))) / (NS + 1u));
            s_dst[s_p.dst_off + j] = sh[idx];
        }
    } else {
        for (var i = t; i < m; i += count) {
            s_dst[s_p.dst_off + i] = sh[i];
        }
    }
}

//@@ sortsg (sort_sample where the adapter has subgroup operations; after bitonic and sort)

// The same bitonic network over the same S keys with four keys per invocation
// in registers (SWG = S / 4 invocations): steps with j < 4 compare inside an
// invocation, steps with j < 4 x subgroup size exchange keys with
// subgroupShuffleXor, and only the steps with larger j go through workgroup
// memory and barriers (15 of the 78 steps at S = 4096 with subgroups of 32;
// sort_sample takes a barrier after every step). Invocation t holds keys
// 4t .. 4t + 3, t numbered by subgroup (subgroup id x size + lane) so that a
// shuffle partner holds the partner keys.

const SWG: u32 = {{SWG}}u;

struct InvSort {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
}

fn kshx(a: K, m: u32) -> K {
    {{KSHX}}
}

// Key i's new value, given its partner l's key: the lower index of a pair keeps
// the smaller key in an ascending block ((i & k) == 0) and the larger otherwise.
fn ss_keep(mine: K, other: K, i: u32, l: u32, k: u32) -> K {
    let lt = kless(other, mine);
    let lo = select(mine, other, lt);
    let hi = select(other, mine, lt);
    return select(hi, lo, ((i & k) == 0u) == (i < l));
}

@compute @workgroup_size(SWG)
fn sort_sample_sg(inv: InvSort) {
    let t = inv.sg_id * inv.sg_size + inv.lane;
    let m = s_p.cnt;
    let b = 4u * t;
    var v: array<K, 4>;
    for (var r = 0u; r < 4u; r++) {
        var x = kmax();
        if (b + r < m) {
            x = s_src[s_p.off + b + r];
        }
        v[r] = x;
    }
    let lanes = 4u * inv.sg_size;
    for (var k = 2u; k <= S; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            if (j >= lanes) {
                for (var r = 0u; r < 4u; r++) {
                    sh[b + r] = v[r];
                }
                workgroupBarrier();
                for (var r = 0u; r < 4u; r++) {
                    v[r] = ss_keep(v[r], sh[(b + r) ^ j], b + r, (b + r) ^ j, k);
                }
                workgroupBarrier();
            } else if (j >= 4u) {
                for (var r = 0u; r < 4u; r++) {
                    v[r] = ss_keep(v[r], kshx(v[r], j / 4u), b + r, (b + r) ^ j, k);
                }
            } else {
                // Inside the invocation: j = 2 pairs keys (0, 2) and (1, 3), j = 1
                // pairs (0, 1) and (2, 3); key 0's partner is j, key 3's is 3 - j
                // (constant indices keep the keys in registers).
                let one = j == 1u;
                let p = select(v[2], v[1], one);
                let q = select(v[1], v[2], one);
                let n0 = ss_keep(v[0], p, b, b + j, k);
                let np = ss_keep(p, v[0], b + j, b, k);
                let nq = ss_keep(q, v[3], b + 3u - j, b + 3u, k);
                v[3] = ss_keep(v[3], q, b + 3u, b + 3u - j, k);
                v[0] = n0;
                v[1] = select(nq, np, one);
                v[2] = select(np, nq, one);
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        sh[b + r] = v[r];
    }
    workgroupBarrier();
    sort_write(t, SWG, m);
}

//@@ bucket (count and filter)

@group(0) @binding(0) var<storage, read> c_src: array<K>;
@group(0) @binding(1) var<storage, read> c_spl: array<K>;
@group(0) @binding(2) var<storage, read_write> c_counts: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> c_p: Params;
// filter only
@group(0) @binding(4) var<storage, read> f_slot: array<u32>;     // task * NB + bucket -> slot (or NONE)
@group(0) @binding(5) var<storage, read> f_outoff: array<u32>;   // slot -> first output element
@group(0) @binding(6) var<storage, read_write> f_out: array<K>;
// c_counts doubles as the slots' cursors in filter (slot -> keys written so far).

var<workgroup> tree: array<K, NS>;
// The same splitters in breadth-first (Eytzinger) order: node p's children are
// 2p + 1 and 2p + 2. Level d of the search reads the 2^d contiguous nodes of that
// level, so the invocations of a subgroup read distinct words of a small range
// (no bank conflicts in the top levels). A binary search over the sorted array
// instead reads addresses j + step - 1 with j a multiple of 2 step: all in one
// bank at the middle levels, up to 32-way conflicts; measured on the H100 at 2^28
// keys that search took 3.3 ms of the count kernel's 3.5.
var<workgroup> etree: array<K, NS>;
var<workgroup> hist: array<atomic<u32>, NB>;

const NONE: u32 = 0xffffffffu;
// Levels of the splitter tree: NS = 2^LEVELS - 1.
const LEVELS: u32 = firstLeadingBit(NS + 1u);

fn load_tree(inv: Inv) {
    for (var j = inv.lid; j < NS; j += WG) {
        tree[j] = c_spl[c_p.task * NS + j];
        // Node j of the breadth-first order: depth d, position q in its level; its
        // sorted index is (2q + 1) 2^(LEVELS - 1 - d) - 1.
        let d = firstLeadingBit(j + 1u);
        let q = j + 1u - (1u << d);
        etree[j] = c_spl[c_p.task * NS + ((2u * q + 1u) << (LEVELS - 1u - d)) - 1u];
    }
    for (var b = inv.lid; b < NB; b += WG) {
        atomicStore(&hist[b], 0u);
    }
    workgroupBarrier();
}

fn bucket_of(x: K) -> u32 {
    // Descend right past every splitter below x: the leaf reached, counted from
    // the left, is the number of splitters below x.
    var k = 0u;
    for (var d = 0u; d < LEVELS; d++) {
        k = 2u * k + 1u + select(0u, 1u, kless(etree[k], x));
    }
    return bucket_at(k - NS, x);
}

// The bucket of key x with j splitters below it: the equality bucket 2j + 1 when x
// equals splitter j, else the range bucket 2j.
fn bucket_at(j: u32, x: K) -> u32 {
    var eq = 0u;
    if (j < NS) {
        eq = select(0u, 1u, keq(tree[j], x));
    }
    return 2u * j + eq;
}

// Adds the workgroup's histogram into the task's global counts (one atomic per
// non-empty bucket).
fn flush_hist(inv: Inv) {
    workgroupBarrier();
    for (var b = inv.lid; b < NB; b += WG) {
        let v = atomicLoad(&hist[b]);
        if (v != 0u) {
            atomicAdd(&c_counts[c_p.task * NB + b], v);
        }
    }
}

// Filter: after every invocation has counted its target keys in hist (their
// per-workgroup positions in li), each target bucket of the workgroup reserves
// its run of the bucket's slot with one global atomic; hist[b] then holds the
// run's first output element.
fn place_targets(inv: Inv) {
    workgroupBarrier();
    for (var b = inv.lid; b < NB; b += WG) {
        let v = atomicLoad(&hist[b]);
        if (v != 0u) {
            let slot = f_slot[c_p.task * NB + b];
            atomicStore(&hist[b], f_outoff[slot] + atomicAdd(&c_counts[slot], v));
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn count(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            atomicAdd(&hist[bucket_of(c_src[c_p.off + i])], 1u);
        }
    }
    flush_hist(inv);
}

@compute @workgroup_size(WG)
fn filter_buckets(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CHUNK;
    var bk: array<u32, ITEMS>;
    var li: array<u32, ITEMS>;
    var key: array<K, ITEMS>;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + inv.lid;
        bk[it] = NONE;
        if (i < c_p.n) {
            let x = c_src[c_p.off + i];
            let b = bucket_of(x);
            if (f_slot[c_p.task * NB + b] != NONE) {
                bk[it] = b;
                key[it] = x;
                li[it] = atomicAdd(&hist[b], 1u);
            }
        }
    }
    place_targets(inv);
    for (var it = 0u; it < ITEMS; it++) {
        if (bk[it] != NONE) {
            f_out[atomicLoad(&hist[bk[it]]) + li[it]] = key[it];
        }
    }
}

//@@ countprobe (bench select --probe only: the count kernel with parts left out, to see what bounds it; compiled after section bucket)

// The search as it was before the breadth-first tree: over the sorted array.
fn bucket_of_sorted(x: K) -> u32 {
    var j = 0u;
    for (var step = (NS + 1u) >> 1u; step > 0u; step >>= 1u) {
        j += select(0u, step, kless(tree[j + step - 1u], x));
    }
    return bucket_at(j, x);
}

// The histogram without the search: bucket = low bits of the key.
@compute @workgroup_size(WG)
fn count_nosearch(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            atomicAdd(&hist[kword(c_src[c_p.off + i], 0u) % NB], 1u);
        }
    }
    flush_hist(inv);
}

// The search without the histogram: the bucket ids summed.
@compute @workgroup_size(WG)
fn count_noatomic(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    var acc = 0u;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            acc += bucket_of(c_src[c_p.off + i]);
        }
    }
    atomicAdd(&hist[inv.lid], acc);
    workgroupBarrier();
    if (inv.lid == 0u) {
        atomicAdd(&c_counts[c_p.task * NB], atomicLoad(&hist[0]));
    }
}

// The count with the search over the sorted array.
@compute @workgroup_size(WG)
fn count_sorted(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            atomicAdd(&hist[bucket_of_sorted(c_src[c_p.off + i])], 1u);
        }
    }
    flush_hist(inv);
}

//@@ topk (the top-k row filter)

@group(0) @binding(0) var<storage, read> t_src: array<K>;
@group(0) @binding(1) var<storage, read> t_thr: array<K>;
@group(0) @binding(2) var<storage, read_write> t_counts: array<u32>;   // [lt per block | eq per block] or offsets
@group(0) @binding(3) var<uniform> t_p: TkParams;
@group(0) @binding(4) var<storage, read_write> t_out: array<u32>;

var<workgroup> tsum: array<u32, WG>;

// Packed per-thread counts of ITEMS consecutive rows: keys < t in bits 0-15, keys == t in bits 16-31.
fn tk_flags(inv: Inv, base: u32, t: K) -> u32 {
    var c = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + inv.lid * ITEMS + it;
        if (r < t_p.n) {
            let x = t_src[r];
            c += select(0u, 1u, kless(x, t)) + select(0u, 0x10000u, keq(x, t));
        }
    }
    return c;
}

// Inclusive Hillis-Steele scan of tsum over the workgroup.
fn tk_scan(inv: Inv, v: u32) -> u32 {
    tsum[inv.lid] = v;
    workgroupBarrier();
    for (var o = 1u; o < WG; o <<= 1u) {
        var s = tsum[inv.lid];
        if (inv.lid >= o) {
            s += tsum[inv.lid - o];
        }
        workgroupBarrier();
        tsum[inv.lid] = s;
        workgroupBarrier();
    }
    return tsum[inv.lid];
}

// The same counts of the block's rows base + it * WG + lid (contiguous loads across
// the subgroup; the count needs only the block's totals, not the rows' order).
fn tk_flags_strided(inv: Inv, base: u32, t: K) -> u32 {
    var c = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + it * WG + inv.lid;
        if (r < t_p.n) {
            let x = t_src[r];
            c += select(0u, 1u, kless(x, t)) + select(0u, 0x10000u, keq(x, t));
        }
    }
    return c;
}

@compute @workgroup_size(WG)
fn tk_count(inv: Inv) {
    let blk = group_index(inv);
    let base = blk * CHUNK;
    if (base >= t_p.n) {
        return; // whole workgroup
    }
    let t = t_thr[0];
    let total = tk_scan(inv, tk_flags_strided(inv, base, t));
    if (inv.lid == WG - 1u) {
        t_counts[t_p.block_base + blk] = total & 0xffffu;
        t_counts[t_p.blocks + t_p.block_base + blk] = total >> 16u;
    }
}

@compute @workgroup_size(WG)
fn tk_scatter(inv: Inv) {
    let blk = group_index(inv);
    let base = blk * CHUNK;
    if (base >= t_p.n) {
        return; // whole workgroup
    }
    // Blocks that take no row (every block but about k of them) stop here without
    // reading a key: by the offsets, no key < t and no taken key == t is in them.
    let gb = t_p.block_base + blk;
    let lt0 = t_counts[gb];
    var lt1 = t_p.lt_total;
    var eq_rows = true;   // the last block: its eq offset below need means it has some
    if (gb + 1u < t_p.blocks) {
        lt1 = t_counts[gb + 1u];
        eq_rows = t_counts[t_p.blocks + gb + 1u] > t_counts[t_p.blocks + gb];
    }
    if (lt1 == lt0 && !(eq_rows && t_counts[t_p.blocks + gb] < t_p.need)) {
        return; // whole workgroup
    }
    let t = t_thr[0];
    let mine = tk_flags(inv, base, t);
    let incl = tk_scan(inv, mine);
    let ex = incl - mine;
    var lt = t_counts[t_p.block_base + blk] + (ex & 0xffffu);              // keys < t before this row
    var eq = t_counts[t_p.blocks + t_p.block_base + blk] + (ex >> 16u);    // keys == t before this row
    for (var it = 0u; it < ITEMS; it++) {
        let r = base + inv.lid * ITEMS + it;
        if (r < t_p.n) {
            let x = t_src[r];
            var take = false;
            var pos = 0u;
            if (kless(x, t)) {
                // Every row < t is taken; before it: the rows < t and the taken rows == t.
                take = true;
                pos = lt + min(eq, t_p.need);
                lt += 1u;
            } else if (keq(x, t)) {
                take = eq < t_p.need;
                pos = lt + eq;
                eq += 1u;
            }
            if (take && pos >= t_p.win_lo && pos - t_p.win_lo < t_p.win_len) {
                t_out[pos - t_p.win_lo] = t_p.row0 + r;
            }
        }
    }
}

//@@ oracle (count and filter with a 4-bit oracle per key; appended to the bucket section)
//
// `count_oracle` also stores each key's bucket id modulo 16 (four bits, eight keys
// to a word, about n/2 bytes: an eighth of a 32-bit input). The words come in
// blocks of WG: word w = b * WG + l holds keys b * WG * 8 + q * WG + l, q = 0..7, so
// invocation l of a block reads keys WG apart and every load of a subgroup is
// contiguous. (Eight consecutive keys per word made each load of a subgroup span
// 32-byte strides: eight times the cache traffic of the keys it used.) `filter_oracle` reads the oracle words first and reads
// a key (and searches its bucket again) only where the nibble matches the residue
// of a target bucket: about 1/16 of the keys for one target bucket, and only the
// target keys when NB <= 16. (The paper stores the whole bucket id in a byte; the
// nibble halves the scratch and, for a few targets, the filter's traffic too.)

const OW: u32 = 8u;   // keys per oracle word

@group(0) @binding(7) var<storage, read_write> o_oracle: array<u32>;

var<workgroup> resid: array<u32, 16>;

@compute @workgroup_size(WG)
fn count_oracle(inv: Inv) {
    load_tree(inv);
    let wbase = group_index(inv) * (CCHUNK / OW);
    for (var it = 0u; it < CITEMS / OW; it++) {
        let blk = wbase + it * WG;        // first word of the block
        let w = blk + inv.lid;
        let k0 = blk * OW + inv.lid;      // the word's keys: k0 + q * WG
        if (k0 < c_p.n) {
            var word = 0u;
            for (var q = 0u; q < OW; q++) {
                let i = k0 + q * WG;
                if (i < c_p.n) {
                    let b = bucket_of(c_src[c_p.off + i]);
                    atomicAdd(&hist[b], 1u);
                    word |= (b & 15u) << (4u * q);
                }
            }
            o_oracle[w] = word;
        }
    }
    flush_hist(inv);
}

@compute @workgroup_size(WG)
fn filter_oracle(inv: Inv) {
    load_tree(inv);
    for (var r = inv.lid; r < 16u; r += WG) {
        var hit = 0u;
        for (var b = r; b < NB; b += 16u) {
            hit |= select(0u, 1u, f_slot[c_p.task * NB + b] != NONE);
        }
        resid[r] = hit;
    }
    workgroupBarrier();
    let wbase = group_index(inv) * (CHUNK / OW);
    var bk: array<u32, ITEMS>;
    var li: array<u32, ITEMS>;
    var key: array<K, ITEMS>;
    for (var it = 0u; it < ITEMS / OW; it++) {
        let blk = wbase + it * WG;
        let w = blk + inv.lid;
        let k0 = blk * OW + inv.lid;
        var word = 0u;
        if (k0 < c_p.n) {
            word = o_oracle[w];
        }
        for (var q = 0u; q < OW; q++) {
            let e = it * OW + q;
            bk[e] = NONE;
            let i = k0 + q * WG;
            let r = (word >> (4u * q)) & 15u;
            if (i < c_p.n && resid[r] != 0u) {
                let x = c_src[c_p.off + i];
                var b = r;
                if (NB > 16u) {
                    b = bucket_of(x);
                }
                if (f_slot[c_p.task * NB + b] != NONE) {
                    bk[e] = b;
                    key[e] = x;
                    li[e] = atomicAdd(&hist[b], 1u);
                }
            }
        }
    }
    place_targets(inv);
    for (var e = 0u; e < ITEMS; e++) {
        if (bk[e] != NONE) {
            f_out[atomicLoad(&hist[bk[e]]) + li[e]] = key[e];
        }
    }
}

//@@ window (the bracketing first level: key windows around the target ranks)

// Floyd & Rivest's idea applied as SampleSelect's first level: the host picks, per
// distinct target rank, a window [lo, hi] of the sorted sample (indices about 3
// standard deviations of the sample rank either side of the target), so the key at
// that rank lies inside it with high probability; windows overlapping in sample
// index are merged. Two lean passes over the keys, with no search tree and no
// per-key arrays, so both run near memory bandwidth:
// * `window_count`: per window, the keys below it and inside it (global totals),
//   and each workgroup's count of keys inside (w_wg);
// * `window_copy`: workgroups holding keys inside a window reserve their part of the
//   window's region with one global atomic (cursor word), then copy those keys
//   there (order not kept); workgroups with none stop at once.
// A key inside several windows (only possible when two windows share a boundary
// value) is counted in each; the host detects that case by the bound values and
// falls back. NWIN: windows of this pipeline (1..=4).
//
// w_counts per window (8 words): below, inside, lo (2 words), hi (2 words), cursor,
// unused.

struct WinParams {
    off: u32,           // first element of the piece in `w_src`
    n: u32,             // elements in the piece
    pad: u32,
    wg_base: u32,       // the piece's first workgroup in w_wg
    lo_idx: vec4<u32>,  // sample index of each window's lower bound, NONE: none
    hi_idx: vec4<u32>,  // sample index of each window's upper bound, NONE: none
    woff: vec4<u32>,    // first element of each window's region in w_out
    cap: vec4<u32>,     // capacity of each window's region
}

@group(0) @binding(0) var<storage, read> w_src: array<K>;
@group(0) @binding(1) var<storage, read> w_smp: array<K>;
@group(0) @binding(2) var<storage, read_write> w_counts: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> w_p: WinParams;
@group(0) @binding(4) var<storage, read_write> w_out: array<K>;
@group(0) @binding(5) var<storage, read_write> w_wg: array<u32>;

const NWIN: u32 = {{NWIN}}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> wb_lo: array<K, NWIN>;
var<workgroup> wb_hi: array<K, NWIN>;
var<workgroup> wb_flag: array<u32, NWIN>;          // 1: has lo, 2: has hi
var<workgroup> wb_cnt: array<atomic<u32>, 8>;      // below per window, then inside per window
var<workgroup> wb_base: array<u32, NWIN>;
var<workgroup> wb_any: u32;

var<private> pw_lo: array<K, NWIN>;
var<private> pw_hi: array<K, NWIN>;
var<private> pw_fl: array<u32, NWIN>;

// Loads the windows' bounds from the sorted sample and clears the workgroup
// counters; then every invocation copies the bounds.
fn window_setup(inv: Inv) {
    if (inv.lid < NWIN) {
        let w = inv.lid;
        var f = 0u;
        if (w_p.lo_idx[w] != NONE) {
            wb_lo[w] = w_smp[w_p.lo_idx[w]];
            f |= 1u;
        }
        if (w_p.hi_idx[w] != NONE) {
            wb_hi[w] = w_smp[w_p.hi_idx[w]];
            f |= 2u;
        }
        wb_flag[w] = f;
        atomicStore(&wb_cnt[w], 0u);
        atomicStore(&wb_cnt[NWIN + w], 0u);
    }
    workgroupBarrier();
    for (var w = 0u; w < NWIN; w++) {
        pw_lo[w] = wb_lo[w];
        pw_hi[w] = wb_hi[w];
        pw_fl[w] = wb_flag[w];
    }
}

fn below_window(x: K, w: u32) -> bool {
    return (pw_fl[w] & 1u) != 0u && kless(x, pw_lo[w]);
}

fn above_window(x: K, w: u32) -> bool {
    return (pw_fl[w] & 2u) != 0u && kless(pw_hi[w], x);
}

@compute @workgroup_size(WG)
fn window_count(inv: Inv) {
    window_setup(inv);
    let g = group_index(inv);
    let base = g * CHUNK;
    var below: array<u32, NWIN>;
    var inside: array<u32, NWIN>;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < w_p.n) {
            let x = w_src[w_p.off + i];
            for (var w = 0u; w < NWIN; w++) {
                let lt = below_window(x, w);
                below[w] += select(0u, 1u, lt);
                inside[w] += select(0u, 1u, !lt && !above_window(x, w));
            }
        }
    }
    for (var w = 0u; w < NWIN; w++) {
        if (below[w] != 0u) {
            atomicAdd(&wb_cnt[w], below[w]);
        }
        if (inside[w] != 0u) {
            atomicAdd(&wb_cnt[NWIN + w], inside[w]);
        }
    }
    workgroupBarrier();
    if (inv.lid < NWIN) {
        let w = inv.lid;
        let b = atomicLoad(&wb_cnt[w]);
        if (b != 0u) {
            atomicAdd(&w_counts[w * 8u], b);
        }
        let c = atomicLoad(&wb_cnt[NWIN + w]);
        if (c != 0u) {
            atomicAdd(&w_counts[w * 8u + 1u], c);
        }
        w_wg[(w_p.wg_base + g) * NWIN + w] = c;
        if (g == 0u) {
            atomicStore(&w_counts[w * 8u + 2u], kword(pw_lo[w], 0u));
            atomicStore(&w_counts[w * 8u + 3u], kword(pw_lo[w], 1u));
            atomicStore(&w_counts[w * 8u + 4u], kword(pw_hi[w], 0u));
            atomicStore(&w_counts[w * 8u + 5u], kword(pw_hi[w], 1u));
        }
    }
}

@compute @workgroup_size(WG)
fn window_copy(inv: Inv) {
    let g = group_index(inv);
    if (inv.lid == 0u) {
        var any = 0u;
        for (var w = 0u; w < NWIN; w++) {
            any |= w_wg[(w_p.wg_base + g) * NWIN + w];
        }
        wb_any = any;
    }
    if (workgroupUniformLoad(&wb_any) == 0u) {
        return;
    }
    window_setup(inv);
    if (inv.lid < NWIN) {
        let w = inv.lid;
        let c = w_wg[(w_p.wg_base + g) * NWIN + w];
        var b = 0u;
        if (c != 0u) {
            b = atomicAdd(&w_counts[w * 8u + 6u], c);
        }
        wb_base[w] = b;
    }
    workgroupBarrier();
    let base = g * CHUNK;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < w_p.n) {
            let x = w_src[w_p.off + i];
            for (var w = 0u; w < NWIN; w++) {
                if (!below_window(x, w) && !above_window(x, w)) {
                    let j = wb_base[w] + atomicAdd(&wb_cnt[NWIN + w], 1u);
                    if (j < w_p.cap[w]) {
                        w_out[w_p.woff[w] + j] = x;
                    }
                }
            }
        }
    }
}

//@@ chain (device-driven bracketing descent; the common part of the chain kernels)
//
// The chain runs a whole exact selection of one narrow rank range (a median, or
// the k-th smallest of a top-k) in one submission with no readback between
// levels. Each level is the bracketing level above (Floyd & Rivest windows from a
// sorted sample) with its decisions taken on the device:
// * `ch_gather`: S keys at pseudo-random positions of the current region;
// * `sort_sample` (section sort): sorts them in one workgroup;
// * `ch_plan`: one invocation turns the target ranks and the sorted sample into
//   the window [lo, hi] (sample elements 3 standard deviations either side, or
//   open below for top-k; the whole region once it holds at most S keys; the
//   host starts lo and hi at the smallest and largest key) and
//   writes the window pass's indirect dispatch size;
// * `ch_window` (indirect): each workgroup counts its keys below and inside the
//   window, reserves its part of the next region with one global atomic, reads
//   its keys again (from cache) and copies those inside; on the first level
//   (the whole input) two passes instead, `ch_count1` and `ch_copy1`, as the
//   bracketing level's (one fused pass was slower there on the H100: 3.1 ms at
//   2^28 against 1.2 + 2.0 ms in the same run);
// * `ch_check`: the ranks must lie inside the window (else fail = 1: the sample
//   missed), a window of one value answers them (done), a window larger than the
//   next region's capacity fails (2); otherwise the window becomes the region.
// `ch_pad` pads the last region (at most S keys) to S with kmax() and
// `sort_sample` sorts it into the output for the host.
// A failed or answered chain turns every later kernel into a no-op; the host reads
// the state once at the end and reruns the host-driven descent when it failed.
//
// The first level reads the input, one dispatch of ch_gather, ch_count1 and ch_copy1 per
// segment (binding ch_in, element type SRC, converted to K by src_key: top-k
// packs a 32-bit key and its row as one 64-bit key, so every key is distinct and
// ties go to the first rows); later levels read the previous level's region
// (ch_src) and write the next (ch_dst).

alias SRC = {{SRC}};

fn src_key(x: SRC, row: u32) -> K {
    {{SRCKEY}}
}

struct ChainU {
    rlo: u32,       // smallest target rank
    rhi: u32,       // largest target rank
    topk: u32,      // 1: windows open below (every key under the window is kept)
    seed: u32,
    sig: f32,       // half-width of a window in standard deviations
    pad0: u32,
    pad1: u32,
    pad2: u32,
    cap: array<vec4<u32>, 4>,   // capacity of level L's region: cap[L / 4][L % 4]
}

@group(0) @binding(0) var<storage, read> ch_in: array<SRC>;
@group(0) @binding(1) var<storage, read> ch_src: array<K>;
@group(0) @binding(2) var<storage, read_write> ch_dst: array<K>;
@group(0) @binding(3) var<storage, read_write> ch_st: array<atomic<u32>>;
// ch_smp: [0, S) the sample, SLOT: window's lo, SLOT + 1: hi, SLOT + 2 ..: the
// final region (SLOT: the first level's sample size; later levels may sample
// fewer keys, S of their pipelines).
const SLOT: u32 = {{SLOT}}u;
@group(0) @binding(4) var<storage, read_write> ch_smp: array<K>;
@group(0) @binding(5) var<storage, read> ch_u: ChainU;
@group(0) @binding(6) var<storage, read_write> ch_args: array<u32>;
// The first level runs once per input segment (a piece): its elements in ch_in,
// its first row, and its share of the sample.
struct PieceU {
    off: u32,       // first element in ch_in
    n: u32,         // elements
    row0: u32,      // row of its first element
    dst: u32,       // first sample slot it fills
    cnt: u32,       // samples it takes
    wg_base: u32,   // its first workgroup in ch_wg
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(7) var<storage, read> ch_piece: PieceU;
@group(0) @binding(8) var<storage, read_write> ch_wg: array<u32>;   // first level: keys inside per workgroup

// State words (ch_st).
const ST_M: u32 = 0u;       // keys in the current region
const ST_SHIFT: u32 = 1u;   // keys of the input below the current region
const ST_FAIL: u32 = 2u;    // 0, or why the chain stopped: 1 missed, 2 overflow, 3 too large at the end
const ST_DONE: u32 = 3u;    // 1: a one-value window answered every rank (the value is lo)
const ST_LEVEL: u32 = 4u;   // levels completed
const ST_BELOW: u32 = 5u;   // window pass: keys below the window
const ST_CUR: u32 = 6u;     // window pass: keys inside (the next region's cursor)

fn chain_stopped() -> bool {
    return atomicLoad(&ch_st[ST_FAIL]) != 0u || atomicLoad(&ch_st[ST_DONE]) != 0u;
}

fn chain_cap(level: u32) -> u32 {
    return ch_u.cap[min(level, 15u) / 4u][min(level, 15u) % 4u];
}

//@@ chfirst (the chain's first level reads one piece of the input)

fn load_src(i: u32) -> K {
    return src_key(ch_in[ch_piece.off + i], ch_piece.row0 + i);
}
fn region_len() -> u32 {
    return ch_piece.n;
}
fn sample_count() -> u32 {
    return ch_piece.cnt;
}
fn sample_dst() -> u32 {
    return ch_piece.dst;
}

//@@ chnext (later levels read the previous level's region)

fn load_src(i: u32) -> K {
    return ch_src[i];
}
fn region_len() -> u32 {
    return atomicLoad(&ch_st[ST_M]);
}
fn sample_count() -> u32 {
    return S;
}
fn sample_dst() -> u32 {
    return 0u;
}

//@@ chgather (after chain and chfirst or chnext)

@compute @workgroup_size(WG)
fn ch_gather(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= sample_count() || chain_stopped() || atomicLoad(&ch_st[ST_M]) <= S) {
        return;
    }
    let m = region_len();
    if (m == 0u) {
        return;
    }
    let j = sample_dst() + i;
    let level = atomicLoad(&ch_st[ST_LEVEL]);
    let pos = hash(hash(j) ^ ch_u.seed ^ (level * 0x9e3779b9u)) % m;
    ch_smp[j] = load_src(pos);
}

//@@ chplan (after chain)

@compute @workgroup_size(1)
fn ch_plan() {
    ch_args[0] = 0u;
    ch_args[1] = 1u;
    ch_args[2] = 1u;
    if (chain_stopped()) {
        return;
    }
    let m = atomicLoad(&ch_st[ST_M]);
    let shift = atomicLoad(&ch_st[ST_SHIFT]);
    // The previous bounds hold every key of the region: a side left open (and
    // the whole of a region of at most S keys) keeps them, so ch_smp[SLOT + 1] ends
    // as the tightest upper bound of the last region.
    var lo = ch_smp[SLOT];
    var hi = ch_smp[SLOT + 1u];
    if (m > S) {
        let mf = f32(m);
        let sf = f32(S);
        let ql = (f32(ch_u.rlo - shift) + 0.5) / mf;
        let qh = (f32(ch_u.rhi - shift) + 0.5) / mf;
        let sdl = sqrt(sf * ql * (1.0 - ql)) + 1.0;
        let sdh = sqrt(sf * qh * (1.0 - qh)) + 1.0;
        let a = i32(floor(ql * sf - 0.5 - ch_u.sig * sdl)) - 1;
        let b = i32(ceil(qh * sf - 0.5 + ch_u.sig * sdh)) + 1;
        if (ch_u.topk == 0u && a >= 0) {
            lo = ch_smp[min(u32(a), S - 1u)];
        }
        if (b < i32(S)) {
            hi = ch_smp[max(b, 0)];
        }
    }
    ch_smp[SLOT] = lo;
    ch_smp[SLOT + 1u] = hi;
    atomicStore(&ch_st[ST_BELOW], 0u);
    atomicStore(&ch_st[ST_CUR], 0u);
    let groups = (m + CHUNK - 1u) / CHUNK;
    let y = (groups + 65534u) / 65535u;
    ch_args[0] = (groups + y - 1u) / y;
    ch_args[1] = y;
}

//@@ chwindow (after chain and chfirst or chnext)

var<workgroup> cw_m: u32;
var<workgroup> cw_below: atomic<u32>;
var<workgroup> cw_in: atomic<u32>;
var<workgroup> cw_base: u32;
var<workgroup> cw_cnt: u32;

// Counts the workgroup's keys of base .. base + CHUNK (below m) below and inside
// [lo, hi] into cw_below and cw_in (cleared by the caller before a barrier).
fn count_chunk(lid: u32, base: u32, m: u32, lo: K, hi: K) {
    var below = 0u;
    var inside = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i < m) {
            let x = load_src(i);
            let lt = kless(x, lo);
            below += select(0u, 1u, lt);
            inside += select(0u, 1u, !lt && !kless(hi, x));
        }
    }
    if (below != 0u) {
        atomicAdd(&cw_below, below);
    }
    if (inside != 0u) {
        atomicAdd(&cw_in, inside);
    }
    workgroupBarrier();
}

// Copies the workgroup's keys inside [lo, hi] to ch_dst from slot `at` on (slots
// from cap on are dropped: the check fails the chain then); cw_in counts them.
fn copy_chunk(lid: u32, base: u32, m: u32, lo: K, hi: K, at: u32, cap: u32) {
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i < m) {
            let x = load_src(i);
            if (!kless(x, lo) && !kless(hi, x)) {
                let j = at + atomicAdd(&cw_in, 1u);
                if (j < cap) {
                    ch_dst[j] = x;
                }
            }
        }
    }
}

// (One invocation.) Reserves c slots of the next region for the workgroup: their
// first in cw_base, c in cw_cnt; clears cw_in for the copy.
fn reserve(c: u32) {
    var at = 0u;
    if (c != 0u) {
        at = atomicAdd(&ch_st[ST_CUR], c);
    }
    cw_base = at;
    cw_cnt = c;
    atomicStore(&cw_in, 0u);
}

// One level's window pass (levels after the first): count, reserve, copy.
@compute @workgroup_size(WG)
fn ch_window(inv: Inv) {
    if (inv.lid == 0u) {
        cw_m = region_len();
        atomicStore(&cw_below, 0u);
        atomicStore(&cw_in, 0u);
    }
    let m = workgroupUniformLoad(&cw_m);
    let base = group_index(inv) * CHUNK;
    if (base >= m) {
        return;
    }
    let lo = ch_smp[SLOT];
    let hi = ch_smp[SLOT + 1u];
    count_chunk(inv.lid, base, m, lo, hi);
    if (inv.lid == 0u) {
        let b = atomicLoad(&cw_below);
        if (b != 0u) {
            atomicAdd(&ch_st[ST_BELOW], b);
        }
        reserve(atomicLoad(&cw_in));
    }
    if (workgroupUniformLoad(&cw_cnt) == 0u) {
        return;
    }
    copy_chunk(inv.lid, base, m, lo, hi, cw_base, chain_cap(atomicLoad(&ch_st[ST_LEVEL])));
}

// The first level in two passes (one fused pass, as ch_window, measured slower
// there): the keys below and inside the window per workgroup (ch_wg), then the copy.
@compute @workgroup_size(WG)
fn ch_count1(inv: Inv) {
    if (inv.lid == 0u) {
        cw_m = region_len();
        atomicStore(&cw_below, 0u);
        atomicStore(&cw_in, 0u);
    }
    let m = workgroupUniformLoad(&cw_m);
    let g = group_index(inv);
    let base = g * CHUNK;
    if (base >= m) {
        return;
    }
    count_chunk(inv.lid, base, m, ch_smp[SLOT], ch_smp[SLOT + 1u]);
    if (inv.lid == 0u) {
        let b = atomicLoad(&cw_below);
        if (b != 0u) {
            atomicAdd(&ch_st[ST_BELOW], b);
        }
        ch_wg[ch_piece.wg_base + g] = atomicLoad(&cw_in);
    }
}

@compute @workgroup_size(WG)
fn ch_copy1(inv: Inv) {
    let g = group_index(inv);
    if (inv.lid == 0u) {
        reserve(ch_wg[ch_piece.wg_base + g]);
    }
    if (workgroupUniformLoad(&cw_cnt) == 0u) {
        return;
    }
    copy_chunk(inv.lid, g * CHUNK, ch_piece.n, ch_smp[SLOT], ch_smp[SLOT + 1u], cw_base, chain_cap(0u));
}

// Before the final sort (sort_sample over S keys): the last region's slots past
// its m keys get kmax(); a region of more than S keys fails the chain (3).
@compute @workgroup_size(WG)
fn ch_pad(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (chain_stopped()) {
        return;
    }
    let m = atomicLoad(&ch_st[ST_M]);
    if (m > S) {
        if (i == 0u) {
            atomicStore(&ch_st[ST_FAIL], 3u);
        }
        return;
    }
    if (i >= m && i < S) {
        ch_dst[i] = kmax();
    }
}

@compute @workgroup_size(1)
fn ch_check() {
    if (chain_stopped()) {
        return;
    }
    let shift = atomicLoad(&ch_st[ST_SHIFT]);
    let below = atomicLoad(&ch_st[ST_BELOW]);
    let inside = atomicLoad(&ch_st[ST_CUR]);
    let rl = ch_u.rlo - shift;
    let rh = ch_u.rhi - shift;
    if (rl < below || rh - below >= inside) {
        atomicStore(&ch_st[ST_FAIL], 1u);
        return;
    }
    if (ch_u.topk == 0u && keq(ch_smp[SLOT], ch_smp[SLOT + 1u])) {
        atomicStore(&ch_st[ST_DONE], 1u);
        return;
    }
    let level = atomicLoad(&ch_st[ST_LEVEL]);
    if (inside > chain_cap(level)) {
        atomicStore(&ch_st[ST_FAIL], 2u);
        return;
    }
    atomicStore(&ch_st[ST_M], inside);
    atomicStore(&ch_st[ST_SHIFT], shift + below);
    atomicStore(&ch_st[ST_LEVEL], level + 1u);
}

//@@ approx (after chain and chfirst: approximate selection in one pass over the keys)

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

//@@ approxsg (after approx, where the adapter has subgroup operations)

// ap_hist with the keys inside a window staged per subgroup: each subgroup appends
// its inside keys (slots from a ballot per item) to two subgroups' worth of slots
// and, whenever a subgroup's worth is staged, searches them with every lane busy.
// ap_hist searches a key where it reads it, so a subgroup runs a search for every
// item in which any lane's key is inside (most items, with windows holding 5-8% of
// the keys); this runs about one per subgroup-size inside keys. The search is
// branchless with a trip count fixed by AW, so lanes stay converged; stores that
// must not happen go to the invocation's own spare slot instead of branching.
// (Measured and not kept, BENCHMARKS.md session 12: one subgroup scan per chunk
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

//@@ approxkc (after approx: 32-bit keys, each window cut into cells of key space)

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

// select.rs's kc_shift does the same.
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

//@@ keys (raw 64-bit values to order keys in place, as select.rs's key_i64 / key_f64)

// The words of the values: x = low, y = high (any K: the section does not use it).
@group(0) @binding(0) var<storage, read_write> o_data: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> o_p: Params;   // n: values of this segment; mode: 0 = i64, 1 = f64, +2 = descending (complemented)

@compute @workgroup_size(WG)
fn to_key(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= o_p.n) {
        return;
    }
    var w = o_data[i];
    if ((o_p.mode & 1u) == 0u) {
        // Two's complement: flipping the sign bit orders it as unsigned.
        w.y = w.y ^ 0x80000000u;
    } else {
        // IEEE total order with every NaN one key after +inf; -0.0 before +0.0.
        let nan = (w.y & 0x7ff00000u) == 0x7ff00000u && ((w.y & 0x000fffffu) != 0u || w.x != 0u);
        if (nan) {
            w = vec2<u32>(0u, 0xfff80000u);
        } else if ((w.y & 0x80000000u) != 0u) {
            w = ~w;
        } else {
            w.y = w.y | 0x80000000u;
        }
    }
    if ((o_p.mode & 2u) != 0u) {
        w = ~w;
    }
    o_data[i] = w;
}
