// select/bucket_probe.wgsl: bench select --probe only: the count kernel with parts left out, to see what bounds it; compiled after bucket.wgsl

// The search as it was before the breadth-first tree: over the sorted array.
fn bucket_of_sorted(x: K) -> u32 {
    var j = 0u;
    for (var step = (NS + 1u) >> 1u; step > 0u; step >>= 1u) {
        j += select(0u, step, kless(tree[j + step - 1u], x));
    }
    return bucket_at(j, x);
}

// The histogram without the search: bucket = low bits of the key.
@compute @workgroup_size(WG)
fn count_nosearch(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            atomicAdd(&hist[kword(c_src[c_p.off + i], 0u) % NB], 1u);
        }
    }
    flush_hist(inv);
}

// The search without the histogram: the bucket ids summed.
@compute @workgroup_size(WG)
fn count_noatomic(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    var acc = 0u;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            acc += bucket_of(c_src[c_p.off + i]);
        }
    }
    atomicAdd(&hist[inv.lid], acc);
    workgroupBarrier();
    if (inv.lid == 0u) {
        atomicAdd(&c_counts[c_p.task * NB], atomicLoad(&hist[0]));
    }
}

// The count with the search over the sorted array.
@compute @workgroup_size(WG)
fn count_sorted(inv: Inv) {
    load_tree(inv);
    let base = group_index(inv) * CCHUNK;
    for (var it = 0u; it < CITEMS; it++) {
        let i = base + it * WG + inv.lid;
        if (i < c_p.n) {
            atomicAdd(&hist[bucket_of_sorted(c_src[c_p.off + i])], 1u);
        }
    }
    flush_hist(inv);
}
