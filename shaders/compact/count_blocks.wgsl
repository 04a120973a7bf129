// Block counts of the per-row compaction (CompactPath::PerRow; operators/src/compact.rs):
// appended to block.wgsl.

@compute @workgroup_size(WG)
fn count_blocks(inv: Inv) {
    let block = inv.wid.x + inv.wid.y * inv.nwg.x;
    if (block >= p.blocks) {
        return; // whole workgroup
    }
    let c = load_selection(inv, block, block_rows(block));
    if (inv.lid == 0u) {
        counts[p.block_base + block] = c;
    }
}

