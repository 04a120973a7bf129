// SampleSelect (Ribizel & Anzt, "Parallel selection on GPUs", 2019): GPU selection
// by sample-based bucketing, and the top-k row filter built on it
// (operators/src/select/).
//
// One level of SampleSelect on a region of keys (a task):
// * `gather`: S keys at pseudo-random positions of the task's data -> samples
//   (one dispatch per input segment, each taking its share of S).
// * `sort_sample`: one workgroup sorts up to S keys in workgroup memory with a
//   bitonic network; in splitter mode it writes the NS = B - 1 splitters
//   (equidistant sample elements) of the task, in base-case mode the whole sorted
//   region (the base case of the recursion: a bucket of at most S keys).
//   `sort_sample_sg` (sample_sort_sg.wgsl) is the same with subgroup shuffles.
// * `count`: every key finds its bucket by a branch-free binary search over the
//   splitters held in workgroup memory (the search tree of the paper in its
//   breadth-first (Eytzinger) form: log2(B) steps), and counts it in a per-workgroup
//   histogram (workgroup atomics), flushed once per workgroup into the task's global
//   counts with one atomicAdd per non-empty bucket.
// * `filter_buckets`: recomputes each key's bucket and copies the keys of the
//   target buckets into their output regions; positions are aggregated per
//   workgroup (workgroup atomics, then one global atomicAdd per bucket and
//   workgroup). The order of keys inside a bucket is not kept (selection needs none).
// * `count_oracle` / `filter_oracle` (the default, bucket_oracle.wgsl): the count also
//   stores a 4-bit oracle per key (bucket id mod 16) and the filter reads a key only
//   where its nibble matches a target bucket's residue.
//
// Buckets with equality buckets: with splitters s_0 <= .. <= s_{NS-1} and
// j = #{splitters < x}, key x goes to bucket 2j + 1 if j < NS and x == s_j (the
// equality bucket of s_j: one distinct value, so the recursion ends there at once,
// even for all-equal or few-distinct data), else to bucket 2j (the open interval
// (s_{j-1}, s_j)). NB = 2 NS + 1 buckets.
//
// One file per kernel family and stage (shaders/select/); the Rust side
// (operators/src/select/kernels.rs) compiles a key file (key_u32.wgsl,
// key_u64.wgsl or key_u64emu.wgsl), this shared file, then the files a kernel
// needs in order ("bucket+bucket_oracle"), so each kernel declares only its own
// workgroup memory.
//
// Top-k (threshold t = the k-th smallest key, found by SampleSelect):
// * `tk_count`: per block of BLOCK rows, the number of keys < t and == t.
// * `tk_scatter`: the host turns the block counts into offsets; each block writes
//   the row index of every key < t and of the first `need` keys == t (in row order),
//   so the output is the ascending row indices of the k smallest keys, ties broken
//   by row order.
//
// Placeholders: WG, S, NS, ITEMS, CITEMS; the key file before this one defines
// alias K, kless, keq, kmax and kword for u32, u64 or vec2<u32> (emulated
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

