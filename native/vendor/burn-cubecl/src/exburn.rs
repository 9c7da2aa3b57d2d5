//! ExBurn's additions to the published crate (see `VENDORED.md`): a hook through which a
//! vendor GEMM library computes Burn's matrix products, and floors below which convolutions
//! and reductions run Burn's untuned kernels instead of autotuning (each autotune candidate is
//! a kernel compiled at run time: on a cold cache, most of a small model's first epoch).

use burn_backend::DType;
use core::any::Any;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A matrix product computed outside Burn's kernels, tried before them: it receives the
/// operands (`&CubeTensor<R>`) and the output type, and returns the product
/// (`Box<CubeTensor<R>>`, contiguous, of the broadcast shape) or `None` to leave the product
/// to Burn's kernels.
pub type ForeignMatmul = fn(&dyn Any, &dyn Any, DType) -> Option<Box<dyn Any>>;

static FOREIGN_MATMUL: OnceLock<ForeignMatmul> = OnceLock::new();
static CONV_FLOOR: AtomicUsize = AtomicUsize::new(0);
static REDUCE_FLOOR: AtomicUsize = AtomicUsize::new(0);

/// Installs the [`ForeignMatmul`] that `kernel::matmul::matmul` tries first (once per process;
/// later calls are ignored and return `false`).
pub fn set_foreign_matmul(f: ForeignMatmul) -> bool {
    FOREIGN_MATMUL.set(f).is_ok()
}

/// The installed [`ForeignMatmul`], if any.
pub(crate) fn foreign_matmul() -> Option<ForeignMatmul> {
    FOREIGN_MATMUL.get().copied()
}

/// Convolutions of fewer than `conv` multiply-adds run Burn's direct kernel (their gradients
/// Burn's fallbacks built on it) instead of autotuning implicit-GEMM kernels; reductions over
/// an axis of at most `reduce` elements run Burn's one-thread-per-output kernel, and those
/// over axes of at most `64 * reduce` elements one plane (warp) per output, instead of
/// autotuning. 0 and 0 (the default) autotune everything, as the published crate
/// does.
pub fn set_autotune_floors(conv: usize, reduce: usize) {
    CONV_FLOOR.store(conv, Ordering::Relaxed);
    REDUCE_FLOOR.store(reduce, Ordering::Relaxed);
}

/// Whether a convolution of `work` multiply-adds skips autotuning.
pub(crate) fn conv_untuned(work: usize) -> bool {
    work < CONV_FLOOR.load(Ordering::Relaxed)
}

/// How a reduction over an axis of `length` elements skips autotuning: `Some(false)` one
/// thread per output (an axis of at most the reduce floor), `Some(true)` one plane per output
/// (an axis of at most 64 times the floor: each of a plane's 32 lanes sums at most twice the
/// floor), `None` autotuned.
pub(crate) fn reduce_untuned(length: usize) -> Option<bool> {
    let floor = REDUCE_FLOOR.load(Ordering::Relaxed);
    if length <= floor {
        Some(false)
    } else if length <= floor.saturating_mul(64) {
        Some(true)
    } else {
        None
    }
}
