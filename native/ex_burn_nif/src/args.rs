//! Typed decoding of NIF arguments. Devices, types and shapes arrive in one canonical form,
//! resolved once on the Elixir side (`ExBurn.Device`, `ExBurn.Type`): `:cpu` or `{:cuda, i}`,
//! `{:f, 32}`, a tuple of non-negative integers. A term that does not decode is an
//! `Error::Argument` naming the argument, never an exception.

use crate::resource::{ModelRes, ProgramRes, TensorRes};
use ex_burn_core::{DType, Device, Error, Result, Tensor};
use rustler::{Atom, Binary, Decoder, LocalPid, ResourceArc, Term};

/// Decodes `term` as `T`; `what` names the argument in the error. Improper lists are refused
/// first (rustler's list decoding panics on them).
pub fn get<'a, T: Decoder<'a>>(term: Term<'a>, what: &str) -> Result<T> {
    if !proper(term, 4) {
        return Err(Error::Argument(format!(
            "invalid {what}: it holds an improper list"
        )));
    }
    term.decode()
        .map_err(|_| Error::Argument(format!("invalid {what}: {}", preview(term))))
}

/// The elements of a proper list; `None` for an improper one or a term that is not a list
/// (rustler's list decoding panics on an improper list: every list is read through here).
pub fn list_items(term: Term) -> Option<Vec<Term>> {
    term.list_length().ok()?;
    term.decode::<Vec<Term>>().ok()
}

/// Whether every list in `term`, down to `depth` levels, is proper (the fixed-shape arguments
/// decoded with `get` are shallow; deeper terms fail to decode anyway).
fn proper(term: Term, depth: usize) -> bool {
    use rustler::TermType;
    let items: Vec<Term> = match term.get_type() {
        TermType::List => match list_items(term) {
            Some(items) => items,
            None => return false,
        },
        TermType::Tuple => rustler::types::tuple::get_tuple(term).unwrap_or_default(),
        TermType::Map => match rustler::types::map::MapIterator::new(term) {
            Some(it) => it.map(|(_, v)| v).collect(),
            None => return false,
        },
        _ => return true,
    };
    depth == 0 || items.iter().all(|t| proper(*t, depth - 1))
}

/// A short rendering of a term for error messages: scalars and small flat containers as they
/// are, anything larger or nested described by its type and size (terms can be huge or deep).
pub fn preview(term: Term) -> String {
    use rustler::TermType;
    let scalar = |t: &Term| {
        matches!(
            t.get_type(),
            TermType::Atom | TermType::Integer | TermType::Float
        )
    };
    let flat = match term.get_type() {
        TermType::List => match term.list_length() {
            Ok(n) if n > 16 => return format!("a list of {n} elements"),
            _ => match list_items(term) {
                Some(items) if items.iter().all(scalar) => true,
                Some(items) => return format!("a list of {} elements", items.len()),
                None => return "an improper list".into(),
            },
        },
        TermType::Tuple => match rustler::types::tuple::get_tuple(term) {
            Ok(items) if items.len() <= 16 && items.iter().all(scalar) => true,
            Ok(items) => return format!("a tuple of {} elements", items.len()),
            Err(_) => false,
        },
        TermType::Map => return format!("a map of {} keys", term.map_size().unwrap_or(0)),
        TermType::Binary => match term.decode::<Binary>() {
            Ok(b) if b.len() <= 64 => true,
            Ok(b) => return format!("a binary of {} bytes", b.len()),
            Err(_) => false,
        },
        _ => true,
    };
    if !flat {
        return format!("a {:?}", term.get_type());
    }
    let mut s = format!("{term:?}");
    if s.len() > 160 {
        let mut end = 160;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

/// A tagged term, `:tag` or `{:tag, value}`: the tag and the value. (Decoded by hand:
/// rustler's `NifTaggedEnum` derive emits its atoms in `HashMap` order, so two builds of the
/// same source differ, and released artifacts must be reproducible.)
pub fn tagged(term: Term) -> Option<(String, Option<Term>)> {
    if let Ok(tag) = term.atom_to_string() {
        return Some((tag, None));
    }
    match rustler::types::tuple::get_tuple(term).ok()?.as_slice() {
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
    let dims = rustler::types::tuple::get_tuple(term).map_err(|_| {
        Error::Argument(format!(
            "invalid shape {} (expected a tuple)",
            preview(term)
        ))
    })?;
    if dims.len() > MAX_RANK {
        return Err(Error::Argument(format!(
            "a shape of rank {} (at most {MAX_RANK} axes are supported)",
            dims.len()
        )));
    }
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
        || (term.get_type() == TermType::List
            && list_items(term).is_some_and(|items| items.iter().any(|t| is_ref(*t))));
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
