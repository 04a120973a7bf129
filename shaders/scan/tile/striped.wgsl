// Striped tile layout of scan/single_pass.wgsl (subgroup adapters only): lane l of
// subgroup g owns vectors g * SG * VPT + j * SG + l for j < VPT (SG: the subgroup
// size, read from the builtin), so each global load and store of a subgroup is
// one contiguous run of SG 16-byte vectors and nothing goes through workgroup
// memory. The subgroup scans its VPT rows in turn (an exclusive subgroup scan of
// the vectors' sums per row, carrying the row total), then the workgroup scans
// the subgroup totals. Needs full subgroups (the workgroup size is a multiple of
// the largest subgroup size; the Rust side checks it).

// Per vector: its exclusive prefix inside the tile (set by tile_scan).
var<private> pre: array<T, VPT>;

fn striped_vi(tl: u32, inv: Inv, j: u32) -> u32 {
    return tl * TILE_VECS + (inv.sg_id * VPT + j) * inv.sg_size + inv.lane;
}

// Scans the vector sums of rows 4q .. 4q+3 (zero past VPT) across the subgroup
// at once (one vector-valued subgroup scan): this lane's exclusive prefixes in
// those rows, and the rows' totals (the same in every lane, shuffled from the last
// lane). Loads are issued for all rows before the first scan (see tile_scan).
fn rows_scan(q: u32, inv: Inv) -> array<vec4<T>, 2> {
    var s = vec4<T>();
    for (var k = 0u; k < 4u; k++) {
        let j = 4u * q + k;
        if (j < VPT) {
            s[k] = add_vec(zero(), vals[j]);
        }
    }
    let ex = subgroupExclusiveAdd(s);
    let tot = subgroupShuffle(ex + s, inv.sg_size - 1u);
    return array<vec4<T>, 2>(ex, tot);
}

// The per-row scans of the loaded tile: sets pre[j] to each vector's exclusive
// prefix inside this subgroup's rows and returns the subgroup's total.
fn scan_rows(inv: Inv) -> T {
    var run = zero();
    for (var q = 0u; q < (VPT + 3u) / 4u; q++) {
        let r = rows_scan(q, inv);
        for (var k = 0u; k < 4u; k++) {
            let j = 4u * q + k;
            if (j < VPT) {
                pre[j] = add(run, r[0][k]);
                run = add(run, r[1][k]);
            }
        }
    }
    return run;
}

// The subgroup totals' exclusive scan over the workgroup: (this subgroup's offset,
// the workgroup total).
fn wg_scan_runs(inv: Inv, run: T) -> array<T, 2> {
    workgroupBarrier(); // earlier users of wg_part are done
    if (inv.lane == 0u) {
        wg_part[inv.sg_id] = run;
    }
    workgroupBarrier();
    wg_scan_parts(inv);
    workgroupBarrier();
    return array<T, 2>(wg_part[inv.sg_id], wg_total);
}

// Loads and scans local tile tl; returns the tile's total. Every invocation calls it.
fn tile_scan(tl: u32, inv: Inv) -> T {
    for (var j = 0u; j < VPT; j++) {
        vals[j] = load_vec(striped_vi(tl, inv, j));
    }
    let w = wg_scan_runs(inv, scan_rows(inv));
    for (var j = 0u; j < VPT; j++) {
        pre[j] = add(w[0], pre[j]);
    }
    return w[1];
}

// The same total as tile_scan, computed in the same order (so even f32 bits agree):
// the fallback's reduction of a predecessor tile. It runs between the caller's
// tile_scan and tile_store, so the caller's `vals` and `pre` are kept aside.
fn tile_sum(tl: u32, inv: Inv) -> T {
    let keep_vals = vals;
    let keep_pre = pre;
    for (var j = 0u; j < VPT; j++) {
        vals[j] = load_vec(striped_vi(tl, inv, j));
    }
    let total = wg_scan_runs(inv, scan_rows(inv))[1];
    vals = keep_vals;
    pre = keep_pre;
    return total;
}

// Writes the prefix sums of the tile scanned last, after `prefix`.
fn tile_store(tl: u32, inv: Inv, prefix: T, exclusive: bool) {
    for (var j = 0u; j < VPT; j++) {
        let vi = striped_vi(tl, inv, j);
        let pc = vec_prefix(add(prefix, pre[j]), vals[j], exclusive);
        if (vi < p.nvec) {
            dst[vi] = pc[0];
        }
    }
}
