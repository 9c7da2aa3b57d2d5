//! Adam and AdamW whose update of an f32 parameter is one element-wise kernel on devices
//! with fused kernels of their own (the device-kernel seam's `map_run`): the parameter, its
//! gradient and both moments are read once and each result written once, where Burn's
//! optimizer launches about a dozen kernels and makes a pass over memory for each. Elsewhere
//! (the CPU, other types, kernels that decline) Burn's optimizer runs.
//!
//! The state is Burn's (`AdamState`, `AdamWState`), so saved optimizer states do not change,
//! and every element is computed with Burn's f32 operations in Burn's order (the kernels do
//! not contract products and sums), with the per-step scalars (bias corrections, learning
//! rate) computed on the host as Burn computes them.

use crate::kernels::{Layout, Map, MapRun, Operand, Src, Stage};
use crate::tensor::B;
use burn::optim::{
    Adam, AdamState, AdamW, AdamWState, AdaptiveMomentumState, LearningRate, SimpleOptimizer,
};
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn::DispatchDevice;
use std::sync::Mutex;

thread_local! {
    /// How many parameter updates this thread ran as one fused kernel.
    static FUSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The number of parameter updates this thread ran as one fused kernel (tests tell them from
/// Burn's).
pub fn fused_updates() -> u64 {
    FUSED.with(|c| c.get())
}

/// The settings of an Adam update, as Burn's `AdamConfig`/`AdamWConfig` hold them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// First-moment decay.
    pub beta_1: f32,
    /// Second-moment decay.
    pub beta_2: f32,
    /// Added to the root of the second moment.
    pub epsilon: f32,
    /// Weight decay.
    pub decay: Decay,
}

impl Rule {
    /// The rule of Burn's Adam built from `config` (read through its serialized form, so that
    /// Burn's defaults are the ones in force); `None` with AMSGrad.
    pub fn adam(config: &burn::optim::AdamConfig) -> Option<Rule> {
        let v = serde_json::to_value(config).ok()?;
        let decay = match v.get("weight_decay") {
            None | Some(serde_json::Value::Null) => Decay::None,
            Some(d) => Decay::Penalty(number(d.get("penalty"))?),
        };
        Rule::read(&v, decay)
    }

    /// The rule of Burn's AdamW built from `config`; `None` with AMSGrad or cautious decay.
    pub fn adamw(config: &burn::optim::AdamWConfig) -> Option<Rule> {
        let v = serde_json::to_value(config).ok()?;
        if v.get("cautious_weight_decay") != Some(&serde_json::Value::Bool(false)) {
            return None;
        }
        let decay = Decay::Decoupled(number(v.get("weight_decay"))?);
        Rule::read(&v, decay)
    }

    fn read(v: &serde_json::Value, decay: Decay) -> Option<Rule> {
        if v.get("amsgrad") != Some(&serde_json::Value::Bool(false)) {
            return None;
        }
        Some(Rule {
            beta_1: number(v.get("beta_1"))?,
            beta_2: number(v.get("beta_2"))?,
            epsilon: number(v.get("epsilon"))?,
            decay,
        })
    }
}

/// An f32 setting of a serialized config.
fn number(v: Option<&serde_json::Value>) -> Option<f32> {
    v?.as_f64().map(|x| x as f32)
}

/// Adam's weight decay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decay {
    /// None (Adam without `weight_decay`).
    None,
    /// Adam's L2 penalty: `penalty * parameter` added to the gradient.
    Penalty(f32),
    /// AdamW's decoupled decay: the parameter scaled by `1 - lr * rate` (none at rate 0).
    Decoupled(f32),
}

/// Scalars of one step on one device, uploaded once and shared by every parameter's kernel.
struct Scalars {
    /// Learning rate (bits) and step number they were made for.
    key: (u64, usize),
    device: DispatchDevice,
    values: Vec<Tensor<B, 1>>,
}

/// Burn's `O` (Adam or AdamW) with its update fused where the device allows.
pub struct Fused<O> {
    burn: O,
    /// `None`: settings the fused update does not cover (AMSGrad, cautious decay).
    rule: Option<Rule>,
    scalars: Mutex<Option<Scalars>>,
}

impl<O: Clone> Clone for Fused<O> {
    fn clone(&self) -> Self {
        // each copy (a replica's optimizer lives on another device) keeps its own scalars
        Fused::new(self.burn.clone(), self.rule)
    }
}

impl<O> Fused<O> {
    /// Wraps Burn's optimizer `burn`, built with the settings `rule` describes (`None`:
    /// Burn's update always).
    pub fn new(burn: O, rule: Option<Rule>) -> Self {
        Fused {
            burn,
            rule,
            scalars: Mutex::new(None),
        }
    }

    /// The update of `param` by `grad` as one kernel, with the moments of `state` (`None`: the
    /// first step); `None` where it does not apply (not f32 on a device with fused kernels).
    /// Returns the new parameter and the new moments.
    fn fused<const D: usize>(
        &self,
        lr: LearningRate,
        param: &Tensor<B, D>,
        grad: &Tensor<B, D>,
        state: Option<&AdaptiveMomentumState<B, D>>,
    ) -> Option<(Tensor<B, D>, AdaptiveMomentumState<B, D>)> {
        let rule = self.rule?;
        // the kernels serving the parameter's device (none on the host)
        let (kernels, _) = crate::Device::from_dispatch(&param.device()).kernels()?;
        if !kernels.fusion() || param.dtype() != DType::F32 || grad.dtype() != DType::F32 {
            return None;
        }
        if let Some(s) = state {
            if s.max_moment_2.is_some()
                || s.moment_1.dtype() != DType::F32
                || s.moment_2.dtype() != DType::F32
            {
                return None;
            }
        }
        let shape = param.dims().to_vec();
        if shape.iter().product::<usize>() == 0 || grad.dims().as_slice() != shape {
            return None;
        }
        let time = state.map_or(1, |s| s.time + 1);
        let scalars = self.scalars(rule, lr, time, &param.device())?;
        let prim = |t: &Tensor<B, D>| t.clone().into_primitive().tensor();
        let mut tensors = vec![prim(param), prim(grad)];
        if let Some(s) = state {
            tensors.extend([prim(&s.moment_1), prim(&s.moment_2)]);
        }
        let scalar_prims: Vec<_> = scalars
            .iter()
            .map(|t| t.clone().into_primitive().tensor())
            .collect();
        let one = [1usize];
        let mut operands: Vec<(Operand, Layout)> = tensors
            .iter()
            .map(|p| {
                let o = Operand {
                    prim: p,
                    shape: &shape,
                };
                (o, Layout::Full)
            })
            .collect();
        // the scalars follow the tensors
        let first_scalar = operands.len();
        operands.extend(scalar_prims.iter().map(|p| {
            let o = Operand {
                prim: p,
                shape: &one,
            };
            (o, Layout::Rows(1))
        }));
        let (steps, written) = steps(rule, state.is_some(), first_scalar);
        let run = MapRun {
            steps: &steps,
            operands,
            written: &written,
            shape: &shape,
        };
        let mut out = kernels.map_run(&run).ok()??.into_iter();
        let mut next = || {
            out.next()
                .map(|p| Tensor::<B, D>::from_primitive(TensorPrimitive::Float(p)))
        };
        let (m1, m2, p) = (next()?, next()?, next()?);
        FUSED.with(|c| c.set(c.get() + 1));
        Some((p, AdaptiveMomentumState::new(time, m1, m2)))
    }

    /// The step's scalars on `device` (made once per learning rate, step and device): Adam's
    /// `[combined factor, epsilon * bias correction 2 sqrt, lr]`, AdamW's `[bias correction 1,
    /// bias correction 2, lr, 1 - lr * decay]`, computed as Burn computes them.
    fn scalars(
        &self,
        rule: Rule,
        lr: LearningRate,
        time: usize,
        device: &DispatchDevice,
    ) -> Option<Vec<Tensor<B, 1>>> {
        let key = (lr.to_bits(), time);
        let mut cache = self.scalars.lock().ok()?;
        if let Some(s) = cache.as_ref() {
            if s.key == key && &s.device == device {
                return Some(s.values.clone());
            }
        }
        let t = i32::try_from(time).ok()?;
        let (beta_1, beta_2) = (rule.beta_1, rule.beta_2);
        let values: Vec<f32> = match rule.decay {
            Decay::None | Decay::Penalty(_) => {
                let correction_2 = (1.0 - beta_2.powi(t)).sqrt();
                let combined = correction_2 / (1.0 - beta_1.powi(t));
                vec![combined, rule.epsilon * correction_2, lr as f32]
            }
            Decay::Decoupled(rate) => {
                let keep = 1.0 - lr * f64::from(rate);
                vec![
                    1f32 - beta_1.powi(t),
                    1f32 - beta_2.powi(t),
                    lr as f32,
                    keep as f32,
                ]
            }
        };
        let values: Vec<Tensor<B, 1>> = values
            .into_iter()
            .map(|v| Tensor::from_data(TensorData::new(vec![v], [1]), device))
            .collect();
        *cache = Some(Scalars {
            key,
            device: device.clone(),
            values: values.clone(),
        });
        Some(values)
    }
}

/// The kernel's steps: operands `0` parameter, `1` gradient, then (with `moments`) `2`
/// first and `3` second moment, then the scalars from `s`; and the steps of the new first
/// moment, second moment and parameter.
fn steps(rule: Rule, moments: bool, s: usize) -> (Vec<Stage>, [usize; 3]) {
    use Src::{Const, Ext, Stage as At};
    let Rule {
        beta_1,
        beta_2,
        epsilon,
        decay,
    } = rule;
    let mut steps: Vec<Stage> = Vec::with_capacity(20);
    let mut push = |st: Stage| {
        steps.push(st);
        At(steps.len() - 1)
    };
    let (param, mut grad) = (Ext(0), Ext(1));
    if let Decay::Penalty(p) = decay {
        // Burn: tensor.mul_scalar(penalty).add(grad)
        let scaled = push(Stage::Binary(Map::Mul, param, Const(p)));
        grad = push(Stage::Binary(Map::Add, scaled, grad));
    }
    let fresh_1 = push(Stage::Binary(Map::Mul, grad, Const(1.0 - beta_1)));
    let square = push(Stage::Binary(Map::Mul, grad, grad));
    let fresh_2 = push(Stage::Binary(Map::Mul, square, Const(1.0 - beta_2)));
    let (m1, m2) = if moments {
        let kept_1 = push(Stage::Binary(Map::Mul, Ext(2), Const(beta_1)));
        let kept_2 = push(Stage::Binary(Map::Mul, Ext(3), Const(beta_2)));
        (
            push(Stage::Binary(Map::Add, kept_1, fresh_1)),
            push(Stage::Binary(Map::Add, kept_2, fresh_2)),
        )
    } else {
        // Burn's first step: the fresh parts alone
        (fresh_1, fresh_2)
    };
    let new_param = match decay {
        Decay::None | Decay::Penalty(_) => {
            // m1 * combined / (sqrt(m2) + epsilon * correction_2), times lr
            let a = push(Stage::Binary(Map::Mul, m1, Ext(s)));
            let root = push(Stage::Unary(Map::Sqrt, m2));
            let b = push(Stage::Binary(Map::Add, root, Ext(s + 1)));
            let update = push(Stage::Binary(Map::Div, a, b));
            let delta = push(Stage::Binary(Map::Mul, update, Ext(s + 2)));
            push(Stage::Binary(Map::Sub, param, delta))
        }
        Decay::Decoupled(rate) => {
            // (m1 / c1) / (sqrt(m2 / c2) + epsilon), times lr, from the decayed parameter
            let a = push(Stage::Binary(Map::Div, m1, Ext(s)));
            let b = push(Stage::Binary(Map::Div, m2, Ext(s + 1)));
            let root = push(Stage::Unary(Map::Sqrt, b));
            let c = push(Stage::Binary(Map::Add, root, Const(epsilon)));
            let update = push(Stage::Binary(Map::Div, a, c));
            let delta = push(Stage::Binary(Map::Mul, update, Ext(s + 2)));
            let decayed = if rate == 0.0 {
                param
            } else {
                push(Stage::Binary(Map::Mul, param, Ext(s + 3)))
            };
            push(Stage::Binary(Map::Sub, decayed, delta))
        }
    };
    let index = |v: Src| match v {
        At(k) => k,
        _ => unreachable!("results are steps"),
    };
    let written = [index(m1), index(m2), index(new_param)];
    (steps, written)
}

/// `SimpleOptimizer` for `Fused<$optim>`, whose state `$state` holds the moments in its
/// `momentum` field.
macro_rules! fused_optimizer {
    ($optim:ty, $state:ident) => {
        impl SimpleOptimizer<B> for Fused<$optim> {
            type State<const D: usize> = $state<B, D>;

            fn step<const D: usize>(
                &self,
                lr: LearningRate,
                tensor: Tensor<B, D>,
                grad: Tensor<B, D>,
                state: Option<Self::State<D>>,
            ) -> (Tensor<B, D>, Option<Self::State<D>>) {
                let moments = state.as_ref().map(|s| &s.momentum);
                match self.fused(lr, &tensor, &grad, moments) {
                    Some((p, momentum)) => (p, Some($state { momentum })),
                    None => self.burn.step(lr, tensor, grad, state),
                }
            }

            fn to_device<const D: usize>(
                state: Self::State<D>,
                device: &DispatchDevice,
            ) -> Self::State<D> {
                <$optim as SimpleOptimizer<B>>::to_device(state, device)
            }
        }
    };
}

fused_optimizer!(Adam, AdamState);
fused_optimizer!(AdamW, AdamWState);
