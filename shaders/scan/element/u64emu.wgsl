// Element part of the scan kernels for 64-bit integers without SHADER_INT64: a u64
// (or i64, same bits) is emulated as vec2<u32> (x = low word, y = high word, the
// little-endian memory layout) with a carry on addition. Two elements per 16-byte
// vector. See scan/element/vec4.wgsl for the interface.
//
// Subgroup sums use the same three-part split as scan/element/u64.wgsl: bits 0-15 and
// 16-31 (sums below 2^23 for subgroups of at most 128), and the high word (wraps
// modulo 2^32 like the 64-bit sum).

alias T = vec2<u32>;
alias S = vec4<u32>;
alias SGV = vec3<u32>;
const VEC: u32 = 2u;

fn zero() -> T {
    return vec2<u32>(0u, 0u);
}

fn add(a: T, b: T) -> T {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn unpack(s: S) -> array<T, VEC> {
    return array<T, VEC>(s.xy, s.zw);
}

fn pack(a: array<T, VEC>) -> S {
    return S(a[0], a[1]);
}

fn to_sg(x: T) -> SGV {
    return vec3<u32>(x.x & 0xffffu, x.x >> 16u, x.y);
}

// v.x + v.y * 2^16 + v.z * 2^32 modulo 2^64, with v.x, v.y < 2^23.
fn from_sg(v: SGV) -> T {
    let lo = v.x + (v.y << 16u);
    let carry = (v.y >> 16u) + select(0u, 1u, lo < v.x);
    return vec2<u32>(lo, v.z + carry);
}
