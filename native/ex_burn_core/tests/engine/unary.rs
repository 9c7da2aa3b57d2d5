use super::common::*;
use ex_burn_core::{DType, Op, Program, Tensor};

fn run(op: Op, x: &[f64]) -> Vec<f64> {
    v(&ev(op, &[&f(x, &[x.len()])]))
}

fn close_to(got: Vec<f64>, want: &[f64], tol: f64) {
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs()),
            "got {got:?} want {want:?}"
        );
    }
}

#[test]
fn float_functions_match_libm() {
    let xs = [0.1, 0.5, 0.9];
    type Reference = fn(f64) -> f64;
    let cases: Vec<(Op, Reference)> = vec![
        (Op::Unary(Unary::Exp), f64::exp),
        (Op::Unary(Unary::Log), f64::ln),
        (Op::Unary(Unary::Log1p), f64::ln_1p),
        (Op::Unary(Unary::Sqrt), f64::sqrt),
        (Op::Unary(Unary::Sin), f64::sin),
        (Op::Unary(Unary::Cos), f64::cos),
        (Op::Unary(Unary::Tan), f64::tan),
        (Op::Unary(Unary::Asin), f64::asin),
        (Op::Unary(Unary::Acos), f64::acos),
        (Op::Unary(Unary::Atan), f64::atan),
        (Op::Unary(Unary::Sinh), f64::sinh),
        (Op::Unary(Unary::Cosh), f64::cosh),
        (Op::Unary(Unary::Tanh), f64::tanh),
        (Op::Unary(Unary::Asinh), f64::asinh),
        (Op::Unary(Unary::Atanh), f64::atanh),
        (Op::Unary(Unary::Expm1), f64::exp_m1),
        (Op::Unary(Unary::Cbrt), f64::cbrt),
    ];
    for (op, f) in cases {
        let want: Vec<f64> = xs.iter().map(|&x| f(x)).collect();
        close_to(run(op.clone(), &xs), &want, 1e-5);
    }
    close_to(
        run(Op::Unary(Unary::Acosh), &[1.5, 2.0]),
        &[1.5f64.acosh(), 2f64.acosh()],
        1e-5,
    );
    close_to(
        run(Op::Unary(Unary::Rsqrt), &[4.0, 0.25]),
        &[0.5, 2.0],
        1e-6,
    );
    close_to(
        run(Op::Unary(Unary::Sigmoid), &[0.0, 2.0]),
        &[0.5, 1.0 / (1.0 + (-2f64).exp())],
        1e-6,
    );
    close_to(
        run(Op::Unary(Unary::Cbrt), &[-27.0, 8.0]),
        &[-3.0, 2.0],
        1e-5,
    );
    if !f64_on_device() {
        return;
    }
    // f64 keeps f64 precision (Burn's default sigmoid goes through f32)
    let xs = [1.0, -3.0, 0.25];
    let sig = v(&ev(Op::Unary(Unary::Sigmoid), &[&t(&xs, &[3], DType::F64)]));
    for (got, x) in sig.iter().zip(xs) {
        let want = 1.0 / (1.0 + (-x).exp());
        assert!(
            (got - want).abs() < 1e-14,
            "sigmoid({x}) = {got}, want {want}"
        );
    }
}

/// The C library's `asinh`, `acosh` and `atanh` (what Nx.BinaryBackend computes through
/// Erlang's `:math`; Rust's own are other formulas, an ulp off at places; its `tan`, `atan`,
/// `sinh`, ... call the C library).
mod libm {
    extern "C" {
        pub fn asinh(x: f64) -> f64;
        pub fn acosh(x: f64) -> f64;
        pub fn atanh(x: f64) -> f64;
    }
}

fn c_asinh(x: f64) -> f64 {
    // SAFETY: a pure C math function of one double.
    unsafe { libm::asinh(x) }
}

fn c_acosh(x: f64) -> f64 {
    // SAFETY: as above.
    unsafe { libm::acosh(x) }
}

fn c_atanh(x: f64) -> f64 {
    // SAFETY: as above.
    unsafe { libm::atanh(x) }
}

/// f32 values spread over a range, as f32.
fn f32_grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (lo + (hi - lo) * i as f64 / (n - 1) as f64) as f32 as f64)
        .collect()
}

/// f32 `exp` and `log`: on CUDA the f64 function of the f32 input rounded once, op by op and
/// in a fused program (Nx.BinaryBackend's values; CUDA's `expf`/`logf` made Nx's `logsumexp`
/// and `Random.gumbel` doctests print other last digits on the H200); on the CPU within an
/// ulp of it (its f32 kernels); on the wgpu devices within what Vulkan requires of a driver's
/// f32 `exp` (3 + 2|x| ulp) and `log` (3 ulp, or 2^-21 absolute within [0.5, 2]): Mesa's
/// lavapipe gave exp(-87) 20 ulp off, which ExBurn leaves to the driver (softmax's hot path).
#[test]
fn f32_cube_roots_are_correctly_rounded() {
    // exact cubes (whose roots a power of 1/3 in f32 misses), tiny, huge and negative values
    let mut xs: Vec<f64> = (-20..=20).map(|i| f64::from(i).powi(3)).collect();
    xs.extend([
        0.125, -0.001, 1e-30, -3e-38, 3e38, 2.0, 3.0, 10.0, 0.9999999,
    ]);
    xs.extend(f32_grid(-1000.0, 1000.0, 2001));
    let xs: Vec<f64> = xs.into_iter().map(|x| x as f32 as f64).collect();
    // f64's cube root rounded once on every device (the wgpu devices compute it on the host)
    let got = v(&ev(Op::Unary(Unary::Cbrt), &[&f(&xs, &[xs.len()])]));
    for (x, g) in xs.iter().zip(got) {
        let want = x.cbrt() as f32 as f64;
        assert!(g == want, "cbrt({x}): {g}, want {want}");
    }
}

#[test]
fn f32_exp_and_log_are_rounded_once_from_f64_on_cuda() {
    let exact = matches!(dev(), ex_burn_core::Device::Cuda(_));
    let wgpu = !f64_on_device();
    let exps = f32_grid(-87.0, 88.0, 3001);
    let logs: Vec<f64> = (0..3001)
        .map(|i| 10f64.powf(-30.0 + 60.0 * i as f64 / 3000.0) as f32 as f64)
        .chain([1.0, 2.0, 21.0, 0.5])
        .collect();
    type Reference = fn(f64) -> f64;
    let cases: [(Unary, Reference, &[f64]); 2] =
        [(Unary::Exp, f64::exp, &exps), (Unary::Log, f64::ln, &logs)];
    for (op, reference, xs) in cases {
        let x = f(xs, &[xs.len()]);
        let eager = v(&ev(Op::Unary(op), &[&x]));
        // the same op inside a program of element-wise steps (one fused run where it fuses)
        let program = ex_burn_core::Program::new(
            1,
            vec![
                ins(Op::Unary(op), &[0]),
                ins(Op::Unary(Unary::Neg), &[1]),
                ins(Op::Unary(Unary::Neg), &[2]),
            ],
            vec![3],
        )
        .expect("program");
        let fused = v(&program.run(vec![x.clone()], dev()).expect("run")[0]);
        for (i, &x) in xs.iter().enumerate() {
            let want = reference(x) as f32 as f64;
            for (how, got) in [("op by op", eager[i]), ("in a program", fused[i])] {
                if exact {
                    assert!(got == want, "{op:?}({x}) {how}: {got}, want {want}");
                } else {
                    let ulp =
                        (want.abs() as f32).max(f32::MIN_POSITIVE) as f64 * f32::EPSILON as f64;
                    let allowed = match (wgpu, op) {
                        (false, _) => ulp,
                        (true, Unary::Exp) => (3.0 + 2.0 * x.abs()) * ulp,
                        (true, _) if (0.5..=2.0).contains(&x) => 2f64.powi(-21),
                        (true, _) => 3.0 * ulp,
                    };
                    assert!(
                        (got - want).abs() <= allowed,
                        "{op:?}({x}) {how}: {got}, want {want}"
                    );
                }
            }
        }
    }
}

/// On every device (CPU: the C library; GPUs: the device's f64 functions), f32 `tan`, `atan`,
/// `asinh`, ... and `atan2` are the f64 function of the f32 input rounded once, which is what
/// Nx.BinaryBackend computes (Burn's GPU kernels computed them in f32, an ulp or two off).
#[test]
fn f32_library_functions_are_rounded_once_from_f64() {
    type Reference = fn(f64) -> f64;
    let cases: Vec<(Unary, Reference, f64, f64)> = vec![
        (Unary::Tan, f64::tan, -1.5, 1.5),
        (Unary::Asin, f64::asin, -1.0, 1.0),
        (Unary::Acos, f64::acos, -1.0, 1.0),
        (Unary::Atan, f64::atan, -40.0, 40.0),
        (Unary::Sinh, f64::sinh, -20.0, 20.0),
        (Unary::Cosh, f64::cosh, -20.0, 20.0),
        (Unary::Asinh, c_asinh, -40.0, 40.0),
        (Unary::Acosh, c_acosh, 1.0, 40.0),
        (Unary::Atanh, c_atanh, -0.999, 0.999),
    ];
    for (op, reference, lo, hi) in cases {
        let xs = f32_grid(lo, hi, 3001);
        let got = run(Op::Unary(op), &xs);
        for (x, g) in xs.iter().zip(&got) {
            let want = reference(*x) as f32 as f64;
            assert_rounded(*g, want, 1e-5 * (1.0 + want.abs()), &|| {
                format!("{op:?}({x})")
            });
        }
        // f64 gets the C library's values on every device that computes f64 (a GPU's own f64
        // functions were an ulp off: those run on the host)
        if !f64_on_device() {
            continue;
        }
        let got = v(&ev(Op::Unary(op), &[&t(&xs, &[xs.len()], DType::F64)]));
        for (x, g) in xs.iter().zip(&got) {
            assert!(
                *g == reference(*x),
                "f64 {op:?}({x}) = {g}, want {}",
                reference(*x)
            );
        }
    }
    let (ys, xs) = (f32_grid(-3.0, 3.0, 61), f32_grid(-2.0, 2.5, 61));
    let pairs: Vec<(f64, f64)> = ys
        .iter()
        .flat_map(|&y| xs.iter().map(move |&x| (y, x)))
        .collect();
    let yt = f(
        &pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        &[pairs.len()],
    );
    let xt = f(
        &pairs.iter().map(|p| p.1).collect::<Vec<_>>(),
        &[pairs.len()],
    );
    let got = v(&ev(
        Op::Binary {
            op: Arith::Atan2,
            out: None,
        },
        &[&yt, &xt],
    ));
    for ((y, x), g) in pairs.iter().zip(&got) {
        let want = y.atan2(*x) as f32 as f64;
        assert!(*g == want, "atan2({y}, {x}) = {g}, want {want}");
    }
}

#[test]
fn erf_family() {
    // erf(0.5) = 0.5204998778, erfc(0.5) = 0.4795001222, erf_inv(0.5) = 0.4769362762
    close_to(
        run(Op::Unary(Unary::Erf), &[0.5, -1.0]),
        &[0.5204998778, -0.8427007929],
        1e-5,
    );
    close_to(run(Op::Unary(Unary::Erfc), &[0.5]), &[0.4795001222], 1e-5);
    close_to(
        run(Op::Unary(Unary::ErfInv), &[0.5, -0.9, 0.0, 0.999]),
        &[0.4769362762, -1.1630871537, 0.0, 2.3267537655],
        1e-5,
    );
    let edge = run(Op::Unary(Unary::ErfInv), &[1.0, -1.0]);
    assert_eq!(edge, vec![f64::INFINITY, f64::NEG_INFINITY]);
    if !f64_on_device() {
        return;
    }
    // f64 precision after the Newton step
    let x = t(&[0.3], &[1], DType::F64);
    close(
        &ev(Op::Unary(Unary::ErfInv), &[&x]),
        &[0.27246271472675443],
        1e-12,
    );
}

/// f64 erf and erfc have an f64's digits on every device, tails included (on the H200 erfc(1)
/// came out as 0.15729921223999327: an f32 approximation evaluated in f64).
#[test]
fn erf_and_erfc_keep_f64_precision() {
    if !f64_on_device() {
        return;
    }
    let x = t(&[1.0, 0.3, 4.0, -2.0], &[4], DType::F64);
    let rel = |got: &[f64], want: &[f64]| {
        for (g, w) in got.iter().zip(want) {
            assert!(((g - w) / w).abs() < 1e-14, "got {got:?}, want {want:?}");
        }
    };
    rel(
        &v(&ev(Op::Unary(Unary::Erfc), &[&x])),
        &[
            0.15729920705028513,
            0.6713732405408726,
            1.541725790028002e-8,
            1.9953222650189528,
        ],
    );
    rel(
        &v(&ev(Op::Unary(Unary::Erf), &[&x])),
        &[
            0.8427007929497149,
            0.3286267594591274,
            0.9999999845827421,
            -0.9953222650189527,
        ],
    );
}

#[test]
fn expm1_keeps_precision_near_zero() {
    if !f64_on_device() {
        return;
    }
    let x = t(&[1e-10, -1e-8], &[2], DType::F64);
    close(
        &ev(Op::Unary(Unary::Expm1), &[&x]),
        &[1.00000000005e-10, -9.99999995e-9],
        1e-12,
    );
}

/// f64 log1p on the CPU is correctly rounded where 1 + x is exact (the C library's log1p(2)
/// is an ulp off; Nx.BinaryBackend's log(1 + x) is exact there) and keeps tiny arguments.
#[test]
fn f64_log1p_is_correctly_rounded_at_integers() {
    if !f64_on_device() {
        return;
    }
    let xs = [1.0, 2.0, 3.0, 1.0e-300, -0.25];
    let got = v(&ev(Op::Unary(Unary::Log1p), &[&t(&xs, &[5], DType::F64)]));
    let want = [
        2f64.ln(),
        3f64.ln(),
        4f64.ln(),
        1.0e-300,
        (-0.25f64).ln_1p(),
    ];
    assert_eq!(got, want);
}

#[test]
fn rounding_is_half_away_from_zero() {
    let x = [2.5, -2.5, 0.5, 1.5, -0.4, 3.7];
    assert_eq!(
        run(Op::Unary(Unary::Round), &x),
        vec![3., -3., 1., 2., -0., 4.]
    );
    // a zero result is +0.0, as Nx's (Erlang's round/1 returns an integer)
    for dtype in [DType::F32, wide_float()] {
        let zeros = v(&ev(
            Op::Unary(Unary::Round),
            &[&t(&[-0.4, -0.0, 0.3], &[3], dtype)],
        ));
        assert!(zeros.iter().all(|z| z.to_bits() == 0), "{dtype}: {zeros:?}");
    }
    assert_eq!(run(Op::Unary(Unary::Floor), &[-1.5, 1.5]), vec![-2., 1.]);
    assert_eq!(run(Op::Unary(Unary::Ceil), &[-1.5, 1.5]), vec![-1., 2.]);
    // on integers these are the identity and keep the type
    check(
        &ev(Op::Unary(Unary::Round), &[&s(&[3.], &[1])]),
        &[1],
        DType::S64,
        &[3.],
    );
}

#[test]
fn integer_input_to_float_functions_gives_f32() {
    let x = t(&[1., 4.], &[2], DType::S32);
    let r = ev(Op::Unary(Unary::Sqrt), &[&x]);
    check(&r, &[2], DType::F32, &[1., 2.]);
    let h = t(&[4.], &[1], DType::F16);
    assert_eq!(ev(Op::Unary(Unary::Sqrt), &[&h]).dtype(), DType::F16);
}

#[test]
fn sign_abs_neg_with_edge_cases() {
    let x = f(&[-3., 0., -0.0, 2., f64::NAN], &[5]);
    let sg = v(&ev(Op::Unary(Unary::Sign), &[&x]));
    assert_eq!(&sg[..2], &[-1., 0.]);
    assert_eq!(sg[3], 1.0);
    assert!(sg[4].is_nan());
    check(
        &ev(Op::Unary(Unary::Abs), &[&t(&[-128., 5.], &[2], DType::S8)]),
        &[2],
        DType::S8,
        &[-128., 5.],
    );
    check(
        &ev(Op::Unary(Unary::Neg), &[&t(&[1., 0.], &[2], DType::U8)]),
        &[2],
        DType::U8,
        &[255., 0.],
    );
    check(
        &ev(Op::Unary(Unary::Sign), &[&t(&[0., 7.], &[2], DType::U16)]),
        &[2],
        DType::U16,
        &[0., 1.],
    );
    check(
        &ev(Op::Unary(Unary::Abs), &[&t(&[3.], &[1], DType::U8)]),
        &[1],
        DType::U8,
        &[3.],
    );
}

#[test]
fn predicates_and_logical_not() {
    let x = f(&[f64::NAN, f64::INFINITY, -f64::INFINITY, 1.0], &[4]);
    check(
        &ev(Op::Unary(Unary::IsNan), &[&x]),
        &[4],
        DType::U8,
        &[1., 0., 0., 0.],
    );
    check(
        &ev(Op::Unary(Unary::IsInfinity), &[&x]),
        &[4],
        DType::U8,
        &[0., 1., 1., 0.],
    );
    check(
        &ev(Op::Unary(Unary::IsNan), &[&s(&[1.], &[1])]),
        &[1],
        DType::U8,
        &[0.],
    );
    check(
        &ev(Op::Unary(Unary::LogicalNot), &[&s(&[0., 3.], &[2])]),
        &[2],
        DType::U8,
        &[1., 0.],
    );
}

#[test]
fn bit_counting() {
    let x = t(&[0., 1., -1., 255., 16.], &[5], DType::S32);
    check(
        &ev(Op::Unary(Unary::PopulationCount), &[&x]),
        &[5],
        DType::S32,
        &[0., 1., 32., 8., 1.],
    );
    check(
        &ev(Op::Unary(Unary::CountLeadingZeros), &[&x]),
        &[5],
        DType::S32,
        &[32., 31., 0., 24., 27.],
    );
    let u = t(&[0., 1., 128.], &[3], DType::U8);
    check(
        &ev(Op::Unary(Unary::CountLeadingZeros), &[&u]),
        &[3],
        DType::U8,
        &[8., 7., 0.],
    );
    check(
        &ev(
            Op::Unary(Unary::PopulationCount),
            &[&t(&[-1.], &[1], DType::S64)],
        ),
        &[1],
        DType::S64,
        &[64.],
    );
    check(
        &ev(
            Op::Unary(Unary::BitwiseNot),
            &[&t(&[0., 5.], &[2], DType::S16)],
        ),
        &[2],
        DType::S16,
        &[-1., -6.],
    );
    assert_eq!(
        ev_err(Op::Unary(Unary::PopulationCount), &[&f(&[1.], &[1])]),
        "dtype"
    );
}

#[test]
fn bitcast_reinterprets() {
    let x = f(&[1.0], &[1]);
    check(
        &ev(Op::Bitcast { dtype: DType::S32 }, &[&x]),
        &[1],
        DType::S32,
        &[1065353216.],
    );
    assert_eq!(ev_err(Op::Bitcast { dtype: DType::S64 }, &[&x]), "dtype");
}

#[test]
fn rank_zero_and_empty() {
    check(
        &ev(Op::Unary(Unary::Exp), &[&f(&[0.], &[])]),
        &[],
        DType::F32,
        &[1.],
    );
    check(
        &ev(Op::Unary(Unary::Exp), &[&f(&[], &[0])]),
        &[0],
        DType::F32,
        &[],
    );
}

/// Nx's conversion of float `x` to integer type `dtype`: `trunc(x)` modulo 2^bits, NaN 0,
/// infinities the type's extremes.
fn nx_to_int(x: f64, dtype: DType) -> i128 {
    use super::binary::wrap;
    let bits = dtype.bits();
    let (min, max) = if dtype.is_signed_int() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    match x {
        x if x.is_nan() => 0,
        f64::INFINITY => max,
        f64::NEG_INFINITY => min,
        // beyond 2^126 every f64 is a multiple of 2^74
        x if x.abs() >= 2f64.powi(126) => 0,
        x => wrap(x.trunc() as i128, dtype),
    }
}

#[test]
fn floats_convert_to_integers_modulo_the_width() {
    use super::binary::{int_values, INTS};
    let p = |k: i32| 2f64.powi(k);
    let mut values = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        2.5,
        -2.5,
        127.9,
        128.0,
        -129.0,
        255.5,
        256.0,
        -32769.0,
        65536.0,
        p(31),
        -p(31) - 256.0,
        p(32),
        -3.0e9,
        p(53) + 2.0,
        p(63),
        -p(63),
        p(63) + p(40),
        -p(63) - p(40),
        p(64),
        p(64) + p(41),
        1.0e20,
        -1.0e20,
        1.2345e30,
        3.4e38,
        -3.4e38,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for from in [DType::F32, DType::F64] {
        if from == DType::F64 {
            if !f64_on_device() {
                continue;
            }
            values.extend([1.0e300, -1.0e300, f64::MAX, 4.9e-324, 1.0e22 + 1.0e6]);
        }
        let xs: Vec<f64> = values
            .iter()
            .map(|&v| {
                if from == DType::F32 {
                    v as f32 as f64
                } else {
                    v
                }
            })
            .collect();
        let x = t(&xs, &[xs.len()], from);
        for to in INTS {
            let got = int_values(&ev(Op::AsType { dtype: to }, &[&x]));
            let want: Vec<i128> = xs.iter().map(|&v| nx_to_int(v, to)).collect();
            assert_eq!(got, want, "{from} -> {to} of {xs:?}");
        }
    }
}

#[test]
fn wide_integers_convert_to_f32_through_f64_as_nx_does() {
    use super::binary::ints;
    // 2^60 + 2^36 + 1 rounds to 2^60 + 2^36 in f64, a tie in f32 that goes to even (2^60);
    // a single rounding gives 2^60 + 2^37
    let s = ints(
        &[(1 << 60) + (1 << 36) + 1, -(1 << 60) - (1 << 36) - 1],
        DType::S64,
    );
    let u = ints(&[(1 << 64) - (1 << 29) - 1], DType::U64);
    let f32_of = |t: &Tensor| v(&ev(Op::AsType { dtype: DType::F32 }, &[t]));
    if rounds_from_f64() {
        let p60 = 2f64.powi(60);
        assert_eq!(f32_of(&s), [p60, -p60]);
    }
    assert_eq!(f32_of(&u), [2f64.powi(64)]);
}

/// The table's float-function fact is what the kernels do: exactly the float functions give
/// `f32` for integer input (the Elixir side derives its type rules from the fact).
#[test]
fn float_functions_are_those_computing_integers_in_f32() {
    let (_, names) = ex_burn_core::op::names()
        .into_iter()
        .find(|(family, _)| *family == "unary")
        .expect("a unary family");
    let x = t(&[1.0, 0.0], &[2], DType::S32);
    for name in names {
        let u: Unary =
            serde_json::from_value(serde_json::Value::String(name.clone())).expect("a unary op");
        let out = ev(Op::Unary(u), &[&x]).dtype();
        assert_eq!(
            out == DType::F32,
            u.float_function(),
            "{name} gives {out:?}"
        );
    }
}

/// f32 `rsqrt` is `1 / sqrt(x)` in f64 rounded once, as Nx.BinaryBackend computes it, in the
/// eager op and in a fused program alike (two f32 roundings missed it for a quarter of inputs).
#[test]
fn f32_rsqrt_is_rounded_once_from_f64() {
    let xs: Vec<f64> = (1..20_000).map(|i| i as f64 * 0.001_37).collect();
    let want: Vec<f64> = xs
        .iter()
        .map(|&x| (1.0 / (x as f32 as f64).sqrt()) as f32 as f64)
        .collect();
    assert_eq!(run(Op::Unary(Unary::Rsqrt), &xs), want);
    // fused with another element-wise step: rsqrt(x) * 1
    let p = Program::new(
        1,
        vec![
            ins(Op::Unary(Unary::Rsqrt), &[0]),
            ins(lit(1.0, DType::F32), &[]),
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: Some(DType::F32),
                },
                &[1, 2],
            ),
        ],
        vec![3],
    )
    .unwrap();
    let out = p.run(vec![f(&xs, &[xs.len()])], dev()).unwrap();
    assert_eq!(v(&out[0]), want);
}
