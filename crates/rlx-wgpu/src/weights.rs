//! Weights on the device, shared by every program compiled for one session: one device
//! range per (param name, byte size), allocated at compile time so bind groups can be
//! built then, and re-uploaded only when the session's tensor for that name changes (a
//! different `Arc`).

use crate::memory::DeviceBuffer;
use rlx_ir::Tensor;

/// One weight's device copy and the host tensor it was last uploaded from.
pub type WeightSlot = rlx_mem::weights::WeightSlot<DeviceBuffer, Tensor>;

/// The session's device weights.
pub type WeightCache = rlx_mem::weights::WeightCache<DeviceBuffer, Tensor>;

/// The raw little-endian bytes of a host tensor, padded with zeros to whole 32-bit words.
pub fn tensor_words(t: &Tensor) -> Vec<u8> {
    use rlx_ir::TensorData as D;
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: plain-old-data element types with no padding; bools are 0 or 1 bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    let bytes = match t.data() {
        D::F32(v) => raw(v),
        D::F16(v) => raw(v),
        D::BF16(v) => raw(v),
        D::F64(v) => raw(v),
        D::I8(v) => raw(v),
        D::U8(v) => raw(v),
        D::I32(v) => raw(v),
        D::I64(v) => raw(v),
        D::Bool(v) => raw(v),
        // The other dtypes (16-bit, unsigned, narrow): the same in-memory bytes.
        other => other.as_bytes(),
    };
    let mut out = bytes.to_vec();
    out.resize(bytes.len().max(4).next_multiple_of(4), 0);
    out
}
