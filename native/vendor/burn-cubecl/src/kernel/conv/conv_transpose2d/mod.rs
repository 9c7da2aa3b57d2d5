mod base;
mod col2im;

mod transpose_direct;

#[cfg(feature = "autotune")]
mod tune;

pub use base::*;
pub use col2im::*;

pub use transpose_direct::*;

#[cfg(feature = "autotune")]
pub use tune::*;
