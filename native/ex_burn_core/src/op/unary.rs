//! Element-wise unary ops. Float functions on integer input compute in Nx's floating type
//! (`{:f, 32}`); functions Burn lacks (expm1, cbrt, erfc, erf_inv, population_count,
//! count_leading_zeros) are composed from Burn ops on the device. `round` rounds half away
//! from zero as Nx does (Burn rounds half to even).

use super::binary;
use super::util;
use super::Unary;
use super::{Arith, Compare};
use crate::dtype::Kind;
use crate::kernels::Rounded;
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{ActivationOps, BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::tensor::TensorMetadata;

pub(super) fn eval(op: Unary, x: &Tensor) -> Result<Tensor> {
    use Unary::*;
    match op {
        _ if on_host_only(op, x) => util::on_host(&[x], |h| eval(op, &h[0])),
        // Unsigned negation wraps (0 - x); GPU backends cannot multiply unsigned by -1.
        Neg if x.dtype().is_unsigned_int() => {
            let zero = util::full_like(x, Scalar::I(0))?;
            binary::same(Arith::Subtract, &zero, &x.cast(x.dtype())?)
        }
        Neg => int_or_float(x, B::int_neg, B::float_neg),
        Abs => {
            if x.dtype().is_unsigned_int() {
                x.cast(x.dtype())
            } else {
                int_or_float(x, B::int_abs, B::float_abs)
            }
        }
        Sign => {
            if x.dtype().is_unsigned_int() {
                let zero = util::full_like(x, Scalar::I(0))?;
                let nz = binary::compare_same(Compare::NotEqual, x, &zero);
                nz.cast(x.dtype())
            } else if x.kind() == Kind::Float {
                // sign(NaN) is NaN (some backends return 0)
                let bd = x.bool_dtype();
                float(x, |p| {
                    B::float_mask_where(B::float_sign(p.clone()), B::float_is_nan(p.clone(), bd), p)
                })
            } else {
                int(x, B::int_sign)
            }
        }
        Floor | Ceil | Round if x.kind() != Kind::Float => x.cast(x.dtype()),
        Floor => float(x, B::float_floor),
        Ceil => float(x, B::float_ceil),
        Round => round(x),
        // f32 on CUDA: in f64, rounded once (CUDA's `expf` and `logf` are an ulp or two off
        // the correctly rounded values that the CPU and Nx.BinaryBackend give; Burn has no
        // cube root, and `|x|^(1/3)` in f32 misses exact cubes: `svd` gave 1.0 for 0.99999994)
        Exp | Log | Cbrt if super::wide::gpu_f32(x) => match rounded_kernel(op, x)? {
            Some(r) => Ok(r),
            None => super::wide::in_f64(&[x], |w| eval(op, &w[0])),
        },
        Sin | Cos | Tanh | Exp if exact32_applies(x) => exact32(op, x),
        // f32 on the host: in f64, rounded once, as Nx.BinaryBackend computes them (Burn's f32
        // kernels were an ulp or two off for 0.5% (log), 7% (log1p), 34% (sigmoid) of inputs)
        Log if on_host_f32(x) => host_f32(x, |v| {
            use super::f32_map::{Elem1, Log};
            v.iter_mut().for_each(|e| *e = Log::f(*e))
        }),
        Log1p if on_host_f32(x) => host_f32(x, |v| {
            v.iter_mut().for_each(|e| *e = (*e as f64).ln_1p() as f32)
        }),
        Sigmoid if on_host_f32(x) => host_f32(x, |v| {
            super::exact32::apply_in_place(super::exact32::Fun::Sigmoid, v)
        }),
        Exp => float(x, B::float_exp),
        Log => float(x, B::float_log),
        // f32 keeps Burn's vectorised kernel (softplus is log1p(exp(x))); f64 on the CPU is
        // computed by `hostmath` (correctly rounded where 1 + x is exact).
        Log1p if x.dtype() == DType::F64 && super::hostmath::applies(op, x) => {
            super::hostmath::apply(op, x)
        }
        Log1p => float(x, B::float_log1p),
        Sqrt => float(x, B::float_sqrt),
        // f32: `1 / sqrt(x)` in f64, rounded once, as Nx.BinaryBackend computes it (in f32 the
        // two roundings missed its value for a quarter of inputs); the fused maps' function
        Rsqrt if on_host_f32(x) => host_f32(x, |v| {
            use super::f32_map::{Elem1, Rsqrt};
            v.iter_mut().for_each(|e| *e = Rsqrt::f(*e))
        }),
        Rsqrt if super::wide::gpu_f32(x) => super::wide::in_f64(&[x], |w| eval(op, &w[0])),
        Rsqrt => float(x, |p| B::float_recip(B::float_sqrt(p))),
        _ if super::hostmath::applies(op, x) => super::hostmath::apply(op, x),
        // (on the device in f64: `library` is Burn's kernel for each of these ops)
        _ if wide_applies(op, x) => super::wide::in_f64(&[x], |w| with_library(op, &w[0])),
        Sin => float(x, B::float_sin),
        Cos => float(x, B::float_cos),
        Tanh => float(x, B::float_tanh),
        Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh | Acosh | Atanh => with_library(op, x),
        Erf => float(x, B::float_erf),
        Erfc => erfc(x),
        // Burn's default sigmoid computes in f32 (GPU backends keep that default): f64 input
        // computes 1 / (1 + exp(-x)) in f64.
        Sigmoid if x.dtype() == DType::F64 => float(x, |p| {
            B::float_recip(B::float_add_scalar(
                B::float_exp(B::float_neg(p)),
                1.0f64.into(),
            ))
        }),
        Sigmoid => float(x, B::sigmoid),
        Relu => match x.kind() {
            Kind::Float => float(x, B::relu),
            _ => {
                let zero = util::full_like(x, Scalar::I(0))?;
                binary::same(Arith::Max, &x.cast(x.dtype())?, &zero)
            }
        },
        Expm1 => expm1(x),
        Cbrt => cbrt(x),
        ErfInv => erf_inv(x),
        IsNan | IsInfinity => {
            if x.kind() != Kind::Float {
                let z = util::full(x.shape(), DType::U8, Scalar::I(0), &x.dispatch_device())?;
                return Ok(z);
            }
            let (p, bd) = (x.prim(), x.bool_dtype());
            let b = if op == IsNan {
                B::float_is_nan(p, bd)
            } else {
                B::float_is_inf(p, bd)
            };
            Ok(util::bool_tensor(b, x.shape().to_vec()))
        }
        LogicalNot => {
            let zero = util::full(&[], x.dtype(), Scalar::I(0), &x.dispatch_device())?;
            binary::compare(Compare::Equal, x, &zero)
        }
        BitwiseNot => int(x, B::bitwise_not),
        PopulationCount => population_count(x),
        CountLeadingZeros => count_leading_zeros(x),
    }
}

/// Whether `op` of `x` runs on the host, `x` being on a GPU:
/// * f64 `erf`, `erfc`, `erf_inv`, `tan`, `atan`, `asinh`, ... (`hostmath`): on a GPU, erfc is
///   composed from an approximation good to an f32, Burn's `erf` is a ~1e-7 polyfill on the
///   wgpu backends (CUDA calls its libm), erf_inv is refined through erf, and CUDA's f64
///   `atan`, `tan`, `asinh` are an ulp or two off the C library's (Nx.BinaryBackend's);
/// * on the wgpu devices, which compute no f64 to round them from, `erf_inv` (computed through
///   f64 in every type), `cbrt` (Burn has none; a power of 1/3 in f32 misses exact cubes) and
///   f32 `tan`, `asin`, ... (`library`; their drivers' own: `asin` 4e-4 off on Mesa's
///   lavapipe).
fn on_host_only(op: Unary, x: &Tensor) -> bool {
    if x.device() == crate::Device::Cpu {
        return false;
    }
    let f64_in_library = op == Unary::ErfInv || super::hostmath::function(op).is_some();
    let no_f64 = !super::wide::f64_device(x.device());
    (x.dtype() == DType::F64 && f64_in_library)
        || (no_f64 && (matches!(op, Unary::ErfInv | Unary::Cbrt) || library(op).is_some()))
}

/// f32 `exp`, `log` or `cbrt` of a device tensor in f64, rounded once, as one kernel of the
/// device kernels; `None`: no such kernel or layout (then three kernels: a cast, the f64
/// function, a cast).
fn rounded_kernel(op: Unary, x: &Tensor) -> Result<Option<Tensor>> {
    let f = match op {
        Unary::Exp => Rounded::Exp,
        Unary::Log => Rounded::Log,
        Unary::Cbrt => Rounded::Cbrt,
        _ => return Ok(None),
    };
    let Some(k) = x.kernels() else {
        return Ok(None);
    };
    Ok(k.rounded(x.operand(), f)?
        .map(|p| Tensor::from_kernel(p, x.shape().to_vec())))
}

/// Whether `x` is a non-empty f32 tensor on the host.
fn on_host_f32(x: &Tensor) -> bool {
    x.dtype() == DType::F32 && x.device() == crate::Device::Cpu && x.numel() > 0
}

/// f32 `sin`, `cos`, `tanh` and `exp` on a CPU with AVX2 run the correctly rounded kernels of
/// [`super::exact32`] (the fused chunk loops use the same ones).
fn exact32_applies(x: &Tensor) -> bool {
    on_host_f32(x) && super::exact32::available()
}

fn exact32(op: Unary, x: &Tensor) -> Result<Tensor> {
    use super::exact32::{apply_in_place, Fun};
    let fun = Fun::of(op).ok_or_else(|| Error::Execution(format!("{op:?} has no exact kernel")))?;
    host_f32(x, |v| apply_in_place(fun, v))
}

/// The values of the f32 host tensor `x`, changed in place by `f` (pieces of [`util::HOST_PIECE`]
/// elements over the compute threads), as a new tensor.
fn host_f32(x: &Tensor, f: impl Fn(&mut [f32]) + Sync) -> Result<Tensor> {
    let mut values = x.to_f32_vec()?;
    if values.len() > util::HOST_PIECE {
        crate::threads::for_each_chunk_mut(&mut values, util::HOST_PIECE, |_, piece| f(piece))?;
    } else {
        f(&mut values);
    }
    Tensor::from_host_f32(values, x.shape().to_vec())
}

/// Whether `op` of f32 `x` on a GPU is computed in f64 here: the functions the CPU evaluates
/// through the C library in f64 (`hostmath`) that Burn has kernels for (tan, asin, acos, atan,
/// sinh, cosh, asinh, acosh, atanh; [`library`]); not `erf` (on the hot path of exact
/// GELUs), nor `log1p`, which the CPU also leaves to Burn's vectorised f32 kernel (softplus).
fn wide_applies(op: Unary, x: &Tensor) -> bool {
    super::wide::gpu_f32(x) && library(op).is_some()
}

/// Applies a float function; integer input is first converted to Nx's floating type.
/// Burn's kernel for the functions of the C library that Burn has (`hostmath` computes them on
/// the CPU; `wide` runs these in f64 for f32 on a GPU).
pub(super) fn library(op: Unary) -> Option<fn(Prim) -> Prim> {
    use Unary::*;
    Some(match op {
        Tan => B::float_tan,
        Asin => B::float_asin,
        Acos => B::float_acos,
        Atan => B::float_atan,
        Sinh => B::float_sinh,
        Cosh => B::float_cosh,
        Asinh => B::float_asinh,
        Acosh => B::float_acosh,
        Atanh => B::float_atanh,
        _ => return None,
    })
}

/// `op` by Burn's kernel ([`library`]).
fn with_library(op: Unary, x: &Tensor) -> Result<Tensor> {
    let f = library(op).ok_or_else(|| Error::Execution(format!("{op:?} has no library kernel")))?;
    float(x, f)
}

fn float(x: &Tensor, f: impl FnOnce(Prim) -> Prim) -> Result<Tensor> {
    let t = x.cast(x.dtype().to_floating())?;
    if t.numel() == 0 {
        return Ok(t);
    }
    Ok(Tensor::from_prim(
        f(t.prim()),
        Kind::Float,
        t.shape().to_vec(),
    ))
}

fn int(x: &Tensor, f: impl FnOnce(Prim) -> Prim) -> Result<Tensor> {
    if x.dtype().is_float() {
        return Err(Error::Dtype(format!(
            "expects an integer tensor, got {}",
            x.dtype()
        )));
    }
    let t = x.cast(x.dtype())?;
    if t.numel() == 0 {
        return Ok(t);
    }
    Ok(Tensor::from_prim(
        f(t.prim()),
        Kind::Int,
        t.shape().to_vec(),
    ))
}

fn int_or_float(
    x: &Tensor,
    i: impl FnOnce(Prim) -> Prim,
    f: impl FnOnce(Prim) -> Prim,
) -> Result<Tensor> {
    if x.dtype().is_float() {
        float(x, f)
    } else {
        int(x, i)
    }
}

/// Float helpers over primitives, for compositions.
fn adds(p: Prim, c: f64) -> Prim {
    B::float_add_scalar(p, c.into())
}
fn muls(p: Prim, c: f64) -> Prim {
    B::float_mul_scalar(p, c.into())
}

/// Round half away from zero: trunc(x) + sign(x) where |x - trunc(x)| >= 0.5. A zero result
/// is +0.0, as Nx's (`:erlang.round/1` returns an integer): adding +0.0 clears the sign of
/// -0.0 (x in (-0.5, 0]) and changes nothing else.
fn round(x: &Tensor) -> Result<Tensor> {
    if x.numel() == 0 {
        return Ok(x.clone());
    }
    let (p, bd) = (x.prim(), x.bool_dtype());
    let t = B::float_trunc(p.clone());
    let frac = B::float_abs(B::float_sub(p.clone(), t.clone()));
    let half = B::float_greater_equal_elem(frac, 0.5f64.into(), bd);
    let bumped = B::float_add(t.clone(), B::float_sign(p));
    Ok(Tensor::from_prim(
        adds(B::float_mask_where(t, half, bumped), 0.0),
        Kind::Float,
        x.shape().to_vec(),
    ))
}

/// exp(x) - 1, with a second-order series near zero where the subtraction cancels.
fn expm1(x: &Tensor) -> Result<Tensor> {
    let bd = x.bool_dtype();
    float(x, |p| {
        let direct = adds(B::float_exp(p.clone()), -1.0);
        let series = B::float_add(p.clone(), muls(B::float_mul(p.clone(), p.clone()), 0.5));
        let small = B::float_lower_elem(B::float_abs(p), 1e-5f64.into(), bd);
        B::float_mask_where(direct, small, series)
    })
}

/// Real cube root: sign(x) * |x|^(1/3).
fn cbrt(x: &Tensor) -> Result<Tensor> {
    float(x, |p| {
        let mag = B::float_powf_scalar(B::float_abs(p.clone()), (1.0f64 / 3.0).into());
        B::float_mul(mag, B::float_sign(p))
    })
}

/// Inverse error function: Giles' polynomial approximation refined by two Newton steps, in
/// f64 for every float type (rounded once to the result type).
/// `erfc` on GPUs (host tensors go through libm): `1 - erf(x)` where that keeps its digits
/// (`x < 0.5`), else Numerical Recipes' `erfcc` (relative error below 1.2e-7 everywhere), so
/// that the tail (`erfc(4)` = 1.5e-8 in f32) is not lost to cancellation.
fn erfc(x: &Tensor) -> Result<Tensor> {
    const C: [f64; 10] = [
        0.170_872_77,
        -0.822_152_23,
        1.488_515_87,
        -1.135_203_98,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_68,
        -1.265_512_23,
    ];
    let bd = x.bool_dtype();
    float(x, |p| {
        let z = B::float_abs(p.clone());
        let t = B::float_recip(adds(muls(z.clone(), 0.5), 1.0));
        let mut poly = muls(
            B::float_ones(t.shape(), &B::float_device(&t), dtype_of(&t)),
            C[0],
        );
        for c in &C[1..] {
            poly = adds(B::float_mul(poly, t.clone()), *c);
        }
        let tail = B::float_mul(
            t,
            B::float_exp(B::float_sub(poly, B::float_mul(z.clone(), z))),
        );
        let negative = B::float_lower_elem(p.clone(), 0.0f64.into(), bd);
        let tail = B::float_mask_where(tail.clone(), negative, adds(B::float_neg(tail), 2.0));
        let near = B::float_lower_elem(B::float_abs(p.clone()), 0.5f64.into(), bd);
        let direct = adds(B::float_neg(B::float_erf(p)), 1.0);
        B::float_mask_where(tail, near, direct)
    })
}

/// Giles' approximation evaluated in f64, as Nx computes it; f64 results are then refined by
/// two Newton steps (the approximation alone is good to ~3e-8, an f32's worth), while narrower
/// types keep Nx's values exactly (`Nx.Random.normal` draws through it).
fn erf_inv(x: &Tensor) -> Result<Tensor> {
    let out = x.dtype().to_floating();
    let newton = if out == DType::F64 { 2 } else { 0 };
    erf_inv_f64(&x.cast(DType::F64)?, newton)?.cast(out)
}

fn erf_inv_f64(x: &Tensor, newton_steps: usize) -> Result<Tensor> {
    const SMALL: [f64; 9] = [
        2.81022636e-08,
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ];
    const LARGE: [f64; 9] = [
        -0.000200214257,
        0.000100950558,
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ];
    let horner = |w: Prim, coef: &[f64]| {
        let mut p = B::float_mul_scalar(
            B::float_ones(w.shape(), &B::float_device(&w), dtype_of(&w)),
            coef[0].into(),
        );
        for c in &coef[1..] {
            p = adds(B::float_mul(p, w.clone()), *c);
        }
        p
    };
    let bd = x.bool_dtype();
    float(x, |p| {
        // w = -log((1 - x)(1 + x))
        let one_minus = adds(B::float_neg(p.clone()), 1.0);
        let one_plus = adds(p.clone(), 1.0);
        let w = B::float_neg(B::float_log(B::float_mul(one_minus, one_plus)));
        let small = horner(adds(w.clone(), -2.5), &SMALL);
        let large = horner(adds(B::float_sqrt(w.clone()), -3.0), &LARGE);
        let is_small = B::float_lower_elem(w, 5.0f64.into(), bd);
        let y = B::float_mul(B::float_mask_where(large, is_small, small), p.clone());
        // Newton: y -= (erf(y) - x) / (2/sqrt(pi) * exp(-y^2)), only where |x| < 1.
        let inside = B::float_lower_elem(B::float_abs(p.clone()), 1.0f64.into(), bd);
        let mut y = y;
        for _ in 0..newton_steps {
            let err = B::float_sub(B::float_erf(y.clone()), p.clone());
            let deriv = muls(
                B::float_exp(B::float_neg(B::float_mul(y.clone(), y.clone()))),
                std::f64::consts::FRAC_2_SQRT_PI,
            );
            let refined = B::float_sub(y.clone(), B::float_div(err, deriv));
            y = B::float_mask_where(y, inside.clone(), refined);
        }
        // erf_inv(±1) = ±inf exactly.
        let at_one = B::float_equal_elem(B::float_abs(p.clone()), 1.0f64.into(), bd);
        B::float_mask_where(y, at_one, muls(p, f64::INFINITY))
    })
}

fn dtype_of(p: &Prim) -> burn::tensor::FloatDType {
    use burn::tensor::TensorMetadata;
    p.dtype().into()
}

/// Sums `term(x >> i)` over every bit position `i` of an integer tensor (exact for every width).
fn sum_over_bits(x: &Tensor, term: impl Fn(Prim, DType) -> Result<Prim>) -> Result<Tensor> {
    let t = x.dtype();
    if t.is_float() {
        return Err(Error::Dtype(format!("expects an integer tensor, got {t}")));
    }
    let x = x.cast(t)?;
    if x.numel() == 0 {
        return Ok(x);
    }
    let mut count = B::int_zeros(x.prim().shape(), &x.dispatch_device(), t.int_dtype()?);
    for i in 0..t.bits() {
        let shifted = B::bitwise_right_shift_scalar(x.prim(), (i as i64).into());
        count = B::int_add(count, term(shifted, t)?);
    }
    Ok(Tensor::from_prim(count, Kind::Int, x.shape().to_vec()))
}

/// Number of set bits: the low bit of each shift.
fn population_count(x: &Tensor) -> Result<Tensor> {
    sum_over_bits(x, |s, _| Ok(B::bitwise_and_scalar(s, 1i64.into())))
}

/// Leading zero bits: the shifts `x >> i` that leave zero; negative signed values have none.
fn count_leading_zeros(x: &Tensor) -> Result<Tensor> {
    let bd = x.bool_dtype();
    sum_over_bits(x, |s, t| {
        Ok(B::bool_into_int(
            B::int_equal_elem(s, 0i64.into(), bd),
            t.int_dtype()?,
        ))
    })
}

/// Reinterprets the bytes as another type of the same width (through host memory).
pub(super) fn bitcast(x: &Tensor, to: DType) -> Result<Tensor> {
    if x.dtype().size() != to.size() {
        return Err(Error::Dtype(format!(
            "bitcast needs types of the same width, got {} and {to}",
            x.dtype()
        )));
    }
    let bytes = x.to_bytes(None)?;
    Tensor::from_bytes(&bytes, x.shape(), to, x.device())
}
