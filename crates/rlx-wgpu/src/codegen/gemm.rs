//! Tiled GEMM in WGSL: a workgroup computes a `BM x BN` tile of C, staging `BK`-deep slices of
//! A (transposed) and B in workgroup memory; each invocation accumulates a `TM x TN` block
//! in registers (fully unrolled scalar FMAs), rows and columns strided across the workgroup
//! so workgroup-memory reads are conflict free. Batched through `workgroup_id.z` with
//! broadcast batch dims; a shared right operand folds the batch into rows. The fused
//! elementwise epilogue runs on each element before its store.

use super::library::{numel, LibCtx};
use super::scalar::load;
use super::{broadcast_strides, check_i32, coords, Emitted, Kb};

/// One tile configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// rows of C per workgroup
    pub bm: usize,
    /// columns of C per workgroup
    pub bn: usize,
    /// depth of a K slice
    pub bk: usize,
    /// rows per invocation
    pub tm: usize,
    /// columns per invocation
    pub tn: usize,
}

impl Tile {
    /// Invocations per workgroup.
    pub fn threads(&self) -> usize {
        (self.bm / self.tm) * (self.bn / self.tn)
    }

    /// The tile for an `m x n` result: 128x128 (8x8 per invocation) when both are large,
    /// else 64x64 (4x4).
    pub fn pick(m: usize, n: usize) -> Tile {
        if m >= 128 && n >= 128 {
            Tile {
                bm: 128,
                bn: 128,
                bk: 8,
                tm: 8,
                tn: 8,
            }
        } else {
            Tile {
                bm: 64,
                bn: 64,
                bk: 16,
                tm: 4,
                tn: 4,
            }
        }
    }
}

/// Batch offsets as a WGSL expression of the batch coordinates `bc*`.
fn batch_offset(name: &str, shape: &[usize], ob: &[usize], mat: usize) -> String {
    let bd = &shape[..shape.len() - 2];
    let st = broadcast_strides(bd, ob);
    let mut s = format!("let {name}: i32 = 0");
    for (i, x) in st.iter().enumerate() {
        if *x != 0 {
            s += &format!(" + bc{i} * {}", *x as usize * mat);
        }
    }
    s + ";\n"
}

/// Emits a matmul `[.., M, K] x [.., K, N]`.
///
/// # Errors
/// Too many batches or rows for the dispatch limits, or an epilogue node no rule accepts.
pub fn matmul(ctx: &LibCtx) -> Result<Emitted, String> {
    let (adt, a) = &ctx.inputs[0];
    let (bdt, b) = &ctx.inputs[1];
    let (ra, rb) = (a.len(), b.len());
    let (m0, k, n) = (a[ra - 2], a[ra - 1], b[rb - 1]);
    let out = &ctx.result.1;
    let ob = &out[..out.len() - 2];
    check_i32(&ctx.kernel.name, numel(out).max(numel(a)).max(numel(b)))?;
    // A shared right operand with a contiguous left one: one tall GEMM.
    let a_batch = numel(&a[..ra - 2]);
    let fold = numel(&b[..rb - 2]) == 1 && a_batch == numel(ob);
    let (m, batch, ob): (usize, usize, &[usize]) = if fold {
        (m0 * numel(ob), 1, &[])
    } else {
        (m0, numel(ob), ob)
    };
    let t = ctx.target;
    if t.simple_gemm {
        return simple(ctx, (m, k, n), batch, ob, fold, &a[..], &b[..]);
    }
    let tile = Tile::pick(m, n);
    let gx = n.div_ceil(tile.bn);
    let gy = m.div_ceil(tile.bm);
    let max = t.max_workgroups as usize;
    if gx > max || gy > max || batch > max {
        return Err(format!(
            "matmul grid {gx} x {gy} x {batch} workgroups exceeds the adapter's {max} per dimension"
        ));
    }
    let mut kb = Kb::new();
    let outb = ctx.bind_out(&mut kb);
    let ab = ctx.bind_in(&mut kb, 0);
    let bb = ctx.bind_in(&mut kb, 1);
    let Tile { bm, bn, bk, tm, tn } = tile;
    let threads = tile.threads();
    let (cols, rows) = (bn / tn, bm / tm);
    let mut offs = coords("bz", "bc", ob);
    offs += &batch_offset("a_off", a, ob, if fold { 0 } else { m0 * k });
    offs += &batch_offset("b_off", b, ob, k * n);
    let a_loads = (bm * bk).div_ceil(threads);
    let b_loads = (bk * bn).div_ceil(threads);
    let aload = load(
        *adt,
        &ab,
        &format!(
            "(a_off + min(gm, {}) * {k} + min(gk, {}))",
            m - 1,
            k.max(1) - 1
        ),
    );
    let bload = load(
        *bdt,
        &bb,
        &format!(
            "(b_off + min(gk, {}) * {n} + min(gn, {}))",
            k.max(1) - 1,
            n - 1
        ),
    );
    let mut decl = String::new();
    for i in 0..tm {
        for j in 0..tn {
            decl += &format!("var c{i}_{j}: f32 = 0.0;\n");
        }
    }
    let mut inner = String::new();
    for i in 0..tm {
        inner += &format!("let a{i} = As[kk * {bm} + ty + {}];\n", i * rows);
    }
    for j in 0..tn {
        inner += &format!("let b{j} = Bs[kk * {bn} + tx + {}];\n", j * cols);
    }
    for i in 0..tm {
        for j in 0..tn {
            inner += &format!("c{i}_{j} = fma(a{i}, b{j}, c{i}_{j});\n");
        }
    }
    let mut stores = String::new();
    for i in 0..tm {
        for j in 0..tn {
            let st = ctx.store(&mut kb, &outb, "lin", &format!("c{i}_{j}"))?;
            stores += &format!(
                "{{ let gm = m0 + ty + {}; let gn = n0 + tx + {}; if (gm < {m} && gn < {n}) {{ let lin = c_off + gm * {n} + gn;\n{st}}} }}\n",
                i * rows,
                j * cols
            );
        }
    }
    let text = format!(
        "var<workgroup> As: array<f32, {asz}>;\nvar<workgroup> Bs: array<f32, {bsz}>;\n\
         @compute @workgroup_size({threads})\n\
         fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid_u: u32) {{\n\
         let lid = i32(lid_u);\nlet tx = lid % {cols};\nlet ty = lid / {cols};\n\
         let n0 = i32(wg.x) * {bn};\nlet m0 = i32(wg.y) * {bm};\nlet bz = i32(wg.z);\n\
         {offs}let c_off = bz * {mn};\n{decl}\
         for (var k0: i32 = 0; k0 < {k}; k0 += {bk}) {{\n\
         for (var r: i32 = 0; r < {a_loads}; r += 1) {{\n\
         let e = lid + r * {threads};\nlet row = e / {bk};\nlet col = e % {bk};\n\
         let gm = m0 + row;\nlet gk = k0 + col;\n\
         if (e < {abk}) {{ As[col * {bm} + row] = select(0.0, {aload}, gm < {m} && gk < {k}); }}\n}}\n\
         for (var r: i32 = 0; r < {b_loads}; r += 1) {{\n\
         let e = lid + r * {threads};\nlet row = e / {bn};\nlet col = e % {bn};\n\
         let gk = k0 + row;\nlet gn = n0 + col;\n\
         if (e < {bbk}) {{ Bs[row * {bn} + col] = select(0.0, {bload}, gk < {k} && gn < {n}); }}\n}}\n\
         workgroupBarrier();\n\
         for (var kk: i32 = 0; kk < {bk}; kk += 1) {{\n{inner}}}\n\
         workgroupBarrier();\n}}\n{stores}}}\n",
        asz = bm * bk,
        bsz = bk * bn,
        mn = m * n,
        abk = bm * bk,
        bbk = bk * bn,
    );
    Ok(kb.finish(&ctx.kernel.name, text, [gx as u32, gy as u32, batch as u32]))
}

/// One invocation per output element, looping over K: for drivers that choke on the tiled
/// shader (Mesa's GL).
fn simple(
    ctx: &LibCtx,
    (m, k, n): (usize, usize, usize),
    batch: usize,
    ob: &[usize],
    fold: bool,
    a: &[usize],
    b: &[usize],
) -> Result<Emitted, String> {
    let (adt, _) = &ctx.inputs[0];
    let (bdt, _) = &ctx.inputs[1];
    let m0 = a[a.len() - 2];
    let total = batch * m * n;
    let mut kb = Kb::new();
    let outb = ctx.bind_out(&mut kb);
    let ab = ctx.bind_in(&mut kb, 0);
    let bb = ctx.bind_in(&mut kb, 1);
    let mut offs = coords("bz", "bc", ob);
    offs += &batch_offset("a_off", a, ob, if fold { 0 } else { m0 * k });
    offs += &batch_offset("b_off", b, ob, k * n);
    let st = ctx.store(&mut kb, &outb, "idx", "acc")?;
    let groups = super::groups_for(total, super::WG, ctx.target);
    let text = format!(
        "{}{}let gn = idx % {n};\nlet gm = (idx / {n}) % {m};\nlet bz = idx / {mn};\n{offs}\
         var acc: f32 = 0.0;\n\
         for (var kk: i32 = 0; kk < {k}; kk += 1) {{ acc = fma({av}, {bv}, acc); }}\n{st}}}\n}}\n",
        super::main_sig(super::WG),
        super::grid_loop("idx", total, groups, super::WG, "lid"),
        mn = m * n,
        av = load(*adt, &ab, "(a_off + gm * K + kk)").replace('K', &k.to_string()),
        bv = load(*bdt, &bb, "(b_off + kk * N + gn)").replace('N', &n.to_string()),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}
