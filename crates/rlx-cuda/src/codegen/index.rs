//! Index math for loop nests: merging dims that every view walks contiguously, splitting a
//! linear index into coordinates, and strided offsets. Dims and strides are literals in the
//! generated code, so divisions are by constants.

pub use rlx_ir::kernel::{row_major as contiguous, IndexSpace};

/// Statements splitting `linear` into `const {ty} {prefix}{d}` coordinates over `dims`.
pub fn coords(linear: &str, prefix: &str, dims: &[usize], ty: &str) -> String {
    match dims.len() {
        0 => String::new(),
        1 => format!("const {ty} {prefix}0 = {linear};\n"),
        n => {
            let mut s = format!("{ty} {prefix}_r = {linear};\n");
            for d in (1..n).rev() {
                s += &format!(
                    "const {ty} {prefix}{d} = {prefix}_r % {}; {prefix}_r /= {};\n",
                    dims[d], dims[d]
                );
            }
            s += &format!("const {ty} {prefix}0 = {prefix}_r;\n");
            s
        }
    }
}

/// `base + Σ {prefix}{d} * strides[d]` with zero terms dropped.
pub fn offset(base: &str, prefix: &str, strides: &[isize]) -> String {
    let mut s = base.to_string();
    for (d, &st) in strides.iter().enumerate() {
        match st {
            0 => {}
            1 => s += &format!(" + {prefix}{d}"),
            _ => s += &format!(" + {prefix}{d} * {st}"),
        }
    }
    s
}

/// The integer type indices need: `int` when every index and offset fits in 31 bits.
pub fn index_type(max_linear: usize, views: &[(usize, &[usize], &[isize])]) -> &'static str {
    let limit = i32::MAX as usize;
    let fits = max_linear < (1 << 30)
        && views.iter().all(|(off, dims, strides)| {
            let span: usize = dims
                .iter()
                .zip(strides.iter())
                .map(|(&d, &s)| d.saturating_sub(1).saturating_mul(s.unsigned_abs()))
                .fold(*off, usize::saturating_add);
            span < limit
        });
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
    fn coordinates_and_offsets() {
        assert_eq!(coords("i", "c", &[5], "int"), "const int c0 = i;\n");
        let c = coords("i", "c", &[2, 3], "int");
        assert!(c.contains("const int c1 = c_r % 3; c_r /= 3;"));
        assert_eq!(offset("7", "c", &[0, 1, -2]), "7 + c1 + c2 * -2");
        assert_eq!(contiguous(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
