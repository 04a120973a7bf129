// Prefix sum (scan) of one buffer: the portable reduce-then-scan scheme.
//
// operators/src/scan.rs drives three steps over an array split into segments:
//   1. `reduce`: every workgroup sums one tile (WG * VPT vectors of VEC elements)
//      and writes the tile's total to sums[tile_base + tile] (tiles are numbered
//      across all segments, so the tile totals of the whole array form one array);
//   2. the tile totals are scanned exclusively by these same two kernels,
//      recursively, until a single workgroup's tile holds them all; that workgroup
//      also writes the grand total;
//   3. `downsweep`: every workgroup rescans its tile starting from its tile's
//      offset and writes the inclusive or exclusive prefix sums.
// No workgroup ever waits for another (Vulkan promises no forward progress between
// workgroups, so a single-pass look-back scan could hang), at the price of reading
// the input twice.
//
// Prepended by the Rust side: a scan/element/*.wgsl part (T, S, VEC, zero, add, pack,
// unpack) and a scan/workgroup/*.wgsl part (Inv, WG, rank_of, wg_excl_scan, wg_reduce,
// with or without subgroup operations). Placeholders (double-brace names): WG (in
// the wg part) and VPT, the vectors each invocation loads.
//
// Loads and stores are whole 16-byte vectors. The last vector of a buffer may be
// partly past the logical length n: its extra lanes read as zero and are written
// with don't-care values into the buffer's padding (pool buffers are sized in
// multiples of 16 bytes; the Rust side checks it).
//
// Addition wraps for integers; floats use IEEE addition in the kernel's order
// (in-thread left to right, then across invocations and tiles), which is not the
// sequential order: results match a sequential scan up to rounding.

struct Params {
    n: u32,          // elements in this buffer
    nvec: u32,       // vectors covering them: ceil(n / VEC)
    tiles: u32,      // tiles (workgroups) of this dispatch
    tile_base: u32,  // index of this buffer's first tile in the tile arrays
    flags: u32,      // F_* below
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

const VPT: u32 = {{VPT}}u;
const TILE_VECS: u32 = WG * VPT;

const F_EXCLUSIVE: u32 = 1u; // write exclusive prefix sums (else inclusive)
const F_OFFSETS: u32 = 2u;   // add offs[tile_base + tile] to the tile
const F_TOTAL: u32 = 4u;     // the last tile writes the grand total to out1[0]

@group(0) @binding(0) var<storage, read> src: array<S>;
@group(0) @binding(1) var<storage, read_write> dst: array<S>;
@group(0) @binding(2) var<storage, read> offs: array<T>;
// `reduce`: the tile totals; `downsweep`: the grand total (F_TOTAL).
@group(0) @binding(3) var<storage, read_write> out1: array<T>;
@group(0) @binding(4) var<uniform> p: Params;

// Vector vi of src, lanes at or past n replaced by zero.
fn load_vec(vi: u32) -> array<T, VEC> {
    var a = unpack(src[vi]);
    let first = vi * VEC;
    if (first + VEC > p.n) {
        for (var k = 0u; k < VEC; k++) {
            if (first + k >= p.n) {
                a[k] = zero();
            }
        }
    }
    return a;
}

// Step 1: tile totals. Invocations read vectors strided by WG (neighbours read
// neighbouring vectors, so the loads coalesce); the order of a sum does not matter
// for integers, and for floats only changes rounding.
@compute @workgroup_size(WG)
fn reduce(inv: Inv) {
    let tile = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (tile >= p.tiles) {
        return; // whole workgroup: the barriers below stay uniform
    }
    let r = rank_of(inv);
    let base = tile * TILE_VECS;
    var acc = zero();
    for (var j = 0u; j < VPT; j++) {
        let vi = base + j * WG + r;
        if (vi < p.nvec) {
            let a = load_vec(vi);
            for (var k = 0u; k < VEC; k++) {
                acc = add(acc, a[k]);
            }
        }
    }
    let s = wg_reduce(inv, acc);
    if (r == 0u) {
        out1[p.tile_base + tile] = s;
    }
}

// Step 3 (and the single-workgroup scan of step 2): each invocation owns VPT
// consecutive vectors, sums them, takes its exclusive prefix from the workgroup
// scan plus the tile's offset, then writes its elements' prefix sums in order.
@compute @workgroup_size(WG)
fn downsweep(inv: Inv) {
    let tile = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (tile >= p.tiles) {
        return; // whole workgroup
    }
    let r = rank_of(inv);
    let first = tile * TILE_VECS + r * VPT;
    var vals: array<array<T, VEC>, VPT>;
    var sum = zero();
    for (var j = 0u; j < VPT; j++) {
        let vi = first + j;
        if (vi < p.nvec) {
            vals[j] = load_vec(vi);
        } else {
            for (var k = 0u; k < VEC; k++) {
                vals[j][k] = zero();
            }
        }
        for (var k = 0u; k < VEC; k++) {
            sum = add(sum, vals[j][k]);
        }
    }
    let sc = wg_excl_scan(inv, sum);
    var offset = zero();
    if ((p.flags & F_OFFSETS) != 0u) {
        offset = offs[p.tile_base + tile];
    }
    var carry = add(offset, sc.ex);
    let exclusive = (p.flags & F_EXCLUSIVE) != 0u;
    for (var j = 0u; j < VPT; j++) {
        let vi = first + j;
        if (vi < p.nvec) {
            var o: array<T, VEC>;
            for (var k = 0u; k < VEC; k++) {
                let x = vals[j][k];
                if (exclusive) {
                    o[k] = carry;
                    carry = add(carry, x);
                } else {
                    carry = add(carry, x);
                    o[k] = carry;
                }
            }
            dst[vi] = pack(o);
        }
    }
    if ((p.flags & F_TOTAL) != 0u && tile + 1u == p.tiles && r == 0u) {
        out1[0] = add(offset, sc.total);
    }
}
