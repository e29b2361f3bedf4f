//! Quantized matmul (`Op::QuantMatMul`): `y[m, n] = x[m, :] · dequantize(w[n, :])`.
//!
//! Weights stay packed; nothing dequantizes the whole matrix. Few activation rows (decode)
//! take a *dot* path, one output row of `w` at a time:
//! - the integer path ([`dot_i8`], the default for every block format: Q4_0, Q4_1, Q5_0,
//!   Q5_1, Q8_0 and the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): the activation rows are
//!   quantized once per product to 8-bit blocks ([`q8_act`]) and every weight block is
//!   dotted with them in integers, as llama.cpp does, unpacked once for up to four of them;
//! - the exact path ([`dot_f32`]; the plain float formats, and all of them when
//!   [`crate::CpuOptions::exact_quant`] is set): the weight row is dequantized in registers
//!   and dotted with the f32 activations.
//!
//! Many rows (prefill) take the *tile* path: a tile of `w`'s rows is dequantized into a
//! small f32 buffer (one per task) and multiplied with gemm. All split the output features
//! over the pool ([`super::pool`]).

mod dot_f32;
mod dot_i8;
mod q8_act;

use super::memory::OutPtr;
use crate::fast::pool;
use q8_act::{Q8Rows, QK};
use rlx_ir::QuantFormat;
use std::ops::Range;

/// Activation rows up to which the dot path is used: a batched decode step of up to this
/// many sequences computes every row as a single-row step does (same rounding).
const DOT_MAX_ROWS: usize = 16;
/// Rows of `w` per parallel task on the dot path.
const DOT_CHUNK: usize = 32;
/// Rows of `w` dequantized per tile on the tile path.
const TILE: usize = 64;

/// A compiled quantized matmul.
#[derive(Debug, Clone)]
pub(crate) struct QuantPlan {
    format: QuantFormat,
    /// activation rows
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    /// dot with the f32 activations even where the integer path applies
    exact: bool,
}

impl QuantPlan {
    /// A plan for `x` of `x_numel` f32 values (rows of `k`) against `n` packed rows;
    /// `exact` keeps the f32 dot path for every format.
    pub fn new(
        format: QuantFormat,
        n: usize,
        k: usize,
        x_numel: usize,
        threads: usize,
        exact: bool,
    ) -> Self {
        QuantPlan {
            format,
            m: x_numel / k.max(1),
            n,
            k,
            threads,
            exact,
        }
    }

    /// Runs the product; `w` is the packed weight, `y` the `[m, n]` output.
    pub fn run(&self, x: &[f32], w: &[u8], y: &mut [f32]) {
        let row_bytes = self.k / self.format.block() * self.format.block_bytes();
        debug_assert_eq!(w.len(), row_bytes * self.n);
        debug_assert_eq!(x.len(), self.m * self.k);
        debug_assert_eq!(y.len(), self.m * self.n);
        if self.m == 0 || self.n == 0 {
            return;
        }
        let integer = !self.exact && dot_i8::supports(self.format) && self.k.is_multiple_of(QK);
        if self.m > DOT_MAX_ROWS {
            self.run_tiles(x, w, y, row_bytes);
        } else if integer {
            self.run_dot_i8(x, w, y, row_bytes);
        } else {
            self.run_dot_f32(x, w, y, row_bytes);
        }
    }

    /// Runs `rows(js, out)` over the output features in chunks of `DOT_CHUNK` across the
    /// pool; `rows` writes columns `js` of every activation row.
    fn for_each_chunk(&self, rows: impl Fn(Range<usize>, OutPtr) + Sync, y: &mut [f32]) {
        let out = OutPtr(y.as_mut_ptr());
        let task = |c: usize| rows(c * DOT_CHUNK..((c + 1) * DOT_CHUNK).min(self.n), out);
        let chunks = self.n.div_ceil(DOT_CHUNK);
        if self.threads > 1 {
            pool::for_each(chunks, task);
        } else {
            (0..chunks).for_each(task);
        }
    }

    fn run_dot_i8(&self, x: &[f32], w: &[u8], y: &mut [f32], row_bytes: usize) {
        let (m, n, format) = (self.m, self.n, self.format);
        let act = Q8Rows::quantize(x, self.k);
        let acts: Vec<_> = (0..m).map(|i| act.row(i)).collect();
        let rows = |js: Range<usize>, out: OutPtr| {
            let wr = &w[js.start * row_bytes..js.end * row_bytes];
            let mut outs: [&mut [f32]; DOT_MAX_ROWS] = Default::default();
            for (i, o) in outs[..m].iter_mut().enumerate() {
                // SAFETY: columns `js` of row i lie inside `y` (`js.end <= n`, `i < m`) and
                // are written by this task alone; the rows' slices are disjoint.
                *o = unsafe {
                    std::slice::from_raw_parts_mut(out.ptr().add(i * n + js.start), js.len())
                };
            }
            dot_i8::dot_rows(format, wr, row_bytes, &acts, &mut outs[..m]);
        };
        self.for_each_chunk(rows, y);
    }

    fn run_dot_f32(&self, x: &[f32], w: &[u8], y: &mut [f32], row_bytes: usize) {
        let (m, n, k, format) = (self.m, self.n, self.k, self.format);
        // Sum of x over each 32-value block: the Q4 formats' offset term is `off * sum`.
        let nb = k / 32;
        let sums: Vec<f32> = match format {
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                x.chunks_exact(32).map(|c| c.iter().sum::<f32>()).collect()
            }
            _ => Vec::new(),
        };
        let rows = |js: Range<usize>, out: OutPtr| {
            let mut scratch = [0f32; 256];
            for j in js {
                let wr = &w[j * row_bytes..(j + 1) * row_bytes];
                for i in 0..m {
                    let xs = sums.get(i * nb..(i + 1) * nb).unwrap_or(&[]);
                    let xi = &x[i * k..(i + 1) * k];
                    let v = dot_f32::dot_row(format, wr, xi, xs, &mut scratch);
                    // SAFETY: element (i, j) is written by the one task owning row j.
                    unsafe { *out.ptr().add(i * n + j) = v };
                }
            }
        };
        self.for_each_chunk(rows, y);
    }

    fn run_tiles(&self, x: &[f32], w: &[u8], y: &mut [f32], row_bytes: usize) {
        let (m, n, k, format) = (self.m, self.n, self.k, self.format);
        let out = OutPtr(y.as_mut_ptr());
        let task = |t: usize| {
            let j0 = t * TILE;
            let tn = TILE.min(n - j0);
            let mut buf = vec![0f32; tn * k];
            format.dequantize(&w[j0 * row_bytes..(j0 + tn) * row_bytes], &mut buf);
            // c[m x tn] at out + j0 (row stride n) = x[m x k] . buf^T[k x tn]
            // SAFETY: `x` and `buf` hold m*k and tn*k values read with the strides given;
            // the task owns output columns j0..j0+tn of every row, disjoint from the others.
            unsafe {
                gemm::gemm(
                    m,
                    tn,
                    k,
                    out.ptr().add(j0),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    buf.as_ptr(),
                    k as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        };
        let tiles = n.div_ceil(TILE);
        if self.threads > 1 {
            pool::for_each(tiles, task);
        } else {
            (0..tiles).for_each(task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::SplitMix64;

    fn random_blocks(format: QuantFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut rng = SplitMix64(seed);
        let bytes = format.bytes_for(n * k).unwrap();
        let mut w: Vec<u8> = (0..bytes).map(|_| (rng.next_u64() >> 13) as u8).collect();
        // keep the f16 scales small and finite
        let bb = format.block_bytes();
        let scale_at = format.f16_fields();
        for blk in w.chunks_exact_mut(bb) {
            for &s in scale_at {
                let v = (rng.next_u64() % 1000) as f32 / 1000.0 - 0.5;
                blk[s..s + 2].copy_from_slice(&half::f16::from_f32(v * 0.1).to_le_bytes());
            }
            if bb <= 4 {
                let v = (rng.next_u64() % 1000) as f32 / 1000.0 - 0.5;
                let b = match format {
                    QuantFormat::F32 => v.to_le_bytes().to_vec(),
                    QuantFormat::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                    _ => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                };
                blk.copy_from_slice(&b);
            }
        }
        w
    }

    #[test]
    fn interpreter_agrees_with_fast_path() {
        use rlx_ir::{Op, Tensor, TensorData};
        let (format, n, k, m) = (QuantFormat::Q4K, 5, 256, 2);
        let w = random_blocks(format, n, k, 11);
        let x = Tensor::random(rlx_ir::DType::F32, &[m, k], 3);
        let wt = Tensor::new(vec![w.len()], TensorData::U8(w.clone().into())).unwrap();
        let op = Op::QuantMatMul {
            format,
            n,
            k,
            int8_activations: true,
        };
        let got = rlx_interp::eval_op(&op, &[&x, &wt]).unwrap();
        assert_eq!(got.shape(), &[m, n]);
        let mut y = vec![0f32; m * n];
        QuantPlan::new(format, n, k, m * k, 1, true).run(x.as_f32().unwrap(), &w, &mut y);
        for (a, b) in got.as_f32().unwrap().iter().zip(&y) {
            assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{a} vs {b}");
        }
        // a wrong byte count is a clear error, not a panic
        let short = Tensor::new(vec![10], TensorData::U8(vec![0; 10].into())).unwrap();
        assert!(rlx_interp::eval_op(&op, &[&x, &short]).is_err());
    }

    #[test]
    fn matches_dequantize_then_matmul() {
        // plain float rows also at lengths that leave vector tails
        let plain = [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16];
        let cases = QuantFormat::ALL
            .iter()
            .map(|&f| (f, 512))
            .chain(plain.iter().flat_map(|&f| [(f, 100), (f, 37)]));
        for (format, k) in cases {
            for m in [1, 3, 7] {
                let n = 70;
                let w = random_blocks(format, n, k, 7 + m as u64);
                let mut rng = SplitMix64(m as u64);
                let x: Vec<f32> = (0..m * k)
                    .map(|_| (rng.next_u64() % 2000) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut wf = vec![0f32; n * k];
                format.dequantize(&w, &mut wf);
                let mut want = vec![0f64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k)
                            .map(|l| x[i * k + l] as f64 * wf[j * k + l] as f64)
                            .sum();
                    }
                }
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; m * n];
                    QuantPlan::new(format, n, k, m * k, threads, true).run(&x, &w, &mut y);
                    let num: f64 = y
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (*a as f64 - b).powi(2))
                        .sum();
                    let den: f64 = want.iter().map(|b| b * b).sum();
                    let rel = (num / den).sqrt();
                    assert!(rel < 1e-5, "{format} m={m} threads={threads}: rel {rel}");
                }
            }
        }
    }

    /// The formats the integer path covers.
    const INTEGER: [QuantFormat; 10] = [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q8_0,
        QuantFormat::Q2K,
        QuantFormat::Q3K,
        QuantFormat::Q4K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
    ];

    #[test]
    fn integer_formats_are_those_dot_i8_supports() {
        for f in QuantFormat::ALL {
            assert_eq!(dot_i8::supports(f), INTEGER.contains(&f), "{f}");
        }
    }

    /// Activation rows with blocks of very different magnitudes and an outlier now and then.
    fn activations(m: usize, k: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64(seed);
        let mut x = vec![0f32; m * k];
        for (b, blk) in x.chunks_mut(32).enumerate() {
            let scale = [0.01f32, 0.3, 1.0, 7.0][(b + seed as usize) % 4];
            for v in blk.iter_mut() {
                *v = ((rng.next_u64() % 20001) as f32 / 10000.0 - 1.0) * scale;
            }
            if rng.next_u64().is_multiple_of(5) {
                blk[(rng.next_u64() % 32) as usize] = 40.0 * scale;
            }
        }
        x
    }

    /// The exact dot of `x` with the dequantized row `wf` (f64), and the most the integer
    /// path may differ from it: activation value `v` in a block of scale `d` becomes `d * q`
    /// with `|v - d * q| <= d / 2`, so the dot moves by at most `sum_b d_b / 2 * sum |w|`
    /// over the block; the rest is f32 rounding of products and sums, bounded loosely by
    /// `1e-5 * sum |w * x|`.
    /// Also returns `sum |w * x|`, the scale of the f32 path's rounding.
    fn exact_and_bound(wf: &[f32], x: &[f32]) -> (f64, f64, f64) {
        let mut exact = 0f64;
        let mut bound = 0f64;
        let mut mag = 0f64;
        for (wb, xb) in wf.chunks(32).zip(x.chunks(32)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
            let d = amax / 127.0;
            let wabs: f64 = wb.iter().map(|v| v.abs() as f64).sum();
            bound += d / 2.0 * wabs * (1.0 + 1e-5);
            for (&w, &v) in wb.iter().zip(xb) {
                exact += w as f64 * v as f64;
                mag += (w as f64 * v as f64).abs();
            }
        }
        (exact, bound + 1e-5 * mag + 1e-30, mag)
    }

    #[test]
    fn integer_kernels_agree_with_the_f32_dot_within_the_rounding_bound() {
        for format in INTEGER {
            let ks: &[usize] = if format.block() == 256 {
                &[256, 512, 1536, 2816]
            } else {
                &[32, 64, 96, 160, 576, 1536, 4160]
            };
            for &k in ks {
                let n = 9;
                let w = random_blocks(format, n, k, k as u64 * 3 + 1);
                let mut wf = vec![0f32; n * k];
                format.dequantize(&w, &mut wf);
                let x = activations(1, k, k as u64);
                let act = Q8Rows::quantize(&x, k);
                let row_bytes = k / format.block() * format.block_bytes();
                let all = dot_i8::each_isa(format, &w, row_bytes, act.row(0));
                let scalar = &all[0].1;
                for (isa, got) in &all {
                    for j in 0..n {
                        let (exact, bound, _) = exact_and_bound(&wf[j * k..(j + 1) * k], &x);
                        let (got, scalar) = (got[j] as f64, scalar[j] as f64);
                        let err = (got - exact).abs();
                        assert!(
                            err <= bound,
                            "{format} k={k} row {j} {isa}: {got} vs {exact} (bound {bound})"
                        );
                        // the kernels sum the same integers; only f32 rounding differs
                        let tol = 1e-5 * bound.max(scalar.abs());
                        assert!(
                            (got - scalar).abs() <= tol,
                            "{format} k={k} row {j} {isa}: {got} vs scalar {scalar}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn integer_path_is_the_default_and_exact_keeps_f32() {
        for format in INTEGER {
            let shapes: &[(usize, usize)] = if format.block() == 256 {
                &[(1, 512), (3, 256), (4, 1536), (2, 768)]
            } else {
                &[(1, 576), (3, 96), (4, 1536), (2, 32)]
            };
            for &(m, k) in shapes {
                let n = 77;
                let w = random_blocks(format, n, k, 17 + m as u64);
                let mut wf = vec![0f32; n * k];
                format.dequantize(&w, &mut wf);
                let x = activations(m, k, 5 + k as u64);
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; m * n];
                    QuantPlan::new(format, n, k, m * k, threads, false).run(&x, &w, &mut y);
                    let mut y_exact = vec![f32::NAN; m * n];
                    QuantPlan::new(format, n, k, m * k, threads, true).run(&x, &w, &mut y_exact);
                    let mut moved = 0;
                    for i in 0..m {
                        for j in 0..n {
                            let xi = &x[i * k..(i + 1) * k];
                            let (exact, bound, mag) = exact_and_bound(&wf[j * k..(j + 1) * k], xi);
                            let (got, f32_path) = (y[i * n + j] as f64, y_exact[i * n + j] as f64);
                            assert!(
                                (got - exact).abs() <= bound,
                                "{format} {m}x{k}: {got} vs {exact}"
                            );
                            let tight = 1e-5 * mag + 1e-30;
                            assert!((f32_path - exact).abs() <= tight, "{format} exact path");
                            moved += usize::from(got != f32_path);
                        }
                    }
                    // the default really is the integer path: activation rounding shows
                    assert!(moved > 0, "{format} {m}x{k}: integer path not taken");
                }
            }
        }
    }

    #[test]
    fn rows_dotted_together_compute_bit_for_bit_as_each_alone() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // several blocks, and for the 32-value formats more than the kernels' tile of 16
        // blocks; n leaves a remainder of weight rows past the groups of four
        let cases = INTEGER.iter().flat_map(|&f| {
            let ks: &[usize] = if f.block() == 256 {
                &[768]
            } else {
                &[160, 1056]
            };
            ks.iter().map(move |&k| (f, k))
        });
        for (format, k) in cases {
            let n = 11;
            let w = random_blocks(format, n, k, 23);
            let row_bytes = k / format.block() * format.block_bytes();
            for m in 1..=DOT_MAX_ROWS {
                let x = activations(m, k, 40 + m as u64);
                let act = Q8Rows::quantize(&x, k);
                let acts: Vec<_> = (0..m).map(|i| act.row(i)).collect();
                // each kernel: the m rows together against each row alone
                let together = dot_i8::each_isa_rows(format, &w, row_bytes, &acts);
                for (i, &a) in acts.iter().enumerate() {
                    let alone = dot_i8::each_isa(format, &w, row_bytes, a);
                    for ((isa, got), (_, want)) in together.iter().zip(&alone) {
                        let at = format!("{format} k={k} m={m} row {i} {isa}");
                        assert_eq!(bits(&got[i]), bits(want), "{at}");
                    }
                }
                // the whole product, split over the pool, against one row at a time
                let mut y = vec![f32::NAN; m * n];
                QuantPlan::new(format, n, k, m * k, 2, false).run(&x, &w, &mut y);
                for (i, (xi, yi)) in x.chunks(k).zip(y.chunks(n)).enumerate() {
                    let mut alone = vec![f32::NAN; n];
                    QuantPlan::new(format, n, k, k, 1, false).run(xi, &w, &mut alone);
                    let at = format!("{format} k={k} m={m} row {i}: product");
                    assert_eq!(bits(yi), bits(&alone), "{at}");
                }
            }
        }
    }
}
