//! Nx `conv`: any permutations, strides, asymmetric/negative padding, input (lhs) and kernel
//! dilation, feature groups and batch groups, lowered to Burn's conv1d/2d/3d.

use super::util;
use super::Op;
use crate::dtype::Kind;
use crate::kernels::{Conv2dGeometry, ConvCall, DeviceKernels, KernelGradientCall, Operand};
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{ConvOptions, ModuleOps};

pub(super) fn eval(op: &Op, input: &Tensor, kernel: &Tensor) -> Result<Tensor> {
    let Op::Conv {
        strides,
        padding,
        input_dilation,
        kernel_dilation,
        feature_group_size,
        batch_group_size,
        input_permutation,
        kernel_permutation,
        output_permutation,
        out,
        precision,
    } = op
    else {
        return Err(Error::Unsupported(format!("{} is not conv", op.name())));
    };
    let r = input.rank();
    if r < 3 || kernel.rank() != r {
        return Err(Error::Shape(format!(
            "conv needs input and kernel of equal rank >= 3, got {:?} and {:?}",
            input.shape(),
            kernel.shape()
        )));
    }
    let sp = r - 2;
    if sp > 3 {
        return Err(Error::Unsupported(format!(
            "conv with {sp} spatial dimensions (Burn has 1d, 2d and 3d)"
        )));
    }
    let out = out.unwrap_or_else(|| DType::merge(input.dtype(), kernel.dtype()).to_floating());
    if !out.is_float() {
        return Err(Error::Dtype(format!(
            "conv computes in floats, got result type {out}"
        )));
    }
    let ident: Vec<usize> = (0..r).collect();
    let x = util::permute(
        &input.cast(out)?,
        input_permutation.as_deref().unwrap_or(&ident),
    )?;
    let k = util::permute(
        &kernel.cast(out)?,
        kernel_permutation.as_deref().unwrap_or(&ident),
    )?;
    let ones = vec![1; sp];
    let strides = strides.clone().unwrap_or_else(|| ones.clone());
    let in_dil = input_dilation.clone().unwrap_or_else(|| ones.clone());
    let k_dil = kernel_dilation.clone().unwrap_or_else(|| ones.clone());
    let pads = padding.clone().unwrap_or_else(|| vec![(0, 0); sp]);
    if strides.len() != sp || in_dil.len() != sp || k_dil.len() != sp || pads.len() != sp {
        return Err(Error::Argument(format!(
            "strides, padding and dilations need {sp} entries (one per spatial axis)"
        )));
    }
    if strides.iter().chain(&in_dil).chain(&k_dil).any(|&v| v == 0) {
        return Err(Error::Argument(
            "strides and dilations must be positive".into(),
        ));
    }
    let (fg, bg) = (*feature_group_size, *batch_group_size);
    let (n, c, o) = (x.shape()[0], x.shape()[1], k.shape()[0]);
    if fg == 0
        || bg == 0
        || c % fg != 0
        || k.shape()[1] * fg != c
        || o % fg != 0
        || o % bg != 0
        || n % bg != 0
    {
        return Err(Error::Shape(format!(
            "conv: input {:?} and kernel {:?} do not fit feature_group_size {fg} and batch_group_size {bg}",
            x.shape(),
            k.shape()
        )));
    }

    // Input dilation and any padding Burn cannot express (asymmetric or negative) become an
    // explicit pad with zeros.
    let symmetric = pads.iter().all(|&(lo, hi)| lo == hi && lo >= 0);
    let dilated = in_dil.iter().any(|&d| d > 1);
    let (x, burn_pad) = if symmetric && !dilated {
        (x, pads.iter().map(|p| p.0 as usize).collect::<Vec<_>>())
    } else {
        let mut config = vec![(0, 0, 0), (0, 0, 0)];
        config.extend(
            pads.iter()
                .zip(&in_dil)
                .map(|(&(lo, hi), &d)| (lo, hi, d as i64 - 1)),
        );
        let padded = pad_zeros(&x, &config)?;
        (padded, vec![0; sp])
    };

    // Batch groups: fold the groups of the batch into the channels and convolve with groups.
    let (x, groups) = if bg > 1 {
        let mut s = vec![bg, n / bg, c];
        s.extend_from_slice(&x.shape()[2..]);
        let mut perm = vec![1, 0];
        perm.extend(2..s.len());
        let mut folded = vec![n / bg, bg * c];
        folded.extend_from_slice(&x.shape()[2..]);
        let t = util::permute(&x.reshape(s)?, &perm)?.reshape(folded)?;
        (t, bg)
    } else {
        (x, fg)
    };

    let mut strides = strides;
    for i in 0..sp {
        let span = (k.shape()[2 + i].saturating_sub(1))
            .saturating_mul(k_dil[i])
            .saturating_add(1);
        let padded = x.shape()[2 + i].saturating_add(burn_pad[i].saturating_mul(2));
        if padded < span {
            return Err(Error::Shape(format!(
                "conv: kernel {:?} (dilated) is larger than the padded input {:?}",
                k.shape(),
                x.shape()
            )));
        }
        // A stride past the last window start gives one window: the same result with a
        // stride the backend's index arithmetic holds.
        strides[i] = strides[i].min(padded - span + 1);
    }
    let perm = output_permutation.as_deref().unwrap_or(&ident);
    if sp == 2 {
        let g = Conv2dGeometry {
            strides: [strides[0], strides[1]],
            padding: [burn_pad[0], burn_pad[1]],
            dilations: [k_dil[0], k_dil[1]],
        };
        let host = x.device().is_host();
        if groups == 1 {
            if let Some(res) = super::conv_host::conv2d_f32(&x, &k, &g)? {
                return in_output_order(&res, perm);
            }
        }
        if groups == 1 && !host {
            if let Some(res) = by_kernel_gradient(&x, &k, &g, *precision)? {
                return in_output_order(&res, perm);
            }
            if let Some(res) = by_windows(&x, &k, &g)? {
                return in_output_order(&res, perm);
            }
        }
        if !host {
            if let Some(res) = by_library(&x, &k, &g, groups, *precision)? {
                return in_output_order(&res, perm);
            }
        }
    }
    let (xp, kp): (Prim, Prim) = (x.prim(), k.prim());
    let prim = match sp {
        1 => B::conv1d(
            xp,
            kp,
            None,
            ConvOptions::new([strides[0]], [burn_pad[0]], [k_dil[0]], groups),
        ),
        2 => B::conv2d(
            xp,
            kp,
            None,
            ConvOptions::new(
                [strides[0], strides[1]],
                [burn_pad[0], burn_pad[1]],
                [k_dil[0], k_dil[1]],
                groups,
            ),
        ),
        _ => B::conv3d(
            xp,
            kp,
            None,
            ConvOptions::new(
                [strides[0], strides[1], strides[2]],
                [burn_pad[0], burn_pad[1], burn_pad[2]],
                [k_dil[0], k_dil[1], k_dil[2]],
                groups,
            ),
        ),
    };
    in_output_order(&Tensor::wrap(prim, Kind::Float), perm)
}

/// Output positions of a 2-D convolution, at most, for [`by_windows`].
const WINDOWS_MAX_POSITIONS: usize = 64;
/// Kernel positions of a 2-D convolution, at least, for [`by_windows`].
const WINDOWS_MIN_TAPS: usize = 64;
/// Elements of the windows copied side by side, at most (1 GiB of f32).
const WINDOWS_MAX_ELEMENTS: usize = 1 << 28;

/// A 2-D convolution (`x` `[n, c, h, w]`, `k` `[o, c / groups, kh, kw]`) by the vendor
/// library of the device's kernels (cuDNN on NVIDIA GPUs), `None` where there is none or it
/// declines. Input and kernel go to it packed, as one row of their elements each (copied
/// first where they were not: padded rows, permuted views).
fn by_library(
    x: &Tensor,
    k: &Tensor,
    g: &Conv2dGeometry,
    groups: usize,
    precision: super::Precision,
) -> Result<Option<Tensor>> {
    let Some(kernels) = library_kernels(x, k) else {
        return Ok(None);
    };
    let (xs, ks) = (x.shape(), k.shape());
    let Some([oh, ow]) = g.output([xs[2], xs[3]], [ks[2], ks[3]]) else {
        return Ok(None);
    };
    let (flat_x, flat_k) = (one_row(x)?, one_row(k)?);
    let call = ConvCall {
        input: Operand {
            prim: flat_x.operand().prim,
            shape: xs,
        },
        kernel: Operand {
            prim: flat_k.operand().prim,
            shape: ks,
        },
        geometry: *g,
        groups,
        precision,
    };
    Ok(kernels
        .conv2d(&call)?
        .map(|prim| Tensor::from_kernel(prim, vec![xs[0], ks[0], oh, ow])))
}

/// The device kernels of `x` where a vendor library could convolve `x` by `k`: one float type
/// it has (f32, f16, bf16), no empty operand.
fn library_kernels(x: &Tensor, k: &Tensor) -> Option<&'static dyn DeviceKernels> {
    let float = matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16);
    let usable = float && x.dtype() == k.dtype() && x.numel() > 0 && k.numel() > 0;
    usable.then(|| x.kernels()).flatten()
}

/// `t`'s elements as one row, packed whatever its layout (GPU backends pad short rows, and a
/// vendor library's fast kernels want packed tensors; permuted views are strided): a view
/// where `t` was packed, a copy otherwise.
fn one_row(t: &Tensor) -> Result<Tensor> {
    t.reshape(vec![t.numel()])
}

/// The result's `[height, width]` of a 2-D convolution with few output positions under a
/// large kernel, `None` for other convolutions: the shape of a convolution's kernel gradient
/// as Nx's `grad` writes it (the layer's input convolved with the output's gradient as the
/// kernel).
fn few_positions_large_kernel(x: &Tensor, k: &Tensor, g: &Conv2dGeometry) -> Option<[usize; 2]> {
    let (xs, ks) = (x.shape(), k.shape());
    let [oh, ow] = g.output([xs[2], xs[3]], [ks[2], ks[3]])?;
    (oh * ow <= WINDOWS_MAX_POSITIONS && ks[2] * ks[3] >= WINDOWS_MIN_TAPS).then_some([oh, ow])
}

/// A 2-D convolution with few output positions under a large kernel (`x` `[b, c, h, w]`, `k`
/// `[f, c, kh, kw]`, one group), off the host, as the vendor library's kernel gradient of the
/// convolution it is the kernel gradient of: that convolution's input is `x` with its first
/// two axes swapped (`[c, b, h, w]`), its result's gradient `k` likewise (`[c, f, kh, kw]`),
/// its strides are this one's kernel dilations and its dilations this one's strides; its
/// kernel's gradient `[f, b, oh, ow]` is this result with the first two axes swapped. Where
/// `x` and `k` are the swapped views Nx's `grad` makes, swapping back gives packed tensors
/// (no copy). `None` where there is no library or it declines (then [`by_windows`]).
fn by_kernel_gradient(
    x: &Tensor,
    k: &Tensor,
    g: &Conv2dGeometry,
    precision: super::Precision,
) -> Result<Option<Tensor>> {
    let (Some(kernels), Some([oh, ow])) =
        (library_kernels(x, k), few_positions_large_kernel(x, k, g))
    else {
        return Ok(None);
    };
    let swap = [1, 0, 2, 3];
    let input = util::permute(x, &swap)?;
    let grad = util::permute(k, &swap)?;
    let (flat_in, flat_grad) = (one_row(&input)?, one_row(&grad)?);
    let call = KernelGradientCall {
        input: Operand {
            prim: flat_in.operand().prim,
            shape: input.shape(),
        },
        grad: Operand {
            prim: flat_grad.operand().prim,
            shape: grad.shape(),
        },
        kernel: [k.shape()[0], x.shape()[0], oh, ow],
        geometry: Conv2dGeometry {
            strides: g.dilations,
            padding: g.padding,
            dilations: g.strides,
        },
        precision,
    };
    let Some(prim) = kernels.conv2d_kernel_gradient(&call)? else {
        return Ok(None);
    };
    let dw = Tensor::from_kernel(prim, call.kernel.to_vec());
    util::permute(&dw, &swap).map(Some)
}

/// `x` padded with zeros as Nx's `pad` does (`(low, high, interior)` per axis).
fn pad_zeros(x: &Tensor, config: &[(i64, i64, i64)]) -> Result<Tensor> {
    let zero = util::full(&[], x.dtype(), Scalar::I(0), &x.dispatch_device())?;
    super::shape::pad(x, &zero, config)
}

/// A 2-D convolution (`x` `[n, c, h, w]`, `k` `[o, c, kh, kw]`, one group) with few output
/// positions and a large kernel, off the host, as one product: each output position is its
/// input window (`[n, c * kh * kw]`) times the kernel (`[o, c * kh * kw]`), the windows copied
/// side by side. That is the shape of a convolution's kernel gradient as Nx's `grad` writes it
/// (the layer's input convolved with the output's gradient as the kernel), where Burn's GPU
/// convolution gives each output element one thread summing its whole window: 800k products
/// per element for ResNet-50's first layer, 49 ms of a training step on an H200. The product
/// goes through `dot` in full f32 (cuBLAS on NVIDIA GPUs), as accurate as the convolution
/// kernels. `None` where the convolution is not of that shape.
fn by_windows(x: &Tensor, k: &Tensor, g: &Conv2dGeometry) -> Result<Option<Tensor>> {
    let (xs, ks) = (x.shape(), k.shape());
    let (n, c, o) = (xs[0], xs[1], ks[0]);
    let (kh, kw) = (ks[2], ks[3]);
    let span = |i: usize| (ks[2 + i] - 1) * g.dilations[i] + 1;
    let Some([oh, ow]) = few_positions_large_kernel(x, k, g) else {
        return Ok(None);
    };
    let positions = oh * ow;
    let taps = c * kh * kw;
    let copied = positions.saturating_mul(n).saturating_mul(taps);
    if copied > WINDOWS_MAX_ELEMENTS
        || !x.dtype().is_float()
        || x.dtype() != k.dtype()
        || n * o * taps == 0
    {
        return Ok(None);
    }
    // the copies' room on the device, or the convolution kernels, which need none
    let bytes = copied as u128 * x.dtype().size() as u128;
    let _room =
        match crate::memory::reserve(x.device(), bytes, &|| "a convolution's windows".into()) {
            Ok(room) => room,
            Err(e) if e.kind() == "out_of_memory" => return Ok(None),
            Err(e) => return Err(e),
        };
    let x = if g.padding.iter().any(|&p| p > 0) {
        let (ph, pw) = (g.padding[0] as i64, g.padding[1] as i64);
        pad_zeros(x, &[(0, 0, 0), (0, 0, 0), (ph, ph, 0), (pw, pw, 0)])?
    } else {
        x.clone()
    };
    let mut windows = Vec::with_capacity(positions);
    for i in 0..oh {
        for j in 0..ow {
            windows.push(super::shape::slice_static(
                &x,
                &[0, 0, i * g.strides[0], j * g.strides[1]],
                // Nx's slice lengths are spans of the input: `kh` taps `dilation` apart
                &[n, c, span(0), span(1)],
                &[1, 1, g.dilations[0], g.dilations[1]],
            )?);
        }
    }
    // the windows (views) copied once, side by side: [positions * n, c, kh, kw]
    let windows = util::cat(&windows, 0).reshape(vec![positions, n, taps])?;
    let kernel = k.reshape(vec![o, taps])?;
    let spec = super::dot::Contraction {
        contract_a: &[2],
        batch_a: &[],
        contract_b: &[1],
        batch_b: &[],
    };
    // [positions, n, o] -> [n, o, oh, ow]
    let prod = super::dot::dot(&windows, &kernel, &spec, None, super::Precision::Highest)?;
    let res = util::permute(&prod, &[1, 2, 0])?.reshape(vec![n, o, oh, ow])?;
    Ok(Some(res))
}

/// The result in `[batch, features, spatial...]` order put in Nx's `output_permutation`, which
/// names where each axis of the result comes from: transposed by its inverse.
fn in_output_order(res: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let r = res.rank();
    util::permutation(perm, r)?;
    let mut inverse = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    util::permute(res, &inverse)
}
