//! A rank-free tensor: one Burn primitive of any kind (float, int or bool), any rank including
//! 0 and zero-sized dimensions, with Nx's exact little-endian byte layout in and out.
//!
//! Burn primitives carry their dtype and shape at run time, so there is no enum over rank or
//! dtype here. Rank-0 tensors are stored as rank-1 primitives of one element (some backends
//! reject rank 0); the logical shape is kept beside the primitive.

use crate::dtype::{DType, Kind};
use crate::kernels::{DeviceKernels, Operand};
use crate::{Device, Error, Result, Scalar};
use burn::tensor::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::tensor::{BoolDType, FloatDType, IntDType, Shape, TensorData, TensorMetadata};
use burn::{Dispatch, DispatchTensor};

/// The Burn backend every tensor lives on.
pub(crate) type B = Dispatch;
/// A Burn tensor primitive (float, int and bool share this type in `Dispatch`).
pub(crate) type Prim = DispatchTensor;

/// Dimensions, inline up to rank 8 (no heap allocation on the eager path).
pub(crate) type Dims = smallvec::SmallVec<[usize; 8]>;

/// A tensor on some device.
#[derive(Clone, Debug)]
pub struct Tensor {
    prim: Prim,
    kind: Kind,
    shape: Dims,
}

/// Converts a logical shape into the primitive's shape (rank 0 is stored as `[1]`).
pub fn prim_shape(shape: &[usize]) -> Shape {
    if shape.is_empty() {
        Shape::from(vec![1])
    } else {
        Shape::from(shape.to_vec())
    }
}

/// Number of elements of a shape (1 for rank 0), saturating at `usize::MAX` so that a shape
/// whose count overflows can never pass for a small one (see [`crate::size::numel`] for
/// the checked count).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

fn read<F>(f: F) -> Result<TensorData>
where
    F: std::future::Future<
        Output = std::result::Result<TensorData, burn::tensor::backend::ExecutionError>,
    >,
{
    match burn::tensor::try_read_sync(f) {
        Some(Ok(data)) => {
            // the read ran after all kernel work queued before it
            crate::kernels::check_failures()?;
            Ok(data)
        }
        Some(Err(e)) => Err(Error::Execution(format!(
            "reading tensor data failed: {e:?}"
        ))),
        None => Err(Error::Execution("reading tensor data would block".into())),
    }
}

impl Tensor {
    /// Wraps a primitive of `kind` whose logical shape is `shape`; reshapes the primitive when
    /// its own shape differs (e.g. after a reduction that kept a size-1 axis).
    pub(crate) fn from_prim(prim: Prim, kind: Kind, shape: Vec<usize>) -> Tensor {
        let want = prim_shape(&shape);
        let reshape = |prim: Prim, to: Shape| match kind {
            Kind::Float => B::float_reshape(prim, to),
            Kind::Int => B::int_reshape(prim, to),
            Kind::Bool => B::bool_reshape(prim, to),
        };
        let have = prim.shape();
        let prim = if have == want {
            prim
        } else if have.num_dims() > 1
            && have.iter().any(|&d| d == 1)
            && !matches!(device_of(&prim, kind), burn::DispatchDevice::Flex(_))
        {
            // Burn 0.21's GPU tensors read the wrong elements after a reshape from a shape with
            // a unit axis to one with unit axes elsewhere (`[2, 3, 1] -> [2, 1, 3, 1]` read row
            // 1 as `[0, 0, -1]` for `[0, -1, -2]` on CUDA); through the flat shape they are
            // right. Contiguous tensors only change metadata on either step.
            let flat = Shape::new([have.num_elements()]);
            reshape(reshape(prim, flat), want)
        } else {
            reshape(prim, want)
        };
        Tensor {
            prim,
            kind,
            shape: Dims::from_vec(shape),
        }
    }

    /// Wraps a primitive whose shape is known to equal `like`'s (element-wise results).
    pub(crate) fn same_shape_as(prim: Prim, kind: Kind, like: &Tensor) -> Tensor {
        Tensor {
            prim,
            kind,
            shape: like.shape.clone(),
        }
    }

    /// Wraps a primitive keeping its own shape.
    pub(crate) fn wrap(prim: Prim, kind: Kind) -> Tensor {
        let shape = prim.shape().iter().copied().collect();
        Tensor { prim, kind, shape }
    }

    /// Builds a tensor from Nx's little-endian bytes.
    pub fn from_bytes(
        bytes: &[u8],
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let n = crate::size::numel(shape)?;
        let want = n * dtype.size() as u128;
        if bytes.len() as u128 != want {
            return Err(Error::Shape(format!(
                "binary of {} bytes does not match shape {shape:?} of type {dtype} ({want} bytes expected)",
                bytes.len()
            )));
        }
        let _copy = crate::memory::reserve(Device::Cpu, want, &|| "a copy of the binary".into())?;
        let _tensor = (!device.is_host())
            .then(|| crate::memory::reserve(device, want, &|| "the tensor".into()))
            .transpose()?;
        let data = TensorData::from_bytes_vec(bytes.to_vec(), prim_shape(shape), dtype.burn());
        Tensor::from_data(data, dtype, shape.to_vec(), device)
    }

    /// Builds a tensor from Burn `TensorData` whose dtype is `dtype`.
    pub(crate) fn from_data(
        data: TensorData,
        dtype: DType,
        shape: Vec<usize>,
        device: Device,
    ) -> Result<Tensor> {
        let dev = device.to_dispatch()?;
        device.check_dtype(dtype)?;
        // GPU backends refuse to upload an empty buffer with a zero-size axis inside its shape
        // (its strides look non-contiguous): upload it flat, the reshape is metadata only.
        let data = if data.num_elements() == 0 && !device.is_host() && data.shape.num_dims() > 1 {
            TensorData::from_bytes_vec(vec![], vec![0], data.dtype)
        } else {
            data
        };
        let (prim, kind) = match dtype.kind() {
            Kind::Float => (B::float_from_data(data, &dev), Kind::Float),
            _ => (B::int_from_data(data, &dev), Kind::Int),
        };
        Ok(Tensor::from_prim(prim, kind, shape))
    }

    /// Reads the tensor back as Nx's little-endian bytes; `limit` keeps the first elements only.
    pub fn to_bytes(&self, limit: Option<usize>) -> Result<Vec<u8>> {
        let dtype = self.dtype();
        let n = self.numel();
        let t = match limit {
            Some(l) if l < n => {
                let flat = self.reshape(vec![n])?;
                flat.prefix(l)?
            }
            _ => self.clone(),
        };
        if t.numel() == 0 {
            return Ok(Vec::new());
        }
        // The data crosses to the host (and is converted there for booleans).
        let host = (t.numel() as u128) * (dtype.size() as u128);
        let _read = crate::memory::reserve(Device::Cpu, host.saturating_mul(2), &|| {
            "reading the tensor back".into()
        })?;
        let t = if t.kind == Kind::Bool {
            t.cast(DType::U8)?
        } else {
            t
        };
        let data = match t.kind {
            Kind::Float => read(B::float_into_data(t.prim))?,
            _ => read(B::int_into_data(t.prim))?,
        };
        let data = if data.dtype != dtype.burn() {
            data.convert_dtype(dtype.burn())
        } else {
            data
        };
        Ok(data.into_bytes().to_vec())
    }

    /// The values of a contiguous f32 host tensor in row-major order, without copying
    /// (`None`: another type, device or layout).
    pub(crate) fn host_f32(&self) -> Option<&[f32]> {
        use burn_dispatch::{BackendTensor, DispatchTensorKind};
        match &self.prim.kind {
            DispatchTensorKind::Flex(BackendTensor::Float(t)) if self.dtype() == DType::F32 => {
                t.as_slice::<f32>().filter(|v| v.len() == self.numel())
            }
            _ => None,
        }
    }

    /// The values of an f32 host tensor in row-major order: borrowed when its buffer holds
    /// them so ([`Tensor::host_f32`]), else copied.
    pub(crate) fn f32_values(&self) -> Result<std::borrow::Cow<'_, [f32]>> {
        Ok(match self.host_f32() {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(self.to_f32_vec()?),
        })
    }

    /// The storage, element offset and strides (in elements) of an f32 host tensor of any
    /// layout (a permuted or sliced view), without copying (`None`: another type or device).
    pub(crate) fn host_f32_strided(&self) -> Option<(&[f32], usize, &[isize])> {
        use burn_dispatch::{BackendTensor, DispatchTensorKind};
        match &self.prim.kind {
            DispatchTensorKind::Flex(BackendTensor::Float(t)) if self.dtype() == DType::F32 => {
                let layout = t.layout();
                Some((t.storage::<f32>(), layout.start_offset(), layout.strides()))
            }
            _ => None,
        }
    }

    /// The storage (one byte per element), element offset and strides of a boolean host
    /// tensor of any layout (a broadcast mask is a view with zero strides), without copying
    /// (`None`: not a boolean host tensor).
    pub(crate) fn host_bool_strided(&self) -> Option<(&[u8], usize, &[isize])> {
        use burn_dispatch::{BackendTensor, DispatchTensorKind};
        match &self.prim.kind {
            DispatchTensorKind::Flex(BackendTensor::Bool(t)) if self.kind == Kind::Bool => {
                let layout = t.layout();
                Some((t.storage::<u8>(), layout.start_offset(), layout.strides()))
            }
            _ => None,
        }
    }

    /// An f32 host tensor of `shape` holding `values` (row-major).
    pub(crate) fn from_host_f32(values: Vec<f32>, shape: Vec<usize>) -> Result<Tensor> {
        let data = TensorData::new(values, prim_shape(&shape));
        Tensor::from_data(data, DType::F32, shape, Device::Cpu)
    }

    /// An f64 host tensor of `shape` holding `values` (row-major).
    pub(crate) fn from_host_f64(values: Vec<f64>, shape: Vec<usize>) -> Result<Tensor> {
        let data = TensorData::new(values, prim_shape(&shape));
        Tensor::from_data(data, DType::F64, shape, Device::Cpu)
    }

    /// Reads an f32 tensor back as values in row-major order.
    pub(crate) fn to_f32_vec(&self) -> Result<Vec<f32>> {
        self.float_vec(DType::F32)
    }

    /// Reads an f64 tensor back as values in row-major order.
    pub(crate) fn to_f64_vec(&self) -> Result<Vec<f64>> {
        self.float_vec(DType::F64)
    }

    /// Reads a float tensor of type `dtype` (whose elements are `T`) back in row-major order.
    fn float_vec<T: burn::tensor::Element>(&self, dtype: DType) -> Result<Vec<T>> {
        if self.dtype() != dtype {
            return Err(Error::Dtype(format!(
                "expected {dtype}, got {}",
                self.dtype()
            )));
        }
        read(B::float_into_data(self.prim.clone()))?
            .into_vec::<T>()
            .map_err(|e| Error::Execution(format!("reading {dtype} values failed: {e:?}")))
    }

    /// The logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The rank (number of axes).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// The Nx element type (`{:u, 8}` for booleans).
    pub fn dtype(&self) -> DType {
        match self.kind {
            Kind::Bool => DType::U8,
            _ => DType::from_burn(self.prim.dtype()).unwrap_or(DType::F32),
        }
    }

    /// The primitive kind holding the data.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> Device {
        Device::from_dispatch(&self.dispatch_device())
    }

    pub(crate) fn dispatch_device(&self) -> burn::DispatchDevice {
        device_of(&self.prim, self.kind)
    }

    /// Bytes of device memory the data occupies.
    pub fn byte_size(&self) -> usize {
        self.numel() * self.dtype().size()
    }

    /// Copies the tensor to another device.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let dev = device.to_dispatch()?;
        device.check_dtype(self.dtype())?;
        if self.kind == Kind::Bool {
            // Burn's transfer hands another backend the source's boolean storage, which the
            // GPU backends cannot read (a CPU comparison moved to CUDA panicked in
            // `bool_from_data`): as u8, then compared with zero where it arrived
            return Ok(self.cast(DType::U8)?.to_device(device)?.to_bool());
        }
        if self.device() != Device::Cpu && device != Device::Cpu {
            // Between two GPUs through the host: Burn's CUDA backend copies device to device
            // with NCCL send/receive, whose receive is not ordered after the work still queued
            // on the destination (a copy made while that device was busy came back as zeros).
            return self.to_device(Device::Cpu)?.to_device(device);
        }
        let prim = self.prim.clone();
        let prim = match self.kind {
            Kind::Float => B::float_to_device(prim, &dev),
            Kind::Int => B::int_to_device(prim, &dev),
            Kind::Bool => B::bool_to_device(prim, &dev),
        };
        Ok(Tensor {
            prim,
            kind: self.kind,
            shape: self.shape.clone(),
        })
    }

    /// The primitive (rank >= 1).
    pub(crate) fn prim(&self) -> Prim {
        self.prim.clone()
    }

    /// The tensor as device kernels read it (see [`crate::kernels`]).
    pub fn operand(&self) -> Operand<'_> {
        Operand {
            prim: &self.prim,
            shape: &self.shape,
        }
    }

    /// A float result of device kernels of logical shape `shape` (the primitive is reshaped
    /// when its own shape differs).
    pub(crate) fn from_kernel(prim: Prim, shape: Vec<usize>) -> Tensor {
        Tensor::from_prim(prim, Kind::Float, shape)
    }

    /// The installed device kernels when they serve this tensor's device.
    pub(crate) fn kernels(&self) -> Option<&'static dyn DeviceKernels> {
        let k = crate::kernels::installed()?;
        (self.device().family() == k.family()).then_some(k)
    }

    /// The first `len` elements of a rank-1 tensor (`len` at most its length).
    fn prefix(&self, len: usize) -> Result<Tensor> {
        let s = [burn::tensor::Slice::new(0, Some(len as isize), 1)];
        let p = self.prim.clone();
        let prim = match self.kind {
            Kind::Float => B::float_slice(p, &s),
            Kind::Int => B::int_slice(p, &s),
            Kind::Bool => B::bool_slice(p, &s),
        };
        Ok(Tensor::from_prim(prim, self.kind, vec![len]))
    }

    /// Reshapes (number of elements must match).
    pub fn reshape(&self, shape: Vec<usize>) -> Result<Tensor> {
        if numel(&shape) != self.numel() {
            return Err(Error::Shape(format!(
                "cannot reshape {:?} ({} elements) into {:?}",
                self.shape,
                self.numel(),
                shape
            )));
        }
        // a strided view on a device with kernels: a view with other strides where one exists
        if let Some(k) = self.kernels() {
            if let Some(prim) = k.reshape(self.operand(), &shape)? {
                return Ok(Tensor::from_kernel(prim, shape));
            }
        }
        Ok(Tensor::from_prim(self.prim.clone(), self.kind, shape))
    }

    /// Whether reshaping this CPU float tensor to `shape` copies it (its layout has no view of
    /// that shape).
    pub(crate) fn host_reshape_copies(&self, shape: &[usize]) -> bool {
        use burn_dispatch::{BackendTensor, DispatchTensorKind};
        match &self.prim.kind {
            DispatchTensorKind::Flex(BackendTensor::Float(t)) => {
                !t.is_contiguous() && t.layout().reshape(prim_shape(shape)).is_none()
            }
            _ => false,
        }
    }

    /// Whether [`Tensor::cast`] to `to` makes a new tensor (else it returns this one).
    pub(crate) fn casts_to(&self, to: DType) -> bool {
        self.dtype() != to || self.kind == Kind::Bool
    }

    /// Converts to another Nx type with Nx's rules: floats to ints as `trunc(x)` modulo 2^bits
    /// (NaN 0, infinities the type's extremes), ints wrap to narrower ints, and booleans become
    /// 0/1.
    pub fn cast(&self, to: DType) -> Result<Tensor> {
        if !self.casts_to(to) {
            return Ok(self.clone());
        }
        self.device().check_dtype(to)?;
        let p = self.prim.clone();
        let (prim, kind) = match (self.kind, to.kind()) {
            (Kind::Float, Kind::Float) => (B::float_cast(p, to.float_dtype()?), Kind::Float),
            (Kind::Float, _) => return float_to_int(self, to),
            (Kind::Int, Kind::Float) => return int_to_float(self, to),
            (Kind::Int, _) => (B::int_cast(p, to.int_dtype()?), Kind::Int),
            (Kind::Bool, Kind::Float) => (B::bool_into_float(p, to.float_dtype()?), Kind::Float),
            (Kind::Bool, _) => (B::bool_into_int(p, to.int_dtype()?), Kind::Int),
        };
        Ok(Tensor {
            prim,
            kind,
            shape: self.shape.clone(),
        })
    }

    /// A copy in contiguous memory on GPU backends, whose reads and some kernels reject strided
    /// views (expanded, unfolded); the CPU backend handles views, so this is free there.
    pub(crate) fn contiguous(&self) -> Tensor {
        if matches!(self.dispatch_device(), burn::DispatchDevice::Flex(_)) || self.numel() == 0 {
            return self.clone();
        }
        let p = self.prim.clone();
        let prim = match self.kind {
            Kind::Float => B::float_mul_scalar(p, 1.0f64.into()),
            Kind::Int => B::int_mul_scalar(p, 1i64.into()),
            Kind::Bool => B::bool_or(p.clone(), p),
        };
        Tensor {
            prim,
            kind: self.kind,
            shape: self.shape.clone(),
        }
    }

    /// The boolean storage this tensor's device uses (native bytes on the CPU; GPU backends
    /// store booleans as u8 or u32).
    pub(crate) fn bool_dtype(&self) -> BoolDType {
        match self.dispatch_device() {
            burn::DispatchDevice::Flex(_) => BoolDType::Native,
            dev => burn::tensor::get_device_settings::<B>(&dev).bool_dtype,
        }
    }

    /// A boolean view: `true` where the element is non-zero (NaN counts as non-zero).
    pub(crate) fn to_bool(&self) -> Tensor {
        let p = self.prim.clone();
        let bd = self.bool_dtype();
        let prim = match self.kind {
            Kind::Bool => p,
            Kind::Float => B::float_not_equal_elem(p, 0.0f64.into(), bd),
            Kind::Int => B::int_not_equal_elem(p, 0i64.into(), bd),
        };
        Tensor {
            prim,
            kind: Kind::Bool,
            shape: self.shape.clone(),
        }
    }

    /// The int primitive of an int (or bool, converted to u8) tensor.
    pub(crate) fn int_prim(&self) -> Result<Prim> {
        match self.kind {
            Kind::Int => Ok(self.prim.clone()),
            Kind::Bool => Ok(self.cast(DType::U8)?.prim),
            Kind::Float => Err(Error::Dtype(format!(
                "expected an integer tensor, got {}",
                self.dtype()
            ))),
        }
    }

    /// The bool primitive (non-zero test for non-bool tensors).
    pub(crate) fn bool_prim(&self) -> Prim {
        self.to_bool().prim
    }
}

/// The device a primitive of `kind` lives on.
fn device_of(prim: &Prim, kind: Kind) -> burn::DispatchDevice {
    match kind {
        Kind::Float => B::float_device(prim),
        Kind::Int => B::int_device(prim),
        Kind::Bool => B::bool_device(prim),
    }
}

/// 2^k as an f64.
fn two_to(k: i32) -> f64 {
    2f64.powi(k)
}

/// A float tensor converted to integer type `to` as Nx converts: `trunc(x)` modulo 2^bits (the
/// low bits of the integer), NaN to 0, infinities to the type's largest and smallest values.
/// The value splits exactly into `x = h * 2^32 + lo` (|lo| < 2^32, of x's sign) and, for 64-bit
/// results, `h = hh (mod 2^32)` with |hh| < 2^32: `lo` and `hh` convert exactly, and
/// `(hh << 32) + trunc(lo)` wraps to the result. f16 and bf16 compute in f32 (exact).
fn float_to_int(x: &Tensor, to: DType) -> Result<Tensor> {
    let int = to.int_dtype()?;
    if x.numel() == 0 {
        return Ok(Tensor::same_shape_as(
            B::float_into_int(x.prim(), int),
            Kind::Int,
            x,
        ));
    }
    let w = match x.dtype() {
        DType::F64 | DType::F32 => x.clone(),
        _ => x.cast(DType::F32)?,
    };
    let (p, bd) = (w.prim(), w.bool_dtype());
    let muls = |p: Prim, c: f64| B::float_mul_scalar(p, c.into());
    let nan = B::float_is_nan(p.clone(), bd);
    let bounded = B::float_clamp(p.clone(), (-two_to(100)).into(), two_to(100).into());
    let finite = B::float_mask_fill(bounded, nan, 0.0f64.into());
    let h = B::float_trunc(muls(finite.clone(), two_to(-32)));
    let lo = B::float_sub(finite, muls(h.clone(), two_to(32)));
    let mut v = B::float_into_int(lo, IntDType::I64);
    if to.bits() > 32 {
        let hh = B::float_sub(
            h.clone(),
            muls(B::float_trunc(muls(h, two_to(-32))), two_to(32)),
        );
        let high = B::float_into_int(hh, IntDType::I64);
        let high = B::bitwise_left_shift_scalar(high, Scalar::I(32).burn_for(DType::S64));
        v = B::int_add(high, v);
    }
    let mut v = B::int_cast(v, int);
    for (edge, max) in [(f64::INFINITY, true), (f64::NEG_INFINITY, false)] {
        let at = B::float_equal_elem(p.clone(), edge.into(), bd);
        v = B::int_mask_fill(v, at, crate::scalar::extreme(to, max).burn_for(to));
    }
    Ok(Tensor::same_shape_as(v, Kind::Int, x))
}

/// An integer tensor converted to float type `to`: s64 and u64 to f32, f16 and bf16 through f64
/// where the device computes f64 (Nx rounds the integer to an f64, then to the type; a direct
/// conversion rounds once and differs where the first rounding lands on a tie).
fn int_to_float(x: &Tensor, to: DType) -> Result<Tensor> {
    let p = x.prim();
    let prim =
        if x.dtype().bits() == 64 && to != DType::F64 && x.numel() > 0 && x.device().computes_f64()
        {
            B::float_cast(B::int_into_float(p, FloatDType::F64), to.float_dtype()?)
        } else {
            B::int_into_float(p, to.float_dtype()?)
        };
    Ok(Tensor::same_shape_as(prim, Kind::Float, x))
}
