//! Scalar attribute values (fill values, clip bounds), including the non-finite floats that
//! Elixir spells as atoms (`:nan`, `:infinity`, `:neg_infinity`).

use burn::tensor::Scalar as BurnScalar;
use serde::Deserialize;

/// A number carried by an op attribute.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scalar {
    /// A float (`{:f, 1.5}`).
    F(f64),
    /// A signed integer (`{:i, -3}`).
    I(i64),
    /// An unsigned integer above `i64::MAX` (`{:u, 18446744073709551615}`).
    U(u64),
    /// Not a number.
    Nan,
    /// Positive infinity.
    Infinity,
    /// Negative infinity.
    NegInfinity,
}

impl Scalar {
    /// The value as an `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::F(v) => v,
            Scalar::I(v) => v as f64,
            Scalar::U(v) => v as f64,
            Scalar::Nan => f64::NAN,
            Scalar::Infinity => f64::INFINITY,
            Scalar::NegInfinity => f64::NEG_INFINITY,
        }
    }

    /// The value for an element of an integer tensor (floats truncate, non-finite saturate).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::I(v) => v,
            Scalar::U(v) => v as i64,
            other => other.to_f64() as i64,
        }
    }

    /// Burn's scalar for a tensor of type `dtype`.
    pub(crate) fn burn_for(self, dtype: crate::DType) -> BurnScalar {
        if dtype.is_float() {
            BurnScalar::Float(self.to_f64())
        } else if dtype.is_unsigned_int() {
            match self {
                Scalar::U(v) => BurnScalar::UInt(v),
                Scalar::I(v) => BurnScalar::UInt(v as u64),
                other => BurnScalar::UInt(other.to_f64() as u64),
            }
        } else {
            BurnScalar::Int(self.to_i64())
        }
    }
}
