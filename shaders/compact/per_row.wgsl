// Order-preserving scatter of the per-row compaction (CompactPath::PerRow;
// operators/src/compact.rs): appended to block.wgsl.

@compute @workgroup_size(WG)
fn scatter_stable(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    clear_validity(inv.lid);
    let nb = block_rows(block);
    let cnt = load_selection(inv, block, nb);
    if (cnt == 0u) {
        return; // uniform: cnt is the workgroup total
    }
    let boff = boffs[p.block_base + block];
    let row0 = block * BLOCK;
    for (var i = inv.lid; i < nb; i += WG) {
        if (is_selected(i)) {
            let r = rank_before(i);
            copy_row(row0 + i, boff + r, (boff % 32u) + r);
        }
    }
    workgroupBarrier();
    flush_validity(inv.lid, boff, cnt);
}

