// select/sample_gather.wgsl

@group(0) @binding(0) var<storage, read> g_src: array<K>;
@group(0) @binding(1) var<storage, read_write> g_dst: array<K>;
@group(0) @binding(2) var<uniform> g_p: Params;

@compute @workgroup_size(WG)
fn gather(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= g_p.cnt || g_p.n == 0u) {
        return;
    }
    let pos = hash(hash(i) ^ g_p.seed) % g_p.n;
    g_dst[g_p.dst_off + i] = g_src[g_p.off + pos];
}
