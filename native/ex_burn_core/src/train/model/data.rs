//! Batches and values: tensors turned into graph inputs and targets, batches cut (and
//! shuffled) from a dataset, and results read back.

use super::*;

/// Converts input tensors into graph values (on the autodiff device when `ad`).
pub(super) fn values(inputs: &[Tensor], ad: bool, dtype: DType) -> Result<Vec<Value>> {
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                float_value(t, ad, dtype)
            } else {
                if t.rank() != 2 {
                    return Err(Error::Shape(format!(
                        "integer inputs (embedding ids) must be [batch, seq], got {:?}",
                        t.shape()
                    )));
                }
                let p = t.cast(DType::S32)?.prim();
                let p = if ad { B::int_from_inner(p) } else { p };
                Ok(Value::Ids(burn::tensor::Tensor::from_primitive(p)))
            }
        })
        .collect()
}

/// A float tensor as a graph value in `dtype` (lifted to the autodiff device when `ad`).
fn float_value(t: &Tensor, ad: bool, dtype: DType) -> Result<Value> {
    let t = t.cast(dtype)?;
    let p = if ad {
        B::from_inner(t.prim())
    } else {
        t.prim()
    };
    Ok(Value::Float(TensorPrimitive::Float(p), t.shape().to_vec()))
}

/// A training target: float values (as inputs are converted), or class ids.
pub(super) fn target(t: &Tensor, ad: bool, dtype: DType) -> Result<Target> {
    if t.dtype().is_float() {
        Ok(Target::Values(float_value(t, ad, dtype)?))
    } else {
        let n = t.shape().first().copied().unwrap_or(0);
        // Class ids stay on the plain device: losses lift what they derive from them.
        let p = t.cast(DType::S32)?.reshape(vec![n])?.prim();
        Ok(Target::Classes(burn::tensor::Tensor::from_primitive(p)))
    }
}

/// Frees Burn autodiff's records of tracked tensors that no longer exist (the parameters of
/// dropped or replaced models). Burn frees them only at the end of a backward pass, so a
/// process that builds or loads models without training them grew by ~8 KB per model; one
/// backward pass on a one-element host tensor runs that cleanup (tens of microseconds).
pub fn collect_autodiff_garbage() {
    let dev =
        burn::DispatchDevice::autodiff(burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice));
    let t: burn::tensor::Tensor<B, 1> =
        burn::tensor::Tensor::from_data(TensorData::new(vec![0.0f32], [1]), &dev).require_grad();
    drop(t.sum().backward());
}

/// The smallest and largest of integer ids (one device read).
pub(super) fn id_bounds(t: &Tensor) -> Result<(i64, i64)> {
    let ids: burn::tensor::Tensor<B, 1, Int> =
        burn::tensor::Tensor::from_primitive(t.cast(DType::S64)?.reshape(vec![t.numel()])?.prim());
    let bounds = burn::tensor::Tensor::cat(vec![ids.clone().min(), ids.max()], 0).into_data();
    let b: Vec<i64> = bounds.iter::<i64>().collect();
    Ok((
        b.first().copied().unwrap_or(0),
        b.last().copied().unwrap_or(0),
    ))
}

/// Reads a one-element float tensor as f64 (Burn's `into_scalar` goes through f32).
pub(super) fn scalar(t: burn::tensor::Tensor<B, 1>) -> f64 {
    t.into_data().iter::<f64>().next().unwrap_or(f64::NAN)
}

pub(super) fn value_tensor(v: Value) -> Result<Tensor> {
    match v {
        Value::Float(p, shape) => Ok(Tensor::from_prim(p.tensor(), Kind::Float, shape)),
        Value::Ids(_) => Err(Error::Execution("the output is integer ids".into())),
    }
}

/// A seeded permutation of `0..n` on the device (Fisher-Yates on the host, uploaded once).
pub(super) fn permutation(n: usize, seed: u64, device: Device) -> Result<Tensor> {
    let mut g = SplitMix64::new(seed);
    let mut idx: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        let j = (g.uniform() * (i + 1) as f64) as usize;
        idx.swap(i, j.min(i));
    }
    Tensor::from_data(TensorData::new(idx, [n]), DType::S64, vec![n], device)
}

/// `data` with integer targets in the type the losses read, converted once per call rather
/// than per batch.
pub(super) fn ids_as_s32(data: &Data) -> Result<Data> {
    Ok(Data {
        inputs: data.inputs.clone(),
        target: data
            .target
            .as_ref()
            .map(|t| {
                if t.dtype().is_float() {
                    Ok(t.clone())
                } else {
                    t.cast(DType::S32)
                }
            })
            .transpose()?,
    })
}

/// Rows `lo..hi` (of the permuted order when given) of every tensor, on the device.
pub(super) fn cut(data: &Data, lo: usize, hi: usize, order: Option<&Tensor>) -> Result<Data> {
    let rows = |t: &Tensor| -> Result<Tensor> {
        let mut shape = t.shape().to_vec();
        shape[0] = hi - lo;
        match order {
            Some(perm) => {
                let idx = crate::op::shape::slice_static(perm, &[lo], &[hi - lo], &[1])?;
                let p = match t.kind() {
                    Kind::Float => B::float_select(t.prim(), 0, idx.prim()),
                    _ => B::int_select(t.int_prim()?, 0, idx.prim()),
                };
                let kind = if t.kind() == Kind::Float {
                    Kind::Float
                } else {
                    Kind::Int
                };
                Ok(Tensor::from_prim(p, kind, shape))
            }
            None => {
                let r = t.rank();
                let mut starts = vec![0; r];
                starts[0] = lo;
                crate::op::shape::slice_static(t, &starts, &shape, &vec![1; r])
            }
        }
    };
    Ok(Data {
        inputs: data.inputs.iter().map(rows).collect::<Result<_>>()?,
        target: data.target.as_ref().map(rows).transpose()?,
    })
}
