//! Encoding serde values (model specs, options) as Erlang terms, the mirror of `decode`:
//! structs become maps with atom keys, unit variants atoms, other variants `{tag, value}`,
//! sequences lists, `None` `nil`, non-finite floats `:nan`, `:infinity`, `:neg_infinity`.

use rustler::{Atom, Encoder, Env, Term};
use serde::ser::{self, Serialize};
use std::fmt;

/// A serialization error.
#[derive(Debug)]
pub struct EncError(String);

impl fmt::Display for EncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncError {}

impl ser::Error for EncError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        EncError(msg.to_string())
    }
}

/// Encodes a serializable value as a term.
pub fn encode<'a, T: Serialize>(env: Env<'a>, v: &T) -> ex_burn_core::Result<Term<'a>> {
    v.serialize(Ser { env })
        .map_err(|e| ex_burn_core::Error::Execution(format!("cannot encode: {e}")))
}

fn atom<'a>(env: Env<'a>, s: &str) -> Term<'a> {
    Atom::from_str(env, s)
        .map(|a| a.encode(env))
        .unwrap_or_else(|_| s.encode(env))
}

#[derive(Clone, Copy)]
struct Ser<'a> {
    env: Env<'a>,
}

/// Collects list elements, optionally tagged (`{tag, [..]}` for tuple variants).
struct Seq<'a> {
    env: Env<'a>,
    items: Vec<Term<'a>>,
    tag: Option<&'static str>,
    tuple: bool,
}

/// Collects map entries, optionally tagged (`{tag, %{..}}` for struct variants).
struct Map<'a> {
    env: Env<'a>,
    keys: Vec<Term<'a>>,
    values: Vec<Term<'a>>,
    tag: Option<&'static str>,
}

impl<'a> Seq<'a> {
    fn done(self) -> Result<Term<'a>, EncError> {
        let body = if self.tuple {
            rustler::types::tuple::make_tuple(self.env, &self.items)
        } else {
            self.items.encode(self.env)
        };
        Ok(match self.tag {
            Some(t) => (atom(self.env, t), body).encode(self.env),
            None => body,
        })
    }
}

impl<'a> Map<'a> {
    fn done(self) -> Result<Term<'a>, EncError> {
        let pairs: Vec<(Term, Term)> = self.keys.into_iter().zip(self.values).collect();
        let body = Term::map_from_pairs(self.env, &pairs)
            .map_err(|_| EncError("duplicate map keys".into()))?;
        Ok(match self.tag {
            Some(t) => (atom(self.env, t), body).encode(self.env),
            None => body,
        })
    }
}

macro_rules! enc {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, v: $t) -> Result<Term<'a>, EncError> { Ok(v.encode(self.env)) })*
    };
}

impl<'a> ser::Serializer for Ser<'a> {
    type Ok = Term<'a>;
    type Error = EncError;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Map<'a>;
    type SerializeStructVariant = Map<'a>;

    enc!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
         serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_str: &str);

    fn serialize_f64(self, v: f64) -> Result<Term<'a>, EncError> {
        Ok(crate::reply::Num(v).encode(self.env))
    }
    fn serialize_f32(self, v: f32) -> Result<Term<'a>, EncError> {
        Ok(crate::reply::Num(v as f64).encode(self.env))
    }
    fn serialize_char(self, v: char) -> Result<Term<'a>, EncError> {
        Ok(v.to_string().encode(self.env))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Term<'a>, EncError> {
        Ok(rustler::NewBinary::from_slice(self.env, v).into())
    }
    fn serialize_none(self) -> Result<Term<'a>, EncError> {
        Ok(atom(self.env, "nil"))
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<Term<'a>, EncError> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Term<'a>, EncError> {
        Ok(atom(self.env, "nil"))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Term<'a>, EncError> {
        Ok(atom(self.env, "nil"))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Term<'a>, EncError> {
        Ok(atom(self.env, variant))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Term<'a>, EncError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<Term<'a>, EncError> {
        Ok((atom(self.env, variant), v.serialize(self)?).encode(self.env))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, EncError> {
        Ok(Seq {
            env: self.env,
            items: vec![],
            tag: None,
            tuple: false,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, EncError> {
        Ok(Seq {
            env: self.env,
            items: vec![],
            tag: None,
            tuple: true,
        })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, EncError> {
        Ok(Seq {
            env: self.env,
            items: vec![],
            tag: None,
            tuple: true,
        })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, EncError> {
        Ok(Seq {
            env: self.env,
            items: vec![],
            tag: Some(variant),
            tuple: true,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, EncError> {
        Ok(Map {
            env: self.env,
            keys: vec![],
            values: vec![],
            tag: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Map<'a>, EncError> {
        Ok(Map {
            env: self.env,
            keys: vec![],
            values: vec![],
            tag: None,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Map<'a>, EncError> {
        Ok(Map {
            env: self.env,
            keys: vec![],
            values: vec![],
            tag: Some(variant),
        })
    }
}

impl<'a> ser::SerializeSeq for Seq<'a> {
    type Ok = Term<'a>;
    type Error = EncError;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), EncError> {
        self.items.push(v.serialize(Ser { env: self.env })?);
        Ok(())
    }
    fn end(self) -> Result<Term<'a>, EncError> {
        self.done()
    }
}

macro_rules! seq_like {
    ($tr:ident, $m:ident) => {
        impl<'a> ser::$tr for Seq<'a> {
            type Ok = Term<'a>;
            type Error = EncError;
            fn $m<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), EncError> {
                self.items.push(v.serialize(Ser { env: self.env })?);
                Ok(())
            }
            fn end(self) -> Result<Term<'a>, EncError> {
                self.done()
            }
        }
    };
}
seq_like!(SerializeTuple, serialize_element);
seq_like!(SerializeTupleStruct, serialize_field);
seq_like!(SerializeTupleVariant, serialize_field);

impl<'a> ser::SerializeMap for Map<'a> {
    type Ok = Term<'a>;
    type Error = EncError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Result<(), EncError> {
        self.keys.push(k.serialize(Ser { env: self.env })?);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), EncError> {
        self.values.push(v.serialize(Ser { env: self.env })?);
        Ok(())
    }
    fn end(self) -> Result<Term<'a>, EncError> {
        self.done()
    }
}

macro_rules! struct_like {
    ($tr:ident) => {
        impl<'a> ser::$tr for Map<'a> {
            type Ok = Term<'a>;
            type Error = EncError;
            fn serialize_field<T: ?Sized + Serialize>(
                &mut self,
                k: &'static str,
                v: &T,
            ) -> Result<(), EncError> {
                self.keys.push(atom(self.env, k));
                self.values.push(v.serialize(Ser { env: self.env })?);
                Ok(())
            }
            fn end(self) -> Result<Term<'a>, EncError> {
                self.done()
            }
        }
    };
}
struct_like!(SerializeStruct);
struct_like!(SerializeStructVariant);
