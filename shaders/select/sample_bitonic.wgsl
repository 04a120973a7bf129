// select/sample_bitonic.wgsl: the sort network over `sh`, shared by sort_sample and the chain

var<workgroup> sh: array<K, S>;

// Sorts sh[0..S) ascending; the caller has filled it (kmax() as padding) and
// passed a workgroup barrier.
fn bitonic_sort(lid: u32) {
    for (var k = 2u; k <= S; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            for (var t = lid; t < S / 2u; t += WG) {
                let i = ((t & ~(j - 1u)) << 1u) | (t & (j - 1u));
                let l = i | j;
                let a = sh[i];
                let b = sh[l];
                let asc = (i & k) == 0u;
                if ((asc && kless(b, a)) || (!asc && kless(a, b))) {
                    sh[i] = b;
                    sh[l] = a;
                }
            }
            workgroupBarrier();
        }
    }
}
