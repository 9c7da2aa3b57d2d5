//! Devices as Elixir names them (`:cpu`, `{:cuda, i}`, `{:vulkan, i}`, `{:metal, i}`), their
//! availability in this build, and the mapping onto Burn's `DispatchDevice`.

use crate::kernels::DeviceKernels;
use crate::{Error, Result};
use burn::DispatchDevice;
use serde::Deserialize;

/// A compute device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The host CPU (Burn's pure-Rust `flex` backend). Present in every build.
    Cpu,
    /// NVIDIA GPU `i` through CUDA.
    Cuda(usize),
    /// GPU `i` through Vulkan (0 is the best adapter wgpu finds).
    Vulkan(usize),
    /// Apple GPU `i` through Metal (0 is the default adapter).
    Metal(usize),
}

/// Backends compiled into this build, by variant name.
pub fn compiled_backends() -> Vec<&'static str> {
    let mut v = vec!["cpu"];
    if cfg!(feature = "cuda") {
        v.push("cuda");
    }
    if cfg!(feature = "vulkan") {
        v.push("vulkan");
    }
    if cfg!(feature = "metal") {
        v.push("metal");
    }
    if cfg!(feature = "wgpu") {
        v.push("wgpu");
    }
    v
}

impl Device {
    /// The variant family name (`"cpu"`, `"cuda"`, `"vulkan"`, `"metal"`).
    pub fn family(&self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Vulkan(_) => "vulkan",
            Device::Metal(_) => "metal",
        }
    }

    /// Whether the backend of this device is compiled into the loaded library.
    pub fn is_compiled(&self) -> bool {
        compiled_backends().contains(&self.family())
    }

    /// Refuses `dtype` where this device cannot compute it reliably: f64 on the wgpu devices
    /// (Vulkan, Metal), and f16 or bf16 there when the adapter reports no general support for
    /// it. Metal has no f64; on a conformant Vulkan implementation (Mesa's lavapipe) f64 sums
    /// gave zeros and f64 training NaN gradients, silently, and a cast to bf16 failed inside
    /// CubeCL's device thread (an invalid pipeline), which left the device unusable for the
    /// rest of the process.
    pub fn check_dtype(&self, dtype: crate::DType) -> Result<()> {
        use crate::DType::{BF16, F16, F64};
        if !matches!(self, Device::Vulkan(_) | Device::Metal(_)) {
            return Ok(());
        }
        if dtype == F64 {
            return Err(Error::UnsupportedDtype(format!(
                "f64 on {self}: the wgpu backends (Vulkan, Metal) compute no reliable f64; \
                 use f32 there, or f64 on the CPU or CUDA"
            )));
        }
        if matches!(dtype, F16 | BF16) {
            use burn::tensor::backend::Backend;
            if !burn::Dispatch::supports_dtype(&self.to_dispatch()?, dtype.burn()) {
                return Err(Error::UnsupportedDtype(format!(
                    "{dtype} on {self}: this GPU's driver reports no general {dtype} support; \
                     use f32 there"
                )));
            }
        }
        Ok(())
    }

    /// Whether this device computes f64 reliably: the host and CUDA (not the wgpu devices, see
    /// [`Device::check_dtype`]).
    pub fn computes_f64(&self) -> bool {
        matches!(self, Device::Cpu | Device::Cuda(_))
    }

    /// Whether this device runs on the host (compute there belongs on dirty CPU schedulers).
    pub fn is_host(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// Maps to Burn's dispatch device, refusing devices this build lacks.
    pub fn to_dispatch(&self) -> Result<DispatchDevice> {
        if !self.is_compiled() {
            return Err(Error::DeviceUnavailable(format!(
                "device {self} is not available: this ExBurn library was built without the {fam} backend \
                 (compiled: {have}); install the {fam} variant (EX_BURN_VARIANT={fam}, then `mix deps.compile ex_burn --force`)",
                fam = self.family(),
                have = compiled_backends().join(", ")
            )));
        }
        match *self {
            Device::Cpu => Ok(DispatchDevice::Flex(burn::backend::flex::FlexDevice)),
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => {
                // the CUDA kernels check the driver and configure CubeCL before Burn's first use
                if let Some(k) = crate::kernels::serving("cuda") {
                    k.prepare(i)?;
                }
                Ok(DispatchDevice::Cuda(burn::backend::cuda::CudaDevice::new(
                    i,
                )))
            }
            #[cfg(feature = "vulkan")]
            Device::Vulkan(i) => Ok(DispatchDevice::Vulkan(wgpu_device(i))),
            #[cfg(feature = "metal")]
            Device::Metal(i) => Ok(DispatchDevice::Metal(wgpu_device(i))),
            #[allow(unreachable_patterns)]
            _ => Err(Error::DeviceUnavailable(format!(
                "device {self} is not available"
            ))),
        }
    }

    /// Maps a Burn dispatch device back to an ExBurn device.
    pub fn from_dispatch(device: &DispatchDevice) -> Device {
        match device {
            #[cfg(feature = "cuda")]
            DispatchDevice::Cuda(d) => Device::Cuda(d.index),
            #[cfg(feature = "vulkan")]
            DispatchDevice::Vulkan(d) => Device::Vulkan(wgpu_index(d)),
            #[cfg(feature = "metal")]
            DispatchDevice::Metal(d) => Device::Metal(wgpu_index(d)),
            DispatchDevice::Autodiff(inner) => Device::from_dispatch(inner),
            _ => Device::Cpu,
        }
    }

    /// Number of devices of this family visible at run time (0 when the backend is missing
    /// or its driver cannot be loaded).
    pub fn count(family: &str) -> usize {
        match family {
            "cpu" => 1,
            "cuda" => crate::kernels::serving("cuda")
                .and_then(|k| k.device_count().ok())
                .unwrap_or(0),
            #[cfg(any(feature = "vulkan", feature = "metal"))]
            "vulkan" | "metal" if compiled_backends().contains(&family) => 1,
            _ => 0,
        }
    }

    /// A human-readable name of the device.
    pub fn name(&self) -> String {
        match self {
            Device::Cpu => format!("CPU ({} threads, flex backend)", cpu_threads()),
            other => match other.kernels().and_then(|(k, i)| k.device_name(i)) {
                Some(name) => name.unwrap_or_else(|e| e.to_string()),
                None => format!("{other}"),
            },
        }
    }

    /// Waits until all queued work on the device is done; reports queued work of the device
    /// kernels that failed (see [`crate::kernels`]).
    pub fn sync(&self) -> Result<()> {
        use burn::tensor::backend::Backend;
        let d = self.to_dispatch()?;
        burn::Dispatch::sync(&d).map_err(|e| Error::Execution(format!("{e:?}")))?;
        crate::kernels::check_failures()
    }

    /// The installed device kernels serving this device, and its index among the devices of
    /// its family (never for the host).
    pub(crate) fn kernels(&self) -> Option<(&'static dyn DeviceKernels, usize)> {
        let index = match *self {
            Device::Cpu => return None,
            Device::Cuda(i) | Device::Vulkan(i) | Device::Metal(i) => i,
        };
        crate::kernels::serving(self.family()).map(|k| (k, index))
    }
}

fn cpu_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(any(feature = "vulkan", feature = "metal"))]
fn wgpu_device(i: usize) -> burn::backend::wgpu::WgpuDevice {
    if i == 0 {
        burn::backend::wgpu::WgpuDevice::DefaultDevice
    } else {
        burn::backend::wgpu::WgpuDevice::DiscreteGpu(i)
    }
}

#[cfg(any(feature = "vulkan", feature = "metal"))]
fn wgpu_index(d: &burn::backend::wgpu::WgpuDevice) -> usize {
    match d {
        burn::backend::wgpu::WgpuDevice::DiscreteGpu(i)
        | burn::backend::wgpu::WgpuDevice::IntegratedGpu(i)
        | burn::backend::wgpu::WgpuDevice::VirtualGpu(i) => *i,
        _ => 0,
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, ":cpu"),
            Device::Cuda(i) => write!(f, "{{:cuda, {i}}}"),
            Device::Vulkan(i) => write!(f, "{{:vulkan, {i}}}"),
            Device::Metal(i) => write!(f, "{{:metal, {i}}}"),
        }
    }
}
