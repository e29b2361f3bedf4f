//! Run-time storage: typed views of buffers, the per-run arena, and the table that maps
//! every program buffer to its storage for one run.
//!
//! Safety model: a run resolves each buffer to a raw address once (`RunMemory`). A kernel
//! then takes shared views of the buffers it reads and one mutable view of the buffer it
//! writes. Compile-time checks guarantee that the written buffer's storage never overlaps
//! anything the same kernel reads (`check_program` forbids reading your own output root,
//! and the planner never overlaps buffers with overlapping lifetimes), so those views never
//! alias.

use half::{bf16, f16};
use rlx_ir::{DType, Tensor, TensorData};
use rlx_ir::{F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0};
use std::marker::PhantomData;

/// An element type the fast path stores; bool is stored as u8 (0 or 1).
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// To f32 lanes.
    fn to_f32(self) -> f32;
    /// From f32 lanes (the value is already of this dtype).
    fn from_f32(v: f32) -> Self;
    /// To f64 lanes, exactly.
    fn to_f64(self) -> f64;
    /// From f64 lanes (the value is already rounded to this dtype).
    fn from_f64(v: f64) -> Self;
}

macro_rules! elem_prim {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 { self as f32 }
            #[inline(always)]
            fn from_f32(v: f32) -> Self { v as $t }
            #[inline(always)]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
elem_prim!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! elem_narrow {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 { self.to_f64() as f32 }
            #[inline(always)]
            fn from_f32(v: f32) -> Self { <$t>::from_f64(v as f64) }
            #[inline(always)]
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
        }
    )*};
}
elem_narrow!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, F4E2M1);

macro_rules! elem_half {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 { <$t>::to_f32(self) }
            #[inline(always)]
            fn from_f32(v: f32) -> Self { <$t>::from_f32(v) }
            #[inline(always)]
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
        }
    )*};
}
elem_half!(f16, bf16);

/// A shared typed view of a buffer.
#[derive(Clone, Copy)]
pub(crate) enum Data<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    I8(&'a [i8]),
    U8(&'a [u8]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    I16(&'a [i16]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    F8E4M3FN(&'a [F8E4M3FN]),
    F8E4M3FNUZ(&'a [F8E4M3FNUZ]),
    F8E5M2(&'a [F8E5M2]),
    F8E5M2FNUZ(&'a [F8E5M2FNUZ]),
    F8E8M0(&'a [F8E8M0]),
    F4E2M1(&'a [F4E2M1]),
}

/// A mutable typed view of a buffer.
pub(crate) enum DataMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    I8(&'a mut [i8]),
    U8(&'a mut [u8]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    I16(&'a mut [i16]),
    U16(&'a mut [u16]),
    U32(&'a mut [u32]),
    U64(&'a mut [u64]),
    F8E4M3FN(&'a mut [F8E4M3FN]),
    F8E4M3FNUZ(&'a mut [F8E4M3FNUZ]),
    F8E5M2(&'a mut [F8E5M2]),
    F8E5M2FNUZ(&'a mut [F8E5M2FNUZ]),
    F8E8M0(&'a mut [F8E8M0]),
    F4E2M1(&'a mut [F4E2M1]),
}

/// Runs `$body` with `$s` bound to the typed slice inside a [`Data`] or [`DataMut`].
macro_rules! dispatch {
    ($e:expr, $enum:ident, $s:ident => $body:expr) => {
        match $e {
            $enum::F32($s) => $body,
            $enum::F64($s) => $body,
            $enum::F16($s) => $body,
            $enum::BF16($s) => $body,
            $enum::I8($s) => $body,
            $enum::U8($s) => $body,
            $enum::I32($s) => $body,
            $enum::I64($s) => $body,
            $enum::I16($s) => $body,
            $enum::U16($s) => $body,
            $enum::U32($s) => $body,
            $enum::U64($s) => $body,
            $enum::F8E4M3FN($s) => $body,
            $enum::F8E4M3FNUZ($s) => $body,
            $enum::F8E5M2($s) => $body,
            $enum::F8E5M2FNUZ($s) => $body,
            $enum::F8E8M0($s) => $body,
            $enum::F4E2M1($s) => $body,
        }
    };
}
pub(crate) use dispatch;

fn as_bytes<T>(s: &[T]) -> &[u8] {
    // SAFETY: every stored type is plain old data without padding.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as above, and every bit pattern is a valid value of every stored type (bool is
    // stored as u8), so byte writes cannot create invalid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

impl<'a> Data<'a> {
    /// The raw bytes.
    pub fn bytes(self) -> &'a [u8] {
        dispatch!(self, Data, s => as_bytes(s))
    }

    /// The f32 elements, when f32.
    pub fn f32(self) -> Option<&'a [f32]> {
        match self {
            Data::F32(s) => Some(s),
            _ => None,
        }
    }

    /// Converts every element to f32 into `dst`.
    pub fn load_f32(self, dst: &mut [f32]) {
        dispatch!(self, Data, s => dst.iter_mut().zip(s).for_each(|(d, &v)| *d = v.to_f32()))
    }

    /// A host tensor copy with the given dtype (bool decoded from u8, the 4- and 2-bit
    /// integers from their i8/u8 storage) and shape.
    pub fn to_tensor(self, dtype: DType, shape: &[usize]) -> Tensor {
        let data = match (self, dtype) {
            (Data::U8(v), DType::Bool) => TensorData::Bool(v.iter().map(|&b| b != 0).collect()),
            (Data::I8(v), DType::I4) => TensorData::I4(v.to_vec().into()),
            (Data::I8(v), DType::I2) => TensorData::I2(v.to_vec().into()),
            (Data::U8(v), DType::U4) => TensorData::U4(v.to_vec().into()),
            (Data::U8(v), DType::U2) => TensorData::U2(v.to_vec().into()),
            (Data::F32(v), _) => TensorData::F32(v.to_vec().into()),
            (Data::F64(v), _) => TensorData::F64(v.to_vec().into()),
            (Data::F16(v), _) => TensorData::F16(v.to_vec().into()),
            (Data::BF16(v), _) => TensorData::BF16(v.to_vec().into()),
            (Data::I8(v), _) => TensorData::I8(v.to_vec().into()),
            (Data::U8(v), _) => TensorData::U8(v.to_vec().into()),
            (Data::I32(v), _) => TensorData::I32(v.to_vec().into()),
            (Data::I64(v), _) => TensorData::I64(v.to_vec().into()),
            (Data::I16(v), _) => TensorData::I16(v.to_vec().into()),
            (Data::U16(v), _) => TensorData::U16(v.to_vec().into()),
            (Data::U32(v), _) => TensorData::U32(v.to_vec().into()),
            (Data::U64(v), _) => TensorData::U64(v.to_vec().into()),
            (Data::F8E4M3FN(v), _) => TensorData::F8E4M3FN(v.to_vec().into()),
            (Data::F8E4M3FNUZ(v), _) => TensorData::F8E4M3FNUZ(v.to_vec().into()),
            (Data::F8E5M2(v), _) => TensorData::F8E5M2(v.to_vec().into()),
            (Data::F8E5M2FNUZ(v), _) => TensorData::F8E5M2FNUZ(v.to_vec().into()),
            (Data::F8E8M0(v), _) => TensorData::F8E8M0(v.to_vec().into()),
            (Data::F4E2M1(v), _) => TensorData::F4E2M1(v.to_vec().into()),
        };
        Tensor::new(shape.to_vec(), data).expect("buffer size matches its shape")
    }
}

impl<'a> DataMut<'a> {
    /// The raw bytes.
    pub fn bytes(self) -> &'a mut [u8] {
        dispatch!(self, DataMut, s => as_bytes_mut(s))
    }

    /// The same elements, shared, for the rest of the borrow.
    pub fn into_data(self) -> Data<'a> {
        match self {
            DataMut::F32(s) => Data::F32(s),
            DataMut::F64(s) => Data::F64(s),
            DataMut::F16(s) => Data::F16(s),
            DataMut::BF16(s) => Data::BF16(s),
            DataMut::I8(s) => Data::I8(s),
            DataMut::U8(s) => Data::U8(s),
            DataMut::I32(s) => Data::I32(s),
            DataMut::I64(s) => Data::I64(s),
            DataMut::I16(s) => Data::I16(s),
            DataMut::U16(s) => Data::U16(s),
            DataMut::U32(s) => Data::U32(s),
            DataMut::U64(s) => Data::U64(s),
            DataMut::F8E4M3FN(s) => Data::F8E4M3FN(s),
            DataMut::F8E4M3FNUZ(s) => Data::F8E4M3FNUZ(s),
            DataMut::F8E5M2(s) => Data::F8E5M2(s),
            DataMut::F8E5M2FNUZ(s) => Data::F8E5M2FNUZ(s),
            DataMut::F8E8M0(s) => Data::F8E8M0(s),
            DataMut::F4E2M1(s) => Data::F4E2M1(s),
        }
    }

    /// The f32 elements, when f32.
    pub fn f32(self) -> Option<&'a mut [f32]> {
        match self {
            DataMut::F32(s) => Some(s),
            _ => None,
        }
    }

    /// Stores f32 values, converting to this buffer's type.
    pub fn store_f32(self, src: &[f32]) {
        dispatch!(self, DataMut, d => d.iter_mut().zip(src).for_each(|(d, &v)| *d = Elem::from_f32(v)))
    }

    /// Copies a host tensor's elements in (same dtype and size).
    pub fn write(self, t: &TensorData) {
        match (self, t) {
            (DataMut::U8(d), TensorData::Bool(v)) => {
                d.iter_mut().zip(v).for_each(|(d, &b)| *d = b as u8)
            }
            (DataMut::F32(d), TensorData::F32(v)) => d.copy_from_slice(v),
            (DataMut::F64(d), TensorData::F64(v)) => d.copy_from_slice(v),
            (DataMut::F16(d), TensorData::F16(v)) => d.copy_from_slice(v),
            (DataMut::BF16(d), TensorData::BF16(v)) => d.copy_from_slice(v),
            (DataMut::I8(d), TensorData::I8(v)) => d.copy_from_slice(v),
            (DataMut::U8(d), TensorData::U8(v)) => d.copy_from_slice(v),
            (DataMut::I32(d), TensorData::I32(v)) => d.copy_from_slice(v),
            (DataMut::I64(d), TensorData::I64(v)) => d.copy_from_slice(v),
            (DataMut::I16(d), TensorData::I16(v)) => d.copy_from_slice(v),
            (DataMut::U16(d), TensorData::U16(v)) => d.copy_from_slice(v),
            (DataMut::U32(d), TensorData::U32(v)) => d.copy_from_slice(v),
            (DataMut::U64(d), TensorData::U64(v)) => d.copy_from_slice(v),
            (DataMut::F8E4M3FN(d), TensorData::F8E4M3FN(v)) => d.copy_from_slice(v),
            (DataMut::F8E4M3FNUZ(d), TensorData::F8E4M3FNUZ(v)) => d.copy_from_slice(v),
            (DataMut::F8E5M2(d), TensorData::F8E5M2(v)) => d.copy_from_slice(v),
            (DataMut::F8E5M2FNUZ(d), TensorData::F8E5M2FNUZ(v)) => d.copy_from_slice(v),
            (DataMut::F8E8M0(d), TensorData::F8E8M0(v)) => d.copy_from_slice(v),
            (DataMut::F4E2M1(d), TensorData::F4E2M1(v)) => d.copy_from_slice(v),
            (DataMut::I8(d), TensorData::I4(v) | TensorData::I2(v)) => d.copy_from_slice(v),
            (DataMut::U8(d), TensorData::U4(v) | TensorData::U2(v)) => d.copy_from_slice(v),
            _ => unreachable!("checked: result dtype equals the buffer dtype"),
        }
    }
}

/// A raw output pointer shared by parallel tasks that write disjoint elements.
pub(crate) struct OutPtr<T = f32>(pub *mut T);
impl<T> Clone for OutPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for OutPtr<T> {}
// SAFETY: tasks write pairwise disjoint elements through it (see the call sites).
unsafe impl<T: Send> Send for OutPtr<T> {}
unsafe impl<T: Send> Sync for OutPtr<T> {}

impl<T> OutPtr<T> {
    /// The pointer (a method, so closures capture the whole `Send + Sync` wrapper).
    pub fn ptr(self) -> *mut T {
        self.0
    }
}

/// Zeroed owned storage of `n` elements of `dtype` (bool as u8).
pub(crate) fn zeroed(dtype: DType, n: usize) -> TensorData {
    match dtype {
        DType::F32 => TensorData::F32(vec![0.0; n].into()),
        DType::F64 => TensorData::F64(vec![0.0; n].into()),
        DType::F16 => TensorData::F16(vec![f16::ZERO; n].into()),
        DType::BF16 => TensorData::BF16(vec![bf16::ZERO; n].into()),
        DType::I8 => TensorData::I8(vec![0; n].into()),
        DType::U8 | DType::Bool => TensorData::U8(vec![0; n].into()),
        DType::I32 => TensorData::I32(vec![0; n].into()),
        DType::I64 => TensorData::I64(vec![0; n].into()),
        DType::I16 => TensorData::I16(vec![0; n].into()),
        DType::U16 => TensorData::U16(vec![0; n].into()),
        DType::U32 => TensorData::U32(vec![0; n].into()),
        DType::U64 => TensorData::U64(vec![0; n].into()),
        DType::F8E4M3FN => TensorData::F8E4M3FN(vec![F8E4M3FN(0); n].into()),
        DType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(vec![F8E4M3FNUZ(0); n].into()),
        DType::F8E5M2 => TensorData::F8E5M2(vec![F8E5M2(0); n].into()),
        DType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(vec![F8E5M2FNUZ(0); n].into()),
        DType::F8E8M0 => TensorData::F8E8M0(vec![F8E8M0(0); n].into()),
        DType::F4E2M1 => TensorData::F4E2M1(vec![F4E2M1(0); n].into()),
        DType::I4 | DType::I2 => TensorData::I8(vec![0; n].into()),
        DType::U4 | DType::U2 => TensorData::U8(vec![0; n].into()),
    }
}

/// Turns owned storage of a bool buffer (u8) back into bools, and of a 4- or 2-bit integer
/// buffer (i8/u8) into its dtype.
pub(crate) fn finish_owned(dtype: DType, data: TensorData) -> TensorData {
    match (dtype, data) {
        (DType::Bool, TensorData::U8(v)) => {
            TensorData::Bool(v.into_iter().map(|b| b != 0).collect())
        }
        (DType::I4, TensorData::I8(v)) => TensorData::I4(v),
        (DType::I2, TensorData::I8(v)) => TensorData::I2(v),
        (DType::U4, TensorData::U8(v)) => TensorData::U4(v),
        (DType::U2, TensorData::U8(v)) => TensorData::U2(v),
        (_, d) => d,
    }
}

fn data_ptr(t: &TensorData) -> *const u8 {
    t.as_bytes().as_ptr()
}

fn data_ptr_mut(t: &mut TensorData) -> *mut u8 {
    rlx_ir::each_tensor_data!(t, v => v.as_mut_ptr().cast::<u8>())
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// One run context's arena: a single 64-byte aligned allocation holding every temporary.
pub(crate) struct Arena {
    blocks: Vec<Block>,
}

impl Arena {
    /// A zeroed arena of at least `bytes`.
    pub fn new(bytes: usize) -> Arena {
        Arena {
            blocks: vec![Block([0; 64]); bytes.div_ceil(64)],
        }
    }
}

/// Where one buffer's elements are during a run.
#[derive(Clone, Copy)]
struct Slot {
    ptr: *mut u8,
    len: usize,
    dtype: DType,
}

/// Where a root buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// a bound input, param or constant
    Leaf,
    /// a temp at this byte offset of the arena
    Arena(usize),
    /// a temp that is a program output, in its own per-run allocation
    Owned(usize),
    /// a temp no kernel touches
    Unused,
}

/// Every buffer's storage for one run.
pub(crate) struct RunMemory<'a> {
    slots: Vec<Slot>,
    arena: *mut u8,
    arena_len: usize,
    _life: PhantomData<&'a mut ()>,
}

// SAFETY: `RunMemory` is a table of addresses valid for 'a; views handed out follow the
// disjointness rule in the module doc, so sharing the table between threads is sound.
unsafe impl Send for RunMemory<'_> {}
unsafe impl Sync for RunMemory<'_> {}

impl<'a> RunMemory<'a> {
    /// Resolves every buffer: `roots[b]` is b's storage root, `locs[r]` where a root lives,
    /// `leaves[r]` the tensor bound to a leaf root, `numels[b]`/`dtypes[b]` its type.
    pub fn new(
        roots: &[usize],
        locs: &[Loc],
        leaves: &[Option<&'a Tensor>],
        dtypes: &[DType],
        numels: &[usize],
        arena: &'a mut Arena,
        owned: &'a mut [TensorData],
    ) -> RunMemory<'a> {
        let base = arena.blocks.as_mut_ptr() as *mut u8;
        let owned_ptrs: Vec<*mut u8> = owned.iter_mut().map(data_ptr_mut).collect();
        let slots = (0..roots.len())
            .map(|b| {
                let r = roots[b];
                let (ptr, len) = match locs[r] {
                    Loc::Leaf => {
                        let t = leaves[r].expect("leaf roots are bound");
                        (data_ptr(t.data()) as *mut u8, numels[b])
                    }
                    // SAFETY: the plan keeps every offset inside the arena.
                    Loc::Arena(off) => (unsafe { base.add(off) }, numels[b]),
                    Loc::Owned(i) => (owned_ptrs[i], numels[b]),
                    Loc::Unused => (std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8, 0),
                };
                Slot {
                    ptr,
                    len,
                    dtype: dtypes[b],
                }
            })
            .collect();
        RunMemory {
            slots,
            arena: base,
            arena_len: arena.blocks.len() * 64,
            _life: PhantomData,
        }
    }

    /// A shared view of buffer `b`.
    ///
    /// # Safety
    /// No mutable view of the same storage may be live.
    pub unsafe fn data(&self, b: usize) -> Data<'_> {
        let s = self.slots[b];
        view(s.ptr, s.len, s.dtype)
    }

    /// A mutable view of buffer `b` (a temp).
    ///
    /// # Safety
    /// No other view of the same storage may be live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data_mut(&self, b: usize) -> DataMut<'_> {
        let s = self.slots[b];
        view_mut(s.ptr, s.len, s.dtype)
    }

    /// A mutable view of elements `start..start + len` of buffer `b` (threads writing
    /// disjoint parts of one output each take their own).
    ///
    /// # Safety
    /// The range lies inside the buffer (whole elements of a byte-sized or wider dtype),
    /// and no other view of these elements is live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data_mut_range(&self, b: usize, start: usize, len: usize) -> DataMut<'_> {
        let s = self.slots[b];
        assert!(start + len <= s.len, "range outside the buffer");
        view_mut(s.ptr.add(start * s.dtype.size_bytes()), len, s.dtype)
    }

    /// A mutable view of `len` elements of `dtype` at byte `offset` of the arena (scratch).
    ///
    /// # Safety
    /// The region lies inside the arena, is aligned for `dtype`, and no other view of it is
    /// live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn scratch(&self, offset: usize, len: usize, dtype: DType) -> DataMut<'_> {
        assert!(offset + len * dtype.size_bytes() <= self.arena_len);
        view_mut(self.arena.add(offset), len, dtype)
    }
}

unsafe fn view<'a>(p: *mut u8, n: usize, dtype: DType) -> Data<'a> {
    use std::slice::from_raw_parts as s;
    match dtype {
        DType::F32 => Data::F32(s(p as *const f32, n)),
        DType::F64 => Data::F64(s(p as *const f64, n)),
        DType::F16 => Data::F16(s(p as *const f16, n)),
        DType::BF16 => Data::BF16(s(p as *const bf16, n)),
        DType::I8 | DType::I4 | DType::I2 => Data::I8(s(p as *const i8, n)),
        DType::U8 | DType::Bool | DType::U4 | DType::U2 => Data::U8(s(p as *const u8, n)),
        DType::I32 => Data::I32(s(p as *const i32, n)),
        DType::I64 => Data::I64(s(p as *const i64, n)),
        DType::I16 => Data::I16(s(p as *const i16, n)),
        DType::U16 => Data::U16(s(p as *const u16, n)),
        DType::U32 => Data::U32(s(p as *const u32, n)),
        DType::U64 => Data::U64(s(p as *const u64, n)),
        DType::F8E4M3FN => Data::F8E4M3FN(s(p as *const F8E4M3FN, n)),
        DType::F8E4M3FNUZ => Data::F8E4M3FNUZ(s(p as *const F8E4M3FNUZ, n)),
        DType::F8E5M2 => Data::F8E5M2(s(p as *const F8E5M2, n)),
        DType::F8E5M2FNUZ => Data::F8E5M2FNUZ(s(p as *const F8E5M2FNUZ, n)),
        DType::F8E8M0 => Data::F8E8M0(s(p as *const F8E8M0, n)),
        DType::F4E2M1 => Data::F4E2M1(s(p as *const F4E2M1, n)),
    }
}

unsafe fn view_mut<'a>(p: *mut u8, n: usize, dtype: DType) -> DataMut<'a> {
    use std::slice::from_raw_parts_mut as s;
    match dtype {
        DType::F32 => DataMut::F32(s(p as *mut f32, n)),
        DType::F64 => DataMut::F64(s(p as *mut f64, n)),
        DType::F16 => DataMut::F16(s(p as *mut f16, n)),
        DType::BF16 => DataMut::BF16(s(p as *mut bf16, n)),
        DType::I8 | DType::I4 | DType::I2 => DataMut::I8(s(p as *mut i8, n)),
        DType::U8 | DType::Bool | DType::U4 | DType::U2 => DataMut::U8(s(p, n)),
        DType::I32 => DataMut::I32(s(p as *mut i32, n)),
        DType::I64 => DataMut::I64(s(p as *mut i64, n)),
        DType::I16 => DataMut::I16(s(p as *mut i16, n)),
        DType::U16 => DataMut::U16(s(p as *mut u16, n)),
        DType::U32 => DataMut::U32(s(p as *mut u32, n)),
        DType::U64 => DataMut::U64(s(p as *mut u64, n)),
        DType::F8E4M3FN => DataMut::F8E4M3FN(s(p as *mut F8E4M3FN, n)),
        DType::F8E4M3FNUZ => DataMut::F8E4M3FNUZ(s(p as *mut F8E4M3FNUZ, n)),
        DType::F8E5M2 => DataMut::F8E5M2(s(p as *mut F8E5M2, n)),
        DType::F8E5M2FNUZ => DataMut::F8E5M2FNUZ(s(p as *mut F8E5M2FNUZ, n)),
        DType::F8E8M0 => DataMut::F8E8M0(s(p as *mut F8E8M0, n)),
        DType::F4E2M1 => DataMut::F4E2M1(s(p as *mut F4E2M1, n)),
    }
}
