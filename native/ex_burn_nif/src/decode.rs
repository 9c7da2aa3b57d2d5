//! Decoding the recursive terms (ops, programs, model specs and the training options stored
//! with them) and the option maps of training calls into core types through one serde
//! `Deserializer`, so they are declared once (in `ex_burn_core`). Fixed-shape arguments go
//! through `args` instead.
//!
//! Conventions: an enum variant is an atom (`:exp`; struct variants then take their defaults),
//! `{atom, value}` (newtype, or struct variant with a map/keyword list of fields), or
//! `{atom, a, b, ...}` (tuple variant). Structs are maps with atom keys or keyword lists.
//! `nil` is `None`. Floats accept integers and `:nan`, `:infinity`, `:neg_infinity`.
//!
//! Terms nested deeper than [`MAX_DEPTH`] are refused (the decoder recurses with the term), and
//! the core types refuse unknown keys, naming the accepted ones.

use crate::args::{tuple_arity, tuple_items};
use ex_burn_core::{Error, Result};
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

/// Longest message kept from serde (whose messages quote the offending value: a key or a
/// string can be megabytes long).
const MAX_MESSAGE: usize = 600;

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        let mut m = msg.to_string();
        if m.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            m.truncate(end);
            m.push_str("...");
        }
        DeError(m)
    }
}

/// Deepest term nesting decoded (a program's while loop nested in another costs about six).
pub const MAX_DEPTH: usize = 128;

/// Decodes any `Deserialize` value from a term; `what` names it in the error.
pub fn decode<'de, T: Deserialize<'de>>(term: Term, what: &str) -> Result<T> {
    T::deserialize(De::new(term)).map_err(|e| Error::Argument(format!("invalid {what}: {e}")))
}

/// Work units a decode on a normal scheduler may spend (one per nested term, one per 64
/// bytes of binary): about 100 microseconds.
pub const NORMAL_BUDGET: u32 = 20_000;

const OVER_BUDGET: &str = "__ex_burn_over_budget__";

thread_local! {
    /// Units left to the decode running on this thread (`u32::MAX`: unlimited).
    static BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

fn spend(units: u32) -> Result<(), DeError> {
    BUDGET.with(|b| {
        let left = b.get();
        if left == u32::MAX {
            Ok(())
        } else if left < units {
            Err(DeError(OVER_BUDGET.into()))
        } else {
            b.set(left - units);
            Ok(())
        }
    })
}

/// Decodes like [`decode`] within [`NORMAL_BUDGET`]; `Ok(None)` when the term is too large to
/// decode on a normal scheduler (the caller moves to a dirty one and decodes there).
pub fn decode_bounded<'de, T: Deserialize<'de>>(term: Term, what: &str) -> Result<Option<T>> {
    let outer = BUDGET.with(|b| b.replace(NORMAL_BUDGET));
    let r = T::deserialize(De::new(term));
    BUDGET.with(|b| b.set(outer));
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.0 == OVER_BUDGET => Ok(None),
        Err(e) => Err(Error::Argument(format!("invalid {what}: {e}"))),
    }
}

/// Decodes an op within the normal-scheduler budget (`None`: too large, decode it on a dirty
/// scheduler with [`decode`]). Ops given as a bare atom (most eager calls) are decoded once
/// and cached by atom, which keeps the eager path cheap.
pub fn op(term: Term) -> Result<Option<ex_burn_core::Step>> {
    use std::collections::HashMap;
    use std::sync::{OnceLock, RwLock};
    static CACHE: OnceLock<RwLock<HashMap<rustler::Atom, ex_burn_core::Step>>> = OnceLock::new();
    let Ok(atom) = rustler::Atom::from_term(term) else {
        return decode_bounded(term, "op");
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(op) = cache.read().ok().and_then(|c| c.get(&atom).cloned()) {
        return Ok(Some(op));
    }
    let op: ex_burn_core::Step = decode(term, "op")?;
    if let Ok(mut c) = cache.write() {
        c.insert(atom, op.clone());
    }
    Ok(Some(op))
}

/// The term deserializer: a term and how deep it sits.
pub struct De<'a>(Term<'a>, usize);

impl<'a> De<'a> {
    /// The deserializer of a root term.
    pub fn new(term: Term<'a>) -> Self {
        De(term, 0)
    }
}

fn child(term: Term, depth: usize) -> Result<De, DeError> {
    spend(1)?;
    if depth >= MAX_DEPTH {
        return Err(DeError(format!(
            "the term is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(De(term, depth + 1))
}

/// The elements of a list, one work unit spent per element (a long list stops at the budget
/// instead of being walked whole first); `Ok(None)` for an improper list.
fn budgeted_items(term: Term) -> Result<Option<Vec<Term>>, DeError> {
    let (mut items, mut cursor) = (Vec::new(), term);
    while !cursor.is_empty_list() {
        spend(1)?;
        match cursor.list_get_cell() {
            Ok((head, tail)) => {
                items.push(head);
                cursor = tail;
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(items))
}

/// `{key, value}` when `t` is a pair whose key is an atom.
fn keyword_pair(t: Term) -> Option<(Term, Term)> {
    match tuple_items(t, 2)?.as_slice() {
        [k, v] if k.is_atom() => Some((*k, *v)),
        _ => None,
    }
}

/// The pairs of a keyword list (`Ok(None)`: not one), within the work budget.
fn keyword(term: Term) -> Result<Option<Vec<(Term, Term)>>, DeError> {
    Ok(budgeted_items(term)?.and_then(|items| items.into_iter().map(keyword_pair).collect()))
}

/// The elements of a tuple, after spending a unit per element (the arity is read first).
fn budgeted_tuple(t: Term) -> Result<Vec<Term>, DeError> {
    let n = tuple_arity(t).ok_or_else(|| DeError("bad tuple".into()))?;
    spend(u32::try_from(n).unwrap_or(u32::MAX - 1))?;
    tuple_items(t, n).ok_or_else(|| DeError("bad tuple".into()))
}

impl<'de, 'a> Deserializer<'de> for De<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        let (t, depth) = (self.0, self.1);
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
            TermType::List => v.visit_seq(Seq::list(t, depth)),
            TermType::Tuple => v.visit_seq(Seq::new(budgeted_tuple(t)?, depth)),
            TermType::Map => v.visit_map(Map::from_map(t, depth)?),
            TermType::Binary => {
                let b: rustler::Binary = t.decode().map_err(|_| DeError("bad binary".into()))?;
                spend(u32::try_from(b.len() / 64).unwrap_or(u32::MAX - 1))?;
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
            TermType::Integer => match (self.0.decode::<i64>(), self.0.decode::<u64>()) {
                (Ok(i), _) => v.visit_f64(i as f64),
                (_, Ok(u)) => v.visit_f64(u as f64),
                _ => Err(DeError("integer out of 64-bit range".into())),
            },
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
            TermType::Map => v.visit_map(Map::from_map(self.0, self.1)?),
            TermType::List => match keyword(self.0)? {
                Some(pairs) => v.visit_map(Map::from_pairs(pairs, self.1)),
                None => Err(DeError("expected a map or keyword list".into())),
            },
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
                depth: self.1,
            });
        }
        if !t.is_tuple() {
            return Err(DeError("expected an atom or a tagged tuple".into()));
        }
        let items = budgeted_tuple(t)?;
        let name = items
            .first()
            .and_then(|h| h.atom_to_string().ok())
            .ok_or_else(|| DeError("a tagged tuple must start with an atom".into()))?;
        let payload = match items.len() {
            1 => Payload::None,
            2 => Payload::One(items[1]),
            _ => Payload::Many(items[1..].to_vec()),
        };
        v.visit_enum(Enum {
            name,
            payload,
            depth: self.1,
        })
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

/// The elements of a tuple, or of a list walked cell by cell (so that a budget stops a long
/// list early and an improper one is an error).
enum Items<'a> {
    Tuple(std::vec::IntoIter<Term<'a>>),
    List(Term<'a>),
}

struct Seq<'a> {
    items: Items<'a>,
    depth: usize,
}

impl<'a> Seq<'a> {
    fn new(items: Vec<Term<'a>>, depth: usize) -> Self {
        Seq {
            items: Items::Tuple(items.into_iter()),
            depth,
        }
    }

    fn list(list: Term<'a>, depth: usize) -> Self {
        Seq {
            items: Items::List(list),
            depth,
        }
    }

    fn next_term(&mut self) -> Result<Option<Term<'a>>, DeError> {
        match &mut self.items {
            Items::Tuple(it) => Ok(it.next()),
            Items::List(cursor) => {
                if cursor.is_empty_list() {
                    return Ok(None);
                }
                let (head, tail) = cursor
                    .list_get_cell()
                    .map_err(|_| DeError("improper list".into()))?;
                *cursor = tail;
                Ok(Some(head))
            }
        }
    }
}

impl<'de, 'a> SeqAccess<'de> for Seq<'a> {
    type Error = DeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.next_term()? {
            Some(t) => seed.deserialize(child(t, self.depth)?).map(Some),
            None => Ok(None),
        }
    }
}

struct Map<'a> {
    entries: std::vec::IntoIter<(Term<'a>, Term<'a>)>,
    value: Option<Term<'a>>,
    depth: usize,
}

impl<'a> Map<'a> {
    fn from_map(t: Term<'a>, depth: usize) -> Result<Self, DeError> {
        let n = t.map_size().map_err(|_| DeError("bad map".into()))?;
        spend(u32::try_from(n).unwrap_or(u32::MAX - 1))?;
        let iter =
            rustler::types::map::MapIterator::new(t).ok_or_else(|| DeError("bad map".into()))?;
        Ok(Map {
            entries: iter.collect::<Vec<_>>().into_iter(),
            value: None,
            depth,
        })
    }

    fn from_pairs(pairs: Vec<(Term<'a>, Term<'a>)>, depth: usize) -> Self {
        Map {
            entries: pairs.into_iter(),
            value: None,
            depth,
        }
    }

    fn empty(depth: usize) -> Self {
        Map {
            entries: Vec::new().into_iter(),
            value: None,
            depth,
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
                seed.deserialize(child(k, self.depth)?).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let v = self
            .value
            .take()
            .ok_or_else(|| DeError("value without key".into()))?;
        seed.deserialize(child(v, self.depth)?)
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
    depth: usize,
}

/// An enum variant's payload and its depth.
struct Variant<'a>(Payload<'a>, usize);

impl<'de, 'a> de::EnumAccess<'de> for Enum<'a> {
    type Error = DeError;
    type Variant = Variant<'a>;
    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Variant<'a>), DeError> {
        let name: de::value::StringDeserializer<DeError> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, Variant(self.payload, self.depth)))
    }
}

impl<'de, 'a> de::VariantAccess<'de> for Variant<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.0 {
            Payload::None => Ok(()),
            _ => Err(DeError("this variant takes no arguments".into())),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        match self.0 {
            Payload::One(t) => seed.deserialize(child(t, self.1)?),
            Payload::None => Err(DeError("this variant needs a value: {tag, value}".into())),
            Payload::Many(_) => Err(DeError("this variant takes one value".into())),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, DeError> {
        match self.0 {
            Payload::Many(items) => v.visit_seq(Seq::new(items, self.1)),
            Payload::One(t) => child(t, self.1)?.deserialize_any(v),
            Payload::None => Err(DeError("this variant needs values".into())),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        match self.0 {
            Payload::None => v.visit_map(Map::empty(self.1)),
            Payload::One(t) => child(t, self.1)?.deserialize_struct("", &[], v),
            Payload::Many(_) => Err(DeError("struct variants take a map or keyword list".into())),
        }
    }
}
