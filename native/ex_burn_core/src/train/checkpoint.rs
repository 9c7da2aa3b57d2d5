//! Saving and loading models: one safetensors file holding every parameter under
//! `layer.param` (readable by other tools), plus, in its metadata, the model spec, the
//! training options, parameter ids and a CRC-32 of the data, and the optimizer state as a
//! `u8` tensor named `__optimizer_state__`, so training resumes exactly.
//!
//! Writes are atomic: a temporary file in the same directory, flushed and renamed over the
//! target, so a crash mid-save leaves the previous file intact. A truncated, altered or
//! foreign file is an `Error::Corrupt`.

use super::model::{CompileOptions, Model};
use super::spec::ModelSpec;
use crate::{DType, Device, Error, Result, Tensor};
use burn::module::ParamId;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// The format tag written in the metadata.
pub const FORMAT: &str = "ex_burn/1";
const OPTIMIZER: &str = "__optimizer_state__";

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

/// Named tensors (and metadata) as safetensors bytes.
pub fn tensors_to_bytes(
    tensors: &[(String, Tensor)],
    mut metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let data: Vec<(String, Vec<u8>, DType, Vec<usize>)> = tensors
        .iter()
        .map(|(n, t)| Ok((n.clone(), t.to_bytes(None)?, t.dtype(), t.shape().to_vec())))
        .collect::<Result<_>>()?;
    let mut crc = crc32fast::Hasher::new();
    let mut sorted: Vec<&(String, Vec<u8>, DType, Vec<usize>)> = data.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (n, b, _, _) in &sorted {
        crc.update(n.as_bytes());
        crc.update(b);
    }
    metadata.insert("crc32".into(), format!("{:08x}", crc.finalize()));
    let views = data
        .iter()
        .map(|(n, b, t, s)| {
            TensorView::new(st_dtype(*t), s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Execution(format!("{e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| Error::Execution(format!("cannot serialize: {e}")))
}

/// Named tensors and the string metadata of a safetensors file.
pub type NamedTensors = (Vec<(String, Tensor)>, HashMap<String, String>);

/// Parses safetensors bytes into named tensors on `device` and the metadata, checking the
/// CRC when present.
pub fn tensors_from_bytes(bytes: &[u8], device: Device) -> Result<NamedTensors> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Corrupt(format!("not a readable safetensors file: {e}")))?;
    let (_, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| Error::Corrupt(format!("bad safetensors header: {e}")))?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    let mut named = st.tensors();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(want) = metadata.get("crc32") {
        let mut crc = crc32fast::Hasher::new();
        for (n, v) in &named {
            crc.update(n.as_bytes());
            crc.update(v.data());
        }
        let got = format!("{:08x}", crc.finalize());
        if &got != want {
            return Err(Error::Corrupt(format!(
                "checksum mismatch (file says {want}, data gives {got}): the file is damaged"
            )));
        }
    }
    let out = named
        .into_iter()
        .map(|(n, v)| {
            let t = Tensor::from_bytes(v.data(), v.shape(), from_st(v.dtype())?, device)?;
            Ok((n, t))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((out, metadata))
}

fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Execution(format!("json: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(
    metadata: &HashMap<String, String>,
    key: &str,
) -> Result<T> {
    let s = metadata
        .get(key)
        .ok_or_else(|| Error::Corrupt(format!("missing {key:?} in the metadata")))?;
    serde_json::from_str(s).map_err(|e| Error::Corrupt(format!("bad {key:?} in the metadata: {e}")))
}

/// The whole model (parameters, spec, options, optimizer state) as bytes.
pub fn to_bytes(model: &Model) -> Result<Vec<u8>> {
    let mut tensors = model.parameters()?;
    let state = model.optimizer_state()?;
    let n = state.len();
    tensors.push((
        OPTIMIZER.into(),
        Tensor::from_bytes(&state, &[n], DType::U8, Device::Cpu)?,
    ));
    let ids: HashMap<String, String> = model
        .param_ids()?
        .into_iter()
        .map(|(n, id)| (n, id.serialize()))
        .collect();
    let mut meta = HashMap::new();
    meta.insert("format".into(), FORMAT.into());
    meta.insert("spec".into(), json(&model.spec)?);
    meta.insert("options".into(), json(&model.options)?);
    meta.insert("param_ids".into(), json(&ids)?);
    meta.insert("steps".into(), model.steps().to_string());
    meta.insert("frozen".into(), json(&model.frozen_layers())?);
    tensors_to_bytes(&tensors, meta)
}

/// Rebuilds a model from [`to_bytes`] output on `device`.
pub fn from_bytes(bytes: &[u8], device: Device) -> Result<Model> {
    let (mut tensors, meta) = tensors_from_bytes(bytes, Device::Cpu)?;
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::Corrupt(format!(
            "not an ExBurn model file (format {:?})",
            meta.get("format")
        )));
    }
    let spec: ModelSpec = parse(&meta, "spec")?;
    let options: CompileOptions = parse(&meta, "options")?;
    let ids: HashMap<String, String> = parse(&meta, "param_ids")?;
    let frozen: Vec<String> = parse(&meta, "frozen")?;
    let steps: u64 = meta
        .get("steps")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Corrupt("bad step count".into()))?;
    let state = tensors
        .iter()
        .position(|(n, _)| n == OPTIMIZER)
        .map(|i| tensors.remove(i).1)
        .ok_or_else(|| Error::Corrupt("the optimizer state is missing".into()))?;
    let mut model = Model::new(spec, options, device)
        .map_err(|e| Error::Corrupt(format!("the stored model is invalid: {e}")))?;
    let tensors: Vec<(String, Tensor)> = tensors
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_device(device)?)))
        .collect::<Result<_>>()?;
    let ids: Vec<(String, ParamId)> = ids
        .into_iter()
        .map(|(n, s)| Ok((n, ParamId::deserialize(&s))))
        .collect::<Result<_>>()?;
    model
        .set_parameters(&tensors, Some(&ids), false)
        .map_err(|e| Error::Corrupt(format!("stored parameters do not fit the model: {e}")))?;
    model.set_optimizer_state(state.to_bytes(None)?, steps)?;
    model.freeze(&frozen)?;
    Ok(model)
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the folder).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| Error::Io(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::Io(format!("cannot write {}: {e}", path.display()))
    })
}

/// Saves a model to `path` atomically.
pub fn save(model: &Model, path: &Path) -> Result<()> {
    write_atomic(path, &to_bytes(model)?)
}

/// Loads a model saved with [`save`] onto `device`.
pub fn load(path: &Path, device: Device) -> Result<Model> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", path.display())))?;
    from_bytes(&bytes, device)
}
