//! The op table's f32 element functions as maps over slices: the very function the op table
//! applies for each element-wise op on f32 (IEEE `+ - * /` and comparisons, `max`/`min` as its
//! `min_max`, `ln` in f64 rounded once, ..., the correctly rounded kernels of `op::exact32` for
//! `sin`/`cos`/`tanh`/`exp` where the op table uses them), so that code running them on buffers
//! (fused chunk loops, the small-loop interpreter) gives the op table's results bit for bit.

use super::exact32::{self, Fun};
use super::{Arith, Compare, Op, Unary};
use crate::kernels::{Comparison, Exact, Map};
use crate::DType;

/// The op table's f32 `exp` of every element of `buf`, in place (for code that computes an
/// `exp` of the program inside a kernel of its own, as the CPU attention's softmax).
pub(crate) fn exp_in_place(buf: &mut [f32]) {
    match map_of(&Op::Unary(Unary::Exp)) {
        Some(Map::Exact(e)) => exact32::apply_in_place(exact_fun(e), buf),
        _ => buf.iter_mut().for_each(|x| *x = <Exp as Elem1>::f(*x)),
    }
}

/// The map of `op` when its operands are f32 (`None`: not handled here).
pub(crate) fn map_of(op: &Op) -> Option<Map> {
    let f32_out = |out: &Option<DType>| matches!(out, None | Some(DType::F32));
    if let Op::Unary(u) = op {
        if let Some(fun) = Fun::of(*u).filter(|_| exact32::available()) {
            return Some(Map::Exact(match fun {
                Fun::Sin => Exact::Sin,
                Fun::Cos => Exact::Cos,
                Fun::Tanh => Exact::Tanh,
                Fun::Exp => Exact::Exp,
                // (`Fun::of` gives no sigmoid: it is not a fused map)
                Fun::Sigmoid => return None,
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

/// f32 `x ** y` in f64, rounded once (the eager op's on the host, and Nx.BinaryBackend's).
#[inline(always)]
pub(crate) fn pow(x: f32, y: f32) -> f32 {
    (x as f64).powf(y as f64) as f32
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
    if let Map::Exact(e) = m {
        let fun = exact_fun(e);
        match a {
            Arg::Slice(a) => exact32::apply(fun, a, out),
            Arg::Scalar(x) => {
                let mut v = [0f32];
                exact32::apply(fun, &[x], &mut v);
                out.fill(v[0]);
            }
        }
        return;
    }
    visit(m, Slices { a, b: None, out });
}

#[inline(always)]
fn binary(m: Map, a: Arg, b: Arg, out: &mut [f32]) {
    if let Map::Pow = m {
        match b {
            Arg::Scalar(2.0) => map1(a, out, |x| x * x),
            Arg::Scalar(3.0) => map1(a, out, |x| {
                let w = x as f64;
                (w * w * w) as f32
            }),
            _ => map2(a, b, out, pow),
        }
        return;
    }
    visit(m, Slices { a, b: Some(b), out });
}

/// The correctly rounded kernel of an exact map.
fn exact_fun(e: Exact) -> Fun {
    match e {
        Exact::Sin => Fun::Sin,
        Exact::Cos => Fun::Cos,
        Exact::Tanh => Fun::Tanh,
        Exact::Exp => Fun::Exp,
    }
}

/// Applies an element function to slices or broadcast scalars (what [`run_step_any`] does
/// with [`visit`]).
struct Slices<'a, 'o> {
    a: Arg<'a>,
    b: Option<Arg<'a>>,
    out: &'o mut [f32],
}

impl ElemVisitor for Slices<'_, '_> {
    type Out = ();

    #[inline(always)]
    fn one<E: Elem1>(self) {
        map1(self.a, self.out, E::f);
    }

    #[inline(always)]
    fn two<E: Elem2>(self) {
        if let Some(b) = self.b {
            map2(self.a, b, self.out, E::f);
        }
    }
}

/// An element function of one f32 operand.
pub(crate) trait Elem1 {
    /// The function.
    fn f(x: f32) -> f32;
}

/// An element function of two f32 operands.
pub(crate) trait Elem2 {
    /// The function.
    fn f(x: f32, y: f32) -> f32;
}

/// Something done with an element function given as a type: [`visit`] calls `one` or `two`
/// with the function of a map, so that each use (slices here, blocks of a buffer in
/// `f32_blocks`) is compiled for each function from this one table.
pub(crate) trait ElemVisitor {
    /// What the use gives.
    type Out;
    /// Uses a function of one operand.
    fn one<E: Elem1>(self) -> Self::Out;
    /// Uses a function of two operands.
    fn two<E: Elem2>(self) -> Self::Out;
}

macro_rules! elem1 {
    ($($(#[$doc:meta])* $name:ident = |$x:ident| $body:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl Elem1 for $name {
            #[inline(always)]
            fn f($x: f32) -> f32 {
                $body
            }
        }
    )*};
}

macro_rules! elem2 {
    ($($(#[$doc:meta])* $name:ident = |$x:ident, $y:ident| $body:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl Elem2 for $name {
            #[inline(always)]
            fn f($x: f32, $y: f32) -> f32 {
                $body
            }
        }
    )*};
}

/// A comparison's mask: 1.0 where it holds, else 0.0.
#[inline(always)]
fn mask(t: bool) -> f32 {
    if t {
        1.0
    } else {
        0.0
    }
}

elem1! {
    /// `-x`.
    Neg = |x| -x;
    /// `|x|`.
    Abs = |x| x.abs();
    /// Square root.
    Sqrt = |x| x.sqrt();
    /// `1 / sqrt(x)` in f64, rounded once (as Nx.BinaryBackend computes it).
    Rsqrt = |x| (1.0 / (x as f64).sqrt()) as f32;
    /// libm `expf`.
    Exp = |x| x.exp();
    /// `ln` in f64, rounded once (as Nx.BinaryBackend computes it; libm's `logf` missed it
    /// by an ulp for some inputs).
    Log = |x| (x as f64).ln() as f32;
    /// libm `sinf`.
    Sin = |x| x.sin();
    /// libm `cosf`.
    Cos = |x| x.cos();
    /// libm `tanhf`.
    Tanh = |x| x.tanh();
}

elem2! {
    /// `x + y`.
    Add = |x, y| x + y;
    /// `x - y`.
    Sub = |x, y| x - y;
    /// `x * y`.
    Mul = |x, y| x * y;
    /// `x / y`.
    Div = |x, y| x / y;
    /// Nx `max`: `x` where it is greater or NaN.
    Max = |x, y| if x > y || x.is_nan() { x } else { y };
    /// Nx `min`: `x` where it is less or NaN.
    Min = |x, y| if x < y || x.is_nan() { x } else { y };
    /// Mask of `x == y`.
    Equal = |x, y| mask(x == y);
    /// Mask of `x != y`.
    NotEqual = |x, y| mask(x != y);
    /// Mask of `x < y`.
    Less = |x, y| mask(x < y);
    /// Mask of `x <= y`.
    LessEqual = |x, y| mask(x <= y);
    /// Mask of `x > y`.
    Greater = |x, y| mask(x > y);
    /// Mask of `x >= y`.
    GreaterEqual = |x, y| mask(x >= y);
}

/// Calls `v` with the element function of `m`: `None` for `Pow` (its function depends on the
/// exponent's value) and the exact maps (whose kernels run on whole slices).
#[inline(always)]
pub(crate) fn visit<V: ElemVisitor>(m: Map, v: V) -> Option<V::Out> {
    Some(match m {
        Map::Add => v.two::<Add>(),
        Map::Sub => v.two::<Sub>(),
        Map::Mul => v.two::<Mul>(),
        Map::Div => v.two::<Div>(),
        Map::Max => v.two::<Max>(),
        Map::Min => v.two::<Min>(),
        Map::Cmp(c) => match c {
            Comparison::Equal => v.two::<Equal>(),
            Comparison::NotEqual => v.two::<NotEqual>(),
            Comparison::Less => v.two::<Less>(),
            Comparison::LessEqual => v.two::<LessEqual>(),
            Comparison::Greater => v.two::<Greater>(),
            Comparison::GreaterEqual => v.two::<GreaterEqual>(),
        },
        Map::Neg => v.one::<Neg>(),
        Map::Abs => v.one::<Abs>(),
        Map::Sqrt => v.one::<Sqrt>(),
        Map::Rsqrt => v.one::<Rsqrt>(),
        Map::Exp => v.one::<Exp>(),
        Map::Log => v.one::<Log>(),
        Map::Sin => v.one::<Sin>(),
        Map::Cos => v.one::<Cos>(),
        Map::Tanh => v.one::<Tanh>(),
        Map::Pow | Map::Exact(_) => return None,
    })
}
