mod base;
mod tune;

/// Contains utilities for matmul operation
pub mod utils;

pub use base::*;
#[cfg(feature = "autotune")]
pub use tune::*;
pub use utils::*;
