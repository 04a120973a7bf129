// Element part of the scan kernels for 64-bit integers with native WGSL u64
// (Features::SHADER_INT64). Also used for i64: two's-complement wrapping addition
// is the same bit operation. Two elements per 16-byte vector.
// See scan/element/vec4.wgsl for the interface.
//
// Subgroup operations on 64-bit integers need Vulkan's shaderSubgroupExtendedTypes,
// which wgpu does not enable, so subgroup sums of a u64 are taken on three 32-bit
// parts: bits 0-15, bits 16-31 and bits 32-63. A subgroup has at most 128
// invocations, so the sums of the two 16-bit parts stay below 2^23 and never wrap;
// the high part wraps modulo 2^32, which is exactly the wrap of the 64-bit sum.
// from_sg recombines the parts modulo 2^64.

alias T = u64;
alias S = vec2<u64>;
alias SGV = vec3<u32>;
const VEC: u32 = 2u;

fn zero() -> T {
    return 0lu;
}

fn add(a: T, b: T) -> T {
    return a + b;
}

fn unpack(s: S) -> array<T, VEC> {
    return array<T, VEC>(s.x, s.y);
}

fn pack(a: array<T, VEC>) -> S {
    return S(a[0], a[1]);
}

fn to_sg(x: T) -> SGV {
    let lo = u32(x & 0xfffffffflu);
    return vec3<u32>(lo & 0xffffu, lo >> 16u, u32(x >> 32u));
}

fn from_sg(v: SGV) -> T {
    return u64(v.x) + (u64(v.y) << 16u) + (u64(v.z) << 32u);
}
