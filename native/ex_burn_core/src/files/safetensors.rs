//! Named tensors as safetensors bytes (readable by other tools), sealed with an integrity code
//! ([`super::integrity`]); reading checks the code when the file has one.

use super::integrity;
use crate::{DType, Device, Error, Result, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{HashMap, HashSet};

fn st_dtype(t: DType) -> Dtype {
    match t {
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::S8 => Dtype::I8,
        DType::S16 => Dtype::I16,
        DType::S32 => Dtype::I32,
        DType::S64 => Dtype::I64,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
    }
}

fn from_st(t: Dtype) -> Result<DType> {
    Ok(match t {
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I8 => DType::S8,
        Dtype::I16 => DType::S16,
        Dtype::I32 => DType::S32,
        Dtype::I64 => DType::S64,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        other => {
            return Err(Error::UnsupportedDtype(format!(
                "safetensors dtype {other:?}"
            )))
        }
    })
}

/// Named tensors and the string metadata of a safetensors file.
pub type NamedTensors = (Vec<(String, Tensor)>, HashMap<String, String>);

/// Named tensors (unique names) and string metadata as sealed safetensors bytes.
pub fn tensors_to_bytes(
    tensors: &[(String, Tensor)],
    mut metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut seen = HashSet::new();
    if let Some((dup, _)) = tensors.iter().find(|(n, _)| !seen.insert(n.as_str())) {
        return Err(Error::Argument(format!(
            "two tensors are named {dup:?}: names in a file must be unique"
        )));
    }
    let data: Vec<(String, Vec<u8>, DType, Vec<usize>)> = tensors
        .iter()
        .map(|(n, t)| Ok((n.clone(), t.to_bytes(None)?, t.dtype(), t.shape().to_vec())))
        .collect::<Result<_>>()?;
    metadata.insert(integrity::KEY.into(), integrity::placeholder());
    let views = data
        .iter()
        .map(|(n, b, t, s)| {
            TensorView::new(st_dtype(*t), s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Execution(format!("{e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut bytes = safetensors::serialize(views, Some(metadata))
        .map_err(|e| Error::Execution(format!("cannot serialize: {e}")))?;
    integrity::seal(&mut bytes)?;
    Ok(bytes)
}

/// Parses safetensors bytes into named tensors on `device` and the metadata (the integrity
/// code, checked when present, is left out of it).
pub fn tensors_from_bytes(bytes: &[u8], device: Device) -> Result<NamedTensors> {
    let sealed = integrity::verify(bytes)?;
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Corrupt(format!("not a readable safetensors file: {e}")))?;
    let (_, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| Error::Corrupt(format!("bad safetensors header: {e}")))?;
    let mut metadata = meta.metadata().clone().unwrap_or_default();
    if sealed {
        metadata.remove(integrity::KEY);
    }
    let mut named = st.tensors();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let out = named
        .into_iter()
        .map(|(n, v)| {
            let t = Tensor::from_bytes(v.data(), v.shape(), from_st(v.dtype())?, device)?;
            Ok((n, t))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((out, metadata))
}
