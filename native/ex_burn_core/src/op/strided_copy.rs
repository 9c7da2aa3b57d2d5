//! Row-major copies of strided f32 views on the CPU, spread over the compute threads.
//!
//! Reshaping a view whose layout no other strides express (a `[b, heads, s, d]` tensor
//! transposed to `[b, s, heads, d]`, then merged to `[b, s, heads * d]`: attention's heads put
//! back together) copies it. Burn's CPU backend copies layouts that do not collapse to two
//! axes one element at a time through a strided index, on one thread: 32 ms for 8 x 512 x 768
//! values on a 16-core Xeon. Here the innermost axis (of unit stride) is copied a run at a
//! time, the runs over the compute threads.

use super::view::View;
use crate::tensor::prim_shape;
use crate::{DType, Device, Result, Tensor};
use burn::tensor::TensorData;

/// Copies smaller than this many elements run on the calling thread.
const PARALLEL_FROM: usize = 1 << 16;

/// Elements (whole runs) a task copies at least: a run alone is too little work to hand over.
const TASK: usize = 1 << 14;

/// Runs shorter than this many elements are left to Burn's copy (its tiled transposes of
/// two-axis layouts are quick, and short runs gain nothing here).
const MIN_RUN: usize = 8;

/// The shape and strides of a layout with unit axes dropped and adjacent axes merged where
/// one steps over the other exactly (`stride[i] == stride[i + 1] * shape[i + 1]`).
fn collapse(shape: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
    let (mut dims, mut steps): (Vec<usize>, Vec<isize>) = (Vec::new(), Vec::new());
    for (&d, &s) in shape.iter().zip(strides).filter(|(&d, _)| d != 1) {
        match (dims.last_mut(), steps.last_mut()) {
            (Some(ld), Some(ls)) if *ls == s * d as isize => {
                *ld *= d;
                *ls = s;
            }
            _ => {
                dims.push(d);
                steps.push(s);
            }
        }
    }
    (dims, steps)
}

/// `t` reshaped to `shape`: a strided f32 view on the CPU that no other strides express is
/// first copied here, in parallel a run at a time (Burn's copy walks such layouts one element
/// at a time); anything else as [`Tensor::reshape`] does it.
pub(crate) fn reshape(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if crate::size::numel(shape)? == t.numel() as u128 && t.host_reshape_copies(shape) {
        if let Some(c) = contiguous_f32(t)? {
            return c.reshape(shape.to_vec());
        }
    }
    t.reshape(shape.to_vec())
}

/// `t` (an f32 host tensor of any layout) in row-major order as a new tensor of its shape, when
/// its innermost run (after merging axes) has unit stride and at least [`MIN_RUN`]
/// elements, all strides are non-negative and it is not contiguous already; `None` otherwise.
pub(crate) fn contiguous_f32(t: &Tensor) -> Result<Option<Tensor>> {
    let Some(out) = contiguous_f32_values(t)? else {
        return Ok(None);
    };
    let shape = t.shape().to_vec();
    let data = TensorData::new(out, prim_shape(&shape));
    Tensor::from_data(data, DType::F32, shape, Device::Cpu).map(Some)
}

/// [`contiguous_f32`]'s values, without making a tensor of them.
pub(crate) fn contiguous_f32_values(t: &Tensor) -> Result<Option<Vec<f32>>> {
    let Some(v) = View::of_f32(t) else {
        return Ok(None);
    };
    if v.strides.len() != t.rank() || v.strides.iter().any(|&s| s < 0) || t.numel() == 0 {
        return Ok(None);
    }
    let (dims, steps) = collapse(t.shape(), &v.strides);
    let (Some(&run), Some(&1)) = (dims.last(), steps.last()) else {
        return Ok(None);
    };
    // the same storage read over the merged axes, every element of it inside the storage
    let v = View {
        strides: steps,
        ..v
    };
    if dims.len() < 2 || run < MIN_RUN || !v.fits(&dims) {
        return Ok(None);
    }
    let n = t.numel();
    let outer = &dims[..dims.len() - 1];
    // the source offset of run `r` (row-major over the outer axes)
    let start = |r: usize| v.base(r, outer) as usize;
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    // tasks of whole runs, at least TASK elements each
    let per_task = TASK.div_ceil(run) * run;
    let copy = |(i, dst): (usize, &mut [std::mem::MaybeUninit<f32>])| {
        let first = i * (per_task / run);
        for (k, part) in dst.chunks_mut(run).enumerate() {
            let at = start(first + k);
            for (d, &x) in part.iter_mut().zip(&v.data[at..at + run]) {
                d.write(x);
            }
        }
    };
    if n >= PARALLEL_FROM {
        crate::threads::for_each_chunk_mut(spare, per_task, |i, dst| copy((i, dst)))?;
    } else {
        spare.chunks_mut(per_task).enumerate().for_each(copy);
    }
    // SAFETY: the runs cover all `n` elements, each written above.
    unsafe { out.set_len(n) };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{self, Op};

    fn host(values: Vec<f32>, shape: &[usize]) -> Tensor {
        let data = TensorData::new(values, shape.to_vec());
        Tensor::from_data(data, DType::F32, shape.to_vec(), Device::Cpu).unwrap()
    }

    /// Axes that step over each other merge; unit axes drop.
    #[test]
    fn layouts_collapse_to_their_runs() {
        assert_eq!(
            collapse(&[8, 12, 512, 64], &[393216, 32768, 64, 1]),
            (vec![8 * 12 * 512 * 64], vec![1])
        );
        assert_eq!(
            collapse(&[8, 512, 12, 64], &[393216, 64, 32768, 1]),
            (vec![8, 512, 12, 64], vec![393216, 64, 32768, 1])
        );
        assert_eq!(
            collapse(&[2, 1, 3, 4], &[12, 99, 4, 1]),
            (vec![24], vec![1])
        );
    }

    /// A transposed view copied here equals Burn's copy of it, element for element, for
    /// permutations that keep the last axis last (copied here) and one that does not (left
    /// to Burn: `None`).
    #[test]
    fn permuted_views_copy_as_burn_copies_them() {
        let shape = [3, 4, 5, 16];
        let values: Vec<f32> = (0..3 * 4 * 5 * 16).map(|i| i as f32 * 0.5 - 7.0).collect();
        let x = host(values, &shape);
        for (perm, here) in [
            (vec![0, 2, 1, 3], true),
            (vec![2, 0, 1, 3], true),
            (vec![1, 0, 2, 3], true),
            (vec![0, 1, 3, 2], false),
        ] {
            let p = op::eval(
                &Op::Transpose {
                    axes: Some(perm.clone()),
                },
                std::slice::from_ref(&x),
                Device::Cpu,
            )
            .unwrap()
            .remove(0);
            let copied = contiguous_f32(&p).unwrap();
            assert_eq!(copied.is_some(), here, "{perm:?}");
            if let Some(c) = copied {
                assert_eq!(c.shape(), p.shape());
                assert_eq!(c.to_f32_vec().unwrap(), p.to_f32_vec().unwrap(), "{perm:?}");
                assert!(c.host_f32().is_some(), "{perm:?}: contiguous");
            }
        }
        // contiguous already: nothing to do
        assert!(contiguous_f32(&x).unwrap().is_none());
        // large enough for the threads, runs (24) not dividing a task: the last task partial
        let shape = [8, 12, 40, 24];
        let n: usize = shape.iter().product();
        let big = host((0..n).map(|i| (i % 977) as f32).collect(), &shape);
        let p = op::eval(
            &Op::Transpose {
                axes: Some(vec![0, 2, 1, 3]),
            },
            &[big],
            Device::Cpu,
        )
        .unwrap()
        .remove(0);
        let c = contiguous_f32(&p).unwrap().expect("copied here");
        assert_eq!(c.to_f32_vec().unwrap(), p.to_f32_vec().unwrap());
        // the reshape op: heads merged, the values of Burn's reshape of the view
        let merged = reshape(&p, &[8, 40, 12 * 24]).unwrap();
        assert_eq!(merged.shape(), &[8, 40, 288]);
        assert!(merged.host_f32().is_some(), "copied here: contiguous");
        assert_eq!(
            merged.to_f32_vec().unwrap(),
            p.reshape(vec![8, 40, 288]).unwrap().to_f32_vec().unwrap()
        );
        // a size that does not match: the reshape's own error, not a panic
        assert!(reshape(&p, &[7, 40, 288]).is_err());
    }
}
