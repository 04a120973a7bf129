// Build, after the partition (appended to common.wgsl): the longest bucket, so
// the host knows how many rounds of `run` entries a probe walks.

@group(0) @binding(8) var<storage, read_write> longest: atomic<u32>;

@compute @workgroup_size(WG)
fn longest_bucket(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = dispatch_row(wid, lid);
    if (b < p.rows) {
        let len = boffs[b + 1u] - boffs[b];
        if (len > 0u) { atomicMax(&longest, len); }
    }
}
