//! The trainable network: Burn modules for the layers that hold parameters, and a forward
//! pass that interprets the model graph (rank-free values, Burn's high-level ops where a rank
//! is needed).

use super::spec::{self, Activation, Channels, LayerOp, ModelSpec, Padding};
use crate::rng::SplitMix64;
use crate::tensor::B as Db;
use crate::{Error, Result};
use burn::module::{Module, Param};
use burn::nn::{BatchNorm, BatchNormConfig, Embedding, LayerNorm, LayerNormConfig};
use burn::tensor::activation;
use burn::tensor::module::{
    avg_pool1d, avg_pool2d, conv1d, conv2d, linear, max_pool1d, max_pool2d,
};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Int, Shape, Tensor, TensorData};
use burn::DispatchDevice;

/// A dense layer's parameters (`kernel` is `[in, out]`, as in Axon).
#[derive(Module, Debug)]
pub struct Dense<B: burn::tensor::backend::Backend> {
    /// `[in, out]`.
    pub kernel: Param<Tensor<B, 2>>,
    /// `[out]`.
    pub bias: Option<Param<Tensor<B, 1>>>,
}

/// A 1d convolution's parameters (`kernel` is `[out, in, k]`).
#[derive(Module, Debug)]
pub struct Conv1<B: burn::tensor::backend::Backend> {
    /// `[out, in, k]`.
    pub kernel: Param<Tensor<B, 3>>,
    /// `[out]`.
    pub bias: Option<Param<Tensor<B, 1>>>,
}

/// A 2d convolution's parameters (`kernel` is `[out, in, kh, kw]`).
#[derive(Module, Debug)]
pub struct Conv2<B: burn::tensor::backend::Backend> {
    /// `[out, in, kh, kw]`.
    pub kernel: Param<Tensor<B, 4>>,
    /// `[out]`.
    pub bias: Option<Param<Tensor<B, 1>>>,
}

/// All parameters of a model, grouped by layer kind; `slots` maps each layer of the spec to
/// its entry in the matching list.
#[derive(Module, Debug)]
pub struct Net<B: burn::tensor::backend::Backend> {
    /// Dense layers.
    pub dense: Vec<Dense<B>>,
    /// 1d convolutions.
    pub conv1: Vec<Conv1<B>>,
    /// 2d convolutions.
    pub conv2: Vec<Conv2<B>>,
    /// Batch norms.
    pub bn: Vec<BatchNorm<B>>,
    /// Layer norms.
    pub ln: Vec<LayerNorm<B>>,
    /// Embeddings.
    pub emb: Vec<Embedding<B>>,
}

/// Index of each layer's parameters in its kind's list (`None` for parameter-free layers).
pub type Slots = Vec<Option<usize>>;

fn glorot(shape: [usize; 2], fan_in: usize, fan_out: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let limit = (6.0 / (fan_in + fan_out) as f64).sqrt();
    (0..shape[0] * shape[1])
        .map(|_| ((rng.uniform() * 2.0 - 1.0) * limit) as f32)
        .collect()
}

fn tensor<const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &DispatchDevice,
) -> Tensor<Db, D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// Builds the parameters of `spec` with Glorot-uniform kernels and zero biases from `seed`
/// (the same values on every device).
pub fn build(spec: &ModelSpec, seed: u64, device: &DispatchDevice) -> Result<(Net<Db>, Slots)> {
    let shapes = spec.infer_shapes()?;
    let mut rng = SplitMix64::new(seed);
    let mut net = Net {
        dense: vec![],
        conv1: vec![],
        conv2: vec![],
        bn: vec![],
        ln: vec![],
        emb: vec![],
    };
    let mut slots = Vec::with_capacity(spec.layers.len());
    for (i, l) in spec.layers.iter().enumerate() {
        let params = spec.params_of(i, &shapes);
        let zeros = |n: usize| Param::from_tensor(tensor(vec![0.0; n], [n], device));
        let slot = match &l.op {
            LayerOp::Dense { units, use_bias } => {
                let fan_in = params[0].1[0];
                let k = glorot([fan_in, *units], fan_in, *units, &mut rng);
                net.dense.push(Dense {
                    kernel: Param::from_tensor(tensor(k, [fan_in, *units], device)),
                    bias: use_bias.then(|| zeros(*units)),
                });
                Some(net.dense.len() - 1)
            }
            LayerOp::Conv {
                filters,
                kernel_size,
                use_bias,
                ..
            } => {
                let ks = &params[0].1;
                let receptive: usize = kernel_size.iter().product();
                let (fan_in, fan_out) = (ks[1] * receptive, filters * receptive);
                let k = glorot([ks.iter().product::<usize>(), 1], fan_in, fan_out, &mut rng);
                let bias = use_bias.then(|| zeros(*filters));
                if kernel_size.len() == 1 {
                    net.conv1.push(Conv1 {
                        kernel: Param::from_tensor(tensor(k, [ks[0], ks[1], ks[2]], device)),
                        bias,
                    });
                    Some(net.conv1.len() - 1)
                } else {
                    net.conv2.push(Conv2 {
                        kernel: Param::from_tensor(tensor(k, [ks[0], ks[1], ks[2], ks[3]], device)),
                        bias,
                    });
                    Some(net.conv2.len() - 1)
                }
            }
            LayerOp::BatchNorm {
                epsilon, momentum, ..
            } => {
                let c = params[0].1[0];
                net.bn.push(
                    BatchNormConfig::new(c)
                        .with_epsilon(*epsilon)
                        .with_momentum(*momentum)
                        .init(device),
                );
                Some(net.bn.len() - 1)
            }
            LayerOp::LayerNorm { epsilon } => {
                let c = params[0].1[0];
                net.ln
                    .push(LayerNormConfig::new(c).with_epsilon(*epsilon).init(device));
                Some(net.ln.len() - 1)
            }
            LayerOp::Embedding {
                vocab_size,
                embedding_size,
            } => {
                let k = glorot(
                    [*vocab_size, *embedding_size],
                    *vocab_size,
                    *embedding_size,
                    &mut rng,
                );
                net.emb.push(Embedding {
                    weight: Param::from_tensor(tensor(k, [*vocab_size, *embedding_size], device)),
                });
                Some(net.emb.len() - 1)
            }
            _ => None,
        };
        slots.push(slot);
    }
    Ok((net, slots))
}

/// A value flowing through the graph: a float tensor of any rank (batch axis first), or the
/// integer ids an embedding reads.
#[derive(Clone, Debug)]
pub enum Value {
    /// Float activations.
    Float(burn::tensor::TensorPrimitive<Db>, Vec<usize>),
    /// Integer ids.
    Ids(Tensor<Db, 2, Int>),
}

impl Value {
    /// Wraps a float tensor of rank `D`.
    pub fn float<const D: usize>(t: Tensor<Db, D>) -> Value {
        let shape = t.dims().to_vec();
        Value::Float(t.into_primitive(), shape)
    }

    fn shape(&self) -> Vec<usize> {
        match self {
            Value::Float(_, s) => s.clone(),
            Value::Ids(t) => t.dims().to_vec(),
        }
    }

    /// The float tensor as rank `D` (reshaping when the rank differs).
    pub fn to<const D: usize>(&self) -> Result<Tensor<Db, D>> {
        match self {
            Value::Float(p, s) => {
                let t: Tensor<Db, D> = if s.len() == D {
                    Tensor::from_primitive(p.clone())
                } else {
                    return Err(Error::Shape(format!(
                        "expected a rank-{D} value, got shape {s:?}"
                    )));
                };
                Ok(t)
            }
            Value::Ids(_) => Err(Error::Dtype(
                "integer ids can only feed an embedding layer".into(),
            )),
        }
    }

    /// The value as a rank-`D` tensor of `shape`: no reshape op (nor autodiff node) when it
    /// already has that shape, as dense layers on `[batch, features]` inputs do every step.
    fn reshaped<const D: usize>(&self, shape: [usize; D]) -> Result<Tensor<Db, D>> {
        match self {
            Value::Float(_, s) if s.as_slice() == shape.as_slice() => self.to::<D>(),
            Value::Float(p, s) => match s.len() {
                1 => Ok(Tensor::<Db, 1>::from_primitive(p.clone()).reshape(shape)),
                2 => Ok(Tensor::<Db, 2>::from_primitive(p.clone()).reshape(shape)),
                3 => Ok(Tensor::<Db, 3>::from_primitive(p.clone()).reshape(shape)),
                4 => Ok(Tensor::<Db, 4>::from_primitive(p.clone()).reshape(shape)),
                5 => Ok(Tensor::<Db, 5>::from_primitive(p.clone()).reshape(shape)),
                r => Err(Error::Unsupported(format!("activations of rank {r}"))),
            },
            Value::Ids(_) => Err(Error::Dtype(
                "integer ids can only feed an embedding layer".into(),
            )),
        }
    }

    /// Applies a rank-generic function by dispatching on the rank (2 to 5).
    fn map_any(&self, f: impl AnyRank) -> Result<Value> {
        let s = self.shape();
        Ok(match s.len() {
            2 => Value::float(f.apply(self.to::<2>()?)),
            3 => Value::float(f.apply(self.to::<3>()?)),
            4 => Value::float(f.apply(self.to::<4>()?)),
            5 => Value::float(f.apply(self.to::<5>()?)),
            r => return Err(Error::Unsupported(format!("activations of rank {r}"))),
        })
    }
}

/// A function over float tensors of any rank.
trait AnyRank {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D>;
}

struct Act(Activation, f64);

/// `1 / (1 + exp(-x))` in the tensor's own type.
fn f64_sigmoid<const D: usize>(t: Tensor<Db, D>) -> Tensor<Db, D> {
    t.neg().exp().add_scalar(1.0).recip()
}

/// Activations follow Nx (Axon's definitions on `Nx.BinaryBackend`) on NaN and infinities.
/// Burn's CPU `relu` is `f32::max(x, 0)`, which turns NaN into 0: a NaN input then trained
/// silently into NaN weights. Comparing and masking keeps NaN (`NaN <= 0` is false).
impl AnyRank for Act {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D> {
        match self.0 {
            Activation::Relu => {
                let negative = t.clone().lower_equal_elem(0.0);
                t.mask_fill(negative, 0.0)
            }
            // Burn's sigmoid computes in f32; f64 models compute it in f64.
            Activation::Sigmoid if t.dtype() == burn::tensor::DType::F64 => f64_sigmoid(t),
            Activation::Silu if t.dtype() == burn::tensor::DType::F64 => {
                t.clone().mul(f64_sigmoid(t))
            }
            Activation::Sigmoid => activation::sigmoid(t),
            Activation::Tanh => activation::tanh(t),
            Activation::Softmax => activation::softmax(t, D - 1),
            Activation::LogSoftmax => activation::log_softmax(t, D - 1),
            Activation::Gelu => activation::gelu(t),
            Activation::Silu => activation::silu(t),
            Activation::LeakyRelu => activation::leaky_relu(t, self.1),
            Activation::Elu => {
                // exp of the non-positive part only: exp(x) of a large x is infinite, and the
                // masked-out branch's gradient 0 * inf would be NaN.
                let mask = t.clone().greater_elem(0.0);
                let neg = t.clone().mask_fill(mask.clone(), 0.0);
                let neg = neg.exp().sub_scalar(1.0).mul_scalar(self.1);
                neg.mask_where(mask, t)
            }
            Activation::Linear => t,
        }
    }
}

struct Dropout(f64);

impl AnyRank for Dropout {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D> {
        // Dropped elements are 0 as in Axon (`select`), NaN and infinities included: a
        // multiplication by 0 would make them NaN.
        let keep = 1.0 - self.0;
        let kept = t.random_like(burn::tensor::Distribution::Bernoulli(keep));
        t.mask_fill(kept.equal_elem(0.0), 0.0).div_scalar(keep)
    }
}

struct Norm<'a>(&'a BatchNorm<Db>, usize);

impl AnyRank for Norm<'_> {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D> {
        // Burn's batch norm wants channels on axis 1.
        let axis = self.1;
        if axis == 1 {
            self.0.forward(t)
        } else {
            self.0.forward(t.swap_dims(1, axis)).swap_dims(1, axis)
        }
    }
}

struct LNorm<'a>(&'a LayerNorm<Db>);

impl AnyRank for LNorm<'_> {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D> {
        self.0.forward(t)
    }
}

/// NaN where `t` is NaN and 0 elsewhere, outside the autodiff graph. Its average pool, added
/// to a max pool, makes a NaN anywhere in a window the window's value, as in Nx's `window_max`
/// (Burn's CPU max pool keeps a NaN only when it comes first in its window).
fn nan_only<const D: usize>(t: &Tensor<Db, D>) -> Tensor<Db, D> {
    let x = t.clone().detach();
    let finite_or_inf = x.clone().is_nan().bool_not();
    x.mask_fill(finite_or_inf, 0.0)
}

/// Same-padding amounts (low, high) for one axis, TensorFlow/Axon style.
fn same_pad(input: usize, k: usize, stride: usize, dilation: usize) -> (usize, usize) {
    let out = input.div_ceil(stride);
    let span = (k - 1) * dilation + 1;
    let total = ((out - 1) * stride + span).saturating_sub(input);
    (total / 2, total - total / 2)
}

/// Runs the graph on `inputs` (one per input layer, in order) up to layer `until` (the output
/// layer, or the layer feeding a final softmax when a loss wants logits). `training` enables
/// dropout; batch norm follows the device (batch statistics on autodiff devices, running
/// statistics otherwise).
pub fn forward(
    spec: &ModelSpec,
    net: &Net<Db>,
    slots: &Slots,
    inputs: Vec<Value>,
    training: bool,
    until: usize,
) -> Result<Value> {
    let mut vals: Vec<Option<Value>> = vec![None; spec.layers.len()];
    let mut feed = inputs.into_iter();
    // Values are dropped once no later layer reads them.
    let mut last_use = vec![0usize; spec.layers.len()];
    for (i, l) in spec.layers.iter().enumerate() {
        for &j in &l.inputs {
            last_use[j] = i;
        }
    }
    last_use[until] = usize::MAX;
    for (i, l) in spec.layers.iter().enumerate().take(until + 1) {
        let arg = |k: usize| -> Result<&Value> {
            let j = *l
                .inputs
                .get(k)
                .ok_or_else(|| Error::Argument(format!("layer {:?} needs an input", l.name)))?;
            vals[j]
                .as_ref()
                .ok_or_else(|| Error::Execution(format!("layer {:?}: input freed", l.name)))
        };
        let out = match &l.op {
            LayerOp::Input { shape, .. } => {
                let v = feed.next().ok_or_else(|| {
                    Error::Argument(format!("no value for input layer {:?}", l.name))
                })?;
                let got = v.shape();
                if got.len() != shape.len() + 1 || got[1..] != shape[..] {
                    return Err(Error::Shape(format!(
                        "input {:?} expects [batch | {shape:?}], got {got:?}",
                        l.name
                    )));
                }
                v
            }
            LayerOp::Dense { units, .. } => {
                let p = &net.dense[slot(slots, i)?];
                let x = arg(0)?;
                let s = x.shape();
                let fan_in = *s.last().unwrap_or(&0);
                let rows = s[..s.len() - 1].iter().product();
                // Burn's fused linear op (dedicated backward) rather than matmul + add.
                let y = linear(
                    x.reshaped([rows, fan_in])?,
                    p.kernel.val(),
                    p.bias.as_ref().map(|b| b.val()),
                );
                let mut out_shape = s.clone();
                let Some(features) = out_shape.last_mut() else {
                    return Err(Error::Shape(
                        "dense needs an input with a feature axis".into(),
                    ));
                };
                *features = *units;
                Value::Float(y.into_primitive(), vec![rows, *units]).reshape_to(out_shape)?
            }
            LayerOp::Conv {
                kernel_size,
                strides,
                padding,
                dilation,
                channels,
                ..
            } => {
                let x = channels_first(arg(0)?, *channels)?;
                let n = kernel_size.len();
                let st = strides.clone().unwrap_or_else(|| vec![1; n]);
                let dl = dilation.clone().unwrap_or_else(|| vec![1; n]);
                let s = x.shape();
                let pads: Vec<(usize, usize)> = (0..n)
                    .map(|a| {
                        if *padding == Padding::Same {
                            same_pad(s[2 + a], kernel_size[a], st[a], dl[a])
                        } else {
                            (0, 0)
                        }
                    })
                    .collect();
                let sym = pads.iter().all(|(lo, hi)| lo == hi);
                let y = if n == 1 {
                    let p = &net.conv1[slot(slots, i)?];
                    let mut t = x.to::<3>()?;
                    let pad = if sym {
                        pads[0].0
                    } else {
                        t = t.pad([(0, 0), (0, 0), pads[0]], 0.0);
                        0
                    };
                    let o = ConvOptions::new([st[0]], [pad], [dl[0]], 1);
                    Value::float(conv1d(
                        t,
                        p.kernel.val(),
                        p.bias.as_ref().map(|b| b.val()),
                        o,
                    ))
                } else {
                    let p = &net.conv2[slot(slots, i)?];
                    let mut t = x.to::<4>()?;
                    let pad = if sym {
                        [pads[0].0, pads[1].0]
                    } else {
                        t = t.pad([(0, 0), (0, 0), pads[0], pads[1]], 0.0);
                        [0, 0]
                    };
                    let o = ConvOptions::new([st[0], st[1]], pad, [dl[0], dl[1]], 1);
                    Value::float(conv2d(
                        t,
                        p.kernel.val(),
                        p.bias.as_ref().map(|b| b.val()),
                        o,
                    ))
                };
                channels_back(y, *channels)?
            }
            LayerOp::MaxPool {
                kernel_size,
                strides,
                padding,
                channels,
            }
            | LayerOp::AvgPool {
                kernel_size,
                strides,
                padding,
                channels,
            } => {
                let max = matches!(l.op, LayerOp::MaxPool { .. });
                let x = channels_first(arg(0)?, *channels)?;
                let n = kernel_size.len();
                let st = strides.clone().unwrap_or_else(|| kernel_size.clone());
                let s = x.shape();
                let pads: Vec<(usize, usize)> = (0..n)
                    .map(|a| {
                        if *padding == Padding::Same {
                            same_pad(s[2 + a], kernel_size[a], st[a], 1)
                        } else {
                            (0, 0)
                        }
                    })
                    .collect();
                let sym = pads.iter().all(|(lo, hi)| lo == hi);
                let fill = if max { f64::NEG_INFINITY } else { 0.0 };
                let y = if n == 1 {
                    let mut t = x.to::<3>()?;
                    let pad = if sym {
                        pads[0].0
                    } else {
                        t = t.pad([(0, 0), (0, 0), pads[0]], fill);
                        0
                    };
                    let (k, s1) = (kernel_size[0], st[0]);
                    Value::float(if max {
                        let nan = avg_pool1d(nan_only(&t), k, s1, pad, false, false);
                        max_pool1d(t, k, s1, pad, 1, false).add(nan)
                    } else {
                        avg_pool1d(t, k, s1, pad, false, false)
                    })
                } else {
                    let mut t = x.to::<4>()?;
                    let pad = if sym {
                        [pads[0].0, pads[1].0]
                    } else {
                        t = t.pad([(0, 0), (0, 0), pads[0], pads[1]], fill);
                        [0, 0]
                    };
                    let (k, s2) = ([kernel_size[0], kernel_size[1]], [st[0], st[1]]);
                    Value::float(if max {
                        let nan = avg_pool2d(nan_only(&t), k, s2, pad, false, false);
                        max_pool2d(t, k, s2, pad, [1, 1], false).add(nan)
                    } else {
                        avg_pool2d(t, k, s2, pad, false, false)
                    })
                };
                channels_back(y, *channels)?
            }
            LayerOp::GlobalAvgPool {
                channels,
                keep_axes,
            } => {
                let x = channels_first(arg(0)?, *channels)?;
                let s = x.shape();
                let (nb, c) = (s[0], s[1]);
                let sp: usize = s[2..].iter().product();
                let m = x.reshaped([nb, c, sp])?.mean_dim(2);
                if *keep_axes {
                    let mut kept = vec![nb, c];
                    kept.extend(vec![1; s.len() - 2]);
                    channels_back(Value::float(m).reshape_to(kept)?, *channels)?
                } else {
                    Value::float(m.reshape([nb, c]))
                }
            }
            LayerOp::Flatten => {
                let x = arg(0)?;
                let s = x.shape();
                let rest = s[1..].iter().product();
                Value::float(x.reshaped([s[0], rest])?)
            }
            LayerOp::Dropout { rate } => {
                let x = arg(0)?;
                if training && *rate > 0.0 {
                    x.map_any(Dropout(*rate))?
                } else {
                    x.clone()
                }
            }
            LayerOp::BatchNorm { channel_index, .. } => {
                let x = arg(0)?;
                let axis = spec::norm_axis(*channel_index, x.shape().len());
                x.map_any(Norm(&net.bn[slot(slots, i)?], axis))?
            }
            LayerOp::LayerNorm { .. } => arg(0)?.map_any(LNorm(&net.ln[slot(slots, i)?]))?,
            LayerOp::Embedding { .. } => {
                let e = &net.emb[slot(slots, i)?];
                match arg(0)? {
                    Value::Ids(ids) => Value::float(e.forward(ids.clone())),
                    Value::Float(..) => {
                        return Err(Error::Dtype(format!(
                            "embedding {:?} needs integer ids",
                            l.name
                        )))
                    }
                }
            }
            LayerOp::Activation { activation, alpha } => {
                arg(0)?.map_any(Act(*activation, *alpha))?
            }
            LayerOp::Add => {
                let mut acc = arg(0)?.clone();
                for k in 1..l.inputs.len() {
                    acc = add(&acc, arg(k)?)?;
                }
                acc
            }
            LayerOp::Concatenate { axis } => {
                let parts: Vec<Value> = (0..l.inputs.len())
                    .map(|k| arg(k).cloned())
                    .collect::<Result<_>>()?;
                concat(&parts, *axis)?
            }
        };
        vals[i] = Some(out);
        for &j in &l.inputs {
            if last_use[j] == i {
                vals[j] = None;
            }
        }
    }
    vals[until]
        .take()
        .ok_or_else(|| Error::Execution("the output layer produced nothing".into()))
}

impl Value {
    fn reshape_to(&self, shape: Vec<usize>) -> Result<Value> {
        let s = shape.clone();
        let p = match s.len() {
            1 => self.reshaped([s[0]])?.into_primitive(),
            2 => self.reshaped([s[0], s[1]])?.into_primitive(),
            3 => self.reshaped([s[0], s[1], s[2]])?.into_primitive(),
            4 => self.reshaped([s[0], s[1], s[2], s[3]])?.into_primitive(),
            5 => self
                .reshaped([s[0], s[1], s[2], s[3], s[4]])?
                .into_primitive(),
            r => return Err(Error::Unsupported(format!("activations of rank {r}"))),
        };
        Ok(Value::Float(p, shape))
    }
}

fn slot(slots: &Slots, i: usize) -> Result<usize> {
    slots[i].ok_or_else(|| Error::Execution(format!("layer {i} has no parameters")))
}

/// Moves the channel axis to position 1 (Burn's layout) when the layer takes channels last.
fn channels_first(v: &Value, channels: Channels) -> Result<Value> {
    if channels == Channels::First {
        return Ok(v.clone());
    }
    Ok(match v.shape().len() {
        3 => Value::float(v.to::<3>()?.permute([0, 2, 1])),
        4 => Value::float(v.to::<4>()?.permute([0, 3, 1, 2])),
        r => {
            return Err(Error::Shape(format!(
                "spatial layers need rank 3 or 4 inputs, got rank {r}"
            )))
        }
    })
}

fn channels_back(v: Value, channels: Channels) -> Result<Value> {
    if channels == Channels::First {
        return Ok(v);
    }
    Ok(match v.shape().len() {
        3 => Value::float(v.to::<3>()?.permute([0, 2, 1])),
        4 => Value::float(v.to::<4>()?.permute([0, 2, 3, 1])),
        _ => v,
    })
}

struct AddWith(burn::tensor::TensorPrimitive<Db>);

impl AnyRank for AddWith {
    fn apply<const D: usize>(&self, t: Tensor<Db, D>) -> Tensor<Db, D> {
        t.add(Tensor::from_primitive(self.0.clone()))
    }
}

fn add(a: &Value, b: &Value) -> Result<Value> {
    match b {
        Value::Float(p, s) if *s == a.shape() => a.map_any(AddWith(p.clone())),
        _ => Err(Error::Shape(format!(
            "add: shapes {:?} and {:?} differ",
            a.shape(),
            b.shape()
        ))),
    }
}

fn concat(parts: &[Value], axis: isize) -> Result<Value> {
    let r = parts[0].shape().len();
    let a = spec::norm_axis(axis, r);
    macro_rules! cat {
        ($d:literal) => {{
            let ts = parts
                .iter()
                .map(|p| p.to::<$d>())
                .collect::<Result<Vec<_>>>()?;
            Value::float(Tensor::cat(ts, a))
        }};
    }
    Ok(match r {
        2 => cat!(2),
        3 => cat!(3),
        4 => cat!(4),
        5 => cat!(5),
        r => return Err(Error::Unsupported(format!("concatenate of rank {r}"))),
    })
}

/// The parameter shape used for batch input `Shape` sanity checks.
pub fn batch_shape(batch: usize, shape: &[usize]) -> Shape {
    Shape::from([vec![batch], shape.to_vec()].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::flex::FlexDevice;

    const N: f64 = f64::NAN;
    const INF: f64 = f64::INFINITY;

    fn devices() -> [DispatchDevice; 2] {
        let plain = DispatchDevice::Flex(FlexDevice);
        [plain.clone(), DispatchDevice::autodiff(plain)]
    }

    fn row(values: &[f64], dtype: burn::tensor::DType, device: &DispatchDevice) -> Tensor<Db, 2> {
        let t =
            Tensor::<Db, 2>::from_data(TensorData::new(values.to_vec(), [1, values.len()]), device);
        t.cast(dtype)
    }

    fn read<const D: usize>(t: Tensor<Db, D>) -> Vec<f64> {
        t.into_data().iter::<f64>().collect()
    }

    /// NaN where NaN is expected, infinities exactly, finite values to `tol` (relative).
    fn same(got: &[f64], want: &[f64], tol: f64) -> bool {
        got.len() == want.len()
            && got.iter().zip(want).all(|(g, w)| {
                (g.is_nan() && w.is_nan())
                    || g == w
                    || (w.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0))
            })
    }

    /// Each activation on NaN, ±inf and a few finite values equals Axon's definition evaluated
    /// on `Nx.BinaryBackend` (f32; the ExUnit test `nx_non_finite_test.exs` compares the same
    /// from Elixir), on plain and autodiff devices, in f32 and f64. One deliberate difference:
    /// tanh(±inf) is ±1 (IEEE, as XLA and Burn compute it); the BinaryBackend's NaN there comes
    /// from its generic handling of non-finite inputs to Erlang's math functions.
    #[test]
    fn activations_follow_nx_on_nan_and_infinities() {
        let x = [N, INF, -INF, -1.0, 0.0, 2.0];
        let table: [(Activation, f64, [f64; 6]); 9] = [
            (Activation::Relu, 0.0, [N, INF, 0.0, 0.0, 0.0, 2.0]),
            (
                Activation::Sigmoid,
                0.0,
                [N, 1.0, 0.0, 0.268_941_43, 0.5, 0.880_797_1],
            ),
            (
                Activation::Tanh,
                0.0,
                [N, 1.0, -1.0, -0.761_594_2, 0.0, 0.964_027_6],
            ),
            (
                Activation::Gelu,
                0.0,
                [N, INF, N, -0.158_655_26, 0.0, 1.954_499_7],
            ),
            (
                Activation::Silu,
                0.0,
                [N, INF, N, -0.268_941_43, 0.0, 1.761_594_2],
            ),
            (Activation::LeakyRelu, 0.01, [N, INF, -INF, -0.01, 0.0, 2.0]),
            (
                Activation::Elu,
                1.0,
                [N, INF, -1.0, -0.632_120_55, 0.0, 2.0],
            ),
            (Activation::Elu, 0.5, [N, INF, -0.5, -0.316_060_3, 0.0, 2.0]),
            (Activation::Linear, 0.0, x),
        ];
        for device in devices() {
            for dtype in [burn::tensor::DType::F32, burn::tensor::DType::F64] {
                for (act, alpha, want) in &table {
                    let got = read(Act(*act, *alpha).apply(row(&x, dtype, &device)));
                    assert!(
                        same(&got, want, 1e-5),
                        "{act:?} {dtype:?}: {got:?}, want {want:?}"
                    );
                }
            }
        }
    }

    /// The activations that bear the name of an op of the table (relu, sigmoid, tanh,
    /// softmax, log_softmax) compute that op (over the last axis): one name, one operation.
    #[test]
    fn activations_named_as_ops_compute_the_op() {
        let ops: Vec<String> = crate::vocabulary::entries()
            .into_iter()
            .map(|e| e.name)
            .collect();
        let x = [-1.0, 0.0, 0.5, 2.0];
        let bytes: Vec<u8> = x.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
        let input =
            crate::Tensor::from_bytes(&bytes, &[1, 4], crate::DType::F32, crate::Device::Cpu)
                .expect("a tensor");
        let mut named = 0;
        for name in crate::wire::names::<Activation>() {
            if !ops.contains(&name) {
                continue;
            }
            named += 1;
            let act: Activation = serde_json::from_value(serde_json::Value::String(name.clone()))
                .expect("an activation");
            let wire = if name.contains("softmax") {
                serde_json::json!({ name.clone(): { "axis": 1 } })
            } else {
                serde_json::Value::String(name.clone())
            };
            let op: crate::Op = serde_json::from_value(wire).expect("an op");
            let by_op = crate::op::eval(&op, std::slice::from_ref(&input), crate::Device::Cpu)
                .and_then(|mut t| t.remove(0).to_bytes(None))
                .expect("the op runs");
            let by_op: Vec<f64> = by_op
                .chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect();
            let device = DispatchDevice::Flex(FlexDevice);
            let by_layer = read(Act(act, 0.0).apply(row(&x, burn::tensor::DType::F32, &device)));
            assert!(
                same(&by_layer, &by_op, 1e-6),
                "{name}: layer {by_layer:?}, op {by_op:?}"
            );
        }
        assert_eq!(
            named, 5,
            "relu, sigmoid, tanh, softmax and log_softmax are ops"
        );
    }

    /// Softmax and log-softmax rows with NaN or infinities, as Nx computes them.
    #[test]
    fn softmax_rows_follow_nx_on_nan_and_infinities() {
        let rows: [([f64; 3], [f64; 3], [f64; 3]); 4] = [
            ([N, 1.0, 2.0], [N, N, N], [N, N, N]),
            ([INF, 1.0, 2.0], [N, N, N], [N, N, N]),
            (
                [-INF, 1.0, 2.0],
                [0.0, 0.268_941_43, 0.731_058_6],
                [-INF, -1.313_261_6, -0.313_261_66],
            ),
            ([-INF, -INF, -INF], [N, N, N], [N, N, N]),
        ];
        for device in devices() {
            for (x, soft, log) in &rows {
                let got = read(Act(Activation::Softmax, 0.0).apply(row(x, DTYPE, &device)));
                assert!(same(&got, soft, 1e-5), "softmax {x:?}: {got:?}");
                let got = read(Act(Activation::LogSoftmax, 0.0).apply(row(x, DTYPE, &device)));
                assert!(same(&got, log, 1e-5), "log_softmax {x:?}: {got:?}");
            }
        }
    }

    const DTYPE: burn::tensor::DType = burn::tensor::DType::F32;

    fn pool_spec(op: &str) -> ModelSpec {
        serde_json::from_str(&format!(
            r#"{{"layers": [{{"name": "x", "op": {{"input": {{"shape": [6, 1]}}}}}},
                            {{"name": "p", "op": {op}, "inputs": [0]}}],
                 "output": 1}}"#
        ))
        .expect("spec")
    }

    fn pooled(op: &str, x: &[f64], device: &DispatchDevice) -> Vec<f64> {
        let spec = pool_spec(op);
        let (net, slots) = build(&spec, 0, device).expect("net");
        let t = Tensor::<Db, 3>::from_data(TensorData::new(x.to_vec(), [1, x.len(), 1]), device);
        let out = forward(&spec, &net, &slots, vec![Value::float(t)], true, 1).expect("forward");
        read(out.to::<3>().expect("rank 3"))
    }

    /// A max pool's window holding NaN anywhere is NaN (Nx's `window_max`), infinities win as
    /// values; average pools propagate both.
    #[test]
    fn max_pool_windows_with_nan_are_nan_wherever_it_is() {
        let x = [1.0, N, 2.0, INF, -INF, 3.0];
        for device in devices() {
            let got = pooled(r#"{"max_pool": {"kernel_size": [2]}}"#, &x, &device);
            assert!(same(&got, &[N, INF, 3.0], 0.0), "{got:?}");
            let got = pooled(
                r#"{"max_pool": {"kernel_size": [3], "strides": [1]}}"#,
                &x,
                &device,
            );
            assert!(same(&got, &[N, N, INF, INF], 0.0), "{got:?}");
            let got = pooled(
                r#"{"max_pool": {"kernel_size": [4], "padding": "same"}}"#,
                &[-INF, -INF, -INF, -INF, 1.0, N],
                &device,
            );
            assert!(same(&got, &[-INF, N], 0.0), "same padding: {got:?}");
            let got = pooled(r#"{"avg_pool": {"kernel_size": [2]}}"#, &x, &device);
            assert!(same(&got, &[N, INF, -INF], 0.0), "avg_pool: {got:?}");
        }
    }

    /// Dropped elements are 0 whatever they held (Axon selects 0); kept ones are scaled.
    #[test]
    fn dropout_zeroes_dropped_nan_and_infinities() {
        let device = DispatchDevice::autodiff(DispatchDevice::Flex(FlexDevice));
        let x: Vec<f64> = (0..400).map(|i| if i % 2 == 0 { N } else { INF }).collect();
        let t = Tensor::<Db, 2>::from_data(TensorData::new(x.clone(), [1, 400]), &device);
        let got = read(Dropout(0.5).apply(t));
        let dropped = got.iter().filter(|v| **v == 0.0).count();
        assert!((100..300).contains(&dropped), "{dropped} of 400 dropped");
        for (g, x) in got.iter().zip(&x) {
            assert!(
                *g == 0.0 || (g.is_nan() && x.is_nan()) || g == x,
                "{x} -> {g}"
            );
        }
    }

    /// ELU's gradient stays finite where exp(x) overflows (the unselected branch's 0 * inf).
    #[test]
    fn elu_gradient_is_finite_for_large_inputs() {
        let device = DispatchDevice::autodiff(DispatchDevice::Flex(FlexDevice));
        let x = Tensor::<Db, 2>::from_data(TensorData::new(vec![100.0f32, -3.0], [1, 2]), &device)
            .require_grad();
        let grads = Act(Activation::Elu, 1.0).apply(x.clone()).sum().backward();
        let g = read(x.grad(&grads).expect("gradient"));
        assert!(same(&g, &[1.0, (-3.0f64).exp()], 1e-5), "{g:?}");
    }
}
