// SkyAlign, stage 4, before each level: the partitions sorted by key (sort_level).
// The loader prepends common.wgsl (parameters, bindings, shared helpers; its header
// describes every stage).

// sort_level: one workgroup per level-l partition (aux triples, P.npart of them).

const SCAP: u32 = {{SCAP}}u;
// Lanes of sort_level: 64 to 256 by the level's average partition size.
const SWG: u32 = {{SWG}}u;

var<workgroup> s_key: array<u32, SCAP>;
var<workgroup> s_pos: array<u32, SCAP>;
var<workgroup> s_part: vec3<u32>;

@compute @workgroup_size(SWG)
fn sort_level(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let k = wid.x + wid.y * nwg.x;
    if k >= P.npart { return; }
    if lid == 0u {
        s_part = vec3<u32>(aux[k * 3u], aux[k * 3u + 1u], aux[k * 3u + 2u]);
    }
    let part = workgroupUniformLoad(&s_part);
    let m = part.x;
    let start = part.y;
    let len = part.z - part.y;
    if len > SCAP {
        // Too large to sort here: no cut (every key 0 <= any q's sum).
        if lid < KDIR {
            kdir[k * KDIR + lid] = 0u;
        }
        return;
    }
    var size = 1u;
    while size < len { size <<= 1u; }
    for (var t = lid; t < size; t += SWG) {
        var key = 0xffffffffu;
        if t < len {
            key = key_of(widx_rw[start + t], m);
        }
        s_key[t] = key;
        s_pos[t] = t;
    }
    workgroupBarrier();
    // Bitonic sort of (key, position) by key; padding keys (all ones) go last.
    for (var kk = 2u; kk <= size; kk <<= 1u) {
        for (var jj = kk >> 1u; jj > 0u; jj >>= 1u) {
            for (var t = lid; t < size; t += SWG) {
                let o = t ^ jj;
                if o > t {
                    let a = s_key[t];
                    let b = s_key[o];
                    if (a > b) == ((t & kk) == 0u) && a != b {
                        s_key[t] = b;
                        s_key[o] = a;
                        let pa = s_pos[t];
                        s_pos[t] = s_pos[o];
                        s_pos[o] = pa;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    // The directory (slice b starts at position b * len / KDIR); then ids and
    // masks permuted through workgroup memory (each partition's entries are read
    // and written by its own workgroup only).
    if lid < KDIR {
        kdir[k * KDIR + lid] = s_key[lid * len / KDIR];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        s_key[t] = widx_rw[start + s_pos[t]];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        widx_rw[start + t] = s_key[t];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        s_key[t] = wq[start + s_pos[t]];
    }
    workgroupBarrier();
    for (var t = lid; t < len; t += SWG) {
        wq[start + t] = s_key[t];
    }
}
