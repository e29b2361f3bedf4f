//! Helpers for differential tests against the interpreter, reusable by other crates'
//! tests: error metrics and random bindings for a program's inputs and params.

use rlx_ir::kernel::{BufferKind, KernelProgram};
use rlx_ir::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// Relative L2 error `||a - b|| / max(||b||, tiny)` over all elements (as f64), with `b`
/// the reference. Shapes must match (otherwise infinity). NaN anywhere gives NaN unless
/// both tensors hold NaN at the same positions, which are then skipped.
pub fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    if a.shape() != b.shape() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for i in 0..a.numel() {
        let (x, y) = (a.get_f64(i), b.get_f64(i));
        if x.is_nan() && y.is_nan() {
            continue;
        }
        if x == y {
            den += y * y;
            continue;
        }
        let d = x - y;
        num += d * d;
        den += y * y;
    }
    if num == 0.0 {
        return 0.0;
    }
    num.sqrt() / den.sqrt().max(1e-30)
}

/// Random, never-zero tensors for every input and param of a program (seeded).
pub fn random_bindings(
    p: &KernelProgram,
    seed: u64,
) -> (HashMap<String, Tensor>, HashMap<String, Arc<Tensor>>) {
    let mut inputs = HashMap::new();
    let mut params = HashMap::new();
    for (i, b) in p.buffers.iter().enumerate() {
        let shape = b.ty.shape.as_static().unwrap_or_default();
        let t = Tensor::random(b.ty.dtype, &shape, seed.wrapping_add(i as u64 * 7919));
        match &b.kind {
            BufferKind::Input(n) => {
                inputs.insert(n.clone(), t);
            }
            BufferKind::Param(n) => {
                params.insert(n.clone(), Arc::new(t));
            }
            _ => {}
        }
    }
    (inputs, params)
}

use crate::{run_program_reference, CpuError, CpuOptions, CpuProgram};
use rlx_ir::kernel::{Buffer, BufferId, Kernel, LibraryKernel, LoopKernel, View};
use rlx_ir::{DType, Op, Shape, TensorType};

/// A row-major view over `shape` (offset 0).
pub fn contiguous_view(shape: &[usize]) -> View {
    View {
        offset: 0,
        strides: rlx_ir::contiguous_strides(shape)
            .into_iter()
            .map(|s| s as isize)
            .collect(),
    }
}

/// A view reading a row-major `in_shape` tensor broadcast (numpy rules) to `out_shape`.
pub fn broadcast_view(in_shape: &[usize], out_shape: &[usize]) -> View {
    View {
        offset: 0,
        strides: rlx_interp::index::broadcast_strides(in_shape, out_shape)
            .into_iter()
            .map(|s| s as isize)
            .collect(),
    }
}

/// Builds kernel programs by hand for tests: buffers, kernels and outputs.
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    /// the program so far
    pub program: KernelProgram,
}

impl ProgramBuilder {
    /// An empty program.
    pub fn new() -> ProgramBuilder {
        ProgramBuilder::default()
    }

    fn buffer(
        &mut self,
        dtype: DType,
        shape: &[usize],
        kind: BufferKind,
        alias_of: Option<BufferId>,
    ) -> BufferId {
        self.program.buffers.push(Buffer {
            ty: TensorType::new(dtype, Shape::of(shape)),
            kind,
            alias_of,
        });
        self.program.buffers.len() - 1
    }

    /// A run-time input.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> BufferId {
        self.buffer(dtype, shape, BufferKind::Input(name.into()), None)
    }

    /// A param.
    pub fn param(&mut self, name: &str, dtype: DType, shape: &[usize]) -> BufferId {
        self.buffer(dtype, shape, BufferKind::Param(name.into()), None)
    }

    /// A constant.
    pub fn constant(&mut self, t: Tensor) -> BufferId {
        let (d, s) = (t.dtype(), t.shape().to_vec());
        self.buffer(d, &s, BufferKind::Constant(Arc::new(t)), None)
    }

    /// A temporary.
    pub fn temp(&mut self, dtype: DType, shape: &[usize]) -> BufferId {
        self.buffer(dtype, shape, BufferKind::Temp, None)
    }

    /// A row-major reinterpretation of `of` with another shape.
    pub fn alias(&mut self, of: BufferId, shape: &[usize]) -> BufferId {
        let dtype = self.program.buffers[of].ty.dtype;
        self.buffer(dtype, shape, BufferKind::Temp, Some(of))
    }

    /// Appends a loop kernel writing a new temp of its shape and dtype; returns the temp.
    pub fn push_loop(&mut self, mut k: LoopKernel) -> BufferId {
        let out = self.temp(k.out_dtype(), &k.shape.clone());
        k.output = out;
        self.program.kernels.push(Kernel::Loop(k));
        out
    }

    /// Appends a library kernel writing a new temp (the epilogue's type when there is one,
    /// else the op's inferred type); returns the temp.
    ///
    /// # Errors
    /// Operands the op rejects.
    pub fn push_library(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[BufferId],
        epilogue: Option<LoopKernel>,
    ) -> Result<BufferId, CpuError> {
        let tys: Vec<&TensorType> = inputs
            .iter()
            .map(|&b| &self.program.buffers[b].ty)
            .collect();
        let (dtype, shape) = rlx_interp::check::library_result(&op, &tys)?;
        let out = match &epilogue {
            Some(e) => self.temp(e.out_dtype(), &e.shape.clone()),
            None => self.temp(dtype, &shape),
        };
        self.program.kernels.push(Kernel::Library(LibraryKernel {
            name: name.into(),
            op,
            inputs: inputs.to_vec(),
            output: out,
            epilogue,
        }));
        Ok(out)
    }

    /// Names a buffer as an output.
    pub fn output(&mut self, name: &str, b: BufferId) {
        self.program.outputs.push((name.into(), b));
    }

    /// The finished program.
    pub fn finish(self) -> KernelProgram {
        self.program
    }
}

/// Runs `p` on the fast path (twice, so warm-program paths run too) and on the reference
/// interpreter with the same random bindings and returns the worst [`rel_l2`] over the
/// outputs.
///
/// # Errors
/// Compilation or run failures of either path.
pub fn compare_with_reference(
    p: &KernelProgram,
    opts: &CpuOptions,
    seed: u64,
) -> Result<f64, CpuError> {
    let (inputs, params) = random_bindings(p, seed);
    let want = run_program_reference(p, &inputs, &params)?;
    let program = CpuProgram::compile(p.clone(), opts)?;
    // twice: a second run reuses the arena and takes the paths that need a warm program
    // (weights packed on their second binding)
    let mut errors = Vec::new();
    for _ in 0..2 {
        let got = program.run(&inputs, &params)?;
        for ((n1, a), (n2, b)) in got.iter().zip(&want) {
            assert_eq!(n1, n2, "output order");
            assert_eq!(a.dtype(), b.dtype(), "output `{n1}` dtype");
            errors.push(rel_l2(a, b));
        }
    }
    let worst = errors.into_iter().fold(0.0, |a: f64, b| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    });
    Ok(worst)
}

/// Compares `actual` with the snapshot file at `path`, panicking with the first line that
/// differs; with `RLX_BLESS=1` it writes `actual` there instead (review the diff).
pub fn check_snapshot(path: &std::path::Path, actual: &str) {
    if std::env::var("RLX_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(path, actual).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e} (RLX_BLESS=1 writes it)", path.display()));
    if expected == actual {
        return;
    }
    let (mut want, mut got) = (expected.lines(), actual.lines());
    for line in 1.. {
        match (want.next(), got.next()) {
            (Some(w), Some(g)) if w == g => continue,
            (w, g) => panic!(
                "{} differs at line {line}:\n  expected: {}\n  actual:   {}\n(RLX_BLESS=1 rewrites the snapshot)",
                path.display(),
                w.unwrap_or("<end>"),
                g.unwrap_or("<end>")
            ),
        }
    }
}
