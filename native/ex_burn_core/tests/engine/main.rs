//! The engine's op tests, one module per op family, in one test binary (so a GPU build
//! carries a single executable). `EX_BURN_TEST_DEVICE=cuda` runs them on `{:cuda, 0}`: the
//! CUDA crate's copy of this binary (`native/ex_burn_cuda/tests/engine.rs`, which includes
//! these files as its module `engine`) runs them with ExBurn's CUDA kernels installed.
//! Modules reach each other through `super::`; what they need of the device kernels beyond
//! the engine's seam, through `crate::device_kernels` (below here, the CUDA kernels' own in
//! the CUDA crate's copy).

mod common;

/// What the tests need of the device kernels beyond the engine's seam: none are installed
/// in this binary (the CUDA crate's copy of these tests defines its own `device_kernels`).
#[allow(dead_code)]
pub mod device_kernels {
    /// Installs the device kernels.
    pub fn install() {}

    /// Sends products of at least `work` multiply-adds to the GPU vendor's library.
    pub fn set_min_work(_work: usize) {}

    /// Whether products may go to the GPU vendor's library.
    pub fn library_available() -> bool {
        false
    }

    /// Whether 2-D convolutions may go to the GPU vendor's library.
    pub fn conv_library_available() -> bool {
        false
    }

    /// Where compiled kernels are cached on disk.
    pub fn cache_directory() -> Option<std::path::PathBuf> {
        None
    }

    /// How the GPU's memory is pooled (`driver`, `exclusive`, `pooled`).
    pub fn memory_mode() -> Option<&'static str> {
        None
    }
}

mod adam;
mod agreement;
mod attention;
mod binary;
mod control;
mod conv;
mod creation;
mod dot;
mod fold;
mod fusion;
mod generated;
mod hostile;
mod index;
mod linalg;
mod literal;
mod memory;
mod nn;
mod parallel;
mod program;
mod reduce;
mod rows;
mod scatter;
mod scheduled;
mod shape;
mod small_loops;
mod sort;
mod tensor;
mod train;
mod train_math;
mod unary;
mod view_runs;
mod widening;
mod window;
