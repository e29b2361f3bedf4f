//! Tiled GEMM in WGSL: a workgroup computes a `BM x BN` tile of C, staging `BK`-deep slices of
//! A (transposed) and B in workgroup memory as `vec4<f32>` (the next slice is fetched into
//! registers while the current one is multiplied); each invocation accumulates a
//! `TM x TN` block in registers (fully unrolled scalar FMAs) made of 4x4 sub-blocks spread
//! across the tile, so its workgroup-memory reads are `vec4` and conflict free. When K (for A)
//! or N (for B) is a multiple of 4, the operand is read from global memory as `vec4` of its
//! storage type (`vec4<f16>` for f16 with the adapter's SHADER_F16); products accumulate in
//! f32 either way. Batched through `workgroup_id.z` with broadcast batch dims; a shared right
//! operand folds the batch into rows. The fused elementwise epilogue runs on each element
//! before its store.

use super::dialect::Wgsl;
use super::library::{numel, LibCtx};
use super::{broadcast_strides, check_i32, Emitted, Kb, Target};
use rlx_ir::render::coords;
use rlx_ir::DType;

/// One tile configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// rows of C per workgroup
    pub bm: usize,
    /// columns of C per workgroup
    pub bn: usize,
    /// depth of a K slice
    pub bk: usize,
    /// rows per invocation (a multiple of 4)
    pub tm: usize,
    /// columns per invocation (a multiple of 4)
    pub tn: usize,
}

/// Workgroups below which the 128x128 tile leaves a large GPU idle (an H200 has 132 SMs,
/// each taking two such workgroups).
const FEW_GROUPS: usize = 256;

impl Tile {
    /// Invocations per workgroup.
    pub fn threads(&self) -> usize {
        (self.bm / self.tm) * (self.bn / self.tn)
    }

    /// The tile for `batch` results of `m x n`: 128x128 (8x8 per invocation) when both are
    /// large and that still gives enough workgroups, else 64x64 (4x4).
    pub fn pick(m: usize, n: usize, batch: usize) -> Tile {
        let groups = m.div_ceil(128) * n.div_ceil(128) * batch.max(1);
        if m >= 128 && n >= 128 && groups >= FEW_GROUPS {
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

    /// Row of the tile held by accumulator row `i` of invocation row `ty` (an expression).
    fn row(&self, i: usize) -> String {
        format!("{} + ty * 4 + {}", (i / 4) * (self.bm / self.tm) * 4, i % 4)
    }

    /// Column of the tile held by accumulator column `j` of invocation column `tx`.
    fn col(&self, j: usize) -> String {
        format!("{} + tx * 4 + {}", (j / 4) * (self.bn / self.tn) * 4, j % 4)
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

/// True when an operand of `dtype` can be read from global memory as `vec4`.
pub fn vec4_dtype(dtype: DType, target: &Target) -> bool {
    target.vec4 && (dtype == DType::F32 || (dtype == DType::F16 && target.shader_f16))
}

const LANES: [&str; 4] = ["x", "y", "z", "w"];

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
    let tile = Tile::pick(m, n, batch);
    let gx = n.div_ceil(tile.bn);
    let gy = m.div_ceil(tile.bm);
    let max = t.max_workgroups as usize;
    if gx > max || gy > max || batch > max {
        return Err(format!(
            "matmul grid {gx} x {gy} x {batch} workgroups exceeds the adapter's {max} per dimension"
        ));
    }
    let a_vec = vec4_dtype(*adt, t) && k % 4 == 0 && k > 0;
    let b_vec = vec4_dtype(*bdt, t) && n % 4 == 0 && k > 0;
    let mut kb = Kb::new(t);
    let outb = ctx.bind_out(&mut kb);
    let ab = ctx.bind_in_as(&mut kb, 0, a_vec);
    let bb = ctx.bind_in_as(&mut kb, 1, b_vec);
    let Tile { bm, bn, bk, tm, tn } = tile;
    let threads = tile.threads();
    let (cols, rows) = (bn / tn, bm / tm);
    let mut offs = coords(&Wgsl, "bz", "bc", ob, "i32");
    offs += &batch_offset("a_off", a, ob, if fold { 0 } else { m0 * k });
    offs += &batch_offset("b_off", b, ob, k * n);
    let (km, mm, nm) = (k.max(1) - 1, m - 1, n - 1);
    // Staging: each K slice is fetched from global memory into registers (`pa*`, `pb*`)
    // while the previous slice is multiplied, then put into workgroup memory: A transposed
    // (k-major rows of `bm`), B as is (k-major rows of `bn`).
    let mut fetch = String::new();
    let mut put = String::new();
    let mut regs = String::new();
    if a_vec {
        let per = bm * bk / 4;
        for r in 0..per.div_ceil(threads) {
            regs += &format!("var pa{r}: vec4<f32>;\n");
            let at = format!(
                "let e = lid + {off};\nlet row = e / {bk4};\nlet c4 = e % {bk4};\n",
                off = r * threads,
                bk4 = bk / 4
            );
            fetch += &format!(
                "{{\n{at}let gm = m0 + row;\nlet gk = kn + c4 * 4;\n\
                 pa{r} = select(vec4<f32>(0.0), vec4<f32>({ab}[(a_off + min(gm, {mm}) * {k} + min(gk, {k4})) >> 2u]), e < {per} && gm < {m} && gk < {k});\n}}\n",
                k4 = k.saturating_sub(4),
            );
            put += &format!(
                "{{\n{at}if (e < {per}) {{\nlet ai = c4 * {bm} + (row >> 2u);\nlet ac = row & 3;\n\
                 As[ai][ac] = pa{r}.x;\nAs[ai + {q1}][ac] = pa{r}.y;\nAs[ai + {q2}][ac] = pa{r}.z;\nAs[ai + {q3}][ac] = pa{r}.w;\n}}\n}}\n",
                q1 = bm / 4,
                q2 = bm / 2,
                q3 = 3 * bm / 4,
            );
        }
    } else {
        let per = bm * bk;
        let aload = kb.load(
            *adt,
            &ab,
            &format!("(a_off + min(gm, {mm}) * {k} + min(gk, {km}))"),
        );
        for r in 0..per.div_ceil(threads) {
            regs += &format!("var pa{r}: f32;\n");
            let at = format!(
                "let e = lid + {off};\nlet row = e / {bk};\nlet col = e % {bk};\n",
                off = r * threads
            );
            fetch += &format!(
                "{{\n{at}let gm = m0 + row;\nlet gk = kn + col;\n\
                 pa{r} = select(0.0, {aload}, e < {per} && gm < {m} && gk < {k});\n}}\n"
            );
            put += &format!(
                "{{\n{at}if (e < {per}) {{ let s = col * {bm} + row; As[s >> 2u][s & 3] = pa{r}; }}\n}}\n"
            );
        }
    }
    if b_vec {
        let per = bk * bn / 4;
        for r in 0..per.div_ceil(threads) {
            regs += &format!("var pb{r}: vec4<f32>;\n");
            let at = format!(
                "let e = lid + {off};\nlet row = e / {bn4};\nlet c4 = e % {bn4};\n",
                off = r * threads,
                bn4 = bn / 4
            );
            fetch += &format!(
                "{{\n{at}let gk = kn + row;\nlet gn = n0 + c4 * 4;\n\
                 pb{r} = select(vec4<f32>(0.0), vec4<f32>({bb}[(b_off + min(gk, {km}) * {n} + min(gn, {n4})) >> 2u]), e < {per} && gk < {k} && gn < {n});\n}}\n",
                n4 = n.saturating_sub(4),
            );
            put += &format!(
                "{{ let e = lid + {off}; if (e < {per}) {{ Bs[e] = pb{r}; }} }}\n",
                off = r * threads
            );
        }
    } else {
        let per = bk * bn;
        let bload = kb.load(
            *bdt,
            &bb,
            &format!("(b_off + min(gk, {km}) * {n} + min(gn, {nm}))"),
        );
        for r in 0..per.div_ceil(threads) {
            regs += &format!("var pb{r}: f32;\n");
            fetch += &format!(
                "{{\nlet e = lid + {off};\nlet row = e / {bn};\nlet col = e % {bn};\n\
                 let gk = kn + row;\nlet gn = n0 + col;\n\
                 pb{r} = select(0.0, {bload}, e < {per} && gk < {k} && gn < {n});\n}}\n",
                off = r * threads
            );
            put += &format!(
                "{{ let e = lid + {off}; if (e < {per}) {{ Bs[e >> 2u][e & 3] = pb{r}; }} }}\n",
                off = r * threads
            );
        }
    }
    let mut decl = String::new();
    for i in 0..tm {
        for j in 0..tn {
            decl += &format!("var c{i}_{j}: f32 = 0.0;\n");
        }
    }
    // The K slice, unrolled: each invocation reads its rows and columns as vec4s.
    let mut inner = String::new();
    for kk in 0..bk {
        inner += "{\n";
        for c in 0..tm / 4 {
            inner += &format!("let a{c} = As[{}  + ty];\n", kk * bm / 4 + c * rows);
        }
        for c in 0..tn / 4 {
            inner += &format!("let b{c} = Bs[{} + tx];\n", kk * bn / 4 + c * cols);
        }
        for i in 0..tm {
            for j in 0..tn {
                inner += &format!(
                    "c{i}_{j} = fma(a{}.{}, b{}.{}, c{i}_{j});\n",
                    i / 4,
                    LANES[i % 4],
                    j / 4,
                    LANES[j % 4]
                );
            }
        }
        inner += "}\n";
    }
    let mut stores = String::new();
    for i in 0..tm {
        for j in 0..tn {
            let st = ctx.store(&mut kb, &outb, "lin", &format!("c{i}_{j}"))?;
            stores += &format!(
                "{{ let gm = m0 + {}; let gn = n0 + {}; if (gm < {m} && gn < {n}) {{ let lin = c_off + gm * {n} + gn;\n{st}}} }}\n",
                tile.row(i),
                tile.col(j),
            );
        }
    }
    // The first slice (none when K is 0: the operands may then be empty).
    let first = if k > 0 {
        format!("{{\nlet kn = 0;\n{fetch}}}\n")
    } else {
        String::new()
    };
    let text = format!(
        "var<workgroup> As: array<vec4<f32>, {asz}>;\nvar<workgroup> Bs: array<vec4<f32>, {bsz}>;\n\
         @compute @workgroup_size({threads})\n\
         fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid_u: u32) {{\n\
         let lid = i32(lid_u);\nlet tx = lid % {cols};\nlet ty = lid / {cols};\n\
         let n0 = i32(wg.x) * {bn};\nlet m0 = i32(wg.y) * {bm};\nlet bz = i32(wg.z);\n\
         {offs}let c_off = bz * {mn};\n{decl}{regs}\
         {first}\
         for (var k0: i32 = 0; k0 < {k}; k0 += {bk}) {{\n\
         {put}\
         workgroupBarrier();\n\
         let kn = k0 + {bk};\n\
         if (kn < {k}) {{\n{fetch}}}\n\
         {inner}\
         workgroupBarrier();\n}}\n{stores}}}\n",
        asz = bm * bk / 4,
        bsz = bk * bn / 4,
        mn = m * n,
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
    let mut kb = Kb::new(ctx.target);
    let outb = ctx.bind_out(&mut kb);
    let ab = ctx.bind_in(&mut kb, 0);
    let bb = ctx.bind_in(&mut kb, 1);
    let mut offs = coords(&Wgsl, "bz", "bc", ob, "i32");
    offs += &batch_offset("a_off", a, ob, if fold { 0 } else { m0 * k });
    offs += &batch_offset("b_off", b, ob, k * n);
    let st = ctx.store(&mut kb, &outb, "idx", "acc")?;
    let groups = super::groups_for(total, super::WG, ctx.target);
    let av = kb.load(*adt, &ab, &format!("(a_off + gm * {k} + kk)"));
    let bv = kb.load(*bdt, &bb, &format!("(b_off + kk * {n} + gn)"));
    let text = format!(
        "{}{}let gn = idx % {n};\nlet gm = (idx / {n}) % {m};\nlet bz = idx / {mn};\n{offs}\
         var acc: f32 = 0.0;\n\
         for (var kk: i32 = 0; kk < {k}; kk += 1) {{ acc = fma({av}, {bv}, acc); }}\n{st}}}\n}}\n",
        super::main_sig(super::WG),
        super::grid_loop("idx", total, groups, super::WG, "lid"),
        mn = m * n,
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_tiles_only_when_they_fill_the_device() {
        assert_eq!(Tile::pick(4096, 4096, 1).bm, 128);
        assert_eq!(Tile::pick(4096, 384, 1).bm, 64);
        assert_eq!(Tile::pick(128, 132, 128).bm, 128);
        assert_eq!(Tile::pick(100, 4096, 64).bm, 64);
        for t in [Tile::pick(4096, 4096, 1), Tile::pick(64, 64, 1)] {
            assert_eq!(t.threads(), 256);
            assert_eq!(t.tm % 4 + t.tn % 4 + t.bk % 4, 0);
        }
        let native = Target {
            shader_f16: true,
            ..Target::webgpu_defaults()
        };
        assert!(vec4_dtype(DType::F16, &native));
        assert!(!vec4_dtype(DType::F16, &Target::webgpu_defaults()));
        assert!(vec4_dtype(DType::F32, &Target::webgpu_defaults()));
    }
}
