//! What an op will cost before it runs: an upper bound of the bytes it holds at its peak (its
//! result and every temporary alive with it: casts, wider accumulators, host copies) and an
//! estimate of its work, computed from attributes and input shapes alone (no data is read).
//!
//! [`super::eval`] holds the peak in the memory ledger while the op runs, refusing it when it
//! does not fit ([`Plan::reserve`]); the NIF layer keeps cheap work on normal schedulers and
//! sends the rest to dirty ones. Sizes are computed in checked `u128` arithmetic: a product
//! that overflows is an [`Error::Shape`], never a wrapped count.
//!
//! The peaks follow the ops' code paths (which type each step computes in, which copies it
//! makes); `tests/engine/memory.rs` measures every op family in a child process and checks
//! that its plan covers the peak, so a change of path that costs more fails there.

use super::{Arith, Geometry, Op, ReduceKind, Unary};
use crate::memory::{self, Reservation};
use crate::{DType, Device, Result, Tensor};

/// The size and work of one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Upper bound of the bytes the op holds at its peak on its device: its result and the
    /// temporaries alive with it.
    pub bytes: u128,
    /// Bytes it also holds on the host when it runs on another device and computes there
    /// (`util::on_host`: the operands' copies, the host computation and its result).
    pub host: u128,
    /// Estimated element operations (the unit of scheduling decisions).
    pub work: u128,
}

/// A plan's bytes held in the memory ledger (see [`Plan::reserve`]).
#[must_use = "the plan's bytes are held only while this lives"]
#[derive(Debug)]
pub struct Held {
    _device: Reservation,
    _host: Option<Reservation>,
}

impl Plan {
    /// Holds the plan's bytes on `device` (and its host bytes on the host) until the returned
    /// [`Held`] is dropped; refused with `Error::OutOfMemory` when they do not fit.
    pub fn reserve(&self, device: Device) -> Result<Held> {
        let what = || "the result and its temporaries".to_string();
        let on_device = memory::reserve(device, self.bytes, &what)?;
        let host = (self.host > 0 && !device.is_host())
            .then(|| memory::reserve(Device::Cpu, self.host, &|| "its copy on the host".into()))
            .transpose()?;
        Ok(Held {
            _device: on_device,
            _host: host,
        })
    }
}

/// Bytes each input of a `concatenate` or `stack` costs beyond its data (its handle, view and
/// cast copy; measured at 520 and 815 bytes on the CPU).
const PER_INPUT: u128 = 1024;

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

/// Bytes per element of converting `from` to `to` (`Tensor::cast`): the result, and the
/// copies its path makes. Floats change width through f64 on the CPU backend (other than
/// widening to f64); floats become integers through f32 or f64 halves of 32 bits and s64
/// pieces (`Tensor::cast`); 64-bit integers become narrower floats through f64.
fn cast_cost(from: DType, to: DType) -> u128 {
    let w = to.size() as u128;
    match (from.is_float(), to.is_float()) {
        _ if from == to => 0,
        (true, true) if to == DType::F64 => 8,
        (true, true) => 8 + w,
        (true, false) => {
            let (before, wide) = match from {
                DType::F32 | DType::F64 => (0, from.size() as u128),
                _ => (cast_cost(from, DType::F32), 4),
            };
            let high = if to.bits() > 32 { 8 } else { 0 };
            before + 3 * wide + 8 + high + w + 2
        }
        (false, true) if from.bits() == 64 && to != DType::F64 => 8 + cast_cost(DType::F64, to),
        _ => w,
    }
}

/// Bytes of converting tensor `t` to `to` (nothing when it already is).
fn cast_bytes(t: &Tensor, to: DType) -> u128 {
    size_of(t).saturating_mul(cast_cost(t.dtype(), to))
}

/// Bytes of one boolean on `device` (the GPU backends may store them as u32).
fn bool_size(device: Device) -> u128 {
    if device.is_host() {
        1
    } else {
        4
    }
}

/// The device an op on `inputs` runs on (creation ops: on the caller's choice, which the plan
/// does not know; their paths do not depend on it).
fn device_of(inputs: &[Tensor]) -> Device {
    inputs.first().map_or(Device::Cpu, Tensor::device)
}

/// The size and work of `op` on `inputs`, on the device the inputs live on.
pub fn plan(op: &Op, inputs: &[Tensor]) -> Result<Plan> {
    let device = device_of(inputs);
    let mut p = plan_on(op, inputs, device)?;
    if !device.is_host() && detours(op, inputs) {
        // the operands are copied to the host and computed there as on the CPU
        let host = plan_on(op, inputs, Device::Cpu)?;
        let copies: u128 = inputs.iter().map(|t| t.byte_size() as u128).sum();
        p.host = host.bytes.saturating_add(copies);
    }
    Ok(p)
}

/// Whether `op` may compute on the host when its inputs live on a GPU (`util::on_host`).
fn detours(op: &Op, inputs: &[Tensor]) -> bool {
    match op {
        Op::Unary(u) => {
            matches!(u, Unary::ErfInv | Unary::Cbrt)
                || super::unary::library(*u).is_some()
                || super::hostmath::function(*u).is_some()
        }
        Op::Binary {
            op: Arith::Atan2, ..
        } => true,
        Op::Dot {
            out,
            contract_a,
            batch_a,
            ..
        } => {
            // integer products run on the host; exact small f32 products too on devices that
            // compute no f64 (`dot::dot`); every other product stays on the device
            let out = out.unwrap_or_else(|| widest(inputs));
            let small_f32 = || {
                out == DType::F32
                    && !super::wide::f64_device(device_of(inputs))
                    && dot_work(inputs, contract_a, batch_a) <= super::wide::EXACT_F32_WORK as u128
            };
            !out.is_float() || small_f32()
        }
        Op::TriangularSolve { .. } | Op::Narrow { .. } | Op::Bitcast { .. } => true,
        _ => false,
    }
}

/// Multiply-adds of a dot product: the product of every dimension of `a` and of `b`'s free
/// dimensions (`a`'s batch and contracted dimensions are `b`'s too), saturating.
fn dot_work(inputs: &[Tensor], contract_a: &[usize], batch_a: &[usize]) -> u128 {
    let (Some(a), Some(b)) = (inputs.first(), inputs.get(1)) else {
        return 0;
    };
    let shared: u128 = contract_a
        .iter()
        .chain(batch_a)
        .map(|&i| a.shape().get(i).copied().unwrap_or(1) as u128)
        .fold(1, u128::saturating_mul);
    let all = |t: &Tensor| {
        t.shape()
            .iter()
            .fold(1u128, |p, &d| p.saturating_mul(d as u128))
    };
    // a's elements times b's, divided by what both hold (the batch and contracted axes)
    all(a).saturating_mul(all(b)) / shared.max(1)
}

/// Bytes per element of unary `u` of `x` on `device` (the input's conversion included).
fn unary_cost(u: Unary, x: &Tensor, device: Device) -> u128 {
    use Unary::*;
    let t = x.dtype();
    let w = t.size() as u128;
    let b = bool_size(device);
    let out = t.to_floating();
    let f = out.size() as u128;
    // float functions convert integer input to f32 first
    let cast_in = cast_cost(t, out);
    let f32_cuda = out == DType::F32 && super::wide::f64_device(device);
    // cast to f64, the function in f64, the cast back (through f64)
    let in_f64 = 8 + 8 + cast_cost(DType::F64, out);
    // `hostmath`: an f64 copy, its bytes read back, the values; then their tensor cast back
    let host_f64 = {
        let to64 = if t == DType::F64 { 0 } else { 8 };
        (to64 + 16).max(8 + cast_cost(DType::F64, out))
    };
    let host_math = device.is_host()
        && matches!(out, DType::F32 | DType::F64)
        && super::hostmath::function(u).is_some();
    match u {
        _ if host_math && !(u == Log1p && out != DType::F64) => host_f64,
        Neg if t.is_unsigned_int() => 3 * w,
        Neg | Abs | BitwiseNot | Floor | Ceil => w,
        Round if t.is_float() => 4 * w + b,
        Round => w,
        Sign | Relu if !t.is_float() => 2 * w + b,
        Sign => 2 * w + b,
        IsNan | IsInfinity => b,
        LogicalNot => 2 * b,
        PopulationCount | CountLeadingZeros => 2 * w + 2 * b,
        ErfInv => 48,
        Exp | Log | Cbrt if f32_cuda => cast_in + in_f64,
        _ if f32_cuda && super::unary::library(u).is_some() => cast_in + in_f64,
        Sin | Cos | Tanh | Exp | Log | Log1p | Rsqrt | Sigmoid => cast_in + 2 * f,
        Expm1 => cast_in + 4 * f + b,
        Cbrt => cast_in + 3 * f,
        Erfc => cast_in + 6 * f + 2 * b,
        _ => cast_in + f,
    }
}

/// Bytes per element (of the broadcast result) of arithmetic `f` computing in `o`, beyond the
/// operands' conversions.
fn arith_cost(f: Arith, o: DType, scalar_rhs: bool, device: Device) -> u128 {
    let w = o.size() as u128;
    let b = bool_size(device);
    let int = !o.is_float();
    match f {
        Arith::Pow if int => 3 * w + 2 * b,
        Arith::LeftShift | Arith::RightShift => 3 * w + 2 * b,
        Arith::Divide | Arith::Quotient if int && o.is_signed_int() => 4 * w + 2 * b,
        Arith::Divide | Arith::Quotient if int => w + b,
        Arith::Remainder if int => 3 * w + 2 * b,
        Arith::Remainder => 4 * w + 5 * b,
        Arith::Min | Arith::Max => w + 3 * b,
        // a cube of f32 by a scalar: in f64, rounded once
        Arith::Pow if o == DType::F32 && scalar_rhs => 8 * 3 + cast_cost(DType::F64, o),
        // f32 operands in f64, rounded once
        Arith::Atan2 | Arith::Pow if o == DType::F32 => 16 + 8 + cast_cost(DType::F64, o),
        _ => w,
    }
}

/// The size and work of `op` on `inputs` when its paths are those of `device`. Ops whose
/// result is no larger than their inputs cost the input size; the others are computed from
/// their attributes.
fn plan_on(op: &Op, inputs: &[Tensor], device: Device) -> Result<Plan> {
    use Op::*;
    let input_elems: u128 = inputs.iter().map(size_of).sum();
    let first = inputs.first();
    let n0 = first.map_or(0, size_of);
    let t0 = first.map_or(DType::F32, Tensor::dtype);
    let b = bool_size(device);
    let per = |n: u128, cost: u128| Plan {
        bytes: n.saturating_mul(cost),
        host: 0,
        work: n,
    };
    let elementwise = |n: u128, t: DType| per(n, t.size() as u128);
    Ok(match op {
        // counted in s64 (`int_arange`), then converted
        Iota { shape, dtype, .. } => per(numel(shape)?, 8 + cast_cost(DType::S64, *dtype)),
        // two iotas compared (booleans), converted
        Eye { shape, dtype } => per(numel(shape)?, b + dtype.size() as u128),
        // values above i64::MAX are built on the host
        Full { shape, dtype, .. } if *dtype == DType::U64 => per(numel(shape)?, 16),
        Full { shape, dtype, .. } => elementwise(numel(shape)?, *dtype),
        RandomUniform { shape, dtype, .. } | RandomNormal { shape, dtype, .. } => {
            // Generated on the host as f64 and converted: count both.
            let n = numel(shape)?;
            Plan {
                bytes: bytes(n, DType::F64) + bytes(n, *dtype),
                host: 0,
                work: n.saturating_mul(4),
            }
        }
        Broadcast { shape, .. } => elementwise(numel(shape)?, t0),
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
            let out = widest(inputs);
            // The padded result is built in a filled buffer of the same size.
            Plan {
                bytes: bytes(n, out).saturating_mul(2) + cast_bytes(t, out),
                host: 0,
                work: n.saturating_mul(2),
            }
        }
        Binary { op: f, out } => {
            let (Some(x), Some(y)) = (inputs.first(), inputs.get(1)) else {
                return Ok(Plan::default());
            };
            let n = broadcast_numel(inputs)?;
            let merged = DType::merge(x.dtype(), y.dtype());
            let o = out.unwrap_or(match f {
                Arith::Divide | Arith::Atan2 => merged.to_floating(),
                _ => merged,
            });
            let scalar_rhs = y.rank() == 0;
            let ints = !x.dtype().is_float() && !y.dtype().is_float();
            let mixed = [x.dtype(), y.dtype()].contains(&DType::U64)
                && (x.dtype().is_signed_int() || y.dtype().is_signed_int());
            let cost = if *f == Arith::Divide && ints && o != DType::F64 {
                // integers divided in f64, the quotient rounded once to `o`
                return Ok(Plan {
                    bytes: cast_bytes(x, DType::F64)
                        + cast_bytes(y, DType::F64)
                        + n.saturating_mul(8 + cast_cost(DType::F64, o)),
                    host: 0,
                    work: n,
                });
            } else if ints && mixed {
                // a u64 with a signed integer: on sign and magnitude (`binary::integer::mixed`)
                8 * o.size() as u128 + 4 * b
            } else {
                arith_cost(*f, o, scalar_rhs, device)
            };
            Plan {
                bytes: n.saturating_mul(cost) + cast_bytes(x, o) + cast_bytes(y, o),
                host: 0,
                work: n,
            }
        }
        Select { out } => {
            let n = broadcast_numel(inputs)?;
            let o = out.unwrap_or_else(|| {
                inputs[1..]
                    .iter()
                    .map(Tensor::dtype)
                    .fold(inputs.get(1).map_or(t0, Tensor::dtype), DType::merge)
            });
            let casts: u128 = inputs[1..].iter().map(|t| cast_bytes(t, o)).sum();
            Plan {
                bytes: n.saturating_mul(2 * o.size() as u128 + b) + casts + n0 * b,
                host: 0,
                work: n,
            }
        }
        Compare(_) => {
            let n = broadcast_numel(inputs)?;
            let o = inputs.iter().map(Tensor::dtype).fold(t0, DType::merge);
            let casts: u128 = inputs.iter().map(|t| cast_bytes(t, o)).sum();
            per(n, 2 * b).plus(casts)
        }
        Logical(_) => per(broadcast_numel(inputs)?, 4 * b),
        Clip => {
            let casts: u128 = inputs[1..].iter().map(|t| cast_bytes(t, t0)).sum();
            per(n0, 4 * t0.size() as u128 + 2 * b).plus(casts)
        }
        Unary(u) => match first {
            Some(x) => per(n0, unary_cost(*u, x, device)),
            None => Plan::default(),
        },
        AsType { dtype } => Plan {
            work: input_elems,
            ..per(n0, cast_cost(t0, *dtype).max(dtype.size() as u128))
        },
        // read back as bytes and built again
        Bitcast { dtype } => per(n0, 3 * dtype.size() as u128),
        // The values cross to the host and back: two copies.
        Narrow { to } => {
            let p = elementwise(input_elems, to.storage());
            Plan {
                bytes: p.bytes.saturating_mul(2),
                ..p
            }
        }
        Concatenate { .. } | Stack { .. } => {
            let out = inputs.iter().map(Tensor::dtype).fold(t0, DType::merge);
            let casts: u128 = inputs.iter().map(|t| cast_bytes(t, out)).sum();
            let handles = (inputs.len() as u128).saturating_mul(PER_INPUT);
            Plan {
                bytes: bytes(input_elems, out) + casts + handles,
                host: 0,
                work: input_elems,
            }
        }
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
            let t = out.unwrap_or_else(|| DType::merge(a.dtype(), b.dtype()));
            // Operands are converted and permuted into [batch, m, k] / [batch, k, n] copies;
            // integer products other than s32/s64 are computed in s64 and narrowed, half
            // floats accumulate in f32.
            let wide = if t.is_float() {
                if t.size() < 4 {
                    out_n.saturating_mul(8)
                } else {
                    0
                }
            } else if matches!(t, DType::S32 | DType::S64) {
                0
            } else {
                (input_elems + out_n).saturating_mul(8)
            };
            Plan {
                bytes: bytes(out_n, t)
                    + bytes(input_elems, t)
                    + cast_bytes(a, t)
                    + cast_bytes(b, t)
                    + wide,
                host: 0,
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
                bytes: bytes(out_n + patches + input_elems + padded_n, t)
                    + cast_bytes(x, t)
                    + cast_bytes(k, t),
                host: 0,
                work: out_n.saturating_mul(per_out).max(padded_n),
            }
        }
        Window {
            kind,
            geometry:
                Geometry {
                    window_dims,
                    strides,
                    padding,
                    window_dilations,
                },
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
            let w = x.dtype().size() as u128;
            // f32 sums and products reduce their windows in f64
            let acc = if x.dtype() == DType::F32
                && matches!(kind, super::WindowKind::Sum | super::WindowKind::Product)
            {
                8
            } else {
                w
            };
            // the padded input (built in a filled buffer), the unfolded windows and the
            // reduction's copy of them, the result
            let unfolded = out_n.saturating_mul(window.max(1));
            Plan {
                bytes: pad_n.saturating_mul(2 * w)
                    + unfolded.saturating_mul(2 * acc)
                    + out_n.saturating_mul(acc + w),
                host: 0,
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
            let w = x.dtype().size() as u128;
            let k = product(window_dims.iter().map(|&d| d as u128), &what)?;
            let views = product([k, size_of(src)], &what)?;
            // The strided views of the padded input, stacked, and their argmax (in s64); then
            // per window offset the selected sources placed (a padded sum) into the sum.
            let choose = views.saturating_mul(w + 20);
            let place = size_of(src).saturating_mul(8 + 3 * w + b);
            Plan {
                bytes: padded_n.saturating_mul(5 * w) + choose + place + cast_bytes(src, x.dtype()),
                host: 0,
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
            // the indices as s64
            elementwise(n, x.dtype()).plus(bytes(size_of(idx), DType::S64))
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
            elementwise(n, x.dtype()).plus(bytes(size_of(idx), DType::S64))
        }
        TakeAlongAxis { .. } => {
            let n = broadcast_numel(inputs)?;
            let idx = inputs.get(1).map_or(0, size_of);
            elementwise(n, t0).plus(bytes(n.max(idx), DType::S64))
        }
        IndexedAdd { out, .. } | IndexedPut { out, .. } => {
            let (Some(x), Some(idx), Some(upd)) = (inputs.first(), inputs.get(1), inputs.get(2))
            else {
                return Ok(Plan::default());
            };
            let o = out.unwrap_or_else(|| DType::merge(x.dtype(), upd.dtype()));
            // the target converted, the result, the updates converted, the indices in s64
            Plan {
                bytes: bytes(size_of(x), o).saturating_mul(2)
                    + cast_bytes(x, o)
                    + cast_bytes(upd, o)
                    + bytes(size_of(idx), DType::S64).saturating_mul(2),
                host: 0,
                work: size_of(x) + size_of(upd),
            }
        }
        PutSlice { .. } => {
            let o = inputs
                .iter()
                .take(2)
                .map(Tensor::dtype)
                .fold(t0, DType::merge);
            let upd = inputs.get(1).map_or(0, size_of);
            Plan {
                bytes: bytes(n0, o).saturating_mul(2) + bytes(upd, o),
                host: 0,
                work: n0 + upd,
            }
        }
        Sort { .. } => {
            let n = input_elems.max(1);
            Plan {
                bytes: n.saturating_mul(2 * t0.size().max(4) as u128),
                host: 0,
                work: n.saturating_mul(128 - n.leading_zeros() as u128),
            }
        }
        Argsort { out, .. } => {
            // values and indices sorted, run numbers, keys (s64), their order and the gather
            let n = input_elems.max(1);
            let result = cast_cost(DType::S64, out.unwrap_or(DType::S64));
            Plan {
                bytes: n.saturating_mul(48 + 2 * t0.size() as u128 + result),
                host: 0,
                work: n.saturating_mul(128 - n.leading_zeros() as u128),
            }
        }
        Reduce {
            kind, axes, out, ..
        } => {
            let Some(x) = first else {
                return Ok(Plan::default());
            };
            let o = match kind {
                ReduceKind::Sum | ReduceKind::Product => {
                    out.unwrap_or_else(|| x.dtype().to_aggregate())
                }
                ReduceKind::Max | ReduceKind::Min => x.dtype(),
                ReduceKind::All | ReduceKind::Any => DType::U8,
            };
            let reduced: Vec<usize> = match axes {
                Some(a) => a.clone(),
                None => (0..x.rank()).collect(),
            };
            let kept = product(
                (0..x.rank())
                    .filter(|i| !reduced.contains(i))
                    .map(|i| x.shape()[i] as u128),
                &|| "the reduction".into(),
            )?;
            // after the first of several reduced axes: what is left of the input
            let first_axis = reduced
                .iter()
                .map(|&a| x.shape().get(a).copied().unwrap_or(1).max(1) as u128)
                .min()
                .unwrap_or(1);
            let partial = if reduced.len() > 1 && reduced.len() < x.rank() {
                bytes(n0 / first_axis, o)
            } else {
                0
            };
            let convert = match kind {
                // integers accumulate in 64 bits: the input converted first
                ReduceKind::Sum | ReduceKind::Product => cast_bytes(x, o),
                ReduceKind::All | ReduceKind::Any => n0.saturating_mul(2 * b),
                _ => 0,
            };
            Plan {
                bytes: convert + partial + bytes(kept, o),
                host: 0,
                work: input_elems,
            }
        }
        // (booleans and unsigned integers compared in s64, indices in s64, NaN positions)
        Arg { .. } => per(n0, 20 + t0.size() as u128),
        Cumulative { .. } => per(n0, 2 * t0.size() as u128),
        Softmax { .. } | LogSoftmax { .. } => {
            let f = t0.to_floating();
            per(n0, cast_cost(t0, f) + 3 * f.size() as u128)
        }
        TriangularSolve { .. } => {
            // on the host in f64: both operands converted, the solution, converted back
            let a_n = n0;
            let b_n = inputs.get(1).map_or(0, size_of);
            let n = first.map_or(0, |a| a.shape().last().copied().unwrap_or(0)) as u128;
            Plan {
                bytes: b_n.saturating_mul(32 + cast_cost(DType::F64, t0)) + a_n.saturating_mul(16),
                host: 0,
                work: n.saturating_mul(b_n).max(input_elems),
            }
        }
        // Transposes, slices, reverses, squeezes: views, or copies no larger than the input
        // (in the widest type involved).
        _ => Plan {
            bytes: bytes(n0, widest(inputs)),
            host: 0,
            work: input_elems,
        },
    })
}

impl Plan {
    fn plus(self, bytes: u128) -> Plan {
        Plan {
            bytes: self.bytes.saturating_add(bytes),
            ..self
        }
    }
}

/// The plan of a step that runs sub-programs a data-dependent number of times (folds with a
/// function, control flow): unbounded work, and the inputs' size, or for a window fold, its
/// padded input (twice) and the input.
pub fn sub_program(inputs: &[Tensor], window_padding: Option<&[(i64, i64)]>) -> Result<Plan> {
    let input_elems: u128 = inputs.iter().map(size_of).sum();
    let (Some(x), Some(padding)) = (inputs.first(), window_padding) else {
        return Ok(Plan {
            bytes: bytes(input_elems, widest(inputs)),
            host: 0,
            work: u128::MAX,
        });
    };
    let padded_n = product(padded_dims(x, Some(padding)), &|| {
        format!("the padded input of window_reduce over {:?}", x.shape())
    })?;
    Ok(Plan {
        bytes: bytes(padded_n.saturating_mul(2) + input_elems, x.dtype()),
        host: 0,
        work: u128::MAX,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::util;

    /// A tensor of `shape` and `dtype` that allocates one element (a broadcast view).
    fn view(shape: &[usize], dtype: DType) -> Tensor {
        let one = Tensor::from_bytes(&vec![1; dtype.size()], &[1], dtype, Device::Cpu).unwrap();
        util::broadcast_to(&one, shape).unwrap()
    }

    fn reduce(kind: ReduceKind) -> Op {
        Op::Reduce {
            kind,
            axes: None,
            keep_axes: false,
            out: None,
        }
    }

    // The three peaks of issue 31, measured on the CPU before the plans counted them.

    #[test]
    fn iota_counts_its_s64_count_and_the_conversion() {
        let n = 375_000_000u128;
        let op = Op::Iota {
            shape: vec![n as usize],
            dtype: DType::BF16,
            axis: None,
        };
        let p = plan(&op, &[]).unwrap();
        // measured 3.75 GB (s64 counts, then bf16); the result alone is 750 MB
        assert!(p.bytes >= n * 10, "{p:?}");
        assert!(p.bytes >= n * (8 + cast_cost(DType::S64, DType::BF16)));
    }

    #[test]
    fn integer_sums_count_their_64_bit_copy() {
        let x = view(&[1 << 29], DType::U8);
        let p = plan(&reduce(ReduceKind::Sum), std::slice::from_ref(&x)).unwrap();
        // measured 4.3 GB for 512 MiB of u8 (summed as u64)
        assert!(p.bytes >= 8 << 29, "{p:?}");
        // max and min compare in place
        let p = plan(&reduce(ReduceKind::Max), &[x]).unwrap();
        assert!(p.bytes < 1 << 20, "{p:?}");
    }

    #[test]
    fn a_concatenate_counts_each_input() {
        let one = Tensor::from_bytes(&[0; 4], &[1], DType::F32, Device::Cpu).unwrap();
        let parts = vec![one; 200_000];
        let p = plan(&Op::Concatenate { axis: 0 }, &parts).unwrap();
        // measured 520 bytes an input (2M inputs: 1.08 GB for 8 MB of data)
        assert!(p.bytes >= 200_000 * 520, "{p:?}");
    }

    #[test]
    fn casts_count_the_copies_of_their_paths() {
        assert_eq!(cast_cost(DType::F32, DType::F32), 0);
        assert_eq!(cast_cost(DType::U8, DType::S32), 4);
        // narrower floats through f64
        assert_eq!(cast_cost(DType::F32, DType::BF16), 8 + 2);
        assert_eq!(cast_cost(DType::F32, DType::F64), 8);
        // 64-bit integers to f32 through f64
        assert_eq!(cast_cost(DType::S64, DType::F32), 8 + 8 + 4);
        // floats to integers through s64 pieces
        assert!(cast_cost(DType::F32, DType::U8) > 8);
    }

    #[test]
    fn a_held_plan_counts_in_the_ledger_until_dropped() {
        let x = view(&[1 << 20], DType::F32);
        let p = plan(&Op::Unary(Unary::Exp), &[x]).unwrap();
        assert!(p.bytes >= 4 << 20);
        let held = p.reserve(Device::Cpu).unwrap();
        assert!(memory::held(Device::Cpu) >= p.bytes);
        drop(held);
    }

    #[test]
    fn a_plan_larger_than_any_machine_is_refused() {
        let x = view(&[1 << 40], DType::F32);
        let p = plan(&Op::Unary(Unary::ErfInv), &[x]).unwrap();
        let e = p.reserve(Device::Cpu).unwrap_err();
        assert_eq!(e.kind(), "out_of_memory");
        assert!(e.to_string().contains("temporaries"), "{e}");
    }
}
