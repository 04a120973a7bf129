// select/key_u32.wgsl: 32-bit keys (compiled first, before common.wgsl).
alias K = u32;
fn kless(a: K, b: K) -> bool { return a < b; }
fn keq(a: K, b: K) -> bool { return a == b; }
fn kmax() -> K { return 0xffffffffu; }
fn kword(a: K, i: u32) -> u32 { return select(0u, a, i == 0u); }
