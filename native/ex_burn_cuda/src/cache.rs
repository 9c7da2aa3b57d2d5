//! Kernels compiled for CUDA, and autotune results, cached on disk across runs.
//!
//! CubeCL compiles every kernel with NVRTC the first time a process launches it, and autotunes
//! some (matmul, reductions) by timing candidates: a first call of a large compiled program
//! takes seconds to tens of seconds of compilation. CubeCL can keep the compiled PTX and the
//! autotune results on disk, but its PTX cache is off unless a `cubecl.toml` turns it on.
//! Before the first CUDA device is used ExBurn sets CubeCL's configuration: both caches in one
//! directory, the engine's `cache_dir` ([`ex_burn_core::config::CacheDir`]; default: the
//! user's cache directory, `~/.cache/ex_burn/cubecl` on Linux). A `cubecl.toml` or
//! `burn.toml` in the working directory or its parents is used as it is instead, and
//! `cache_dir: :off` leaves CubeCL's defaults (no PTX cache). CubeCL's own environment
//! variables (`CUBECL_AUTOTUNE_LEVEL`, `CUBECL_DEBUG_LOG`) apply either way.

use cubecl_runtime::config::cache::CacheConfig;
use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};
use ex_burn_core::config::CacheDir;
use std::path::PathBuf;
use std::sync::Once;

/// The cache directory `setting` names (`None`: CubeCL's defaults).
pub fn directory(setting: &CacheDir) -> Option<PathBuf> {
    match setting {
        CacheDir::Off => None,
        CacheDir::Dir(dir) => Some(PathBuf::from(dir)),
        CacheDir::Default => home_cache().map(|d| d.join("ex_burn").join("cubecl")),
    }
}

fn home_cache() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    let home = PathBuf::from(home);
    Some(if cfg!(target_os = "macos") {
        home.join("Library").join("Caches")
    } else {
        home.join(".cache")
    })
}

/// Whether a CubeCL or Burn configuration file applies to this process (it then wins).
fn config_file_present() -> bool {
    let Ok(mut dir) = std::env::current_dir() else {
        return false;
    };
    loop {
        let names = ["cubecl.toml", "CubeCL.toml", "burn.toml", "Burn.toml"];
        if names.iter().any(|n| dir.join(n).is_file()) {
            return true;
        }
        if !dir.pop() {
            return false;
        }
    }
}

/// Sets CubeCL's configuration once, before its first use, with the cache directory
/// `setting` names (later calls do nothing; a configuration CubeCL already loaded is left
/// alone).
pub fn configure(setting: &CacheDir) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(dir) = directory(setting).filter(|_| !config_file_present()) else {
            return;
        };
        if std::fs::create_dir_all(&dir).is_err() {
            return;
        }
        let mut config = CubeClRuntimeConfig::default().override_from_env();
        config.compilation.cache = Some(CacheConfig::File(dir.clone()));
        config.autotune.cache = CacheConfig::File(dir);
        let mut state = CubeClRuntimeConfig::storage().lock();
        if state.is_none() {
            *state = Some(std::sync::Arc::new(config));
        }
    });
}
