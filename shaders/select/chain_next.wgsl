// select/chain_next.wgsl: later levels read the previous level's region

fn load_src(i: u32) -> K {
    return ch_src[i];
}
fn region_len() -> u32 {
    return atomicLoad(&ch_st[ST_M]);
}
fn sample_count() -> u32 {
    return S;
}
fn sample_dst() -> u32 {
    return 0u;
}
