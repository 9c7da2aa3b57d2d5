//! # ex_burn_cuda
//!
//! ExBurn's kernels for NVIDIA GPUs, plugged into the engine through its device-kernel seam
//! (`ex_burn_core::kernels`): [`install`] them once (the NIF does at load) and the engine's
//! CUDA tensors use them where they apply, Burn's CUDA backend elsewhere.
//!
//! | module        | what                                                                 |
//! |---------------|----------------------------------------------------------------------|
//! | [`device`]    | preflight (driver, NVRTC, headers), device names, memory, CubeCL setup |
//! | [`cache`]     | compiled kernels and autotune results cached on disk                   |
//! | [`collective`] | sums across GPUs (NCCL, loaded at run time)                          |
//! | [`memory`]    | how CubeCL pools CUDA memory (the configuration's `cuda_memory`)       |
//! | [`queue`]     | work of ours queued in order with CubeCL's kernels; failures          |
//! | [`gemm`]      | matrix products by cuBLAS (also Burn's own, through `burn-cubecl`)     |
//! | [`conv`]      | 2-D convolutions by cuDNN (loaded at run time)                         |
//! | [`elementwise`] | element-wise kernels compiled with NVRTC, and their launches         |
//! | [`views`]     | strided reshapes, `slice`, `put_slice`, sums and scatter-adds          |
//! | [`fused`]     | fused element-wise runs and row regions as CUDA C                      |
//! | [`attention`] | fused attention (TF32 `mma.sync`)                                      |
//! | [`window`]    | window scatters (max and min pooling's gradients)                      |
//! | [`events`]    | CUDA events for the GPU-time profile                                   |
//!
//! ## Cargo features
//!
//! | feature  | what                                                                       |
//! |----------|----------------------------------------------------------------------------|
//! | `cuda`   | the kernels (and `ex_burn_core/cuda`); without it this crate is empty        |
//! | `fusion` | Burn's kernel fusion (`ex_burn_core/fusion`)                                |
//!
//! Pin the CUDA API with `CUDARC_CUDA_VERSION` (`.cargo/config.toml` sets a default).
#![warn(missing_docs)]
#![cfg(feature = "cuda")]

pub mod attention;
pub mod attention_rows;
pub mod cache;
pub mod collective;
pub mod conv;
pub mod device;
pub mod elementwise;
pub(crate) mod events;
pub mod fused;
pub mod gemm;
pub mod memory;
pub mod queue;
pub mod views;
pub mod window;

use burn::DispatchTensor;
use ex_burn_core::kernels::{
    self, AttentionCall, ConvCall, Counts, DeviceKernels, KernelGradientCall, MapRun, Mark,
    Operand, Precision, Rounded, RowRegion, Start, WindowScatterCall,
};
use ex_burn_core::Result;
use std::time::Duration;

/// The CUDA kernels, as the engine's seam sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cuda;

/// Installs the CUDA kernels for the rest of the process (once; later calls do nothing);
/// `false` when other kernels were installed already.
pub fn install() -> bool {
    static KERNELS: Cuda = Cuda;
    kernels::install(&KERNELS) || kernels::installed().is_some_and(|k| k.family() == "cuda")
}

impl DeviceKernels for Cuda {
    fn family(&self) -> &'static str {
        "cuda"
    }

    fn prepare(&self, index: usize) -> Result<()> {
        device::check(index)?;
        // the start-only switches of the engine's configuration, fixed from here on
        let settings = ex_burn_core::config::device_settings()?;
        cache::configure(&settings.cache_dir);
        memory::configure()?;
        device::configure_burn(settings.autotune);
        Ok(())
    }

    fn device_count(&self) -> Result<usize> {
        device::device_count()
    }

    fn device_name(&self, index: usize) -> Option<Result<String>> {
        Some(device::device_name(index))
    }

    fn total_memory(&self, index: usize) -> Option<u64> {
        device::total_memory(index).ok()
    }

    fn pool_usage(&self, index: usize) -> Option<(u64, u64)> {
        memory::usage(index).ok()
    }

    fn after_work(&self, index: usize) {
        memory::give_back(index);
    }

    fn start_queued(&self, index: usize) {
        queue::flush(index);
    }

    fn check_failures(&self) -> Result<()> {
        queue::check_failures()
    }

    fn all_reduce(&self, sets: &[Vec<Operand>]) -> Result<Option<Vec<Vec<DispatchTensor>>>> {
        collective::all_reduce(sets)
    }

    fn matmul(
        &self,
        a: Operand,
        b: Operand,
        precision: Precision,
    ) -> Result<Option<DispatchTensor>> {
        gemm::batched_matmul(a, b, precision)
    }

    fn conv2d(&self, call: &ConvCall) -> Result<Option<DispatchTensor>> {
        conv::forward(call)
    }

    fn conv2d_kernel_gradient(&self, call: &KernelGradientCall) -> Result<Option<DispatchTensor>> {
        conv::kernel_gradient(call)
    }

    fn reshape(&self, t: Operand, shape: &[usize]) -> Result<Option<DispatchTensor>> {
        views::reshape(t, shape)
    }

    fn put_slice(
        &self,
        t: Operand,
        update: Operand,
        starts: &[Start],
    ) -> Result<Option<DispatchTensor>> {
        views::put_slice(t, update, starts)
    }

    fn slice(
        &self,
        t: Operand,
        starts: &[Start],
        lens: &[usize],
        steps: &[usize],
    ) -> Result<Option<DispatchTensor>> {
        views::slice(t, starts, lens, steps)
    }

    fn add_rows(
        &self,
        x: Operand,
        rows: (Operand, Operand),
        upd: Operand,
    ) -> Result<Option<DispatchTensor>> {
        views::add_rows(x, rows, upd)
    }

    fn leading_sum(&self, t: Operand, lead: usize) -> Result<Option<DispatchTensor>> {
        views::leading_sum(t, lead)
    }

    fn sum_around(
        &self,
        t: Operand,
        kept: std::ops::Range<usize>,
    ) -> Result<Option<DispatchTensor>> {
        views::sum_around(t, kept)
    }

    fn extremum_pair(&self, a: Operand, b: Operand, max: bool) -> Result<Option<DispatchTensor>> {
        elementwise::extremum_pair(a, b, max)
    }

    fn small_power(&self, x: Operand, e: Operand) -> Result<Option<DispatchTensor>> {
        elementwise::small_power(x, e)
    }

    fn rounded(&self, x: Operand, f: Rounded) -> Result<Option<DispatchTensor>> {
        elementwise::rounded_from_f64(x, f)
    }

    fn strides(&self, t: Operand) -> Option<Vec<usize>> {
        elementwise::operand_layout(t).map(|(_, strides)| strides)
    }

    fn fusion(&self) -> bool {
        elementwise::available()
    }

    fn map_run(&self, run: &MapRun) -> Result<Option<Vec<DispatchTensor>>> {
        fused::map_run(run)
    }

    fn row_limit(&self) -> usize {
        fused::ROW_LIMIT
    }

    fn row_region(&self, region: &RowRegion) -> Result<Option<Vec<DispatchTensor>>> {
        fused::row_region(region)
    }

    fn attention(&self, call: &AttentionCall) -> Result<Option<DispatchTensor>> {
        attention::run(call)
    }

    fn window_scatter(&self, call: &WindowScatterCall) -> Result<Option<DispatchTensor>> {
        window::run(call)
    }

    fn mark(&self, index: usize) -> Option<Mark> {
        Some(events::mark(index))
    }

    fn elapsed(&self, index: usize, pairs: Vec<(Mark, Mark)>) -> Vec<Option<f64>> {
        events::elapsed(index, pairs)
    }

    fn queued_work_time(&self) -> Vec<(&'static str, u64, Duration, Duration)> {
        queue::DEVICE_THREAD.take()
    }

    fn counts(&self) -> Counts {
        let (library_products, cross_stream_products) = gemm::products();
        Counts {
            library_products,
            cross_stream_products,
            fused_launches: elementwise::launches(),
            reused_buffers: elementwise::reused_buffers(),
            library_convolutions: conv::convolutions(),
        }
    }
}
