//! How CubeCL pools CUDA memory.
//!
//! CubeCL's default pools cut buffers out of large pages and never give a page back. ExBurn
//! configures one buffer per allocation instead, from pools of size buckets, buffers unused
//! for a while freed: on an H200, in one run, a GPT-2 layer's forward and backward passes
//! peaked at 2,542 MiB for the process against 3,728 MiB with CubeCL's default, and ran faster
//! (forward 2.34 against 3.01 ms, forward + backward 8.56 against 10.38 ms;
//! bench/results/gpt2_layer_cuda.md). `EX_BURN_CUDA_MEMORY` chooses, before the first CUDA
//! device is used:
//!
//! * `exclusive` (default) - CubeCL's `MemoryConfiguration::ExclusivePages`;
//! * `pooled` - CubeCL's default, `MemoryConfiguration::SubSlices`.

use crate::{Error, Result};
use cubecl_runtime::memory_management::MemoryConfiguration;
use std::sync::OnceLock;

/// The default when `EX_BURN_CUDA_MEMORY` is unset.
pub const DEFAULT: &str = "exclusive";

/// The configuration `value` names (`""`: the default).
pub fn parse(value: &str) -> std::result::Result<(&'static str, MemoryConfiguration), String> {
    match if value.is_empty() { DEFAULT } else { value } {
        "exclusive" => Ok(("exclusive", MemoryConfiguration::ExclusivePages)),
        "pooled" => Ok(("pooled", MemoryConfiguration::SubSlices)),
        other => Err(format!(
            "EX_BURN_CUDA_MEMORY={other:?}: expected \"exclusive\" or \"pooled\""
        )),
    }
}

/// Sets CubeCL's memory configuration from `EX_BURN_CUDA_MEMORY` once, before the first CUDA
/// server is created; returns the name of the configuration in force (an unknown value is an
/// [`Error::Argument`] at every CUDA device use).
pub fn configure() -> Result<&'static str> {
    static CHOSEN: OnceLock<std::result::Result<&'static str, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let (name, config) = parse(&std::env::var("EX_BURN_CUDA_MEMORY").unwrap_or_default())?;
            cubecl_cuda::set_memory_configuration(config);
            Ok(name)
        })
        .clone()
        .map_err(Error::Argument)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_parse_and_unknown_ones_are_refused() {
        assert_eq!(super::parse("").unwrap().0, super::DEFAULT);
        assert_eq!(super::parse("exclusive").unwrap().0, "exclusive");
        assert_eq!(super::parse("pooled").unwrap().0, "pooled");
        assert!(super::parse("huge").unwrap_err().contains("huge"));
    }
}
