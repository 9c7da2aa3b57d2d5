//! Sums across devices (all-reduce), for data-parallel training: the device family's
//! collective library where its kernels offer one ([`crate::kernels::DeviceKernels::all_reduce`],
//! NCCL for CUDA), else copies to the first device, a sum there and copies back.

use crate::tensor::B;
use crate::{Error, Result, Tensor};
use burn::tensor::ops::FloatTensorOps;

/// Replaces every tensor of each set by the set's sum, on the tensor's own device. Every set
/// holds one float tensor per participant, of one shape and type, the participants' devices in
/// the same order in every set. A device may appear more than once (its copies are summed
/// through the first device).
pub fn all_reduce(sets: Vec<Vec<Tensor>>) -> Result<Vec<Vec<Tensor>>> {
    let Some(first) = sets.first() else {
        return Ok(sets);
    };
    let devices: Vec<_> = first.iter().map(Tensor::device).collect();
    for set in &sets {
        let same = set.len() == devices.len()
            && set.iter().zip(&devices).all(|(t, d)| {
                t.device() == *d
                    && t.dtype().is_float()
                    && t.shape() == set[0].shape()
                    && t.dtype() == set[0].dtype()
            });
        if !same {
            return Err(Error::Argument(
                "all_reduce takes sets of float tensors of one shape and type, one per device \
                 in the same order"
                    .into(),
            ));
        }
    }
    if devices.len() < 2 {
        return Ok(sets);
    }
    let distinct = devices
        .iter()
        .enumerate()
        .all(|(i, d)| !devices[..i].contains(d));
    let family = devices[0].family();
    if distinct && devices.iter().all(|d| d.family() == family) {
        if let Some(k) = crate::kernels::serving(family) {
            let operands: Vec<Vec<_>> = sets
                .iter()
                .map(|set| set.iter().map(Tensor::operand).collect())
                .collect();
            if let Some(out) = k.all_reduce(&operands)? {
                return Ok(out
                    .into_iter()
                    .zip(&sets)
                    .map(|(prims, set)| {
                        prims
                            .into_iter()
                            .zip(set)
                            .map(|(p, t)| Tensor::from_kernel(p, t.shape().to_vec()))
                            .collect()
                    })
                    .collect());
            }
        }
    }
    sets.into_iter().map(through_first).collect()
}

/// The sum of `set` on its first tensor's device, copied back to every participant.
fn through_first(set: Vec<Tensor>) -> Result<Vec<Tensor>> {
    let home = set[0].device();
    let mut sum = set[0].prim();
    for t in &set[1..] {
        sum = B::float_add(sum, t.to_device(home)?.prim());
    }
    let sum = Tensor::from_kernel(sum, set[0].shape().to_vec());
    set.iter()
        .map(|t| {
            if t.device() == home {
                Ok(sum.clone())
            } else {
                sum.to_device(t.device())
            }
        })
        .collect()
}
