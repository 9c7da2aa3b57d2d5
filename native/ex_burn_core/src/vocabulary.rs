//! The op vocabulary as the Elixir side reads it: every op of the table and every
//! program-only step, by family, with its [`Facts`], in declaration order.
//!
//! `lib/ex_burn/op/table.eterm` holds it as Erlang terms (one `{Family, Name, Facts}` per op,
//! read with `file:consult/1`), so that `ExBurn.Op` and `ExBurn.Defn.Lower` derive their
//! lists at compile time with no library loaded. [`render`] writes that file
//! (`cargo run --release -p ex_burn_core --example op_table > lib/ex_burn/op/table.eterm`); a
//! test here fails when the file in the repository differs from it.

use crate::op::{self, Facts, NxName};
use crate::program;

/// One op (or program step) of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its family (`unary`, ..., `other`, `program`).
    pub family: &'static str,
    /// Its wire name.
    pub name: String,
    /// What the Elixir side knows of it.
    pub facts: Facts,
}

impl Entry {
    /// The facts that differ from [`Facts::PLAIN`], as `(key, atom)` pairs in a fixed order
    /// (`nil` and `true` are atoms): `nx` (Nx's name, or `nil` for none), `float`, `typed`,
    /// `elementwise`.
    pub fn fact_pairs(&self) -> Vec<(&'static str, &'static str)> {
        let f = &self.facts;
        let mut pairs = Vec::new();
        match f.nx {
            NxName::Same => {}
            NxName::Other(name) => pairs.push(("nx", name)),
            NxName::Absent => pairs.push(("nx", "nil")),
        }
        for (key, on) in [
            ("float", f.float),
            ("typed", f.typed),
            ("elementwise", f.elementwise),
        ] {
            if on {
                pairs.push((key, "true"));
            }
        }
        pairs
    }
}

/// Every op of the table by family, then the program-only steps (family `program`).
pub fn entries() -> Vec<Entry> {
    let mut out = Vec::new();
    for (family, names) in op::names() {
        for name in names {
            let facts = op::facts(family, &name);
            out.push(Entry {
                family,
                name,
                facts,
            });
        }
    }
    for name in program::names() {
        let nx = if program::NOT_NX.contains(&name.as_str()) {
            NxName::Absent
        } else {
            NxName::Same
        };
        out.push(Entry {
            family: "program",
            name,
            facts: Facts { nx, ..Facts::PLAIN },
        });
    }
    out
}

/// The vocabulary as the text of `lib/ex_burn/op/table.eterm`.
pub fn render() -> String {
    let mut s = String::from(
        "%% The engine's op vocabulary: {Family, Name, Facts} per op, in the order of the table.\n\
         %% Generated from native/ex_burn_core/src/op/table.rs (and program/step.rs); do not edit:\n\
         %%   cargo run --release -p ex_burn_core --example op_table > lib/ex_burn/op/table.eterm\n\
         %% Facts: nx (the Nx operation when its name differs; nil: none), float (integers compute\n\
         %% in f32), typed (`out` is the accumulation type), elementwise (maps elements alone).\n",
    );
    for e in entries() {
        let facts: Vec<String> = e
            .fact_pairs()
            .into_iter()
            .map(|(k, v)| format!("{} => {}", atom(k), atom(v)))
            .collect();
        s.push_str(&format!(
            "{{{}, {}, #{{{}}}}}.\n",
            atom(e.family),
            atom(&e.name),
            facts.join(", ")
        ));
    }
    s
}

/// An atom in Erlang syntax: quoted when it is a reserved word or not a plain name.
fn atom(name: &str) -> String {
    const RESERVED: [&str; 29] = [
        "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor", "case",
        "catch", "cond", "div", "else", "end", "fun", "if", "let", "maybe", "not", "of", "or",
        "orelse", "receive", "rem", "try", "when", "xor",
    ];
    let plain = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '@');
    if plain && !RESERVED.contains(&name) {
        name.to_string()
    } else {
        format!("'{}'", name.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_table_is_the_engines() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../lib/ex_burn/op/table.eterm"
        );
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == render(),
            "lib/ex_burn/op/table.eterm differs from the op table; regenerate it with\n  \
             cargo run --release -p ex_burn_core --example op_table > lib/ex_burn/op/table.eterm"
        );
    }

    #[test]
    fn each_name_is_declared_once() {
        let mut names: Vec<String> = entries().into_iter().map(|e| e.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn atoms_are_quoted_where_erlang_needs_it() {
        assert_eq!(atom("neg"), "neg");
        assert_eq!(atom("cond"), "'cond'");
        assert_eq!(atom("Neg"), "'Neg'");
    }
}
