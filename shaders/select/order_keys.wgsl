// select/order_keys.wgsl: raw 64-bit values to order keys in place, as operators/src/select/keys.rs's key_i64 / key_f64

// The words of the values: x = low, y = high (any K: this file does not use it).
@group(0) @binding(0) var<storage, read_write> o_data: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> o_p: Params;   // n: values of this segment; mode: 0 = i64, 1 = f64, +2 = descending (complemented)

@compute @workgroup_size(WG)
fn to_key(inv: Inv) {
    let i = group_index(inv) * WG + inv.lid;
    if (i >= o_p.n) {
        return;
    }
    var w = o_data[i];
    if ((o_p.mode & 1u) == 0u) {
        // Two's complement: flipping the sign bit orders it as unsigned.
        w.y = w.y ^ 0x80000000u;
    } else {
        // IEEE total order with every NaN one key after +inf; -0.0 before +0.0.
        let nan = (w.y & 0x7ff00000u) == 0x7ff00000u && ((w.y & 0x000fffffu) != 0u || w.x != 0u);
        if (nan) {
            w = vec2<u32>(0u, 0xfff80000u);
        } else if ((w.y & 0x80000000u) != 0u) {
            w = ~w;
        } else {
            w.y = w.y | 0x80000000u;
        }
    }
    if ((o_p.mode & 2u) != 0u) {
        w = ~w;
    }
    o_data[i] = w;
}
