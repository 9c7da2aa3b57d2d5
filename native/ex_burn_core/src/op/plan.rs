//! What an op will cost before it runs: an upper bound of the bytes its result occupies and an
//! estimate of its work, computed from attributes and input shapes alone (no data is read).
//!
//! [`super::eval`] refuses results that overflow or do not fit the device
//! ([`crate::memory::reserve`]); the NIF layer keeps cheap work on normal schedulers and sends
//! the rest to dirty ones. Sizes are computed in checked `u128` arithmetic: a product that
//! overflows is an [`Error::Shape`], never a wrapped count.

use super::{Geometry, Op};
use crate::{DType, Result, Tensor};

/// The size and work of one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Upper bound of the bytes of the result (and of the temporaries sized like it).
    pub bytes: u128,
    /// Estimated element operations (the unit of scheduling decisions).
    pub work: u128,
}

use crate::size::too_large;
pub use crate::size::{numel, product};

fn size_of(t: &Tensor) -> u128 {
    t.numel() as u128
}

fn bytes(n: u128, dtype: DType) -> u128 {
    n.saturating_mul(dtype.size() as u128)
}

/// The widest element type among the inputs (what most results are stored as).
fn widest(inputs: &[Tensor]) -> DType {
    inputs
        .iter()
        .map(Tensor::dtype)
        .max_by_key(|t| t.size())
        .unwrap_or(DType::F64)
}

/// An attribute's result type, else the widest input type.
fn out_type(out: Option<DType>, inputs: &[Tensor]) -> DType {
    out.unwrap_or_else(|| widest(inputs))
}

/// Elements of the broadcast of the inputs' shapes (aligned on the right; mismatches are the
/// op's own error to report).
fn broadcast_numel(inputs: &[Tensor]) -> Result<u128> {
    let rank = inputs.iter().map(Tensor::rank).max().unwrap_or(0);
    let mut dims = vec![1u128; rank];
    for t in inputs {
        let off = rank - t.rank();
        for (i, &d) in t.shape().iter().enumerate() {
            dims[off + i] = dims[off + i].max(d as u128);
        }
    }
    product(dims, &|| "the broadcast of the operands".into())
}

/// Output size along one axis of a windowed op: `(padded - dilated window) / stride + 1`.
fn windows(size: u128, lo: i64, hi: i64, window: u128, stride: u128, dilation: u128) -> u128 {
    let padded = (size as i128 + lo as i128 + hi as i128).max(0) as u128;
    let span = window.saturating_sub(1).saturating_mul(dilation) + 1;
    if padded < span || stride == 0 {
        0
    } else {
        (padded - span) / stride + 1
    }
}

/// The dimensions of `x` grown by non-negative `(low, high)` padding (negative padding crops,
/// never grows), saturating: a product of them overflows into a shape error.
fn padded_dims(x: &Tensor, padding: Option<&[(i64, i64)]>) -> Vec<u128> {
    x.shape()
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let (lo, hi) = padding.and_then(|p| p.get(i)).copied().unwrap_or((0, 0));
            (d as u128)
                .saturating_add(lo.max(0) as u128)
                .saturating_add(hi.max(0) as u128)
        })
        .collect()
}

/// The size and work of `op` on `inputs`. Ops whose result is no larger than their inputs
/// cost the input size; creation, broadcasting, padding, products, convolutions, windows and
/// gathers are computed from their attributes.
pub fn plan(op: &Op, inputs: &[Tensor]) -> Result<Plan> {
    use Op::*;
    let input_elems: u128 = inputs.iter().map(size_of).sum();
    let first = inputs.first();
    let elementwise = |n: u128, t: DType| Plan {
        bytes: bytes(n, t),
        work: n,
    };
    Ok(match op {
        Iota { shape, dtype, .. } | Eye { shape, dtype } | Full { shape, dtype, .. } => {
            elementwise(numel(shape)?, *dtype)
        }
        RandomUniform { shape, dtype, .. } | RandomNormal { shape, dtype, .. } => {
            // Generated on the host as f64 and converted: count both.
            let n = numel(shape)?;
            Plan {
                bytes: bytes(n, DType::F64) + bytes(n, *dtype),
                work: n.saturating_mul(4),
            }
        }
        Broadcast { shape, .. } => {
            elementwise(numel(shape)?, first.map_or(DType::F64, Tensor::dtype))
        }
        // A reshape moves no data; its shape must still be countable.
        Reshape { shape } => {
            numel(shape)?;
            elementwise(0, widest(inputs))
        }
        Pad { config } => {
            let Some(t) = first else {
                return Ok(Plan::default());
            };
            let mut dims = Vec::with_capacity(config.len());
            for (i, &(lo, hi, interior)) in config.iter().enumerate() {
                let d = t.shape().get(i).copied().unwrap_or(1) as i128;
                let inner = if d == 0 {
                    0
                } else {
                    (d - 1)
                        .checked_mul(interior.max(0) as i128)
                        .and_then(|x| x.checked_add(d))
                        .ok_or_else(|| too_large(format!("padding {config:?}")))?
                };
                let grown = inner + (lo.max(0) as i128) + (hi.max(0) as i128);
                dims.push(grown.max(0) as u128);
            }
            let n = product(dims, &|| format!("padding {config:?}"))?;
            // The padded result is built in a filled buffer of the same size.
            Plan {
                bytes: bytes(n, widest(inputs)).saturating_mul(2),
                work: n.saturating_mul(2),
            }
        }
        Binary { out, .. } | Select { out } => {
            // Operands are converted and broadcast before the kernel: up to three buffers.
            let n = broadcast_numel(inputs)?;
            let t = out_type(*out, inputs);
            Plan {
                bytes: bytes(n, t).saturating_mul(3),
                work: n,
            }
        }
        Compare(_) | Logical(_) | Clip => {
            let n = broadcast_numel(inputs)?;
            Plan {
                bytes: bytes(n, widest(inputs)).saturating_mul(3),
                work: n,
            }
        }
        AsType { dtype } | Bitcast { dtype } => elementwise(input_elems, *dtype),
        // The values cross to the host and back: two copies.
        Narrow { to } => {
            let p = elementwise(input_elems, to.storage());
            Plan {
                bytes: p.bytes.saturating_mul(2),
                ..p
            }
        }
        Concatenate { .. } | Stack { .. } => elementwise(input_elems, widest(inputs)),
        Dot {
            contract_a,
            batch_a,
            contract_b,
            batch_b,
            out,
            ..
        } => {
            let (Some(a), Some(b)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            let dim = |t: &Tensor, i: usize| t.shape().get(i).copied().unwrap_or(1) as u128;
            let free = |t: &Tensor, used: [&Vec<usize>; 2]| {
                (0..t.rank())
                    .filter(|i| !used.iter().any(|u| u.contains(i)))
                    .map(|i| dim(t, i))
                    .collect::<Vec<_>>()
            };
            let what = || "the dot product".to_string();
            let batch = product(batch_a.iter().map(|&i| dim(a, i)), &what)?;
            let k = product(contract_a.iter().map(|&i| dim(a, i)), &what)?;
            let m = product(free(a, [contract_a, batch_a]), &what)?;
            let n = product(free(b, [contract_b, batch_b]), &what)?;
            let out_n = product([batch, m, n], &what)?;
            let t = out_type(*out, inputs);
            // Operands are permuted into [batch, m, k] / [batch, k, n] copies.
            Plan {
                bytes: bytes(out_n, t) + bytes(input_elems, t),
                work: out_n.saturating_mul(k.max(1)),
            }
        }
        Conv {
            strides,
            padding,
            input_dilation,
            kernel_dilation,
            feature_group_size,
            batch_group_size,
            out,
            ..
        } => {
            let (Some(x), Some(k)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            if x.rank() < 3 || k.rank() != x.rank() {
                return Ok(Plan::default());
            }
            let sp = x.rank() - 2;
            let at = |v: &Option<Vec<usize>>, i: usize| {
                v.as_ref().and_then(|v| v.get(i)).copied().unwrap_or(1) as u128
            };
            let mut dims = vec![x.shape()[0] as u128, k.shape()[0] as u128];
            // Padding and input dilation are applied to a copy of the input (by ExBurn, or
            // inside Burn's convolution): it is as large as the padded input.
            let mut padded = vec![x.shape()[0] as u128, x.shape()[1] as u128];
            let mut window = 1u128;
            for i in 0..sp {
                let size = x.shape()[2 + i] as u128;
                let dilated = if size == 0 {
                    0
                } else {
                    size.saturating_sub(1).saturating_mul(at(input_dilation, i)) + 1
                };
                let (lo, hi) = padding
                    .as_ref()
                    .and_then(|p| p.get(i))
                    .copied()
                    .unwrap_or((0, 0));
                let kw = k.shape()[2 + i] as u128;
                window = window.saturating_mul(kw);
                dims.push(windows(
                    dilated,
                    lo,
                    hi,
                    kw,
                    at(strides, i),
                    at(kernel_dilation, i),
                ));
                let grown = (dilated as i128)
                    .saturating_add(lo.max(0) as i128)
                    .saturating_add(hi.max(0) as i128);
                padded.push(grown.max(0) as u128);
            }
            let what = || "the convolution".to_string();
            let out_n = product(dims, &what)?;
            let padded_n = product(padded, &|| "the padded convolution input".to_string())?;
            let groups = (*feature_group_size).max(1) as u128 * (*batch_group_size).max(1) as u128;
            let per_out = (x.shape()[1] as u128 / groups.max(1)).max(1) * window;
            let t = out_type(*out, inputs);
            // Unfolded patches (im2col) are the largest temporary of a convolution.
            let patches = out_n
                .saturating_mul(per_out)
                .checked_div(k.shape()[0].max(1) as u128)
                .unwrap_or(0);
            Plan {
                bytes: bytes(out_n + patches + input_elems + padded_n, t),
                work: out_n.saturating_mul(per_out).max(padded_n),
            }
        }
        Window {
            geometry:
                Geometry {
                    window_dims,
                    strides,
                    padding,
                    window_dilations,
                },
            ..
        } => {
            let Some(x) = first else {
                return Ok(Plan::default());
            };
            let at = |v: &Option<Vec<usize>>, i: usize| {
                v.as_ref().and_then(|v| v.get(i)).copied().unwrap_or(1) as u128
            };
            let mut dims = Vec::with_capacity(x.rank());
            let mut padded = Vec::with_capacity(x.rank());
            let mut window = 1u128;
            for (i, &size) in x.shape().iter().enumerate() {
                let (lo, hi) = padding
                    .as_ref()
                    .and_then(|p| p.get(i))
                    .copied()
                    .unwrap_or((0, 0));
                let w = window_dims.get(i).copied().unwrap_or(1) as u128;
                window = window.saturating_mul(w);
                padded.push((size as i128 + lo.max(0) as i128 + hi.max(0) as i128).max(0) as u128);
                dims.push(windows(
                    size as u128,
                    lo,
                    hi,
                    w,
                    at(strides, i),
                    at(window_dilations, i),
                ));
            }
            let what = || format!("the window op over {:?}", x.shape());
            let out_n = product(dims, &what)?;
            let pad_n = product(padded, &what)?;
            Plan {
                bytes: bytes(out_n.saturating_mul(2) + pad_n, x.dtype()),
                work: out_n.saturating_mul(window.max(1)),
            }
        }
        WindowScatter {
            window_dims,
            padding,
            ..
        } => {
            let (Some(x), Some(src)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            let what = || format!("the window scatter over {:?}", x.shape());
            let padded_n = product(padded_dims(x, padding.as_deref()), &what)?;
            // One strided view per window offset, stacked, then one padded sum per offset.
            let k = product(window_dims.iter().map(|&d| d as u128), &what)?;
            let views = product([k, size_of(src)], &what)?;
            Plan {
                bytes: bytes(views + padded_n.saturating_mul(3), x.dtype()),
                work: k.saturating_mul(padded_n).max(views),
            }
        }
        Gather { axes } => {
            let (Some(x), Some(idx)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            let rows = idx.numel() as u128 / (axes.len().max(1) as u128);
            let slice = product(
                (0..x.rank())
                    .filter(|i| !axes.contains(i))
                    .map(|i| x.shape()[i] as u128),
                &|| "the gathered slices".into(),
            )?;
            let n = product([rows, slice], &|| "the gather".into())?;
            elementwise(n, x.dtype())
        }
        Take { axis } => {
            let (Some(x), Some(idx)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            let rest = product(
                (0..x.rank())
                    .filter(|i| i != axis)
                    .map(|i| x.shape()[i] as u128),
                &|| "the take".into(),
            )?;
            let n = product([rest, idx.numel() as u128], &|| "the take".into())?;
            elementwise(n, x.dtype())
        }
        Sort { .. } | Argsort { .. } => {
            let n = input_elems.max(1);
            Plan {
                bytes: bytes(n, DType::S64).saturating_mul(2),
                work: n.saturating_mul(128 - n.leading_zeros() as u128),
            }
        }
        TriangularSolve { .. } => {
            let n = first.map_or(0, |a| a.shape().last().copied().unwrap_or(0)) as u128;
            let m = inputs.get(1).map_or(0, size_of);
            Plan {
                bytes: bytes(m.saturating_mul(2), widest(inputs)),
                work: n.saturating_mul(m).max(input_elems),
            }
        }
        // Unary maps, reductions, scans, slices and updates: no larger than the first input
        // (in the widest type involved: integer sums accumulate in 64 bits).
        _ => {
            let n = first.map_or(0, size_of);
            let t = [widest(inputs), DType::F32]
                .into_iter()
                .max_by_key(|t| t.size())
                .unwrap_or(DType::F64);
            Plan {
                bytes: bytes(n, t),
                work: input_elems,
            }
        }
    })
}

/// The plan of a step that runs sub-programs a data-dependent number of times (folds with a
/// function, control flow): unbounded work, and the inputs' size, or for a window fold, its
/// padded input (twice) and the input.
pub fn sub_program(inputs: &[Tensor], window_padding: Option<&[(i64, i64)]>) -> Result<Plan> {
    let input_elems: u128 = inputs.iter().map(size_of).sum();
    let (Some(x), Some(padding)) = (inputs.first(), window_padding) else {
        return Ok(Plan {
            bytes: bytes(input_elems, widest(inputs)),
            work: u128::MAX,
        });
    };
    let padded_n = product(padded_dims(x, Some(padding)), &|| {
        format!("the padded input of window_reduce over {:?}", x.shape())
    })?;
    Ok(Plan {
        bytes: bytes(padded_n.saturating_mul(2) + input_elems, x.dtype()),
        work: u128::MAX,
    })
}
