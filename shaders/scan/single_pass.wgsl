// Single-pass prefix sum: chained scan with decoupled look-back (Merrill & Garland
// 2016), made safe without forward-progress guarantees by the "decoupled fallback"
// of Smith, Levien & Owens (SPAA 2025). 32-bit elements only (u32 / i32 / f32).
//
// operators/src/scan.rs records, in one compute pass:
//   1. `init_state`: zeroes the tile descriptors and the per-dispatch tile counters;
//   2. one `scan_lookback` dispatch per segment of the array. Tiles are numbered
//      across all segments (tile_base is the segment's first tile), so the running
//      total carries across segments: a segment's first tiles look back into the
//      previous segment's tiles, which the previous dispatch completed (wgpu orders
//      dispatches of a pass).
//
// Each workgroup:
//   * takes its tile index from an atomic counter (not workgroup_id), so tiles
//     start in order and a tile's predecessors have all been started;
//   * loads its tile (WG * VPT 16-byte vectors; invocation r owns VPT consecutive
//     vectors), sums it, and publishes the tile's aggregate (AGG; tile 0 publishes
//     its inclusive prefix, INC, at once);
//   * looks back over the predecessors' descriptors (lookback_step, from a
//     scan/lookback/*.wgsl part: a whole subgroup inspects a window of predecessors at
//     once, or invocation 0 walks them one by one), adding AGGs until it meets an
//     INC;
//   * when a predecessor's descriptor stays not ready for more than `spins` steps,
//     it does not wait for it (Vulkan does not promise that the predecessor's
//     workgroup ever runs while this one spins): the whole workgroup loads that
//     predecessor's tile and reduces it itself (the fallback), publishes the result
//     with atomicMax (so a real INC is never overwritten), and continues below it;
//   * publishes its own INC, then writes the tile's prefix sums.
//
// Descriptors: two atomic u32 per tile, each (flag << 16) | 16 bits of the value
// (low half, high half). A reader takes a descriptor only when both halves carry
// the same flag. Flags only grow (0 -> AGG -> INC) and the AGG value of a tile is
// deterministic (the fallback reduces in exactly the owner's order, so even f32
// bits agree), so the halves are always consistent and atomicMax is a safe publish.
//
// Loads and stores are coalesced: with XPOSE the tile goes through workgroup memory
// (invocations load and store neighbouring 16-byte vectors, one padding vector
// every 8 to spread the blocked accesses over the banks); without it (the tile does
// not fit workgroup memory) each invocation reads and writes its own vectors.
//
// Tile layouts (a scan/tile/*.wgsl part provides tile_scan, tile_sum, tile_store):
// * blocked: invocation r (rank order) owns VPT consecutive vectors; optionally
//   moved through workgroup memory (XPOSE) so global accesses are coalesced;
// * striped (subgroups only): lane l of subgroup g owns vectors
//   g * SG * VPT + j * SG + l (j < VPT), so every global load and store of a
//   subgroup is one contiguous run without a trip through workgroup memory; the
//   subgroup scans its VPT rows in turn and the workgroup scans subgroup totals.
//
// Prepended by the Rust side: scan/element/vec4.wgsl (T = u32 or f32, S = vec4<T>), a
// scan/workgroup/*.wgsl part and the matching scan/lookback/*.wgsl part (lookback_step,
// is_leader); appended: a scan/tile/*.wgsl part. Placeholders: WG (wg part), VPT,
// XPOSE (true / false), XPOSE_VECS (vectors of the transpose buffer:
// TILE_VECS * 9 / 8, or 1 without it).

struct LbParams {
    n: u32,          // elements in this segment
    nvec: u32,       // ceil(n / VEC)
    tiles: u32,      // tiles of this segment
    tile_base: u32,  // global index of the segment's first tile
    flags: u32,      // F_* below
    ctr: u32,        // index in `state` of this dispatch's tile counter
    spins: u32,      // look-back steps on a not-ready descriptor before the fallback
    pad: u32,
}

const VPT: u32 = {{VPT}}u;
const TILE_VECS: u32 = WG * VPT;

const F_EXCLUSIVE: u32 = 1u;
const F_TOTAL: u32 = 4u;     // the segment's last tile writes the grand total to out1[0]
const F_FORCE_FB: u32 = 8u;  // testing: always reduce the previous tile by the fallback

const FLAG_AGG: u32 = 1u;
const FLAG_INC: u32 = 2u;

const CMD_CONTINUE: u32 = 0u;
const CMD_DONE: u32 = 1u;
const CMD_FALLBACK: u32 = 2u;

@group(0) @binding(0) var<storage, read> src: array<S>;
@group(0) @binding(1) var<storage, read_write> dst: array<S>;
// 2 words per tile (descriptors of all tiles), then one tile counter per dispatch.
@group(0) @binding(2) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> out1: array<T>;
@group(0) @binding(4) var<uniform> p: LbParams;

var<workgroup> lb_tile: u32;
var<workgroup> lb_cmd: u32;
var<workgroup> lb_pos: u32;     // tiles lb_pos .. tile-1 are summed in lb_prefix
var<workgroup> lb_spins: u32;
var<workgroup> lb_prefix: T;

var<private> vals: array<S, VPT>;

fn to_bits(x: T) -> u32 {
    return bitcast<u32>(x);
}

fn from_bits(b: u32) -> T {
    return bitcast<T>(b);
}

fn publish(tile: u32, x: T, flag: u32) {
    let b = to_bits(x);
    atomicStore(&state[2u * tile], (flag << 16u) | (b & 0xffffu));
    atomicStore(&state[2u * tile + 1u], (flag << 16u) | (b >> 16u));
}

// The fallback's publish of an aggregate: never lowers a flag.
fn publish_agg_max(tile: u32, x: T) {
    let b = to_bits(x);
    atomicMax(&state[2u * tile], (FLAG_AGG << 16u) | (b & 0xffffu));
    atomicMax(&state[2u * tile + 1u], (FLAG_AGG << 16u) | (b >> 16u));
}

// (flag, value bits) of a tile's descriptor; flag 0 when not ready or when the
// two halves were caught between an AGG and an INC publish. Branch-free: it runs
// right before subgroup operations, and Vulkan does not promise that the lanes of
// a subgroup reconverge after a divergent branch.
fn read_desc(tile: u32) -> vec2<u32> {
    let a = atomicLoad(&state[2u * tile]);
    let b = atomicLoad(&state[2u * tile + 1u]);
    let f = a >> 16u;
    let same = f == (b >> 16u);
    return vec2<u32>(select(0u, f, same), select(0u, (a & 0xffffu) | (b << 16u), same));
}

// Vector vi of src, lanes at or past n replaced by zero. Whole-vector
// operations only (no dynamically indexed arrays, which can end up in local memory).
// vi may be past nvec (then every lane reads as zero): callers need no branch
// before their workgroup scan.
fn load_vec(vi: u32) -> S {
    let a = src[min(vi, p.nvec - 1u)];
    let idx = vec4<u32>(vi * 4u) + vec4<u32>(0u, 1u, 2u, 3u);
    return select(S(), a, idx < vec4<u32>(p.n));
}

// The sum of a vector added to s, left to right (the one order every path uses).
fn add_vec(s: T, a: S) -> T {
    return add(add(add(add(s, a.x), a.y), a.z), a.w);
}

// The prefix sums of vector x after carry (inclusive, or exclusive), and the carry
// after it.
fn vec_prefix(carry: T, x: S, exclusive: bool) -> array<S, 2> {
    let c1 = add(carry, x.x);
    let c2 = add(c1, x.y);
    let c3 = add(c2, x.z);
    let c4 = add(c3, x.w);
    let o = select(S(c1, c2, c3, c4), S(carry, c1, c2, c3), exclusive);
    return array<S, 2>(o, S(c4, c4, c4, c4));
}

@compute @workgroup_size(WG)
fn init_state(inv: Inv) {
    let i = (inv.wid.x + inv.wid.y * inv.nwg.x) * WG + inv.lid;
    if (i < p.n) {
        atomicStore(&state[i], 0u);
    }
}

@compute @workgroup_size(WG)
fn scan_lookback(inv: Inv) {
    if (inv.lid == 0u) {
        lb_tile = atomicAdd(&state[p.ctr], 1u);
    }
    let tl = workgroupUniformLoad(&lb_tile);
    if (tl >= p.tiles) {
        return; // a spare workgroup of a two-dimensional dispatch (whole workgroup)
    }
    let tile = p.tile_base + tl;
    let total = tile_scan(tl, inv);
    if (is_leader(inv)) {
        if (tile == 0u) {
            publish(0u, total, FLAG_INC);
        } else {
            publish(tile, total, FLAG_AGG);
        }
        lb_prefix = zero();
        lb_pos = tile;
        lb_spins = 0u;
        lb_cmd = CMD_CONTINUE;
    }
    if (tile > 0u) {
        var force = (p.flags & F_FORCE_FB) != 0u && tile > p.tile_base;
        loop {
            workgroupBarrier();
            var cmd = CMD_FALLBACK;
            if (!force) {
                lookback_step(inv);
                cmd = workgroupUniformLoad(&lb_cmd);
            }
            force = false;
            if (cmd == CMD_DONE) {
                break;
            }
            if (cmd == CMD_FALLBACK) {
                // Reduce tile lb_pos - 1 (always in this segment) ourselves.
                let f = workgroupUniformLoad(&lb_pos) - 1u;
                let s = tile_sum(f - p.tile_base, inv);
                if (is_leader(inv)) {
                    publish_agg_max(f, s);
                    lb_prefix = add(s, lb_prefix);
                    lb_pos = f;
                    lb_spins = 0u;
                }
            }
        }
    }
    workgroupBarrier();
    let prefix = lb_prefix;
    if (tile > 0u && is_leader(inv)) {
        publish(tile, add(prefix, total), FLAG_INC);
    }
    tile_store(tl, inv, prefix, (p.flags & F_EXCLUSIVE) != 0u);
    if ((p.flags & F_TOTAL) != 0u && tl + 1u == p.tiles && is_leader(inv)) {
        out1[0] = add(prefix, total);
    }
}
