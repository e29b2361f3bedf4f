//! Device buffers: memory on a session's device with a dtype and a shape, allocated from
//! the device's rlx-mem pool (so [`crate::Backend::memory`] counts it) or wrapped around
//! memory someone else owns (a DLPack tensor). They are what a [`crate::Binding`] binds as
//! a run's inputs and outputs, so a loop of runs keeps its data on the device.
//!
//! A `DeviceBuffer` is a cheap handle: clones, views and slices share one storage, which
//! goes back to its pool when the last of them is dropped.

use crate::RuntimeError;
use rlx_driver::Device;
use rlx_ir::DType;
use std::any::Any;
use std::sync::Arc;

/// The raw address of a buffer's first byte, for interop with other libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawHandle {
    /// host memory (the CPU device)
    Host(usize),
    /// a CUDA device pointer in device 0's primary context (what PyTorch uses)
    Cuda(u64),
    /// a byte offset into a wgpu buffer; the `wgpu::Buffer` itself is reached through
    /// [`DeviceBuffer::storage`] (an `rlx_wgpu::memory::DeviceBuffer`)
    Wgpu {
        /// byte offset of the first byte in the wgpu buffer
        offset: u64,
    },
}

/// What holds a buffer's bytes: a pool allocation or foreign memory, implemented by each
/// backend adapter.
pub trait BufferStorage: Send + Sync + 'static {
    /// Bytes the storage holds.
    fn bytes(&self) -> usize;
    /// The address of byte 0.
    fn handle(&self) -> RawHandle;
    /// The backend's own type, for downcasting (a backend reads its storages this way).
    fn as_any(&self) -> &dyn Any;
}

/// A typed view of device memory: device, dtype, shape and a byte offset into a shared
/// storage. Contiguous and row-major.
#[derive(Clone)]
pub struct DeviceBuffer {
    device: Device,
    dtype: DType,
    shape: Vec<usize>,
    offset: usize,
    storage: Arc<dyn BufferStorage>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({} {}{:?}, {} bytes at +{})",
            self.device,
            self.dtype,
            self.shape,
            self.byte_size(),
            self.offset
        )
    }
}

fn byte_size(dtype: DType, shape: &[usize]) -> usize {
    shape.iter().product::<usize>() * dtype.size_bytes()
}

impl DeviceBuffer {
    /// A buffer of `dtype` and `shape` over the whole of `storage` (a backend's constructor).
    ///
    /// # Errors
    /// The storage holds fewer bytes than the shape needs.
    pub fn new(
        device: Device,
        dtype: DType,
        shape: &[usize],
        storage: Arc<dyn BufferStorage>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        let buffer = DeviceBuffer {
            device,
            dtype,
            shape: shape.to_vec(),
            offset: 0,
            storage,
        };
        buffer.check_fits(0, dtype, shape)?;
        Ok(buffer)
    }

    fn check_fits(&self, offset: usize, dtype: DType, shape: &[usize]) -> Result<(), RuntimeError> {
        let need = byte_size(dtype, shape);
        if offset.saturating_add(need) > self.storage.bytes() {
            return Err(RuntimeError::Buffer(format!(
                "{dtype}{shape:?} at byte {offset} needs {need} bytes; the {} buffer holds {}",
                self.device,
                self.storage.bytes()
            )));
        }
        Ok(())
    }

    /// The device the memory is on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dims (row-major, contiguous).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements in the view.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of the view.
    pub fn byte_size(&self) -> usize {
        byte_size(self.dtype, &self.shape)
    }

    /// Byte offset of the view in its storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The raw address of the view's first byte (the storage's plus the offset).
    pub fn handle(&self) -> RawHandle {
        match self.storage.handle() {
            RawHandle::Host(p) => RawHandle::Host(p + self.offset),
            RawHandle::Cuda(p) => RawHandle::Cuda(p + self.offset as u64),
            RawHandle::Wgpu { offset } => RawHandle::Wgpu {
                offset: offset + self.offset as u64,
            },
        }
    }

    /// The backend's storage, to downcast (`rlx_wgpu::memory::DeviceBuffer` on wgpu).
    pub fn storage(&self) -> &dyn Any {
        self.storage.as_any()
    }

    /// Bytes of the whole storage this view lies in.
    pub fn storage_bytes(&self) -> usize {
        self.storage.bytes()
    }

    /// True when both views lie in one storage.
    pub fn same_storage(&self, other: &DeviceBuffer) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// True when no other handle (clone, view, slice) shares the storage, so a run may
    /// overwrite it without anyone seeing.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
    }

    /// The same bytes seen as another dtype and shape (a reshape, or a bit cast).
    ///
    /// # Errors
    /// The new view needs more bytes than the storage has from this view's offset.
    pub fn view(&self, dtype: DType, shape: &[usize]) -> Result<DeviceBuffer, RuntimeError> {
        self.check_fits(self.offset, dtype, shape)?;
        Ok(DeviceBuffer {
            dtype,
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    /// Rows `start..start + len` of the first dim (shares the memory).
    ///
    /// # Errors
    /// A rank-0 buffer, or rows past the end.
    pub fn slice(&self, start: usize, len: usize) -> Result<DeviceBuffer, RuntimeError> {
        let Some(&rows) = self.shape.first() else {
            return Err(RuntimeError::Buffer(
                "a scalar buffer has no rows to slice".into(),
            ));
        };
        if start.saturating_add(len) > rows {
            return Err(RuntimeError::Buffer(format!(
                "rows {start}..{} of a buffer with {rows} rows ({}{:?})",
                start.saturating_add(len),
                self.dtype,
                self.shape
            )));
        }
        let row_bytes = byte_size(self.dtype, &self.shape[1..]);
        let mut shape = self.shape.clone();
        shape[0] = len;
        Ok(DeviceBuffer {
            shape,
            offset: self.offset + start * row_bytes,
            ..self.clone()
        })
    }

    /// The storage as the backend's type `T`, or an error naming the device when it is
    /// another backend's memory.
    ///
    /// # Errors
    /// The storage is not a `T`.
    pub fn storage_as<T: 'static>(&self, what: &str) -> Result<&T, RuntimeError> {
        self.storage.as_any().downcast_ref::<T>().ok_or_else(|| {
            RuntimeError::Buffer(format!(
                "{what}: a {} buffer is not memory this backend can read",
                self.device
            ))
        })
    }
}

/// A value bound as a run input: a host tensor (uploaded by the run) or a device buffer
/// (read on the device).
#[derive(Debug, Clone)]
pub enum BoundValue {
    /// host memory, copied to the device by the run (shared, so binding costs no copy)
    Host(Arc<rlx_ir::Tensor>),
    /// device memory on the graph's device
    Device(DeviceBuffer),
}

impl BoundValue {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            BoundValue::Host(t) => t.dtype(),
            BoundValue::Device(b) => b.dtype(),
        }
    }

    /// The dims.
    pub fn shape(&self) -> &[usize] {
        match self {
            BoundValue::Host(t) => t.shape(),
            BoundValue::Device(b) => b.shape(),
        }
    }
}

/// Bytes of a shared host tensor, as the owner of a tensor that reads them in place.
struct TensorBytes(Arc<rlx_ir::Tensor>);

impl AsRef<[u8]> for TensorBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.data().as_bytes()
    }
}

/// A tensor reading `t`'s elements in place (a copy only where the layout forbids: bool).
pub(crate) fn share_tensor(t: &Arc<rlx_ir::Tensor>) -> rlx_ir::Tensor {
    let owner = Arc::new(TensorBytes(t.clone()));
    let bytes = t.data().as_bytes();
    rlx_ir::TensorData::shared_from_le_bytes(t.dtype(), owner.clone(), bytes)
        .and_then(|d| rlx_ir::Tensor::new(t.shape().to_vec(), d).ok())
        .unwrap_or_else(|| (**t).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(usize);

    impl BufferStorage for Fake {
        fn bytes(&self) -> usize {
            self.0
        }
        fn handle(&self) -> RawHandle {
            RawHandle::Cuda(0x1000)
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn views_and_slices_share_the_storage() {
        let b = DeviceBuffer::new(Device::Cuda, DType::F32, &[4, 3], Arc::new(Fake(48))).unwrap();
        assert!(b.is_unique());
        let rows = b.slice(1, 2).unwrap();
        assert_eq!(rows.shape(), &[2, 3]);
        assert_eq!(rows.handle(), RawHandle::Cuda(0x1000 + 12));
        assert!(rows.same_storage(&b) && !b.is_unique());
        let flat = rows.view(DType::F16, &[12]).unwrap();
        assert_eq!(flat.byte_size(), 24);
        let err = b.slice(3, 2).unwrap_err().to_string();
        assert!(err.contains("rows 3..5"), "{err}");
        let err = rows.view(DType::F32, &[20]).unwrap_err().to_string();
        assert!(err.contains("needs 80 bytes"), "{err}");
        assert!(DeviceBuffer::new(Device::Cuda, DType::F32, &[13], Arc::new(Fake(48))).is_err());
    }
}
