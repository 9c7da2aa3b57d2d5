//! Integer semantics of Nx's binary ops where Burn's kernels differ. Nx.BinaryBackend computes integer ops on
//! the operands' values as big integers and stores the result's low bits; Burn's CPU backend
//! shifts by the amount modulo 64 and shifts u64 values as i64 (sign-extending), GPU kernels
//! leave shifts by the width or more undefined and raise integers to powers through floats, and
//! converting floats to integers saturates. Every rule here is composed of Burn's backend ops,
//! so it holds on every device:
//!
//! * shifts by the width or more give 0 (left, and right of unsigned values) or the sign (right
//!   of signed values); u64 values shift right logically;
//! * `pow` multiplies by squaring over the exponent's bits (negative exponents are refused);
//! * a u64 meets a signed operand in s64, which holds neither's every value: comparisons,
//!   `min`/`max`, `quotient` and `remainder` of such pairs work on sign and magnitude, right
//!   shifts in the left operand's own type, shift amounts and exponents in theirs.
//!
//! (`Tensor::cast` converts floats to integers and back by Nx's rules the same way.)

use crate::dtype::Kind;
use crate::op::{binary, util, Arith, Compare};
use crate::tensor::B;
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{BoolTensorOps, IntTensorOps};

/// `t` as an integer tensor of its own type (booleans as u8).
fn as_int(t: &Tensor) -> Result<Tensor> {
    match t.kind() {
        Kind::Bool => t.cast(DType::U8),
        Kind::Int => Ok(t.clone()),
        Kind::Float => Err(Error::Dtype(format!(
            "expects integer operands, got {}",
            t.dtype()
        ))),
    }
}

/// The value of one little-endian element of integer type `dtype`.
fn element(bytes: &[u8], dtype: DType) -> i128 {
    let n = dtype.size().min(8);
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(&bytes[..n]);
    let bits = u64::from_le_bytes(w);
    let shift = 64 - 8 * n as u32;
    if dtype.is_signed_int() {
        (((bits << shift) as i64) >> shift) as i128
    } else {
        bits as i128
    }
}

/// The smallest and largest element of a non-empty integer tensor, read in one transfer.
fn range(t: &Tensor) -> Result<(i128, i128)> {
    let p = t.int_prim()?;
    let ends = [B::int_min(p.clone()), B::int_max(p)].map(|e| Tensor::wrap(e, Kind::Int));
    let ends = [ends[0].reshape(vec![1])?, ends[1].reshape(vec![1])?];
    let bytes = util::cat(&ends, 0).to_bytes(None)?;
    let n = t.dtype().size();
    if bytes.len() < 2 * n {
        return Err(Error::Execution("reading an integer range failed".into()));
    }
    Ok((
        element(&bytes[..n], t.dtype()),
        element(&bytes[n..], t.dtype()),
    ))
}

/// Burn's scalar `v` for a tensor of integer type `dtype`.
fn int_scalar(v: i64, dtype: DType) -> burn::tensor::Scalar {
    Scalar::I(v).burn_for(dtype)
}

/// Nx `left_shift` (`left`) or `right_shift` of `a` by `b`, with result type `out`. Left shifts
/// compute in `out`; right shifts, whose result never leaves the left operand's range, in the
/// left operand's own type (a u64 shifted right stays unsigned when Nx's result is s64). The
/// amounts are read in their own type: one device read of their range, which refuses negative
/// amounts as Nx does and, when every amount is below the width, leaves one shift kernel.
pub(crate) fn shift(left: bool, a: &Tensor, b: &Tensor, out: DType) -> Result<Tensor> {
    let shape = util::broadcast_shape(a.shape(), b.shape())?;
    let t = if left || a.kind() == Kind::Float {
        out
    } else {
        as_int(a)?.dtype()
    };
    let amounts = as_int(b)?;
    if crate::tensor::numel(&shape) == 0 {
        return util::full(&shape, out, Scalar::I(0), &a.dispatch_device());
    }
    let (low, high) = range(&amounts)?;
    if low < 0 {
        let dir = if left { "left" } else { "right" };
        return Err(Error::Argument(format!("cannot {dir} shift by {low}")));
    }
    let width = t.bits() as i128;
    let x = util::broadcast_to(&a.cast(t)?, &shape)?;
    let beyond = !left && t.is_signed_int();
    let r = if low == high {
        // one amount for every element: scalar kernels
        if high >= width && !beyond {
            util::full(&shape, t, Scalar::I(0), &x.dispatch_device())?
        } else {
            shift_all(left, &x, high.min(width - 1) as u32)
        }
    } else if high < width {
        let s = util::broadcast_to(&amounts.cast(t)?, &shape)?;
        shift_each(left, &x, &s)
    } else {
        let (ap, bt) = (amounts.prim(), amounts.dtype());
        let clamped = B::int_clamp_max(ap.clone(), int_scalar(width as i64 - 1, bt));
        let clamped = Tensor::same_shape_as(clamped, Kind::Int, &amounts);
        let r = shift_each(left, &x, &util::broadcast_to(&clamped.cast(t)?, &shape)?);
        if beyond {
            // a signed right shift by width - 1 leaves the sign, as any wider shift does
            r
        } else {
            let bd = amounts.bool_dtype();
            let wide = B::int_greater_equal_elem(ap, int_scalar(width as i64, bt), bd);
            let wide = util::bool_tensor(wide, amounts.shape().to_vec());
            let wide = util::broadcast_to(&wide, &shape)?;
            let p = B::int_mask_fill(r.prim(), wide.prim(), int_scalar(0, t));
            Tensor::same_shape_as(p, Kind::Int, &r)
        }
    };
    r.cast(out)
}

/// `x` shifted by `s` places (below the width) element-wise.
fn shift_each(left: bool, x: &Tensor, s: &Tensor) -> Tensor {
    let (p, s) = (x.prim(), s.prim());
    let prim = match (left, x.dtype()) {
        (true, _) => B::bitwise_left_shift(p, s),
        (false, DType::U64) => {
            // The low 63 bits shift alike as signed and unsigned values; the top bit moves to
            // bit 63 - s (= s ^ 63).
            let low = B::bitwise_and_scalar(p.clone(), int_scalar(i64::MAX, DType::U64));
            let low = B::bitwise_right_shift(low, s.clone());
            let top = B::bitwise_right_shift_scalar(p, int_scalar(63, DType::U64));
            let top = B::bitwise_and_scalar(top, int_scalar(1, DType::U64));
            let top =
                B::bitwise_left_shift(top, B::bitwise_xor_scalar(s, int_scalar(63, DType::U64)));
            B::bitwise_or(low, top)
        }
        (false, _) => B::bitwise_right_shift(p, s),
    };
    Tensor::same_shape_as(prim, Kind::Int, x)
}

/// `x` shifted by `s` places (below the width).
fn shift_all(left: bool, x: &Tensor, s: u32) -> Tensor {
    let t = x.dtype();
    let by = int_scalar(s as i64, t);
    let prim = match (left, t) {
        (true, _) => B::bitwise_left_shift_scalar(x.prim(), by),
        (false, DType::U64) => {
            // the bits a sign extension would fill are cleared
            let shifted = B::bitwise_right_shift_scalar(x.prim(), by);
            B::bitwise_and_scalar(shifted, Scalar::U(u64::MAX >> s).burn_for(t))
        }
        (false, _) => B::bitwise_right_shift_scalar(x.prim(), by),
    };
    Tensor::same_shape_as(prim, Kind::Int, x)
}

/// Nx's integer `pow(a, b)` in type `out`: `a` multiplied by squaring over the bits of the
/// exponents (read in their own type), the products wrapping as Nx stores them. One device
/// read of the exponents' range refuses negative ones (Nx raises) and bounds the squarings;
/// where all exponents are equal their bits are known here and no selection is needed.
pub(crate) fn pow(a: &Tensor, b: &Tensor, out: DType) -> Result<Tensor> {
    let shape = util::broadcast_shape(a.shape(), b.shape())?;
    let e = as_int(b)?;
    let device = a.dispatch_device();
    if crate::tensor::numel(&shape) == 0 {
        return util::full(&shape, out, Scalar::I(0), &device);
    }
    let (low, high) = range(&e)?;
    if low < 0 {
        return Err(Error::Argument(format!(
            "cannot raise integers to a negative power ({low})"
        )));
    }
    let mul = |x: &Tensor, y: &Tensor| binary::same(Arith::Multiply, x, y);
    let bits = 128 - high.leading_zeros();
    let mut square = util::broadcast_to(&a.cast(out)?, &shape)?;
    let mut result: Option<Tensor> = None;
    let (ep, et, bd) = (e.prim(), e.dtype(), e.bool_dtype());
    for k in 0..bits {
        result = if low == high {
            match (high >> k & 1 == 1, result) {
                (false, r) => r,
                (true, None) => Some(square.clone()),
                (true, Some(r)) => Some(mul(&r, &square)?),
            }
        } else {
            let r = match result {
                Some(r) => r,
                None => util::full(&shape, out, Scalar::I(1), &device)?,
            };
            let bit = B::bitwise_right_shift_scalar(ep.clone(), int_scalar(k as i64, et));
            let bit = B::bitwise_and_scalar(bit, int_scalar(1, et));
            let set = B::int_not_equal_elem(bit, int_scalar(0, et), bd);
            let set = util::broadcast_to(&util::bool_tensor(set, e.shape().to_vec()), &shape)?;
            Some(util::select(&set, &mul(&r, &square)?, &r))
        };
        if k + 1 < bits {
            square = mul(&square, &square)?;
        }
    }
    match result {
        Some(r) => Ok(r),
        None => util::full(&shape, out, Scalar::I(1), &device),
    }
}

/// Whether `a` and `b` are a u64 and a signed integer type, which Nx merges to s64.
pub(crate) fn u64_with_signed(a: DType, b: DType) -> bool {
    (a == DType::U64 && b.is_signed_int()) || (b == DType::U64 && a.is_signed_int())
}

/// Where the u64 tensor `t` holds values above `i64::MAX`, broadcast to `shape`.
fn above_s64(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let over = B::int_greater_elem(t.prim(), int_scalar(i64::MAX, DType::U64), t.bool_dtype());
    util::broadcast_to(&util::bool_tensor(over, t.shape().to_vec()), shape)
}

/// Nx comparison of a u64 and a signed operand: in s64, except where the u64 value exceeds
/// `i64::MAX` and is therefore the greater.
pub(crate) fn compare_mixed(c: Compare, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (x, y) = binary::prepare(a, b, DType::S64)?;
    let r = binary::compare_same(c, &x, &y);
    let (big, holds) = if a.dtype() == DType::U64 {
        (a, matches!(c, Compare::Greater | Compare::GreaterEqual))
    } else {
        (b, matches!(c, Compare::Less | Compare::LessEqual))
    };
    let over = above_s64(big, r.shape())?;
    Ok(if holds || c == Compare::NotEqual {
        binary::bool_op(Arith::BitwiseOr, &r, &over)
    } else {
        let under = util::bool_tensor(B::bool_not(over.prim()), r.shape().to_vec());
        binary::bool_op(Arith::BitwiseAnd, &r, &under)
    })
}

/// Nx `min`/`max`, `quotient` or `remainder` of a u64 and a signed operand, in type `out`.
pub(crate) fn mixed(f: Arith, a: &Tensor, b: &Tensor, out: DType) -> Result<Tensor> {
    match f {
        Arith::Min | Arith::Max => {
            let c = if f == Arith::Max {
                Compare::Greater
            } else {
                Compare::Less
            };
            let a_wins = compare_mixed(c, a, b)?;
            let (x, y) = binary::prepare(a, b, out)?;
            Ok(util::select(&a_wins, &x, &y))
        }
        Arith::Quotient | Arith::Remainder => divide_mixed(f == Arith::Quotient, a, b, out),
        _ => Err(Error::Unsupported(format!(
            "{f:?} of a u64 and a signed operand"
        ))),
    }
}

/// The magnitude of integer `t` as u64 and, for signed `t`, where it is negative; both
/// broadcast to `shape`.
fn sign_magnitude(t: &Tensor, shape: &[usize]) -> Result<(Tensor, Option<Tensor>)> {
    let t = as_int(t)?;
    if !t.dtype().is_signed_int() {
        return Ok((util::broadcast_to(&t.cast(DType::U64)?, shape)?, None));
    }
    let w = t.cast(DType::S64)?;
    let negative = B::int_lower_elem(w.prim(), int_scalar(0, DType::S64), w.bool_dtype());
    let negative = util::bool_tensor(negative, w.shape().to_vec());
    // -i64::MIN wraps to i64::MIN, whose bits are 2^63 as u64
    let flipped = Tensor::same_shape_as(B::int_neg(w.prim()), Kind::Int, &w);
    let magnitude = util::select(&negative, &flipped, &w).cast(DType::U64)?;
    Ok((
        util::broadcast_to(&magnitude, shape)?,
        Some(util::broadcast_to(&negative, shape)?),
    ))
}

/// Truncating quotient or dividend-signed remainder of a u64 and a signed operand: the u64
/// quotient of the magnitudes, given the sign Nx's (`div/2`, `rem/2`) has.
fn divide_mixed(quotient: bool, a: &Tensor, b: &Tensor, out: DType) -> Result<Tensor> {
    let shape = util::broadcast_shape(a.shape(), b.shape())?;
    let (ma, na) = sign_magnitude(a, &shape)?;
    let (mb, nb) = sign_magnitude(b, &shape)?;
    if ma.numel() == 0 {
        return util::full(&shape, out, Scalar::I(0), &a.dispatch_device());
    }
    binary::nonzero_divisor(&mb)?;
    let q = Tensor::same_shape_as(B::int_div(ma.prim(), mb.prim()), Kind::Int, &ma);
    let (magnitude, negative) = if quotient {
        let negative = match (na, nb) {
            (Some(x), Some(y)) => Some(binary::bool_op(Arith::BitwiseXor, &x, &y)),
            (x, y) => x.or(y),
        };
        (q, negative)
    } else {
        let qb = binary::same(Arith::Multiply, &q, &mb)?;
        (binary::same(Arith::Subtract, &ma, &qb)?, na)
    };
    let m = magnitude.cast(DType::S64)?;
    let signed = match negative {
        Some(n) => {
            let flipped = Tensor::same_shape_as(B::int_neg(m.prim()), Kind::Int, &m);
            util::select(&n, &flipped, &m)
        }
        None => m,
    };
    signed.cast(out)
}
