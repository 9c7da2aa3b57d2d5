//! Decoding Erlang terms into core types through one serde `Deserializer`, so ops, programs,
//! devices and types are declared once (in `ex_burn_core`) and decoded as tagged enums.
//!
//! Conventions: an enum variant is an atom (`:exp`, `:cpu`; struct variants then take their
//! defaults), `{atom, value}` (newtype, or struct variant with a map/keyword list of fields),
//! or `{atom, a, b, ...}` (tuple variant). Structs are maps with atom keys or keyword lists.
//! `nil` is `None`. Floats accept integers.

use ex_burn_core::{DType, Device, Error, Result};
use rustler::{Term, TermType};
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde::Deserialize;
use std::fmt;

/// A serde error carrying a message.
#[derive(Debug)]
pub struct DeError(String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

/// Decodes any `Deserialize` value from a term; `what` names it in the error.
pub fn decode<'de, T: Deserialize<'de>>(term: Term, what: &str) -> Result<T> {
    T::deserialize(De(term)).map_err(|e| Error::Argument(format!("invalid {what}: {e}")))
}

/// Decodes an Nx type tuple; unsupported types keep their `:unsupported_dtype` kind.
pub fn dtype(term: Term) -> Result<DType> {
    let (class, bits): (String, u32) = decode(term, "type")?;
    DType::from_nx(&class, bits)
}

/// Decodes an op. Ops given as a bare atom (most eager calls) are decoded once and cached by
/// atom, which keeps the eager path cheap.
pub fn op(term: Term) -> Result<ex_burn_core::Op> {
    use std::collections::HashMap;
    use std::sync::{OnceLock, RwLock};
    static CACHE: OnceLock<RwLock<HashMap<rustler::Atom, ex_burn_core::Op>>> = OnceLock::new();
    let Ok(atom) = rustler::Atom::from_term(term) else {
        return decode(term, "op");
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(op) = cache.read().ok().and_then(|c| c.get(&atom).cloned()) {
        return Ok(op);
    }
    let op: ex_burn_core::Op = decode(term, "op")?;
    if let Ok(mut c) = cache.write() {
        c.insert(atom, op.clone());
    }
    Ok(op)
}

/// Decodes a device (`:cpu`, `:cuda` = `{:cuda, 0}`, `{:cuda, i}`, ...).
pub fn device(term: Term) -> Result<Device> {
    if term == crate::reply::cpu().to_term(term.get_env()) {
        return Ok(Device::Cpu);
    }
    if let Ok(name) = term.atom_to_string() {
        match name.as_str() {
            "cuda" => return Ok(Device::Cuda(0)),
            "vulkan" => return Ok(Device::Vulkan(0)),
            "metal" => return Ok(Device::Metal(0)),
            _ => {}
        }
    }
    decode(term, "device")
}

/// Decodes a shape given as a tuple or list of non-negative integers.
pub fn shape(term: Term) -> Result<Vec<usize>> {
    decode(term, "shape")
}

/// The term deserializer.
pub struct De<'a>(pub Term<'a>);

fn is_keyword(term: Term) -> bool {
    match term.decode::<Vec<Term>>() {
        Ok(items) => items.iter().all(|t| {
            rustler::types::tuple::get_tuple(*t)
                .map(|e| e.len() == 2 && e[0].is_atom())
                .unwrap_or(false)
        }),
        Err(_) => false,
    }
}

impl<'de, 'a> Deserializer<'de> for De<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        let t = self.0;
        match t.get_type() {
            TermType::Atom => {
                let s = t.atom_to_string().map_err(|_| DeError("bad atom".into()))?;
                match s.as_str() {
                    "nil" => v.visit_none(),
                    "true" => v.visit_bool(true),
                    "false" => v.visit_bool(false),
                    _ => v.visit_string(s),
                }
            }
            TermType::Integer => {
                if let Ok(i) = t.decode::<i64>() {
                    v.visit_i64(i)
                } else if let Ok(u) = t.decode::<u64>() {
                    v.visit_u64(u)
                } else {
                    Err(DeError("integer out of 64-bit range".into()))
                }
            }
            TermType::Float => {
                v.visit_f64(t.decode::<f64>().map_err(|_| DeError("bad float".into()))?)
            }
            TermType::List => v.visit_seq(Seq::new(
                t.decode::<Vec<Term>>()
                    .map_err(|_| DeError("improper list".into()))?,
            )),
            TermType::Tuple => v.visit_seq(Seq::new(
                rustler::types::tuple::get_tuple(t).map_err(|_| DeError("bad tuple".into()))?,
            )),
            TermType::Map => v.visit_map(Map::from_map(t)?),
            TermType::Binary => {
                let b: rustler::Binary = t.decode().map_err(|_| DeError("bad binary".into()))?;
                match std::str::from_utf8(b.as_slice()) {
                    Ok(s) => v.visit_string(s.to_string()),
                    Err(_) => v.visit_byte_buf(b.as_slice().to_vec()),
                }
            }
            other => Err(DeError(format!("unexpected term of type {other:?}"))),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        match self.0.get_type() {
            TermType::Integer => v.visit_f64(
                self.0
                    .decode::<i64>()
                    .map_err(|_| DeError("bad integer".into()))? as f64,
            ),
            TermType::Atom => match self.0.atom_to_string().unwrap_or_default().as_str() {
                "nan" => v.visit_f64(f64::NAN),
                "infinity" => v.visit_f64(f64::INFINITY),
                "neg_infinity" => v.visit_f64(f64::NEG_INFINITY),
                other => Err(DeError(format!("expected a number, got :{other}"))),
            },
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        if self.0.atom_to_string().map(|s| s == "nil").unwrap_or(false) {
            v.visit_none()
        } else {
            v.visit_some(self)
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        match self.0.get_type() {
            TermType::Map => v.visit_map(Map::from_map(self.0)?),
            TermType::List if is_keyword(self.0) => v.visit_map(Map::from_keyword(self.0)?),
            _ => Err(DeError("expected a map or keyword list".into())),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        let t = self.0;
        if t.is_atom() {
            let name = t.atom_to_string().map_err(|_| DeError("bad atom".into()))?;
            return v.visit_enum(Enum {
                name,
                payload: Payload::None,
            });
        }
        let items = rustler::types::tuple::get_tuple(t)
            .map_err(|_| DeError("expected an atom or a tagged tuple".into()))?;
        let name = items
            .first()
            .and_then(|h| h.atom_to_string().ok())
            .ok_or_else(|| DeError("a tagged tuple must start with an atom".into()))?;
        let payload = match items.len() {
            1 => Payload::None,
            2 => Payload::One(items[1]),
            _ => Payload::Many(items[1..].to_vec()),
        };
        v.visit_enum(Enum { name, payload })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        self.deserialize_any(v)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_any(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple_struct map ignored_any
    }
}

struct Seq<'a> {
    items: std::vec::IntoIter<Term<'a>>,
}

impl<'a> Seq<'a> {
    fn new(items: Vec<Term<'a>>) -> Self {
        Seq {
            items: items.into_iter(),
        }
    }
}

impl<'de, 'a> SeqAccess<'de> for Seq<'a> {
    type Error = DeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        self.items
            .next()
            .map(|t| seed.deserialize(De(t)))
            .transpose()
    }
}

struct Map<'a> {
    entries: std::vec::IntoIter<(Term<'a>, Term<'a>)>,
    value: Option<Term<'a>>,
}

impl<'a> Map<'a> {
    fn from_map(t: Term<'a>) -> Result<Self, DeError> {
        let iter =
            rustler::types::map::MapIterator::new(t).ok_or_else(|| DeError("bad map".into()))?;
        Ok(Map {
            entries: iter.collect::<Vec<_>>().into_iter(),
            value: None,
        })
    }

    fn from_keyword(t: Term<'a>) -> Result<Self, DeError> {
        let items: Vec<Term> = t.decode().map_err(|_| DeError("bad keyword list".into()))?;
        let mut entries = Vec::with_capacity(items.len());
        for i in items {
            let e = rustler::types::tuple::get_tuple(i)
                .map_err(|_| DeError("bad keyword entry".into()))?;
            entries.push((e[0], e[1]));
        }
        Ok(Map {
            entries: entries.into_iter(),
            value: None,
        })
    }

    fn empty() -> Self {
        Map {
            entries: Vec::new().into_iter(),
            value: None,
        }
    }
}

impl<'de, 'a> MapAccess<'de> for Map<'a> {
    type Error = DeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(De(k)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let v = self
            .value
            .take()
            .ok_or_else(|| DeError("value without key".into()))?;
        seed.deserialize(De(v))
    }
}

enum Payload<'a> {
    None,
    One(Term<'a>),
    Many(Vec<Term<'a>>),
}

struct Enum<'a> {
    name: String,
    payload: Payload<'a>,
}

impl<'de, 'a> de::EnumAccess<'de> for Enum<'a> {
    type Error = DeError;
    type Variant = Payload<'a>;
    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Payload<'a>), DeError> {
        let name: de::value::StringDeserializer<DeError> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, self.payload))
    }
}

impl<'de, 'a> de::VariantAccess<'de> for Payload<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self {
            Payload::None => Ok(()),
            _ => Err(DeError("this variant takes no arguments".into())),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        match self {
            Payload::One(t) => seed.deserialize(De(t)),
            Payload::None => Err(DeError("this variant needs a value: {tag, value}".into())),
            Payload::Many(_) => Err(DeError("this variant takes one value".into())),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        match self {
            Payload::Many(items) => v.visit_seq(Seq::new(items)),
            Payload::One(t) => De(t).deserialize_any(v),
            Payload::None => Err(DeError("this variant needs values".into())),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        match self {
            Payload::None => v.visit_map(Map::empty()),
            Payload::One(t) => De(t).deserialize_struct("", &[], v),
            Payload::Many(_) => Err(DeError("struct variants take a map or keyword list".into())),
        }
    }
}
