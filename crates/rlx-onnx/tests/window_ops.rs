//! The window decompositions against plain f64 references on seeded random inputs:
//! `RoiAlign` (avg and max, fixed and adaptive sampling, both coordinate modes, ROIs partly
//! outside the image), `MaxPool`'s Indices (1-D to 3-D, ties, pads, strides, dilations,
//! ceil mode, both storage orders), 3-D `ConvTranspose` and 3-D `LpPool`. The references
//! follow the ONNX reference implementation's loops.

mod support;

use rlx_ir::Tensor;
use rlx_onnx::proto::{AttributeProto, ModelProto, NodeProto};
use rlx_onnx::{load_bytes, ImportOptions};
use std::collections::HashMap;
use std::sync::Arc;
use support::*;

/// A seeded xorshift generator of values in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// `n` values in [lo, hi), rounded to f32.
    fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n)
            .map(|_| (lo + (hi - lo) * self.next()) as f32 as f64)
            .collect()
    }
}

fn dims(s: &[usize]) -> Vec<i64> {
    s.iter().map(|&d| d as i64).collect()
}

fn f32_tensor(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f32(shape, v.iter().map(|&x| x as f32).collect()).unwrap()
}

/// Imports `m` and runs it on the interpreter; the outputs in graph order.
fn run(m: &ModelProto, inputs: Vec<(&str, Tensor)>) -> Vec<Tensor> {
    let m = load_bytes(bytes(m), None, "t.onnx", &ImportOptions::default()).unwrap();
    let params: HashMap<String, Arc<Tensor>> = m
        .params
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    let inputs: HashMap<String, Tensor> = inputs
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
    let out = rlx_interp::run_graph(&m.graph, &inputs, &params).unwrap();
    out.into_iter().map(|(_, t)| t).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Row-major strides.
fn strides(s: &[usize]) -> Vec<usize> {
    let mut st = vec![1; s.len()];
    for i in (0..s.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * s[i + 1];
    }
    st
}

/// The multi-index of flat position `f` in shape `s`.
fn unflat(mut f: usize, s: &[usize]) -> Vec<usize> {
    let mut ix = vec![0; s.len()];
    for i in (0..s.len()).rev() {
        ix[i] = f % s[i];
        f /= s[i];
    }
    ix
}

// ---------------------------------------------------------------- RoiAlign

struct RoiCase {
    max: bool,
    sr: i64,
    half_pixel: bool,
    oh: usize,
    ow: usize,
    scale: f64,
}

/// The ONNX reference's `RoiAlign`, in f64.
fn roi_align_ref(x: &[f64], xs: [usize; 4], rois: &[f64], bidx: &[i64], k: &RoiCase) -> Vec<f64> {
    let [_, c, h, w] = xs;
    let (hf, wf) = (h as f64, w as f64);
    let off = if k.half_pixel { 0.5 } else { 0.0 };
    let mut out = Vec::new();
    for (r, roi) in rois.chunks(4).enumerate() {
        let sw = roi[0] * k.scale - off;
        let sh = roi[1] * k.scale - off;
        let mut rw = roi[2] * k.scale - off - sw;
        let mut rh = roi[3] * k.scale - off - sh;
        if !k.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / k.oh as f64, rw / k.ow as f64);
        let grid = |len: f64, out: usize| -> usize {
            if k.sr > 0 {
                k.sr as usize
            } else {
                (len / out as f64).ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(rh, k.oh), grid(rw, k.ow));
        let count = (gh * gw).max(1) as f64;
        let b = bidx[r] as usize;
        for ci in 0..c {
            let plane = &x[(b * c + ci) * h * w..][..h * w];
            for ph in 0..k.oh {
                for pw in 0..k.ow {
                    let mut acc: Option<f64> = None;
                    for iy in 0..gh {
                        let y0 = sh + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                        for ix in 0..gw {
                            let x0 = sw + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                            let mut taps = [0.0; 4];
                            if !(y0 < -1.0 || y0 > hf || x0 < -1.0 || x0 > wf) {
                                let (mut y, mut xx) = (y0.max(0.0), x0.max(0.0));
                                let (mut yl, mut xl) = (y as usize, xx as usize);
                                let (yh, xh);
                                if yl >= h - 1 {
                                    yl = h - 1;
                                    yh = h - 1;
                                    y = yl as f64;
                                } else {
                                    yh = yl + 1;
                                }
                                if xl >= w - 1 {
                                    xl = w - 1;
                                    xh = w - 1;
                                    xx = xl as f64;
                                } else {
                                    xh = xl + 1;
                                }
                                let (ly, lx) = (y - yl as f64, xx - xl as f64);
                                let (hy, hx) = (1.0 - ly, 1.0 - lx);
                                taps = [
                                    hy * hx * plane[yl * w + xl],
                                    hy * lx * plane[yl * w + xh],
                                    ly * hx * plane[yh * w + xl],
                                    ly * lx * plane[yh * w + xh],
                                ];
                            }
                            let v = if k.max {
                                taps.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                            } else {
                                taps.iter().sum()
                            };
                            acc = Some(match acc {
                                None => v,
                                Some(a) if k.max => a.max(v),
                                Some(a) => a + v,
                            });
                        }
                    }
                    let a = acc.unwrap_or(0.0);
                    out.push(if k.max { a } else { a / count });
                }
            }
        }
    }
    out
}

fn roi_model(k: &RoiCase, xs: [usize; 4], nr: usize, rois_init: Option<&[f64]>) -> ModelProto {
    let mut n = node("RoiAlign", "r", &["x", "rois", "b"], &["y"]);
    n.attribute.extend([
        string_attr("mode", if k.max { "max" } else { "avg" }),
        int_attr("output_height", k.oh as i64),
        int_attr("output_width", k.ow as i64),
        int_attr("sampling_ratio", k.sr),
        float_attr("spatial_scale", k.scale as f32),
        string_attr(
            "coordinate_transformation_mode",
            if k.half_pixel {
                "half_pixel"
            } else {
                "output_half_pixel"
            },
        ),
    ]);
    let mut inputs = vec![value("x", 1, &dims(&xs)), value("b", 7, &[nr as i64])];
    let mut inits = vec![];
    match rois_init {
        Some(r) => {
            let v: Vec<f32> = r.iter().map(|&x| x as f32).collect();
            inits.push(f32_init("rois", &[nr as i64, 4], &v));
        }
        None => inputs.push(value("rois", 1, &[nr as i64, 4])),
    }
    model(
        vec![n],
        inputs,
        vec![value(
            "y",
            1,
            &[nr as i64, xs[1] as i64, k.oh as i64, k.ow as i64],
        )],
        inits,
    )
}

#[test]
fn roi_align_matches_reference() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let xs = [2, 3, 7, 9];
    let x = rng.vec(xs.iter().product(), -2.0, 2.0);
    // ROIs in image coordinates (scale 0.5): inside, partly outside, tiny, inverted
    let nr = 6;
    let mut rois = Vec::new();
    for _ in 0..4 {
        let (x1, y1) = (rng.next() * 16.0 - 2.0, rng.next() * 12.0 - 2.0);
        rois.extend([
            x1,
            y1,
            x1 + 1.0 + rng.next() * 14.0,
            y1 + 1.0 + rng.next() * 12.0,
        ]);
    }
    rois.extend([3.0, 4.0, 3.25, 4.5]);
    rois.extend([10.0, 8.0, 6.0, 5.0]);
    let rois: Vec<f64> = rois.iter().map(|&v| v as f32 as f64).collect();
    let bidx: Vec<i64> = (0..nr).map(|i| (i % 2) as i64).collect();
    let bt = Tensor::from_f64(
        rlx_ir::DType::I64,
        &[nr],
        &bidx.iter().map(|&b| b as f64).collect::<Vec<_>>(),
    )
    .unwrap();
    for max in [false, true] {
        for sr in [0, 1, 2, 3] {
            for half_pixel in [false, true] {
                let k = RoiCase {
                    max,
                    sr,
                    half_pixel,
                    oh: 3,
                    ow: 2,
                    scale: 0.5,
                };
                let want = roi_align_ref(&x, xs, &rois, &bidx, &k);
                let what = format!("max {max} sampling_ratio {sr} half_pixel {half_pixel}");
                // adaptive sampling needs the ROIs at import; fixed sampling takes them at run time
                let got = if sr == 0 {
                    let m = roi_model(&k, xs, nr, Some(&rois));
                    run(&m, vec![("x", f32_tensor(&xs, &x)), ("b", bt.clone())])
                } else {
                    let m = roi_model(&k, xs, nr, None);
                    run(
                        &m,
                        vec![
                            ("x", f32_tensor(&xs, &x)),
                            ("rois", f32_tensor(&[nr, 4], &rois)),
                            ("b", bt.clone()),
                        ],
                    )
                };
                assert_close(&got[0].to_f64_vec(), &want, 1e-5, &what);
            }
        }
    }
}

#[test]
fn roi_align_adaptive_sampling_with_runtime_rois_is_a_clear_error() {
    let k = RoiCase {
        max: false,
        sr: 0,
        half_pixel: true,
        oh: 2,
        ow: 2,
        scale: 1.0,
    };
    let m = roi_model(&k, [1, 1, 4, 4], 2, None);
    let Err(e) = load_bytes(bytes(&m), None, "t.onnx", &ImportOptions::default()) else {
        panic!("adaptive sampling with run-time rois was accepted");
    };
    let msg = e.to_string();
    assert!(msg.contains("sampling_ratio 0"), "{msg}");
}

#[test]
fn roi_align_bad_attributes_are_errors() {
    let k = RoiCase {
        max: false,
        sr: 2,
        half_pixel: true,
        oh: 2,
        ow: 2,
        scale: 1.0,
    };
    for (name, bad) in [
        ("mode", string_attr("mode", "median")),
        ("output_height", int_attr("output_height", 0)),
        ("sampling_ratio", int_attr("sampling_ratio", -1)),
        (
            "coordinate_transformation_mode",
            string_attr("coordinate_transformation_mode", "asymmetric"),
        ),
    ] {
        let mut m = roi_model(&k, [1, 1, 4, 4], 2, None);
        let g = m.graph.as_mut().unwrap();
        let n: &mut NodeProto = &mut g.node[0];
        n.attribute.retain(|a| a.name() != name);
        n.attribute.push(bad);
        let e = load_bytes(bytes(&m), None, "t.onnx", &ImportOptions::default());
        assert!(e.is_err(), "{name} accepted");
    }
}

// ---------------------------------------------------------------- pooling windows

struct Win {
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dil: Vec<usize>,
    /// begin pads then end pads
    pads: Vec<usize>,
    ceil: bool,
}

impl Win {
    fn attrs(&self) -> Vec<AttributeProto> {
        vec![
            ints_attr("kernel_shape", &dims(&self.kernel)),
            ints_attr("strides", &dims(&self.stride)),
            ints_attr("dilations", &dims(&self.dil)),
            ints_attr("pads", &dims(&self.pads)),
            int_attr("ceil_mode", i64::from(self.ceil)),
        ]
    }

    /// Output length along spatial dim `i` of an input of length `n` (ONNX's rule: a
    /// ceil-mode window must start inside the input or its begin padding).
    fn out(&self, i: usize, n: usize) -> usize {
        let nsp = self.kernel.len();
        let (pb, pe) = (self.pads[i], self.pads[nsp + i]);
        let span = self.dil[i] * (self.kernel[i] - 1) + 1;
        let num = n + pb + pe - span;
        let s = self.stride[i];
        let mut o = if self.ceil { num.div_ceil(s) } else { num / s } + 1;
        if self.ceil && (o - 1) * s >= n + pb {
            o -= 1;
        }
        o
    }

    /// Visits the in-range input positions of the window of output position `o`, in scan
    /// order.
    fn taps(&self, o: &[usize], sp: &[usize], mut f: impl FnMut(&[usize])) {
        let nsp = self.kernel.len();
        let count: usize = self.kernel.iter().product();
        'tap: for t in 0..count {
            let t = unflat(t, &self.kernel);
            let mut p = vec![0; nsp];
            for i in 0..nsp {
                let q = (o[i] * self.stride[i] + t[i] * self.dil[i]) as i64 - self.pads[i] as i64;
                if q < 0 || q >= sp[i] as i64 {
                    continue 'tap;
                }
                p[i] = q as usize;
            }
            f(&p);
        }
    }
}

/// Max pooling with indices, as the ONNX reference (first maximum in scan order).
fn max_pool_ref(
    x: &[f64],
    xs: &[usize],
    w: &Win,
    column_major: bool,
) -> (Vec<usize>, Vec<f64>, Vec<i64>) {
    let sp = &xs[2..];
    let nsp = sp.len();
    let os: Vec<usize> = (0..nsp).map(|i| w.out(i, sp[i])).collect();
    let mut yshape = xs[..2].to_vec();
    yshape.extend(&os);
    let plane: usize = sp.iter().product();
    let st = strides(sp);
    let mult: Vec<usize> = (0..nsp)
        .map(|i| {
            if column_major {
                sp[..i].iter().product()
            } else {
                st[i]
            }
        })
        .collect();
    let (mut y, mut ind) = (Vec::new(), Vec::new());
    for f in 0..yshape.iter().product() {
        let ix = unflat(f, &yshape);
        let pl = ix[0] * xs[1] + ix[1];
        let mut best: Option<(f64, usize)> = None;
        w.taps(&ix[2..], sp, |p| {
            let v = x[pl * plane + p.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()];
            if best.is_none_or(|(b, _)| v > b) {
                best = Some((v, p.iter().zip(&mult).map(|(a, b)| a * b).sum()));
            }
        });
        let (v, off) = best.expect("every window holds an input position");
        y.push(v);
        ind.push((pl * plane + off) as i64);
    }
    (yshape, y, ind)
}

#[test]
fn max_pool_indices_match_reference() {
    let mut rng = Rng(0x5eed_0000_0000_0002);
    let cases: Vec<(Vec<usize>, Win)> = vec![
        (
            vec![2, 3, 11],
            Win {
                kernel: vec![3],
                stride: vec![2],
                dil: vec![1],
                pads: vec![1, 1],
                ceil: false,
            },
        ),
        (
            vec![1, 2, 7, 8],
            Win {
                kernel: vec![3, 2],
                stride: vec![2, 3],
                dil: vec![1, 2],
                pads: vec![1, 0, 2, 1],
                ceil: true,
            },
        ),
        (
            vec![2, 2, 5, 6],
            Win {
                kernel: vec![2, 2],
                stride: vec![1, 1],
                dil: vec![1, 1],
                pads: vec![0, 0, 0, 0],
                ceil: false,
            },
        ),
        (
            vec![1, 2, 5, 4, 6],
            Win {
                kernel: vec![2, 3, 2],
                stride: vec![2, 1, 2],
                dil: vec![1, 1, 2],
                pads: vec![1, 1, 0, 0, 1, 1],
                ceil: false,
            },
        ),
    ];
    for (xs, w) in &cases {
        // few distinct values, so windows hold ties
        let x: Vec<f64> = rng
            .vec(xs.iter().product(), 0.0, 4.0)
            .iter()
            .map(|v| v.floor())
            .collect();
        for column_major in [false, true] {
            if column_major && xs.len() == 3 {
                continue;
            }
            let (yshape, want_y, want_i) = max_pool_ref(&x, xs, w, column_major);
            let mut n = node("MaxPool", "p", &["x"], &["y", "i"]);
            n.attribute.extend(w.attrs());
            n.attribute
                .push(int_attr("storage_order", i64::from(column_major)));
            let m = model(
                vec![n],
                vec![value("x", 1, &dims(xs))],
                vec![value("y", 1, &dims(&yshape)), value("i", 7, &dims(&yshape))],
                vec![],
            );
            let out = run(&m, vec![("x", f32_tensor(xs, &x))]);
            let what = format!("{xs:?} column_major {column_major}");
            assert_eq!(out[0].shape(), &yshape[..], "{what}");
            assert_close(&out[0].to_f64_vec(), &want_y, 0.0, &what);
            let got_i: Vec<i64> = out[1].to_f64_vec().iter().map(|&v| v as i64).collect();
            assert_eq!(got_i, want_i, "{what}");
        }
    }
}

#[test]
fn max_pool_bad_storage_order_is_an_error() {
    let mut n = node("MaxPool", "p", &["x"], &["y", "i"]);
    n.attribute.push(ints_attr("kernel_shape", &[2, 2]));
    n.attribute.push(int_attr("storage_order", 2));
    let m = model(
        vec![n],
        vec![value("x", 1, &[1, 1, 4, 4])],
        vec![value("y", 1, &[1, 1, 3, 3]), value("i", 7, &[1, 1, 3, 3])],
        vec![],
    );
    assert!(load_bytes(bytes(&m), None, "t.onnx", &ImportOptions::default()).is_err());
}

#[test]
fn lp_pool_3d_matches_reference() {
    let mut rng = Rng(0x5eed_0000_0000_0003);
    let xs = vec![1, 2, 5, 6, 4];
    let x = rng.vec(xs.iter().product(), -1.5, 1.5);
    for (w, p) in [
        (
            Win {
                kernel: vec![2, 2, 2],
                stride: vec![1, 1, 1],
                dil: vec![1, 1, 1],
                pads: vec![0; 6],
                ceil: false,
            },
            2,
        ),
        (
            Win {
                kernel: vec![3, 2, 2],
                stride: vec![2, 2, 1],
                dil: vec![1, 2, 1],
                pads: vec![1, 0, 1, 1, 1, 0],
                ceil: true,
            },
            3,
        ),
    ] {
        let sp = &xs[2..];
        let os: Vec<usize> = (0..3).map(|i| w.out(i, sp[i])).collect();
        let mut yshape = xs[..2].to_vec();
        yshape.extend(&os);
        let plane: usize = sp.iter().product();
        let st = strides(sp);
        let want: Vec<f64> = (0..yshape.iter().product())
            .map(|f| {
                let ix = unflat(f, &yshape);
                let pl = ix[1];
                let mut s = 0.0;
                w.taps(&ix[2..], sp, |q| {
                    let v: f64 =
                        x[pl * plane + q.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()];
                    s += v.abs().powi(p);
                });
                s.powf(1.0 / p as f64)
            })
            .collect();
        let mut n = node("LpPool", "p", &["x"], &["y"]);
        n.attribute.extend(w.attrs());
        n.attribute.push(int_attr("p", p as i64));
        let m = model(
            vec![n],
            vec![value("x", 1, &dims(&xs))],
            vec![value("y", 1, &dims(&yshape))],
            vec![],
        );
        let out = run(&m, vec![("x", f32_tensor(&xs, &x))]);
        assert_eq!(out[0].shape(), &yshape[..], "p {p}");
        assert_close(&out[0].to_f64_vec(), &want, 1e-5, &format!("LpPool p {p}"));
    }
}

// ---------------------------------------------------------------- ConvTranspose

#[test]
fn conv_transpose_3d_matches_reference() {
    let mut rng = Rng(0x5eed_0000_0000_0004);
    let (nb, ci, g, cog) = (2, 4, 2, 3);
    let sp = [3, 4, 2];
    let k = [2, 3, 2];
    let (st, dl, out_pad) = ([2, 1, 3], [1, 2, 1], [1, 0, 2]);
    let pads = [1, 0, 1, 0, 2, 1]; // begin d, h, w; end d, h, w
    let xs = [nb, ci, sp[0], sp[1], sp[2]];
    let ws = [ci, cog, k[0], k[1], k[2]];
    let x = rng.vec(xs.iter().product(), -1.0, 1.0);
    let w = rng.vec(ws.iter().product(), -1.0, 1.0);
    let bias = rng.vec(g * cog, -1.0, 1.0);
    let os: Vec<usize> = (0..3)
        .map(|i| st[i] * (sp[i] - 1) + out_pad[i] + (k[i] - 1) * dl[i] + 1 - pads[i] - pads[3 + i])
        .collect();
    let ys = [nb, g * cog, os[0], os[1], os[2]];
    let mut want = vec![0.0; ys.iter().product()];
    for (f, y) in want.iter_mut().enumerate() {
        *y = bias[unflat(f, &ys)[1]];
    }
    let (wst, yst) = (strides(&ws), strides(&ys));
    let cig = ci / g;
    for (f, &xv) in x.iter().enumerate() {
        let ix = unflat(f, &xs);
        let grp = ix[1] / cig;
        for oc in 0..cog {
            for t in 0..k.iter().product() {
                let t = unflat(t, &k);
                let mut o = [0usize; 3];
                let mut inside = true;
                for i in 0..3 {
                    let q = (ix[2 + i] * st[i] + t[i] * dl[i]) as i64 - pads[i] as i64;
                    inside &= q >= 0 && q < os[i] as i64;
                    o[i] = q.max(0) as usize;
                }
                if !inside {
                    continue;
                }
                let wi =
                    ix[1] * wst[0] + oc * wst[1] + t[0] * wst[2] + t[1] * wst[3] + t[2] * wst[4];
                let yi = ix[0] * yst[0]
                    + (grp * cog + oc) * yst[1]
                    + o[0] * yst[2]
                    + o[1] * yst[3]
                    + o[2] * yst[4];
                want[yi] += xv * w[wi];
            }
        }
    }
    let mut n = node("ConvTranspose", "ct", &["x", "w", "b"], &["y"]);
    n.attribute.extend([
        int_attr("group", g as i64),
        ints_attr("strides", &dims(&st)),
        ints_attr("dilations", &dims(&dl)),
        ints_attr("output_padding", &dims(&out_pad)),
        ints_attr("pads", &dims(&pads)),
    ]);
    let m = model(
        vec![n],
        vec![value("x", 1, &dims(&xs))],
        vec![value("y", 1, &dims(&ys))],
        vec![
            f32_init(
                "w",
                &dims(&ws),
                &w.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            ),
            f32_init(
                "b",
                &[(g * cog) as i64],
                &bias.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            ),
        ],
    );
    let out = run(&m, vec![("x", f32_tensor(&xs, &x))]);
    assert_eq!(out[0].shape(), &ys[..]);
    assert_close(&out[0].to_f64_vec(), &want, 1e-5, "ConvTranspose 3-D");
}
