// select/chain_first.wgsl: the chain's first level reads one piece of the input

fn load_src(i: u32) -> K {
    return src_key(ch_in[ch_piece.off + i], ch_piece.row0 + i);
}
fn region_len() -> u32 {
    return ch_piece.n;
}
fn sample_count() -> u32 {
    return ch_piece.cnt;
}
fn sample_dst() -> u32 {
    return ch_piece.dst;
}
