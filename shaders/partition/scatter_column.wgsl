// One moved column of the fused rank-and-scatter kernel (scatter.wgsl's
// COL_MOVES), filled in per column by operators/src/partition/fused.rs
// (`fused_column_wgsl`): the section after the VALUES marker moves the values,
// the one after the VALIDITY marker the validity bits (with atomicOr into the
// zeroed output bitmap). Placeholders: COLUMN (the column's number j: bindings
// ci<j>, co<j>, cvi<j>, cvo<j>), LEAD (a barrier unless the column is the first
// and 4 bytes wide), STAGE (the items' values or bits into their slots), AHEAD
// (the next round's loads, when they are read a round ahead), VALUE (a slot's
// value).
// @@VALUES
        // column {{COLUMN}}
{{LEAD}}{{STAGE}}{{AHEAD}}        workgroupBarrier();
        //@unroll
        {
            let i = @K * SWG + lid;
            let g = gd[@K];
            if (i < rcount && in_out(g)) { co{{COLUMN}}[g - p.out_first] = {{VALUE}}; }
        }
        //@end
// @@VALIDITY
        workgroupBarrier();
{{STAGE}}{{AHEAD}}        workgroupBarrier();
        //@unroll
        {
            let i = @K * SWG + lid;
            let g = gd[@K];
            if (i < rcount && in_out(g) && sa[i] != 0u) {
                let q = g - p.out_first;
                atomicOr(&cvo{{COLUMN}}[q / 32u], 1u << (q % 32u));
            }
        }
        //@end
