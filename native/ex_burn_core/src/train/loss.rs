//! Losses and the accuracy metric. Cross-entropy and binary cross-entropy use the logits
//! before a final softmax/sigmoid when the model ends in one (numerically stable), and
//! accept probabilities otherwise.

use super::net::Value;
use super::spec::{Activation, LayerOp, ModelSpec};
use crate::tensor::B;
use crate::{Error, Result};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, DType, Int, Tensor};
use serde::{Deserialize, Serialize};

/// A training loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// Categorical cross-entropy; targets are class ids `[batch]` or one-hot `[batch, classes]`.
    CrossEntropy,
    /// Mean squared error.
    Mse,
    /// Binary cross-entropy on probabilities (or logits before a final sigmoid).
    BinaryCrossEntropy,
}

/// What the loss reads from the output layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// The output as is.
    Output,
    /// The input of a final softmax (logits).
    SoftmaxLogits,
    /// The output of a final log_softmax.
    LogProbs,
    /// The input of a final sigmoid (logits).
    SigmoidLogits,
}

/// Decides which value the loss reads for `spec`.
pub fn head(spec: &ModelSpec, loss: Loss) -> Head {
    match (&spec.layers[spec.output].op, loss) {
        (
            LayerOp::Activation {
                activation: Activation::Softmax,
                ..
            },
            Loss::CrossEntropy,
        ) => Head::SoftmaxLogits,
        (
            LayerOp::Activation {
                activation: Activation::LogSoftmax,
                ..
            },
            Loss::CrossEntropy,
        ) => Head::LogProbs,
        (
            LayerOp::Activation {
                activation: Activation::Sigmoid,
                ..
            },
            Loss::BinaryCrossEntropy,
        ) => Head::SigmoidLogits,
        _ => Head::Output,
    }
}

/// Targets of a batch: class ids or float values.
#[derive(Clone, Debug)]
pub enum Target {
    /// Class ids `[batch]`.
    Classes(Tensor<B, 1, Int>),
    /// Float targets (one-hot, regression values), same rank as the output.
    Values(Value),
}

fn as2(v: &Value) -> Result<Tensor<B, 2>> {
    v.to::<2>()
}

/// Lifts a constant of the plain device onto the autodiff graph when `ad`.
fn lift<const D: usize>(t: Tensor<B, D>, ad: bool) -> Tensor<B, D> {
    if ad {
        Tensor::from_inner(t)
    } else {
        t
    }
}

/// The mean loss over the batch. `value` is what `head` says the loss reads; `ad` tells
/// whether it lives on an autodiff device (class ids always live on the plain one).
pub fn compute(
    loss: Loss,
    head: Head,
    value: &Value,
    target: &Target,
    ad: bool,
) -> Result<Tensor<B, 1>> {
    match loss {
        Loss::CrossEntropy => {
            let x = as2(value)?;
            if let Target::Classes(ids) = target {
                if head != Head::LogProbs && x.dtype() == DType::F32 {
                    return Ok(class_cross_entropy(x, ids, ad));
                }
            }
            let logp = match head {
                Head::LogProbs => x,
                Head::SoftmaxLogits => log_softmax(x, 1),
                // Probabilities (or unnormalised scores) from a model without a final softmax:
                // treated as logits, which is what a linear output layer produces.
                _ => log_softmax(x, 1),
            };
            let [_n, c] = logp.dims();
            match target {
                Target::Classes(ids) if logp.dtype() == DType::F32 => {
                    // Log-probabilities given: one gather, no mask (ids were range-checked by
                    // `Model::check_classes`).
                    let [n, _] = logp.dims();
                    let idx = lift_ids(ids.clone().reshape([n, 1]), ad);
                    Ok(logp.gather(1, idx).reshape([n]).mean().neg())
                }
                Target::Classes(ids) => {
                    // Other float types: a one-hot mask in the model's type (a gather's backward
                    // pass would produce gradients in the default float type, f32).
                    let onehot = lift(one_hot(ids, c, logp.dtype()), ad);
                    Ok(logp.mul(onehot).sum_dim(1).mean().neg())
                }
                Target::Values(t) => Ok(logp.mul(as2(t)?).sum_dim(1).mean().neg()),
            }
        }
        Loss::Mse => {
            let t = match target {
                Target::Values(t) => t,
                Target::Classes(_) => return Err(Error::Dtype("mse needs float targets".into())),
            };
            let (o, t) = (flat(value)?, flat(t)?);
            Ok(o.sub(t).powi_scalar(2).mean())
        }
        Loss::BinaryCrossEntropy => {
            let z = flat(value)?;
            let t = match target {
                Target::Values(t) => flat(t)?,
                Target::Classes(ids) => lift(ids.clone().float().cast(z.dtype()), ad),
            };
            if head == Head::SigmoidLogits {
                // max(z, 0) - z*y + log(1 + exp(-|z|))
                let l = z
                    .clone()
                    .clamp_min(0.0)
                    .sub(z.clone().mul(t))
                    .add(z.abs().neg().exp().log1p());
                Ok(l.mean())
            } else {
                let p = z.clamp(1e-7, 1.0 - 1e-7);
                let one_minus = p.clone().neg().add_scalar(1.0);
                let l = t
                    .clone()
                    .mul(p.log())
                    .add(t.neg().add_scalar(1.0).mul(one_minus.log()));
                Ok(l.mean().neg())
            }
        }
    }
}

/// Mean cross-entropy of f32 logits `x` `[n, classes]` against class ids, as
/// `mean(logsumexp(x) - x[id])` with the row maximum subtracted first: the same value as
/// Burn's `CrossEntropyLoss` (`-mean(log_softmax(x)[id])`, whose rounding it shares), in
/// fewer kernels (no `[n, classes]` subtraction of the log-sum-exp, no negation; its
/// backward pass needs no broadcast reduction). On a GPU every kernel is several
/// microseconds of host time per step.
fn class_cross_entropy(x: Tensor<B, 2>, ids: &Tensor<B, 1, Int>, ad: bool) -> Tensor<B, 1> {
    let [n, _] = x.dims();
    let max = x.clone().detach().max_dim(1);
    let shifted = x.sub(max);
    let lse = shifted.clone().exp().sum_dim(1).log();
    let idx = lift_ids(ids.clone().reshape([n, 1]), ad);
    lse.sub(shifted.gather(1, idx)).reshape([n]).mean()
}

/// Moves class ids onto the autodiff graph (as a constant) when `ad`.
fn lift_ids(ids: Tensor<B, 2, Int>, ad: bool) -> Tensor<B, 2, Int> {
    if ad {
        Tensor::from_inner(ids)
    } else {
        ids
    }
}

/// `[n, classes]` rows with 1 at each class id, built on the device. Burn's `one_hot` reads
/// the ids back to the host (two device syncs per batch); callers check ids beforehand
/// (`Model::check_classes`), an id outside `0..classes` gives a row of zeros.
fn one_hot(ids: &Tensor<B, 1, Int>, classes: usize, dtype: DType) -> Tensor<B, 2> {
    let [n] = ids.dims();
    let device = ids.device();
    let ids = ids
        .clone()
        .float()
        .cast(dtype)
        .reshape([n, 1])
        .expand([n, classes]);
    let range = Tensor::<B, 1, Int>::arange(0..classes as i64, &device)
        .float()
        .cast(dtype)
        .reshape([1, classes])
        .expand([n, classes]);
    ids.equal(range).float().cast(dtype)
}

fn flat(v: &Value) -> Result<Tensor<B, 1>> {
    match v {
        Value::Float(..) => {
            let s = match v {
                Value::Float(_, s) => s.clone(),
                _ => unreachable!("matched above"),
            };
            let n: usize = s.iter().product();
            Ok(match s.len() {
                1 => v.to::<1>()?,
                2 => v.to::<2>()?.reshape([n]),
                3 => v.to::<3>()?.reshape([n]),
                4 => v.to::<4>()?.reshape([n]),
                r => return Err(Error::Unsupported(format!("targets of rank {r}"))),
            })
        }
        Value::Ids(_) => Err(Error::Dtype("expected float values".into())),
    }
}

/// The value as a plain (non-autodiff) tensor.
fn plain<const D: usize>(t: Tensor<B, D>, ad: bool) -> Tensor<B, D> {
    if ad {
        t.inner()
    } else {
        t
    }
}

/// Number of correct predictions in the batch (classification: argmax; binary: p > 0.5 or
/// logit > 0), as a plain-device tensor so no device sync is needed per batch.
pub fn correct(
    loss: Loss,
    head: Head,
    value: &Value,
    target: &Target,
    ad: bool,
) -> Result<Tensor<B, 1, Bool>> {
    match loss {
        Loss::BinaryCrossEntropy => {
            let z = plain(flat(value)?, ad);
            let pred = if head == Head::SigmoidLogits {
                z.greater_elem(0.0)
            } else {
                z.greater_elem(0.5)
            };
            let t = match target {
                Target::Values(t) => plain(flat(t)?, ad).greater_elem(0.5),
                Target::Classes(ids) => ids.clone().greater_elem(0),
            };
            Ok(pred.equal(t))
        }
        _ => {
            let x = plain(as2(value)?, ad);
            let [n, _] = x.dims();
            let pred = x.argmax(1).reshape([n]);
            let truth = match target {
                Target::Classes(ids) => ids.clone(),
                Target::Values(t) => plain(as2(t)?, ad).argmax(1).reshape([n]),
            };
            Ok(pred.equal(truth))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::tensor::{Distribution, TensorData};

    /// Value and gradient of ExBurn's class cross-entropy against Burn's `CrossEntropyLoss`.
    #[test]
    fn class_cross_entropy_matches_burns_loss() {
        let plain = burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice);
        let ad = burn::DispatchDevice::autodiff(plain.clone());
        let logits = Tensor::<B, 2>::random([37, 11], Distribution::Normal(0.0, 3.0), &plain);
        let ids: Vec<i32> = (0..37).map(|i| i * 7 % 11).collect();
        let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [37]), &plain);
        let run = |ours: bool| {
            let x = Tensor::<B, 2>::from_inner(logits.clone()).require_grad();
            let loss = if ours {
                class_cross_entropy(x.clone(), &ids, true)
            } else {
                let ids = Tensor::from_inner(ids.clone());
                CrossEntropyLossConfig::new()
                    .init(&ad)
                    .forward(x.clone(), ids)
            };
            let grads = loss.backward();
            let g = x
                .grad(&grads)
                .expect("gradient")
                .into_data()
                .to_vec::<f32>();
            (loss.inner().into_scalar(), g.expect("f32"))
        };
        let ((ours, g_ours), (burns, g_burns)) = (run(true), run(false));
        assert_eq!(ours, burns, "loss");
        assert!(ours > 0.0);
        for (a, b) in g_ours.iter().zip(&g_burns) {
            assert!(
                (a - b).abs() <= 1e-7 + 1e-6 * b.abs(),
                "gradient {a} vs {b}"
            );
        }
    }
}
