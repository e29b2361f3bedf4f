//! `MatMulNBits`: `A · dequantize(B)ᵀ (+ bias)` with B in blocks of `block_size` 4- or 8-bit
//! values along K, one scale (and zero point) per block. Where the blocks are GGML's
//! (4 bits, zero point 8, or 8 bits, zero point 128; blocks a multiple of 32; scales exact
//! in f16) the weight is repacked into Q4_0 / Q8_0 and stays packed as the IR's
//! `quant_matmul`; any other weight (ONNX Runtime's quantizer writes f32 scales and zero
//! points) is dequantized once at import into an f32 weight and multiplied by `MatMul`.

use super::activation::float_input;
use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use half::f16;
use rlx_ir::{DType, Op, QuantFormat, Tensor};
use std::sync::Arc;

/// B's blocks as read from the node's constant inputs.
struct Blocks {
    n: usize,
    k: usize,
    bits: usize,
    block: usize,
    n_blocks: usize,
    /// `[N, n_blocks, block * bits / 8]` packed values
    data: Vec<u8>,
    /// one per (row, block)
    scales: Vec<f32>,
    /// one per (row, block), as a float (the unpacked integer or the float zero point)
    zeros: Vec<f32>,
}

impl Blocks {
    /// The quantized integer of element `kk` of row `row`.
    fn q(&self, row: usize, kk: usize) -> u8 {
        let blob = self.block * self.bits / 8;
        let (b, e) = (kk / self.block, kk % self.block);
        let base = (row * self.n_blocks + b) * blob;
        if self.bits == 8 {
            self.data[base + e]
        } else {
            (self.data[base + e / 2] >> (4 * (e % 2))) & 0xF
        }
    }

    fn value(&self, row: usize, kk: usize) -> f32 {
        let sb = row * self.n_blocks + kk / self.block;
        (f32::from(self.q(row, kk)) - self.zeros[sb]) * self.scales[sb]
    }

    /// The GGML format the blocks already are, if any.
    fn ggml(&self) -> Option<QuantFormat> {
        let mid = (1u32 << (self.bits - 1)) as f32;
        let exact = self.scales.iter().all(|&s| f16::from_f32(s).to_f32() == s);
        let fits = self.block.is_multiple_of(32) && self.k == self.n_blocks * self.block;
        if !(exact && fits && self.zeros.iter().all(|&z| z == mid)) {
            return None;
        }
        match self.bits {
            4 => Some(QuantFormat::Q4_0),
            8 => Some(QuantFormat::Q8_0),
            _ => None,
        }
    }

    /// Repacked into `format`'s blocks of 32, row after row.
    fn repack(&self, format: QuantFormat) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.n * self.k / 32 * format.block_bytes());
        for row in 0..self.n {
            for sub in 0..self.k / 32 {
                let k0 = sub * 32;
                let d = f16::from_f32(self.scales[row * self.n_blocks + k0 / self.block]);
                out.extend_from_slice(&d.to_le_bytes());
                if format == QuantFormat::Q4_0 {
                    for j in 0..16 {
                        out.push(self.q(row, k0 + j) | (self.q(row, k0 + j + 16) << 4));
                    }
                } else {
                    for j in 0..32 {
                        out.push(self.q(row, k0 + j).wrapping_sub(128));
                    }
                }
            }
        }
        out
    }

    /// The dequantized weight, transposed to `[K, N]`.
    fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.k * self.n];
        for row in 0..self.n {
            for kk in 0..self.k {
                w[kk * self.n + row] = self.value(row, kk);
            }
        }
        w
    }
}

/// Reads B, scales and zero points (all constants) into [`Blocks`].
fn read_blocks(ctx: &mut Ctx, n: &NodeIn) -> R<Blocks> {
    let attr = |name: &str| -> R<usize> {
        match n.int_opt(name)? {
            Some(v) if v > 0 => Ok(v as usize),
            other => invalid!("attribute {name} must be given and positive, got {other:?}"),
        }
    };
    let (k, nn, block) = (attr("K")?, attr("N")?, attr("block_size")?);
    let bits = n.int("bits", 4)? as usize;
    if bits != 4 && bits != 8 {
        unsupported!("bits = {bits} (4 and 8 are supported)");
    }
    if block < 16 || !block.is_power_of_two() {
        invalid!("block_size {block} must be a power of two >= 16");
    }
    let n_blocks = k.div_ceil(block);
    let blob = block * bits / 8;
    let b = ctx.const_of(&n.input(1)?, "the packed weight B")?;
    if b.dtype() != DType::U8 || b.numel() != nn * n_blocks * blob {
        invalid!(
            "B must be u8 [N, K/block, block*bits/8] = [{nn}, {n_blocks}, {blob}], got {} {:?}",
            b.dtype(),
            b.shape()
        );
    }
    let scales = ctx.const_of(&n.input(2)?, "the scales")?;
    if scales.numel() != nn * n_blocks {
        invalid!("scales must hold N * K/block = {} values", nn * n_blocks);
    }
    let scales: Vec<f32> = scales.to_f64_vec().into_iter().map(|s| s as f32).collect();
    let mid = (1u32 << (bits - 1)) as f32;
    let zeros = match n.opt(3) {
        None => vec![mid; nn * n_blocks],
        Some(z) => {
            let z = ctx.const_of(&z, "the zero points")?;
            if z.dtype() == DType::U8 {
                let per_row = (n_blocks * bits).div_ceil(8);
                if z.numel() != nn * per_row {
                    invalid!("packed zero points must hold N * {per_row} bytes");
                }
                let bytes = z.to_f64_vec();
                (0..nn * n_blocks)
                    .map(|i| {
                        let (row, blk) = (i / n_blocks, i % n_blocks);
                        if bits == 8 {
                            bytes[row * per_row + blk] as f32
                        } else {
                            let byte = bytes[row * per_row + blk / 2] as u8;
                            f32::from((byte >> (4 * (blk % 2))) & 0xF)
                        }
                    })
                    .collect()
            } else if z.numel() == nn * n_blocks {
                z.to_f64_vec().into_iter().map(|v| v as f32).collect()
            } else {
                invalid!("float zero points must hold N * K/block values");
            }
        }
    };
    Ok(Blocks {
        n: nn,
        k,
        bits,
        block,
        n_blocks,
        data: b.data().as_bytes().to_vec(),
        scales,
        zeros,
    })
}

/// `MatMulNBits`: inputs A, B, scales, zero_points?, g_idx?, bias?.
pub fn matmul_nbits(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let a = float_input(ctx, n, 0)?;
    // 4 lets the product round A to 8 bits (ONNX Runtime then does); below, A stays f32
    let int8_activations = n.int("accuracy_level", 0)? >= 4;
    if n.opt(4).is_some() {
        unsupported!("input 4 (g_idx, act-order group indices)");
    }
    let blocks = read_blocks(ctx, n)?;
    ctx.host_alloc(blocks.k.checked_mul(blocks.n), "the dequantized weight")?;
    if ctx.shape(&a)?.last() != Some(&blocks.k) {
        invalid!("A's last dim must be K = {}", blocks.k);
    }
    let base = match n.input(1)? {
        Val::Const { param: Some(p), .. } => p,
        _ => n.name.clone(),
    };
    let dt = ctx.dtype(&a);
    let mut y = match blocks.ggml() {
        Some(format) if dt == DType::F32 => {
            let packed = blocks.repack(format);
            let len = packed.len();
            let w = Tensor::new(
                vec![len],
                rlx_ir::TensorData::from_le_bytes(DType::U8, &packed).expect("u8 bytes"),
            )
            .map_err(|e| crate::ctx::Fail::Invalid(e.to_string()))?;
            let w = Val::Const {
                t: Arc::new(w),
                param: Some(format!("{base}.{}", format.name())),
            };
            let (nn, k) = (blocks.n, blocks.k);
            let op = Op::QuantMatMul {
                format,
                n: nn,
                k,
                int8_activations,
            };
            ctx.op(op, &[&a, &w])?
        }
        _ => {
            let w = Tensor::from_f32(&[blocks.k, blocks.n], blocks.dequantize())
                .map_err(|e| crate::ctx::Fail::Invalid(e.to_string()))?;
            let w = Val::Const {
                t: Arc::new(w.cast(dt)),
                param: Some(format!("{base}.dequantized")),
            };
            crate::ops::linalg::matmul_np(ctx, &a, &w)?
        }
    };
    if let Some(b) = n.opt(5) {
        y = ctx.add(&y, &b)?;
    }
    Ok(vec![y])
}
