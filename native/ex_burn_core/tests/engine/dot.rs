use super::common::*;
use ex_burn_core::{DType, Op};

fn dot(ca: Vec<usize>, ba: Vec<usize>, cb: Vec<usize>, bb: Vec<usize>) -> Op {
    Op::Dot {
        contract_a: ca,
        batch_a: ba,
        contract_b: cb,
        batch_b: bb,
        out: None,
        precision: Default::default(),
    }
}

#[test]
fn matrix_product() {
    let a = f(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = f(&[7., 8., 9., 10., 11., 12.], &[3, 2]);
    check(
        &ev(dot(vec![1], vec![], vec![0], vec![]), &[&a, &b]),
        &[2, 2],
        DType::F32,
        &[58., 64., 139., 154.],
    );
}

#[test]
fn vector_inner_and_outer() {
    let a = f(&[1., 2., 3.], &[3]);
    check(
        &ev(dot(vec![0], vec![], vec![0], vec![]), &[&a, &a]),
        &[],
        DType::F32,
        &[14.],
    );
    check(
        &ev(
            dot(vec![], vec![], vec![], vec![]),
            &[&a, &f(&[1., 10.], &[2])],
        ),
        &[3, 2],
        DType::F32,
        &[1., 10., 2., 20., 3., 30.],
    );
}

#[test]
fn contraction_over_non_trailing_axes_with_batch() {
    // a: [2(batch), 3(contract), 2(free)], b: [2(batch), 3(contract)]
    let a = f(&(1..=12).map(|i| i as f64).collect::<Vec<_>>(), &[2, 3, 2]);
    let b = f(&[1., 0., 1., 2., 1., 0.], &[2, 3]);
    // batch 0: a0 = [[1,2],[3,4],[5,6]], b0 = [1,0,1] -> [6, 8]
    // batch 1: a1 = [[7,8],[9,10],[11,12]], b1 = [2,1,0] -> [23, 26]
    check(
        &ev(dot(vec![1], vec![0], vec![1], vec![0]), &[&a, &b]),
        &[2, 2],
        DType::F32,
        &[6., 8., 23., 26.],
    );
}

#[test]
fn integer_and_mixed_types() {
    let a = s(&[1., 2., 3., 4.], &[2, 2]);
    let b = t(&[1., 1., 1., 1.], &[2, 2], DType::S8);
    check(
        &ev(dot(vec![1], vec![], vec![0], vec![]), &[&a, &b]),
        &[2, 2],
        DType::S64,
        &[3., 3., 7., 7.],
    );
    let fb = t(&[0.5, 0.5, 0.5, 0.5], &[2, 2], wide_float());
    check(
        &ev(dot(vec![1], vec![], vec![0], vec![]), &[&a, &fb]),
        &[2, 2],
        wide_float(),
        &[1.5, 1.5, 3.5, 3.5],
    );
}

#[test]
fn empty_contraction_is_zero_and_mismatch_is_a_shape_error() {
    let a = f(&[], &[2, 0]);
    let b = f(&[], &[0, 3]);
    check(
        &ev(dot(vec![1], vec![], vec![0], vec![]), &[&a, &b]),
        &[2, 3],
        DType::F32,
        &[0.; 6],
    );
    assert_eq!(
        ev_err(
            dot(vec![1], vec![], vec![0], vec![]),
            &[&f(&[1.; 6], &[2, 3]), &f(&[1.; 4], &[2, 2])]
        ),
        "shape"
    );
}

#[test]
fn highest_precision_matches_default_on_the_cpu_and_f64_reference_elsewhere() {
    let a = f(&[1.1, 2.2, 3.3, 4.4, 5.5, 6.6], &[2, 3]);
    let b = f(&[0.7, 0.8, 0.9, 1.0, 1.1, 1.2], &[3, 2]);
    let hi = v(&ev(
        matmul_op(ex_burn_core::op::Precision::Highest),
        &[&a, &b],
    ));
    let want = [
        1.1 * 0.7 + 2.2 * 0.9 + 3.3 * 1.1,
        1.1 * 0.8 + 2.2 + 3.3 * 1.2,
        4.4 * 0.7 + 5.5 * 0.9 + 6.6 * 1.1,
        4.4 * 0.8 + 5.5 + 6.6 * 1.2,
    ];
    for (g, w) in hi.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{hi:?}");
    }
}

#[test]
fn f64_and_integer_products_on_every_device() {
    let a = t(&[1., 2., 3., 4.], &[2, 2], wide_float());
    let i = t(&[1., 2., 3., 4.], &[2, 2], DType::S32);
    let mm = Op::Dot {
        contract_a: vec![1],
        batch_a: vec![],
        contract_b: vec![0],
        batch_b: vec![],
        out: None,
        precision: Default::default(),
    };
    check(
        &ev(mm.clone(), &[&a, &a]),
        &[2, 2],
        wide_float(),
        &[7., 10., 15., 22.],
    );
    check(
        &ev(mm, &[&i, &i]),
        &[2, 2],
        DType::S32,
        &[7., 10., 15., 22.],
    );
}

/// A product below the GPU vendor library's threshold for `dot` (Burn's own matmul, as native
/// training and convolutions call it), default precision, against an f64 reference: on CUDA
/// with cuBLAS present it runs on cuBLAS (no kernel compilation) and accumulates in full f32,
/// not TF32 (a TF32 product of these operands is off by ~1e-3).
#[test]
fn small_products_run_in_full_f32() {
    use ex_burn_core::op::Precision;
    let (m, k, n) = (48, 40, 36);
    let (av, bv) = matrix_pair(m, k, n);
    let want = f64_product(&av, &bv, m, k, n);
    let op = matmul_op(Precision::Default);
    let (a, b) = (f(&av, &[m, k]), f(&bv, &[k, n]));
    let before = library_products();
    let got = v(&ev(op, &[&a, &b]));
    if dev() != ex_burn_core::Device::Cpu && crate::device_kernels::library_available() {
        assert_eq!(library_products(), before + 1, "not on cuBLAS");
    }
    let scale = want.iter().fold(0f64, |a, &w| a.max(w.abs()));
    let err = got
        .iter()
        .zip(&want)
        .fold(0f64, |e, (g, w)| e.max((g - w).abs()))
        / scale;
    println!("small product on {:?}: relative error {err:.2e}", dev());
    assert!(err < 2e-6, "relative error {err:.2e}");
}

/// Batched products large enough for a GPU vendor library (cuBLAS in CUDA builds), in every
/// float type and precision, against an f64 reference: TF32 by default, full f32 with
/// `Precision::Highest`, f16 and bf16 accumulating in f32; operands stored as given or
/// transposed (contracting the other axis of each); made on this thread or on another one
/// (whose CubeCL stream owns them). On CUDA with cuBLAS present each one must have run on
/// cuBLAS, ordered by events exactly when an operand came from another thread.
#[test]
fn large_batched_products_match_an_f64_reference_in_every_precision() {
    use ex_burn_core::op::Precision;
    crate::device_kernels::set_min_work(1 << 20);
    let (nb, m, k, n) = (3, 96, 160, 128);
    let av: Vec<f64> = (0..nb * m * k)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let bv: Vec<f64> = (0..nb * k * n)
        .map(|i| ((i * 104_729) % 997) as f64 / 498.5 - 1.0)
        .collect();
    let mut want = vec![0f64; nb * m * n];
    for b in 0..nb {
        for i in 0..m {
            for j in 0..n {
                want[(b * m + i) * n + j] = (0..k)
                    .map(|p| av[(b * m + i) * k + p] * bv[(b * k + p) * n + j])
                    .sum();
            }
        }
    }
    let scale = want.iter().fold(0f64, |a, &w| a.max(w.abs()));
    let cases = [
        (DType::F32, Precision::Default, 5e-3),
        (DType::F32, Precision::Highest, 2e-6),
        (DType::F16, Precision::Default, 2e-2),
        (DType::BF16, Precision::Default, 5e-2),
    ];
    let elsewhere = |values: Vec<f64>, shape: Vec<usize>, dtype: DType| {
        std::thread::spawn(move || t(&values, &shape, dtype))
            .join()
            .expect("tensor made on another thread")
    };
    // [nb, r, c] values stored as [nb, c, r]
    let transpose = |v: &[f64], r: usize, c: usize| -> Vec<f64> {
        let mut out = vec![0f64; v.len()];
        for b in 0..nb {
            for i in 0..r {
                for j in 0..c {
                    out[(b * c + j) * r + i] = v[(b * r + i) * c + j];
                }
            }
        }
        out
    };
    let (at, bt) = (transpose(&av, m, k), transpose(&bv, k, n));
    let variants = cases
        .iter()
        .filter(|c| supported(c.0))
        .flat_map(|&c| {
            [
                (c, false, false),
                (c, true, false),
                (c, false, true),
                (c, true, true),
            ]
        })
        .collect::<Vec<_>>();
    for ((dtype, precision, tol), other_thread, transposed) in variants {
        let (av, bv, sa, sb) = if transposed {
            (at.clone(), bt.clone(), vec![nb, k, m], vec![nb, n, k])
        } else {
            (av.clone(), bv.clone(), vec![nb, m, k], vec![nb, k, n])
        };
        let (a, b) = if other_thread {
            (elsewhere(av, sa, dtype), elsewhere(bv, sb, dtype))
        } else {
            (t(&av, &sa, dtype), t(&bv, &sb, dtype))
        };
        let op = Op::Dot {
            contract_a: vec![if transposed { 1 } else { 2 }],
            batch_a: vec![0],
            contract_b: vec![if transposed { 2 } else { 1 }],
            batch_b: vec![0],
            out: None,
            precision,
        };
        let before = products();
        let got = ev(op, &[&a, &b]);
        let values = v(&got);
        if dev() != ex_burn_core::Device::Cpu && crate::device_kernels::library_available() {
            let (all, cross) = products();
            assert_eq!(
                all,
                before.0 + 1,
                "{dtype:?} {precision:?} (transposed: {transposed}) did not run on cuBLAS"
            );
            assert_eq!(
                cross,
                before.1 + u64::from(other_thread),
                "{dtype:?} {precision:?} (operands from another thread: {other_thread}): wrong path"
            );
        }
        assert_eq!(got.shape(), &[nb, m, n]);
        assert_eq!(got.dtype(), dtype);
        let err = values
            .iter()
            .zip(&want)
            .fold(0f64, |e, (g, w)| e.max((g - w).abs()))
            / scale;
        println!(
            "large product {dtype:?} {precision:?} on {:?} (operands from another thread: \
             {other_thread}, transposed: {transposed}): relative error {err:.2e}",
            dev()
        );
        assert!(
            err < tol,
            "{dtype:?} {precision:?}: relative error {err:.2e}"
        );
    }
}

#[test]
fn small_f32_products_on_the_cpu_are_f64_sums_rounded_once() {
    if dev() != ex_burn_core::Device::Cpu {
        return;
    }
    // values over several binades, so an f32 accumulation loses digits
    let vals = |n: usize, seed: u64| spread(n, seed, 16, -4);
    let (m, k, n) = (6, 40, 5);
    let (av, bv) = (vals(m * k, 1), vals(k * n, 2));
    let want: Vec<f64> = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum::<f64>() as f32 as f64
        })
        .collect();
    let (a, b) = (f(&av, &[m, k]), f(&bv, &[k, n]));
    assert_eq!(
        v(&ev(dot(vec![1], vec![], vec![0], vec![]), &[&a, &b])),
        want
    );
    // the same product with the left operand transposed and a batch axis of one
    let at = f(
        &(0..k * m)
            .map(|pi| av[(pi % m) * k + pi / m])
            .collect::<Vec<_>>(),
        &[1, k, m],
    );
    let b1 = f(&bv, &[1, k, n]);
    assert_eq!(
        v(&ev(dot(vec![1], vec![0], vec![1], vec![0]), &[&at, &b1])),
        want
    );
}

/// Attention's products on heads viewed from one projection (`[b, s, 3 * h * hd]` sliced,
/// split into heads and transposed, as a GPT layer writes them): scores `q k^T`, the weighted
/// values `p v` and a gradient-shaped product contracting the positions of both (`p^T q`),
/// against an f64 reference (the operands are strided views of one buffer at three offsets).
/// On CUDA with cuBLAS present each must run on cuBLAS.
#[test]
fn attention_products_read_heads_from_the_projection() {
    use ex_burn_core::op::Precision;
    crate::device_kernels::set_min_work(1 << 20);
    let (b, s, h, hd) = (2, 64, 4, 32);
    let width = 3 * h * hd;
    let pv: Vec<f64> = (0..b * s * width)
        .map(|i| ((i * 7919) % 1009) as f64 / 504.5 - 1.0)
        .collect();
    let proj = f(&pv, &[b, s, width]);
    // element [bi, hi, si, di] of head group `g` (0: q, 1: k, 2: v)
    let at = |g: usize, bi: usize, hi: usize, si: usize, di: usize| {
        pv[(bi * s + si) * width + g * h * hd + hi * hd + di]
    };
    let heads = |g: usize| {
        let part = ev(
            Op::Slice {
                starts: vec![0, 0, (g * h * hd) as i64],
                lengths: vec![b, s, h * hd],
                strides: None,
                dynamic: vec![],
            },
            &[&proj],
        );
        let split = ev(
            Op::Reshape {
                shape: vec![b, s, h, hd],
            },
            &[&part],
        );
        ev(
            Op::Transpose {
                axes: Some(vec![0, 2, 1, 3]),
            },
            &[&split],
        )
    };
    let (q, k, vv) = (heads(0), heads(1), heads(2));
    let prod = |ca: usize, cb: usize| Op::Dot {
        contract_a: vec![ca],
        batch_a: vec![0, 1],
        contract_b: vec![cb],
        batch_b: vec![0, 1],
        out: None,
        precision: Precision::Highest,
    };
    let before = library_products();
    let scores = ev(prod(3, 3), &[&q, &k]);
    let weighted = ev(prod(3, 2), &[&scores, &vv]);
    let back = ev(prod(2, 2), &[&scores, &q]);
    if dev() != ex_burn_core::Device::Cpu && crate::device_kernels::library_available() {
        let after = library_products();
        assert_eq!(after, before + 3, "not every product ran on cuBLAS");
    }
    let mut want_s = vec![0f64; b * h * s * s];
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..s {
                for j in 0..s {
                    want_s[((bi * h + hi) * s + i) * s + j] = (0..hd)
                        .map(|d| at(0, bi, hi, i, d) * at(1, bi, hi, j, d))
                        .sum();
                }
            }
        }
    }
    let sc = |bi: usize, hi: usize, i: usize, j: usize| want_s[((bi * h + hi) * s + i) * s + j];
    let (mut want_w, mut want_b) = (vec![0f64; b * h * s * hd], vec![0f64; b * h * s * hd]);
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..s {
                for d in 0..hd {
                    let o = ((bi * h + hi) * s + i) * hd + d;
                    want_w[o] = (0..s).map(|j| sc(bi, hi, i, j) * at(2, bi, hi, j, d)).sum();
                    want_b[o] = (0..s).map(|j| sc(bi, hi, j, i) * at(0, bi, hi, j, d)).sum();
                }
            }
        }
    }
    for (name, got, want, shape) in [
        ("q k^T", &scores, &want_s, [b, h, s, s]),
        ("p v", &weighted, &want_w, [b, h, s, hd]),
        ("p^T q", &back, &want_b, [b, h, s, hd]),
    ] {
        assert_eq!(got.shape(), &shape, "{name}");
        let scale = want.iter().fold(0f64, |a, &w| a.max(w.abs()));
        let err = v(got)
            .iter()
            .zip(want)
            .fold(0f64, |e, (g, w)| e.max((g - w).abs()))
            / scale;
        assert!(err < 2e-6, "{name}: relative error {err:.2e}");
    }
}

/// Small f32 products (at most 2^16 multiply-adds) are the f64 sums of exact f64 products
/// rounded once, on every device: what Nx.BinaryBackend computes (the matrices inside Nx's
/// linear algebra); the wgpu devices, which compute no f64, compute them on the host.
#[test]
fn small_f32_products_are_rounded_once_from_f64() {
    let (m, k, n) = (24, 40, 30);
    let (av, bv) = matrix_pair(m, k, n);
    let av: Vec<f64> = av
        .iter()
        .enumerate()
        .map(|(i, x)| (x * (1.0 + (i % 7) as f64 * 100.0)) as f32 as f64)
        .collect();
    let bv: Vec<f64> = bv.iter().map(|&x| x as f32 as f64).collect();
    let op = matmul_op(ex_burn_core::op::Precision::Default);
    let got = v(&ev(op, &[&f(&av, &[m, k]), &f(&bv, &[k, n])]));
    for (ij, (g, w)) in got.iter().zip(f64_product(&av, &bv, m, k, n)).enumerate() {
        let want = w as f32 as f64;
        assert_rounded(*g, want, 1e-4 * (1.0 + want.abs()), &|| {
            format!("entry {ij}")
        });
    }
}

/// A column-major right operand (a transposed weight: `g . W^T`) of a large product on the
/// CPU is copied to row-major before the GEMM (`dot::row_major_copy`): the values are those
/// of the same product with the transposed weight materialised.
#[test]
fn transposed_right_operands_give_the_materialised_product() {
    let (m, k, n) = (300, 256, 310);
    let gv: Vec<f64> = (0..m * k)
        .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
        .collect();
    let wv: Vec<f64> = (0..n * k)
        .map(|i| ((i * 53) % 97) as f64 / 48.0 - 1.0)
        .collect();
    let (g, w) = (f(&gv, &[m, k]), f(&wv, &[n, k]));
    let dot = |contract_b: usize| contraction(1, contract_b, ex_burn_core::op::Precision::Highest);
    // g . w^T through the transposed view
    let got = v(&ev(dot(1), &[&g, &w]));
    // the same with w^T materialised as a row-major [k, n] tensor
    let wt: Vec<f64> = (0..k * n).map(|i| wv[(i % n) * k + i / n]).collect();
    let want = v(&ev(dot(0), &[&g, &f(&wt, &[k, n])]));
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "entry {i}: {a} vs {b}"
        );
    }
}

/// A column-major left operand (`h^T . g`, a weight gradient) of a large product on the CPU
/// is copied to row-major before the GEMM where its columns lie a multiple of 256 elements
/// apart, and read in place otherwise (`dot::row_major_copy`): either way the values are
/// those of the same product with the transposed operand materialised.
#[test]
fn transposed_left_operands_give_the_materialised_product() {
    for (m, k, n) in [(512, 256, 300), (1024, 64, 257), (300, 256, 310)] {
        let hv: Vec<f64> = (0..k * m)
            .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let gv: Vec<f64> = (0..k * n)
            .map(|i| ((i * 53) % 97) as f64 / 48.0 - 1.0)
            .collect();
        let (h, g) = (f(&hv, &[k, m]), f(&gv, &[k, n]));
        let dot =
            |contract_a: usize| contraction(contract_a, 0, ex_burn_core::op::Precision::Highest);
        // h^T . g through the transposed view
        let got = v(&ev(dot(0), &[&h, &g]));
        // the same with h^T materialised as a row-major [m, k] tensor
        let ht: Vec<f64> = (0..m * k).map(|i| hv[(i % k) * m + i / k]).collect();
        let want = v(&ev(dot(1), &[&f(&ht, &[m, k]), &g]));
        assert_eq!(got.len(), m * n);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{m} x {k} x {n} entry {i}: {a} vs {b}"
            );
        }
    }
}

/// Operands `[m, k]` and `[k, n]` of values in [-1, 1] spread without a pattern.
fn matrix_pair(m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let av = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let bv = (0..k * n)
        .map(|i| ((i * 104_729) % 997) as f64 / 498.5 - 1.0)
        .collect();
    (av, bv)
}

/// Their product, in f64 (sums of exact products in order).
fn f64_product(av: &[f64], bv: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    (0..m * n)
        .map(|ij| {
            (0..k)
                .map(|p| av[(ij / n) * k + p] * bv[p * n + ij % n])
                .sum()
        })
        .collect()
}

/// Products of views: a broadcast left operand (zero strides over its batch and row axes) and
/// a right operand sliced out of a larger tensor (an offset and a row stride wider than its
/// rows), in batches of large matrices (every compute thread on one matrix) and of small ones
/// (one matrix per thread), split by columns or by rows over the threads, against f64
/// products of the same values.
#[test]
fn products_of_broadcast_and_sliced_views_match_f64() {
    for (nb, m, k, n) in [(2, 200, 192, 208), (1, 256, 200, 144), (6, 40, 64, 48)] {
        let row: Vec<f64> = (0..k)
            .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let a = ev(
            Op::Broadcast {
                shape: vec![nb, m, k],
                axes: Some(vec![2]),
            },
            &[&f(&row, &[k])],
        );
        let wide = n + 5;
        let bv: Vec<f64> = (0..nb * k * wide)
            .map(|i| ((i * 104_729) % 997) as f64 / 498.5 - 1.0)
            .collect();
        let b = ev(
            Op::Slice {
                starts: vec![0, 0, 3],
                lengths: vec![nb, k, n],
                strides: None,
                dynamic: vec![],
            },
            &[&f(&bv, &[nb, k, wide])],
        );
        let op = Op::Dot {
            contract_a: vec![2],
            batch_a: vec![0],
            contract_b: vec![1],
            batch_b: vec![0],
            out: None,
            precision: Default::default(),
        };
        let got = v(&ev(op, &[&a, &b]));
        assert_eq!(got.len(), nb * m * n);
        for (i, g) in got.iter().enumerate() {
            let (bi, j) = (i / (m * n), i % n);
            let want: f64 = (0..k)
                .map(|p| row[p] * bv[(bi * k + p) * wide + 3 + j])
                .sum();
            let tol = if dev() == ex_burn_core::Device::Cpu {
                1e-5
            } else {
                5e-3
            };
            assert!(
                (g - want).abs() <= tol * (1.0 + want.abs()),
                "{nb}x{m}x{k}x{n} entry {i}: {g} vs {want}"
            );
        }
    }
}

/// f32 products of operands in any layout the ops make (strided slices with offsets,
/// transposes, reversed axes, batch axes), small and large enough for every thread, against
/// f64 products of the operands' values as read back: the host GEMM reads views through their
/// strides (`op/host_gemm.rs`), and a stride it mishandled would show here.
#[test]
fn products_of_any_layout_match_f64() {
    let seed = std::cell::Cell::new(0x9e37_79b9_u64);
    let next = |n: usize| {
        seed.set(
            seed.get()
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407),
        );
        ((seed.get() >> 33) as usize) % n
    };
    // an operand [batch.., rows, cols] as a view: made transposed or not, sliced with strides
    // and an offset, maybe reversed along one axis
    let operand =
        |batch: &[usize], rows: usize, cols: usize, salt: usize| -> ex_burn_core::Tensor {
            let (sr, sc) = (1 + next(2), 1 + next(2));
            let (r0, c0) = (next(3), next(3));
            let (rows_s, cols_s) = (r0 + rows * sr, c0 + cols * sc);
            let transposed = next(2) == 1;
            let nb = batch.len();
            let mut shape = batch.to_vec();
            shape.extend(if transposed {
                [cols_s, rows_s]
            } else {
                [rows_s, cols_s]
            });
            let numel: usize = shape.iter().product();
            let values: Vec<f64> = (0..numel)
                .map(|i| (((i + salt) * 7919) % 2003) as f64 / 1001.5 - 1.0)
                .collect();
            let mut x = f(&values, &shape);
            if transposed {
                let mut axes: Vec<usize> = (0..nb).collect();
                axes.extend([nb + 1, nb]);
                x = ev(Op::Transpose { axes: Some(axes) }, &[&x]);
            }
            let mut starts = vec![0i64; nb];
            starts.extend([r0 as i64, c0 as i64]);
            // Nx's slice lengths are extents in the input: `rows` elements every `sr`
            let mut lengths = batch.to_vec();
            lengths.extend([(rows - 1) * sr + 1, (cols - 1) * sc + 1]);
            let mut strides = vec![1; nb];
            strides.extend([sr, sc]);
            x = ev(
                Op::Slice {
                    starts,
                    lengths,
                    strides: Some(strides),
                    dynamic: vec![],
                },
                &[&x],
            );
            match next(3) {
                0 => ev(
                    Op::Reverse {
                        axes: Some(vec![nb + next(2)]),
                    },
                    &[&x],
                ),
                _ => x,
            }
        };
    let sizes = [
        (1, 1, 1),
        (3, 5, 2),
        (17, 33, 9),
        (40, 24, 31),
        (200, 192, 208),
    ];
    for case in 0..40 {
        let (m, k, n) = sizes[if case % 8 == 7 { 4 } else { next(4) }];
        let batch: Vec<usize> = match next(3) {
            0 => vec![],
            1 => vec![1 + next(3)],
            _ => vec![2, 1 + next(2)],
        };
        let nb = batch.len();
        let a = operand(&batch, m, k, case);
        let b = operand(&batch, k, n, case + 1000);
        let op = Op::Dot {
            contract_a: vec![nb + 1],
            batch_a: (0..nb).collect(),
            contract_b: vec![nb],
            batch_b: (0..nb).collect(),
            out: None,
            precision: ex_burn_core::op::Precision::Highest,
        };
        let got = v(&ev(op, &[&a, &b]));
        let (av, bv) = (v(&a), v(&b));
        let nbatch: usize = batch.iter().product();
        assert_eq!(got.len(), nbatch * m * n, "case {case}");
        for bi in 0..nbatch {
            let want = f64_product(
                &av[bi * m * k..][..m * k],
                &bv[bi * k * n..][..k * n],
                m,
                k,
                n,
            );
            for (j, w) in want.iter().enumerate() {
                let g = got[bi * m * n + j];
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "case {case} ({batch:?} x {m}x{k}x{n}) entry {j} of matrix {bi}: {g} vs {w}"
                );
            }
        }
    }
}

/// Products the device kernels ran on the GPU vendor's library for this thread, and those of
/// them with an operand of another thread's stream.
fn products() -> (u64, u64) {
    let c = ex_burn_core::kernels::counts();
    (c.library_products, c.cross_stream_products)
}

/// Products the device kernels ran on the GPU vendor's library for this thread.
fn library_products() -> u64 {
    products().0
}

/// Products large enough to be split over the compute threads, by rows (more rows than
/// columns) and by columns, against f64 products of the same values.
#[test]
fn split_products_match_f64() {
    for (m, k, n) in [(300, 160, 150), (150, 160, 300)] {
        let (av, bv) = matrix_pair(m, k, n);
        let got = v(&ev(
            matmul_op(Default::default()),
            &[&f(&av, &[m, k]), &f(&bv, &[k, n])],
        ));
        let want = f64_product(&av, &bv, m, k, n);
        let tol = if dev() == ex_burn_core::Device::Cpu {
            1e-5
        } else {
            5e-3
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{m}x{k}x{n} entry {i}: {g} vs {w}"
            );
        }
    }
}
