// Look-back step of scan/single_pass.wgsl without subgroup operations (goes with
// scan/workgroup/shared.wgsl): invocation 0 walks up to 32 predecessors one by one,
// stopping at the first not-ready descriptor or after the first INC.

fn is_leader(inv: Inv) -> bool {
    return inv.lid == 0u;
}

fn lookback_step(inv: Inv) {
    if (inv.lid != 0u) {
        return;
    }
    var pos = lb_pos;
    var prefix = lb_prefix;
    var spins = lb_spins;
    var cmd = CMD_CONTINUE;
    for (var i = 0u; i < 32u; i++) {
        if (pos == 0u) {
            cmd = CMD_DONE;
            break;
        }
        let d = read_desc(pos - 1u);
        if (d.x == 0u) {
            if (i == 0u) {
                spins += 1u;
                if (spins > p.spins && pos - 1u >= p.tile_base) {
                    cmd = CMD_FALLBACK;
                }
            }
            break;
        }
        prefix = add(from_bits(d.y), prefix);
        pos -= 1u;
        spins = 0u;
        if (d.x == FLAG_INC) {
            cmd = CMD_DONE;
            break;
        }
    }
    if (pos == 0u) {
        cmd = CMD_DONE;
    }
    lb_pos = pos;
    lb_prefix = prefix;
    lb_spins = spins;
    lb_cmd = cmd;
}
