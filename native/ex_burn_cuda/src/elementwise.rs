//! Element-wise kernels of ExBurn's own on NVIDIA GPUs: CUDA C source compiled at run time
//! with NVRTC (as Burn's kernels are), run on the buffers of Burn's CUDA tensors.
//!
//! A fused run of a program ([`crate::fused`]) becomes one kernel that reads each operand
//! once and writes each live result once, where Burn launches one kernel per op and makes
//! a pass over memory for each. Kernels are compiled once per source and device and kept
//! for the process; they are compiled without contracting products and sums into fused
//! multiply-adds (`--fmad=false`), so each op rounds as Burn's kernel for it does.

use crate::queue::{self, driver, Nan, Output};
use burn::DispatchTensor;
use burn_cubecl::tensor::CubeTensor;
use burn_dispatch::{BackendTensor, DispatchTensorKind};
use cubecl_cuda::CudaRuntime;
use cudarc::driver::{result as drv, sys as drv_sys};
use ex_burn_core::kernels::{Operand, Rounded};
use ex_burn_core::{guard, DType, Error, Result};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// The name of the kernel function every source defines.
pub const ENTRY: &str = "exburn_fused";

/// How a kernel's source is compiled and entered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Build {
    /// The virtual architecture (`None`: NVRTC's default), such as `compute_80` for a kernel
    /// using that architecture's instructions (its caller checks the device has them).
    pub arch: Option<&'static str>,
    /// The kernel function's name (profilers show it).
    pub entry: &'static str,
}

/// Element-wise kernels: NVRTC's default architecture, [`ENTRY`].
const ELEMENTWISE: Build = Build {
    arch: None,
    entry: ENTRY,
};

/// Threads per block.
const BLOCK: u32 = 256;

/// Blocks at most (the kernels loop over the elements with a grid stride).
const MAX_BLOCKS: usize = 65_535;

/// A compiled kernel in the primary context of one device.
struct Kernel {
    func: drv_sys::CUfunction,
    context: drv_sys::CUcontext,
}

// SAFETY: a function and context handle of the driver, usable from any thread once the
// context is made current there (which every use does first).
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

/// Kernels by device index, then source (`None`: it did not compile or load; not retried).
/// Looked up by `&str` on every run, without copying the source.
type Kernels = HashMap<usize, HashMap<String, Option<Arc<Kernel>>>>;

static KERNELS: OnceLock<Mutex<Kernels>> = OnceLock::new();

thread_local! {
    /// Kernels this thread queued (see [`launches`]).
    static LAUNCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Results this thread's kernels wrote over an operand's buffer (see [`reused_buffers`]).
    static REUSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many results of kernels queued by this thread were written over an operand's buffer
/// instead of a new one (see [`reusable`]): lets tests tell that path apart.
pub fn reused_buffers() -> u64 {
    REUSED.with(|c| c.get())
}

/// How many fused kernels this thread queued: lets tests tell a fused run from one that fell
/// back to Burn's kernels.
pub fn launches() -> u64 {
    LAUNCHES.with(|c| c.get())
}

/// Whether fused kernels may be used: the engine's configuration allows them (`cuda_fusion`)
/// and no queued work has failed.
pub fn available() -> bool {
    ex_burn_core::config::cuda_fusion() && queue::enabled()
}

/// Compiles and loads `source` for device `index` (once), as `build` says.
fn kernel(index: usize, source: &str, build: Build) -> Result<Option<Arc<Kernel>>> {
    let table = KERNELS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut table = table
        .lock()
        .map_err(|_| Error::Execution("the fused kernel table is poisoned".into()))?;
    let device = table.entry(index).or_default();
    if let Some(k) = device.get(source) {
        return Ok(k.clone());
    }
    let made = compile(index, source, build).ok().map(Arc::new);
    device.insert(source.to_string(), made.clone());
    Ok(made)
}

fn compile(index: usize, source: &str, build: Build) -> Result<Kernel> {
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        arch: build.arch,
        ..Default::default()
    };
    let ptx = guard(|| {
        cudarc::nvrtc::compile_ptx_with_opts(source, opts)
            .map_err(|e| Error::Device(format!("NVRTC failed on a fused kernel: {e:?}")))
    })?;
    let image = CString::new(ptx.to_src())
        .map_err(|_| Error::Device("NVRTC returned PTX with a NUL byte".into()))?;
    let device = driver(drv::device::get(index as i32), "device lookup")?;
    // SAFETY: `device` is a valid device; CubeCL uses the same primary context.
    let context = driver(unsafe { drv::primary_ctx::retain(device) }, "context")?;
    // SAFETY: a valid context; the image is a NUL-terminated PTX text that outlives the call;
    // the name is NUL-terminated.
    let func = unsafe {
        driver(drv::ctx::set_current(context), "context")?;
        let module = driver(drv::module::load_data(image.as_ptr().cast()), "module load")?;
        driver(
            drv::module::get_function(module, CString::new(build.entry).unwrap_or_default()),
            "function lookup",
        )?
    };
    Ok(Kernel { func, context })
}

/// The CUDA tensor behind an f32 tensor.
pub(crate) fn f32_cube(prim: &DispatchTensor) -> Option<&CubeTensor<CudaRuntime>> {
    queue::cube(prim).filter(|t| t.dtype == burn::tensor::DType::F32)
}

/// The strides (in elements) of an f32 CUDA tensor's buffer, axis by axis (CubeCL pads the
/// rows of some tensors, and views are strided); `None` for other tensors.
pub fn strides(t: Operand) -> Option<Vec<usize>> {
    f32_cube(t.prim).map(|c| c.meta.strides().to_vec())
}

/// The CUDA tensor behind an f32 or boolean tensor (a kernel operand; see [`submit_for`]).
pub(crate) fn operand_cube(prim: &DispatchTensor) -> Option<&CubeTensor<CudaRuntime>> {
    match &prim.kind {
        DispatchTensorKind::Cuda(BackendTensor::Bool(t)) => Some(t),
        _ => f32_cube(prim),
    }
}

/// The C type of a kernel operand's elements and its strides (see [`strides`]): `float` for
/// f32, `unsigned char` or `unsigned int` for booleans as Burn stores them; `None` for other
/// tensors.
pub fn operand_layout(t: Operand) -> Option<(&'static str, Vec<usize>)> {
    use burn::tensor::{BoolStore, DType as B};
    let c = operand_cube(t.prim)?;
    let ty = match c.dtype {
        B::F32 => "float",
        B::Bool(BoolStore::U8 | BoolStore::Native) => "unsigned char",
        B::Bool(BoolStore::U32) => "unsigned int",
        _ => return None,
    };
    Some((ty, c.meta.strides().to_vec()))
}

/// The CUDA C expression of the offset at which element `i` of a (row-major) result of shape
/// `full` reads an operand of shape `shape` stored with `strides`: the sum over the operand's
/// axes (right-aligned with `full`; unit and broadcast axes, of stride 0, skipped) of the
/// coordinate times the stride.
pub fn strided_index(shape: &[usize], strides: &[usize], full: &[usize]) -> String {
    let offset = full.len() - shape.len();
    let total: usize = full.iter().product();
    let mut terms = Vec::new();
    for (a, (&d, &st)) in shape.iter().zip(strides).enumerate() {
        if d == 1 || st == 0 {
            continue;
        }
        let k = a + offset;
        let inner: usize = full[k + 1..].iter().product();
        terms.push(format!("{} * {st}ULL", coordinate(inner, full[k], total)));
    }
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}

/// The opening of a kernel (qualifiers `before` its name): `inputs` f32 operands `e0..`,
/// `outputs` f32 results `o0..` and the count `n`.
pub(crate) fn header(before: &str, inputs: usize, outputs: usize) -> String {
    header_with(before, inputs, outputs, true)
}

/// [`header`], with the pointers declared `__restrict__` or not (`restrict` false: a result
/// may be written over an operand, see [`reusable`]).
pub(crate) fn header_with(before: &str, inputs: usize, outputs: usize, restrict: bool) -> String {
    use std::fmt::Write;
    let r = if restrict { " __restrict__" } else { "" };
    let mut s = format!("extern \"C\" __global__ void {before}{ENTRY}(");
    for j in 0..inputs {
        let _ = write!(s, "const float*{r} e{j}, ");
    }
    for q in 0..outputs {
        let _ = write!(s, "float*{r} o{q}, ");
    }
    s.push_str("unsigned long long n) {\n");
    s
}

/// The opening of a grid-stride loop of `var` over `0..n` (its brace left open).
pub(crate) fn grid_loop(var: &str) -> String {
    format!(
        "  for (unsigned long long {var} = (unsigned long long)blockIdx.x * blockDim.x + \
         threadIdx.x; {var} < n; {var} += (unsigned long long)gridDim.x * blockDim.x) {{\n"
    )
}

/// A kernel over every element `i` of one result `o0`: `inputs` operands, `body` the
/// statements that write `o0[i]`.
pub(crate) fn map_source(inputs: usize, body: &str) -> String {
    format!(
        "{}{}    {body}\n  }}\n}}\n",
        header("", inputs, 1),
        grid_loop("i")
    )
}

/// `x ** e` for an f32 CUDA tensor `x` and an f32 scalar CUDA tensor `e`, the exponent read on
/// the device (reading it on the host would wait for the GPU): exponents 2 and 3 as products
/// rounded once (the op table's `small_power`, and what fused kernels compute), others by
/// `powf`. `None` where it does not apply (see [`submit`]).
pub fn small_power(x: Operand, e: Operand) -> Result<Option<DispatchTensor>> {
    let Some(xs) = strides(x) else {
        return Ok(None);
    };
    let shape = x.shape;
    if xs.len() != shape.len() || e.numel() != 1 {
        return Ok(None);
    }
    let source = small_power_source(shape, &xs);
    let n = x.numel();
    Ok(submit(&source, &[x, e], &[shape.to_vec()], grid(n), n)?.and_then(|mut o| o.pop()))
}

/// The kernel of [`small_power`] for `x` of `shape` stored with `strides`.
fn small_power_source(shape: &[usize], strides: &[usize]) -> String {
    let index = strided_index(shape, strides, shape);
    map_source(
        2,
        &format!(
            "float x = e0[{index}], p = e1[0]; o0[i] = p == 2.0f ? x * x : p == 3.0f ? \
             (float)((double)x * (double)x * (double)x) : powf(x, p);"
        ),
    )
}

/// Nx's element-wise `max` (`min`) of f32 CUDA tensors `a` and `b` of one shape (either may
/// be a broadcast view), in one kernel: `a` where `a > b` (`a < b`) or `a` is NaN, else `b`,
/// as the engine's composed path (a comparison, a NaN test, an `or`, a select: four passes)
/// and the fused kernels compute it. `None` where it does not apply (see [`submit`]).
pub fn extremum_pair(a: Operand, b: Operand, max: bool) -> Result<Option<DispatchTensor>> {
    let (Some(sa), Some(sb)) = (strides(a), strides(b)) else {
        return Ok(None);
    };
    let shape = a.shape;
    if sa.len() != shape.len() || sb.len() != shape.len() || b.shape != shape || shape.is_empty() {
        return Ok(None);
    }
    let source = extremum_pair_source(shape, &sa, &sb, max);
    let n = a.numel();
    Ok(submit(&source, &[a, b], &[shape.to_vec()], grid(n), n)?.and_then(|mut o| o.pop()))
}

/// The kernel of [`extremum_pair`] for operands of `shape` stored with strides `sa`, `sb`.
fn extremum_pair_source(shape: &[usize], sa: &[usize], sb: &[usize], max: bool) -> String {
    let (ia, ib) = (
        strided_index(shape, sa, shape),
        strided_index(shape, sb, shape),
    );
    let wins = if max { ">" } else { "<" };
    map_source(
        2,
        &format!("float x = e0[{ia}], y = e1[{ib}]; o0[i] = (x {wins} y || isnan(x)) ? x : y;"),
    )
}

/// `f` (a CUDA math library function of a double) of an f32 CUDA tensor, computed in f64 and
/// rounded once to f32 in one kernel (the fused kernels compute the same, [`crate::fused`]);
/// `None` where it does not apply (see [`submit`]).
pub fn rounded_from_f64(x: Operand, f: Rounded) -> Result<Option<DispatchTensor>> {
    let Some(xs) = strides(x) else {
        return Ok(None);
    };
    let shape = x.shape;
    if xs.len() != shape.len() {
        return Ok(None);
    }
    let source = rounded_source(shape, &xs, f.name());
    let n = x.numel();
    Ok(submit(&source, &[x], &[shape.to_vec()], grid(n), n)?.and_then(|mut o| o.pop()))
}

/// The CUDA C expression of f32 `a` through the double function `f`, rounded once to f32
/// (eager kernels and the fused ones, [`crate::fused`], compute it alike).
pub(crate) fn rounded_call(f: &str, a: &str) -> String {
    format!("(float){f}((double){a})")
}

/// The kernel of [`rounded_from_f64`] for `x` of `shape` stored with `strides`.
fn rounded_source(shape: &[usize], strides: &[usize], f: &str) -> String {
    let index = strided_index(shape, strides, shape);
    let x = format!("e0[{index}]");
    map_source(1, &format!("o0[i] = {};", rounded_call(f, &x)))
}

/// Test support: compiles `source` with NVRTC as [`kernel`] does; panics with the source if
/// NVRTC rejects it, and only reports it when there is no NVRTC library on the machine.
#[cfg(test)]
pub(crate) fn assert_compiles(source: &str) {
    assert_compiles_for(None, source)
}

/// [`assert_compiles`] for the virtual architecture `arch`.
#[cfg(test)]
pub(crate) fn assert_compiles_for(arch: Option<&'static str>, source: &str) {
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        arch,
        ..Default::default()
    };
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, opts)) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("NVRTC rejected the source: {e:?}\n{source}"),
        Err(_) => eprintln!("no NVRTC library here: source not compiled\n{source}"),
    }
}

/// The CUDA C expression of `(i / inner) % dim` (a coordinate of flat index `i` below
/// `total`; `dim` 0: no modulo). Below 2^32 in 32-bit arithmetic: a GPU has no 64-bit divider,
/// and the 64-bit divisions by constants of every operand's index made element-wise kernels
/// instruction-bound (a put_slice of [8, 512, 2304] ran at a third of the memory's speed).
pub fn coordinate(inner: usize, dim: usize, total: usize) -> String {
    coordinate_of("i", inner, dim, total)
}

/// [`coordinate`] of the flat index held in the variable `var`.
pub fn coordinate_of(var: &str, inner: usize, dim: usize, total: usize) -> String {
    let (i, u) = if total <= u32::MAX as usize {
        (format!("(unsigned int){var}"), "u")
    } else {
        (var.to_string(), "ULL")
    };
    match (inner, dim) {
        (1, 0) => format!("({i})"),
        (_, 0) => format!("({i} / {inner}{u})"),
        (1, _) => format!("({i} % {dim}{u})"),
        _ => format!("({i} / {inner}{u} % {dim}{u})"),
    }
}

/// Runs kernel `source` (defining [`ENTRY`] with parameters `(const float* inputs...,
/// float* outputs..., unsigned long long n)`, reading each input with the [`strides`] it has)
/// over `n` elements: `outputs` f32 results of `shape`, contiguous. `None` (nothing queued)
/// where it does not apply: an input not an f32 CUDA tensor, or the source did not compile.
pub fn launch(
    source: &str,
    inputs: &[Operand],
    outputs: usize,
    n: usize,
    shape: &[usize],
) -> Result<Option<Vec<DispatchTensor>>> {
    let shapes = vec![shape.to_vec(); outputs];
    counted(submit(source, inputs, &shapes, grid(n), n)?)
}

/// Counts a queued kernel of a fused run or region (see [`launches`]).
fn counted(out: Option<Vec<DispatchTensor>>) -> Result<Option<Vec<DispatchTensor>>> {
    if out.is_some() {
        LAUNCHES.with(|c| c.set(c.get() + 1));
    }
    Ok(out)
}

/// A grid-stride launch over `n` elements: blocks and threads per block.
pub(crate) fn grid(n: usize) -> (u32, u32) {
    (n.div_ceil(BLOCK as usize).min(MAX_BLOCKS) as u32, BLOCK)
}

/// Runs a row kernel `source` (parameters as for [`launch`], `n` the number of rows; see
/// [`crate::fused`]) with blocks of `block` threads computing `per_block` rows at a time
/// (a grid-stride loop over rows beyond the grid): f32 results of `shapes`, contiguous;
/// `None` as for [`launch`]; results written over operands as `reuse` says (see
/// [`submit_for`]).
pub fn launch_rows(
    source: &str,
    inputs: &[Operand],
    shapes: &[Vec<usize>],
    rows: usize,
    (block, per_block): (usize, usize),
    reuse: &[Option<usize>],
) -> Result<Option<Vec<DispatchTensor>>> {
    let blocks = rows.div_ceil(per_block.max(1)).min(MAX_BLOCKS) as u32;
    counted(submit_reusing(
        source,
        inputs,
        shapes,
        (blocks, block as u32),
        rows,
        reuse,
    )?)
}

/// Whether a kernel may write a result of `count` f32 elements over `t`'s buffer: a CUDA f32
/// tensor that is contiguous, fills its whole buffer (no view into a larger one) and whose
/// buffer no other tensor holds (the caller's handle is the only one: the program's value,
/// read for the last time, not a tensor Elixir or another value still holds).
pub(crate) fn reusable(t: Operand, count: usize) -> bool {
    f32_cube(t.prim).is_some_and(|c| {
        c.can_mut()
            && c.is_contiguous()
            && c.is_contiguous_buffer()
            && c.handle.offset_start.unwrap_or(0) == 0
            && c.handle.offset_end.unwrap_or(0) == 0
            && t.numel() == count
    })
}

/// Queues `source` on `(blocks, threads)` with parameter `n`: outputs of `shapes` (`None`:
/// nothing queued, as for [`launch`]). Not counted in [`launches`].
pub(crate) fn submit(
    source: &str,
    inputs: &[Operand],
    shapes: &[Vec<usize>],
    grid: (u32, u32),
    n: usize,
) -> Result<Option<Vec<DispatchTensor>>> {
    submit_reusing(source, inputs, shapes, grid, n, &[])
}

/// [`submit`], with results written over operands as `reuse` says (see [`submit_for`]).
pub(crate) fn submit_reusing(
    source: &str,
    inputs: &[Operand],
    shapes: &[Vec<usize>],
    grid: (u32, u32),
    n: usize,
    reuse: &[Option<usize>],
) -> Result<Option<Vec<DispatchTensor>>> {
    if !inputs.iter().all(|t| f32_cube(t.prim).is_some()) {
        return Ok(None);
    }
    submit_for(ELEMENTWISE, source, inputs, shapes, grid, n, reuse)
}

/// [`submit`] for a kernel compiled and entered as `build` says, whose inputs may also be
/// boolean tensors (declared with their [`operand_layout`] type). `reuse[o]`, where given, is
/// the input whose buffer result `o` is written over instead of a new one (an input that
/// [`reusable`] accepted; the kernel must read each element of it before writing that
/// element, and be compiled without `__restrict__`).
pub(crate) fn submit_for(
    build: Build,
    source: &str,
    inputs: &[Operand],
    shapes: &[Vec<usize>],
    (blocks, threads): (u32, u32),
    n: usize,
    reuse: &[Option<usize>],
) -> Result<Option<Vec<DispatchTensor>>> {
    let outputs = shapes.len();
    if n == 0 || outputs == 0 || !available() {
        return Ok(None);
    }
    let Some(cubes) = inputs
        .iter()
        .map(|t| operand_cube(t.prim))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let Some(first) = cubes.first().copied() else {
        return Ok(None);
    };
    if cubes.iter().any(|c| c.device != first.device) {
        return Ok(None);
    }
    let Some(kernel) = kernel(first.device.index, source, build)? else {
        return Ok(None);
    };
    let client = first.client.clone();
    let counts: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    // results written over an operand's buffer (see `reusable`), else new buffers
    let handles: Vec<_> = counts
        .iter()
        .enumerate()
        .map(
            |(o, &c)| match reuse.get(o).copied().flatten().and_then(|j| cubes.get(j)) {
                Some(donor) => {
                    REUSED.with(|r| r.set(r.get() + 1));
                    donor.handle.clone()
                }
                None => client.empty(c * 4),
            },
        )
        .collect();
    let mut bindings: Vec<_> = handles.iter().map(|h| h.clone().binding()).collect();
    bindings.extend(cubes.iter().map(|c| c.handle.clone().binding()));
    let outs: Vec<Output> = counts
        .iter()
        .enumerate()
        .map(|(binding, &count)| Output {
            binding,
            count,
            nan: Nan::of(DType::F32),
        })
        .collect();
    queue::submit(
        first,
        bindings,
        outs,
        "a fused element-wise kernel",
        move |bufs, stream| {
            let (outs, ins) = bufs.split_at(outputs);
            let mut ptrs: Vec<u64> = ins.iter().chain(outs).map(|r| r.ptr).collect();
            let mut count = n as u64;
            let mut params: Vec<*mut c_void> =
                ptrs.iter_mut().map(|p| (p as *mut u64).cast()).collect();
            params.push((&mut count as *mut u64).cast());
            // SAFETY: the kernel's parameters are the input and output device pointers (live
            // buffers of at least the elements it reads and of the elements of `shapes` it
            // writes, held until this returns) and `n`, in the order of its signature; it is queued on the outputs'
            // stream after the work queued on the inputs' streams (events), in its context.
            unsafe {
                driver(drv::ctx::set_current(kernel.context), "context")?;
                let others = queue::order_operands(stream, ins)?;
                driver(
                    drv::launch_kernel(
                        kernel.func,
                        (blocks, 1, 1),
                        (threads, 1, 1),
                        0,
                        stream,
                        &mut params,
                    ),
                    "fused kernel launch",
                )?;
                queue::release(stream, &others)
            }
        },
    );
    let checkpointing = inputs[0].prim.checkpointing;
    Ok(Some(
        handles
            .into_iter()
            .zip(shapes)
            .map(|(h, shape)| queue::output(first, h, shape, DType::F32, checkpointing))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn extremum_pair_sources_compile() {
        // a ReLU's max against a broadcast zero, and a min of two transposed views
        super::assert_compiles(&super::extremum_pair_source(
            &[64, 256, 56, 56],
            &[802816, 3136, 56, 1],
            &[0, 0, 0, 0],
            true,
        ));
        super::assert_compiles(&super::extremum_pair_source(
            &[96, 40],
            &[1, 96],
            &[1, 96],
            false,
        ));
    }

    #[test]
    fn small_power_source_compiles() {
        // a transposed [40, 96] view
        super::assert_compiles(&super::small_power_source(&[96, 40], &[1, 96]));
    }

    #[test]
    fn rounded_sources_compile() {
        for f in ["exp", "log", "cbrt"] {
            super::assert_compiles(&super::rounded_source(&[96, 40], &[1, 96], f));
        }
    }
}
