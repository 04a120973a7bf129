// Jumping Jack (Moreira, Reis & Sousa, GRAPP 2009, sections 3.4 and 4) with block
// compaction (operators/src/compact.rs): appended to block.wgsl, see there.

@compute @workgroup_size(WG)
fn scatter_jj(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    clear_validity(inv.lid);
    let nb = block_rows(block);
    let cnt = load_selection(inv, block, nb);
    if (cnt == 0u) {
        return; // uniform
    }
    let boff = boffs[p.block_base + block];
    let row0 = block * BLOCK;
    for (var i = inv.lid; i < cnt; i += WG) {
        var idx = i;
        // MAS[idx] = nb - pInvalid[idx]; at most nb - cnt jumps in the whole block,
        // so the guard only stops a corrupted bitmap from spinning forever.
        for (var guard = 0u; guard < nb && !is_selected(idx); guard++) {
            idx = nb - (idx + 1u - rank_through(idx));
        }
        copy_row(row0 + idx, boff + i, (boff % 32u) + i);
    }
    workgroupBarrier();
    flush_validity(inv.lid, boff, cnt);
}
