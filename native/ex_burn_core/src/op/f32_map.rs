//! The op table's f32 element functions as maps over slices: the very function the op table
//! applies for each element-wise op on f32 (IEEE `+ - * /` and comparisons, `max`/`min` as its
//! `min_max`, libm `expf`, ..., the correctly rounded kernels of `op::exact32` for
//! `sin`/`cos`/`tanh` where the op table uses them), so that code running them on buffers
//! (fused chunk loops, the small-loop interpreter) gives the op table's results bit for bit.

use super::exact32::{self, Fun};
use super::{Arith, Compare, Op, Unary};
use crate::kernels::{Comparison, Exact, Map};
use crate::DType;

/// The map of `op` when its operands are f32 (`None`: not handled here).
pub(crate) fn map_of(op: &Op) -> Option<Map> {
    let f32_out = |out: &Option<DType>| matches!(out, None | Some(DType::F32));
    if let Op::Unary(u) = op {
        if let Some(fun) = Fun::of(*u).filter(|_| exact32::available()) {
            return Some(Map::Exact(match fun {
                Fun::Sin => Exact::Sin,
                Fun::Cos => Exact::Cos,
                Fun::Tanh => Exact::Tanh,
            }));
        }
    }
    Some(match op {
        Op::Binary { op: f, out } if f32_out(out) => match f {
            Arith::Add => Map::Add,
            Arith::Subtract => Map::Sub,
            Arith::Multiply => Map::Mul,
            Arith::Divide => Map::Div,
            Arith::Pow => Map::Pow,
            Arith::Max => Map::Max,
            Arith::Min => Map::Min,
            _ => return None,
        },
        Op::Compare(c) => Map::Cmp(match c {
            Compare::Equal => Comparison::Equal,
            Compare::NotEqual => Comparison::NotEqual,
            Compare::Less => Comparison::Less,
            Compare::LessEqual => Comparison::LessEqual,
            Compare::Greater => Comparison::Greater,
            Compare::GreaterEqual => Comparison::GreaterEqual,
        }),
        Op::Unary(u) => match u {
            Unary::Neg => Map::Neg,
            Unary::Abs => Map::Abs,
            Unary::Sqrt => Map::Sqrt,
            Unary::Rsqrt => Map::Rsqrt,
            Unary::Exp => Map::Exp,
            Unary::Log => Map::Log,
            Unary::Sin => Map::Sin,
            Unary::Cos => Map::Cos,
            Unary::Tanh => Map::Tanh,
            _ => return None,
        },
        _ => return None,
    })
}

/// An operand of a map: one value per element, or one value for all.
#[derive(Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// One value per element.
    Slice(&'a [f32]),
    /// One value for every element.
    Scalar(f32),
}

/// Applies `f` element-wise; `out` has the chunk's length.
#[inline(always)]
fn map1(a: Arg, out: &mut [f32], f: impl Fn(f32) -> f32) {
    match a {
        Arg::Slice(a) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x)),
        Arg::Scalar(x) => out.fill(f(x)),
    }
}

/// Applies `f` element-wise to two operands (scalars broadcast).
#[inline(always)]
fn map2(a: Arg, b: Arg, out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (Arg::Slice(a), Arg::Slice(b)) => out
            .iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (&x, &y))| *o = f(x, y)),
        (Arg::Slice(a), Arg::Scalar(y)) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, y)),
        (Arg::Scalar(x), Arg::Slice(b)) => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(x, y)),
        (Arg::Scalar(x), Arg::Scalar(y)) => out.fill(f(x, y)),
    }
}

/// Applies map `m` to `out` (`b`: the second operand of a binary map), inlined into the
/// caller, which may compile the loops for a wider vector unit (`program::fuse`'s chunk loops
/// and `program::small`'s interpreter do).
#[inline(always)]
pub(crate) fn run_step_any(m: Map, a: Arg, b: Option<Arg>, out: &mut [f32]) {
    match b {
        Some(b) => binary(m, a, b, out),
        None => unary(m, a, out),
    }
}

#[inline(always)]
fn unary(m: Map, a: Arg, out: &mut [f32]) {
    match m {
        Map::Neg => map1(a, out, |x| -x),
        Map::Abs => map1(a, out, f32::abs),
        Map::Sqrt => map1(a, out, f32::sqrt),
        Map::Rsqrt => map1(a, out, |x| 1.0 / x.sqrt()),
        Map::Exp => map1(a, out, f32::exp),
        Map::Log => map1(a, out, f32::ln),
        Map::Exact(e) => {
            let fun = match e {
                Exact::Sin => Fun::Sin,
                Exact::Cos => Fun::Cos,
                Exact::Tanh => Fun::Tanh,
            };
            match a {
                Arg::Slice(a) => exact32::apply(fun, a, out),
                Arg::Scalar(x) => {
                    let mut v = [0f32];
                    exact32::apply(fun, &[x], &mut v);
                    out.fill(v[0]);
                }
            }
        }
        Map::Sin => map1(a, out, f32::sin),
        Map::Cos => map1(a, out, f32::cos),
        Map::Tanh => map1(a, out, f32::tanh),
        // binary maps: `binary` applies them
        _ => {}
    }
}

#[inline(always)]
fn binary(m: Map, a: Arg, b: Arg, out: &mut [f32]) {
    match m {
        Map::Add => map2(a, b, out, |x, y| x + y),
        Map::Sub => map2(a, b, out, |x, y| x - y),
        Map::Mul => map2(a, b, out, |x, y| x * y),
        Map::Div => map2(a, b, out, |x, y| x / y),
        Map::Pow => match b {
            Arg::Scalar(2.0) => map1(a, out, |x| x * x),
            Arg::Scalar(3.0) => map1(a, out, |x| {
                let w = x as f64;
                (w * w * w) as f32
            }),
            _ => map2(a, b, out, f32::powf),
        },
        Map::Max => map2(a, b, out, |x, y| if x > y || x.is_nan() { x } else { y }),
        Map::Min => map2(a, b, out, |x, y| if x < y || x.is_nan() { x } else { y }),
        Map::Cmp(c) => {
            let mask = |t: bool| if t { 1.0 } else { 0.0 };
            match c {
                Comparison::Equal => map2(a, b, out, |x, y| mask(x == y)),
                Comparison::NotEqual => map2(a, b, out, |x, y| mask(x != y)),
                Comparison::Less => map2(a, b, out, |x, y| mask(x < y)),
                Comparison::LessEqual => map2(a, b, out, |x, y| mask(x <= y)),
                Comparison::Greater => map2(a, b, out, |x, y| mask(x > y)),
                Comparison::GreaterEqual => map2(a, b, out, |x, y| mask(x >= y)),
            }
        }
        _ => {}
    }
}
