// Look-back step of scan_lookback.wgsl on subgroup operations (goes with
// scan_wg_subgroup.wgsl). Subgroup 0 inspects a window of up to subgroup-size
// predecessors at once: lane i reads tile lb_pos - 1 - i. The lanes before the
// first not-ready descriptor are summed, stopping after the first INC.

const LB_NONE: u32 = 0xffffffffu;

fn is_leader(inv: Inv) -> bool {
    return inv.sg_id == 0u && inv.lane == 0u;
}

fn lookback_step(inv: Inv) {
    if (inv.sg_id != 0u) {
        return;
    }
    let pos = lb_pos;
    let lane = inv.lane;
    if (pos == 0u) {
        if (lane == 0u) {
            lb_cmd = CMD_DONE;
        }
        return;
    }
    // No divergent branch before the subgroup operations (lanes need not
    // reconverge after one): invalid lanes read tile 0 and drop it.
    let valid = lane < pos;
    let d = select(vec2<u32>(0u, 0u), read_desc(select(0u, pos - 1u - lane, valid)), valid);
    let nvalid = min(pos, inv.sg_size);
    let first_nr = subgroupMin(select(LB_NONE, lane, valid && d.x == 0u));
    let first_inc = subgroupMin(select(LB_NONE, lane, valid && d.x == FLAG_INC));
    var take = min(nvalid, first_nr);
    var done = false;
    if (first_inc < first_nr) {
        take = first_inc + 1u;
        done = true;
    }
    let s = from_sg(subgroupAdd(to_sg(select(zero(), from_bits(d.y), lane < take))));
    if (lane == 0u) {
        lb_prefix = add(s, lb_prefix);
        let npos = pos - take;
        lb_pos = npos;
        var cmd = CMD_CONTINUE;
        if (done || npos == 0u) {
            cmd = CMD_DONE;
        } else if (take > 0u) {
            lb_spins = 0u;
        } else {
            lb_spins += 1u;
            if (lb_spins > p.spins && npos - 1u >= p.tile_base) {
                cmd = CMD_FALLBACK;
            }
        }
        lb_cmd = cmd;
    }
}
