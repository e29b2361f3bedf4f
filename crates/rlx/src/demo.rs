//! The bundled demo: a small CNN trained on scikit-learn's 8×8 digits
//! (`scripts/train_demo.py`), stored as safetensors in `assets/demo/` and compiled into the
//! binary, so `rlx run` needs no download.

use rlx_ir::{
    Conv2dParams, DType, Dim, Graph, IrError, Pool2dParams, PoolKind, Shape, Tensor, TensorData,
};
use safetensors::SafeTensors;

/// The trained weights (safetensors).
pub const WEIGHTS: &[u8] = include_bytes!("../../../assets/demo/digits_cnn.safetensors");
/// 360 held-out images, their labels and reference logits computed with numpy (safetensors).
pub const TEST_SET: &[u8] = include_bytes!("../../../assets/demo/digits_test.safetensors");

/// Why the bundled files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The safetensors container is malformed.
    #[error("bundled demo file is malformed: {0}")]
    Format(String),
    /// A tensor is missing or has the wrong dtype or shape.
    #[error("bundled demo tensor `{name}`: {message}")]
    Tensor {
        /// tensor name
        name: String,
        /// what is wrong
        message: String,
    },
    /// Building the graph failed.
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// The demo's weight names with their shapes, in graph order.
pub const PARAMS: [(&str, &[usize]); 8] = [
    ("conv1.weight", &[8, 1, 3, 3]),
    ("conv1.bias", &[8]),
    ("conv2.weight", &[16, 8, 3, 3]),
    ("conv2.bias", &[16]),
    ("fc1.weight", &[64, 256]),
    ("fc1.bias", &[64]),
    ("fc2.weight", &[10, 64]),
    ("fc2.bias", &[10]),
];

/// Builds the CNN: conv(1→8)+relu, maxpool 2, conv(8→16)+relu, flatten, fc 256→64+relu,
/// fc 64→10. Input `images` is `f32[batch,1,8,8]`; output `logits` is `f32[batch,10]`.
pub fn build_graph() -> Result<Graph, IrError> {
    let mut g = Graph::new();
    let batch = Dim::sym("batch");
    let x = g.input(
        "images",
        DType::F32,
        Shape(vec![batch.clone(), 1.into(), 8.into(), 8.into()]),
    );
    let p: Vec<_> = PARAMS
        .iter()
        .map(|(n, s)| g.param(n, DType::F32, Shape::of(s)))
        .collect();
    let same = Conv2dParams {
        pads: [1; 4],
        ..Conv2dParams::default()
    };
    let c1 = g.conv2d(x, p[0], Some(p[1]), same)?;
    let r1 = g.relu(c1)?;
    let pool = Pool2dParams {
        kind: PoolKind::Max,
        kernel: [2, 2],
        stride: [2, 2],
        pads: [0; 4],
        dilation: [1, 1],
        count_include_pad: false,
        ceil_mode: false,
    };
    let m1 = g.pool2d(r1, pool)?;
    let c2 = g.conv2d(m1, p[2], Some(p[3]), same)?;
    let r2 = g.relu(c2)?;
    let flat = g.reshape(r2, Shape(vec![batch, 256.into()]))?;
    let w1t = g.transpose(p[4], &[1, 0])?;
    let h1 = g.matmul(flat, w1t)?;
    let h1 = g.add(h1, p[5])?;
    let h1 = g.relu(h1)?;
    let w2t = g.transpose(p[6], &[1, 0])?;
    let logits = g.matmul(h1, w2t)?;
    let logits = g.add(logits, p[7])?;
    g.set_name(logits, "logits");
    g.output("logits", logits);
    Ok(g)
}

/// The trained weights by name.
pub fn weights() -> Result<Vec<(String, Tensor)>, DemoError> {
    let st = parse(WEIGHTS)?;
    PARAMS
        .iter()
        .map(|(n, s)| Ok((n.to_string(), read(&st, n, DType::F32, s)?)))
        .collect()
}

/// The held-out set: images `f32[360,1,8,8]`, labels `i64[360]`, reference logits `f32[360,10]`.
pub fn test_set() -> Result<(Tensor, Tensor, Tensor), DemoError> {
    let st = parse(TEST_SET)?;
    Ok((
        read(&st, "images", DType::F32, &[360, 1, 8, 8])?,
        read(&st, "labels", DType::I64, &[360])?,
        read(&st, "reference_logits", DType::F32, &[360, 10])?,
    ))
}

fn parse(bytes: &[u8]) -> Result<SafeTensors<'_>, DemoError> {
    SafeTensors::deserialize(bytes).map_err(|e| DemoError::Format(e.to_string()))
}

fn read(
    st: &SafeTensors<'_>,
    name: &str,
    dtype: DType,
    shape: &[usize],
) -> Result<Tensor, DemoError> {
    let err = |message: String| DemoError::Tensor {
        name: name.into(),
        message,
    };
    let view = st.tensor(name).map_err(|e| err(e.to_string()))?;
    if view.shape() != shape {
        return Err(err(format!("shape {:?}, expected {shape:?}", view.shape())));
    }
    let data = TensorData::from_le_bytes(dtype, view.data()).ok_or_else(|| {
        err(format!(
            "byte length {} is not a multiple of {dtype}",
            view.data().len()
        ))
    })?;
    if data.len() != shape.iter().product::<usize>()
        || view.dtype().bitsize() != dtype.size_bytes() * 8
    {
        return Err(err(format!("dtype {:?}, expected {dtype}", view.dtype())));
    }
    Tensor::new(shape.to_vec(), data).map_err(|e| err(e.to_string()))
}

/// Index of the largest logit in each row.
pub fn argmax_rows(logits: &Tensor) -> Vec<usize> {
    let cols = logits.shape().last().copied().unwrap_or(1).max(1);
    let v = logits.to_f64_vec();
    v.chunks(cols)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &x)| {
                    if x > bv {
                        (i, x)
                    } else {
                        (bi, bv)
                    }
                })
                .0
        })
        .collect()
}
