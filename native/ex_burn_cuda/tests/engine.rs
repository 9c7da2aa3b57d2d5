//! The engine's tests (`native/ex_burn_core/tests/engine`) with ExBurn's CUDA kernels
//! installed: the test binary of GPU runs (`EX_BURN_TEST_DEVICE=cuda`, see `bench/gpu`). On
//! the CPU they run as in the engine's own binary.
#![cfg(feature = "cuda")]

#[path = "../../ex_burn_core/tests/engine/main.rs"]
mod engine;

/// What the engine's tests need of the CUDA kernels beyond the engine's seam (the engine's
/// own binary has a `device_kernels` that reports none).
pub mod device_kernels {
    /// Installs the CUDA kernels.
    pub fn install() {
        ex_burn_cuda::install();
    }

    /// Sends products of at least `work` multiply-adds to cuBLAS.
    pub fn set_min_work(work: usize) {
        ex_burn_cuda::gemm::set_min_work(work);
    }

    /// Whether products may go to cuBLAS.
    pub fn library_available() -> bool {
        ex_burn_cuda::gemm::available()
    }

    /// Whether 2-D convolutions may go to cuDNN.
    pub fn conv_library_available() -> bool {
        ex_burn_cuda::conv::available()
    }

    /// Where compiled kernels are cached on disk.
    pub fn cache_directory() -> Option<std::path::PathBuf> {
        let settings = ex_burn_core::config::device_settings().ok()?;
        ex_burn_cuda::cache::directory(&settings.cache_dir)
    }

    /// How CubeCL pools CUDA memory (the configuration's `cuda_memory`).
    pub fn memory_mode() -> Option<&'static str> {
        ex_burn_cuda::memory::configure().ok()
    }
}
