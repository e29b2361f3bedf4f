//! `.npy` files for `rlx run --input` / `--output`, through the `npyz` crate.

use npyz::{TypeChar, WriterBuilder};
use rlx_ir::{Tensor, TensorData};
use std::io::BufWriter;
use std::path::Path;

/// Reads an `.npy` file into a tensor (C or Fortran order; f16/f32/f64, 8- to 64-bit
/// integers, bool).
///
/// # Errors
/// Unreadable files, malformed headers, element types the IR lacks.
pub fn read(path: &Path) -> Result<Tensor, String> {
    let label = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("{label}: {e}"))?;
    let npy =
        npyz::NpyFile::new(&bytes[..]).map_err(|e| format!("{label}: not a .npy file: {e}"))?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(format!("{label}: structured arrays are not supported"));
    };
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let fortran = npy.order() == npyz::Order::Fortran;
    let err = |e: std::io::Error| format!("{label}: {e}");
    let data = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 2) => TensorData::F16(npy.into_vec::<half::f16>().map_err(err)?.into()),
        (TypeChar::Float, 4) => TensorData::F32(npy.into_vec::<f32>().map_err(err)?.into()),
        (TypeChar::Float, 8) => TensorData::F64(npy.into_vec::<f64>().map_err(err)?.into()),
        (TypeChar::Int, 1) => TensorData::I8(npy.into_vec::<i8>().map_err(err)?.into()),
        (TypeChar::Uint, 1) => TensorData::U8(npy.into_vec::<u8>().map_err(err)?.into()),
        (TypeChar::Int, 2) => TensorData::I16(npy.into_vec::<i16>().map_err(err)?.into()),
        (TypeChar::Uint, 2) => TensorData::U16(npy.into_vec::<u16>().map_err(err)?.into()),
        (TypeChar::Int, 4) => TensorData::I32(npy.into_vec::<i32>().map_err(err)?.into()),
        (TypeChar::Uint, 4) => TensorData::U32(npy.into_vec::<u32>().map_err(err)?.into()),
        (TypeChar::Uint, 8) => TensorData::U64(npy.into_vec::<u64>().map_err(err)?.into()),
        (TypeChar::Int, 8) => TensorData::I64(npy.into_vec::<i64>().map_err(err)?.into()),
        (TypeChar::Bool, 1) => TensorData::Bool(npy.into_vec::<bool>().map_err(err)?.into()),
        _ => return Err(format!("{label}: element type `{ts}` is not supported")),
    };
    if fortran {
        let mut rev = shape.clone();
        rev.reverse();
        let t = Tensor::new(rev, data).map_err(|e| format!("{label}: {e}"))?;
        return reverse_dims(&t).map_err(|e| format!("{label}: {e}"));
    }
    Tensor::new(shape, data).map_err(|e| format!("{label}: {e}"))
}

/// Reverses the dims (Fortran order read as C order is the transpose of the array).
fn reverse_dims(t: &Tensor) -> Result<Tensor, String> {
    let shape = t.shape();
    let perm: Vec<usize> = (0..shape.len()).rev().collect();
    let perm = &perm;
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let in_strides = rlx_ir::contiguous_strides(shape);
    let n = t.numel();
    let mut vals = Vec::with_capacity(n);
    let mut idx = vec![0usize; out_shape.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(perm).map(|(&i, &p)| i * in_strides[p]).sum();
        vals.push(t.get_f64(off));
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < out_shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Tensor::from_f64(t.dtype(), &out_shape, &vals).map_err(|e| e.to_string())
}

/// Writes a tensor as `.npy` (bf16 and the narrow floats, which numpy lacks, are widened
/// to f32; the 4- and 2-bit integers to i8/u8).
///
/// # Errors
/// The file cannot be written.
pub fn write(path: &Path, t: &Tensor) -> Result<(), String> {
    let label = path.display();
    let file = std::fs::File::create(path).map_err(|e| format!("{label}: {e}"))?;
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    fn put<T: npyz::AutoSerialize + Copy>(
        w: BufWriter<std::fs::File>,
        shape: &[u64],
        v: &[T],
    ) -> std::io::Result<()> {
        let mut out = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(w)
            .begin_nd()?;
        out.extend(v.iter().copied())?;
        out.finish()
    }
    let w = BufWriter::new(file);
    let r = match t.data() {
        TensorData::F32(v) => put(w, &shape, v),
        TensorData::F16(v) => put(w, &shape, v),
        TensorData::BF16(v) => {
            let f: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
            put(w, &shape, &f)
        }
        TensorData::F64(v) => put(w, &shape, v),
        TensorData::I8(v) => put(w, &shape, v),
        TensorData::U8(v) => put(w, &shape, v),
        TensorData::I32(v) => put(w, &shape, v),
        TensorData::I64(v) => put(w, &shape, v),
        TensorData::Bool(v) => put(w, &shape, v),
        TensorData::I16(v) => put(w, &shape, v),
        TensorData::U16(v) => put(w, &shape, v),
        TensorData::U32(v) => put(w, &shape, v),
        TensorData::U64(v) => put(w, &shape, v),
        TensorData::I4(v) | TensorData::I2(v) => put(w, &shape, v),
        TensorData::U4(v) | TensorData::U2(v) => put(w, &shape, v),
        TensorData::F8E4M3FN(_)
        | TensorData::F8E4M3FNUZ(_)
        | TensorData::F8E5M2(_)
        | TensorData::F8E5M2FNUZ(_)
        | TensorData::F8E8M0(_)
        | TensorData::F4E2M1(_) => {
            let f: Vec<f32> = t.to_f64_vec().iter().map(|&x| x as f32).collect();
            put(w, &shape, &f)
        }
    };
    r.map_err(|e| format!("{label}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    #[test]
    fn round_trips_every_numpy_dtype() {
        let dir = std::env::temp_dir().join(format!("rlx-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for d in DType::ALL
            .into_iter()
            .filter(|&d| d != DType::BF16 && !d.is_narrow())
        {
            let t = Tensor::random(d, &[2, 3], 5);
            let p = dir.join(format!("{d}.npy"));
            write(&p, &t).unwrap();
            assert_eq!(read(&p).unwrap(), t, "{d}");
        }
        std::fs::write(dir.join("bad.npy"), b"\x93NUMPY garbage").unwrap();
        assert!(read(&dir.join("bad.npy")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
