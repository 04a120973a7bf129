// MIN and MAX of group tables in device memory (operators/src/group_table.rs; the
// dense-tags-in-device-memory strategy of shaders/group_table.wgsl, after the
// region-based state paper, seeds: region-based-state-simd-streaming.txt), with
// 64-bit atomics (wgpu's SHADER_INT64_ATOMIC_MIN_MAX): each value becomes its
// order-preserving key (an i64 with the sign bit flipped), and a group keeps
// atomicMax of the key (`mx`) and atomicMax of the key's complement (`mn`, so the
// minimum is ~mn). Both arrays start at zero, which any key or complement reaches;
// a group without values is told by its count, not by these words.

struct Params {
    n: u32,
    groups: u32,
    flags: u32,
    pad: u32,
}

const WG: u32 = {{WG}}u;
const F_VALID: u32 = 1u;

@group(0) @binding(0) var<storage, read> gids: array<u32>;
@group(0) @binding(1) var<storage, read> vals: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> valid: array<u32>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(10) var<storage, read_write> mn: array<atomic<u64>>;
@group(0) @binding(11) var<storage, read_write> mx: array<atomic<u64>>;

@compute @workgroup_size(WG)
fn table_min_max(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.n) { return; }
    let g = gids[i];
    if (g >= p.groups) { return; }
    if ((p.flags & F_VALID) != 0u && ((valid[i / 32u] >> (i % 32u)) & 1u) == 0u) { return; }
    let v = vals[i];
    let k = (u64(v.y ^ 0x80000000u) << 32u) | u64(v.x);
    atomicMax(&mx[g], k);
    atomicMax(&mn[g], ~k);
}
