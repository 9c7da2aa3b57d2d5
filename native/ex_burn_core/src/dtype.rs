//! The Nx type model (`{:f, 32}`, `{:s, 8}`, ...) and its mapping onto Burn's `DType`.
//!
//! Every Nx type Burn can hold has a variant here. Nx's `pred` is `{:u, 8}`. Types Burn lacks
//! (complex, f8 variants, 2- and 4-bit integers) are refused with
//! [`Error::UnsupportedDtype`](crate::Error::UnsupportedDtype).

use crate::{Error, Result};
use burn::tensor::{DType as BurnDType, FloatDType, IntDType};
use serde::{Deserialize, Serialize};

/// A tensor element type, in Nx's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "(String, u32)")]
pub enum DType {
    /// `{:f, 16}` IEEE half precision.
    F16,
    /// `{:bf, 16}` bfloat16.
    BF16,
    /// `{:f, 32}`.
    F32,
    /// `{:f, 64}`.
    F64,
    /// `{:s, 8}`.
    S8,
    /// `{:s, 16}`.
    S16,
    /// `{:s, 32}`.
    S32,
    /// `{:s, 64}`.
    S64,
    /// `{:u, 8}` (also Nx's `pred`).
    U8,
    /// `{:u, 16}`.
    U16,
    /// `{:u, 32}`.
    U32,
    /// `{:u, 64}`.
    U64,
}

/// The three kinds of Burn tensor primitives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Floating point.
    Float,
    /// Signed or unsigned integer.
    Int,
    /// Boolean (shown to Nx as `{:u, 8}`).
    Bool,
}

impl DType {
    /// Every supported type, in Nx order.
    pub const ALL: [DType; 12] = [
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::S8,
        DType::S16,
        DType::S32,
        DType::S64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Parses an Nx type given as its class (`"f"`, `"bf"`, `"s"`, `"u"`, `"c"`) and bit size.
    pub fn from_nx(class: &str, bits: u32) -> Result<DType> {
        let t = match (class, bits) {
            ("f", 16) => DType::F16,
            ("bf", 16) => DType::BF16,
            ("f", 32) => DType::F32,
            ("f", 64) => DType::F64,
            ("s", 8) => DType::S8,
            ("s", 16) => DType::S16,
            ("s", 32) => DType::S32,
            ("s", 64) => DType::S64,
            ("u", 8) | ("pred", _) => DType::U8,
            ("u", 16) => DType::U16,
            ("u", 32) => DType::U32,
            ("u", 64) => DType::U64,
            ("c", _) | ("f", 8) | ("s", 2) | ("s", 4) | ("u", 2) | ("u", 4) => {
                return Err(Error::UnsupportedDtype(format!(
                    "type {{:{class}, {bits}}} is not supported by Burn (supported: f16, bf16, f32, f64, s8-s64, u8-u64)"
                )))
            }
            _ => {
                return Err(Error::UnsupportedDtype(format!(
                    "unknown type {{:{class}, {bits}}}"
                )))
            }
        };
        Ok(t)
    }

    /// The Nx class and bit size of this type, e.g. `("f", 32)`.
    pub fn nx(self) -> (&'static str, u32) {
        match self {
            DType::F16 => ("f", 16),
            DType::BF16 => ("bf", 16),
            DType::F32 => ("f", 32),
            DType::F64 => ("f", 64),
            DType::S8 => ("s", 8),
            DType::S16 => ("s", 16),
            DType::S32 => ("s", 32),
            DType::S64 => ("s", 64),
            DType::U8 => ("u", 8),
            DType::U16 => ("u", 16),
            DType::U32 => ("u", 32),
            DType::U64 => ("u", 64),
        }
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        (self.nx().1 / 8) as usize
    }

    /// Bit width of one element.
    pub fn bits(self) -> u32 {
        self.nx().1
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Whether this is a signed integer type.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::S8 | DType::S16 | DType::S32 | DType::S64)
    }

    /// Whether this is an unsigned integer type.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Whether this is any integer type.
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// The Burn primitive kind that stores this type.
    pub fn kind(self) -> Kind {
        if self.is_float() {
            Kind::Float
        } else {
            Kind::Int
        }
    }

    /// The matching Burn dtype.
    pub fn burn(self) -> BurnDType {
        match self {
            DType::F16 => BurnDType::F16,
            DType::BF16 => BurnDType::BF16,
            DType::F32 => BurnDType::F32,
            DType::F64 => BurnDType::F64,
            DType::S8 => BurnDType::I8,
            DType::S16 => BurnDType::I16,
            DType::S32 => BurnDType::I32,
            DType::S64 => BurnDType::I64,
            DType::U8 => BurnDType::U8,
            DType::U16 => BurnDType::U16,
            DType::U32 => BurnDType::U32,
            DType::U64 => BurnDType::U64,
        }
    }

    /// The Burn float dtype, or a dtype error naming `op`.
    pub fn float_dtype(self) -> Result<FloatDType> {
        match self {
            DType::F16 => Ok(FloatDType::F16),
            DType::BF16 => Ok(FloatDType::BF16),
            DType::F32 => Ok(FloatDType::F32),
            DType::F64 => Ok(FloatDType::F64),
            other => Err(Error::Dtype(format!("expected a float type, got {other}"))),
        }
    }

    /// The Burn int dtype, or a dtype error.
    pub fn int_dtype(self) -> Result<IntDType> {
        match self {
            DType::S8 => Ok(IntDType::I8),
            DType::S16 => Ok(IntDType::I16),
            DType::S32 => Ok(IntDType::I32),
            DType::S64 => Ok(IntDType::I64),
            DType::U8 => Ok(IntDType::U8),
            DType::U16 => Ok(IntDType::U16),
            DType::U32 => Ok(IntDType::U32),
            DType::U64 => Ok(IntDType::U64),
            other => Err(Error::Dtype(format!(
                "expected an integer type, got {other}"
            ))),
        }
    }

    /// Maps a Burn dtype back to the Nx type model (booleans read as `{:u, 8}`).
    pub fn from_burn(dtype: BurnDType) -> Result<DType> {
        Ok(match dtype {
            BurnDType::F16 => DType::F16,
            BurnDType::BF16 => DType::BF16,
            BurnDType::F32 | BurnDType::Flex32 => DType::F32,
            BurnDType::F64 => DType::F64,
            BurnDType::I8 => DType::S8,
            BurnDType::I16 => DType::S16,
            BurnDType::I32 => DType::S32,
            BurnDType::I64 => DType::S64,
            BurnDType::U8 | BurnDType::Bool(_) => DType::U8,
            BurnDType::U16 => DType::U16,
            BurnDType::U32 => DType::U32,
            BurnDType::U64 => DType::U64,
            other => {
                return Err(Error::UnsupportedDtype(format!(
                    "Burn dtype {other:?} has no Nx equivalent"
                )))
            }
        })
    }

    /// Nx's type promotion for two tensor operands (`Nx.Type.merge/2`).
    pub fn merge(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a.is_float(), b.is_float()) {
            (true, true) => {
                if (a == F16 && b == BF16) || (a == BF16 && b == F16) {
                    F32
                } else if a.bits() >= b.bits() {
                    a
                } else {
                    b
                }
            }
            (true, false) => a,
            (false, true) => b,
            (false, false) => {
                let (sa, sb) = (a.is_signed_int(), b.is_signed_int());
                if sa == sb {
                    if a.bits() >= b.bits() {
                        a
                    } else {
                        b
                    }
                } else {
                    let (s, u) = if sa { (a, b) } else { (b, a) };
                    let bits = s.bits().max(u.bits() * 2).min(64);
                    DType::signed(bits)
                }
            }
        }
    }

    /// The signed integer type of `bits` bits (8, 16, 32, 64).
    pub fn signed(bits: u32) -> DType {
        match bits {
            8 => DType::S8,
            16 => DType::S16,
            32 => DType::S32,
            _ => DType::S64,
        }
    }

    /// Nx's floating type for a type (`Nx.Type.to_floating/1`): ints become f32.
    pub fn to_floating(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }

    /// Nx's accumulation type for sums and products (`Nx.Type.to_aggregate/1`).
    pub fn to_aggregate(self) -> DType {
        if self.is_signed_int() {
            DType::S64
        } else if self.is_unsigned_int() {
            DType::U64
        } else {
            self
        }
    }
}

impl TryFrom<(String, u32)> for DType {
    type Error = String;
    fn try_from((class, bits): (String, u32)) -> std::result::Result<Self, String> {
        DType::from_nx(&class, bits).map_err(|e| e.to_string())
    }
}

/// The class of an Nx type, serialized as an atom (`:f`) or a JSON string (`"f"`).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum Class {
    F,
    Bf,
    S,
    U,
}

impl Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let (c, bits) = self.nx();
        let class = match c {
            "f" => Class::F,
            "bf" => Class::Bf,
            "s" => Class::S,
            _ => Class::U,
        };
        (class, bits).serialize(s)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (c, b) = self.nx();
        write!(f, "{{:{c}, {b}}}")
    }
}
