//! CUDA's side of the index math: the C integer type a kernel's indices need. The rest
//! (coordinates, strided offsets, merged index spaces) is shared in [`rlx_ir::render`] and
//! [`rlx_ir::kernel`].

pub use rlx_ir::kernel::{row_major as contiguous, IndexSpace};
use rlx_ir::render::max_offset;

/// The integer type indices need: `int` when every index and offset fits in 31 bits.
pub fn index_type(max_linear: usize, views: &[(usize, &[usize], &[isize])]) -> &'static str {
    let limit = i32::MAX as usize;
    let fits = max_linear < (1 << 30)
        && views
            .iter()
            .all(|(off, dims, strides)| max_offset(*off, dims, strides) < limit);
    if fits {
        "int"
    } else {
        "long long"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_widen_past_31_bits() {
        assert_eq!(index_type(100, &[(0, &[10, 10], &[10, 1])]), "int");
        assert_eq!(index_type(1 << 30, &[]), "long long");
        let far: &[isize] = &[1 << 31];
        assert_eq!(index_type(8, &[(0, &[2], far)]), "long long");
    }
}
