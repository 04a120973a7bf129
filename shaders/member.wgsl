// Semi-join prefilter: membership of join keys in a dense bitmap of the build
// side's keys (operators/src/member.rs). The bitmap is the exact set of build keys
// over [base, base + nbits): the "bitvector filter" of sideways information
// passing (a hash join's build side tells the probe-side scan which keys can
// match), here exact rather than a Bloom filter because join keys of dimension
// tables are dense integer ranges.
//
// A workgroup tests ITEMS * WG consecutive rows (ITEMS * WG / 32 selection
// words): invocation l tests rows l, l + WG, ... so the key loads of a subgroup
// are coalesced, and sets its bits in the workgroup's words with atomicOr; the
// first invocations then write the words out. A key is a member when it is
// valid, lies in the bitmap's range and its bit is set; the range test subtracts
// the base in 64-bit two's complement on u32 pairs (keys of 4 bytes are sign- or
// zero-extended first), so keys far outside the range never alias into it.
//
// Launched once per segment of the key column (every array is bound segment by
// segment, as the row-wise kernels are); the selection and validity words of a
// segment are its rows / 32.

const WG: u32 = {{WG}}u;

const F_WIDE: u32 = 1u;      // 8-byte keys (two u32 words each, low first)
const F_SIGNED: u32 = 2u;    // 4-byte keys are signed (sign-extended)
const F_VALIDITY: u32 = 4u;  // `valid` is the key column's validity bitmap

struct Params {
    rows: u32,
    grid: u32,
    flags: u32,
    nbits: u32,
    base_lo: u32,
    base_hi: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read> valid: array<u32>;
@group(0) @binding(3) var<storage, read> keyset: array<u32>;
@group(0) @binding(4) var<storage, read_write> sel: array<u32>;

fn member(r: u32) -> bool {
    var lo: u32;
    var hi: u32;
    if ((p.flags & F_WIDE) != 0u) {
        lo = keys[2u * r];
        hi = keys[2u * r + 1u];
    } else {
        lo = keys[r];
        hi = select(0u, 0xffffffffu, (p.flags & F_SIGNED) != 0u && (lo & 0x80000000u) != 0u);
    }
    let dlo = lo - p.base_lo;
    let borrow = select(0u, 1u, lo < p.base_lo);
    let dhi = hi - p.base_hi - borrow;
    if (dhi != 0u || dlo >= p.nbits) {
        return false;
    }
    return ((keyset[dlo >> 5u] >> (dlo & 31u)) & 1u) != 0u;
}

const ITEMS: u32 = 4u;
const WORDS: u32 = ITEMS * WG / 32u;

var<workgroup> wbits: array<atomic<u32>, WORDS>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // p.grid: workgroups per row of the dispatch grid
    let r0 = (wid.y * p.grid + wid.x) * ITEMS * WG;
    for (var k = lid; k < WORDS; k += WG) {
        atomicStore(&wbits[k], 0u);
    }
    workgroupBarrier();
    for (var k = 0u; k < ITEMS; k++) {
        let j = k * WG + lid;
        let r = r0 + j;
        if (r < p.rows) {
            var ok = true;
            if ((p.flags & F_VALIDITY) != 0u) {
                ok = ((valid[r >> 5u] >> (r & 31u)) & 1u) != 0u;
            }
            if (ok && member(r)) {
                atomicOr(&wbits[j >> 5u], 1u << (j & 31u));
            }
        }
    }
    workgroupBarrier();
    let words = (p.rows + 31u) / 32u;
    let w0 = r0 / 32u;
    for (var k = lid; k < WORDS; k += WG) {
        if (w0 + k < words) {
            sel[w0 + k] = atomicLoad(&wbits[k]);
        }
    }
}
