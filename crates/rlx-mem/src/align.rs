//! Address arithmetic shared by every allocator: alignment checks and rounding.

use crate::MemError;

/// Rounds `value` up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(value: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Checks that `align` is a non-zero power of two.
pub fn check_align(align: usize) -> Result<(), MemError> {
    if align.is_power_of_two() {
        Ok(())
    } else {
        Err(MemError::BadAlignment { align })
    }
}

/// Rounds `size` up to a multiple of `granule` (a power of two), reporting overflow as an error.
pub fn round_size(size: usize, granule: usize) -> Result<usize, MemError> {
    align_up(size, granule).ok_or(MemError::SizeOverflow { requested: size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_matches_division_on_random_values() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = (x >> 20) as usize;
            let align = 1usize << (x % 20);
            let up = align_up(value, align).unwrap();
            assert_eq!(up % align, 0);
            assert!(up >= value && up - value < align);
            assert_eq!(up, value.div_ceil(align) * align);
        }
        assert_eq!(align_up(usize::MAX, 256), None);
        assert!(round_size(usize::MAX - 3, 256).is_err());
    }

    #[test]
    fn only_powers_of_two_are_alignments() {
        assert!(check_align(0).is_err());
        assert!(check_align(384).is_err());
        for shift in 0..63 {
            assert!(check_align(1 << shift).is_ok());
        }
    }
}
