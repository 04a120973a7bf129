// select/sample_sort_sg.wgsl: sort_sample where the adapter has subgroup operations; after sample_bitonic.wgsl and sample_sort.wgsl

// The same bitonic network over the same S keys with four keys per invocation
// in registers (SWG = S / 4 invocations): steps with j < 4 compare inside an
// invocation, steps with j < 4 x subgroup size exchange keys with
// subgroupShuffleXor, and only the steps with larger j go through workgroup
// memory and barriers (15 of the 78 steps at S = 4096 with subgroups of 32;
// sort_sample takes a barrier after every step). Invocation t holds keys
// 4t .. 4t + 3, t numbered by subgroup (subgroup id x size + lane) so that a
// shuffle partner holds the partner keys.

const SWG: u32 = {{SWG}}u;

struct InvSort {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
}

fn kshx(a: K, m: u32) -> K {
    {{KSHX}}
}

// Key i's new value, given its partner l's key: the lower index of a pair keeps
// the smaller key in an ascending block ((i & k) == 0) and the larger otherwise.
fn ss_keep(mine: K, other: K, i: u32, l: u32, k: u32) -> K {
    let lt = kless(other, mine);
    let lo = select(mine, other, lt);
    let hi = select(other, mine, lt);
    return select(hi, lo, ((i & k) == 0u) == (i < l));
}

@compute @workgroup_size(SWG)
fn sort_sample_sg(inv: InvSort) {
    let t = inv.sg_id * inv.sg_size + inv.lane;
    let m = s_p.cnt;
    let b = 4u * t;
    var v: array<K, 4>;
    for (var r = 0u; r < 4u; r++) {
        var x = kmax();
        if (b + r < m) {
            x = s_src[s_p.off + b + r];
        }
        v[r] = x;
    }
    let lanes = 4u * inv.sg_size;
    for (var k = 2u; k <= S; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            if (j >= lanes) {
                for (var r = 0u; r < 4u; r++) {
                    sh[b + r] = v[r];
                }
                workgroupBarrier();
                for (var r = 0u; r < 4u; r++) {
                    v[r] = ss_keep(v[r], sh[(b + r) ^ j], b + r, (b + r) ^ j, k);
                }
                workgroupBarrier();
            } else if (j >= 4u) {
                for (var r = 0u; r < 4u; r++) {
                    v[r] = ss_keep(v[r], kshx(v[r], j / 4u), b + r, (b + r) ^ j, k);
                }
            } else {
                // Inside the invocation: j = 2 pairs keys (0, 2) and (1, 3), j = 1
                // pairs (0, 1) and (2, 3); key 0's partner is j, key 3's is 3 - j
                // (constant indices keep the keys in registers).
                let one = j == 1u;
                let p = select(v[2], v[1], one);
                let q = select(v[1], v[2], one);
                let n0 = ss_keep(v[0], p, b, b + j, k);
                let np = ss_keep(p, v[0], b + j, b, k);
                let nq = ss_keep(q, v[3], b + 3u - j, b + 3u, k);
                v[3] = ss_keep(v[3], q, b + 3u, b + 3u - j, k);
                v[0] = n0;
                v[1] = select(nq, np, one);
                v[2] = select(np, nq, one);
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        sh[b + r] = v[r];
    }
    workgroupBarrier();
    sort_write(t, SWG, m);
}
