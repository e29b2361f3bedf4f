//! ONNX element types (`TensorProto.DataType`) and how they map onto [`DType`].

use rlx_ir::DType;

/// The name of an ONNX element type code, for errors.
pub fn onnx_type_name(code: i32) -> &'static str {
    match code {
        0 => "undefined",
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17 => "float8e4m3fn",
        18 => "float8e4m3fnuz",
        19 => "float8e5m2",
        20 => "float8e5m2fnuz",
        21 => "uint4",
        22 => "int4",
        23 => "float4e2m1",
        24 => "float8e8m0",
        25 => "uint2",
        26 => "int2",
        _ => "unknown",
    }
}

/// The IR dtype of an ONNX element type, or a sentence saying why there is none.
///
/// # Errors
/// Element types the IR does not have (strings, complex).
pub fn to_dtype(code: i32) -> Result<DType, String> {
    Ok(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        17 => DType::F8E4M3FN,
        18 => DType::F8E4M3FNUZ,
        19 => DType::F8E5M2,
        20 => DType::F8E5M2FNUZ,
        21 => DType::U4,
        22 => DType::I4,
        23 => DType::F4E2M1,
        24 => DType::F8E8M0,
        25 => DType::U2,
        26 => DType::I2,
        _ => {
            return Err(format!(
                "element type {} ({code}) is not supported by the IR",
                onnx_type_name(code)
            ))
        }
    })
}

/// The ONNX element type code of an IR dtype.
pub fn to_onnx(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::BF16 => 16,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::U32 => 12,
        DType::U64 => 13,
        DType::F8E4M3FN => 17,
        DType::F8E4M3FNUZ => 18,
        DType::F8E5M2 => 19,
        DType::F8E5M2FNUZ => 20,
        DType::U4 => 21,
        DType::I4 => 22,
        DType::F4E2M1 => 23,
        DType::F8E8M0 => 24,
        DType::U2 => 25,
        DType::I2 => 26,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_ir_dtype() {
        for d in DType::ALL {
            assert_eq!(to_dtype(to_onnx(d)), Ok(d));
        }
        assert!(to_dtype(8).unwrap_err().contains("string"));
    }
}
