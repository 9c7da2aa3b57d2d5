//! # ex_burn_core
//!
//! The engine of ExBurn: a rank-free tensor on Burn 0.21's `Dispatch` backend, THE op table
//! shared by the Nx backend, the Defn compiler and the direct API, programs, and (in `train`)
//! native training. It knows nothing about Erlang; `ex_burn_nif` wraps it.
//!
//! ## Cargo features
//!
//! | feature  | backend                                   | notes                                   |
//! |----------|-------------------------------------------|-----------------------------------------|
//! | `flex`   | Burn's pure-Rust CPU backend (default)    | present in every build                  |
//! | `cpu`    | alias of `flex`                           | never Burn's LLVM `cpu` backend         |
//! | `cuda`   | NVIDIA CUDA (NVRTC at run time) + `flex`  | pin the API with `CUDARC_CUDA_VERSION`  |
//! | `fusion` | Burn kernel fusion for GPU backends        | opt-in; off in released variants (f64)  |
//! | `vulkan` | Vulkan through wgpu + `flex`              | exclusive with `metal`/`wgpu`           |
//! | `metal`  | Metal through wgpu + `flex`               | exclusive with `vulkan`/`wgpu`          |
//! | `wgpu`   | WebGPU through wgpu + `flex`              | exclusive with `vulkan`/`metal`         |
#![warn(missing_docs)]

pub mod cancel;
pub mod collective;
pub mod config;
pub mod device;
pub mod dtype;
pub mod error;
pub mod exit;
pub mod files;
pub mod guard;
pub mod kernels;
pub mod memory;
pub mod op;
pub mod profile;
pub mod program;
pub mod quick;
mod rng;
pub mod scalar;
pub mod size;
pub mod tensor;
pub mod threads;
pub mod train;
pub mod vocabulary;
mod wire;

pub use device::Device;
pub use dtype::DType;
pub use error::{Error, Result};
pub use guard::guard;
pub use op::{eval, Op};
pub use program::{Program, Step};
pub use scalar::Scalar;
pub use tensor::Tensor;
