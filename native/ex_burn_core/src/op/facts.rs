//! What the Elixir side knows of each op besides its family and name, read from the table's
//! declarations ([`Unary::float_function`], [`Unary::nx`], [`ReduceKind::takes_out`],
//! [`ELEMENTWISE_OTHERS`], [`NOT_NX_OTHERS`]) and exported with the vocabulary
//! (`crate::vocabulary`).

use super::table::{NxName, ReduceKind, Unary, ELEMENTWISE_OTHERS, NOT_NX_OTHERS};
use crate::wire;

/// The facts of one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The Nx operation it is.
    pub nx: NxName,
    /// Integer input computes in Nx's floating type (unary float functions).
    pub float: bool,
    /// The `out` attribute gives the accumulation and result type (sum, product).
    pub typed: bool,
    /// It maps each element independently.
    pub elementwise: bool,
}

impl Facts {
    /// Nx's operation of the same name, no type rule, not element-wise.
    pub const PLAIN: Facts = Facts {
        nx: NxName::Same,
        float: false,
        typed: false,
        elementwise: false,
    };
}

/// The facts of op `name` of `family` (as [`names`](super::names) lists them).
pub fn facts(family: &str, name: &str) -> Facts {
    let plain = Facts::PLAIN;
    match family {
        "unary" => wire::kind::<Unary>(name).map_or(plain, |u| Facts {
            nx: u.nx(),
            float: u.float_function(),
            elementwise: true,
            ..plain
        }),
        "binary" | "compare" | "logical" => Facts {
            elementwise: true,
            ..plain
        },
        "reduce" => Facts {
            typed: wire::kind::<ReduceKind>(name).is_some_and(ReduceKind::takes_out),
            ..plain
        },
        "other" => Facts {
            nx: if NOT_NX_OTHERS.contains(&name) {
                NxName::Absent
            } else {
                NxName::Same
            },
            elementwise: ELEMENTWISE_OTHERS.contains(&name),
            ..plain
        },
        _ => plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_others_are_ops_of_the_table() {
        let others = super::super::names()
            .into_iter()
            .find(|(f, _)| *f == "other")
            .map(|(_, n)| n)
            .unwrap_or_default();
        for name in ELEMENTWISE_OTHERS.iter().chain(NOT_NX_OTHERS.iter()) {
            assert!(others.iter().any(|n| n == name), "{name} is not an op");
        }
    }

    #[test]
    fn families_give_their_facts() {
        assert_eq!(facts("unary", "neg").nx, NxName::Other("negate"));
        assert!(facts("unary", "erf_inv").float);
        assert!(!facts("unary", "abs").float);
        assert!(facts("reduce", "sum").typed);
        assert!(!facts("reduce", "reduce_max").typed);
        assert!(facts("other", "select").elementwise);
        assert_eq!(facts("other", "softmax").nx, NxName::Absent);
        assert_eq!(facts("other", "dot"), Facts::PLAIN);
    }
}
