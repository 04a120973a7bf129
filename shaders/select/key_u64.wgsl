// select/key_u64.wgsl: native 64-bit keys (SHADER_INT64; compiled first, before common.wgsl).
alias K = u64;
fn kless(a: K, b: K) -> bool { return a < b; }
fn keq(a: K, b: K) -> bool { return a == b; }
fn kmax() -> K { return 0xfffffffffffffffflu; }
fn kword(a: K, i: u32) -> u32 { if (i == 0u) { return u32(a & 0xfffffffflu); } return u32(a >> 32u); }
