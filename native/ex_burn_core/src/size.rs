//! Checked element counts: a shape whose count overflows or exceeds what any device holds is an
//! [`Error::Shape`] before anything is allocated, never a wrapped count.

use crate::{Error, Result};

/// Element counts beyond this are refused outright (no device holds 2^48 elements).
const MAX_ELEMENTS: u128 = 1 << 48;

/// The product of `dims`, or a shape error naming `what` when it overflows.
pub fn product(dims: impl IntoIterator<Item = u128>, what: &dyn Fn() -> String) -> Result<u128> {
    let mut n: u128 = 1;
    for d in dims {
        n = n.checked_mul(d).ok_or_else(|| too_large(what()))?;
    }
    if n > MAX_ELEMENTS {
        return Err(too_large(what()));
    }
    Ok(n)
}

pub(crate) fn too_large(what: String) -> Error {
    Error::Shape(format!(
        "{what} has too many elements (more than 2^48): refused before allocating"
    ))
}

/// Number of elements of `shape`, checked.
pub fn numel(shape: &[usize]) -> Result<u128> {
    product(shape.iter().map(|&d| d as u128), &|| {
        format!("shape {shape:?}")
    })
}
