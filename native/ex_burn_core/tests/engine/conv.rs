use super::common::*;
use ex_burn_core::{DType, Op};

fn with(f: impl FnOnce(&mut Op)) -> Op {
    let mut op = conv();
    f(&mut op);
    op
}

fn seq(n: usize) -> Vec<f64> {
    (0..n).map(|i| i as f64).collect()
}

#[test]
fn conv1d_valid_and_strided() {
    let x = f(&[1., 2., 3., 4., 5.], &[1, 1, 5]);
    let k = f(&[1., 0., -1.], &[1, 1, 3]);
    check(
        &ev(conv(), &[&x, &k]),
        &[1, 1, 3],
        DType::F32,
        &[-2., -2., -2.],
    );
    let strided = with(|o| {
        if let Op::Conv { strides, .. } = o {
            *strides = Some(vec![2])
        }
    });
    check(&ev(strided, &[&x, &k]), &[1, 1, 2], DType::F32, &[-2., -2.]);
}

#[test]
fn conv2d_padding_asymmetric_and_negative() {
    let x = f(&seq(9), &[1, 1, 3, 3]);
    let k = f(&[1., 1., 1., 1.], &[1, 1, 2, 2]);
    check(
        &ev(conv(), &[&x, &k]),
        &[1, 1, 2, 2],
        DType::F32,
        &[8., 12., 20., 24.],
    );
    let same = with(|o| {
        if let Op::Conv { padding, .. } = o {
            *padding = Some(vec![(0, 1), (0, 1)])
        }
    });
    check(
        &ev(same, &[&x, &k]),
        &[1, 1, 3, 3],
        DType::F32,
        &[8., 12., 7., 20., 24., 13., 13., 15., 8.],
    );
    let crop = with(|o| {
        if let Op::Conv { padding, .. } = o {
            *padding = Some(vec![(-1, 0), (0, 0)])
        }
    });
    check(&ev(crop, &[&x, &k]), &[1, 1, 1, 2], DType::F32, &[20., 24.]);
}

#[test]
fn dilations() {
    let x = f(&seq(5), &[1, 1, 5]);
    let k = f(&[1., 1.], &[1, 1, 2]);
    let kd = with(|o| {
        if let Op::Conv {
            kernel_dilation, ..
        } = o
        {
            *kernel_dilation = Some(vec![2])
        }
    });
    check(&ev(kd, &[&x, &k]), &[1, 1, 3], DType::F32, &[2., 4., 6.]);
    // input dilation 2 turns [0,1,2,3,4] into [0,_,1,_,2,_,3,_,4]
    let id = with(|o| {
        if let Op::Conv { input_dilation, .. } = o {
            *input_dilation = Some(vec![2])
        }
    });
    check(
        &ev(id, &[&x, &k]),
        &[1, 1, 8],
        DType::F32,
        &[0., 1., 1., 2., 2., 3., 3., 4.],
    );
}

#[test]
fn feature_groups_and_batch_groups() {
    // 2 input channels, 2 output channels, groups of 1 channel each
    let x = f(&[1., 2., 3., 10., 20., 30.], &[1, 2, 3]);
    let k = f(&[1., 1., 2., 2.], &[2, 1, 2]);
    let fg = with(|o| {
        if let Op::Conv {
            feature_group_size, ..
        } = o
        {
            *feature_group_size = 2
        }
    });
    check(
        &ev(fg, &[&x, &k]),
        &[1, 2, 2],
        DType::F32,
        &[3., 5., 60., 100.],
    );
    // batch groups: batch 2 split into 2 groups; output feature g uses batch g
    let xb = f(&[1., 2., 3., 10., 20., 30.], &[2, 1, 3]);
    let kb = f(&[1., 1., 1., -1.], &[2, 1, 2]);
    let bg = with(|o| {
        if let Op::Conv {
            batch_group_size, ..
        } = o
        {
            *batch_group_size = 2
        }
    });
    check(
        &ev(bg, &[&xb, &kb]),
        &[1, 2, 2],
        DType::F32,
        &[3., 5., -10., -10.],
    );
}

#[test]
fn permutations_and_integer_input() {
    // NWC input and WIO kernel, NWC output
    let x = f(&[1., 2., 3., 4., 5.], &[1, 5, 1]);
    let k = s(&[1., 0., -1.], &[3, 1, 1]);
    let op = with(|o| {
        if let Op::Conv {
            input_permutation,
            kernel_permutation,
            output_permutation,
            ..
        } = o
        {
            *input_permutation = Some(vec![0, 2, 1]);
            *kernel_permutation = Some(vec![2, 1, 0]);
            *output_permutation = Some(vec![0, 2, 1]);
        }
    });
    check(&ev(op, &[&x, &k]), &[1, 3, 1], DType::F32, &[-2., -2., -2.]);
}

#[test]
fn channels_last_output_permutation_is_applied_as_nx_does() {
    // NHWC input, 1x1 kernel with 2 filters (scales 1 and 2), NHWC output: Nx transposes the
    // [N, C, H, W] result by the inverse of output_permutation [0, 3, 1, 2].
    let x = f(&[1., 2., 3., 4., 5., 6.], &[1, 3, 2, 1]);
    let k = f(&[1., 2.], &[2, 1, 1, 1]);
    let op = with(|o| {
        if let Op::Conv {
            input_permutation,
            output_permutation,
            ..
        } = o
        {
            *input_permutation = Some(vec![0, 3, 1, 2]);
            *output_permutation = Some(vec![0, 3, 1, 2]);
        }
    });
    check(
        &ev(op, &[&x, &k]),
        &[1, 3, 2, 2],
        DType::F32,
        &[1., 2., 2., 4., 3., 6., 4., 8., 5., 10., 6., 12.],
    );
}

#[test]
fn conv3d_and_errors() {
    let x = f(&[1.; 8], &[1, 1, 2, 2, 2]);
    let k = f(&[1.; 8], &[1, 1, 2, 2, 2]);
    check(&ev(conv(), &[&x, &k]), &[1, 1, 1, 1, 1], DType::F32, &[8.]);
    assert_eq!(
        ev_err(
            conv(),
            &[&f(&[1.; 3], &[1, 1, 3]), &f(&[1.; 8], &[1, 1, 8])]
        ),
        "shape"
    );
    assert_eq!(
        ev_err(conv(), &[&f(&[1.; 3], &[3]), &f(&[1.; 3], &[3])]),
        "shape"
    );
}

/// A 2-D convolution computed naively in f64: `x` `[n, c, h, w]`, `k` `[o, c, kh, kw]`.
#[allow(clippy::too_many_arguments)]
fn naive_conv2d(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    k: &[f64],
    [o, kh, kw]: [usize; 3],
    s: usize,
    p: usize,
    d: usize,
) -> (Vec<f64>, [usize; 4]) {
    let oh = (h + 2 * p - ((kh - 1) * d + 1)) / s + 1;
    let ow = (w + 2 * p - ((kw - 1) * d + 1)) / s + 1;
    let mut out = vec![0.0; n * o * oh * ow];
    for b in 0..n {
        for f in 0..o {
            for y in 0..oh {
                for xx in 0..ow {
                    let mut acc = 0.0;
                    for ch in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * s + i * d) as isize - p as isize;
                                let ix = (xx * s + j * d) as isize - p as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = x[((b * c + ch) * h + iy as usize) * w + ix as usize];
                                acc += xv * k[((f * c + ch) * kh + i) * kw + j];
                            }
                        }
                    }
                    out[((b * o + f) * oh + y) * ow + xx] = acc;
                }
            }
        }
    }
    (out, [n, o, oh, ow])
}

#[test]
fn conv2d_matches_a_naive_convolution_over_strides_padding_dilations_and_tiles() {
    // later cases unfold in several tiles per image (deep patches, many positions)
    // input shape, [features, kernel height, kernel width], stride, padding, dilation
    type Case = ([usize; 4], [usize; 3], usize, usize, usize);
    let cases: &[Case] = &[
        ([1, 1, 5, 5], [1, 3, 3], 1, 0, 1),
        ([3, 2, 7, 6], [4, 3, 2], 1, 1, 1),
        ([2, 3, 9, 9], [5, 3, 3], 2, 1, 1),
        ([2, 4, 8, 9], [3, 2, 3], 1, 2, 2),
        ([4, 5, 6, 6], [2, 1, 1], 2, 0, 1),
        ([64, 1, 12, 12], [8, 3, 3], 1, 0, 1),
        ([2, 3, 11, 10], [4, 3, 3], 3, 2, 2),
        ([2, 150, 24, 24], [6, 3, 3], 1, 1, 1),
        // few output positions under a large kernel (a kernel gradient's shape), which GPUs
        // compute as one product of the windows
        ([3, 16, 40, 40], [8, 37, 37], 1, 1, 1),
        ([2, 5, 30, 30], [4, 14, 14], 2, 0, 2),
        ([4, 6, 20, 20], [3, 20, 20], 1, 0, 1),
    ];
    for (i, &(xs, [o, kh, kw], s, p, d)) in cases.iter().enumerate() {
        let [n, c, h, w] = xs;
        let xv = spread(n * c * h * w, 11 + i as u64, 6, -3);
        let kv = spread(o * c * kh * kw, 29 + i as u64, 4, -2);
        let op = with(|op| {
            if let Op::Conv {
                strides,
                padding,
                kernel_dilation,
                ..
            } = op
            {
                *strides = Some(vec![s, s]);
                *padding = Some(vec![(p as i64, p as i64); 2]);
                *kernel_dilation = Some(vec![d, d]);
            }
        });
        let got = ev(op, &[&f(&xv, &xs), &f(&kv, &[o, c, kh, kw])]);
        let (want, shape) = naive_conv2d(&xv, xs, &kv, [o, kh, kw], s, p, d);
        assert_eq!(got.shape(), shape, "case {i}");
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
        for (g, w) in v(&got).iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * scale, "case {i}: {g} vs {w}");
        }
    }
}

/// [`naive_conv2d`] with `groups` feature groups: each group's channels by its own features.
#[allow(clippy::too_many_arguments)]
fn naive_grouped(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    k: &[f64],
    [o, kh, kw]: [usize; 3],
    (s, p, d): (usize, usize, usize),
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let (cg, og) = (c / groups, o / groups);
    let mut parts = Vec::new();
    for g in 0..groups {
        let xg: Vec<f64> = (0..n)
            .flat_map(|b| {
                let start = (b * c + g * cg) * h * w;
                x[start..start + cg * h * w].to_vec()
            })
            .collect();
        let kg = &k[g * og * cg * kh * kw..(g + 1) * og * cg * kh * kw];
        parts.push(naive_conv2d(&xg, [n, cg, h, w], kg, [og, kh, kw], s, p, d));
    }
    let [_, _, oh, ow] = parts[0].1;
    let mut out = vec![0.0; n * o * oh * ow];
    for (g, (part, _)) in parts.iter().enumerate() {
        for b in 0..n {
            let (from, to) = ((b * og) * oh * ow, (b * o + g * og) * oh * ow);
            out[to..to + og * oh * ow].copy_from_slice(&part[from..from + og * oh * ow]);
        }
    }
    (out, [n, o, oh, ow])
}

/// `op` of `inputs`, which must run as one call of the vendor library where the device has
/// one (counted on this thread; `case` names it in the failure).
fn ev_on_library(op: Op, inputs: &[&ex_burn_core::Tensor], case: usize) -> ex_burn_core::Tensor {
    let before = ex_burn_core::kernels::counts().library_convolutions;
    let got = ev(op, inputs);
    if dev() != ex_burn_core::Device::Cpu && crate::device_kernels::conv_library_available() {
        assert_eq!(
            ex_burn_core::kernels::counts().library_convolutions,
            before + 1,
            "case {case} did not run on the library"
        );
    }
    got
}

/// Convolutions large enough for a GPU vendor library (cuDNN in CUDA builds), against an f64
/// reference of the operands' values as stored: f32 by TF32 tensor cores by default where
/// large, in full f32 with `Precision::Highest` and where small, f16 and bf16 accumulating in
/// f32; channels-last inputs (a strided view), feature groups, strides and dilations. On a
/// GPU with the library each runs there (counted).
#[test]
fn library_convolutions_match_f64_in_every_precision() {
    use ex_burn_core::op::Precision;
    // input [n, c, h, w], [features, kh, kw], (stride, padding, dilation), groups,
    // channels-last input, type, precision, tolerance relative to the largest result
    type Case = (
        [usize; 4],
        [usize; 3],
        (usize, usize, usize),
        usize,
        bool,
        DType,
        Precision,
        f64,
    );
    let big = [8, 64, 32, 32];
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (big, [64, 3, 3], (1, 1, 1), 1, false, DType::F32, Precision::Default, 3e-3),
        (big, [64, 3, 3], (1, 1, 1), 1, false, DType::F32, Precision::Highest, 1e-5),
        (big, [64, 3, 3], (1, 1, 1), 1, true, DType::F32, Precision::Highest, 1e-5),
        (big, [64, 3, 3], (1, 1, 1), 1, false, DType::F16, Precision::Default, 5e-3),
        (big, [64, 3, 3], (1, 1, 1), 1, false, DType::BF16, Precision::Default, 3e-2),
        (big, [128, 1, 1], (2, 0, 1), 1, true, DType::F32, Precision::Default, 3e-3),
        ([4, 32, 20, 18], [48, 3, 3], (2, 2, 2), 4, false, DType::F32, Precision::Default, 1e-5),
        ([2, 12, 9, 11], [6, 2, 3], (1, 1, 1), 3, true, DType::F32, Precision::Highest, 1e-5),
    ];
    for (i, &(xs, [o, kh, kw], (s, p, d), groups, last, dtype, precision, tol)) in
        cases.iter().enumerate()
    {
        let [n, c, h, w] = xs;
        let kshape = [o, c / groups, kh, kw];
        let kv = spread(kshape.iter().product(), 7 + i as u64, 3, -3);
        let k = t(&kv, &kshape, dtype);
        let xv = spread(n * c * h * w, 3 + i as u64, 3, -2);
        // channels last: the tensor [n, h, w, c], read through the input permutation
        let (x, perm) = if last {
            (t(&xv, &[n, h, w, c], dtype), Some(vec![0, 3, 1, 2]))
        } else {
            (t(&xv, &xs, dtype), None)
        };
        // the reference reads the values as stored, in [n, c, h, w] order
        let stored = v(&x);
        let xr: Vec<f64> = if last {
            (0..n * c * h * w)
                .map(|at| {
                    let (b, ch, y, xx) = (at / (c * h * w), at / (h * w) % c, at / w % h, at % w);
                    stored[((b * h + y) * w + xx) * c + ch]
                })
                .collect()
        } else {
            stored
        };
        let (want, shape) = naive_grouped(&xr, xs, &v(&k), [o, kh, kw], (s, p, d), groups);
        let op = with(|op| {
            if let Op::Conv {
                strides,
                padding,
                kernel_dilation,
                feature_group_size,
                input_permutation,
                precision: pr,
                ..
            } = op
            {
                *strides = Some(vec![s, s]);
                *padding = Some(vec![(p as i64, p as i64); 2]);
                *kernel_dilation = Some(vec![d, d]);
                *feature_group_size = groups;
                *input_permutation = perm.clone();
                *pr = precision;
            }
        });
        let got = ev_on_library(op, &[&x, &k], i);
        assert_eq!(got.shape(), shape, "case {i}");
        assert_eq!(got.dtype(), dtype, "case {i}");
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = v(&got)
            .iter()
            .zip(&want)
            .fold(0f64, |e, (g, w)| e.max((g - w).abs()))
            / scale;
        println!(
            "convolution {i} {dtype:?} {precision:?} on {:?}: relative error {err:.2e}",
            dev()
        );
        assert!(err < tol, "case {i}: relative error {err:.2e}");
    }
}

/// Kernel gradients written as Nx's `grad` writes them (the layer's input with batch and
/// features swapped, convolved with the output's gradient likewise swapped, the layer's
/// strides as kernel dilations, its padding made to fit), against an f64 reference of the
/// gradient: on a GPU with a vendor library they run as its kernel-gradient pass (counted).
#[test]
fn kernel_gradients_match_f64() {
    // input [n, c, h, w], kernel [o, kh, kw], (stride, padding, dilation), type, tolerance
    type Case = ([usize; 4], [usize; 3], (usize, usize, usize), DType, f64);
    let cases: &[Case] = &[
        ([4, 8, 20, 20], [6, 3, 3], (2, 1, 1), DType::F32, 1e-5),
        ([8, 16, 28, 28], [32, 3, 3], (1, 1, 1), DType::F32, 1e-5),
        ([2, 3, 30, 30], [8, 7, 7], (2, 3, 1), DType::F32, 1e-5),
        ([4, 16, 17, 19], [8, 1, 1], (1, 0, 1), DType::F32, 1e-5),
        ([4, 8, 24, 24], [8, 3, 3], (1, 2, 2), DType::F32, 1e-5),
        ([8, 16, 28, 28], [32, 3, 3], (1, 1, 1), DType::BF16, 3e-2),
    ];
    for (i, &([n, c, h, w], [o, kh, kw], (s, p, d), dtype, tol)) in cases.iter().enumerate() {
        let span = |k: usize| (k - 1) * d + 1;
        let (oh, ow) = (
            (h + 2 * p - span(kh)) / s + 1,
            (w + 2 * p - span(kw)) / s + 1,
        );
        let x = t(
            &spread(n * c * h * w, 5 + i as u64, 3, -2),
            &[n, c, h, w],
            dtype,
        );
        let g = t(
            &spread(n * o * oh * ow, 9 + i as u64, 3, -3),
            &[n, o, oh, ow],
            dtype,
        );
        let (xv, gv) = (v(&x), v(&g));
        // dW[o, c, u, v] = sum over n, i, j of g[n, o, i, j] x[n, c, i s + u d - p, j s + v d - p]
        let mut want = vec![0.0; o * c * kh * kw];
        for f in 0..o {
            for ch in 0..c {
                for u in 0..kh {
                    for vv in 0..kw {
                        let mut acc = 0.0;
                        for b in 0..n {
                            for y in 0..oh {
                                for xx in 0..ow {
                                    let iy = (y * s + u * d) as isize - p as isize;
                                    let ix = (xx * s + vv * d) as isize - p as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    acc += gv[((b * o + f) * oh + y) * ow + xx]
                                        * xv[((b * c + ch) * h + iy as usize) * w + ix as usize];
                                }
                            }
                        }
                        want[((f * c + ch) * kh + u) * kw + vv] = acc;
                    }
                }
            }
        }
        // the convolution whose result is dW with its first two axes swapped ([c, o, kh, kw]):
        // windows of the input at the gradient's positions, `kh` of them `d` apart
        let hi = |size: usize, k: usize, out: usize| {
            // padding after the input so that exactly `k` windows fit
            ((k - 1) * d + (out - 1) * s + 1) as i64 - (size + p) as i64
        };
        let op = with(|op| {
            if let Op::Conv {
                strides,
                padding,
                kernel_dilation,
                input_permutation,
                kernel_permutation,
                ..
            } = op
            {
                *strides = Some(vec![d, d]);
                *kernel_dilation = Some(vec![s, s]);
                *padding = Some(vec![(p as i64, hi(h, kh, oh)), (p as i64, hi(w, kw, ow))]);
                *input_permutation = Some(vec![1, 0, 2, 3]);
                *kernel_permutation = Some(vec![1, 0, 2, 3]);
            }
        });
        let got = ev_on_library(op, &[&x, &g], i);
        assert_eq!(got.shape(), &[c, o, kh, kw], "case {i}");
        let gv = v(&got);
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let mut err = 0f64;
        for f in 0..o {
            for ch in 0..c {
                for k in 0..kh * kw {
                    let (g, w) = (
                        gv[(ch * o + f) * kh * kw + k],
                        want[(f * c + ch) * kh * kw + k],
                    );
                    err = err.max((g - w).abs() / scale);
                }
            }
        }
        println!(
            "kernel gradient {i} {dtype:?} on {:?}: relative error {err:.2e}",
            dev()
        );
        assert!(err < tol, "case {i}: relative error {err:.2e}");
    }
}
