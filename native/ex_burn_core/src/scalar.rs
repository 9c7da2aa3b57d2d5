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

/// The largest (`max`) or smallest value of an integer type, as a scalar.
pub(crate) fn extreme(t: crate::DType, max: bool) -> Scalar {
    use crate::DType::*;
    match (t, max) {
        (S8, false) => Scalar::I(i8::MIN as i64),
        (S16, false) => Scalar::I(i16::MIN as i64),
        (S32, false) => Scalar::I(i32::MIN as i64),
        (S64, false) => Scalar::I(i64::MIN),
        (S8, true) => Scalar::I(i8::MAX as i64),
        (S16, true) => Scalar::I(i16::MAX as i64),
        (S32, true) => Scalar::I(i32::MAX as i64),
        (S64, true) => Scalar::I(i64::MAX),
        (U8, true) => Scalar::I(u8::MAX as i64),
        (U16, true) => Scalar::I(u16::MAX as i64),
        (U32, true) => Scalar::I(u32::MAX as i64),
        (U64, true) => Scalar::U(u64::MAX),
        (_, false) => Scalar::I(0),
        (_, true) => Scalar::Infinity,
    }
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

    /// The value as an element of integer type `dtype`, wrapped to its width as Nx stores it
    /// (`-5` in `{:u, 32}` is 4294967291, `2**63` in `{:s, 64}` is `-2**63`); floats truncate,
    /// non-finite ones saturate. Returned as the bits of a 64-bit integer.
    pub fn wrapped_bits(self, dtype: crate::DType) -> u64 {
        let raw: i128 = match self {
            Scalar::I(v) => v as i128,
            Scalar::U(v) => v as i128,
            other => other.to_f64() as i128,
        };
        let bits = dtype.bits();
        let mask: u128 = if bits >= 64 {
            u64::MAX as u128
        } else {
            (1u128 << bits) - 1
        };
        let low = (raw as u128) & mask;
        if dtype.is_signed_int() && bits < 64 && low >> (bits - 1) == 1 {
            // sign-extend into 64 bits
            (low | !mask) as u64
        } else {
            low as u64
        }
    }

    /// The value as an element of `dtype` stores it, as an `f64`, where that is exact: f64,
    /// f32 (rounded to f32 first) and integers up to 2^53 in magnitude (wrapped to the type's
    /// width); `None` for other types and larger integers.
    pub fn stored_as(self, dtype: crate::DType) -> Option<f64> {
        use crate::DType;
        match dtype {
            DType::F64 => Some(self.to_f64()),
            DType::F32 => Some(self.to_f64() as f32 as f64),
            d if d.is_signed_int() => {
                let v = self.wrapped_bits(d) as i64;
                (v.unsigned_abs() <= 1 << 53).then_some(v as f64)
            }
            d if d.is_unsigned_int() => {
                let v = self.wrapped_bits(d);
                (v <= 1 << 53).then_some(v as f64)
            }
            _ => None,
        }
    }

    /// Burn's scalar for a tensor of type `dtype` (integers wrapped to its width).
    pub(crate) fn burn_for(self, dtype: crate::DType) -> BurnScalar {
        if dtype.is_float() {
            BurnScalar::Float(self.to_f64())
        } else if dtype.is_unsigned_int() {
            BurnScalar::UInt(self.wrapped_bits(dtype))
        } else {
            BurnScalar::Int(self.wrapped_bits(dtype) as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn integers_wrap_to_the_type_width_as_nx_stores_them() {
        assert_eq!(Scalar::I(-5).wrapped_bits(DType::U32), 4_294_967_291);
        assert_eq!(Scalar::U(1 << 63).wrapped_bits(DType::S64) as i64, i64::MIN);
        assert_eq!(Scalar::I(300).wrapped_bits(DType::U8), 44);
        assert_eq!(Scalar::I(200).wrapped_bits(DType::S8) as i64, -56);
        assert_eq!(Scalar::I(-1).wrapped_bits(DType::U64), u64::MAX);
        assert_eq!(Scalar::F(-2.7).wrapped_bits(DType::S32) as i64, -2);
    }
}
