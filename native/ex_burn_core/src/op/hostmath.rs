//! Float functions of host (CPU) tensors through the platform's C math library, evaluated in
//! f64 and rounded once to the tensor's type: what Nx's `BinaryBackend` computes with Erlang's
//! `:math` (which calls the same library). Burn's CPU kernels for these are approximations (`erfc` as `1 - erf` lost every
//! digit beyond 4 in f32, `log1p` and `erf` were an ulp or more off in f64); these functions
//! are rarely hot, so one f64 evaluation per element is affordable. GPU devices keep Burn's
//! kernels.

use super::Unary;
use crate::{DType, Device, Result, Tensor};

/// The C library's functions (Rust's standard library links it on every target).
mod c {
    extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
        pub fn log1p(x: f64) -> f64;
        pub fn expm1(x: f64) -> f64;
        pub fn cbrt(x: f64) -> f64;
        pub fn tan(x: f64) -> f64;
        pub fn asin(x: f64) -> f64;
        pub fn acos(x: f64) -> f64;
        pub fn atan(x: f64) -> f64;
        pub fn sinh(x: f64) -> f64;
        pub fn cosh(x: f64) -> f64;
        pub fn asinh(x: f64) -> f64;
        pub fn acosh(x: f64) -> f64;
        pub fn atanh(x: f64) -> f64;
    }
}

macro_rules! safe {
    ($($f:ident),*) => {
        $(
            fn $f(x: f64) -> f64 {
                // SAFETY: pure C math functions of one double.
                unsafe { c::$f(x) }
            }
        )*
    };
}
safe!(erf, erfc, expm1, cbrt, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh);

/// log(1 + x): the C library's `log1p` below 0.5; from 0.5 up, the log of the rounded sum
/// corrected by that sum's rounding error, `log(u) - ((u - 1) - x) / u` with `u = 1 + x`,
/// which is correctly rounded wherever `1 + x` is exact and `log` is (glibc's `log1p(2.0)` is
/// an ulp off; Nx.BinaryBackend computes `log(1 + x)`).
fn log1p(x: f64) -> f64 {
    if x >= 0.5 && x.is_finite() {
        let u = 1.0 + x;
        u.ln() - ((u - 1.0) - x) / u
    } else {
        // SAFETY: a pure C math function of one double.
        unsafe { c::log1p(x) }
    }
}

/// The f64 function for `op`, when this module computes it.
pub(super) fn function(op: Unary) -> Option<fn(f64) -> f64> {
    use Unary::*;
    Some(match op {
        Erf => erf,
        Erfc => erfc,
        Log1p => log1p,
        Expm1 => expm1,
        Cbrt => cbrt,
        Tan => tan,
        Asin => asin,
        Acos => acos,
        Atan => atan,
        Sinh => sinh,
        Cosh => cosh,
        Asinh => asinh,
        Acosh => acosh,
        Atanh => atanh,
        _ => return None,
    })
}

/// Whether `op` on `x` is computed here (host float tensors of f32 or f64).
pub(super) fn applies(op: Unary, x: &Tensor) -> bool {
    x.device() == Device::Cpu
        && matches!(x.dtype().to_floating(), DType::F32 | DType::F64)
        && function(op).is_some()
}

/// Elements per worker thread below which one thread does it all.
const PER_THREAD: usize = 1 << 15;

/// `f` applied to every element of `x` (integers first converted to Nx's floating type).
pub(super) fn apply(op: Unary, x: &Tensor) -> Result<Tensor> {
    let f = function(op)
        .ok_or_else(|| crate::Error::Execution(format!("{op:?} has no host function")))?;
    let out = x.dtype().to_floating();
    let mut v: Vec<f64> = x.cast(DType::F64)?.to_f64_vec()?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(v.len() / PER_THREAD)
        .max(1);
    let chunk = v.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in v.chunks_mut(chunk) {
            s.spawn(move || part.iter_mut().for_each(|e| *e = f(*e)));
        }
    });
    Tensor::from_host_f64(v, x.shape().to_vec())?.cast(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn log1p_is_correctly_rounded_where_one_plus_x_is_exact() {
        for x in [1.0f64, 2.0, 3.0, 7.0, 0.5, 1.0e10] {
            assert_eq!(super::log1p(x), (1.0 + x).ln(), "log1p({x})");
        }
        assert_eq!(super::log1p(1.0e-20), 1.0e-20);
        assert_eq!(super::log1p(-1.0), f64::NEG_INFINITY);
        assert_eq!(super::log1p(f64::INFINITY), f64::INFINITY);
    }
}
