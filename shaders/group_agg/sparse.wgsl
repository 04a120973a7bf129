// Grouped aggregation, sparse regions (after common.wgsl): a two-level segmented
// reduction. The host cuts every group's region (roffs[g] .. roffs[g + 1] of the
// partitioned columns) into pieces of at
// most PIECE rows that do not cross a segment (pieces[2k], pieces[2k + 1]: first
// and end row). `piece_reduce` (one dispatch per segment, one invocation per
// piece of the segment) reduces a piece into its 8-word partial in ptbl;
// `piece_merge` (one invocation per group) folds the group's pieces
// (poffs[g] .. poffs[g + 1], in row order) into the table. No atomics are needed
// for the arithmetic, and a huge (skewed) region is spread over many invocations.

struct St {
    cnt: u32,
    s0: u32,
    s1: u32,
    s2: u32,
    mn: vec2<u32>,
    mx: vec2<u32>,
}

fn st_new() -> St {
    return St(0u, 0u, 0u, 0u, vec2<u32>(0xffffffffu, 0xffffffffu), vec2<u32>(0u, 0u));
}

// Adds the 96-bit (a0, a1, a2) into the state's sum.
fn st_add96(st: ptr<function, St>, a0: u32, a1: u32, a2: u32) {
    let t0 = (*st).s0 + a0;
    let c0 = select(0u, 1u, t0 < (*st).s0);
    let t1 = (*st).s1 + a1;
    var c1 = select(0u, 1u, t1 < (*st).s1);
    let t1b = t1 + c0;
    c1 += select(0u, 1u, t1b < t1);
    (*st).s0 = t0;
    (*st).s1 = t1b;
    (*st).s2 = (*st).s2 + a2 + c1;
}

fn st_key(st: ptr<function, St>, kmn: vec2<u32>, kmx: vec2<u32>) {
    if (key_less(kmn, (*st).mn)) { (*st).mn = kmn; }
    if (key_less((*st).mx, kmx)) { (*st).mx = kmx; }
}

@group(0) @binding(6) var<storage, read> pieces: array<u32>;
@group(0) @binding(7) var<storage, read_write> ptbl: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn piece_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = (wid.x + wid.y * nwg.x) * WG + lid;
    if (k >= p.tiles) { return; }
    let pc = p.groups + k; // p.groups: first piece of this segment
    let lo = pieces[2u * pc];
    let hi = pieces[2u * pc + 1u];
    var st = st_new();
    for (var gr = lo; gr < hi; gr++) {
        let r = gr - p.row_base;
        if (!is_valid(r)) { continue; }
        st.cnt += 1u;
        let v = vals[r];
        if ((p.flags & F_SUM) != 0u) {
            st_add96(&st, v.x, v.y, select(0u, 0xffffffffu, (v.y & 0x80000000u) != 0u));
        }
        let key = sort_key(v);
        st_key(&st, key, key);
    }
    let b = pc * 8u;
    atomicStore(&ptbl[b], st.cnt);
    atomicStore(&ptbl[b + 1u], st.s0);
    atomicStore(&ptbl[b + 2u], st.s1);
    atomicStore(&ptbl[b + 3u], st.s2);
    atomicStore(&ptbl[b + 4u], st.mn.y);
    atomicStore(&ptbl[b + 5u], st.mx.y);
    atomicStore(&ptbl[b + 6u], st.mn.x);
    atomicStore(&ptbl[b + 7u], st.mx.x);
}

@compute @workgroup_size(WG)
fn piece_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = (wid.x + wid.y * nwg.x) * WG + lid;
    if (g >= p.groups) { return; }
    var st = st_new();
    for (var pc = roffs[g]; pc < roffs[g + 1u]; pc++) {
        let b = pc * 8u;
        st.cnt += atomicLoad(&ptbl[b]);
        st_add96(&st, atomicLoad(&ptbl[b + 1u]), atomicLoad(&ptbl[b + 2u]), atomicLoad(&ptbl[b + 3u]));
        let kmn = vec2<u32>(atomicLoad(&ptbl[b + 6u]), atomicLoad(&ptbl[b + 4u]));
        let kmx = vec2<u32>(atomicLoad(&ptbl[b + 7u]), atomicLoad(&ptbl[b + 5u]));
        st_key(&st, kmn, kmx);
    }
    let b = g * 8u;
    atomicStore(&tbl[b], st.cnt);
    atomicStore(&tbl[b + 1u], st.s0);
    atomicStore(&tbl[b + 2u], st.s1);
    atomicStore(&tbl[b + 3u], st.s2);
    atomicStore(&tbl[b + 4u], st.mn.y);
    atomicStore(&tbl[b + 5u], st.mx.y);
    atomicStore(&tbl[b + 6u], st.mn.x);
    atomicStore(&tbl[b + 7u], st.mx.x);
}
