//! CUDA's side of the `elide_views` kernel-IR pass (`rlx_opt::kernel_passes::elide_views`):
//! the views' types with a relocation target (the output of a merged GEMM, `plan::merge`),
//! and the layouts attention generates code for. `RLX_CUDA_ELIDE=0` leaves the pass out.

use crate::codegen::attention::{Layout, Layouts};
use crate::codegen::store::LibCtx;
use crate::codegen::ArgRef;

/// An operand read (or result written) through strides; `target` is where it is read when
/// a merged GEMM replaced the buffer's writer.
pub type StridedView = rlx_opt::kernel_passes::elide_views::StridedView<ArgRef>;
/// What one attention kernel reads and writes in place, and the copies that replaces.
pub type AttentionViews = rlx_opt::kernel_passes::elide_views::AttentionViews<ArgRef>;
/// The peephole's decisions for a program.
pub type Views = rlx_opt::kernel_passes::elide_views::Views<ArgRef>;

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
