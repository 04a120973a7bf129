// select/chain_plan.wgsl: after chain.wgsl

@compute @workgroup_size(1)
fn ch_plan() {
    ch_args[0] = 0u;
    ch_args[1] = 1u;
    ch_args[2] = 1u;
    if (chain_stopped()) {
        return;
    }
    let m = atomicLoad(&ch_st[ST_M]);
    let shift = atomicLoad(&ch_st[ST_SHIFT]);
    // The previous bounds hold every key of the region: a side left open (and
    // the whole of a region of at most S keys) keeps them, so ch_smp[SLOT + 1] ends
    // as the tightest upper bound of the last region.
    var lo = ch_smp[SLOT];
    var hi = ch_smp[SLOT + 1u];
    if (m > S) {
        let mf = f32(m);
        let sf = f32(S);
        let ql = (f32(ch_u.rlo - shift) + 0.5) / mf;
        let qh = (f32(ch_u.rhi - shift) + 0.5) / mf;
        let sdl = sqrt(sf * ql * (1.0 - ql)) + 1.0;
        let sdh = sqrt(sf * qh * (1.0 - qh)) + 1.0;
        let a = i32(floor(ql * sf - 0.5 - ch_u.sig * sdl)) - 1;
        let b = i32(ceil(qh * sf - 0.5 + ch_u.sig * sdh)) + 1;
        if (ch_u.topk == 0u && a >= 0) {
            lo = ch_smp[min(u32(a), S - 1u)];
        }
        if (b < i32(S)) {
            hi = ch_smp[max(b, 0)];
        }
    }
    ch_smp[SLOT] = lo;
    ch_smp[SLOT + 1u] = hi;
    atomicStore(&ch_st[ST_BELOW], 0u);
    atomicStore(&ch_st[ST_CUR], 0u);
    let groups = (m + CHUNK - 1u) / CHUNK;
    let y = (groups + 65534u) / 65535u;
    ch_args[0] = (groups + y - 1u) / y;
    ch_args[1] = y;
}
