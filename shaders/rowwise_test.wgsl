// A row-wise test kernel (operators/src/rowwise.rs's tests): raises each row's value
// as the error code, then adds 1 to it. `{{WG}}` is replaced by ROWWISE_WG.
struct Params { rows: u32, grid: u32, row0_lo: u32, row0_hi: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> err: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read_write> a: array<u32>;
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = wid.y * params.grid + wid.x * {{WG}}u + lid.x;
    if (i >= params.rows) { return; }
    atomicMax(&err[0], a[i]);
    a[i] = a[i] + 1u;
}
