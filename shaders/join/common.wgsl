// GPU hash join, probe side (operators/src/join/): the shared prelude of the
// probe kernels, appended to shaders/hash.wgsl.
//
// The build side is a bucketed table made by the crate's stable partition
// (shaders/partition/, hash of the key modulo a power-of-two fan-out): the
// build keys grouped by bucket, each bucket's rows in build order, their build
// row numbers beside them and the fan-out + 1 bucket offsets. A probe row
// hashes its key the way the partition does (hash_combine of the low word, then
// of the high word for 8-byte keys), walks its bucket and counts (count.wgsl)
// or writes (write.wgsl) the build rows whose key is valid and equal. Since the
// buckets keep build order and the pairs are written at the exclusive prefix
// sum of the counts, the output is probe-major with build rows ascending: exact
// in size and deterministic.
//
// NULL keys never match: a NULL probe key counts zero; a NULL build key sits in
// the NULL_TAG bucket and is skipped by its validity bit.

struct Params {
    rows: u32,      // probe rows of this dispatch
    row_base: u32,  // their first row within the bound probe segment
    out_base: u32,  // the probe index written for row 0 of this dispatch
    grid: u32,      // workgroups per row of the dispatch grid
    flags: u32,
    mask: u32,      // fan-out - 1 (a power of two)
    capacity: u32,  // pair slots of the output
    skip: u32,      // bucket entries earlier rounds walked
    run: u32,       // bucket entries this round walks
    pad0: u32,
    pad1: u32,
}

const WG: u32 = {{WG}}u;
const F_WIDE: u32 = 1u;    // 8-byte keys (two words, low first)
const F_PVALID: u32 = 2u;  // the probe keys have a validity bitmap
const F_BVALID: u32 = 4u;  // the build keys have a validity bitmap

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> pkeys: array<u32>;
@group(0) @binding(2) var<storage, read> pvalid: array<u32>;
@group(0) @binding(3) var<storage, read> bkeys: array<u32>;
@group(0) @binding(4) var<storage, read> bvalid: array<u32>;
@group(0) @binding(5) var<storage, read> boffs: array<u32>;

fn wide() -> bool {
    return (p.flags & F_WIDE) != 0u;
}

fn probe_valid(r: u32) -> bool {
    return (p.flags & F_PVALID) == 0u || ((pvalid[r >> 5u] >> (r & 31u)) & 1u) != 0u;
}

fn probe_key(r: u32) -> vec2<u32> {
    if (wide()) {
        return vec2<u32>(pkeys[2u * r], pkeys[2u * r + 1u]);
    }
    return vec2<u32>(pkeys[r], 0u);
}

fn bucket_of(k: vec2<u32>) -> u32 {
    var h = hash_combine(0u, k.x);
    if (wide()) { h = hash_combine(h, k.y); }
    return h & p.mask;
}

// Whether build entry j (position in the bucketed table) has a valid key equal to k.
fn build_match(j: u32, k: vec2<u32>) -> bool {
    if ((p.flags & F_BVALID) != 0u && ((bvalid[j >> 5u] >> (j & 31u)) & 1u) == 0u) {
        return false;
    }
    if (wide()) {
        return bkeys[2u * j] == k.x && bkeys[2u * j + 1u] == k.y;
    }
    return bkeys[j] == k.x;
}

fn dispatch_row(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * p.grid + wid.x) * WG + lid;
}

// The entries of a bucket this round walks: a long bucket (one key repeated) is
// walked over several dispatches of `run` entries each, since some drivers stop
// a loop after 65535 iterations (lavapipe measured so) and one invocation
// should not walk a million entries alone anyway.
fn round_of(b: u32) -> vec2<u32> {
    let end = boffs[b + 1u];
    let first = min(end, boffs[b] + p.skip);
    return vec2<u32>(first, select(first + p.run, end, end - first <= p.run));
}

// What a probe row walks this round: its key and the bucket entries
// [first, last) (empty for a NULL key or a row past the dispatch).
struct Walk {
    key: vec2<u32>,
    first: u32,
    last: u32,
}

fn walk_of(i: u32) -> Walk {
    var w = Walk(vec2<u32>(0u, 0u), 0u, 0u);
    if (i < p.rows) {
        let r = p.row_base + i;
        if (probe_valid(r)) {
            w.key = probe_key(r);
            let rd = round_of(bucket_of(w.key));
            w.first = rd.x;
            w.last = rd.y;
        }
    }
    return w;
}
