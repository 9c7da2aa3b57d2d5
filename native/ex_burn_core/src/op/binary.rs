//! Element-wise binary ops with Nx broadcasting and type rules, plus `select` and `clip`.
//!
//! Nx semantics the core enforces where Burn differs: `remainder` takes the dividend's sign
//! (Burn's follows the divisor), `quotient` truncates toward zero, integer arithmetic wraps,
//! `min`/`max` propagate NaN; integer shifts, powers and u64-with-signed pairs follow Nx in
//! `integer`.

use super::util;
use super::{Arith, Compare, Logical, Op};
use crate::dtype::Kind;
use crate::scalar::Scalar;
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Tensor};
use burn::tensor::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};

mod integer;

pub(super) fn eval(op: &Op, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        Op::Binary { op: f, out } => binary(*f, a, b, result_type(*f, *out, a.dtype(), b.dtype())),
        Op::Compare(c) => compare(*c, a, b),
        Op::Logical(l) => logical(*l, a, b),
        other => Err(Error::Unsupported(format!(
            "{} is not a binary op",
            other.name()
        ))),
    }
}

/// The type `f` computes in on operands of types `a` and `b`: `out` when given, else Nx's
/// merge of the two (a float for `divide` and `atan2`).
fn result_type(f: Arith, out: Option<DType>, a: DType, b: DType) -> DType {
    let merged = DType::merge(a, b);
    out.unwrap_or(match f {
        Arith::Divide | Arith::Atan2 => merged.to_floating(),
        _ => merged,
    })
}

/// `f` of tensor `t` (of the result type) and scalar `v` (`v f t` when `left`) by Burn's
/// scalar kernels. `f` is `add`, `subtract`, `multiply` or `divide`; the callers rule out a
/// scalar dividend and, for integers, a scalar minuend and division.
fn scalar_kernel(f: Arith, t: &Tensor, v: burn::tensor::Scalar, left: bool) -> Tensor {
    let p = t.prim();
    let prim = match (t.kind() == Kind::Float, f, left) {
        (true, Arith::Add, _) => B::float_add_scalar(p, v),
        (true, Arith::Subtract, false) => B::float_sub_scalar(p, v),
        (true, Arith::Subtract, true) => B::float_add_scalar(B::float_neg(p), v),
        (true, Arith::Multiply, _) => B::float_mul_scalar(p, v),
        (true, _, _) => B::float_div_scalar(p, v),
        (false, Arith::Add, _) => B::int_add_scalar(p, v),
        (false, Arith::Subtract, _) => B::int_sub_scalar(p, v),
        (false, _, _) => B::int_mul_scalar(p, v),
    };
    Tensor::same_shape_as(prim, t.kind(), t)
}

/// Broadcasts two tensors to a common shape after casting both to `dtype`.
pub(crate) fn prepare(a: &Tensor, b: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
    let shape = util::broadcast_shape(a.shape(), b.shape())?;
    let a = util::broadcast_to(&a.cast(dtype)?, &shape)?;
    let b = util::broadcast_to(&b.cast(dtype)?, &shape)?;
    Ok((a, b))
}

/// Applies an arithmetic/bitwise function with Nx semantics, computing in `out`.
pub(crate) fn binary(f: Arith, a: &Tensor, b: &Tensor, out: DType) -> Result<Tensor> {
    let int_only = matches!(
        f,
        Arith::Quotient
            | Arith::BitwiseAnd
            | Arith::BitwiseOr
            | Arith::BitwiseXor
            | Arith::LeftShift
            | Arith::RightShift
    );
    if int_only && out.is_float() {
        return Err(Error::Dtype(format!(
            "expects integer operands, got {} and {}",
            a.dtype(),
            b.dtype()
        )));
    }
    if f == Arith::Atan2 && !out.is_float() {
        return Err(Error::Dtype(format!(
            "expects a float result type, got {out}"
        )));
    }
    if !out.is_float() {
        match f {
            Arith::LeftShift | Arith::RightShift => {
                return integer::shift(f == Arith::LeftShift, a, b, out)
            }
            Arith::Pow => return integer::pow(a, b, out),
            Arith::Min | Arith::Max | Arith::Quotient | Arith::Remainder
                if integer::u64_with_signed(a.dtype(), b.dtype()) =>
            {
                return integer::mixed(f, a, b, out)
            }
            _ => {}
        }
    }
    if f == Arith::Divide && a.dtype().is_int() && b.dtype().is_int() && out != DType::F64 {
        // Nx divides the integers' f64 values and rounds the quotient once to `out`
        if super::wide::rounds_from_f64(a.device()) {
            return binary(f, a, b, DType::F64)?.cast(out);
        }
    }
    if a.dtype() == out && b.dtype() == out && a.shape() == b.shape() && a.kind() != Kind::Bool {
        return same(f, a, b);
    }
    if let Some(t) = with_scalar(f, a, b, out)? {
        return Ok(t);
    }
    if let Some(t) = small_power(f, a, b, out)? {
        return Ok(t);
    }
    let (a, b) = prepare(a, b, out)?;
    same(f, &a, &b)
}

/// Below this many elements reading a scalar operand back costs more than broadcasting it.
const SCALAR_KERNEL_MIN: usize = 4096;

/// `tensor op scalar` on the CPU runs as Burn's scalar kernel: the CPU backend walks broadcast
/// views several times slower than contiguous data. The results are identical (the scalar is
/// first converted to `out`, as broadcasting would). GPU kernels broadcast at no cost.
fn with_scalar(f: Arith, a: &Tensor, b: &Tensor, out: DType) -> Result<Option<Tensor>> {
    let (big, small, left) = match (a.rank(), b.rank()) {
        (r, 0) if r > 0 => (a, b, false),
        (0, r) if r > 0 => (b, a, true),
        _ => return Ok(None),
    };
    let float = out.is_float();
    let supported = match f {
        Arith::Add | Arith::Multiply => true,
        Arith::Subtract => float || !left,
        Arith::Divide => float && !left,
        _ => false,
    };
    if !supported
        || big.dtype() != out
        || big.kind() == Kind::Bool
        || big.numel() < SCALAR_KERNEL_MIN
        || !matches!(big.dispatch_device(), burn::DispatchDevice::Flex(_))
    {
        return Ok(None);
    }
    let v = util::read_scalar(&small.cast(out)?)?.burn_for(out);
    Ok(Some(scalar_kernel(f, big, v, left)))
}

/// `t op literal` (`literal op t` when `left`) for float `add`, `subtract`, `multiply` and
/// `divide` (not a literal dividend), where the literal's value is known on the host (a
/// program's constant, see `program::literal`): Burn's scalar kernel on `t`, with the value
/// converted to the result type on the host as the device converts it (through the literal's
/// own type: f64 and integers up to 2^53 exactly, f32 rounded to f32 first). `None` where that
/// does not apply: other ops or types, the literal's type not one of those, or `t` not
/// already of the result type.
pub(crate) fn with_literal(
    f: Arith,
    out: Option<DType>,
    t: &Tensor,
    (value, dtype): (Scalar, DType),
    left: bool,
) -> Result<Option<Tensor>> {
    let out = result_type(f, out, t.dtype(), dtype);
    let supported = match f {
        Arith::Add | Arith::Multiply | Arith::Subtract => true,
        Arith::Divide => !left,
        _ => false,
    };
    if !supported
        || !out.is_float()
        || t.dtype() != out
        || t.rank() == 0
        || t.numel() == 0
        || t.kind() != Kind::Float
    {
        return Ok(None);
    }
    let Some(host) = value.stored_as(dtype) else {
        return Ok(None);
    };
    Ok(Some(scalar_kernel(
        f,
        t,
        Scalar::F(host).burn_for(out),
        left,
    )))
}

/// `x ** 2` and `x ** 3` of an f32 tensor on the CPU or a CUDA GPU (exponent a scalar): the
/// products rounded once, as Nx's BinaryBackend computes them (an f64 power rounded to f32),
/// instead of `powf` per element (several times slower, and `powf(x, 3)` is not always the
/// correctly rounded cube). `x * x` is exact in f64, so its f32 rounding is the correctly
/// rounded square; the cube is `x * x * x` in f64 (one rounding there) rounded to f32. Fused
/// kernels compute the same (`program::fuse`), so fused and op-by-op results agree. On the CPU
/// the exponent is read on the host; on a GPU one device kernel reads it on the device
/// ([`crate::kernels::DeviceKernels::small_power`]), so that no `pow` waits for the GPU.
fn small_power(f: Arith, a: &Tensor, b: &Tensor, out: DType) -> Result<Option<Tensor>> {
    if f != Arith::Pow
        || out != DType::F32
        || a.dtype() != DType::F32
        || a.rank() == 0
        || b.rank() != 0
    {
        return Ok(None);
    }
    match a.dispatch_device() {
        burn::DispatchDevice::Flex(_) => {}
        // on a device: the exponent read there by a kernel (reading it back would wait)
        _ => {
            let Some(k) = a.kernels() else {
                return Ok(None);
            };
            let e = b.cast(DType::F32)?;
            return Ok(k
                .small_power(a.operand(), e.operand())?
                .map(|p| Tensor::from_kernel(p, a.shape().to_vec())));
        }
    }
    match util::read_scalar(&b.cast(DType::F32)?)?.to_f64() {
        2.0 => Ok(Some(same(Arith::Multiply, a, a)?)),
        3.0 => {
            let w = a.cast(DType::F64)?;
            same(Arith::Multiply, &same(Arith::Multiply, &w, &w)?, &w)?
                .cast(DType::F32)
                .map(Some)
        }
        _ => Ok(None),
    }
}

/// Applies `f` to two tensors of one dtype and shape.
pub(crate) fn same(f: Arith, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.numel() == 0 {
        return Ok(a.clone());
    }
    let kind = a.kind();
    let (x, y) = (a.prim(), b.prim());
    let prim: Prim = match (kind, f) {
        (Kind::Float, Arith::Add) => B::float_add(x, y),
        (Kind::Float, Arith::Subtract) => B::float_sub(x, y),
        (Kind::Float, Arith::Multiply) => B::float_mul(x, y),
        (Kind::Float, Arith::Divide) => B::float_div(x, y),
        // f32 pow on the host in f64, rounded once, as Nx.BinaryBackend (f32 `powf` was an
        // ulp off for some inputs; GPUs keep their f32 `powf`, which their fused kernels share)
        (Kind::Float, Arith::Pow)
            if a.dtype() == DType::F32 && a.device() == crate::Device::Cpu =>
        {
            return host_f32_pair(a, b, super::f32_map::pow);
        }
        (Kind::Float, Arith::Pow) => B::float_powf(x, y),
        // f32 atan2 in f64, rounded once, on the host and CUDA (Burn's f32 kernels are ulps
        // off); the wgpu devices compute no f64 (and their drivers' f32 atan2 was 4e-6 off on
        // Mesa's lavapipe): the host's
        (Kind::Float, Arith::Atan2)
            if a.dtype() == DType::F32 && super::wide::rounds_from_f64(a.device()) =>
        {
            return super::wide::in_f64(&[a, b], |w| same(f, &w[0], &w[1]))
        }
        (Kind::Float, Arith::Atan2) if a.dtype() == DType::F32 => {
            return util::on_host(&[a, b], |h| same(f, &h[0], &h[1]))
        }
        (Kind::Float, Arith::Atan2) => B::float_atan2(x, y),
        (Kind::Float, Arith::Remainder) => return remainder(a, b),
        (_, Arith::Min) => return min_max(a, b, false),
        (_, Arith::Max) => return min_max(a, b, true),
        (Kind::Float, _) => return Err(Error::Dtype(format!("{f:?} expects integer operands"))),
        (_, Arith::Add) => B::int_add(x, y),
        (_, Arith::Subtract) => B::int_sub(x, y),
        (_, Arith::Multiply) => B::int_mul(x, y),
        (_, Arith::Divide) | (_, Arith::Quotient) => {
            nonzero_divisor(b)?;
            if a.dtype().is_signed_int() {
                // MIN / -1 overflows (Rust's division panics): divide by 1 there and negate,
                // which wraps to MIN as Nx's stored result does.
                let minus_one = B::int_equal_elem(y.clone(), (-1i64).into(), b.bool_dtype());
                let safe = B::int_mask_fill(y, minus_one.clone(), 1i64.into());
                let q = B::int_div(x.clone(), safe);
                B::int_mask_where(q, minus_one, B::int_neg(x))
            } else {
                B::int_div(x, y)
            }
        }
        (_, Arith::Remainder) => return remainder(a, b),
        (_, Arith::Pow) => return integer::pow(a, b, a.dtype()),
        (_, Arith::BitwiseAnd) => B::bitwise_and(x, y),
        (_, Arith::BitwiseOr) => B::bitwise_or(x, y),
        (_, Arith::BitwiseXor) => B::bitwise_xor(x, y),
        (_, Arith::LeftShift) | (_, Arith::RightShift) => {
            return integer::shift(f == Arith::LeftShift, a, b, a.dtype())
        }
        (_, Arith::Atan2) => return Err(Error::Dtype("atan2 expects float operands".into())),
    };
    let kind = if kind == Kind::Bool { Kind::Int } else { kind };
    Ok(Tensor::same_shape_as(prim, kind, a))
}

/// Integer division by zero has no value (Burn's CPU kernels would panic, GPU ones return
/// garbage): refused, as Nx refuses it. One device read per integer division.
pub(super) fn nonzero_divisor(b: &Tensor) -> Result<()> {
    let zeros = B::int_equal_elem(b.int_prim()?, 0i64.into(), b.bool_dtype());
    let any = Tensor::from_prim(B::bool_any(zeros), Kind::Bool, vec![]);
    if any
        .cast(DType::U8)?
        .to_bytes(None)?
        .first()
        .copied()
        .unwrap_or(0)
        != 0
    {
        return Err(Error::Argument(
            "integer division by zero (a divisor element is 0)".into(),
        ));
    }
    Ok(())
}

/// Remainder with the dividend's sign (C `fmod` / Rust `%`). Integers: `a - b * (a / b)` with
/// the truncating quotient (Burn's integer remainder does not compile for s64 on CUDA);
/// f32 and f64: `fmod` itself, exact (as Nx.BinaryBackend), on the host (operands on a device
/// go there and back); other floats: from Burn's divisor-signed remainder.
fn remainder(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.kind() != Kind::Float {
        let q = same(Arith::Quotient, a, b)?;
        return same(Arith::Subtract, a, &same(Arith::Multiply, b, &q)?);
    }
    match (a.dtype(), a.device()) {
        (DType::F32, crate::Device::Cpu) => return host_f32_pair(a, b, |p, q| p % q),
        (DType::F64, crate::Device::Cpu) => {
            let r = host_pair(a, b, a.to_f64_vec()?, b.to_f64_vec()?, |p, q| p % q)?;
            return Tensor::from_host_f64(r, a.shape().to_vec());
        }
        // the device's kernels compute it from a rounded quotient: exact on the host instead
        (DType::F32 | DType::F64, _) => return util::on_host(&[a, b], |h| remainder(&h[0], &h[1])),
        _ => {}
    }
    let r = Tensor::from_prim(
        B::float_remainder(a.prim(), b.prim()),
        Kind::Float,
        a.shape().to_vec(),
    );
    // r has b's sign; where r != 0 and sign(a) != sign(b), the C remainder is r - b.
    let zero = util::broadcast_to(&util::scalar_like(a, 0.0)?, a.shape())?;
    let a_neg = compare_same(Compare::Less, a, &zero);
    let b_neg = compare_same(Compare::Less, b, &zero);
    let r_nz = compare_same(Compare::NotEqual, &r, &zero);
    let signs_differ = bool_op(Arith::BitwiseXor, &a_neg, &b_neg);
    let fix = bool_op(Arith::BitwiseAnd, &signs_differ, &r_nz);
    let shifted = same(Arith::Subtract, &r, b)?;
    Ok(util::select(&fix, &shifted, &r))
}

/// `f` of the elements of two f32 host tensors of one shape (as [`same`] receives them), in
/// pieces of [`util::HOST_PIECE`] over the compute threads.
fn host_f32_pair(a: &Tensor, b: &Tensor, f: impl Fn(f32, f32) -> f32 + Sync) -> Result<Tensor> {
    let r = host_pair(a, b, a.to_f32_vec()?, b.to_f32_vec()?, f)?;
    Tensor::from_host_f32(r, a.shape().to_vec())
}

/// `f` of the values `x` and `y` of host tensors `a` and `b` of one shape, element by
/// element, in pieces of [`util::HOST_PIECE`] over the compute threads. (f32 and f64 `fmod`
/// this way is exact: Burn's `a - b * floor(a / b)` rounds the quotient and the product, and
/// a quarter of f32 remainders of values up to 10 were an ulp or more off.)
fn host_pair<T: Copy + Send + Sync>(
    a: &Tensor,
    b: &Tensor,
    mut x: Vec<T>,
    y: Vec<T>,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<Vec<T>> {
    if x.len() != y.len() {
        return Err(Error::Execution(format!(
            "operands of {:?} and {:?} elements",
            a.shape(),
            b.shape()
        )));
    }
    crate::threads::for_each_chunk_mut(&mut x, util::HOST_PIECE, |i, xs| {
        let ys = &y[i * util::HOST_PIECE..];
        xs.iter_mut().zip(ys).for_each(|(p, &q)| *p = f(*p, q))
    })?;
    Ok(x)
}

/// NaN-propagating element-wise min/max: on a GPU with such a kernel one pass of it
/// ([`crate::kernels::DeviceKernels::extremum_pair`]), else a comparison, a NaN test, an `or`
/// and a select (the same values).
fn min_max(a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    if a.dtype() == DType::F32 && b.dtype() == DType::F32 && a.shape() == b.shape() {
        if let Some(k) = a.kernels() {
            if let Some(p) = k.extremum_pair(a.operand(), b.operand(), max)? {
                return Ok(Tensor::from_kernel(p, a.shape().to_vec()));
            }
        }
    }
    let a_wins = compare_same(if max { Compare::Greater } else { Compare::Less }, a, b);
    let a_wins = if a.kind() == Kind::Float {
        let a_nan = util::bool_tensor(
            B::float_is_nan(a.prim(), a.bool_dtype()),
            a.shape().to_vec(),
        );
        bool_op(Arith::BitwiseOr, &a_wins, &a_nan)
    } else {
        a_wins
    };
    Ok(util::select(&a_wins, a, b))
}

/// Nx comparison: computes in the merged type of both operands, returns `{:u, 8}` (bool kind).
pub(crate) fn compare(c: Compare, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if integer::u64_with_signed(a.dtype(), b.dtype()) {
        return integer::compare_mixed(c, a, b);
    }
    let t = DType::merge(a.dtype(), b.dtype());
    let (a, b) = prepare(a, b, t)?;
    if let Some(r) = super::host_map::compare_f32(c, &a, &b)? {
        return Ok(r);
    }
    Ok(compare_same(c, &a, &b))
}

/// Compares two tensors of one dtype and shape.
pub(crate) fn compare_same(c: Compare, a: &Tensor, b: &Tensor) -> Tensor {
    let shape = a.shape().to_vec();
    let (x, y) = (a.prim(), b.prim());
    let bd = a.bool_dtype();
    let prim = match a.kind() {
        Kind::Float => match c {
            Compare::Equal => B::float_equal(x, y, bd),
            Compare::NotEqual => B::float_not_equal(x, y, bd),
            Compare::Less => B::float_lower(x, y, bd),
            Compare::LessEqual => B::float_lower_equal(x, y, bd),
            Compare::Greater => B::float_greater(x, y, bd),
            Compare::GreaterEqual => B::float_greater_equal(x, y, bd),
        },
        Kind::Int => match c {
            Compare::Equal => B::int_equal(x, y, bd),
            Compare::NotEqual => B::int_not_equal(x, y, bd),
            Compare::Less => B::int_lower(x, y, bd),
            Compare::LessEqual => B::int_lower_equal(x, y, bd),
            Compare::Greater => B::int_greater(x, y, bd),
            Compare::GreaterEqual => B::int_greater_equal(x, y, bd),
        },
        // false < true, as on u8.
        Kind::Bool => match c {
            Compare::Equal => B::bool_equal(x, y),
            Compare::NotEqual => B::bool_not_equal(x, y),
            Compare::Less => B::bool_and(B::bool_not(x), y),
            Compare::LessEqual => B::bool_or(B::bool_not(x), y),
            Compare::Greater => B::bool_and(x, B::bool_not(y)),
            Compare::GreaterEqual => B::bool_or(x, B::bool_not(y)),
        },
    };
    util::bool_tensor(prim, shape)
}

/// Boolean and/or/xor of two same-shape tensors (non-zero is true).
pub(crate) fn bool_op(f: Arith, a: &Tensor, b: &Tensor) -> Tensor {
    let shape = a.shape().to_vec();
    let (x, y) = (a.bool_prim(), b.bool_prim());
    let prim = match f {
        Arith::BitwiseAnd => B::bool_and(x, y),
        Arith::BitwiseOr => B::bool_or(x, y),
        _ => B::bool_xor(x, y),
    };
    util::bool_tensor(prim, shape)
}

fn logical(op: Logical, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let shape = util::broadcast_shape(a.shape(), b.shape())?;
    let a = util::broadcast_to(&a.to_bool(), &shape)?;
    let b = util::broadcast_to(&b.to_bool(), &shape)?;
    let f = match op {
        Logical::And => Arith::BitwiseAnd,
        Logical::Or => Arith::BitwiseOr,
        Logical::Xor => Arith::BitwiseXor,
    };
    Ok(bool_op(f, &a, &b))
}

/// Nx `select(pred, on_true, on_false)`.
pub(super) fn select(pred: &Tensor, t: &Tensor, f: &Tensor, out: Option<DType>) -> Result<Tensor> {
    let out = out.unwrap_or_else(|| DType::merge(t.dtype(), f.dtype()));
    let shape = util::broadcast_shape(&util::broadcast_shape(pred.shape(), t.shape())?, f.shape())?;
    let t = util::broadcast_to(&t.cast(out)?, &shape)?;
    let f = util::broadcast_to(&f.cast(out)?, &shape)?;
    let p = util::broadcast_to(&pred.to_bool(), &shape)?;
    if t.numel() == 0 {
        return Ok(t);
    }
    if let Some(r) = super::host_map::select_f32(&p, &t, &f)? {
        return Ok(r);
    }
    Ok(util::select(&p, &t, &f))
}

/// Nx `clip(x, min, max)` in x's type.
pub(super) fn clip(x: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
    let t = x.dtype();
    let lo = util::broadcast_to(&lo.cast(t)?, x.shape())?;
    let hi = util::broadcast_to(&hi.cast(t)?, x.shape())?;
    let x = if x.kind() == Kind::Bool {
        x.cast(t)?
    } else {
        x.clone()
    };
    if x.numel() == 0 {
        return Ok(x);
    }
    let r = util::select(&compare_same(Compare::Less, &x, &lo), &lo, &x);
    Ok(util::select(
        &compare_same(Compare::Greater, &r, &hi),
        &hi,
        &r,
    ))
}
