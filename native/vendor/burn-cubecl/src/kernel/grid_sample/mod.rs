mod base;
mod bilinear;

pub use base::*;
