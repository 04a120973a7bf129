// Device-to-device copy kernel (a plain streaming copy).
// wgpu's copy_buffer_to_buffer reaches about 0.8 TB/s on an H100 where a kernel
// reaches 2.5+ TB/s, so device copies of column data go through this kernel.
// Two entry points: `copy_vec4` when offsets and length are multiples of 4 words,
// `copy_words` otherwise. Workgroups are laid out in two dimensions to stay under
// max_compute_workgroups_per_dimension; each invocation copies ITEMS elements,
// strided by the grid so neighbouring invocations touch neighbouring addresses.

struct Params {
    src_off: u32,   // in elements (vec4 for copy_vec4, words for copy_words)
    dst_off: u32,
    n: u32,         // elements to copy
    grid: u32,      // invocations in the whole dispatch
}

@group(0) @binding(0) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst4: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = {{WG}}u;
const ITEMS: u32 = {{ITEMS}}u;

@compute @workgroup_size(WG)
fn copy_vec4(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    for (var k = 0u; k < ITEMS; k++) {
        let i = t + k * p.grid;
        if (i < p.n) {
            dst4[p.dst_off + i] = src4[p.src_off + i];
        }
    }
}
