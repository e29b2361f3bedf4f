//! CUDA's side of the shared attention-views analysis (`rlx_ir::kernel_views`): the views'
//! types with a relocation target (the output of a merged GEMM, `plan::merge`), and the
//! layouts attention generates code for. `RLX_CUDA_ELIDE=0` turns the peephole off.

use crate::codegen::attention::{Layout, Layouts};
use crate::codegen::store::LibCtx;
use crate::codegen::ArgRef;
pub use rlx_ir::kernel_views::{is_output, pure_copy, static_shape, Uses};

/// An operand read (or result written) through strides; `target` is where it is read when
/// a merged GEMM replaced the buffer's writer.
pub type StridedView = rlx_ir::kernel_views::StridedView<ArgRef>;
/// What one attention kernel reads and writes in place, and the copies that replaces.
pub type AttentionViews = rlx_ir::kernel_views::AttentionViews<ArgRef>;
/// The peephole's decisions for a program.
pub type Views = rlx_ir::kernel_views::Views<ArgRef>;

/// Finds the copies attention can replace, unless `enabled` is false
/// ([`crate::settings::Tuning::elide`]).
pub fn attention_views(program: &rlx_ir::kernel::KernelProgram, enabled: bool) -> Views {
    rlx_ir::kernel_views::attention_views(program, |_| enabled)
}

/// The layouts attention uses: packed ones, with each of `views` put in place.
pub fn layouts(views: &AttentionViews, ctx: &LibCtx) -> Layouts {
    let mut l = Layouts::packed(ctx);
    let out = &ctx.result.1;
    let ob = &out[..out.len() - 2];
    let strided = |v: &StridedView, shape: &[usize]| {
        let arg = v.target.unwrap_or(ArgRef::Buffer(v.buffer));
        Layout::strided(arg, v.offset, shape, &v.strides, ob)
    };
    for (i, slot) in [&mut l.q, &mut l.k, &mut l.v].into_iter().enumerate() {
        if let Some(v) = &views.inputs[i] {
            *slot = strided(v, &ctx.inputs[i].1);
        }
    }
    if let Some(v) = &views.output {
        l.out = strided(v, out);
    }
    l
}
