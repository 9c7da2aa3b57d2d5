//! The engine's run-time switches, read in one place and passed down: a typed [`Config`] set
//! from Elixir (`config :ex_burn, ...` when the library is first used, `ExBurn.configure!/1`
//! afterwards) and read by the engine and its device kernels through the accessors below,
//! never from the environment at the sites.
//!
//! Until Elixir sets it, the configuration is [`Config::from_env`]: the `EX_BURN_*`
//! environment variables, kept as a fallback so that scripts and Rust-only runs (engine tests,
//! benchmarks) can still choose with them. A variable with a value it does not accept makes
//! [`get`] and [`device_settings`] fail naming it, until [`set`] replaces the configuration.
//!
//! [`DeviceSettings`] (the CUDA memory pools, autotuning, the kernel cache) take effect when a
//! CUDA device starts: [`device_settings`] hands them to the device kernels, and from then on
//! [`set`] refuses to change them. The other switches apply to the next op or program run.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// What the time profile of program runs measures (`crate::profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// No profile.
    #[default]
    Off,
    /// The host's time of each step (`EX_BURN_PROFILE=1`).
    Host,
    /// Each step waits for its device: device time (`EX_BURN_PROFILE=sync`).
    Sync,
    /// CUDA events around each step: the GPU's own time (`EX_BURN_PROFILE=gpu`).
    Gpu,
}

/// How CubeCL pools CUDA memory (see `ex_burn_cuda::memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaMemory {
    /// One buffer per page; pages left free after each piece of work go back to the driver's
    /// stream-ordered pool, which serves allocations of any size.
    #[default]
    Driver,
    /// One buffer per page, pages never freed.
    Exclusive,
    /// CubeCL's default: buffers cut out of large pages.
    Pooled,
}

/// Which CUDA kernels Burn autotunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Autotune {
    /// Small convolutions and short reductions run a fixed kernel (no candidates to compile
    /// and time on a first call).
    #[default]
    SkipSmall,
    /// Every convolution and reduction, as Burn does.
    All,
}

/// Where compiled CUDA kernels and autotune results are kept across runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheDir {
    /// The user's cache directory (`~/.cache/ex_burn/cubecl` on Linux).
    #[default]
    Default,
    /// CubeCL's own defaults (no compiled-kernel cache).
    Off,
    /// This directory.
    Dir(String),
}

/// The switches a CUDA device is started with, fixed from then on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSettings {
    /// How CubeCL pools CUDA memory.
    pub cuda_memory: CudaMemory,
    /// Which kernels Burn autotunes.
    pub autotune: Autotune,
    /// Where compiled kernels are cached.
    pub cache_dir: CacheDir,
}

/// The engine's run-time switches. Field names are those of `ExBurn.configure!/1`'s options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The time profile of program runs (default: off).
    pub profile: Profile,
    /// Attentions in compiled programs run as one step where a kernel exists (default: on).
    pub attention: bool,
    /// Matrix products on CUDA go to cuBLAS when it loads (default: on).
    pub cublas: bool,
    /// 2-D convolutions on CUDA go to cuDNN when it loads (default: on).
    pub cudnn: bool,
    /// Fused element-wise kernels and row regions on CUDA (default: on).
    pub cuda_fusion: bool,
    /// How CubeCL pools CUDA memory (before the first CUDA device starts).
    pub cuda_memory: CudaMemory,
    /// Which kernels Burn autotunes (before the first CUDA device starts).
    pub autotune: Autotune,
    /// Where compiled kernels are cached (before the first CUDA device starts).
    pub cache_dir: CacheDir,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            profile: Profile::Off,
            attention: true,
            cublas: true,
            cudnn: true,
            cuda_fusion: true,
            cuda_memory: CudaMemory::Driver,
            autotune: Autotune::SkipSmall,
            cache_dir: CacheDir::Default,
        }
    }
}

impl Config {
    /// The configuration the `EX_BURN_*` environment variables give (unset ones: the
    /// default): `EX_BURN_PROFILE` (`1`, `sync`, `gpu`), `EX_BURN_ATTENTION`, `EX_BURN_CUBLAS`,
    /// `EX_BURN_CUDNN` and `EX_BURN_CUDA_FUSION` (`0` turns each off), `EX_BURN_CUDA_MEMORY` (`driver`,
    /// `exclusive`, `pooled`), `EX_BURN_AUTOTUNE` (`all`), `EX_BURN_CACHE_DIR` (a directory,
    /// or `off`). The only place the engine reads them.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Config::from_env`] with the variables read through `var`.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        let bad = |name: &str, value: &str, accepted: &str| {
            Error::Argument(format!("{name}={value:?}: expected {accepted}"))
        };
        let switch = |name: &str| -> Result<Option<bool>> {
            match var(name).as_deref() {
                None | Some("") => Ok(None),
                Some("0") | Some("false") => Ok(Some(false)),
                Some("1") | Some("true") => Ok(Some(true)),
                Some(other) => Err(bad(name, other, "0 or 1")),
            }
        };
        if let Some(v) = var("EX_BURN_PROFILE").filter(|v| !v.is_empty()) {
            c.profile = match v.as_str() {
                "0" | "off" => Profile::Off,
                "1" | "host" => Profile::Host,
                "sync" => Profile::Sync,
                "gpu" => Profile::Gpu,
                other => return Err(bad("EX_BURN_PROFILE", other, "1, sync or gpu")),
            };
        }
        c.attention = switch("EX_BURN_ATTENTION")?.unwrap_or(c.attention);
        c.cublas = switch("EX_BURN_CUBLAS")?.unwrap_or(c.cublas);
        c.cudnn = switch("EX_BURN_CUDNN")?.unwrap_or(c.cudnn);
        c.cuda_fusion = switch("EX_BURN_CUDA_FUSION")?.unwrap_or(c.cuda_fusion);
        if let Some(v) = var("EX_BURN_CUDA_MEMORY").filter(|v| !v.is_empty()) {
            c.cuda_memory = match v.as_str() {
                "driver" => CudaMemory::Driver,
                "exclusive" => CudaMemory::Exclusive,
                "pooled" => CudaMemory::Pooled,
                other => {
                    return Err(bad(
                        "EX_BURN_CUDA_MEMORY",
                        other,
                        "driver, exclusive or pooled",
                    ))
                }
            };
        }
        if let Some(v) = var("EX_BURN_AUTOTUNE").filter(|v| !v.is_empty()) {
            c.autotune = match v.as_str() {
                "all" => Autotune::All,
                "skip_small" | "default" => Autotune::SkipSmall,
                other => return Err(bad("EX_BURN_AUTOTUNE", other, "all")),
            };
        }
        if let Some(v) = var("EX_BURN_CACHE_DIR").filter(|v| !v.is_empty()) {
            c.cache_dir = match v.as_str() {
                "off" | "0" | "false" => CacheDir::Off,
                dir => CacheDir::Dir(dir.to_string()),
            };
        }
        Ok(c)
    }

    fn device_settings(&self) -> DeviceSettings {
        DeviceSettings {
            cuda_memory: self.cuda_memory,
            autotune: self.autotune,
            cache_dir: self.cache_dir.clone(),
        }
    }
}

/// The configuration and where it came from.
struct State {
    config: Config,
    /// Why the environment's configuration was refused (until [`set`] replaces it).
    env_error: Option<String>,
    /// Whether a CUDA device took [`DeviceSettings`] ([`device_settings`]).
    started: bool,
}

/// The switches read on every op or step, mirrored from the configuration.
struct Flags {
    profile: AtomicU8,
    attention: AtomicBool,
    cublas: AtomicBool,
    cudnn: AtomicBool,
    cuda_fusion: AtomicBool,
}

struct Shared {
    state: Mutex<State>,
    flags: Flags,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (config, env_error) = match Config::from_env() {
            Ok(c) => (c, None),
            Err(e) => (Config::default(), Some(e.to_string())),
        };
        let flags = Flags {
            profile: AtomicU8::new(0),
            attention: AtomicBool::new(true),
            cublas: AtomicBool::new(true),
            cudnn: AtomicBool::new(true),
            cuda_fusion: AtomicBool::new(true),
        };
        publish(&flags, &config);
        Shared {
            state: Mutex::new(State {
                config,
                env_error,
                started: false,
            }),
            flags,
        }
    })
}

fn publish(flags: &Flags, c: &Config) {
    flags.profile.store(c.profile as u8, Ordering::Relaxed);
    flags.attention.store(c.attention, Ordering::Relaxed);
    flags.cublas.store(c.cublas, Ordering::Relaxed);
    flags.cudnn.store(c.cudnn, Ordering::Relaxed);
    flags.cuda_fusion.store(c.cuda_fusion, Ordering::Relaxed);
}

fn state() -> MutexGuard<'static, State> {
    // the state is replaced whole under the lock: a panic elsewhere cannot leave it half set
    shared()
        .state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The configuration in force; an error when it would be the environment's and a variable
/// holds a value it does not accept.
pub fn get() -> Result<Config> {
    let s = state();
    match &s.env_error {
        Some(e) => Err(Error::Argument(e.clone())),
        None => Ok(s.config.clone()),
    }
}

/// Replaces the configuration. Once a CUDA device has started, its [`DeviceSettings`] may not
/// change: a configuration that changes them is refused (nothing is changed).
pub fn set(config: Config) -> Result<()> {
    let mut s = state();
    if s.started {
        let (now, new) = (s.config.device_settings(), config.device_settings());
        let mut changed = Vec::new();
        if now.cuda_memory != new.cuda_memory {
            changed.push("cuda_memory");
        }
        if now.autotune != new.autotune {
            changed.push("autotune");
        }
        if now.cache_dir != new.cache_dir {
            changed.push("cache_dir");
        }
        if !changed.is_empty() {
            return Err(Error::Argument(format!(
                "{} cannot change once a CUDA device has started (it is {now:?}); set it in \
                 the application environment (config :ex_burn, ...) or with \
                 ExBurn.configure!/1 before the first CUDA call",
                changed.join(", ")
            )));
        }
    }
    publish(&shared().flags, &config);
    s.config = config;
    s.env_error = None;
    Ok(())
}

/// The settings a CUDA device starts with; from this call on [`set`] keeps them. An error
/// when the environment's configuration is refused.
pub fn device_settings() -> Result<DeviceSettings> {
    let mut s = state();
    if let Some(e) = &s.env_error {
        return Err(Error::Argument(e.clone()));
    }
    s.started = true;
    Ok(s.config.device_settings())
}

/// The time profile of program runs.
pub fn profile() -> Profile {
    match shared().flags.profile.load(Ordering::Relaxed) {
        1 => Profile::Host,
        2 => Profile::Sync,
        3 => Profile::Gpu,
        _ => Profile::Off,
    }
}

/// Whether attentions in compiled programs may run as one step.
pub fn attention() -> bool {
    shared().flags.attention.load(Ordering::Relaxed)
}

/// Whether matrix products on CUDA may go to cuBLAS.
pub fn cublas() -> bool {
    shared().flags.cublas.load(Ordering::Relaxed)
}

/// Whether 2-D convolutions on CUDA may go to cuDNN.
pub fn cudnn() -> bool {
    shared().flags.cudnn.load(Ordering::Relaxed)
}

/// Whether fused element-wise kernels and row regions may run on CUDA.
pub fn cuda_fusion() -> bool {
    shared().flags.cuda_fusion.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Config> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_environment_gives_the_fallback() {
        assert_eq!(env(&[]).unwrap(), Config::default());
        let c = env(&[
            ("EX_BURN_PROFILE", "sync"),
            ("EX_BURN_CUBLAS", "0"),
            ("EX_BURN_CUDNN", "0"),
            ("EX_BURN_CUDA_FUSION", "0"),
            ("EX_BURN_ATTENTION", "0"),
            ("EX_BURN_CUDA_MEMORY", "pooled"),
            ("EX_BURN_AUTOTUNE", "all"),
            ("EX_BURN_CACHE_DIR", "/tmp/k"),
        ])
        .unwrap();
        assert_eq!(
            c,
            Config {
                profile: Profile::Sync,
                attention: false,
                cublas: false,
                cudnn: false,
                cuda_fusion: false,
                cuda_memory: CudaMemory::Pooled,
                autotune: Autotune::All,
                cache_dir: CacheDir::Dir("/tmp/k".into()),
            }
        );
        assert_eq!(
            env(&[("EX_BURN_CACHE_DIR", "off")]).unwrap().cache_dir,
            CacheDir::Off
        );
        assert_eq!(
            env(&[("EX_BURN_PROFILE", "1")]).unwrap().profile,
            Profile::Host
        );
    }

    #[test]
    fn a_bad_variable_is_named() {
        let e = env(&[("EX_BURN_CUDA_MEMORY", "huge")]).unwrap_err();
        assert!(
            e.to_string().contains("EX_BURN_CUDA_MEMORY=\"huge\""),
            "{e}"
        );
        let e = env(&[("EX_BURN_CUBLAS", "no")]).unwrap_err();
        assert!(e.to_string().contains("EX_BURN_CUBLAS"), "{e}");
    }

    // The process-wide configuration: one test, so no other test sees it half changed.
    #[test]
    fn set_publishes_and_device_settings_are_fixed_once_taken() {
        let before = get().unwrap_or_default();
        // switches with no effect on the CPU, which the other tests use meanwhile
        let mut c = before.clone();
        c.cuda_fusion = !before.cuda_fusion;
        c.cublas = !before.cublas;
        c.cudnn = !before.cudnn;
        set(c.clone()).unwrap();
        assert_eq!(
            (cuda_fusion(), cublas(), cudnn()),
            (c.cuda_fusion, c.cublas, c.cudnn)
        );
        assert_eq!(get().unwrap(), c);

        let taken = device_settings().unwrap();
        let mut changed = c.clone();
        changed.cuda_memory = match taken.cuda_memory {
            CudaMemory::Pooled => CudaMemory::Driver,
            _ => CudaMemory::Pooled,
        };
        let e = set(changed).unwrap_err();
        assert!(e.to_string().contains("cuda_memory cannot change"), "{e}");
        assert_eq!(get().unwrap(), c);
        // the other switches still change
        set(before.clone()).unwrap();
        assert_eq!(get().unwrap(), before);
        state().started = false;
    }
}
