// Bandwidth probes (operators/src/select.rs, `probe_kernels`; `ridgeline bench
// select --probe`): one pass over n u32 keys that only loads and sums them, in
// several load shapes, so the selection kernels' times can be read against what a
// plain pass costs on this adapter. Each invocation sums ITEMS keys (strided by WG:
// coalesced); the workgroup adds its sum into one global counter (mode 0) or into
// one of 1024 counters (mode 1, no contention on one address).

const WG: u32 = 256u;
const ITEMS: u32 = {{ITEMS}}u;

struct P {
    n: u32,
    mode: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> p: P;

var<workgroup> acc: atomic<u32>;

fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

fn finish(g: u32, lid: u32, s: u32) {
    atomicAdd(&acc, s);
    workgroupBarrier();
    if (lid == 0u) {
        let t = atomicLoad(&acc);
        if (p.mode == 0u) {
            atomicAdd(&out[0], t);
        } else {
            atomicAdd(&out[g % 1024u], t);
        }
    }
}

@compute @workgroup_size(WG)
fn sum_scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&acc, 0u);
    }
    workgroupBarrier();
    let g = group_index(wid, nwg);
    let base = g * WG * ITEMS;
    var s = 0u;
    for (var it = 0u; it < ITEMS; it++) {
        let i = base + it * WG + lid;
        if (i < p.n) {
            s += src[i];
        }
    }
    finish(g, lid, s);
}

@compute @workgroup_size(WG)
fn sum_vec4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&acc, 0u);
    }
    workgroupBarrier();
    let g = group_index(wid, nwg);
    let base = g * WG * (ITEMS / 4u);
    let n4 = p.n / 4u;
    var s = vec4<u32>(0u);
    for (var it = 0u; it < ITEMS / 4u; it++) {
        let i = base + it * WG + lid;
        if (i < n4) {
            s += src4[i];
        }
    }
    finish(g, lid, s.x + s.y + s.z + s.w);
}
