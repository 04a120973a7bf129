// select/bucket.wgsl: count and filter

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
