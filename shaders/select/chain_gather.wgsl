// select/chain_gather.wgsl: after chain.wgsl and chain_first.wgsl or chain_next.wgsl

@compute @workgroup_size(WG)
fn ch_gather(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= sample_count() || chain_stopped() || atomicLoad(&ch_st[ST_M]) <= S) {
        return;
    }
    let m = region_len();
    if (m == 0u) {
        return;
    }
    let j = sample_dst() + i;
    let level = atomicLoad(&ch_st[ST_LEVEL]);
    let pos = hash(hash(j) ^ ch_u.seed ^ (level * 0x9e3779b9u)) % m;
    ch_smp[j] = load_src(pos);
}
