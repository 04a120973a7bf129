// The 32-bit hash every kernel that hashes keys shares, so that equal keys land
// in the same partition (shaders/partition/) and the same join bucket
// (shaders/join/): a boost-style combine of each key word followed by the
// murmur3 32-bit finalizer. The Rust twins are `partition::mix32` and
// `partition::hash_combine`.

fn mix32(x: u32) -> u32 {
    var h = x;
    h ^= h >> 16u;
    h *= 0x85ebca6bu;
    h ^= h >> 13u;
    h *= 0xc2b2ae35u;
    h ^= h >> 16u;
    return h;
}

fn hash_combine(h: u32, w: u32) -> u32 {
    return mix32(h ^ (w + 0x9e3779b9u + (h << 6u) + (h >> 2u)));
}

