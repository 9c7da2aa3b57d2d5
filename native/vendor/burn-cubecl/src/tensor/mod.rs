mod base;
mod quantization;

pub use base::*;
pub use quantization::*;
