//! Model specifications: a graph of named layers, built by `ExBurn.Layers` (or converted from
//! Axon) on the Elixir side, with shape inference and parameter counting.
//!
//! Conventions follow Axon: convolutions and pools take channels last by default, `dense`
//! acts on the last axis, shapes exclude the batch axis.

use crate::{DType, Error, Result};
use serde::{Deserialize, Serialize};

/// Where the channel axis is for convolutions, pools and batch norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Channels {
    /// `[batch, spatial..., channels]` (Axon's default).
    #[default]
    Last,
    /// `[batch, channels, spatial...]`.
    First,
}

/// Padding of convolutions and pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    /// No padding.
    #[default]
    Valid,
    /// Pad so that the output size is `ceil(input / stride)`.
    Same,
}

/// Element-wise activations. Those named like an op of the table (`relu`, `sigmoid`, `tanh`,
/// `softmax`, `log_softmax`, the softmaxes over the last axis) compute that op; a test in
/// `train/net.rs` holds them to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Activation {
    Relu,
    Sigmoid,
    Tanh,
    Softmax,
    LogSoftmax,
    Gelu,
    Silu,
    LeakyRelu,
    Elu,
    Linear,
}

fn yes() -> bool {
    true
}
fn eps() -> f64 {
    1e-5
}
fn bn_momentum() -> f64 {
    0.1
}
fn alpha() -> f64 {
    0.01
}
fn last_axis() -> isize {
    -1
}

/// What a layer computes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[allow(missing_docs)]
pub enum LayerOp {
    /// A model input of `shape` (batch axis excluded).
    Input {
        shape: Vec<usize>,
        #[serde(default)]
        dtype: Option<DType>,
    },
    /// `x W + b` on the last axis.
    Dense {
        units: usize,
        #[serde(default = "yes")]
        use_bias: bool,
    },
    /// 1d or 2d convolution (by the length of `kernel_size`).
    Conv {
        filters: usize,
        kernel_size: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Padding,
        #[serde(default)]
        dilation: Option<Vec<usize>>,
        #[serde(default)]
        channels: Channels,
        #[serde(default = "yes")]
        use_bias: bool,
    },
    /// Max pooling (1d or 2d); strides default to the window.
    MaxPool {
        kernel_size: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Padding,
        #[serde(default)]
        channels: Channels,
    },
    /// Average pooling (1d or 2d); strides default to the window.
    AvgPool {
        kernel_size: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Padding,
        #[serde(default)]
        channels: Channels,
    },
    /// Mean over all spatial axes.
    GlobalAvgPool {
        #[serde(default)]
        channels: Channels,
        #[serde(default)]
        keep_axes: bool,
    },
    /// Flattens all axes after the batch axis.
    Flatten,
    /// Drops activations with probability `rate` during training.
    Dropout { rate: f64 },
    /// Batch normalisation over the channel axis.
    BatchNorm {
        #[serde(default = "eps")]
        epsilon: f64,
        #[serde(default = "bn_momentum")]
        momentum: f64,
        #[serde(default = "last_axis")]
        channel_index: isize,
    },
    /// Layer normalisation over the last axis.
    LayerNorm {
        #[serde(default = "eps")]
        epsilon: f64,
    },
    /// Integer ids `[batch, seq]` to vectors `[batch, seq, embedding_size]`.
    Embedding {
        vocab_size: usize,
        embedding_size: usize,
    },
    /// An element-wise activation (`alpha` for leaky_relu and elu).
    Activation {
        activation: Activation,
        #[serde(default = "alpha")]
        alpha: f64,
    },
    /// Sum of the inputs (same shapes).
    Add,
    /// Concatenation of the inputs along `axis` (negative counts from the end).
    Concatenate {
        #[serde(default = "last_axis")]
        axis: isize,
    },
}

/// One named layer and the layers it reads.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    /// Unique name; parameters are addressed as `name.kernel`, `name.bias`, ...
    pub name: String,
    /// What it computes.
    pub op: LayerOp,
    /// Indices of the layers it reads (earlier in the list).
    #[serde(default)]
    pub inputs: Vec<usize>,
}

/// A model: layers in topological order, and the index of the output layer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The layers.
    pub layers: Vec<LayerSpec>,
    /// The output layer.
    pub output: usize,
}

/// A parameter of a layer: its name (`kernel`, `bias`, ...) and shape.
pub type ParamShape = (&'static str, Vec<usize>);

impl ModelSpec {
    /// Checks names, input references and shapes; returns every layer's output shape
    /// (without the batch axis).
    pub fn infer_shapes(&self) -> Result<Vec<Vec<usize>>> {
        let mut names = std::collections::HashSet::new();
        let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(self.layers.len());
        if self.output >= self.layers.len() {
            return Err(Error::Argument(format!(
                "output layer {} does not exist",
                self.output
            )));
        }
        for (i, l) in self.layers.iter().enumerate() {
            if !names.insert(l.name.as_str()) {
                return Err(Error::Argument(format!(
                    "two layers are named {:?}",
                    l.name
                )));
            }
            if let Some(&bad) = l.inputs.iter().find(|&&j| j >= i) {
                return Err(Error::Argument(format!(
                    "layer {:?} reads layer {bad}, which is not before it",
                    l.name
                )));
            }
            let ins: Vec<&Vec<usize>> = l.inputs.iter().map(|&j| &shapes[j]).collect();
            let s = check_layer(&l.op)
                .and_then(|_| output_shape(&l.op, &ins))
                .and_then(|s| crate::op::plan::numel(&s).map(|_| s))
                .map_err(|e| e.in_op(&format!("layer {:?}", l.name)))?;
            shapes.push(s);
        }
        Ok(shapes)
    }

    /// The parameters of layer `i` given the inferred shapes.
    pub fn params_of(&self, i: usize, shapes: &[Vec<usize>]) -> Vec<ParamShape> {
        let l = &self.layers[i];
        let in_shape = l
            .inputs
            .first()
            .map(|&j| shapes[j].clone())
            .unwrap_or_default();
        match &l.op {
            LayerOp::Dense { units, use_bias } => {
                let fan_in = in_shape.last().copied().unwrap_or(0);
                let mut p = vec![("kernel", vec![fan_in, *units])];
                if *use_bias {
                    p.push(("bias", vec![*units]));
                }
                p
            }
            LayerOp::Conv {
                filters,
                kernel_size,
                channels,
                use_bias,
                ..
            } => {
                let c = channel_count(&in_shape, *channels);
                let mut k = vec![*filters, c];
                k.extend(kernel_size);
                let mut p = vec![("kernel", k)];
                if *use_bias {
                    p.push(("bias", vec![*filters]));
                }
                p
            }
            LayerOp::BatchNorm { channel_index, .. } => {
                let c = in_shape
                    .get(norm_axis(*channel_index, in_shape.len() + 1).saturating_sub(1))
                    .copied()
                    .unwrap_or(0);
                vec![
                    ("gamma", vec![c]),
                    ("beta", vec![c]),
                    ("mean", vec![c]),
                    ("var", vec![c]),
                ]
            }
            LayerOp::LayerNorm { .. } => {
                let c = in_shape.last().copied().unwrap_or(0);
                vec![("gamma", vec![c]), ("beta", vec![c])]
            }
            LayerOp::Embedding {
                vocab_size,
                embedding_size,
            } => vec![("kernel", vec![*vocab_size, *embedding_size])],
            _ => vec![],
        }
    }

    /// Number of parameter elements (running statistics included), counted without overflow.
    pub fn param_elements(&self) -> Result<u128> {
        let shapes = self.infer_shapes()?;
        let mut total: u128 = 0;
        for i in 0..self.layers.len() {
            for (_, shape) in self.params_of(i, &shapes) {
                total = total.saturating_add(crate::op::plan::numel(&shape)?);
            }
        }
        Ok(total)
    }

    /// Number of activation elements one sample produces through the whole graph.
    pub fn activation_elements(&self) -> Result<u128> {
        let mut total: u128 = 0;
        for shape in self.infer_shapes()? {
            total = total.saturating_add(crate::op::plan::numel(&shape)?);
        }
        Ok(total)
    }

    /// Total number of trainable parameters (batch-norm running statistics excluded).
    pub fn param_count(&self) -> Result<usize> {
        let shapes = self.infer_shapes()?;
        Ok((0..self.layers.len())
            .flat_map(|i| self.params_of(i, &shapes))
            .filter(|(n, _)| *n != "mean" && *n != "var")
            .map(|(_, s)| s.iter().product::<usize>())
            .sum())
    }
}

/// Channel count of an input shape (batch excluded).
pub(crate) fn channel_count(shape: &[usize], channels: Channels) -> usize {
    match channels {
        Channels::Last => shape.last().copied().unwrap_or(0),
        Channels::First => shape.first().copied().unwrap_or(0),
    }
}

/// Normalises a possibly negative axis of a tensor of `rank` (batch included).
pub(crate) fn norm_axis(axis: isize, rank: usize) -> usize {
    if axis < 0 {
        (rank as isize + axis).max(0) as usize
    } else {
        axis as usize
    }
}

/// Output length of a convolution or pool along one axis.
pub(crate) fn conv_len(
    input: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    padding: Padding,
) -> usize {
    match padding {
        Padding::Same => input.div_ceil(stride),
        Padding::Valid => {
            let span = (k - 1) * dilation + 1;
            if input < span {
                0
            } else {
                (input - span) / stride + 1
            }
        }
    }
}

fn spatial(shape: &[usize], channels: Channels) -> (&[usize], usize) {
    match channels {
        Channels::Last => (&shape[..shape.len() - 1], shape[shape.len() - 1]),
        Channels::First => (&shape[1..], shape[0]),
    }
}

fn with_channels(sp: Vec<usize>, c: usize, channels: Channels) -> Vec<usize> {
    match channels {
        Channels::Last => [sp, vec![c]].concat(),
        Channels::First => [vec![c], sp].concat(),
    }
}

/// Checks a layer's own settings: sizes, windows, strides and dilations are positive, rates
/// and constants finite and in range.
fn check_layer(op: &LayerOp) -> Result<()> {
    let positive = |what: &str, v: &[usize]| -> Result<()> {
        if v.is_empty() && what == "kernel_size" || v.contains(&0) {
            return Err(Error::Argument(format!(
                "{what} must be positive, got {v:?}"
            )));
        }
        Ok(())
    };
    let finite = |what: &str, v: f64, lo: f64, hi: f64| -> Result<()> {
        if !(v.is_finite() && v >= lo && v <= hi) {
            return Err(Error::Argument(format!(
                "{what} must be a finite number in [{lo}, {hi}], got {v}"
            )));
        }
        Ok(())
    };
    match op {
        LayerOp::Input { shape, .. } => positive("input shape", shape),
        LayerOp::Dense { units, .. } => positive("units", &[*units]),
        LayerOp::Conv {
            filters,
            kernel_size,
            strides,
            dilation,
            ..
        } => {
            positive("filters", &[*filters])?;
            positive("kernel_size", kernel_size)?;
            positive("strides", strides.as_deref().unwrap_or(&[]))?;
            positive("dilation", dilation.as_deref().unwrap_or(&[]))?;
            same_len(kernel_size, strides, "strides")?;
            same_len(kernel_size, dilation, "dilation")
        }
        LayerOp::MaxPool {
            kernel_size,
            strides,
            ..
        }
        | LayerOp::AvgPool {
            kernel_size,
            strides,
            ..
        } => {
            positive("kernel_size", kernel_size)?;
            positive("strides", strides.as_deref().unwrap_or(&[]))?;
            same_len(kernel_size, strides, "strides")
        }
        LayerOp::BatchNorm {
            epsilon, momentum, ..
        } => {
            finite("epsilon", *epsilon, f64::MIN_POSITIVE, 1.0)?;
            finite("momentum", *momentum, 0.0, 1.0)
        }
        LayerOp::LayerNorm { epsilon } => finite("epsilon", *epsilon, f64::MIN_POSITIVE, 1.0),
        LayerOp::Embedding {
            vocab_size,
            embedding_size,
        } => positive(
            "vocab_size and embedding_size",
            &[*vocab_size, *embedding_size],
        ),
        LayerOp::Activation { alpha, .. } => finite("alpha", *alpha, -1e6, 1e6),
        _ => Ok(()),
    }
}

fn same_len(kernel: &[usize], other: &Option<Vec<usize>>, what: &str) -> Result<()> {
    match other {
        Some(v) if v.len() != kernel.len() => Err(Error::Argument(format!(
            "{what} {v:?} needs one entry per kernel axis ({kernel:?})"
        ))),
        _ => Ok(()),
    }
}

fn output_shape(op: &LayerOp, ins: &[&Vec<usize>]) -> Result<Vec<usize>> {
    let need = |n: usize| -> Result<()> {
        if ins.len() < n {
            Err(Error::Argument(format!(
                "needs {n} input(s), got {}",
                ins.len()
            )))
        } else {
            Ok(())
        }
    };
    let spatial_op = |ks: &[usize],
                      strides: &Option<Vec<usize>>,
                      dil: Option<&Vec<usize>>,
                      padding: Padding,
                      channels: Channels,
                      out_c: Option<usize>|
     -> Result<Vec<usize>> {
        need(1)?;
        let s = ins[0];
        if s.len() != ks.len() + 1 || !(1..=2).contains(&ks.len()) {
            return Err(Error::Shape(format!(
                "a {}d window needs inputs of shape [spatial x{}, channels], got {s:?}",
                ks.len(),
                ks.len()
            )));
        }
        let (sp, c) = spatial(s, channels);
        let st = strides.clone().unwrap_or_else(|| {
            if out_c.is_some() {
                vec![1; ks.len()]
            } else {
                ks.to_vec()
            }
        });
        let dl = dil.cloned().unwrap_or_else(|| vec![1; ks.len()]);
        let out: Vec<usize> = (0..ks.len())
            .map(|i| conv_len(sp[i], ks[i], st[i], dl[i], padding))
            .collect();
        if out.contains(&0) {
            return Err(Error::Shape(format!(
                "window {ks:?} is larger than the input {s:?}"
            )));
        }
        Ok(with_channels(out, out_c.unwrap_or(c), channels))
    };
    match op {
        LayerOp::Input { shape, .. } => Ok(shape.clone()),
        LayerOp::Dense { units, .. } => {
            need(1)?;
            let mut s = ins[0].clone();
            let Some(features) = s.last_mut() else {
                return Err(Error::Shape(
                    "dense needs an input with a feature axis".into(),
                ));
            };
            *features = *units;
            Ok(s)
        }
        LayerOp::Conv {
            filters,
            kernel_size,
            strides,
            padding,
            dilation,
            channels,
            ..
        } => spatial_op(
            kernel_size,
            strides,
            dilation.as_ref(),
            *padding,
            *channels,
            Some(*filters),
        ),
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
        } => spatial_op(kernel_size, strides, None, *padding, *channels, None),
        LayerOp::GlobalAvgPool {
            channels,
            keep_axes,
        } => {
            need(1)?;
            if ins[0].is_empty() {
                return Err(Error::Shape(
                    "global_avg_pool needs an input with a channel axis, got samples of shape []"
                        .into(),
                ));
            }
            let (sp, c) = spatial(ins[0], *channels);
            if *keep_axes {
                Ok(with_channels(vec![1; sp.len()], c, *channels))
            } else {
                Ok(vec![c])
            }
        }
        LayerOp::Flatten => {
            need(1)?;
            let n = crate::op::plan::numel(ins[0])?;
            Ok(vec![usize::try_from(n).map_err(|_| {
                Error::Shape("flatten: too many elements".into())
            })?])
        }
        LayerOp::Dropout { rate } => {
            need(1)?;
            if !(0.0..1.0).contains(rate) {
                return Err(Error::Argument(format!(
                    "dropout rate must be in [0, 1), got {rate}"
                )));
            }
            Ok(ins[0].clone())
        }
        LayerOp::BatchNorm { .. } | LayerOp::LayerNorm { .. } | LayerOp::Activation { .. } => {
            need(1)?;
            Ok(ins[0].clone())
        }
        LayerOp::Embedding { embedding_size, .. } => {
            need(1)?;
            Ok([ins[0].clone(), vec![*embedding_size]].concat())
        }
        LayerOp::Add => {
            need(2)?;
            if ins.iter().any(|s| *s != ins[0]) {
                return Err(Error::Shape(format!("add needs equal shapes, got {ins:?}")));
            }
            Ok(ins[0].clone())
        }
        LayerOp::Concatenate { axis } => {
            need(1)?;
            let r = ins[0].len();
            let a = norm_axis(*axis, r + 1);
            if a == 0 || a > r {
                return Err(Error::Argument(format!(
                    "cannot concatenate along axis {axis}"
                )));
            }
            let a = a - 1;
            let mut s = ins[0].clone();
            for other in &ins[1..] {
                if other.len() != r
                    || other
                        .iter()
                        .zip(ins[0].iter())
                        .enumerate()
                        .any(|(i, (x, y))| i != a && x != y)
                {
                    return Err(Error::Shape(format!(
                        "cannot concatenate {ins:?} on axis {axis}"
                    )));
                }
                s[a] = s[a]
                    .checked_add(other[a])
                    .ok_or_else(|| Error::Shape("concatenation too large".into()))?;
            }
            Ok(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after_scalar_input(op: &str) -> ModelSpec {
        serde_json::from_str(&format!(
            r#"{{"layers": [{{"name": "x", "op": {{"input": {{"shape": []}}}}}},
                            {{"name": "l", "op": {op}, "inputs": [0]}}],
                 "output": 1}}"#
        ))
        .expect("spec")
    }

    /// A layer that needs axes the input lacks is a shape error of its own, before any
    /// indexing of the missing axes.
    #[test]
    fn layers_needing_axes_refuse_scalar_samples_as_shape_errors() {
        for op in [
            r#"{"global_avg_pool": {}}"#,
            r#"{"global_avg_pool": {"keep_axes": true, "channels": "first"}}"#,
            r#"{"dense": {"units": 2}}"#,
            r#"{"conv": {"filters": 2, "kernel_size": [1]}}"#,
            r#"{"max_pool": {"kernel_size": [1]}}"#,
            r#"{"avg_pool": {"kernel_size": [1, 1]}}"#,
        ] {
            match after_scalar_input(op).infer_shapes() {
                Err(Error::Shape(_)) => {}
                other => panic!("{op}: expected a shape error, got {other:?}"),
            }
        }
    }
}
