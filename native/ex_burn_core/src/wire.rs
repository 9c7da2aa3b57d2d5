//! The wire form of nested enums: an op is sent flat, as its Nx name and a map of attributes
//! (`:exp`, `{:sum, %{axes: [0]}}`), while the Rust types group ops by family
//! (`Op::Unary(Unary::Exp)`, `Op::Reduce { kind: ReduceKind::Sum, .. }`).
//!
//! A family's decoder reads the name once and hands it on with its attributes through two
//! serde adapters that work with any `Deserializer`:
//! - [`kind`] turns a name into a unit variant of a kind enum (`"sum"` -> `ReduceKind::Sum`);
//! - [`Attrs`] presents the variant's attributes as a struct to deserialize (a bare name gives
//!   every attribute its default);
//! - [`Replay`] presents the name and attributes again as an enum variant, so the ops that are
//!   not grouped keep serde's derived decoding (and its errors naming unknown attributes).

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, VariantAccess, Visitor,
};
use serde::Deserialize;

/// The unit variant of kind enum `K` named `name`, if there is one.
pub(crate) fn kind<'de, K: Deserialize<'de>>(name: &str) -> Option<K> {
    let d: de::value::StrDeserializer<'_, de::value::Error> = name.into_deserializer();
    K::deserialize(d).ok()
}

/// An enum variant whose name was already read: deserializes as that enum variant again.
pub(crate) struct Replay<'a, V> {
    /// The variant's name on the wire.
    pub name: &'a str,
    /// Its attributes, still unread.
    pub variant: V,
}

impl<'de, A: VariantAccess<'de>> Deserializer<'de> for Replay<'_, A> {
    type Error = A::Error;

    fn deserialize_any<W: Visitor<'de>>(self, w: W) -> Result<W::Value, A::Error> {
        w.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, V: VariantAccess<'de>> EnumAccess<'de> for Replay<'_, V> {
    type Error = V::Error;
    type Variant = V;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, V), V::Error> {
        let name: de::value::StrDeserializer<'_, V::Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, self.variant))
    }
}

/// The attributes of an enum variant, deserialized as a struct.
pub(crate) struct Attrs<V>(pub V);

impl<'de, A: VariantAccess<'de>> Deserializer<'de> for Attrs<A> {
    type Error = A::Error;

    fn deserialize_any<W: Visitor<'de>>(self, w: W) -> Result<W::Value, A::Error> {
        self.0.struct_variant(&[], w)
    }

    fn deserialize_struct<W: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        w: W,
    ) -> Result<W::Value, A::Error> {
        self.0.struct_variant(fields, w)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A type decoded from an op-like variant: its wire name and its unread attributes.
pub(crate) trait FromWire: Sized {
    /// Builds the value named `name` from the variant's attributes.
    fn from_wire<'de, V: VariantAccess<'de>>(name: &str, variant: V) -> Result<Self, V::Error>;
}

/// Deserializes a [`FromWire`] type (called by its `Deserialize` impl; `what` names it).
pub(crate) fn deserialize<'de, T: FromWire, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
) -> Result<T, D::Error> {
    d.deserialize_enum(what, &[], ByName(std::marker::PhantomData))
}

struct ByName<T>(std::marker::PhantomData<T>);

impl<'de, T: FromWire> Visitor<'de> for ByName<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an atom or {name, attributes}")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<T, A::Error> {
        let (name, variant): (String, A::Variant) = data.variant()?;
        T::from_wire(&name, variant)
    }
}

/// The wire name of a unit variant of a kind enum.
pub(crate) fn name<K: serde::Serialize + std::fmt::Debug>(k: &K) -> String {
    match serde_json::to_value(k) {
        Ok(serde_json::Value::String(s)) => s,
        _ => debug_name(k),
    }
}

/// A variant's name in snake case, from its `Debug` form (`WindowSum { .. }` -> `window_sum`).
pub(crate) fn debug_name<T: std::fmt::Debug>(x: &T) -> String {
    let dbg = format!("{x:?}");
    let head = dbg.split([' ', '{', '(']).next().unwrap_or("");
    let mut out = String::new();
    for (i, c) in head.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The wire names of the variants of enum `K` (as its derived decoder declares them).
pub(crate) fn names<'de, K: Deserialize<'de>>() -> Vec<String> {
    variant_names(|p| K::deserialize(p))
}

/// The variant names a derived enum decoder `decode` declares (skipped variants excluded).
pub(crate) fn variant_names<T>(
    decode: impl FnOnce(Probe) -> Result<T, de::value::Error>,
) -> Vec<String> {
    let seen = std::cell::Cell::new(&[][..]);
    let _ = decode(Probe(&seen));
    seen.get().iter().map(|s| s.to_string()).collect()
}

/// A deserializer that only records the variant names an enum decoder asks for.
pub(crate) struct Probe<'a>(&'a std::cell::Cell<&'static [&'static str]>);

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<W: Visitor<'de>>(self, _w: W) -> Result<W::Value, Self::Error> {
        Err(de::Error::custom("not an enum"))
    }

    fn deserialize_enum<W: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _w: W,
    ) -> Result<W::Value, Self::Error> {
        self.0.set(variants);
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}
