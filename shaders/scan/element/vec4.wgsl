// Element part of the scan kernels for 32-bit elements (u32 or f32), loaded and
// stored as vec4 (four elements per 16-byte vector). Prepended to scan/reduce_then_scan.wgsl by
// operators/src/scan.rs; the placeholder T is `u32` (also used for i32: two's-complement
// wrapping addition is the same bit operation) or `f32`.
//
// Interface every scan/element/*.wgsl provides:
//   T      the arithmetic type of one element;
//   S      the storage vector (VEC elements, 16 bytes);
//   SGV    the type handed to subgroup operations (see to_sg / from_sg);
//   zero(), add(a, b), unpack(S) -> array<T, VEC>, pack(array<T, VEC>) -> S.

alias T = {{T}};
alias S = vec4<{{T}}>;
alias SGV = {{T}};
const VEC: u32 = 4u;

fn zero() -> T {
    return T(0);
}

fn add(a: T, b: T) -> T {
    return a + b;
}

fn unpack(s: S) -> array<T, VEC> {
    return array<T, VEC>(s.x, s.y, s.z, s.w);
}

fn pack(a: array<T, VEC>) -> S {
    return S(a[0], a[1], a[2], a[3]);
}

// 32-bit elements go to subgroup operations as they are.
fn to_sg(x: T) -> SGV {
    return x;
}

fn from_sg(v: SGV) -> T {
    return v;
}
