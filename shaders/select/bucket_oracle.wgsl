// select/bucket_oracle.wgsl: count and filter with a 4-bit oracle per key; compiled after bucket.wgsl
//
// `count_oracle` also stores each key's bucket id modulo 16 (four bits, eight keys
// to a word, about n/2 bytes: an eighth of a 32-bit input). The words come in
// blocks of WG: word w = b * WG + l holds keys b * WG * 8 + q * WG + l, q = 0..7, so
// invocation l of a block reads keys WG apart and every load of a subgroup is
// contiguous. (Eight consecutive keys per word made each load of a subgroup span
// 32-byte strides: eight times the cache traffic of the keys it used.) `filter_oracle` reads the oracle words first and reads
// a key (and searches its bucket again) only where the nibble matches the residue
// of a target bucket: about 1/16 of the keys for one target bucket, and only the
// target keys when NB <= 16. (The paper stores the whole bucket id in a byte; the
// nibble halves the scratch and, for a few targets, the filter's traffic too.)

const OW: u32 = 8u;   // keys per oracle word

@group(0) @binding(7) var<storage, read_write> o_oracle: array<u32>;

var<workgroup> resid: array<u32, 16>;

@compute @workgroup_size(WG)
fn count_oracle(inv: Inv) {
    load_tree(inv);
    let wbase = group_index(inv) * (CCHUNK / OW);
    for (var it = 0u; it < CITEMS / OW; it++) {
        let blk = wbase + it * WG;        // first word of the block
        let w = blk + inv.lid;
        let k0 = blk * OW + inv.lid;      // the word's keys: k0 + q * WG
        if (k0 < c_p.n) {
            var word = 0u;
            for (var q = 0u; q < OW; q++) {
                let i = k0 + q * WG;
                if (i < c_p.n) {
                    let b = bucket_of(c_src[c_p.off + i]);
                    atomicAdd(&hist[b], 1u);
                    word |= (b & 15u) << (4u * q);
                }
            }
            o_oracle[w] = word;
        }
    }
    flush_hist(inv);
}

@compute @workgroup_size(WG)
fn filter_oracle(inv: Inv) {
    load_tree(inv);
    for (var r = inv.lid; r < 16u; r += WG) {
        var hit = 0u;
        for (var b = r; b < NB; b += 16u) {
            hit |= select(0u, 1u, f_slot[c_p.task * NB + b] != NONE);
        }
        resid[r] = hit;
    }
    workgroupBarrier();
    let wbase = group_index(inv) * (CHUNK / OW);
    var bk: array<u32, ITEMS>;
    var li: array<u32, ITEMS>;
    var key: array<K, ITEMS>;
    for (var it = 0u; it < ITEMS / OW; it++) {
        let blk = wbase + it * WG;
        let w = blk + inv.lid;
        let k0 = blk * OW + inv.lid;
        var word = 0u;
        if (k0 < c_p.n) {
            word = o_oracle[w];
        }
        for (var q = 0u; q < OW; q++) {
            let e = it * OW + q;
            bk[e] = NONE;
            let i = k0 + q * WG;
            let r = (word >> (4u * q)) & 15u;
            if (i < c_p.n && resid[r] != 0u) {
                let x = c_src[c_p.off + i];
                var b = r;
                if (NB > 16u) {
                    b = bucket_of(x);
                }
                if (f_slot[c_p.task * NB + b] != NONE) {
                    bk[e] = b;
                    key[e] = x;
                    li[e] = atomicAdd(&hist[b], 1u);
                }
            }
        }
    }
    place_targets(inv);
    for (var e = 0u; e < ITEMS; e++) {
        if (bk[e] != NONE) {
            f_out[atomicLoad(&hist[bk[e]]) + li[e]] = key[e];
        }
    }
}
