// Device-to-device copy of 32-bit words at any word offset (see copy.wgsl for the
// vectorized variant, used whenever offsets and length are multiples of 4 words).

struct Params {
    src_off: u32,
    dst_off: u32,
    n: u32,
    grid: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = {{WG}}u;
const ITEMS: u32 = {{ITEMS}}u;

@compute @workgroup_size(WG)
fn copy_words(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    for (var k = 0u; k < ITEMS; k++) {
        let i = t + k * p.grid;
        if (i < p.n) {
            dst[p.dst_off + i] = src[p.src_off + i];
        }
    }
}
