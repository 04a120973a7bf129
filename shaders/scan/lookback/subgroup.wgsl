// Look-back of scan/single_pass.wgsl on subgroup operations (goes with
// scan/workgroup/subgroup.wgsl). Subgroup 0 inspects a window of up to subgroup-size
// predecessors at once: lane i reads tile pos - 1 - i. The lanes before the first
// not-ready descriptor are summed, stopping after the first INC. The subgroup
// repeats this on its own (no workgroup barrier per step: every lane computes the
// same position, prefix and spin count from subgroup-wide results) until it is
// done or must fall back, then hands the outcome to the workgroup.

const LB_NONE: u32 = 0xffffffffu;

fn is_leader(inv: Inv) -> bool {
    return inv.sg_id == 0u && inv.lane == 0u;
}

fn lookback_step(inv: Inv) {
    if (inv.sg_id != 0u) {
        return;
    }
    let lane = inv.lane;
    var pos = lb_pos;
    var prefix = lb_prefix;
    var spins = lb_spins;
    var cmd = CMD_CONTINUE;
    loop {
        if (pos == 0u) {
            cmd = CMD_DONE;
            break;
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
        prefix = add(s, prefix);
        pos = pos - take;
        if (done || pos == 0u) {
            cmd = CMD_DONE;
            break;
        }
        if (take > 0u) {
            spins = 0u;
        } else {
            spins += 1u;
            if (spins > p.spins && pos - 1u >= p.tile_base) {
                cmd = CMD_FALLBACK;
                break;
            }
        }
    }
    if (lane == 0u) {
        lb_prefix = prefix;
        lb_pos = pos;
        lb_spins = spins;
        lb_cmd = cmd;
    }
}
