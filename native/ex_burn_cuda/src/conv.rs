//! 2-D convolutions on NVIDIA GPUs by cuDNN, on the buffers of Burn's CUDA tensors.
//!
//! Burn 0.21's CUDA convolutions (implicit GEMM) reached ~15 TFLOP/s in a ResNet-50 training
//! step on an H200 (`bench/results/resnet50_cuda.md`), where cuDNN's kernels reach several
//! times that. When `libcudnn` loads (cuDNN 9, as CUDA installations and PyTorch ship it), a
//! convolution of f32, f16 or bf16 `[n, c, h, w]` by `[o, c / groups, kh, kw]` with strides,
//! symmetric padding, kernel dilation and feature groups runs as one
//! `cudnnConvolutionForward` on the operands' device memory (both packed: cuDNN's fast kernels
//! want packed tensors, and the engine copies padded or permuted ones first), into a new
//! contiguous result. f32 convolutions of at least
//! [`crate::gemm::MIN_WORK`] multiply-adds may use TF32 tensor cores (`Precision::Default`,
//! as products do and as PyTorch's and XLA's defaults), smaller ones and `Precision::Highest`
//! compute in full f32 (`CUDNN_FMA_MATH`); f16 and bf16 accumulate in f32. Anything else
//! returns `None` and Burn's kernels compute it: no cuDNN on the machine (or `cudnn: false`),
//! another layout, sizes beyond cuDNN's `int`.
//!
//! Kernel gradients too ([`kernel_gradient`], `cudnnConvolutionBackwardFilter`): Nx's `grad`
//! writes a convolution's kernel gradient as another convolution (the layer's input with batch
//! and features swapped, by the output's gradient likewise swapped, as a kernel of the output's
//! size), which the engine hands back in that form; Burn's kernels gave each of its few outputs
//! one thread summing a whole window.
//!
//! The algorithm is cuDNN's first heuristic choice whose workspace fits [`MAX_WORKSPACE`],
//! looked up once per shape (the descriptors and heuristics need no GPU work) on the calling
//! thread; the workspace is a buffer of CubeCL's pool like the result. The convolution is
//! queued on CubeCL's device thread (`queue::submit`) in order with the kernels around it, on
//! the stream of its result, through a cuDNN handle bound to that stream, with operands of
//! other streams ordered by events as `gemm` does. A convolution that fails there sets its
//! result to NaN and reports the error at the next read.
use crate::queue::{self, driver, GpuResource, Nan, Output};
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::CudaRuntime;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::{result as drv, sys as drv_sys};
use ex_burn_core::kernels::{ConvCall, KernelGradientCall, Operand, Precision};
use ex_burn_core::{DType, Error, Result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The largest workspace a convolution's algorithm may ask for (bytes).
pub const MAX_WORKSPACE: usize = 512 << 20;

thread_local! {
    /// Convolution passes queued on cuDNN by this thread (see [`convolutions`]).
    static CONVOLUTIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Set when cuDNN could not be set up on the calling thread (no handle, no heuristics): later
/// convolutions go to Burn's kernels.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// How many convolution passes this thread queued on cuDNN (tests tell them from Burn's
/// with it; per thread, so that tests running side by side do not count each other's).
pub fn convolutions() -> u64 {
    CONVOLUTIONS.with(|c| c.get())
}

/// Whether convolutions may go to cuDNN: the configuration allows it (`cudnn: false` keeps
/// Burn's kernels), the library loads (checked once), it was set up so far and no queued work
/// has failed.
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    ex_burn_core::config::cudnn()
        && !BROKEN.load(Ordering::Relaxed)
        // SAFETY: only tries to open the shared library.
        && *PRESENT.get_or_init(|| unsafe { dnn::is_culib_present() })
        && queue::enabled()
}

fn check(status: dnn::cudnnStatus_t, what: &str) -> Result<()> {
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Execution(format!("cuDNN {what} failed: {status:?}")))
    }
}

/// What cuDNN computes of a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pass {
    /// Its result, from the input and the kernel.
    Forward,
    /// Its kernel's gradient, from the input and the result's gradient.
    KernelGradient,
}

/// One convolution as cuDNN runs it: the pass, sizes, type and math.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    pass: Pass,
    index: usize,
    /// `[n, c, h, w]`.
    x: [i32; 4],
    /// `[o, c / groups, kh, kw]`: the kernel, or its gradient.
    k: [i32; 4],
    /// `[n, o, oh, ow]`: the result, or its gradient.
    y: [i32; 4],
    pad: [i32; 2],
    stride: [i32; 2],
    dilation: [i32; 2],
    groups: i32,
    data: dnn::cudnnDataType_t,
    math: dnn::cudnnMathType_t,
}

/// The descriptors of a [`Shape`], destroyed with it.
struct Descriptors {
    x: dnn::cudnnTensorDescriptor_t,
    y: dnn::cudnnTensorDescriptor_t,
    k: dnn::cudnnFilterDescriptor_t,
    conv: dnn::cudnnConvolutionDescriptor_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created by `Descriptors::of` (or is null, which cuDNN ignores) and
        // is destroyed once.
        unsafe {
            let _ = dnn::cudnnDestroyTensorDescriptor(self.x);
            let _ = dnn::cudnnDestroyTensorDescriptor(self.y);
            let _ = dnn::cudnnDestroyFilterDescriptor(self.k);
            let _ = dnn::cudnnDestroyConvolutionDescriptor(self.conv);
        }
    }
}

impl Descriptors {
    /// The descriptors of `s` (host objects: no GPU work, any thread).
    fn of(s: &Shape) -> Result<Descriptors> {
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            k: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        let [n, c, h, w] = s.x;
        let [o, kc, kh, kw] = s.k;
        let [yn, yo, yh, yw] = s.y;
        // accumulation in f32 for every element type
        let compute = dnn::cudnnDataType_t::CUDNN_DATA_FLOAT;
        // SAFETY: out-pointers to descriptors owned by `d` (dropped on error), then setters on
        // them with sizes checked to fit `int`.
        unsafe {
            check(dnn::cudnnCreateTensorDescriptor(&mut d.x), "descriptor")?;
            check(dnn::cudnnCreateTensorDescriptor(&mut d.y), "descriptor")?;
            check(dnn::cudnnCreateFilterDescriptor(&mut d.k), "descriptor")?;
            check(
                dnn::cudnnCreateConvolutionDescriptor(&mut d.conv),
                "descriptor",
            )?;
            check(
                dnn::cudnnSetTensor4dDescriptor(
                    d.x,
                    dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    s.data,
                    n,
                    c,
                    h,
                    w,
                ),
                "input descriptor",
            )?;
            check(
                dnn::cudnnSetTensor4dDescriptor(
                    d.y,
                    dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    s.data,
                    yn,
                    yo,
                    yh,
                    yw,
                ),
                "output descriptor",
            )?;
            check(
                dnn::cudnnSetFilter4dDescriptor(
                    d.k,
                    s.data,
                    dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    o,
                    kc,
                    kh,
                    kw,
                ),
                "kernel descriptor",
            )?;
            check(
                dnn::cudnnSetConvolution2dDescriptor(
                    d.conv,
                    s.pad[0],
                    s.pad[1],
                    s.stride[0],
                    s.stride[1],
                    s.dilation[0],
                    s.dilation[1],
                    dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    compute,
                ),
                "convolution descriptor",
            )?;
            check(
                dnn::cudnnSetConvolutionGroupCount(d.conv, s.groups),
                "group count",
            )?;
            check(
                dnn::cudnnSetConvolutionMathType(d.conv, s.math),
                "math type",
            )?;
            let (mut on, mut oo, mut oh, mut ow) = (0, 0, 0, 0);
            check(
                dnn::cudnnGetConvolution2dForwardOutputDim(
                    d.conv, d.x, d.k, &mut on, &mut oo, &mut oh, &mut ow,
                ),
                "output size",
            )?;
            if [on, oo, oh, ow] != s.y {
                return Err(Error::Execution(format!(
                    "cuDNN's output size {:?} is not the convolution's {:?}",
                    [on, oo, oh, ow],
                    s.y
                )));
            }
        }
        Ok(d)
    }
}

/// cuDNN's algorithm of one pass.
#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(dnn::cudnnConvolutionFwdAlgo_t),
    KernelGradient(dnn::cudnnConvolutionBwdFilterAlgo_t),
}

/// The algorithm of a [`Shape`] and its workspace in bytes.
#[derive(Clone, Copy, Debug)]
struct Algorithm {
    algo: Algo,
    workspace: usize,
}

/// A cuDNN handle in the primary context of one device.
struct Handle {
    handle: dnn::cudnnHandle_t,
    context: drv_sys::CUcontext,
}

// SAFETY: a handle is only used under the mutex of its table, with its context made current
// on the calling thread first.
unsafe impl Send for Handle {}

impl Handle {
    /// A handle for device `index`, bound to `stream` when one is given.
    fn new(index: usize, stream: Option<drv_sys::CUstream>) -> Result<Handle> {
        let device = driver(drv::device::get(index as i32), "device lookup")?;
        // SAFETY: `device` is a valid device; CubeCL uses the same primary context.
        let context = driver(unsafe { drv::primary_ctx::retain(device) }, "context")?;
        // SAFETY: a valid context.
        driver(unsafe { drv::ctx::set_current(context) }, "context")?;
        let mut handle: dnn::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: out-pointer to a handle; the context is current.
        check(unsafe { dnn::cudnnCreate(&mut handle) }, "handle creation")?;
        if let Some(stream) = stream {
            // SAFETY: a live handle and a stream of the current context.
            check(
                unsafe { dnn::cudnnSetStream(handle, stream as dnn::cudaStream_t) },
                "stream setting",
            )?;
        }
        Ok(Handle { handle, context })
    }
}

/// Handles by (device index, stream address; 0 for the heuristics' handle of each device).
/// `None`: creating it failed, do not retry.
static HANDLES: OnceLock<Mutex<Handles>> = OnceLock::new();

/// Handles by (device index, stream address).
type Handles = HashMap<(usize, usize), Option<Handle>>;

/// Runs `f` with the handle of device `index` and `stream` (made and kept on first use), its
/// context current; `None` when no handle could be made.
fn with_handle<T>(
    index: usize,
    stream: Option<drv_sys::CUstream>,
    f: impl FnOnce(dnn::cudnnHandle_t) -> Result<T>,
) -> Result<Option<T>> {
    let table = HANDLES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut table = table
        .lock()
        .map_err(|_| Error::Execution("the cuDNN handle table is poisoned".into()))?;
    let key = (index, stream.map_or(0, |s| s as usize));
    let entry = table
        .entry(key)
        .or_insert_with(|| Handle::new(index, stream).ok());
    let Some(h) = entry.as_ref() else {
        return Ok(None);
    };
    // SAFETY: the handle's context, valid while the handle lives.
    driver(unsafe { drv::ctx::set_current(h.context) }, "context")?;
    f(h.handle).map(Some)
}

/// Algorithms by shape (`None`: cuDNN has none within [`MAX_WORKSPACE`]).
static ALGORITHMS: OnceLock<Mutex<HashMap<Shape, Option<Algorithm>>>> = OnceLock::new();

/// The algorithm of `s`: cuDNN's heuristics' first choice that succeeds within
/// [`MAX_WORKSPACE`], looked up once per shape.
fn algorithm(s: &Shape) -> Result<Option<Algorithm>> {
    let table = ALGORITHMS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(known) = table.lock().ok().and_then(|t| t.get(s).copied()) {
        return Ok(known);
    }
    let remember = |found: Option<Algorithm>| {
        if let Ok(mut t) = table.lock() {
            t.insert(*s, found);
        }
        found
    };
    // a shape cuDNN does not describe (a type this GPU lacks, say) goes to Burn's kernels
    let Ok(d) = Descriptors::of(s) else {
        return Ok(remember(None));
    };
    let found = with_handle(s.index, None, |handle| match s.pass {
        // SAFETY: a live handle and the descriptors of `s`.
        Pass::Forward => unsafe { forward_algorithm(handle, &d) },
        // SAFETY: as above.
        Pass::KernelGradient => unsafe { kernel_gradient_algorithm(handle, &d) },
    });
    match found {
        Ok(Some(found)) => Ok(remember(found)),
        Ok(None) => {
            // no handle on this device: cuDNN is not usable here
            BROKEN.store(true, Ordering::Relaxed);
            Ok(None)
        }
        Err(_) => Ok(remember(None)),
    }
}

/// How many of cuDNN's ranked algorithms are looked at.
const WANTED: usize = 8;

/// One of cuDNN's ranked algorithms: the algorithm, its status, workspace and determinism.
type Ranked<A> = (A, dnn::cudnnStatus_t, usize, dnn::cudnnDeterminism_t);

/// The first of cuDNN's ranking that succeeds within [`MAX_WORKSPACE`] and gives the same
/// bits on every run (some kernel-gradient algorithms add with atomics, in whatever order the
/// GPU runs them); a nondeterministic one only where no other fits.
fn first_fit<A: Copy>(
    ranked: impl Iterator<Item = Ranked<A>>,
    returned: i32,
    wrap: impl Fn(A) -> Algo,
) -> Option<Algorithm> {
    let fitting: Vec<Ranked<A>> = ranked
        .take(returned.clamp(0, WANTED as i32) as usize)
        .filter(|&(_, status, memory, _)| {
            status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS && memory <= MAX_WORKSPACE
        })
        .collect();
    fitting
        .iter()
        .find(|r| r.3 == dnn::cudnnDeterminism_t::CUDNN_DETERMINISTIC)
        .or(fitting.first())
        .map(|&(algo, _, workspace, _)| Algorithm {
            algo: wrap(algo),
            workspace,
        })
}

/// cuDNN's heuristic choice for a convolution's result.
///
/// # Safety
/// `handle` is a live handle whose context is current; `d` are live descriptors.
unsafe fn forward_algorithm(
    handle: dnn::cudnnHandle_t,
    d: &Descriptors,
) -> Result<Option<Algorithm>> {
    // SAFETY: a plain C struct of enums and numbers, all-zero valid before cuDNN fills it
    let mut perf: [dnn::cudnnConvolutionFwdAlgoPerf_t; WANTED] = unsafe { std::mem::zeroed() };
    let mut returned = 0;
    // SAFETY: the caller's guarantees; `perf` holds `WANTED` results.
    check(
        unsafe {
            dnn::cudnnGetConvolutionForwardAlgorithm_v7(
                handle,
                d.x,
                d.k,
                d.conv,
                d.y,
                WANTED as i32,
                &mut returned,
                perf.as_mut_ptr(),
            )
        },
        "algorithm heuristics",
    )?;
    let ranked = perf
        .iter()
        .map(|p| (p.algo, p.status, p.memory, p.determinism));
    Ok(first_fit(ranked, returned, Algo::Forward))
}

/// cuDNN's heuristic choice for a convolution's kernel gradient.
///
/// # Safety
/// As [`forward_algorithm`].
unsafe fn kernel_gradient_algorithm(
    handle: dnn::cudnnHandle_t,
    d: &Descriptors,
) -> Result<Option<Algorithm>> {
    // SAFETY: as in `forward_algorithm`
    let mut perf: [dnn::cudnnConvolutionBwdFilterAlgoPerf_t; WANTED] =
        unsafe { std::mem::zeroed() };
    let mut returned = 0;
    // SAFETY: the caller's guarantees; `perf` holds `WANTED` results.
    check(
        unsafe {
            dnn::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                handle,
                d.x,
                d.y,
                d.conv,
                d.k,
                WANTED as i32,
                &mut returned,
                perf.as_mut_ptr(),
            )
        },
        "algorithm heuristics",
    )?;
    let ranked = perf
        .iter()
        .map(|p| (p.algo, p.status, p.memory, p.determinism));
    Ok(first_fit(ranked, returned, Algo::KernelGradient))
}

/// The cuDNN element type of a float type it convolves.
fn dnn_type(dtype: DType) -> Option<dnn::cudnnDataType_t> {
    match dtype {
        DType::F32 => Some(dnn::cudnnDataType_t::CUDNN_DATA_FLOAT),
        DType::F16 => Some(dnn::cudnnDataType_t::CUDNN_DATA_HALF),
        DType::BF16 => Some(dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16),
        _ => None,
    }
}

/// How cuDNN may round: f32 on TF32 tensor cores for `Precision::Default` from the products'
/// [`crate::gemm::MIN_WORK`] multiply-adds on (not the threshold tests move for products),
/// full f32 otherwise; tensor cores for f16 and bf16.
fn math(dtype: DType, precision: Precision, work: usize) -> dnn::cudnnMathType_t {
    match dtype {
        DType::F32 if precision == Precision::Default && work >= crate::gemm::MIN_WORK => {
            dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH
        }
        DType::F32 => dnn::cudnnMathType_t::CUDNN_FMA_MATH,
        _ => dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
    }
}

/// Sizes as cuDNN's `int`s, `None` when one does not fit.
fn ints<const N: usize>(v: [usize; N]) -> Option<[i32; N]> {
    let mut out = [0; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = i32::try_from(x).ok()?;
    }
    Some(out)
}

/// The CUDA tensors of two operands of one float type cuDNN convolves, on one device, with
/// their type; `None` otherwise or when cuDNN is not [`available`].
fn operands<'a>(
    a: Operand<'a>,
    b: Operand<'a>,
) -> Option<(
    &'a CubeTensor<CudaRuntime>,
    &'a CubeTensor<CudaRuntime>,
    DType,
    dnn::cudnnDataType_t,
)> {
    let (ta, tb) = (queue::cube(a.prim)?, queue::cube(b.prim)?);
    if ta.dtype != tb.dtype || ta.device != tb.device || !available() {
        return None;
    }
    let dtype = DType::from_burn(ta.dtype).ok()?;
    Some((ta, tb, dtype, dnn_type(dtype)?))
}

/// Whether `t` holds the elements of a tensor of logical shape `shape` packed in one row.
fn one_row(t: &CubeTensor<CudaRuntime>, shape: &[usize]) -> bool {
    t.meta.shape()[..] == [shape.iter().product::<usize>()] && t.meta.strides()[..] == [1]
}

/// The convolution `call` by cuDNN, `[n, o, oh, ow]`, or `None` when it does not apply (see
/// the module documentation).
pub fn forward(call: &ConvCall) -> Result<Option<burn::DispatchTensor>> {
    let Some((tx, tk, dtype, data)) = operands(call.input, call.kernel) else {
        return Ok(None);
    };
    let (xs, ks) = (call.input.shape, call.kernel.shape);
    let (&[n, c, h, w], &[o, kc, kh, kw]) = (xs, ks) else {
        return Ok(None);
    };
    let g = call.groups;
    // input and kernel packed in one row each (see `ConvCall`)
    if !one_row(tx, xs) || !one_row(tk, ks) || g == 0 || c != kc * g || o % g != 0 {
        return Ok(None);
    }
    let Some([oh, ow]) = call.geometry.output([h, w], [kh, kw]) else {
        return Ok(None);
    };
    let count = n * o * oh * ow;
    let work = count.saturating_mul(kc * kh * kw);
    let shape = match (
        ints([n, c, h, w]),
        ints([o, kc, kh, kw]),
        ints([n, o, oh, ow, count]),
        ints(call.geometry.padding),
        ints(call.geometry.strides),
        ints(call.geometry.dilations),
        i32::try_from(g),
    ) {
        (
            Some(x),
            Some(k),
            Some([yn, yo, yh, yw, _]),
            Some(pad),
            Some(stride),
            Some(dilation),
            Ok(groups),
        ) => Shape {
            pass: Pass::Forward,
            index: tx.device.index,
            x,
            k,
            y: [yn, yo, yh, yw],
            pad,
            stride,
            dilation,
            groups,
            data,
            math: math(dtype, call.precision, work),
        },
        _ => return Ok(None),
    };
    Ok(launch(tx, tk, &shape, dtype)?.map(|out| {
        queue::output(
            tx,
            out,
            &[n, o, oh, ow],
            dtype,
            call.input.prim.checkpointing,
        )
    }))
}

/// The gradient of a convolution's kernel ([`KernelGradientCall`]) by cuDNN, `[o, c, kh,
/// kw]`, or `None` when it does not apply (see the module documentation).
pub fn kernel_gradient(call: &KernelGradientCall) -> Result<Option<burn::DispatchTensor>> {
    let Some((tx, tg, dtype, data)) = operands(call.input, call.grad) else {
        return Ok(None);
    };
    let (xs, gs, ks) = (call.input.shape, call.grad.shape, call.kernel);
    let (&[n, c, _, _], &[gn, o, oh, ow], [ko, kc, kh, kw]) = (xs, gs, ks) else {
        return Ok(None);
    };
    // both packed in one row (see `KernelGradientCall`), the sizes those of one convolution
    // (cuDNN checks the result's size against the strides, padding and dilations)
    if !one_row(tx, xs) || !one_row(tg, gs) || gn != n || ko != o || kc != c {
        return Ok(None);
    }
    let count = o * c * kh * kw;
    let work = (n * o * oh * ow).saturating_mul(c * kh * kw);
    let shape = match (
        ints([xs[0], xs[1], xs[2], xs[3], xs.iter().product()]),
        ints([o, c, kh, kw, count]),
        ints([n, o, oh, ow, gs.iter().product()]),
        ints(call.geometry.padding),
        ints(call.geometry.strides),
        ints(call.geometry.dilations),
    ) {
        (
            Some([xn, xc, xh, xw, _]),
            Some([ko, kc, kh, kw, _]),
            Some([yn, yo, yh, yw, _]),
            Some(pad),
            Some(stride),
            Some(dilation),
        ) => Shape {
            pass: Pass::KernelGradient,
            index: tx.device.index,
            x: [xn, xc, xh, xw],
            k: [ko, kc, kh, kw],
            y: [yn, yo, yh, yw],
            pad,
            stride,
            dilation,
            groups: 1,
            data,
            math: math(dtype, call.precision, work),
        },
        _ => return Ok(None),
    };
    Ok(launch(tx, tg, &shape, dtype)?.map(|out| {
        queue::output(
            tx,
            out,
            &[o, c, kh, kw],
            dtype,
            call.input.prim.checkpointing,
        )
    }))
}

/// Queues the pass of `shape` on the buffers of `tx` (the input) and `tb` (the kernel, or
/// the result's gradient) into a new buffer of the pass's result (the result, or the kernel's
/// gradient); `None` when cuDNN has no algorithm for it (nothing was queued).
fn launch(
    tx: &CubeTensor<CudaRuntime>,
    tb: &CubeTensor<CudaRuntime>,
    shape: &Shape,
    dtype: DType,
) -> Result<Option<cubecl_runtime::server::Handle>> {
    let Some(algo) = algorithm(shape)? else {
        return Ok(None);
    };
    let count = match shape.pass {
        Pass::Forward => shape.y,
        Pass::KernelGradient => shape.k,
    }
    .iter()
    .map(|&d| d as usize)
    .product::<usize>();
    let client = tx.client.clone();
    let out = client.empty(count * dtype.size());
    // cuDNN may be handed a null workspace of size 0; CubeCL's buffers are never empty
    let space = client.empty(algo.workspace.max(4));
    let bindings = vec![
        out.clone().binding(),
        tx.handle.clone().binding(),
        tb.handle.clone().binding(),
        space.binding(),
    ];
    let output = Output {
        binding: 0,
        count,
        nan: Nan::of(dtype),
    };
    let s = *shape;
    queue::submit(
        tx,
        bindings,
        vec![output],
        "a cuDNN convolution",
        move |bufs, stream| {
            // SAFETY: the buffers are live and of the sizes `s` describes, held until the
            // call returns; the work is queued on `stream` after the work queued on the
            // operands' streams (events), which wait for it afterwards.
            unsafe { run(&s, algo, bufs, stream) }
        },
    );
    CONVOLUTIONS.with(|c| c.set(c.get() + 1));
    ex_burn_core::profile::note(match s.pass {
        Pass::Forward => "cudnn conv",
        Pass::KernelGradient => "cudnn conv kernel gradient",
    });
    ex_burn_core::profile::note_detail(|| {
        format!(
            "cudnn {:?} {:?} by {:?} to {:?} stride {:?} pad {:?} dilation {:?} groups {} {:?}",
            s.pass, s.x, s.k, s.y, s.stride, s.pad, s.dilation, s.groups, algo.algo
        )
    });
    Ok(Some(out))
}

/// Queues the pass of `s` with `algo` on `stream`: `bufs` are the pass's result, the input,
/// the kernel (or the result's gradient) and the workspace.
///
/// # Safety
/// The buffers are live device buffers of the sizes `s` and `algo` describe, kept alive until
/// this returns; the work queued on their streams afterwards is what may reuse them.
unsafe fn run(
    s: &Shape,
    algo: Algorithm,
    bufs: &[&GpuResource],
    stream: drv_sys::CUstream,
) -> Result<()> {
    let &[out, x, b, space] = bufs else {
        return Err(Error::Execution("a convolution needs four buffers".into()));
    };
    let timed = ex_burn_core::profile::gpu_mode().then(std::time::Instant::now);
    let d = Descriptors::of(s)?;
    let described = timed.map(|t| t.elapsed());
    let done = with_handle(s.index, Some(stream), |handle| {
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: the caller's guarantees; the handle is bound to `stream` and used under its
        // table's lock with its context current. alpha and beta are f32 as cuDNN wants them
        // for every element type it accumulates in f32.
        unsafe {
            let others = queue::order_operands(stream, &[x, b])?;
            let (alpha, beta) = ((&alpha as *const f32).cast(), (&beta as *const f32).cast());
            let (x, b) = (x.ptr as *const c_void, b.ptr as *const c_void);
            let (out, space) = (out.ptr as *mut c_void, space.ptr as *mut c_void);
            let status = match algo.algo {
                Algo::Forward(a) => dnn::cudnnConvolutionForward(
                    handle,
                    alpha,
                    d.x,
                    x,
                    d.k,
                    b,
                    d.conv,
                    a,
                    space,
                    algo.workspace,
                    beta,
                    d.y,
                    out,
                ),
                Algo::KernelGradient(a) => dnn::cudnnConvolutionBackwardFilter(
                    handle,
                    alpha,
                    d.x,
                    x,
                    d.y,
                    b,
                    d.conv,
                    a,
                    space,
                    algo.workspace,
                    beta,
                    d.k,
                    out,
                ),
            };
            check(status, "convolution")?;
            queue::release(stream, &others)
        }
    })?;
    // cuDNN registers its exit handlers on first use: ExBurn's must come after them, so that
    // an exit waits for queued convolutions before that state is torn down
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(ex_burn_core::exit::after_load);
    // the profile's parts of a convolution's time on the device thread
    if let (Some(t), Some(described)) = (timed, described) {
        let zero = std::time::Duration::ZERO;
        queue::DEVICE_THREAD.record("within a convolution: its descriptors", zero, described);
        queue::DEVICE_THREAD.record(
            "within a convolution: cuDNN's call",
            zero,
            t.elapsed().saturating_sub(described),
        );
    }
    done.ok_or_else(|| Error::Device("no cuDNN handle for the stream".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_uses_tf32_only_when_large_and_allowed() {
        let big = crate::gemm::MIN_WORK;
        assert_eq!(
            math(DType::F32, Precision::Default, big),
            dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH
        );
        assert_eq!(
            math(DType::F32, Precision::Default, big - 1),
            dnn::cudnnMathType_t::CUDNN_FMA_MATH
        );
        assert_eq!(
            math(DType::F32, Precision::Highest, big),
            dnn::cudnnMathType_t::CUDNN_FMA_MATH
        );
        assert_eq!(
            math(DType::BF16, Precision::Highest, 1),
            dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH
        );
    }

    #[test]
    fn deterministic_algorithms_come_first_among_those_that_fit() {
        use dnn::cudnnDeterminism_t::{
            CUDNN_DETERMINISTIC as SAME, CUDNN_NON_DETERMINISTIC as ANY,
        };
        use dnn::cudnnStatus_t::{CUDNN_STATUS_NOT_SUPPORTED as NO, CUDNN_STATUS_SUCCESS as OK};
        let pick = |ranked: Vec<Ranked<u32>>| {
            let n = ranked.len() as i32;
            first_fit(ranked.into_iter(), n, |a| {
                Algo::Forward(match a {
                    0 => dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                    _ => dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                })
            })
            .map(|a| a.workspace)
        };
        let big = MAX_WORKSPACE + 1;
        // workspaces tell the picks apart
        assert_eq!(pick(vec![(0, OK, 10, ANY), (1, OK, 20, SAME)]), Some(20));
        assert_eq!(
            pick(vec![
                (0, NO, 10, SAME),
                (1, OK, big, SAME),
                (0, OK, 30, ANY)
            ]),
            Some(30)
        );
        assert_eq!(pick(vec![(0, OK, 40, SAME), (1, OK, 50, SAME)]), Some(40));
        assert_eq!(pick(vec![(0, NO, 10, SAME)]), None);
        // only the algorithms cuDNN returned count
        assert_eq!(
            first_fit(
                vec![(0u32, OK, 10, SAME)].into_iter(),
                0,
                |_| unreachable!()
            )
            .map(|a| a.workspace),
            None
        );
    }

    #[test]
    fn sizes_beyond_int_are_refused() {
        assert_eq!(ints([1, 2, 3]), Some([1, 2, 3]));
        assert_eq!(ints([1, 1 << 31]), None);
    }
}
