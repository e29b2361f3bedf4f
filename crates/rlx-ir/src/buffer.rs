//! Element storage for host tensors: an owned `Vec<T>`, or a read-only region of memory
//! that something else owns (a memory-mapped file), kept alive by a reference count.
//!
//! A [`Buffer`] reads like a slice (`Deref<Target = [T]>`). Mutable access is
//! copy-on-write: a shared buffer copies its elements into a `Vec` the first time it is
//! written, so the owner's memory is never written through a `Buffer`. A third kind,
//! *exclusive* ([`Buffer::exclusive`]), holds memory from an allocator that only this buffer
//! uses (a KV cache block): it is written in place and its owner frees it on drop.

use half::{bf16, f16};
use std::any::Any;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Whatever keeps a shared buffer's memory alive (a memory map, an allocation).
pub type BufferOwner = Arc<dyn Any + Send + Sync>;

/// Typed element storage: an owned `Vec`, memory borrowed read-only from a
/// reference-counted owner (shared), or an allocator's block used by this buffer alone
/// (exclusive). Elements in foreign memory are never dropped (element types are `Copy`).
pub struct Buffer<T> {
    repr: Repr<T>,
}

enum Repr<T> {
    Owned(Vec<T>),
    Shared {
        owner: BufferOwner,
        ptr: NonNull<T>,
        len: usize,
    },
    Exclusive {
        /// never read: dropped with the buffer, returning the memory
        _owner: Box<dyn Any + Send + Sync>,
        ptr: NonNull<T>,
        len: usize,
    },
}

// SAFETY: an owned buffer is a `Vec<T>`; a shared one is a read-only `&[T]` whose memory the
// `Arc` keeps alive, like `Arc<[T]>`; an exclusive one is like a `Box<[T]>`. All are safe to
// send and share when `T` is.
unsafe impl<T: Send + Sync> Send for Buffer<T> {}
// SAFETY: as above; shared memory is never written through a `Buffer`.
unsafe impl<T: Send + Sync> Sync for Buffer<T> {}

/// Element types whose every bit pattern is a valid value and which have no padding, so
/// they can be read straight out of raw bytes (the numeric types).
///
/// # Safety
/// Implement only for `Copy` types without padding for which every bit pattern of
/// `size_of::<Self>()` bytes is a valid value.
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

// SAFETY: primitive numbers: no padding, every bit pattern valid.
unsafe impl Pod for f32 {}
// SAFETY: as above.
unsafe impl Pod for f64 {}
// SAFETY: as above (`repr(transparent)` over u16).
unsafe impl Pod for f16 {}
// SAFETY: as above (`repr(transparent)` over u16).
unsafe impl Pod for bf16 {}
// SAFETY: as above.
unsafe impl Pod for i8 {}
// SAFETY: as above.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for i16 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for i64 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}

impl<T> Buffer<T> {
    /// An empty owned buffer.
    pub const fn new() -> Buffer<T> {
        Buffer {
            repr: Repr::Owned(Vec::new()),
        }
    }

    /// A buffer reading `len` elements at `ptr`, kept alive by `owner` (no copy).
    ///
    /// # Safety
    /// `ptr` is non-null, aligned for `T`, and valid for reads of `len` initialized values
    /// of `T` for as long as `owner` is alive; nothing writes that memory meanwhile.
    pub unsafe fn shared(owner: BufferOwner, ptr: *const T, len: usize) -> Buffer<T> {
        let ptr = NonNull::new(ptr as *mut T).expect("Buffer::shared: null pointer");
        Buffer {
            repr: Repr::Shared { owner, ptr, len },
        }
    }

    /// A buffer over `len` elements at `ptr` that it alone reads and writes, in place
    /// (mutable access copies nothing); `owner` is dropped with the buffer and should
    /// return the memory to where it came from. Clones copy into an owned `Vec`.
    ///
    /// # Safety
    /// `ptr` is non-null, aligned for `T`, and valid for reads and writes of `len`
    /// initialized values of `T` until `owner` is dropped; nothing else accesses that
    /// memory meanwhile.
    pub unsafe fn exclusive(
        owner: Box<dyn Any + Send + Sync>,
        ptr: *mut T,
        len: usize,
    ) -> Buffer<T> {
        let ptr = NonNull::new(ptr).expect("Buffer::exclusive: null pointer");
        Buffer {
            repr: Repr::Exclusive {
                _owner: owner,
                ptr,
                len,
            },
        }
    }

    /// True when the buffer holds memory from [`Buffer::exclusive`].
    pub fn is_exclusive(&self) -> bool {
        matches!(self.repr, Repr::Exclusive { .. })
    }

    /// True when the elements are read in place from memory a reference-counted owner
    /// holds (no copy was made); such a buffer copies itself on its first write.
    pub fn is_shared(&self) -> bool {
        matches!(self.repr, Repr::Shared { .. })
    }

    /// The owner keeping a shared buffer's memory alive; `None` when owned.
    pub fn owner(&self) -> Option<&BufferOwner> {
        match &self.repr {
            Repr::Shared { owner, .. } => Some(owner),
            Repr::Owned(_) | Repr::Exclusive { .. } => None,
        }
    }

    /// The elements as a slice.
    pub fn as_slice(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: the constructors' contract: valid, aligned, alive while `owner` is.
            Repr::Shared { ptr, len, .. } | Repr::Exclusive { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl<T: Pod> Buffer<T> {
    /// Reinterprets `bytes` (native byte order), which must lie inside the bytes `owner`
    /// holds, as elements without a copy. `None` when `bytes` is not inside `owner`'s
    /// bytes, is misaligned for `T`, or its length is not a multiple of `T`'s size.
    ///
    /// `O`'s `AsRef<[u8]>` must return the same memory for as long as it lives (true of
    /// memory maps, `Vec<u8>` and boxed slices).
    pub fn from_bytes_shared<O>(owner: Arc<O>, bytes: &[u8]) -> Option<Buffer<T>>
    where
        O: AsRef<[u8]> + Send + Sync + 'static,
    {
        let size = std::mem::size_of::<T>();
        let held = (*owner).as_ref().as_ptr_range();
        let want = bytes.as_ptr_range();
        if want.start < held.start || want.end > held.end {
            return None;
        }
        if !bytes.len().is_multiple_of(size)
            || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return None;
        }
        let len = bytes.len() / size;
        let ptr = if len == 0 {
            NonNull::<T>::dangling().as_ptr() as *const T
        } else {
            bytes.as_ptr() as *const T
        };
        // SAFETY: the bytes lie inside memory `owner` keeps alive and read-only (checked
        // above); alignment and length were checked; `T: Pod` accepts every bit pattern.
        Some(unsafe { Buffer::shared(owner, ptr, len) })
    }
}

impl<T: Clone> Buffer<T> {
    /// The elements as a mutable `Vec`, copying them first out of memory the buffer does
    /// not own as a `Vec` (shared or exclusive): copy-on-write.
    pub fn make_mut(&mut self) -> &mut Vec<T> {
        if !matches!(self.repr, Repr::Owned(_)) {
            self.repr = Repr::Owned(self.as_slice().to_vec());
        }
        match &mut self.repr {
            Repr::Owned(v) => v,
            _ => unreachable!("made owned above"),
        }
    }

    /// The elements, mutably: in place when owned or exclusive; a shared buffer copies
    /// them into an owned `Vec` first (copy-on-write).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        if self.is_shared() {
            return self.make_mut();
        }
        match &mut self.repr {
            Repr::Owned(v) => v,
            // SAFETY: the constructor's contract: valid for writes, used by nothing else;
            // `&mut self` makes this the only view.
            Repr::Exclusive { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
            Repr::Shared { .. } => unreachable!("copied above"),
        }
    }

    /// The elements as a `Vec`: moved when owned, copied otherwise.
    pub fn into_vec(self) -> Vec<T> {
        match self.repr {
            Repr::Owned(v) => v,
            _ => self.as_slice().to_vec(),
        }
    }
}

impl<T> Default for Buffer<T> {
    fn default() -> Buffer<T> {
        Buffer::new()
    }
}

impl<T> Deref for Buffer<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Clone> DerefMut for Buffer<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T> AsRef<[T]> for Buffer<T> {
    fn as_ref(&self) -> &[T] {
        self
    }
}

impl<T> std::borrow::Borrow<[T]> for Buffer<T> {
    fn borrow(&self) -> &[T] {
        self
    }
}

impl<T: Clone> Clone for Buffer<T> {
    /// Shared buffers clone the reference (no copy); owned and exclusive ones copy into a
    /// new `Vec`.
    fn clone(&self) -> Buffer<T> {
        match &self.repr {
            Repr::Owned(v) => Buffer {
                repr: Repr::Owned(v.clone()),
            },
            Repr::Exclusive { .. } => Buffer {
                repr: Repr::Owned(self.as_slice().to_vec()),
            },
            Repr::Shared { owner, ptr, len } => Buffer {
                repr: Repr::Shared {
                    owner: owner.clone(),
                    ptr: *ptr,
                    len: *len,
                },
            },
        }
    }
}

impl<T: PartialEq> PartialEq for Buffer<T> {
    fn eq(&self, other: &Buffer<T>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Eq> Eq for Buffer<T> {}

impl<T: PartialEq> PartialEq<Vec<T>> for Buffer<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: PartialEq> PartialEq<[T]> for Buffer<T> {
    fn eq(&self, other: &[T]) -> bool {
        self.as_slice() == other
    }
}

impl<T: PartialEq, const N: usize> PartialEq<[T; N]> for Buffer<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for Buffer<T> {
    /// The elements, as a `Vec` prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    fn from(v: Vec<T>) -> Buffer<T> {
        Buffer {
            repr: Repr::Owned(v),
        }
    }
}

impl<T: Clone> From<&[T]> for Buffer<T> {
    fn from(v: &[T]) -> Buffer<T> {
        Buffer::from(v.to_vec())
    }
}

impl<T: Clone> From<Buffer<T>> for Vec<T> {
    fn from(b: Buffer<T>) -> Vec<T> {
        b.into_vec()
    }
}

impl<T> FromIterator<T> for Buffer<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Buffer<T> {
        Buffer::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Clone> IntoIterator for Buffer<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    /// Moves the elements out (copying them first when shared).
    fn into_iter(self) -> std::vec::IntoIter<T> {
        self.into_vec().into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Buffer<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> std::slice::Iter<'a, T> {
        self.as_slice().iter()
    }
}

impl<'a, T: Clone> IntoIterator for &'a mut Buffer<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> std::slice::IterMut<'a, T> {
        self.as_mut_slice().iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f32 values 0, 1, 2, ... seen as bytes (so the bytes are aligned for f32).
    struct F32s(Vec<f32>);

    impl AsRef<[u8]> for F32s {
        fn as_ref(&self) -> &[u8] {
            // SAFETY: f32 has no padding; any f32 memory is valid as bytes.
            unsafe {
                std::slice::from_raw_parts(
                    self.0.as_ptr() as *const u8,
                    std::mem::size_of_val(&self.0[..]),
                )
            }
        }
    }

    impl std::ops::Deref for F32s {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            self.as_ref()
        }
    }

    fn f32_bytes(n: usize) -> Arc<F32s> {
        Arc::new(F32s((0..n).map(|i| i as f32).collect()))
    }

    #[test]
    fn shared_reads_in_place_and_clones_share() {
        let bytes = f32_bytes(6);
        let b: Buffer<f32> = Buffer::from_bytes_shared(bytes.clone(), &bytes[..]).expect("aligned");
        assert!(b.is_shared());
        assert_eq!(b.as_ptr() as *const u8, bytes.as_ptr());
        assert_eq!(b, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(Arc::strong_count(&bytes), 2);
        let c = b.clone();
        assert!(c.is_shared());
        assert_eq!(c.as_ptr(), b.as_ptr());
        assert_eq!(Arc::strong_count(&bytes), 3);
        drop(b);
        drop(c);
        assert_eq!(Arc::strong_count(&bytes), 1);
    }

    #[test]
    fn writes_copy_on_write() {
        let bytes = f32_bytes(4);
        let mut b: Buffer<f32> =
            Buffer::from_bytes_shared(bytes.clone(), &bytes[..]).expect("aligned");
        let other = b.clone();
        b[1] = 10.0;
        assert!(!b.is_shared());
        assert_eq!(b, vec![0.0, 10.0, 2.0, 3.0]);
        assert_eq!(other, [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(&bytes[4..8], &1.0f32.to_ne_bytes());
        b.make_mut().push(7.0);
        assert_eq!(b.len(), 5);
        // an owned buffer is written in place
        let mut o: Buffer<i32> = vec![1, 2, 3].into();
        let p2 = o.as_ptr();
        o[0] = 5;
        assert_eq!(o.as_ptr(), p2);
        assert_eq!(o.into_vec(), vec![5, 2, 3]);
    }

    #[test]
    fn exclusive_writes_in_place_and_frees_on_drop() {
        struct Block {
            _mem: Vec<u64>,
            _alive: Arc<()>,
        }
        let alive = Arc::new(());
        let mut mem = vec![0u64; 4];
        let ptr = mem.as_mut_ptr();
        let owner = Box::new(Block {
            _mem: mem,
            _alive: alive.clone(),
        });
        // SAFETY: `owner` holds the Vec the pointer points into; nothing else touches it.
        let mut b = unsafe { Buffer::exclusive(owner, ptr, 4) };
        assert!(b.is_exclusive() && !b.is_shared());
        b[2] = 7;
        b.iter_mut().for_each(|x| *x += 1);
        assert_eq!(b.as_ptr(), ptr as *const u64, "written in place");
        assert_eq!(b, [1, 1, 8, 1]);
        let c = b.clone();
        assert!(!c.is_exclusive() && c == b && c.as_ptr() != b.as_ptr());
        assert_eq!(Arc::strong_count(&alive), 2);
        drop(b);
        assert_eq!(
            Arc::strong_count(&alive),
            1,
            "the owner goes with the buffer"
        );
    }

    #[test]
    fn misaligned_short_and_foreign_bytes_are_refused() {
        let bytes = f32_bytes(4);
        assert!(Buffer::<f32>::from_bytes_shared(bytes.clone(), &bytes[1..5]).is_none());
        assert!(Buffer::<f32>::from_bytes_shared(bytes.clone(), &bytes[0..6]).is_none());
        // aligned and whole, but not memory `bytes` keeps alive
        let elsewhere = f32_bytes(4);
        assert!(Buffer::<f32>::from_bytes_shared(elsewhere.clone(), &elsewhere[..]).is_some());
        assert!(Buffer::<f32>::from_bytes_shared(bytes.clone(), &elsewhere[..]).is_none());
        let u: Buffer<u8> = Buffer::from_bytes_shared(bytes.clone(), &bytes[1..5]).expect("u8");
        assert_eq!(u.len(), 4);
        let e: Buffer<f32> = Buffer::from_bytes_shared(bytes.clone(), &bytes[4..4]).expect("empty");
        assert!(e.is_empty());
    }

    #[test]
    fn equality_debug_and_conversions_go_by_contents() {
        let bytes = f32_bytes(3);
        let s: Buffer<f32> = Buffer::from_bytes_shared(bytes.clone(), &bytes[..]).expect("aligned");
        let o: Buffer<f32> = vec![0.0, 1.0, 2.0].into();
        assert_eq!(s, o);
        assert_eq!(format!("{s:?}"), format!("{:?}", vec![0.0f32, 1.0, 2.0]));
        assert_eq!(format!("{s:?}"), format!("{o:?}"));
        let c: Buffer<f32> = (0..3).map(|i| i as f32).collect();
        assert_eq!(c, s);
        assert!(!c.is_shared());
        let v = s.clone().into_vec();
        assert_eq!(v, vec![0.0, 1.0, 2.0]);
        assert_eq!(s.into_iter().sum::<f32>(), 3.0);
        fn send_sync<X: Send + Sync>() {}
        send_sync::<Buffer<f32>>();
    }
}
