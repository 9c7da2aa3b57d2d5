//! Values of types Burn lacks (Nx's f8 types and 2/4-bit integers), kept in a wider type.
//!
//! The Nx backend stores an f8 tensor as f32 and a 2/4-bit integer tensor as s8/u8; after
//! every op whose result has such a type it runs [`narrow`], which maps each value to the
//! value Nx.BinaryBackend would store: f8 E5M2 as the f16 of the value (round to nearest
//! even) with its low 8 bits dropped, f8 E4M3FN by Nx's own rounding (half away from zero,
//! saturating at +-448, NaN kept), integers wrapped to their width (two's complement). The
//! values cross to the host and back: these types are an emulation, not a fast path.

use crate::{DType, Error, Result, Tensor};

use super::Narrow;

impl Narrow {
    /// The Burn type that holds values of this type.
    pub fn storage(self) -> DType {
        match self {
            Narrow::F8 | Narrow::F8E4m3fn => DType::F32,
            Narrow::S2 | Narrow::S4 => DType::S8,
            Narrow::U2 | Narrow::U4 => DType::U8,
        }
    }
}

/// Maps every value of `x` (of the type [`Narrow::storage`] names) to a value of `to`.
pub(super) fn narrow(x: &Tensor, to: Narrow) -> Result<Tensor> {
    let want = to.storage();
    if x.dtype() != want {
        return Err(Error::Dtype(format!(
            "narrow to {}: expected a {want} tensor, got {}",
            crate::wire::name(&to),
            x.dtype()
        )));
    }
    let mut bytes = x.to_bytes(None)?;
    match to {
        Narrow::F8 => map_f32(&mut bytes, f8_e5m2),
        Narrow::F8E4m3fn => map_f32(&mut bytes, f8_e4m3fn),
        Narrow::S2 => bytes.iter_mut().for_each(|b| *b = wrap_signed(*b, 2)),
        Narrow::S4 => bytes.iter_mut().for_each(|b| *b = wrap_signed(*b, 4)),
        Narrow::U2 => bytes.iter_mut().for_each(|b| *b &= 0b11),
        Narrow::U4 => bytes.iter_mut().for_each(|b| *b &= 0b1111),
    }
    Tensor::from_bytes(&bytes, x.shape(), want, x.device())
}

fn map_f32(bytes: &mut [u8], f: fn(f32) -> f32) {
    for chunk in bytes.chunks_exact_mut(4) {
        let v = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        chunk.copy_from_slice(&f(v).to_le_bytes());
    }
}

/// The low `bits` bits of `b` as a signed integer, sign-extended to 8 bits.
fn wrap_signed(b: u8, bits: u32) -> u8 {
    (((b << (8 - bits)) as i8) >> (8 - bits)) as u8
}

/// E5M2 as Nx.BinaryBackend stores it: the top byte of the value's f16 (round to nearest
/// even into f16, then the low 8 bits dropped). Infinities and NaN stay.
pub(crate) fn f8_e5m2(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    let h = burn::tensor::f16::from_f32(x).to_bits() & 0xFF00;
    burn::tensor::f16::from_bits(h).to_f32()
}

/// E4M3FN as Nx.BinaryBackend stores it (`Nx.Floating.dump_f8_e4m3fn/1`): magnitudes clamped
/// to 448, the 3-bit mantissa rounded half away from zero and capped at 7 (no carry into the
/// exponent), subnormals below 2^-6, NaN kept; the sign of zero kept.
pub(crate) fn f8_e4m3fn(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    if x == 0.0 {
        return x;
    }
    let v = (x as f64).clamp(-448.0, 448.0);
    let a = v.abs();
    let e = a.log2().floor();
    let m = if e + 7.0 <= 0.0 {
        let m = round_half_away(a / 2f64.powi(-6) * 8.0).min(7.0);
        m * 2f64.powi(-9)
    } else {
        let significand = a / 2f64.powf(e);
        let mut m = round_half_away((significand - 1.0) * 8.0).clamp(0.0, 7.0);
        if e + 7.0 == 15.0 && m >= 7.0 {
            m = 6.0;
        }
        (1.0 + m / 8.0) * 2f64.powf(e)
    };
    (if v < 0.0 { -m } else { m }) as f32
}

fn round_half_away(x: f64) -> f64 {
    // f64::round rounds half away from zero, as Erlang's round/1.
    x.round()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e5m2_truncates_the_f16() {
        // 1.2 -> f16 0x3CCD -> 0x3C00 = 1.0 (Nx drops the low byte; no rounding).
        assert_eq!(f8_e5m2(1.2), 1.0);
        assert_eq!(f8_e5m2(0.5772157), 0.5);
        assert_eq!(f8_e5m2(std::f32::consts::PI), 3.0);
        assert_eq!(f8_e5m2(-1.75), -1.75);
        assert_eq!(f8_e5m2(f32::INFINITY), f32::INFINITY);
        assert_eq!(f8_e5m2(1.0e6), f32::INFINITY);
        assert!(f8_e5m2(f32::NAN).is_nan());
        assert!(f8_e5m2(-0.0).is_sign_negative());
    }

    #[test]
    fn e4m3fn_follows_nx() {
        assert_eq!(f8_e4m3fn(1.0), 1.0);
        assert_eq!(f8_e4m3fn(448.0), 448.0);
        assert_eq!(f8_e4m3fn(1000.0), 448.0);
        assert_eq!(f8_e4m3fn(f32::NEG_INFINITY), -448.0);
        // 1.97: mantissa 7.76 rounds to 8, capped at 7: 1.875 (Nx does not carry).
        assert_eq!(f8_e4m3fn(1.97), 1.875);
        assert_eq!(f8_e4m3fn(0.001953125), 0.001953125);
        assert_eq!(f8_e4m3fn(std::f32::consts::PI), 3.25);
        assert!(f8_e4m3fn(f32::NAN).is_nan());
        assert!(f8_e4m3fn(-0.0).is_sign_negative());
    }

    #[test]
    fn integers_wrap() {
        assert_eq!(wrap_signed(7, 4) as i8, 7);
        assert_eq!(wrap_signed(8, 4) as i8, -8);
        assert_eq!(wrap_signed((-9i8) as u8, 4) as i8, 7);
        assert_eq!(wrap_signed(2, 2) as i8, -2);
        assert_eq!(wrap_signed(255, 2) as i8, -1);
    }
}
