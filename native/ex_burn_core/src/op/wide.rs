//! f32 math on GPU devices that is evaluated in f64 and rounded once to f32, as the CPU
//! computes it (`hostmath`, `sum32`, `dot`'s small products) and as `Nx.BinaryBackend` does
//! (its f32 arithmetic is Erlang's f64, rounded per op): the functions Burn's GPU kernels
//! compute in f32 with an ulp or two of error (tan, atan, asinh, ...; `atan2` on every device), and sums and
//! products small enough that the f64 detour costs nothing that matters (at most [`SMALL`]
//! elements summed or multiply-adds), and `exp` and `log` (in `unary`; ExBurn's fused CUDA
//! kernels compute them the same way). Larger sums and products, and `tanh`, `sin`, `cos` and
//! `sqrt` (the fused kernels' other functions), keep the device's f32 kernels.

use crate::{DType, Result, Tensor};

/// f32 products of at most this many multiply-adds accumulate in f64 and round once (as
/// `Nx.BinaryBackend` computes them, and more accurately than an f32 GEMM): small matrices
/// (linear algebra, covariances, the products inside Nx's decompositions), where the GEMM's
/// packing (or a GPU kernel launch) costs more than the arithmetic anyway. On the CPU they
/// are summed in order on the host (`dot`); on a GPU as a broadcast product and sum in f64.
/// Device kernels leave such products to the op table.
pub const EXACT_F32_WORK: usize = 1 << 16;

/// Sums over at most this many elements, and products of at most this many multiply-adds,
/// accumulate in f64 on GPU devices (the CPU's bound for exact small products).
pub(super) const SMALL: usize = EXACT_F32_WORK;

/// Whether `x` is an f32 tensor on a GPU device that computes in f64 (CUDA). The wgpu
/// devices (Vulkan, Metal) do not reliably: on a conformant Vulkan implementation (Mesa's
/// lavapipe) f64 sums gave zeros and functions computed through f64 garbage
/// (`bench/results/vulkan_lavapipe.md`), so f32 work on them stays in f32.
pub(super) fn gpu_f32(x: &Tensor) -> bool {
    x.dtype() == DType::F32 && f64_device(x.device())
}

/// Whether `device` is a GPU that computes f64 (CUDA); not the host, nor the wgpu devices.
pub(super) fn f64_device(device: crate::Device) -> bool {
    matches!(device, crate::Device::Cuda(_))
}

/// Whether f32 work on `device` may be computed in f64 and rounded once: the host and
/// [`f64_device`]s.
pub(super) fn rounds_from_f64(device: crate::Device) -> bool {
    device.computes_f64()
}

/// `f` of f32 operands computed in f64 and rounded once to f32.
pub(super) fn in_f64(
    operands: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let wide = operands
        .iter()
        .map(|t| t.cast(DType::F64))
        .collect::<Result<Vec<_>>>()?;
    f(&wide)?.cast(DType::F32)
}
