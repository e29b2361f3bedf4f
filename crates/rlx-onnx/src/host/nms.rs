//! `NonMaxSuppression`: per batch and class, the boxes kept by greedy suppression in order
//! of decreasing score, as ONNX Runtime computes it (in f32).

use super::{indices, HostResult};
use rlx_ir::Tensor;

/// The scalar operands and the attribute of `NonMaxSuppression`.
#[derive(Debug, Clone, Copy)]
pub struct NmsParams {
    /// at most this many boxes per batch and class (ONNX's default 0 keeps none)
    pub max_per_class: i64,
    /// a box is suppressed by a kept one when their IoU is above this (in `0..=1`)
    pub iou_threshold: f32,
    /// only boxes scoring above this are candidates
    pub score_threshold: Option<f32>,
    /// boxes are `[x_center, y_center, width, height]` (else `[y1, x1, y2, x2]`, either
    /// corner order)
    pub center_point_box: bool,
}

/// A box as its x and y extents: `(x_min, x_max, y_min, y_max)`.
type Extent = (f32, f32, f32, f32);

fn extent(b: &[f32], center: bool) -> Extent {
    if center {
        let (w, h) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - w, b[0] + w, b[1] - h, b[1] + h)
    } else {
        (
            b[1].min(b[3]),
            b[1].max(b[3]),
            b[0].min(b[2]),
            b[0].max(b[2]),
        )
    }
}

/// True when `a` and `b` overlap by more than `threshold` IoU.
fn suppresses(a: Extent, b: Extent, threshold: f32) -> bool {
    let (x0, x1) = (a.0.max(b.0), a.1.min(b.1));
    let (y0, y1) = (a.2.max(b.2), a.3.min(b.3));
    if x1 <= x0 || y1 <= y0 {
        return false;
    }
    let inter = (x1 - x0) * (y1 - y0);
    let area_a = (a.1 - a.0) * (a.3 - a.2);
    let area_b = (b.1 - b.0) * (b.3 - b.2);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// `NonMaxSuppression(boxes [b, n, 4], scores [b, c, n])`: i64 `[selected, 3]` rows of
/// `(batch, class, box)`, batch by batch, class by class, each in order of selection
/// (higher score first; equal scores by lower box index).
pub fn non_max_suppression(boxes: &Tensor, scores: &Tensor, p: NmsParams) -> HostResult<Tensor> {
    let (bs, ss) = (boxes.shape(), scores.shape());
    if bs.len() != 3 || bs[2] != 4 {
        return Err(format!(
            "boxes must be [num_batches, spatial_dimension, 4], got {bs:?}"
        ));
    }
    if ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(format!(
            "scores must be [num_batches, num_classes, spatial_dimension] = [{}, _, {}] to match boxes {bs:?}, got {ss:?}",
            bs[0], bs[1]
        ));
    }
    if !(0.0..=1.0).contains(&p.iou_threshold) {
        return Err(format!(
            "iou_threshold must be in [0, 1], got {}",
            p.iou_threshold
        ));
    }
    let (n_batches, n_classes, n_boxes) = (ss[0], ss[1], ss[2]);
    let bv: Vec<f32> = boxes.to_f64_vec().into_iter().map(|x| x as f32).collect();
    let sv: Vec<f32> = scores.to_f64_vec().into_iter().map(|x| x as f32).collect();
    let max = p.max_per_class.max(0) as usize;
    let mut rows: Vec<usize> = Vec::new();
    let mut cand: Vec<usize> = Vec::with_capacity(n_boxes);
    let mut kept: Vec<Extent> = Vec::new();
    for b in 0..n_batches {
        let ext: Vec<Extent> = (0..n_boxes)
            .map(|i| extent(&bv[(b * n_boxes + i) * 4..][..4], p.center_point_box))
            .collect();
        for c in 0..n_classes {
            if max == 0 {
                break;
            }
            let s = &sv[(b * n_classes + c) * n_boxes..][..n_boxes];
            cand.clear();
            cand.extend((0..n_boxes).filter(|&i| p.score_threshold.is_none_or(|t| s[i] > t)));
            cand.sort_by(|&i, &j| s[j].total_cmp(&s[i]).then(i.cmp(&j)));
            kept.clear();
            for &i in &cand {
                if kept.len() == max {
                    break;
                }
                if kept.iter().any(|&k| suppresses(k, ext[i], p.iou_threshold)) {
                    continue;
                }
                kept.push(ext[i]);
                rows.extend([b, c, i]);
            }
        }
    }
    indices(&[rows.len() / 3, 3], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn t(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_f64(DType::F32, shape, v).unwrap()
    }

    /// The ONNX spec's `suppress_by_IOU` example: six boxes, one class.
    #[test]
    fn suppress_by_iou_example() {
        let boxes = t(
            &[1, 6, 4],
            &[
                0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0,
                0.0, 10.1, 1.0, 11.1, 0.0, 100.0, 1.0, 101.0,
            ],
        );
        let scores = t(&[1, 1, 6], &[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]);
        let p = NmsParams {
            max_per_class: 3,
            iou_threshold: 0.5,
            score_threshold: Some(0.0),
            center_point_box: false,
        };
        let y = non_max_suppression(&boxes, &scores, p).unwrap();
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(
            y.to_f64_vec(),
            vec![0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0]
        );
        let none = NmsParams {
            max_per_class: 0,
            ..p
        };
        assert_eq!(
            non_max_suppression(&boxes, &scores, none).unwrap().shape(),
            &[0, 3]
        );
        let bad = t(&[1, 6, 3], &[0.0; 18]);
        let e = non_max_suppression(&bad, &scores, p).unwrap_err();
        assert!(e.contains("[1, 6, 3]"), "{e}");
    }
}
