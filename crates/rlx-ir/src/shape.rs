//! Shapes whose dims are static sizes or named symbols (`batch`, `seq`) bound later.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// One dimension: a known size, or a named symbol bound at compile or run time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known now.
    Static(usize),
    /// A named size known later, e.g. `batch`.
    Sym(Arc<str>),
}

impl Dim {
    /// A symbolic dim with the given name.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(Arc::from(name))
    }

    /// The static size, if known.
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Static(n)
    }
}

impl From<&str> for Dim {
    fn from(s: &str) -> Dim {
        Dim::sym(s)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A tensor shape. Rank 0 is a scalar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// A fully static shape.
    pub fn of(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Static(d)).collect())
    }

    /// The scalar shape.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// All sizes when every dim is static.
    pub fn as_static(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    /// True when no dim is symbolic.
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| matches!(d, Dim::Static(_)))
    }

    /// Number of elements, when static.
    pub fn numel(&self) -> Option<usize> {
        self.as_static().map(|d| d.iter().product())
    }

    /// Names of the symbolic dims, in order of appearance.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for d in &self.0 {
            if let Dim::Sym(s) = d {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
        }
        out
    }

    /// Replaces bound symbols by their sizes; unbound symbols stay symbolic.
    pub fn bind(&self, bindings: &HashMap<String, usize>) -> Shape {
        Shape(
            self.0
                .iter()
                .map(|d| match d {
                    Dim::Sym(s) => bindings
                        .get(&**s)
                        .map(|&n| Dim::Static(n))
                        .unwrap_or_else(|| d.clone()),
                    Dim::Static(_) => d.clone(),
                })
                .collect(),
        )
    }

    /// Normalizes a possibly negative axis against this rank.
    pub fn axis(&self, axis: i64) -> Option<usize> {
        normalize_axis(axis, self.rank())
    }

    /// Symbolic element count: the static product and the sorted symbol names.
    pub fn symbolic_numel(&self) -> (usize, Vec<Arc<str>>) {
        let mut prod = 1usize;
        let mut syms = Vec::new();
        for d in &self.0 {
            match d {
                Dim::Static(n) => prod = prod.saturating_mul(*n),
                Dim::Sym(s) => syms.push(s.clone()),
            }
        }
        syms.sort();
        (prod, syms)
    }
}

/// Normalizes `axis` in `[-rank, rank)` to `[0, rank)`.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

impl From<Vec<Dim>> for Shape {
    fn from(v: Vec<Dim>) -> Shape {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Shape {
        Shape::of(v)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Shape {
        Shape::of(&v)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Numpy broadcasting of two shapes; `None` when incompatible.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Option<Shape> {
    let rank = a.rank().max(b.rank());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        let d = match (da, db) {
            (x, y) if x == y => x.clone(),
            (Dim::Static(1), y) => y.clone(),
            (x, Dim::Static(1)) => x.clone(),
            _ => return None,
        };
        out.push(d);
    }
    Some(Shape(out))
}

fn dim_from_right(s: &Shape, from_right: usize) -> &Dim {
    const ONE: Dim = Dim::Static(1);
    if from_right < s.rank() {
        &s.0[s.rank() - 1 - from_right]
    } else {
        &ONE
    }
}

/// Row-major strides, in elements, of static dims.
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn broadcast_examples() {
        let a = Shape(vec![Dim::sym("batch"), 1.into(), 4.into()]);
        let b = Shape::of(&[3, 1]);
        assert_eq!(broadcast_shapes(&a, &b).unwrap().to_string(), "[batch,3,4]");
        assert!(broadcast_shapes(&Shape::of(&[2]), &Shape::of(&[3])).is_none());
        assert!(
            broadcast_shapes(&Shape(vec![Dim::sym("a")]), &Shape(vec![Dim::sym("b")])).is_none()
        );
    }

    #[test]
    fn bind_and_strides() {
        let s = Shape(vec![Dim::sym("batch"), 8.into()]);
        let mut m = HashMap::new();
        m.insert("batch".to_string(), 3);
        assert_eq!(s.bind(&m), Shape::of(&[3, 8]));
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(normalize_axis(-1, 3), Some(2));
        assert_eq!(normalize_axis(3, 3), None);
    }

    proptest! {
        #[test]
        fn broadcast_is_commutative_and_matches_numpy_rule(
            a in proptest::collection::vec(1usize..4, 0..5),
            b in proptest::collection::vec(1usize..4, 0..5),
        ) {
            let (sa, sb) = (Shape::of(&a), Shape::of(&b));
            let ab = broadcast_shapes(&sa, &sb);
            prop_assert_eq!(ab.clone(), broadcast_shapes(&sb, &sa));
            let rank = a.len().max(b.len());
            let ok = (0..rank).all(|i| {
                let x = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
                let y = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
                x == y || x == 1 || y == 1
            });
            prop_assert_eq!(ok, ab.is_some());
            if let Some(s) = ab {
                prop_assert_eq!(s.rank(), rank);
            }
        }
    }
}
