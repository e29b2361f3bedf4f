//! Index math for loop nests: merging dims that every view walks contiguously, splitting a
//! linear index into coordinates, and strided offsets. Dims and strides are literals in the
//! generated code, so divisions are by constants.

/// A loop space after merging: its dims and the strides each view uses over them.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpace {
    /// merged dims (row-major, no size-1 dims)
    pub dims: Vec<usize>,
    /// per view, one stride per merged dim
    pub strides: Vec<Vec<isize>>,
}

/// Drops size-1 dims and merges neighbours `i, i+1` wherever every view has
/// `stride[i] == stride[i+1] * dims[i+1]`. The row-major order of the space is unchanged,
/// so a linear index means the same point before and after.
pub fn merge_dims(dims: &[usize], strides: &[Vec<isize>]) -> IndexSpace {
    let keep: Vec<usize> = (0..dims.len()).filter(|&d| dims[d] != 1).collect();
    let mut out_dims: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for &d in &keep {
        let mergeable = !out_dims.is_empty()
            && strides.iter().enumerate().all(|(v, s)| {
                let prev = *out_strides[v].last().expect("same length as out_dims");
                prev == s[d] * dims[d] as isize
            });
        if mergeable {
            *out_dims.last_mut().expect("non-empty") *= dims[d];
            for (v, s) in strides.iter().enumerate() {
                *out_strides[v].last_mut().expect("non-empty") = s[d];
            }
        } else {
            out_dims.push(dims[d]);
            for (v, s) in strides.iter().enumerate() {
                out_strides[v].push(s[d]);
            }
        }
    }
    IndexSpace {
        dims: out_dims,
        strides: out_strides,
    }
}

/// Contiguous row-major strides of `dims`.
pub fn contiguous(dims: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1] as isize;
    }
    s
}

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
    fn merges_contiguous_and_broadcast_runs() {
        // [2,3,4] contiguous and a bias broadcast over the first two dims.
        let sp = merge_dims(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 0, 1]]);
        assert_eq!(sp.dims, vec![6, 4]);
        assert_eq!(sp.strides, vec![vec![4, 1], vec![0, 1]]);
        let sp = merge_dims(&[2, 1, 4], &[vec![4, 99, 1]]);
        assert_eq!(sp.dims, vec![8]);
        assert_eq!(sp.strides, vec![vec![1]]);
        // A transpose stays two dims.
        let sp = merge_dims(&[3, 4], &[vec![1, 3]]);
        assert_eq!(sp.dims, vec![3, 4]);
    }

    #[test]
    fn coordinates_and_offsets() {
        assert_eq!(coords("i", "c", &[5], "int"), "const int c0 = i;\n");
        let c = coords("i", "c", &[2, 3], "int");
        assert!(c.contains("const int c1 = c_r % 3; c_r /= 3;"));
        assert_eq!(offset("7", "c", &[0, 1, -2]), "7 + c1 + c2 * -2");
        assert_eq!(contiguous(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
