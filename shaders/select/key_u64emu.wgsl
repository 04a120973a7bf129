// select/key_u64emu.wgsl: emulated 64-bit keys, x = low word, y = high word
// (compiled first, before common.wgsl).
alias K = vec2<u32>;
fn kless(a: K, b: K) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
fn keq(a: K, b: K) -> bool { return all(a == b); }
fn kmax() -> K { return vec2<u32>(0xffffffffu, 0xffffffffu); }
fn kword(a: K, i: u32) -> u32 { return a[i]; }
