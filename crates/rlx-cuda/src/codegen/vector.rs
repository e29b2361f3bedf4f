//! Wide vector moves of f32/f16/bf16 elements: `width` contiguous elements read or written
//! as chunks of at most 16 bytes (`float4`/`float2`/`float` for f32, `uint4`/`uint2`/
//! `unsigned`/`unsigned short` for the 16-bit floats, two halves to a 32-bit word). Chunks
//! stay in registers: elements are taken out of them with component selects and shifts, and
//! packed back the same way, never through a local array.

use rlx_ir::DType;

/// Bytes of one element of a dtype these moves handle: f32, f16 and bf16.
pub fn elem_bytes(dtype: DType) -> Option<usize> {
    match dtype {
        DType::F32 => Some(4),
        DType::F16 | DType::BF16 => Some(2),
        _ => None,
    }
}

/// The widest power-of-two element count that divides `len` and keeps one access of
/// `dtype` within 16 bytes (1 when `dtype` has no wide moves).
pub fn widest(dtype: DType, len: usize) -> usize {
    let Some(size) = elem_bytes(dtype) else {
        return 1;
    };
    let mut w = 16 / size;
    while w > 1 && !len.is_multiple_of(w) {
        w /= 2;
    }
    w
}

const COMPONENTS: [&str; 4] = ["x", "y", "z", "w"];

/// `width` contiguous elements of `dtype` moved as chunks of at most 16 bytes. The element
/// offset of every move must be a multiple of `width` and the base pointer 16-byte aligned,
/// so each chunk is aligned to its own size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wide {
    /// the element dtype (f32, f16 or bf16)
    pub dtype: DType,
    /// elements per move: 1, 2, 4 or 8 (16 for f16/bf16 is not used)
    pub width: usize,
}

impl Wide {
    /// A move of `width` elements of `dtype`; None when the dtype has no wide moves or the
    /// width is not a power of two up to 8.
    pub fn new(dtype: DType, width: usize) -> Option<Wide> {
        elem_bytes(dtype)?;
        matches!(width, 1 | 2 | 4 | 8).then_some(Wide { dtype, width })
    }

    fn size(&self) -> usize {
        elem_bytes(self.dtype).unwrap_or(4)
    }

    fn chunk_bytes(&self) -> usize {
        (self.size() * self.width).min(16)
    }

    /// Elements per chunk.
    fn per_chunk(&self) -> usize {
        self.chunk_bytes() / self.size()
    }

    fn chunks(&self) -> usize {
        self.width / self.per_chunk()
    }

    /// The C type of one chunk.
    pub fn chunk_type(&self) -> &'static str {
        match (self.size(), self.chunk_bytes()) {
            (4, 16) => "float4",
            (4, 8) => "float2",
            (4, _) => "float",
            (_, 16) => "uint4",
            (_, 8) => "uint2",
            (_, 4) => "unsigned",
            _ => "unsigned short",
        }
    }

    fn at(ptr: &str, off: &str, plus: usize) -> String {
        if plus == 0 {
            format!("{ptr} + {off}")
        } else {
            format!("{ptr} + {off} + {plus}")
        }
    }

    /// Statements declaring the chunks `{var}_0, {var}_1, ...` read from elements
    /// `ptr[off ..off + width]`.
    pub fn load(&self, var: &str, ptr: &str, off: &str) -> String {
        let ct = self.chunk_type();
        (0..self.chunks())
            .map(|c| {
                format!(
                    "const {ct} {var}_{c} = *reinterpret_cast<const {ct}*>({});\n",
                    Self::at(ptr, off, c * self.per_chunk())
                )
            })
            .collect()
    }

    /// The stored form of element `k` of a vector loaded by [`Wide::load`] as `var`.
    pub fn elem(&self, var: &str, k: usize) -> String {
        let pc = self.per_chunk();
        let (c, e) = (k / pc, k % pc);
        let chunk = format!("{var}_{c}");
        if pc == 1 {
            return chunk;
        }
        if self.size() == 4 {
            return format!("{chunk}.{}", COMPONENTS[e]);
        }
        let word = if pc == 2 {
            chunk
        } else {
            format!("{chunk}.{}", COMPONENTS[e / 2])
        };
        if e % 2 == 0 {
            format!("(unsigned short)({word} & 0xffffu)")
        } else {
            format!("(unsigned short)({word} >> 16)")
        }
    }

    /// Statements writing the stored-form values `vals` (one per element) to
    /// `ptr[off ..off + width]`.
    pub fn store(&self, ptr: &str, off: &str, vals: &[String]) -> String {
        debug_assert_eq!(vals.len(), self.width);
        let ct = self.chunk_type();
        let pc = self.per_chunk();
        (0..self.chunks())
            .map(|c| {
                let part = &vals[c * pc..(c + 1) * pc];
                let value = if pc == 1 {
                    part[0].clone()
                } else if self.size() == 4 {
                    format!("make_float{pc}({})", part.join(", "))
                } else {
                    let words: Vec<String> = part
                        .chunks(2)
                        .map(|p| format!("((unsigned)({}) | ((unsigned)({}) << 16))", p[0], p[1]))
                        .collect();
                    match words.len() {
                        1 => words[0].clone(),
                        n => format!("make_uint{n}({})", words.join(", ")),
                    }
                };
                format!(
                    "*reinterpret_cast<{ct}*>({}) = {value};\n",
                    Self::at(ptr, off, c * pc)
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_move_sixteen_bytes_at_a_time() {
        assert_eq!(widest(DType::F16, 384), 8);
        assert_eq!(widest(DType::F16, 100), 4);
        assert_eq!(widest(DType::F32, 100), 4);
        assert_eq!(widest(DType::BF16, 4097), 1);
        assert_eq!(widest(DType::I32, 64), 1);
        let w = Wide::new(DType::F16, 8).unwrap();
        assert_eq!(w.chunk_type(), "uint4");
        assert_eq!(
            w.load("a", "in0", "j"),
            "const uint4 a_0 = *reinterpret_cast<const uint4*>(in0 + j);\n"
        );
        assert_eq!(w.elem("a", 3), "(unsigned short)(a_0.y >> 16)");
        let vals: Vec<String> = (0..8).map(|i| format!("h{i}")).collect();
        let s = w.store("out", "j", &vals);
        assert!(s.starts_with("*reinterpret_cast<uint4*>(out + j) = make_uint4("));
        assert!(
            s.contains("((unsigned)(h6) | ((unsigned)(h7) << 16))"),
            "{s}"
        );
        // f32 with 8 elements: two float4 chunks.
        let w = Wide::new(DType::F32, 8).unwrap();
        assert!(w.load("b", "in1", "j").contains("in1 + j + 4"));
        assert_eq!(w.elem("b", 5), "b_1.y");
        // Two halves: one 32-bit word.
        let w = Wide::new(DType::BF16, 2).unwrap();
        assert_eq!(w.elem("c", 1), "(unsigned short)(c_0 >> 16)");
        assert_eq!(
            w.store("out", "j", &["p".into(), "q".into()]),
            "*reinterpret_cast<unsigned*>(out + j) = ((unsigned)(p) | ((unsigned)(q) << 16));\n"
        );
    }
}
