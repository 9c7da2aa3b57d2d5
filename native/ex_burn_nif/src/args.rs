//! Typed decoding of NIF arguments. Devices, types and shapes arrive in one canonical form,
//! resolved once on the Elixir side (`ExBurn.Device`, `ExBurn.Type`): `:cpu` or `{:cuda, i}`,
//! `{:f, 32}`, a tuple of non-negative integers. A term that does not decode is an
//! `Error::Argument` naming the argument, never an exception.

use crate::resource::{ModelRes, ProgramRes, TensorRes};
use ex_burn_core::{DType, Device, Error, Result, Tensor};
use rustler::{Atom, Binary, Decoder, LocalPid, ResourceArc, Term};

/// Longest list, tuple or map a fixed-shape argument may hold (tensor and parameter lists):
/// a longer one is refused after looking at `MAX_ITEMS + 1` of its elements, before anything
/// is decoded.
pub const MAX_ITEMS: usize = 1 << 16;

/// Decodes `term` as `T`; `what` names the argument in the error. Improper lists are refused
/// first (rustler's list decoding panics on them), and so are containers of more than
/// [`MAX_ITEMS`] elements.
pub fn get<'a, T: Decoder<'a>>(term: Term<'a>, what: &str) -> Result<T> {
    if let Err(problem) = bounded(term, 4) {
        return Err(Error::Argument(format!(
            "invalid {what}: it holds {problem}"
        )));
    }
    term.decode()
        .map_err(|_| Error::Argument(format!("invalid {what}: {}", preview(term))))
}

/// A list walked cell by cell, at most `max` elements.
pub enum Walk<'a> {
    /// A proper list of at most `max` elements.
    Items(Vec<Term<'a>>),
    /// A list with more than `max` elements (only `max + 1` were looked at).
    Longer,
    /// An improper list.
    Improper,
    /// Not a list.
    NotList,
}

/// The elements of `term` if it is a proper list of at most `max` elements (the walk stops
/// at element `max + 1`: the cost is bounded whatever the list). Lists are read through here
/// or cell by cell: rustler's list decoding panics on an improper list.
pub fn walk(term: Term, max: usize) -> Walk {
    if !term.is_list() {
        return Walk::NotList;
    }
    let (mut items, mut cursor) = (Vec::new(), term);
    loop {
        if cursor.is_empty_list() {
            return Walk::Items(items);
        }
        if items.len() == max {
            return Walk::Longer;
        }
        match cursor.list_get_cell() {
            Ok((head, tail)) => {
                items.push(head);
                cursor = tail;
            }
            Err(_) => return Walk::Improper,
        }
    }
}

/// Lists longer than this are decoded on a dirty scheduler (a handle costs ~0.5 us to decode).
pub const NORMAL_ITEMS: usize = 1024;

/// Whether `term` is a list of more than [`NORMAL_ITEMS`] elements (bounded walk).
pub fn many(term: Term) -> bool {
    matches!(walk(term, NORMAL_ITEMS), Walk::Longer)
}

/// The first element of a list (`None`: an empty list or not a list).
pub fn first(term: Term) -> Option<Term> {
    term.list_get_cell().ok().map(|(head, _)| head)
}

/// The arity of a tuple without copying its elements (`None`: not a tuple).
pub fn tuple_arity(term: Term) -> Option<usize> {
    let mut arity: rustler::sys::c_int = 0;
    let mut array: *const rustler::sys::ErlNifTerm = std::ptr::null();
    // SAFETY: the term belongs to its environment; the VM only writes the two out-pointers.
    let ok = unsafe {
        rustler::sys::enif_get_tuple(
            term.get_env().as_c_arg(),
            term.as_c_arg(),
            &mut arity,
            &mut array,
        )
    };
    (ok != 0).then(|| usize::try_from(arity).unwrap_or(0))
}

/// The elements of a tuple of at most `max` elements (`None`: not a tuple, or a longer one;
/// the arity is read first, so a huge tuple costs nothing).
pub fn tuple_items(term: Term, max: usize) -> Option<Vec<Term>> {
    match tuple_arity(term) {
        Some(n) if n <= max => rustler::types::tuple::get_tuple(term).ok(),
        _ => None,
    }
}

/// Whether every list, tuple and map in `term`, down to `depth` levels, is proper and holds
/// at most [`MAX_ITEMS`] elements; otherwise what is wrong (the fixed-shape arguments decoded
/// with `get` are shallow; deeper terms fail to decode anyway).
fn bounded(term: Term, depth: usize) -> std::result::Result<(), String> {
    use rustler::TermType;
    let too_many = || format!("more than {MAX_ITEMS} elements");
    let items: Vec<Term> = match term.get_type() {
        TermType::List => match walk(term, MAX_ITEMS) {
            Walk::Items(items) => items,
            Walk::Longer => return Err(format!("a list of {}", too_many())),
            _ => return Err("an improper list".into()),
        },
        TermType::Tuple => {
            tuple_items(term, MAX_ITEMS).ok_or_else(|| format!("a tuple of {}", too_many()))?
        }
        TermType::Map => match term.map_size() {
            Ok(n) if n <= MAX_ITEMS => rustler::types::map::MapIterator::new(term)
                .map(|it| it.map(|(_, v)| v).collect())
                .unwrap_or_default(),
            _ => return Err(format!("a map of {}", too_many())),
        },
        _ => return Ok(()),
    };
    if depth == 0 {
        return Ok(());
    }
    items.iter().try_for_each(|t| bounded(*t, depth - 1))
}

/// A short rendering of a term for error messages: one budget of elements for the whole term,
/// containers with their size, integers beyond 64 bits and long binaries by their size (a
/// term can be huge, deep, or a bignum whose digits take seconds to print).
pub fn preview(term: Term) -> String {
    let mut out = String::new();
    render(term, &mut out, &mut 12, 0);
    out
}

fn render(term: Term, out: &mut String, budget: &mut usize, depth: usize) {
    use rustler::TermType;
    use std::fmt::Write;
    if *budget == 0 || depth > 3 {
        out.push_str("...");
        return;
    }
    *budget -= 1;
    let items = |out: &mut String, budget: &mut usize, items: &[Term]| {
        for (i, t) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            if *budget == 0 {
                out.push_str("...");
                return;
            }
            render(*t, out, budget, depth + 1);
        }
    };
    match term.get_type() {
        TermType::Atom => match term.atom_to_string() {
            Ok(a) if matches!(a.as_str(), "nil" | "true" | "false") => out.push_str(&a),
            Ok(a) => {
                let _ = write!(out, ":{a}");
            }
            Err(_) => out.push_str("an atom"),
        },
        TermType::Integer => {
            if let Ok(i) = term.decode::<i64>() {
                let _ = write!(out, "{i}");
            } else if let Ok(u) = term.decode::<u64>() {
                let _ = write!(out, "{u}");
            } else {
                out.push_str("<an integer beyond 64 bits>");
            }
        }
        TermType::Float => match term.decode::<f64>() {
            Ok(f) => {
                let _ = write!(out, "{f:?}");
            }
            Err(_) => out.push_str("a float"),
        },
        TermType::Binary => match term.decode::<Binary>() {
            Ok(b) => {
                let head = &b.as_slice()[..b.len().min(48)];
                match std::str::from_utf8(head) {
                    Ok(s) if b.len() <= 48 => {
                        let _ = write!(out, "{s:?}");
                    }
                    Ok(s) => {
                        let _ = write!(out, "<a binary of {} bytes, starting {s:?}>", b.len());
                    }
                    Err(_) => {
                        let _ = write!(out, "<a binary of {} bytes>", b.len());
                    }
                }
            }
            Err(_) => out.push_str("a bitstring"),
        },
        TermType::List => {
            let shown = (*budget).clamp(1, 8);
            let (cells, rest) = match walk(term, shown) {
                Walk::Items(v) => (v, None),
                Walk::Longer => (head_cells(term, shown), Some(count(term))),
                _ => (
                    head_cells(term, shown),
                    Some("an improper tail".to_string()),
                ),
            };
            out.push('[');
            items(out, budget, &cells);
            if let Some(rest) = rest {
                let _ = write!(out, ", ... ({rest})");
            }
            out.push(']');
        }
        TermType::Tuple => {
            let n = tuple_arity(term).unwrap_or(0);
            let shown: Vec<Term> = tuple_items(term, MAX_ITEMS)
                .unwrap_or_default()
                .into_iter()
                .take((*budget).clamp(1, 8))
                .collect();
            out.push('{');
            items(out, budget, &shown);
            if shown.len() < n {
                let _ = write!(out, ", ... ({n} elements)");
            }
            out.push('}');
        }
        TermType::Map => {
            let _ = write!(out, "a map of {} keys", term.map_size().unwrap_or(0));
        }
        other => {
            let _ = write!(out, "a {other:?}");
        }
    }
}

/// The first `n` cells of a list (proper or not).
fn head_cells(term: Term, n: usize) -> Vec<Term> {
    let (mut cells, mut cursor) = (Vec::new(), term);
    while cells.len() < n {
        match cursor.list_get_cell() {
            Ok((h, t)) => {
                cells.push(h);
                cursor = t;
            }
            Err(_) => break,
        }
    }
    cells
}

/// "N elements" for a list of up to 10,000 cells, "more than 10000 elements" beyond.
fn count(term: Term) -> String {
    const CAP: usize = 10_000;
    let (mut n, mut cursor) = (0, term);
    while n <= CAP {
        match cursor.list_get_cell() {
            Ok((_, t)) => {
                n += 1;
                cursor = t;
            }
            Err(_) => return format!("{n} elements"),
        }
    }
    format!("more than {CAP} elements")
}

/// A tagged term, `:tag` or `{:tag, value}`: the tag and the value. (Decoded by hand:
/// rustler's `NifTaggedEnum` derive emits its atoms in `HashMap` order, so two builds of the
/// same source differ, and released artifacts must be reproducible.)
pub fn tagged(term: Term) -> Option<(String, Option<Term>)> {
    if let Ok(tag) = term.atom_to_string() {
        return Some((tag, None));
    }
    match tuple_items(term, 2)?.as_slice() {
        [tag, value] => Some((tag.atom_to_string().ok()?, Some(*value))),
        _ => None,
    }
}

/// `:cpu`, `{:cuda, i}`, `{:vulkan, i}` or `{:metal, i}`.
pub fn device(term: Term) -> Result<Device> {
    let index = |v: Term| v.decode::<u32>().ok().map(|i| i as usize);
    let device = match tagged(term) {
        Some((tag, None)) if tag == "cpu" => Some(Device::Cpu),
        Some((tag, Some(v))) => match tag.as_str() {
            "cuda" => index(v).map(Device::Cuda),
            "vulkan" => index(v).map(Device::Vulkan),
            "metal" => index(v).map(Device::Metal),
            _ => None,
        },
        _ => None,
    };
    device.ok_or_else(|| {
        Error::Argument(format!(
            "invalid device {} (expected :cpu, {{:cuda, i}}, {{:vulkan, i}} or {{:metal, i}})",
            preview(term)
        ))
    })
}

/// An Nx type tuple `{class, bits}`; types Burn lacks keep their `:unsupported_dtype` kind.
pub fn dtype(term: Term) -> Result<DType> {
    let (class, bits): (Atom, u32) = get(term, "type (expected {class, bits})")?;
    let class = class
        .to_term(term.get_env())
        .atom_to_string()
        .map_err(|_| Error::Argument("invalid type class".into()))?;
    DType::from_nx(&class, bits)
}

/// Axes a tensor may have.
pub const MAX_RANK: usize = 64;

/// A shape: a tuple of non-negative integers.
pub fn shape(term: Term) -> Result<Vec<usize>> {
    let rank = tuple_arity(term).ok_or_else(|| {
        Error::Argument(format!(
            "invalid shape {} (expected a tuple)",
            preview(term)
        ))
    })?;
    if rank > MAX_RANK {
        return Err(Error::Argument(format!(
            "a shape of rank {rank} (at most {MAX_RANK} axes are supported)"
        )));
    }
    let dims = tuple_items(term, MAX_RANK).unwrap_or_default();
    dims.iter()
        .map(|d| {
            d.decode::<u64>()
                .ok()
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| {
                    Error::Argument(format!(
                        "invalid shape {}: dimensions are non-negative integers",
                        preview(term)
                    ))
                })
        })
        .collect()
}

/// `nil` or a non-negative integer.
pub fn limit(term: Term) -> Result<Option<usize>> {
    if is_nil(term) {
        return Ok(None);
    }
    let n: u64 = get(term, "limit (expected nil or a non-negative integer)")?;
    Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
}

/// Whether `term` is `nil`.
pub fn is_nil(term: Term) -> bool {
    term.atom_to_string().map(|s| s == "nil").unwrap_or(false)
}

/// A tensor handle.
pub fn tensor_ref(term: Term) -> Result<ResourceArc<TensorRes>> {
    get(term, "tensor handle").map_err(|e| foreign_handle_hint(e, term))
}

/// A tensor (alive).
pub fn tensor(term: Term) -> Result<Tensor> {
    tensor_ref(term)?.get()
}

/// A list of tensors.
pub fn tensors(term: Term) -> Result<Vec<Tensor>> {
    let refs: Vec<ResourceArc<TensorRes>> =
        get(term, "list of tensor handles").map_err(|e| foreign_handle_hint(e, term))?;
    refs.iter().map(|r| r.get()).collect()
}

/// A reference that is not a resource of this library is, in practice, a tensor that was
/// sent from another node (a resource is valid only in the VM that made it): say so.
fn foreign_handle_hint(error: Error, term: Term) -> Error {
    use rustler::TermType;
    let is_ref = |t: Term| t.get_type() == TermType::Ref;
    let foreign = is_ref(term)
        || match walk(term, MAX_ITEMS) {
            Walk::Items(items) => items.iter().any(|t| is_ref(*t)),
            _ => false,
        };
    match error {
        Error::Argument(message) if foreign => Error::Argument(format!(
            "{message} (a reference that is not an ExBurn tensor of this node: tensors live in \
             the VM that created them; copy them to another node with \
             Nx.backend_copy(tensor, Nx.BinaryBackend) or ExBurn.Tensor.to_binary/1)"
        )),
        other => other,
    }
}

/// `nil` or a tensor.
pub fn opt_tensor(term: Term) -> Result<Option<Tensor>> {
    if is_nil(term) {
        Ok(None)
    } else {
        tensor(term).map(Some)
    }
}

/// A model handle.
pub fn model(term: Term) -> Result<ResourceArc<ModelRes>> {
    get(term, "model handle")
}

/// A program handle.
pub fn program(term: Term) -> Result<ResourceArc<ProgramRes>> {
    get(term, "program handle")
}

/// `nil` or a local pid.
pub fn opt_pid(term: Term) -> Result<Option<LocalPid>> {
    if is_nil(term) {
        Ok(None)
    } else {
        get(term, "pid").map(Some)
    }
}

/// Where a file's bytes come from: never a binary taken for a path.
pub enum Source<'a> {
    /// A file path.
    Path(String),
    /// The bytes themselves.
    Bytes(Binary<'a>),
}

/// `{:path, path}` or `{:bytes, binary}`.
pub fn source<'a>(term: Term<'a>) -> Result<Source<'a>> {
    let what = "source (expected {:path, path} or {:bytes, binary})";
    match tagged(term) {
        Some((tag, Some(v))) if tag == "path" => get(v, what).map(Source::Path),
        Some((tag, Some(v))) if tag == "bytes" => get(v, what).map(Source::Bytes),
        _ => Err(Error::Argument(format!(
            "invalid {what}: {}",
            preview(term)
        ))),
    }
}

/// A float option (integers accepted).
pub fn float(term: Term, what: &str) -> Result<f64> {
    if let Ok(i) = term.decode::<i64>() {
        return Ok(i as f64);
    }
    get(term, what)
}
