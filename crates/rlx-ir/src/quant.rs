//! Block-quantized weight formats (the GGML/GGUF block layouts) and their reference
//! dequantization. [`crate::Op::QuantMatMul`] takes weights packed in one of these formats
//! as a `u8` tensor; this module defines what those bytes mean, once, for every backend,
//! the validation interpreter and the GGUF reader.
//!
//! A weight of `n` rows by `k` columns is stored row after row; each row is `k / block`
//! blocks of `block_bytes` bytes. Every format dequantizes one block at a time into
//! `block` f32 values ([`QuantFormat::dequantize_block`]).

use half::{bf16, f16};
use std::fmt;

/// A block-quantized storage format (GGML names and layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuantFormat {
    /// plain f32 (block of 1, 4 bytes)
    F32,
    /// IEEE half (block of 1, 2 bytes)
    F16,
    /// bfloat16 (block of 1, 2 bytes)
    BF16,
    /// 32 values: f16 scale `d`, 32 i8: `x = d * q`
    Q8_0,
    /// 32 values: f16 scale `d`, 16 bytes of nibbles: `x = d * (q - 8)`
    Q4_0,
    /// 32 values: f16 scale `d`, f16 min `m`, 16 bytes of nibbles: `x = d * q + m`
    Q4_1,
    /// 256 values in 8 sub-blocks of 32 with 6-bit scales and mins (k-quant)
    Q4K,
    /// 256 values, 5 bits each (a nibble plus a high bit), 6-bit scales and mins
    Q5K,
    /// 256 values, 6 bits each, 16 sub-blocks with i8 scales
    Q6K,
    /// 32 values: f16 scale `d`, 4 bytes of high bits, 16 bytes of nibbles: `x = d * (q - 16)`
    Q5_0,
    /// 32 values: f16 scale `d`, f16 min `m`, high bits, nibbles: `x = d * q + m`
    Q5_1,
    /// 256 values, 2 bits each, 16 sub-blocks with 4-bit scales and mins (k-quant)
    Q2K,
    /// 256 values, 3 bits each (2 low bits plus a high-bit mask), 16 6-bit scales
    Q3K,
}

impl QuantFormat {
    /// Every format.
    pub const ALL: [QuantFormat; 13] = [
        QuantFormat::F32,
        QuantFormat::F16,
        QuantFormat::BF16,
        QuantFormat::Q8_0,
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q4K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q2K,
        QuantFormat::Q3K,
    ];

    /// The GGML name (`q4_1`, `q4_k`, ...).
    pub fn name(self) -> &'static str {
        match self {
            QuantFormat::F32 => "f32",
            QuantFormat::F16 => "f16",
            QuantFormat::BF16 => "bf16",
            QuantFormat::Q8_0 => "q8_0",
            QuantFormat::Q4_0 => "q4_0",
            QuantFormat::Q4_1 => "q4_1",
            QuantFormat::Q4K => "q4_k",
            QuantFormat::Q5K => "q5_k",
            QuantFormat::Q6K => "q6_k",
            QuantFormat::Q5_0 => "q5_0",
            QuantFormat::Q5_1 => "q5_1",
            QuantFormat::Q2K => "q2_k",
            QuantFormat::Q3K => "q3_k",
        }
    }

    /// Values per block.
    pub fn block(self) -> usize {
        match self {
            QuantFormat::F32 | QuantFormat::F16 | QuantFormat::BF16 => 1,
            QuantFormat::Q8_0
            | QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1 => 32,
            QuantFormat::Q4K
            | QuantFormat::Q5K
            | QuantFormat::Q6K
            | QuantFormat::Q2K
            | QuantFormat::Q3K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::F32 => 4,
            QuantFormat::F16 | QuantFormat::BF16 => 2,
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_0 => 18,
            QuantFormat::Q4_1 => 20,
            QuantFormat::Q4K => 144,
            QuantFormat::Q5K => 176,
            QuantFormat::Q6K => 210,
            QuantFormat::Q5_0 => 22,
            QuantFormat::Q5_1 => 24,
            QuantFormat::Q2K => 84,
            QuantFormat::Q3K => 110,
        }
    }

    /// Byte offsets of a block's f16 fields (its scale, and min where it has one); empty for
    /// the plain float formats. Tests and benchmarks that fill blocks with random bytes
    /// overwrite these with small finite values.
    pub fn f16_fields(self) -> &'static [usize] {
        match self {
            QuantFormat::F32 | QuantFormat::F16 | QuantFormat::BF16 => &[],
            QuantFormat::Q8_0 | QuantFormat::Q4_0 | QuantFormat::Q5_0 => &[0],
            QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
            QuantFormat::Q6K => &[208],
            QuantFormat::Q2K => &[80, 82],
            QuantFormat::Q3K => &[108],
        }
    }

    /// Bytes of `numel` values, or `None` when `numel` is not a whole number of blocks.
    pub fn bytes_for(self, numel: usize) -> Option<usize> {
        if !numel.is_multiple_of(self.block()) {
            return None;
        }
        (numel / self.block()).checked_mul(self.block_bytes())
    }

    /// Dequantizes one block: `src` holds exactly [`Self::block_bytes`] bytes, `dst`
    /// exactly [`Self::block`] values.
    ///
    /// # Panics
    /// When the slice lengths are not those of one block (a caller bug).
    pub fn dequantize_block(self, src: &[u8], dst: &mut [f32]) {
        assert_eq!(src.len(), self.block_bytes(), "one {} block", self.name());
        assert_eq!(dst.len(), self.block(), "one {} block", self.name());
        let h = |i: usize| f16::from_le_bytes([src[i], src[i + 1]]).to_f32();
        match self {
            QuantFormat::F32 => dst[0] = f32::from_le_bytes([src[0], src[1], src[2], src[3]]),
            QuantFormat::F16 => dst[0] = h(0),
            QuantFormat::BF16 => dst[0] = bf16::from_le_bytes([src[0], src[1]]).to_f32(),
            QuantFormat::Q8_0 => {
                let d = h(0);
                for (y, &q) in dst.iter_mut().zip(&src[2..34]) {
                    *y = d * (q as i8) as f32;
                }
            }
            QuantFormat::Q4_0 => {
                let d = h(0);
                for (j, &q) in src[2..18].iter().enumerate() {
                    dst[j] = d * ((q & 0xF) as i32 - 8) as f32;
                    dst[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                }
            }
            QuantFormat::Q4_1 => {
                let (d, m) = (h(0), h(2));
                for (j, &q) in src[4..20].iter().enumerate() {
                    dst[j] = d * (q & 0xF) as f32 + m;
                    dst[j + 16] = d * (q >> 4) as f32 + m;
                }
            }
            QuantFormat::Q4K => {
                let (d, dmin) = (h(0), h(2));
                let scales = &src[4..16];
                let qs = &src[16..144];
                for j in 0..4 {
                    let (sc1, m1) = scale_min_k4(2 * j, scales);
                    let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
                    let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
                    let q = &qs[32 * j..32 * j + 32];
                    let y = &mut dst[64 * j..64 * j + 64];
                    for l in 0..32 {
                        y[l] = d1 * (q[l] & 0xF) as f32 - m1;
                        y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
                    }
                }
            }
            QuantFormat::Q5K => {
                let (d, dmin) = (h(0), h(2));
                let scales = &src[4..16];
                let qh = &src[16..48];
                let qs = &src[48..176];
                for j in 0..4 {
                    let (sc1, m1) = scale_min_k4(2 * j, scales);
                    let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
                    let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
                    let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
                    let q = &qs[32 * j..32 * j + 32];
                    let y = &mut dst[64 * j..64 * j + 64];
                    for l in 0..32 {
                        let hi1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                        let hi2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                        y[l] = d1 * ((q[l] & 0xF) + hi1) as f32 - m1;
                        y[l + 32] = d2 * ((q[l] >> 4) + hi2) as f32 - m2;
                    }
                }
            }
            QuantFormat::Q6K => {
                let ql = &src[0..128];
                let qh = &src[128..192];
                let sc = &src[192..208];
                let d = h(208);
                for n in 0..2 {
                    let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
                    let y = &mut dst[128 * n..128 * n + 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |i: usize| d * (sc[i] as i8) as f32;
                        y[l] = s(is) * q1 as f32;
                        y[l + 32] = s(is + 2) * q2 as f32;
                        y[l + 64] = s(is + 4) * q3 as f32;
                        y[l + 96] = s(is + 6) * q4 as f32;
                    }
                }
            }
            QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
                let q5_1 = self == QuantFormat::Q5_1;
                let (d, m) = if q5_1 {
                    (h(0), h(2))
                } else {
                    (h(0), -16.0 * h(0))
                };
                let at = if q5_1 { 4 } else { 2 };
                let qh = u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
                for (j, &q) in src[at + 4..at + 20].iter().enumerate() {
                    let lo = (q & 0xF) as u32 | ((qh >> j) & 1) << 4;
                    let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
                    dst[j] = d * lo as f32 + m;
                    dst[j + 16] = d * hi as f32 + m;
                }
            }
            QuantFormat::Q2K => {
                // scales[16] (low nibble scale, high nibble min), qs[64], d, dmin; value
                // i = 128 half + 32 j + l is bits 2j of qs[32 half + l], scale i / 16
                let (sc, qs, d, dmin) = (&src[0..16], &src[16..80], h(80), h(82));
                for (g, y) in dst.chunks_exact_mut(16).enumerate() {
                    let (half, j, l0) = (g / 8, (g % 8) / 2, 16 * (g % 2));
                    let (a, b) = (d * (sc[g] & 0xF) as f32, dmin * (sc[g] >> 4) as f32);
                    let q = &qs[32 * half + l0..32 * half + l0 + 16];
                    for (y, &q) in y.iter_mut().zip(q) {
                        *y = a * ((q >> (2 * j)) & 3) as f32 - b;
                    }
                }
            }
            QuantFormat::Q3K => {
                // hmask[32], qs[64], scales[12] (16 6-bit values), d; value i as Q2_K's,
                // minus 4 where bit i / 32 of hmask[l] is clear
                let (hm, qs, sc, d) = (&src[0..32], &src[32..96], &src[96..108], h(108));
                for (g, y) in dst.chunks_exact_mut(16).enumerate() {
                    let (half, j, l0) = (g / 8, (g % 8) / 2, 16 * (g % 2));
                    let a = d * q3k_scale(sc, g) as f32;
                    let bit = 1u8 << (g / 2);
                    let q = &qs[32 * half + l0..32 * half + l0 + 16];
                    let m = &hm[l0..l0 + 16];
                    for ((y, &q), &m) in y.iter_mut().zip(q).zip(m) {
                        let high = if m & bit != 0 { 0 } else { 4 };
                        *y = a * (((q >> (2 * j)) & 3) as i32 - high) as f32;
                    }
                }
            }
        }
    }

    /// Dequantizes whole blocks: `src.len()` must be a multiple of the block bytes and
    /// `dst.len()` the matching number of values.
    ///
    /// # Panics
    /// When the lengths do not match (a caller bug).
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) {
        let (b, bb) = (self.block(), self.block_bytes());
        assert_eq!(src.len() / bb * b, dst.len(), "dequantize lengths");
        assert!(src.len().is_multiple_of(bb), "dequantize: partial block");
        // One-value "blocks" (plain floats): a loop the compiler vectorizes, not a call each.
        match self {
            QuantFormat::F32 => {
                for (s, d) in src.chunks_exact(4).zip(dst.iter_mut()) {
                    *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                }
                return;
            }
            QuantFormat::BF16 => {
                for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
                    *d = f32::from_bits((u16::from_le_bytes([s[0], s[1]]) as u32) << 16);
                }
                return;
            }
            QuantFormat::F16 => {
                for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
                    *d = half::f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
                }
                return;
            }
            _ => {}
        }
        for (s, d) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(b)) {
            self.dequantize_block(s, d);
        }
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The 6-bit scale and min of sub-block `j` of a k-quant block (`get_scale_min_k4`).
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The signed 6-bit scale `s` (in -32..32) of sub-block `s` of a Q3_K block: the low 4
/// bits are nibbles of bytes 0..8, the high 2 bits are pairs of bytes 8..12.
pub fn q3k_scale(sc: &[u8], s: usize) -> i32 {
    let low = if s < 8 { sc[s] & 0xF } else { sc[s - 8] >> 4 };
    let high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | high << 4) as i32 - 32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q2_K and Q3_K value by value, as llama.cpp's reference loops index them: value
    /// i = 128 half + 32 j + l takes bits 2j of qs[32 half + l] and scale i / 16.
    fn k_low_bits_reference(format: QuantFormat, src: &[u8]) -> Vec<f32> {
        let h = |i: usize| f16::from_le_bytes([src[i], src[i + 1]]).to_f32();
        (0..256)
            .map(|i| {
                let (half, j, l) = (i / 128, (i % 128) / 32, i % 32);
                if format == QuantFormat::Q2K {
                    let q = (src[16 + 32 * half + l] >> (2 * j)) & 3;
                    let s = src[i / 16];
                    h(80) * (s & 0xF) as f32 * q as f32 - h(82) * (s >> 4) as f32
                } else {
                    let low = (src[32 + 32 * half + l] >> (2 * j)) & 3;
                    let high = if src[l] & (1 << (i / 32)) != 0 { 0 } else { 4 };
                    h(108) * q3k_scale(&src[96..108], i / 16) as f32 * (low as i32 - high) as f32
                }
            })
            .collect()
    }

    #[test]
    fn two_and_three_bit_k_quants_match_the_per_value_reference() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for format in [QuantFormat::Q2K, QuantFormat::Q3K] {
            for _ in 0..64 {
                let mut block: Vec<u8> = (0..format.block_bytes())
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (state >> 33) as u8
                    })
                    .collect();
                // finite scales: d (and dmin) as f16 values in [0.01, 1)
                for (i, &at) in format.f16_fields().iter().enumerate() {
                    let v = f16b(0.01 + (block[i] as f32) / 260.0);
                    block[at..at + 2].copy_from_slice(&v);
                }
                let mut got = vec![0f32; 256];
                format.dequantize_block(&block, &mut got);
                let want = k_low_bits_reference(format, &block);
                assert!(want.iter().any(|&v| v != 0.0), "{format}: a non-zero block");
                assert_eq!(got, want, "{format}");
            }
        }
    }

    fn f16b(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    #[test]
    fn plain_float_rows_dequantize_like_their_blocks() {
        let bytes: Vec<u8> = (0..400u32).map(|i| (i * 37 % 251) as u8).collect();
        for f in [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16] {
            let n = bytes.len() / f.block_bytes();
            let mut fast = vec![0f32; n];
            f.dequantize(&bytes, &mut fast);
            for (i, (s, &got)) in bytes.chunks_exact(f.block_bytes()).zip(&fast).enumerate() {
                let mut one = [0f32];
                f.dequantize_block(s, &mut one);
                assert_eq!(got.to_bits(), one[0].to_bits(), "{f} value {i}");
            }
        }
    }

    #[test]
    fn hand_built_blocks() {
        // Q8_0: d = 0.5, q = -16..16
        let mut b = f16b(0.5).to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let mut y = [0f32; 32];
        QuantFormat::Q8_0.dequantize_block(&b, &mut y);
        assert_eq!(y[0], -8.0);
        assert_eq!(y[31], 7.5);
        // Q4_0: d = 2, low nibble 1, high nibble 15
        let mut b = f16b(2.0).to_vec();
        b.extend([0xF1u8; 16]);
        QuantFormat::Q4_0.dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[15], y[16], y[31]), (-14.0, -14.0, 14.0, 14.0));
        // Q4_1: d = 0.25, m = -1, nibbles 4 and 8
        let mut b = f16b(0.25).to_vec();
        b.extend(f16b(-1.0));
        b.extend([0x84u8; 16]);
        QuantFormat::Q4_1.dequantize_block(&b, &mut y);
        assert_eq!((y[3], y[20]), (0.0, 1.0));
        // scalar formats
        let mut one = [0f32; 1];
        QuantFormat::F32.dequantize_block(&1.5f32.to_le_bytes(), &mut one);
        assert_eq!(one[0], 1.5);
        QuantFormat::BF16.dequantize_block(&bf16::from_f32(-3.0).to_le_bytes(), &mut one);
        assert_eq!(one[0], -3.0);
    }

    #[test]
    fn k_quants_hand_built() {
        // Q4_K: d = 1, dmin = 0.5, all scales 2 and mins 1 (j < 4 path and j >= 4 path)
        let mut b = f16b(1.0).to_vec();
        b.extend(f16b(0.5));
        // scales[0..4] = sc for j<4, scales[4..8] = m for j<4, scales[8..12]: j>=4 low bits
        b.extend([2, 2, 2, 2, 1, 1, 1, 1, 0x12, 0x12, 0x12, 0x12]);
        b.extend([0x53u8; 128]);
        let mut y = vec![0f32; 256];
        QuantFormat::Q4K.dequantize_block(&b, &mut y);
        assert_eq!(y[0], 2.0 * 3.0 - 0.5); // sub-block 0: q = 3
        assert_eq!(y[32], 2.0 * 5.0 - 0.5); // sub-block 1: q = 5
        assert_eq!(y[128 + 32], 2.0 * 5.0 - 0.5); // sub-block 5: sc = 2, m = 1
                                                  // Q6K: d = 1, all scales 1, ql = 0, qh = 0 -> every value -32
        let mut b = vec![0u8; 192];
        b.extend([1u8; 16]);
        b.extend(f16b(1.0));
        QuantFormat::Q6K.dequantize_block(&b, &mut y);
        assert!(y.iter().all(|&v| v == -32.0));
        // Q5K: high bits all set, nibbles 0, scale 1, min 0 -> 16
        let mut b = f16b(1.0).to_vec();
        b.extend(f16b(0.0));
        b.extend([1, 1, 1, 1, 0, 0, 0, 0, 0x01, 0x01, 0x01, 0x01]);
        b.extend([0xFFu8; 32]);
        b.extend([0u8; 128]);
        QuantFormat::Q5K.dequantize_block(&b, &mut y);
        assert!(y.iter().all(|&v| v == 16.0), "{:?}", &y[..8]);
    }

    #[test]
    fn five_bit_and_low_bit_k_quants_hand_built() {
        let mut y = vec![0f32; 256];
        // Q5_0: d = 1; high bits of values 0 and 16 set; qs[0] = 0x21
        let mut b = f16b(1.0).to_vec();
        b.extend(0x0001_0001u32.to_le_bytes());
        b.push(0x21);
        b.extend([0u8; 15]);
        QuantFormat::Q5_0.dequantize_block(&b, &mut y[..32]);
        assert_eq!((y[0], y[16], y[1], y[17]), (1.0, 2.0, -16.0, -16.0));
        // Q5_1: d = 0.5, m = 1, every high bit set, nibbles 0 (low) and 15 (high)
        let mut b = f16b(0.5).to_vec();
        b.extend(f16b(1.0));
        b.extend([0xFFu8; 4]);
        b.extend([0xF0u8; 16]);
        QuantFormat::Q5_1.dequantize_block(&b, &mut y[..32]);
        assert_eq!((y[5], y[21]), (9.0, 16.5));
        // Q2_K: every scale 2 and min 1, d = 1, dmin = 0.5; qs[0..32] = 0xE4 (q = 0, 1, 2, 3)
        let mut b = vec![0x12u8; 16];
        b.extend([0xE4u8; 32]);
        b.extend([0u8; 32]);
        b.extend(f16b(1.0));
        b.extend(f16b(0.5));
        QuantFormat::Q2K.dequantize_block(&b, &mut y);
        assert_eq!(
            (y[0], y[32], y[64], y[96], y[128]),
            (-0.5, 1.5, 3.5, 5.5, -0.5)
        );
        // Q3_K: d = 1, scales 2 (6-bit 34) except sub-block 15 (0 -> -32); hmask bits set in
        // bytes 16..32 only; qs = 0xE4 (low bits 0, 1, 2, 3 by shift)
        let mut b = vec![0u8; 16];
        b.extend([0xFFu8; 16]);
        b.extend([0xE4u8; 64]);
        b.extend([0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x02]);
        b.extend([0xAA, 0xAA, 0xAA, 0x2A]);
        b.extend(f16b(1.0));
        QuantFormat::Q3K.dequantize_block(&b, &mut y);
        // value 0: low 0, high bit clear -> 2 * (0 - 4); value 48 (l = 16): 2 * (1 - 0)
        assert_eq!((y[0], y[48], y[80], y[255]), (-8.0, 2.0, 4.0, -96.0));
        assert_eq!(y[224], -2.0); // sub-block 14, l = 0: q = 3, high bit clear
    }

    #[test]
    fn sizes() {
        assert_eq!(QuantFormat::Q4_1.bytes_for(576 * 192), Some(69120));
        assert_eq!(QuantFormat::Q4K.bytes_for(100), None);
    }
}
