//! A compiled model: the graph, its parameters on a device, the optimizer and its state.
//! Training steps, epochs, evaluation and prediction run here, one call each, with Burn's
//! autodiff computing exact gradients.

use super::loss::{self, Head, Loss, Target};
use super::net::{self, Net, Slots, Value};
use super::optim::{Optim, OptimConfig};
use super::spec::{LayerOp, ModelSpec};
use super::tally::Tally;
use crate::dtype::Kind;
use crate::op::creation::SplitMix64;
use crate::tensor::{Prim, B};
use crate::{DType, Device, Error, Result, Tensor};
use burn::module::{AutodiffModule, Module, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};
use burn::tensor::{Bool, Int, TensorData, TensorPrimitive};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Instant;

/// A batch's forward pass: the loss on the autodiff graph, the same loss off it, its value on
/// the host and, for classification, which samples were predicted right.
struct Forward {
    loss: burn::tensor::Tensor<B, 1>,
    inner: burn::tensor::Tensor<B, 1>,
    value: f64,
    hits: Option<burn::tensor::Tensor<B, 1, Bool>>,
}

/// How a model trains.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CompileOptions {
    /// The loss.
    pub loss: Loss,
    /// The optimizer.
    pub optimizer: OptimConfig,
    /// Seed of the initial weights (and dropout).
    #[serde(default)]
    pub seed: u64,
    /// The base learning rate (applied per step by the caller; kept so a saved model
    /// resumes with it).
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// Float type of the parameters and activations (f32 by default; f64 for exact checks,
    /// f16/bf16 to train in half precision).
    #[serde(default = "default_dtype")]
    pub dtype: DType,
}

impl CompileOptions {
    /// Checks the learning rate and the optimizer's settings.
    pub fn validate(&self) -> Result<()> {
        if !(self.learning_rate.is_finite() && self.learning_rate >= 0.0) {
            return Err(Error::Argument(format!(
                "learning_rate must be a finite non-negative number, got {}",
                self.learning_rate
            )));
        }
        self.optimizer.validate()
    }
}

fn default_dtype() -> DType {
    DType::F32
}

fn default_lr() -> f64 {
    1e-3
}

/// Inputs and targets of a batch or a dataset (first axis = samples).
#[derive(Clone, Debug)]
pub struct Data {
    /// One tensor per input layer.
    pub inputs: Vec<Tensor>,
    /// Targets: class ids `[n]` or float values.
    pub target: Option<Tensor>,
}

/// What training does with a batch whose loss is NaN or infinite. The loss is read before
/// the backward pass, so no such batch ever reaches the optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnNonFinite {
    /// Fail with [`Error::NonFinite`] naming the epoch and step; the weights stay as they were
    /// before that step.
    #[default]
    Raise,
    /// Leave the batch out (no update) and go on.
    Skip,
    /// End the epoch there (no update); [`Stats::stopped`] tells.
    Stop,
}

/// The result of one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The batch's loss.
    pub loss: f64,
    /// Whether the optimizer applied the step (false for a skipped non-finite loss).
    pub applied: bool,
}

/// Per-epoch options.
#[derive(Debug, Clone, Default)]
pub struct EpochOptions {
    /// Samples per batch.
    pub batch_size: usize,
    /// Shuffle with this seed (none: keep order).
    pub shuffle: Option<u64>,
    /// Learning rate of each optimizer step (the last repeats).
    pub lrs: Vec<f64>,
    /// Micro-batches per optimizer step (gradient accumulation; 1 = none).
    pub accumulate: usize,
    /// Report progress every this many batches (0: never).
    pub progress_every: usize,
    /// Count correct predictions for the epoch's accuracy (classification losses only; when
    /// false no per-batch argmax/compare runs and [`Stats::accuracy`] is `None`).
    pub accuracy: bool,
    /// What a non-finite loss does.
    pub on_non_finite: OnNonFinite,
    /// The epoch's number (1-based) for error messages.
    pub epoch: usize,
}

/// What an epoch (or an evaluation) measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Mean loss per sample.
    pub loss: f64,
    /// Fraction of correct predictions (classification losses).
    pub accuracy: Option<f64>,
    /// Samples seen.
    pub samples: usize,
    /// Optimizer steps taken.
    pub steps: usize,
    /// Wall time.
    pub seconds: f64,
    /// Batches left out because their loss was not finite.
    pub skipped: usize,
    /// Whether a non-finite loss ended the epoch early.
    pub stopped: bool,
}

/// Milliseconds spent in each phase of one training step (device synchronised after each).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepProfile {
    /// Forward pass and loss.
    pub forward_ms: f64,
    /// Backward pass.
    pub backward_ms: f64,
    /// Optimizer update.
    pub optimizer_ms: f64,
}

/// A compiled model.
#[derive(Clone)]
pub struct Model {
    /// The graph.
    pub spec: ModelSpec,
    /// Training options.
    pub options: CompileOptions,
    slots: Slots,
    net: Option<Net<B>>,
    optim: Optim,
    device: Device,
    frozen: BTreeSet<String>,
    steps: u64,
}

fn ad_device(device: Device) -> Result<burn::DispatchDevice> {
    Ok(burn::DispatchDevice::autodiff(device.to_dispatch()?))
}

fn sync_err(e: burn::tensor::backend::ExecutionError) -> Error {
    Error::Execution(format!("{e:?}"))
}

impl Model {
    /// Builds a model on `device`.
    pub fn new(spec: ModelSpec, options: CompileOptions, device: Device) -> Result<Model> {
        options.validate()?;
        let dtype = options.dtype;
        if !dtype.is_float() {
            return Err(Error::Dtype(format!(
                "models compute in a float type, got {dtype}"
            )));
        }
        let params = spec.param_elements()?;
        crate::memory::reserve(device, params * dtype.size().max(4) as u128, &|| {
            format!("the model's parameters ({params} elements)")
        })?;
        let ad = ad_device(device)?;
        let (net, slots) = net::build(&spec, options.seed, &ad)?;
        let optim = options.optimizer.init()?;
        B::seed(&ad, options.seed);
        let mut model = Model {
            spec,
            options,
            slots,
            net: Some(net),
            optim,
            device,
            frozen: BTreeSet::new(),
            steps: 0,
        };
        if dtype != DType::F32 {
            let cast: Vec<(String, Tensor)> = model
                .parameters()?
                .into_iter()
                .map(|(n, t)| Ok((n, t.cast(dtype)?)))
                .collect::<Result<_>>()?;
            model.set_parameters(&cast, None, false)?;
        }
        collect_autodiff_garbage();
        Ok(model)
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Optimizer steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn net(&self) -> Result<&Net<B>> {
        self.net.as_ref().ok_or_else(|| {
            Error::Execution("model parameters are unavailable after a failed step".into())
        })
    }

    fn head(&self) -> Head {
        loss::head(&self.spec, self.options.loss)
    }

    /// The layer whose value the loss reads.
    fn loss_layer(&self) -> usize {
        match self.head() {
            Head::SoftmaxLogits | Head::SigmoidLogits => {
                self.spec.layers[self.spec.output].inputs[0]
            }
            _ => self.spec.output,
        }
    }

    fn check_data(&self, data: &Data, with_target: bool) -> Result<usize> {
        let inputs: Vec<usize> = (0..self.spec.layers.len())
            .filter(|&i| matches!(self.spec.layers[i].op, LayerOp::Input { .. }))
            .collect();
        if data.inputs.len() != inputs.len() {
            return Err(Error::Argument(format!(
                "the model has {} input(s), got {}",
                inputs.len(),
                data.inputs.len()
            )));
        }
        let n = data
            .inputs
            .first()
            .map(|t| t.shape().first().copied().unwrap_or(0))
            .unwrap_or(0);
        for t in data.inputs.iter().chain(data.target.iter()) {
            if t.shape().first().copied() != Some(n) {
                return Err(Error::Shape(format!(
                    "inputs and targets must have {n} samples, got shape {:?}",
                    t.shape()
                )));
            }
            if t.device() != self.device {
                return Err(Error::Device(format!(
                    "data is on {} but the model is on {}",
                    t.device(),
                    self.device
                )));
            }
        }
        let shapes = self.spec.infer_shapes()?;
        for (t, &layer) in data.inputs.iter().zip(&inputs) {
            if t.shape()[1..] != shapes[layer][..] {
                return Err(Error::Shape(format!(
                    "input {:?} takes samples of shape {:?}, got {:?}",
                    self.spec.layers[layer].name,
                    shapes[layer],
                    &t.shape()[1..]
                )));
            }
        }
        self.check_ids(data, &inputs)?;
        if with_target && data.target.is_none() {
            return Err(Error::Argument("targets are required".into()));
        }
        if let (true, Some(t)) = (with_target, data.target.as_ref()) {
            let per_sample = crate::tensor::numel(&shapes[self.spec.output]);
            let fits = if t.dtype().is_float() {
                t.numel() == n.saturating_mul(per_sample)
            } else {
                t.numel() == n
            };
            if !fits {
                return Err(Error::Shape(format!(
                    "targets of shape {:?} do not fit the model's output {:?} per sample \
                     (float targets: one value per output; integer targets: one class id per sample)",
                    t.shape(),
                    shapes[self.spec.output]
                )));
            }
            self.check_classes(data)?;
        }
        Ok(n)
    }

    /// Checks that the ids fed to embedding layers are below their vocabulary size (one device
    /// read per input and call).
    fn check_ids(&self, data: &Data, inputs: &[usize]) -> Result<()> {
        for l in &self.spec.layers {
            let LayerOp::Embedding { vocab_size, .. } = l.op else {
                continue;
            };
            let Some(k) = l
                .inputs
                .first()
                .and_then(|j| inputs.iter().position(|i| i == j))
            else {
                continue;
            };
            let t = &data.inputs[k];
            if t.dtype().is_float() || t.numel() == 0 {
                continue;
            }
            let (lo, hi) = id_bounds(t)?;
            if lo < 0 || hi >= vocab_size as i64 {
                return Err(Error::Argument(format!(
                    "embedding {:?} takes ids in 0..{}, got ids from {lo} to {hi}",
                    l.name,
                    vocab_size - 1
                )));
            }
        }
        Ok(())
    }

    /// Refuses batches whose activations (kept for the backward pass) cannot fit the device.
    fn check_batch_memory(&self, rows: usize, training: bool) -> Result<()> {
        let per_sample = self.spec.activation_elements()?;
        let factor: u128 = if training { 3 } else { 1 };
        let bytes = per_sample
            .saturating_mul(rows as u128)
            .saturating_mul(self.options.dtype.size() as u128)
            .saturating_mul(factor);
        crate::memory::reserve(self.device, bytes, &|| {
            format!("the activations of a batch of {rows}")
        })
    }

    /// Checks that integer class ids are valid for the loss: one device read per call, so the
    /// batches of an epoch never wait for the device.
    fn check_classes(&self, data: &Data) -> Result<()> {
        let Some(t) = data.target.as_ref() else {
            return Ok(());
        };
        if t.dtype().is_float() || t.numel() == 0 {
            return Ok(());
        }
        let classes = match self.options.loss {
            Loss::CrossEntropy => {
                let shapes = self.spec.infer_shapes()?;
                shapes[self.spec.output].last().copied().unwrap_or(1)
            }
            Loss::BinaryCrossEntropy => 2,
            Loss::Mse => return Ok(()),
        };
        let (lo, hi) = id_bounds(t)?;
        if lo < 0 || hi >= classes as i64 {
            return Err(Error::Argument(format!(
                "class ids must be in 0..{} for {:?} loss with {classes} outputs, got ids from {lo} to {hi}",
                classes - 1,
                self.options.loss
            )));
        }
        Ok(())
    }

    /// One optimizer step on a batch. A non-finite loss is found before the backward pass:
    /// [`OnNonFinite::Raise`] fails, the others leave the model unchanged (`applied: false`).
    pub fn train_step(&mut self, batch: &Data, lr: f64, on: OnNonFinite) -> Result<Step> {
        let n = self.check_data(batch, true)?;
        self.check_batch_memory(n, true)?;
        let f = self.forward_loss(batch, false)?;
        if !f.value.is_finite() {
            return match on {
                OnNonFinite::Raise => Err(self.non_finite(f.value, None)),
                _ => Ok(Step {
                    loss: f.value,
                    applied: false,
                }),
            };
        }
        let grads = self.grads(f.loss, 1)?;
        self.apply(grads, lr)?;
        Ok(Step {
            loss: f.value,
            applied: true,
        })
    }

    /// The error of a non-finite loss at the next optimizer step.
    fn non_finite(&self, value: f64, at: Option<(usize, usize, usize)>) -> Error {
        let place = match at {
            Some((epoch, batch, batches)) => {
                format!("epoch {epoch}, batch {batch} of {batches}")
            }
            None => "a training step".into(),
        };
        Error::NonFinite(format!(
            "the loss is {value} at {place} (optimizer step {}): the step was not applied and \
             the weights are as before it; lower the learning rate, check the data for NaN or \
             infinite values, clip gradients, or pass on_non_finite: :skip or :stop",
            self.steps + 1
        ))
    }

    /// The loss of a batch through `net` (on the autodiff device when `ad`), with the value it
    /// was computed from and the targets.
    fn batch_loss(
        &self,
        net: &Net<B>,
        batch: &Data,
        ad: bool,
    ) -> Result<(burn::tensor::Tensor<B, 1>, Value, Target)> {
        let inputs = values(&batch.inputs, ad, self.options.dtype)?;
        let t = batch
            .target
            .as_ref()
            .ok_or_else(|| Error::Argument("targets are required".into()))?;
        let target = target(t, ad, self.options.dtype)?;
        let out = net::forward(&self.spec, net, &self.slots, inputs, ad, self.loss_layer())?;
        let loss = loss::compute(self.options.loss, self.head(), &out, &target, ad)?;
        Ok((loss, out, target))
    }

    /// Whether correct predictions are counted: `asked`, and the loss classifies.
    fn counts_hits(&self, asked: bool) -> bool {
        asked && self.options.loss != Loss::Mse
    }

    /// Which samples of a batch were predicted right, when `count` (see [`Self::counts_hits`]).
    fn batch_hits(
        &self,
        count: bool,
        out: &Value,
        target: &Target,
        ad: bool,
    ) -> Result<Option<burn::tensor::Tensor<B, 1, Bool>>> {
        count
            .then(|| loss::correct(self.options.loss, self.head(), out, target, ad))
            .transpose()
    }

    /// Forward pass and loss of one (micro-)batch on the autodiff device. The loss is read
    /// back (one device sync) so that a non-finite one is caught before any update.
    fn forward_loss(&self, batch: &Data, count: bool) -> Result<Forward> {
        let net = self.net()?;
        let (loss, out, target) = self.batch_loss(net, batch, true)?;
        let hits = self.batch_hits(count, &out, &target, true)?;
        let inner = loss.clone().inner();
        let value = scalar(inner.clone());
        Ok(Forward {
            loss,
            inner,
            value,
            hits,
        })
    }

    /// The gradients of `loss` scaled by `1/scale`, frozen layers left out.
    fn grads(&self, loss: burn::tensor::Tensor<B, 1>, scale: usize) -> Result<GradientsParams> {
        let net = self.net()?;
        let scaled = if scale > 1 {
            loss.div_scalar(scale as f64)
        } else {
            loss
        };
        let grads = GradientsParams::from_grads::<B, Net<B>>(scaled.backward(), net);
        Ok(self.remove_frozen(grads))
    }

    fn apply(&mut self, grads: GradientsParams, lr: f64) -> Result<()> {
        let net = self
            .net
            .take()
            .ok_or_else(|| Error::Execution("model parameters are unavailable".into()))?;
        self.net = Some(self.optim.step(lr, net, grads));
        self.steps += 1;
        Ok(())
    }

    /// One epoch over `data` in batches cut on the device; `progress(batches_done, total,
    /// mean_loss_so_far)` is called every `progress_every` batches.
    pub fn train_epoch(
        &mut self,
        data: &Data,
        opts: &EpochOptions,
        progress: &mut dyn FnMut(usize, usize, f64),
    ) -> Result<Stats> {
        let n = self.check_data(data, true)?;
        if opts.batch_size == 0 {
            return Err(Error::Argument("batch_size must be positive".into()));
        }
        let t0 = Instant::now();
        let data = &ids_as_s32(data)?;
        self.check_batch_memory(opts.batch_size.min(n), true)?;
        let order = opts
            .shuffle
            .map(|seed| permutation(n, seed, self.device))
            .transpose()?;
        let batches = n.div_ceil(opts.batch_size);
        let accumulate = opts.accumulate.max(1);
        let count = self.counts_hits(opts.accuracy);
        let mut tally = Tally::new(opts.batch_size);
        let mut acc: Option<burn::optim::GradientsAccumulator<Net<B>>> = None;
        let (mut pending, mut steps, mut seen, mut skipped, mut stopped) = (0, 0, 0, 0, false);
        let lr_at = |k: usize| opts.lrs.get(k).or(opts.lrs.last()).copied().unwrap_or(1e-3);
        for b in 0..batches {
            let (lo, hi) = (b * opts.batch_size, ((b + 1) * opts.batch_size).min(n));
            let batch = cut(data, lo, hi, order.as_ref())?;
            let f = self.forward_loss(&batch, count)?;
            if !f.value.is_finite() {
                match opts.on_non_finite {
                    OnNonFinite::Raise => {
                        return Err(self.non_finite(f.value, Some((opts.epoch, b + 1, batches))))
                    }
                    OnNonFinite::Skip => {
                        skipped += 1;
                        continue;
                    }
                    OnNonFinite::Stop => {
                        stopped = true;
                        break;
                    }
                }
            }
            let grads = self.grads(f.loss, accumulate)?;
            tally.add(f.inner, hi - lo, f.hits);
            seen += hi - lo;
            if accumulate == 1 {
                self.apply(grads, lr_at(steps))?;
                steps += 1;
            } else {
                let a = acc.get_or_insert_with(burn::optim::GradientsAccumulator::new);
                a.accumulate::<B>(self.net()?, grads);
                pending += 1;
                if pending == accumulate || b + 1 == batches {
                    let g = a.grads();
                    self.apply(g, lr_at(steps))?;
                    steps += 1;
                    pending = 0;
                }
            }
            if opts.progress_every > 0 && ((b + 1) % opts.progress_every == 0 || b + 1 == batches) {
                let (loss_sum, _) = tally.totals();
                progress(b + 1, batches, loss_sum / seen.max(1) as f64);
            }
        }
        if pending > 0 {
            if let Some(a) = acc.as_mut() {
                let g = a.grads();
                self.apply(g, lr_at(steps))?;
                steps += 1;
            }
        }
        let (loss_sum, correct) = tally.totals();
        let loss = if seen == 0 {
            f64::NAN
        } else {
            loss_sum / seen as f64
        };
        let accuracy = count.then(|| correct as f64 / seen.max(1) as f64);
        Ok(Stats {
            loss,
            accuracy,
            samples: seen,
            steps,
            seconds: t0.elapsed().as_secs_f64(),
            skipped,
            stopped,
        })
    }

    /// Loss (and accuracy) over `data` without training, in batches of `batch_size`.
    /// With `accuracy` false no per-batch argmax/compare runs and [`Stats::accuracy`] is `None`.
    pub fn evaluate(&self, data: &Data, batch_size: usize, accuracy: bool) -> Result<Stats> {
        let n = self.check_data(data, true)?;
        self.check_batch_memory(batch_size.max(1).min(n), false)?;
        let t0 = Instant::now();
        let net = <Net<B> as AutodiffModule<B>>::valid(self.net()?);
        let count = self.counts_hits(accuracy);
        let data = &ids_as_s32(data)?;
        // Sums stay on the device; they are read once at the end.
        let bs = batch_size.max(1);
        let mut tally = Tally::new(bs);
        for lo in (0..n).step_by(bs) {
            let hi = (lo + bs).min(n);
            let batch = cut(data, lo, hi, None)?;
            let (l, out, t) = self.batch_loss(&net, &batch, false)?;
            tally.add(l, hi - lo, self.batch_hits(count, &out, &t, false)?);
        }
        let (loss_sum, correct) = tally.totals();
        let accuracy = count.then(|| correct as f64 / n.max(1) as f64);
        Ok(Stats {
            loss: loss_sum / n.max(1) as f64,
            accuracy,
            samples: n,
            steps: 0,
            seconds: t0.elapsed().as_secs_f64(),
            skipped: 0,
            stopped: false,
        })
    }

    /// The model's output for `inputs` (inference mode), in batches of `batch_size`.
    pub fn predict(&self, inputs: &[Tensor], batch_size: usize) -> Result<Tensor> {
        let data = Data {
            inputs: inputs.to_vec(),
            target: None,
        };
        let n = self.check_data(&data, false)?;
        let bs = batch_size.max(1).min(n.max(1));
        self.check_batch_memory(bs, false)?;
        let net = <Net<B> as AutodiffModule<B>>::valid(self.net()?);
        let mut parts = Vec::new();
        for lo in (0..n.max(1)).step_by(bs) {
            let hi = (lo + bs).min(n);
            let batch = cut(&data, lo, hi, None)?;
            let out = net::forward(
                &self.spec,
                &net,
                &self.slots,
                values(&batch.inputs, false, self.options.dtype)?,
                false,
                self.spec.output,
            )?;
            parts.push(value_tensor(out)?);
        }
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        crate::eval(&crate::Op::Concatenate { axis: 0 }, &parts, self.device)
            .map(|mut v| v.remove(0))
    }

    /// Exact gradients of the loss on `batch` for every trainable parameter.
    pub fn compute_gradients(&self, batch: &Data) -> Result<Vec<(String, Tensor)>> {
        let n = self.check_data(batch, true)?;
        self.check_batch_memory(n, true)?;
        let net = self.net()?;
        let (loss, _, _) = self.batch_loss(net, batch, true)?;
        let grads = loss.backward();
        let mut res = Vec::new();
        for (name, p) in self.param_refs(net) {
            if let Some(g) = p.grad(&grads) {
                res.push((name, g));
            }
        }
        Ok(res)
    }

    /// Times forward, backward and optimizer phases of one step (synchronising the device
    /// after each).
    pub fn profile_step(&mut self, batch: &Data, lr: f64) -> Result<StepProfile> {
        let n = self.check_data(batch, true)?;
        self.check_batch_memory(n, true)?;
        let dev = ad_device(self.device)?;
        let sync = || B::sync(&dev).map_err(sync_err);
        sync()?;
        let t0 = Instant::now();
        let net = self.net()?;
        let (loss, _, _) = self.batch_loss(net, batch, true)?;
        sync()?;
        let t1 = Instant::now();
        let value = scalar(loss.clone().inner());
        if !value.is_finite() {
            return Err(self.non_finite(value, None));
        }
        let grads = GradientsParams::from_grads::<B, Net<B>>(loss.backward(), net);
        let grads = self.remove_frozen(grads);
        sync()?;
        let t2 = Instant::now();
        self.apply(grads, lr)?;
        sync()?;
        let t3 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        Ok(StepProfile {
            forward_ms: ms(t0, t1),
            backward_ms: ms(t1, t2),
            optimizer_ms: ms(t2, t3),
        })
    }
}

// ---- parameters by name ----

/// A parameter of any rank, by reference.
pub(crate) enum ParamRef<'a> {
    R1(&'a Param<burn::tensor::Tensor<B, 1>>),
    R2(&'a Param<burn::tensor::Tensor<B, 2>>),
    R3(&'a Param<burn::tensor::Tensor<B, 3>>),
    R4(&'a Param<burn::tensor::Tensor<B, 4>>),
}

impl ParamRef<'_> {
    pub(crate) fn id(&self) -> ParamId {
        match self {
            ParamRef::R1(p) => p.id,
            ParamRef::R2(p) => p.id,
            ParamRef::R3(p) => p.id,
            ParamRef::R4(p) => p.id,
        }
    }

    fn inner_prim(&self) -> Prim {
        match self {
            ParamRef::R1(p) => p.val().inner().into_primitive().tensor(),
            ParamRef::R2(p) => p.val().inner().into_primitive().tensor(),
            ParamRef::R3(p) => p.val().inner().into_primitive().tensor(),
            ParamRef::R4(p) => p.val().inner().into_primitive().tensor(),
        }
    }

    pub(crate) fn tensor(&self) -> Tensor {
        Tensor::wrap(self.inner_prim(), Kind::Float)
    }

    fn grad(&self, grads: &<B as AutodiffBackend>::Gradients) -> Option<Tensor> {
        let p = match self {
            ParamRef::R1(p) => p.val().grad(grads).map(|g| g.into_primitive().tensor()),
            ParamRef::R2(p) => p.val().grad(grads).map(|g| g.into_primitive().tensor()),
            ParamRef::R3(p) => p.val().grad(grads).map(|g| g.into_primitive().tensor()),
            ParamRef::R4(p) => p.val().grad(grads).map(|g| g.into_primitive().tensor()),
        }?;
        Some(Tensor::wrap(p, Kind::Float))
    }

    fn remove_from(&self, grads: &mut GradientsParams) {
        let id = self.id();
        match self {
            ParamRef::R1(_) => drop(grads.remove::<B, 1>(id)),
            ParamRef::R2(_) => drop(grads.remove::<B, 2>(id)),
            ParamRef::R3(_) => drop(grads.remove::<B, 3>(id)),
            ParamRef::R4(_) => drop(grads.remove::<B, 4>(id)),
        }
    }
}

impl Model {
    /// Trainable parameters as `(layer.param, ref)` in layer order.
    pub(crate) fn param_refs<'a>(&self, net: &'a Net<B>) -> Vec<(String, ParamRef<'a>)> {
        let mut out = Vec::new();
        for (i, l) in self.spec.layers.iter().enumerate() {
            let Some(s) = self.slots[i] else { continue };
            let n = |p: &str| format!("{}.{p}", l.name);
            match &l.op {
                LayerOp::Dense { .. } => {
                    out.push((n("kernel"), ParamRef::R2(&net.dense[s].kernel)));
                    if let Some(b) = &net.dense[s].bias {
                        out.push((n("bias"), ParamRef::R1(b)));
                    }
                }
                LayerOp::Conv { kernel_size, .. } if kernel_size.len() == 1 => {
                    out.push((n("kernel"), ParamRef::R3(&net.conv1[s].kernel)));
                    if let Some(b) = &net.conv1[s].bias {
                        out.push((n("bias"), ParamRef::R1(b)));
                    }
                }
                LayerOp::Conv { .. } => {
                    out.push((n("kernel"), ParamRef::R4(&net.conv2[s].kernel)));
                    if let Some(b) = &net.conv2[s].bias {
                        out.push((n("bias"), ParamRef::R1(b)));
                    }
                }
                LayerOp::BatchNorm { .. } => {
                    out.push((n("gamma"), ParamRef::R1(&net.bn[s].gamma)));
                    out.push((n("beta"), ParamRef::R1(&net.bn[s].beta)));
                }
                LayerOp::LayerNorm { .. } => {
                    out.push((n("gamma"), ParamRef::R1(&net.ln[s].gamma)));
                    if let Some(b) = &net.ln[s].beta {
                        out.push((n("beta"), ParamRef::R1(b)));
                    }
                }
                LayerOp::Embedding { .. } => {
                    out.push((n("kernel"), ParamRef::R2(&net.emb[s].weight)))
                }
                _ => {}
            }
        }
        out
    }

    fn remove_frozen(&self, mut grads: GradientsParams) -> GradientsParams {
        if self.frozen.is_empty() {
            return grads;
        }
        if let Some(net) = &self.net {
            for (name, p) in self.param_refs(net) {
                let layer = name.rsplit_once('.').map(|(l, _)| l).unwrap_or(&name);
                if self.frozen.contains(layer) {
                    p.remove_from(&mut grads);
                }
            }
        }
        grads
    }

    /// Parameters (and batch-norm running statistics) as `(layer.param, tensor)`.
    pub fn parameters(&self) -> Result<Vec<(String, Tensor)>> {
        let net = self.net()?;
        let mut out: Vec<(String, Tensor)> = self
            .param_refs(net)
            .into_iter()
            .map(|(n, p)| (n, p.tensor()))
            .collect();
        for (i, l) in self.spec.layers.iter().enumerate() {
            if let (LayerOp::BatchNorm { .. }, Some(s)) = (&l.op, self.slots[i]) {
                let bn = &net.bn[s];
                for (name, st) in [("mean", &bn.running_mean), ("var", &bn.running_var)] {
                    // `valid` folds the last training step's pending update into the value
                    // (`value` alone is one update behind, and a checkpoint would be too).
                    let v = AutodiffModule::valid(st).value().into_primitive().tensor();
                    out.push((format!("{}.{name}", l.name), Tensor::wrap(v, Kind::Float)));
                }
            }
        }
        Ok(out)
    }

    /// Parameter ids by name (so a saved optimizer state finds its parameters again).
    pub fn param_ids(&self) -> Result<Vec<(String, ParamId)>> {
        Ok(self
            .param_refs(self.net()?)
            .into_iter()
            .map(|(n, p)| (n, p.id()))
            .collect())
    }

    /// Replaces parameters by name. Shapes must match, and types must be the model's float
    /// type unless `convert` (then they are converted); `ids` restores saved parameter ids.
    pub fn set_parameters(
        &mut self,
        params: &[(String, Tensor)],
        ids: Option<&[(String, ParamId)]>,
        convert: bool,
    ) -> Result<()> {
        let current = self.parameters()?;
        let dtype = self.options.dtype;
        let mut converted = Vec::with_capacity(params.len());
        for (name, t) in params {
            if t.dtype() != dtype {
                if !convert {
                    return Err(Error::Dtype(format!(
                        "parameter {name:?} is {}, but the model computes in {dtype}: convert it \
                         first (or ask for conversion)",
                        t.dtype()
                    )));
                }
                converted.push((name.clone(), t.cast(dtype)?));
            } else {
                converted.push((name.clone(), t.clone()));
            }
        }
        let params = &converted[..];
        for (name, t) in params {
            let Some((_, old)) = current.iter().find(|(n, _)| n == name) else {
                return Err(Error::Argument(format!(
                    "the model has no parameter {name:?}"
                )));
            };
            if old.shape() != t.shape() {
                return Err(Error::Shape(format!(
                    "parameter {name:?} has shape {:?}, got {:?}",
                    old.shape(),
                    t.shape()
                )));
            }
        }
        let ad = ad_device(self.device)?;
        let mut net = self
            .net
            .take()
            .ok_or_else(|| Error::Execution("model parameters are unavailable".into()))?;
        let find = |name: &str| params.iter().find(|(n, _)| n == name).map(|(_, t)| t);
        let id_of = |name: &str, old: ParamId| {
            ids.and_then(|ids| ids.iter().find(|(n, _)| n == name).map(|(_, id)| *id))
                .unwrap_or(old)
        };
        let result = (|| -> Result<()> {
            for (i, l) in self.spec.layers.clone().iter().enumerate() {
                let Some(s) = self.slots[i] else { continue };
                let key = |p: &str| format!("{}.{p}", l.name);
                macro_rules! set {
                    ($param:expr, $name:expr, $d:literal) => {{
                        let k = key($name);
                        if let Some(t) = find(&k) {
                            let id = id_of(&k, $param.id);
                            $param = Param::initialized(id, to_param::<$d>(t, &ad)?);
                        } else if let Some(ids) = ids {
                            if let Some((_, id)) = ids.iter().find(|(n, _)| *n == k) {
                                $param = Param::initialized(*id, $param.val());
                            }
                        }
                    }};
                }
                match &l.op {
                    LayerOp::Dense { .. } => {
                        set!(net.dense[s].kernel, "kernel", 2);
                        if let Some(b) = net.dense[s].bias.as_mut() {
                            set!(*b, "bias", 1);
                        }
                    }
                    LayerOp::Conv { kernel_size, .. } if kernel_size.len() == 1 => {
                        set!(net.conv1[s].kernel, "kernel", 3);
                        if let Some(b) = net.conv1[s].bias.as_mut() {
                            set!(*b, "bias", 1);
                        }
                    }
                    LayerOp::Conv { .. } => {
                        set!(net.conv2[s].kernel, "kernel", 4);
                        if let Some(b) = net.conv2[s].bias.as_mut() {
                            set!(*b, "bias", 1);
                        }
                    }
                    LayerOp::BatchNorm { .. } => {
                        set!(net.bn[s].gamma, "gamma", 1);
                        set!(net.bn[s].beta, "beta", 1);
                        if let Some(t) = find(&key("mean")) {
                            // On the autodiff device like the state BatchNorm::init
                            // makes (an inner tensor fails every later forward pass),
                            // outside the graph.
                            net.bn[s].running_mean =
                                burn::module::RunningState::new(to_param::<1>(t, &ad)?.detach());
                        }
                        if let Some(t) = find(&key("var")) {
                            net.bn[s].running_var =
                                burn::module::RunningState::new(to_param::<1>(t, &ad)?.detach());
                        }
                    }
                    LayerOp::LayerNorm { .. } => {
                        set!(net.ln[s].gamma, "gamma", 1);
                        if let Some(b) = net.ln[s].beta.as_mut() {
                            set!(*b, "beta", 1);
                        }
                    }
                    LayerOp::Embedding { .. } => set!(net.emb[s].weight, "kernel", 2),
                    _ => {}
                }
            }
            Ok(())
        })();
        self.net = Some(net);
        collect_autodiff_garbage();
        result
    }

    /// Freezes layers by name: their parameters stop changing.
    pub fn freeze(&mut self, layers: &[String]) -> Result<()> {
        for l in layers {
            if !self.spec.layers.iter().any(|x| &x.name == l) {
                return Err(Error::Argument(format!("no layer named {l:?}")));
            }
            self.frozen.insert(l.clone());
        }
        Ok(())
    }

    /// Unfreezes layers by name (all when `layers` is empty).
    pub fn unfreeze(&mut self, layers: &[String]) {
        if layers.is_empty() {
            self.frozen.clear();
        }
        for l in layers {
            self.frozen.remove(l);
        }
    }

    /// Whether a layer is frozen.
    pub fn frozen(&self, layer: &str) -> bool {
        self.frozen.contains(layer)
    }

    /// Moves parameters and optimizer state to another device.
    pub fn to_device(&self, device: Device) -> Result<Model> {
        let ad = ad_device(device)?;
        let mut m = self.clone();
        let state = m.optim.to_bytes()?;
        m.net = Some(
            m.net
                .take()
                .ok_or_else(|| Error::Execution("model parameters are unavailable".into()))?,
        );
        m.net = m
            .net
            .take()
            .map(|n| <Net<B> as Module<B>>::to_device(n, &ad));
        m.optim = m
            .options
            .optimizer
            .init()?
            .load_bytes(state, &device.to_dispatch()?)?;
        m.device = device;
        Ok(m)
    }

    /// Casts float parameters to `dtype` (f16, bf16, f32, f64), e.g. to quantize for inference.
    pub fn cast(&self, dtype: DType) -> Result<Model> {
        dtype.float_dtype()?;
        let mut m = self.clone();
        let params = m.parameters()?;
        m.options.dtype = dtype;
        m.set_parameters(&params, None, true)?;
        Ok(m)
    }

    /// The optimizer state as bytes.
    pub fn optimizer_state(&self) -> Result<Vec<u8>> {
        self.optim.to_bytes()
    }

    /// Restores an optimizer state and the step counter.
    pub fn set_optimizer_state(&mut self, bytes: Vec<u8>, steps: u64) -> Result<()> {
        // Optimizer state lives on the inner (non-autodiff) device.
        let inner = self.device.to_dispatch()?;
        self.optim = self.options.optimizer.init()?.load_bytes(bytes, &inner)?;
        self.steps = steps;
        Ok(())
    }

    /// Replaces the optimizer (its state starts afresh).
    pub fn set_optimizer(&mut self, config: OptimConfig) -> Result<()> {
        self.optim = config.init()?;
        self.options.optimizer = config;
        Ok(())
    }

    /// Frozen layer names.
    pub fn frozen_layers(&self) -> Vec<String> {
        self.frozen.iter().cloned().collect()
    }
}

fn to_param<const D: usize>(
    t: &Tensor,
    ad: &burn::DispatchDevice,
) -> Result<burn::tensor::Tensor<B, D>> {
    if t.rank() != D {
        return Err(Error::Shape(format!(
            "expected a rank-{D} parameter, got {:?}",
            t.shape()
        )));
    }
    let t = if t.dtype().is_float() {
        t.clone()
    } else {
        t.cast(DType::F32)?
    };
    let inner: burn::tensor::Tensor<B, D> =
        burn::tensor::Tensor::from_primitive(TensorPrimitive::Float(t.prim()));
    let inner = inner.to_device(&inner_of(ad));
    Ok(burn::tensor::Tensor::from_inner(inner).require_grad())
}

fn inner_of(ad: &burn::DispatchDevice) -> burn::DispatchDevice {
    use burn::tensor::backend::DeviceOps;
    ad.inner().clone()
}

/// Converts input tensors into graph values (on the autodiff device when `ad`).
fn values(inputs: &[Tensor], ad: bool, dtype: DType) -> Result<Vec<Value>> {
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                let t = t.cast(dtype)?;
                let p = if ad {
                    B::from_inner(t.prim())
                } else {
                    t.prim()
                };
                Ok(Value::Float(TensorPrimitive::Float(p), t.shape().to_vec()))
            } else {
                if t.rank() != 2 {
                    return Err(Error::Shape(format!(
                        "integer inputs (embedding ids) must be [batch, seq], got {:?}",
                        t.shape()
                    )));
                }
                let p = t.cast(DType::S32)?.prim();
                let p = if ad { B::int_from_inner(p) } else { p };
                Ok(Value::Ids(burn::tensor::Tensor::from_primitive(p)))
            }
        })
        .collect()
}

fn target(t: &Tensor, ad: bool, dtype: DType) -> Result<Target> {
    let _ = ad;
    if t.dtype().is_float() {
        let t = t.cast(dtype)?;
        let p = if ad {
            B::from_inner(t.prim())
        } else {
            t.prim()
        };
        Ok(Target::Values(Value::Float(
            TensorPrimitive::Float(p),
            t.shape().to_vec(),
        )))
    } else {
        let n = t.shape().first().copied().unwrap_or(0);
        // Class ids stay on the plain device: losses lift what they derive from them.
        let p = t.cast(DType::S32)?.reshape(vec![n])?.prim();
        Ok(Target::Classes(burn::tensor::Tensor::from_primitive(p)))
    }
}

/// Frees Burn autodiff's records of tracked tensors that no longer exist (the parameters of
/// dropped or replaced models). Burn frees them only at the end of a backward pass, so a
/// process that builds or loads models without training them grew by ~8 KB per model; one
/// backward pass on a one-element host tensor runs that cleanup (tens of microseconds).
pub fn collect_autodiff_garbage() {
    let dev =
        burn::DispatchDevice::autodiff(burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice));
    let t: burn::tensor::Tensor<B, 1> =
        burn::tensor::Tensor::from_data(TensorData::new(vec![0.0f32], [1]), &dev).require_grad();
    drop(t.sum().backward());
}

/// The smallest and largest of integer ids (one device read).
fn id_bounds(t: &Tensor) -> Result<(i64, i64)> {
    let ids: burn::tensor::Tensor<B, 1, Int> =
        burn::tensor::Tensor::from_primitive(t.cast(DType::S64)?.reshape(vec![t.numel()])?.prim());
    let bounds = burn::tensor::Tensor::cat(vec![ids.clone().min(), ids.max()], 0).into_data();
    let b: Vec<i64> = bounds.iter::<i64>().collect();
    Ok((
        b.first().copied().unwrap_or(0),
        b.last().copied().unwrap_or(0),
    ))
}

/// Reads a one-element float tensor as f64 (Burn's `into_scalar` goes through f32).
fn scalar(t: burn::tensor::Tensor<B, 1>) -> f64 {
    t.into_data().iter::<f64>().next().unwrap_or(f64::NAN)
}

fn value_tensor(v: Value) -> Result<Tensor> {
    match v {
        Value::Float(p, shape) => Ok(Tensor::from_prim(p.tensor(), Kind::Float, shape)),
        Value::Ids(_) => Err(Error::Execution("the output is integer ids".into())),
    }
}

/// A seeded permutation of `0..n` on the device (Fisher-Yates on the host, uploaded once).
fn permutation(n: usize, seed: u64, device: Device) -> Result<Tensor> {
    let mut g = SplitMix64::new(seed);
    let mut idx: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        let j = (g.uniform() * (i + 1) as f64) as usize;
        idx.swap(i, j.min(i));
    }
    Tensor::from_data(TensorData::new(idx, [n]), DType::S64, vec![n], device)
}

/// `data` with integer targets in the type the losses read, converted once per call rather
/// than per batch.
fn ids_as_s32(data: &Data) -> Result<Data> {
    Ok(Data {
        inputs: data.inputs.clone(),
        target: data
            .target
            .as_ref()
            .map(|t| {
                if t.dtype().is_float() {
                    Ok(t.clone())
                } else {
                    t.cast(DType::S32)
                }
            })
            .transpose()?,
    })
}

/// Rows `lo..hi` (of the permuted order when given) of every tensor, on the device.
fn cut(data: &Data, lo: usize, hi: usize, order: Option<&Tensor>) -> Result<Data> {
    let rows = |t: &Tensor| -> Result<Tensor> {
        let mut shape = t.shape().to_vec();
        shape[0] = hi - lo;
        match order {
            Some(perm) => {
                let idx = crate::op::shape::slice_static(perm, &[lo], &[hi - lo], &[1])?;
                let p = match t.kind() {
                    Kind::Float => B::float_select(t.prim(), 0, idx.prim()),
                    _ => B::int_select(t.int_prim()?, 0, idx.prim()),
                };
                let kind = if t.kind() == Kind::Float {
                    Kind::Float
                } else {
                    Kind::Int
                };
                Ok(Tensor::from_prim(p, kind, shape))
            }
            None => {
                let r = t.rank();
                let mut starts = vec![0; r];
                starts[0] = lo;
                crate::op::shape::slice_static(t, &starts, &shape, &vec![1; r])
            }
        }
    };
    Ok(Data {
        inputs: data.inputs.iter().map(rows).collect::<Result<_>>()?,
        target: data.target.as_ref().map(rows).transpose()?,
    })
}
