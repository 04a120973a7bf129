// select/sample_sort.wgsl: bitonic sort of up to S keys in workgroup memory; compiled after sample_bitonic.wgsl

@group(0) @binding(0) var<storage, read> s_src: array<K>;
@group(0) @binding(1) var<storage, read_write> s_dst: array<K>;
@group(0) @binding(2) var<uniform> s_p: Params;

@compute @workgroup_size(WG)
fn sort_sample(inv: Inv) {
    let m = s_p.cnt;
    for (var i = inv.lid; i < S; i += WG) {
        var v = kmax();
        if (i < m) {
            v = s_src[s_p.off + i];
        }
        sh[i] = v;
    }
    workgroupBarrier();
    bitonic_sort(inv.lid);
    sort_write(inv.lid, WG, m);
}

// Writes the sorted sh[0..m) (after a workgroup barrier): in splitter mode the
// NS splitters, else the whole region; invocation t of `count`.
fn sort_write(t: u32, count: u32, m: u32) {
    if (s_p.mode == 1u) {
        // Splitter j: the sample element at (j + 1) m / (NS + 1).
        for (var j = t; j < NS; j += count) {
            let idx = ((j + 1u) * (m / (NS + 1u))) + (((j + 1u) * (m % (NS + 1u))) / (NS + 1u));
            s_dst[s_p.dst_off + j] = sh[idx];
        }
    } else {
        for (var i = t; i < m; i += count) {
            s_dst[s_p.dst_off + i] = sh[i];
        }
    }
}
