//! Files: safetensors bytes of named tensors, sealed with an integrity code over the whole
//! file, and written atomically.

pub mod atomic;
pub mod integrity;
pub mod safetensors;

pub use atomic::{read_regular, write_atomic};
pub use safetensors::{tensors_from_bytes, tensors_to_bytes, NamedTensors};
