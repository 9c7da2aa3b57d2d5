//! Saving and loading models: one safetensors file holding every parameter under
//! `layer.param` (readable by other tools), plus, in its metadata, the model spec, the
//! training options and parameter ids, and the optimizer state as a `u8` tensor named
//! `__optimizer_state__`, so training resumes exactly. A SHA-256 over the whole file (see
//! `files::integrity`) is required to load it as a model: a truncated, altered or foreign
//! file is an `Error::Corrupt` (the parameters of foreign safetensors files are read with
//! `files::tensors_from_bytes`, `Model.import_params/3` in Elixir).
//!
//! Writes are atomic (`files::atomic`): a crash or kill mid-save leaves the previous file
//! intact.

use super::model::{CompileOptions, Model};
use super::spec::ModelSpec;
use crate::files::{self, integrity, tensors_from_bytes, tensors_to_bytes};
use crate::{DType, Device, Error, Result, Tensor};
use burn::module::ParamId;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The format tag written in the metadata.
pub const FORMAT: &str = "ex_burn/2";
const OPTIMIZER: &str = "__optimizer_state__";

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
    if !integrity::verify(bytes)? {
        return Err(Error::Corrupt(
            "not an ExBurn model checkpoint (no integrity code): a foreign or older safetensors \
             file; load its parameters into a compiled model with Model.import_params/3"
                .into(),
        ));
    }
    let (tensors, meta) = tensors_from_bytes(bytes, Device::Cpu)?;
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::Corrupt(format!(
            "not an ExBurn model checkpoint (format {:?}, expected {FORMAT:?})",
            meta.get("format")
        )));
    }
    let spec: ModelSpec = parse(&meta, "spec")?;
    let options: CompileOptions = parse(&meta, "options")?;
    let ids: HashMap<String, String> = parse(&meta, "param_ids")?;
    let frozen: Vec<String> = parse(&meta, "frozen")?;
    // The file is what was written (integrity code), but a hand-made file can be sealed too:
    // Burn's record decoding panics on malformed contents, and those panics are this file's
    // corruption, not a failure of the engine.
    match crate::guard::catch(|| rebuild(tensors, &meta, spec, options, ids, frozen, device)) {
        Ok(result) => result,
        Err(panic) => Err(Error::Corrupt(format!(
            "the checkpoint's contents cannot be read back: {}",
            panic
        ))),
    }
}

fn rebuild(
    mut tensors: Vec<(String, Tensor)>,
    meta: &HashMap<String, String>,
    spec: ModelSpec,
    options: CompileOptions,
    ids: HashMap<String, String>,
    frozen: Vec<String>,
    device: Device,
) -> Result<Model> {
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
    // Every parameter of the spec is in the file, with its id: a parameter left as freshly
    // initialised (or an optimizer state that no longer finds it) would load silently wrong.
    let stored: HashSet<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<String> = model.parameters()?.into_iter().map(|(n, _)| n).collect();
    missing(
        "parameter",
        expected.iter().filter(|n| !stored.contains(n.as_str())),
    )?;
    let trainable: Vec<String> = model.param_ids()?.into_iter().map(|(n, _)| n).collect();
    missing(
        "parameter id",
        trainable.iter().filter(|n| !ids.contains_key(*n)),
    )?;
    let tensors: Vec<(String, Tensor)> = tensors
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_device(device)?)))
        .collect::<Result<_>>()?;
    let ids: Vec<(String, ParamId)> = ids
        .into_iter()
        .map(|(n, s)| {
            ParamId::try_deserialize(&s)
                .map(|id| (n, id))
                .ok_or_else(|| Error::Corrupt(format!("bad parameter id {s:?}")))
        })
        .collect::<Result<_>>()?;
    model
        .set_parameters(&tensors, Some(&ids), false)
        .map_err(|e| Error::Corrupt(format!("stored parameters do not fit the model: {e}")))?;
    model.set_optimizer_state(state.to_bytes(None)?, steps)?;
    model.freeze(&frozen)?;
    Ok(model)
}

/// A `Corrupt` error naming the first few of `names` (the spec's entries the file lacks).
fn missing<'a>(what: &str, names: impl Iterator<Item = &'a String>) -> Result<()> {
    let names: Vec<&String> = names.collect();
    if names.is_empty() {
        return Ok(());
    }
    let shown: Vec<&String> = names.iter().take(8).copied().collect();
    let more = if names.len() > shown.len() {
        format!(" and {} more", names.len() - shown.len())
    } else {
        String::new()
    };
    Err(Error::Corrupt(format!(
        "the checkpoint lacks the {what}s {shown:?}{more} of its model spec"
    )))
}

/// Saves a model to `path` atomically.
pub fn save(model: &Model, path: &Path) -> Result<()> {
    files::write_atomic(path, &to_bytes(model)?)
}

/// Loads a model saved with [`save`] onto `device`.
pub fn load(path: &Path, device: Device) -> Result<Model> {
    // A regular file that fits in memory (checked before reading).
    from_bytes(&files::read_regular(path)?, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        let spec: ModelSpec = serde_json::from_str(
            r#"{"layers": [{"name": "x", "op": {"input": {"shape": [3]}}},
                           {"name": "d", "op": {"dense": {"units": 2}}, "inputs": [0]},
                           {"name": "bn", "op": {"batch_norm": {}}, "inputs": [1]}],
                "output": 2}"#,
        )
        .expect("spec");
        let options: CompileOptions =
            serde_json::from_str(r#"{"loss": "mse", "optimizer": {"kind": "adam"}, "seed": 3}"#)
                .expect("options");
        Model::new(spec, options, Device::Cpu).expect("model")
    }

    /// A file whose integrity code was recomputed after a parameter was taken out must not
    /// load with that parameter freshly initialised.
    #[test]
    fn a_resealed_checkpoint_without_a_parameter_is_corrupt() {
        let m = model();
        let (tensors, meta) =
            tensors_from_bytes(&to_bytes(&m).expect("bytes"), Device::Cpu).expect("parse");
        let resealed = tensors_to_bytes(&tensors, meta.clone()).expect("reseal");
        assert!(from_bytes(&resealed, Device::Cpu).is_ok());
        for gone in ["d.kernel", "d.bias", "bn.gamma", "bn.mean", "bn.var"] {
            let kept: Vec<(String, Tensor)> =
                tensors.iter().filter(|(n, _)| n != gone).cloned().collect();
            let bytes = tensors_to_bytes(&kept, meta.clone()).expect("reseal");
            match from_bytes(&bytes, Device::Cpu) {
                Err(Error::Corrupt(msg)) => assert!(msg.contains(gone), "{msg}"),
                Err(e) => panic!("{gone}: expected a corrupt file, got {e}"),
                Ok(_) => panic!("{gone}: loaded a checkpoint without it"),
            }
        }
    }

    /// The optimizer state is keyed by parameter id: an id missing from the metadata would
    /// leave that parameter's state behind silently.
    #[test]
    fn a_resealed_checkpoint_without_a_parameter_id_is_corrupt() {
        let m = model();
        let (tensors, mut meta) =
            tensors_from_bytes(&to_bytes(&m).expect("bytes"), Device::Cpu).expect("parse");
        let mut ids: HashMap<String, String> = parse(&meta, "param_ids").expect("ids");
        ids.remove("d.kernel");
        meta.insert("param_ids".into(), json(&ids).expect("json"));
        let bytes = tensors_to_bytes(&tensors, meta).expect("reseal");
        match from_bytes(&bytes, Device::Cpu) {
            Err(Error::Corrupt(msg)) => assert!(msg.contains("d.kernel"), "{msg}"),
            Err(e) => panic!("expected a corrupt file, got {e}"),
            Ok(_) => panic!("loaded a checkpoint without a parameter id"),
        }
    }
}
