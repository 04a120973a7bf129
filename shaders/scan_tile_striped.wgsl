// Striped tile layout of scan_lookback.wgsl (subgroup adapters only): lane l of
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

// Scans row j's vector sum s across the subgroup: (exclusive prefix, row total).
// Every lane computes the same total (shuffled from the last lane).
fn row_scan(s: T, inv: Inv) -> vec2<u32> {
    let ex = from_sg(subgroupExclusiveAdd(to_sg(s)));
    let tot = from_sg(subgroupShuffle(to_sg(add(ex, s)), inv.sg_size - 1u));
    return vec2<u32>(bitcast<u32>(ex), bitcast<u32>(tot));
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
    var run = zero();
    for (var j = 0u; j < VPT; j++) {
        let v = load_vec(striped_vi(tl, inv, j));
        vals[j] = v;
        let rs = row_scan(add_vec(zero(), v), inv);
        pre[j] = add(run, bitcast<T>(rs.x));
        run = add(run, bitcast<T>(rs.y));
    }
    let w = wg_scan_runs(inv, run);
    for (var j = 0u; j < VPT; j++) {
        pre[j] = add(w[0], pre[j]);
    }
    return w[1];
}

// The same total as tile_scan, computed in the same order (so even f32 bits agree),
// without keeping the values: the fallback's reduction of a predecessor tile.
fn tile_sum(tl: u32, inv: Inv) -> T {
    var run = zero();
    for (var j = 0u; j < VPT; j++) {
        let rs = row_scan(add_vec(zero(), load_vec(striped_vi(tl, inv, j))), inv);
        run = add(run, bitcast<T>(rs.y));
    }
    return wg_scan_runs(inv, run)[1];
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
