//! A compiled model: the graph, its parameters on a device, the optimizer and its state.
//! Training steps, epochs, evaluation and prediction run here, one call each, with Burn's
//! autodiff computing exact gradients.

use super::loss::{self, Head, Loss, Target};
use super::net::{self, Net, Slots, Value};
use super::optim::{Optim, OptimConfig};
use super::spec::{LayerOp, ModelSpec};
use super::tally::{Hits, Tally};
use crate::dtype::Kind;
use crate::rng::SplitMix64;
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

mod data;
mod finite;
mod options;
mod parallel;
mod params;
mod unshared;

pub use data::collect_autodiff_garbage;
use data::*;
use finite::{Bad, Checks, Running};
pub use options::{EpochOptions, EvalOptions, OnNonFinite, StepOptions};
use unshared::Unshared;

/// The place of the last applied update while its parameters are not checked yet
/// (`Some(None)`: a step outside an epoch).
type Unchecked = Option<Option<(usize, usize, usize)>>;

/// A batch's forward pass: the loss on the autodiff graph, the same loss off it and, for
/// classification, which samples were predicted right. Nothing is read from the device.
struct Forward {
    loss: burn::tensor::Tensor<B, 1>,
    inner: burn::tensor::Tensor<B, 1>,
    hits: Option<burn::tensor::Tensor<B, 1, Bool>>,
}

/// A (micro-)batch's contribution to an epoch's tally, added once its step is applied.
struct Counted {
    loss: burn::tensor::Tensor<B, 1>,
    rows: usize,
    hits: Option<Hits>,
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

/// Whether `lr` can be a step's learning rate: finite and not negative.
fn valid_lr(lr: f64) -> bool {
    lr.is_finite() && lr >= 0.0
}

fn bad_lr(lr: f64) -> Error {
    Error::Argument(format!(
        "learning rates must be finite non-negative numbers, got {lr}"
    ))
}

/// The linear-warmup factor of optimizer step `step` (0-based) over `warmup` steps.
fn warmup_factor(step: u64, warmup: u64) -> f64 {
    if warmup == 0 {
        1.0
    } else {
        ((step as f64 + 1.0) / warmup as f64).min(1.0)
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

impl Data {
    /// The devices of its tensors.
    pub fn devices(&self) -> Vec<Device> {
        self.inputs
            .iter()
            .chain(self.target.as_ref())
            .map(Tensor::device)
            .collect()
    }

    /// A copy on `device` (see [`Tensor::to_device`]).
    pub fn to_device(&self, device: Device) -> Result<Data> {
        Ok(Data {
            inputs: self
                .inputs
                .iter()
                .map(|t| t.to_device(device))
                .collect::<Result<_>>()?,
            target: self
                .target
                .as_ref()
                .map(|t| t.to_device(device))
                .transpose()?,
        })
    }
}

/// The result of one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The batch's loss.
    pub loss: f64,
    /// Whether the optimizer applied the step (false for a skipped non-finite step).
    pub applied: bool,
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
    /// Batches whose update was left out because their step was not finite.
    pub skipped: usize,
    /// Whether a non-finite step ended the epoch early.
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
    /// Copies on the further devices of data-parallel training (none: one device).
    replicas: Vec<Model>,
    /// The replicas' summed gradients between a split batch's backward pass and its update.
    replica_grads: Unshared<Vec<GradientsParams>>,
    /// A replica's gradients summed over the micro-batches of an accumulation, until its
    /// update.
    accumulated: Unshared<Option<burn::optim::GradientsAccumulator<Net<B>>>>,
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
        // measured on Mesa's lavapipe: f64 training there gave NaN gradients
        device.check_dtype(dtype)?;
        let params = spec.param_elements()?;
        let _params =
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
            replicas: Vec::new(),
            replica_grads: Unshared::default(),
            accumulated: Unshared::default(),
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
    fn check_batch_memory(
        &self,
        rows: usize,
        training: bool,
    ) -> Result<crate::memory::Reservation> {
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

    /// One optimizer step on a batch. A non-finite loss, gradient or batch-norm statistic
    /// leaves the step out: [`OnNonFinite::Raise`] fails, the others return `applied: false`.
    /// An update that overflows a parameter always fails (see [`Model::overflowed`]).
    pub fn train_step(&mut self, batch: &Data, lr: f64, on: OnNonFinite) -> Result<Step> {
        if !valid_lr(lr) {
            return Err(bad_lr(lr));
        }
        self.replicas.clear();
        let n = self.check_data(batch, true)?;
        let _batch = self.check_batch_memory(n, true)?;
        let running = self.save_running()?;
        let f = self.forward_loss(batch, false)?;
        let grads = self.grads(f.loss, 1)?;
        let mut checks = Checks::with_loss(f.inner);
        let (loss, bad) = self.guarded_step(grads, lr, &mut checks, running.as_ref())?;
        match bad {
            Some(bad) if on == OnNonFinite::Raise => Err(self.non_finite(&bad, None)),
            bad => Ok(Step {
                loss,
                applied: bad.is_none(),
            }),
        }
    }

    /// Reads `checks` with the marks of the gradients and of the batch-norm statistics added
    /// (one device read, the step's only synchronisation with the device). When an entry is
    /// not finite the update is left out and the running statistics are put back to `running`
    /// (and, if an earlier update is `unchecked`, the parameters are looked at: one it made NaN
    /// or infinite fails with [`Model::overflowed`]'s error, since it explains the rest).
    /// Otherwise the update is applied and `unchecked` records `at`, its place: its parameters
    /// are checked when a later step fails its check or by [`Model::check_unchecked`] (at the
    /// end of an epoch or of a single step). Returns the first entry (the loss) and the first
    /// non-finite one.
    fn guarded_apply(
        &mut self,
        grads: GradientsParams,
        lr: f64,
        checks: &mut Checks,
        running: Option<&Running>,
        at: Option<(usize, usize, usize)>,
        unchecked: &mut Unchecked,
    ) -> Result<(f64, Option<Bad>)> {
        self.check_gradients(&grads, lr, checks)?;
        self.check_statistics(checks)?;
        let bad = self.read_checks(checks, unchecked)?;
        if bad.1.is_some() {
            self.restore_running(running);
            self.replica_grads = Unshared::default();
            return Ok(bad);
        }
        self.apply_everywhere(grads, lr)?;
        *unchecked = Some(at);
        Ok(bad)
    }

    /// [`Model::guarded_apply`] for a single step (not part of an epoch): an update it applies
    /// has its parameters checked before it returns.
    fn guarded_step(
        &mut self,
        grads: GradientsParams,
        lr: f64,
        checks: &mut Checks,
        running: Option<&Running>,
    ) -> Result<(f64, Option<Bad>)> {
        let mut unchecked = None;
        let out = self.guarded_apply(grads, lr, checks, running, None, &mut unchecked)?;
        self.check_unchecked(&mut unchecked)?;
        Ok(out)
    }

    /// Reads `checks`; when an entry is not finite and an update is `unchecked`, checks the
    /// parameters first (an overflowed one is the error).
    fn read_checks(
        &self,
        checks: &mut Checks,
        unchecked: &mut Unchecked,
    ) -> Result<(f64, Option<Bad>)> {
        let (first, bad) = std::mem::replace(checks, Checks::new()).read();
        if bad.is_some() {
            self.check_unchecked(unchecked)?;
        }
        Ok((first, bad))
    }

    /// Checks the parameters after an update that no read has covered yet (one device read).
    fn check_unchecked(&self, unchecked: &mut Unchecked) -> Result<()> {
        match unchecked.take() {
            Some(at) => self.check_update(at),
            None => Ok(()),
        }
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

    /// Forward pass and loss of one (micro-)batch on the autodiff device (no device read).
    fn forward_loss(&self, batch: &Data, count: bool) -> Result<Forward> {
        let net = self.net()?;
        let (loss, out, target) = self.batch_loss(net, batch, true)?;
        let hits = self.batch_hits(count, &out, &target, true)?;
        let inner = loss.clone().inner();
        Ok(Forward { loss, inner, hits })
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

    /// Applies the accumulated gradients (checked micro-batch by micro-batch before they were
    /// summed); the updated parameters are checked later (`unchecked`).
    fn apply_accumulated(
        &mut self,
        acc: &mut Option<burn::optim::GradientsAccumulator<Net<B>>>,
        lr: f64,
        at: (usize, usize, usize),
        unchecked: &mut Unchecked,
    ) -> Result<()> {
        let Some(a) = acc.as_mut() else {
            return Ok(());
        };
        let grads = a.grads();
        self.apply(grads, lr)?;
        self.apply_replica_sums(lr)?;
        *unchecked = Some(Some(at));
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
        self.train_epoch_with(data, &[], opts, progress)
    }

    /// [`Model::train_epoch`] with the data already copied to the other devices of
    /// [`EpochOptions::devices`] (`copies`, one per other device, in order; empty: the epoch
    /// copies them), so that several epochs copy them once.
    pub fn train_epoch_with(
        &mut self,
        data: &Data,
        copies: &[Data],
        opts: &EpochOptions,
        progress: &mut dyn FnMut(usize, usize, f64),
    ) -> Result<Stats> {
        let n = self.check_data(data, true)?;
        if opts.batch_size == 0 {
            return Err(Error::Argument("batch_size must be positive".into()));
        }
        if let Some(&bad) = opts.lrs.iter().find(|&&lr| !valid_lr(lr)) {
            return Err(bad_lr(bad));
        }
        self.use_devices(&opts.devices)?;
        let t0 = Instant::now();
        let data = &ids_as_s32(data)?;
        let _batch = self.check_batch_memory(opts.batch_size.min(n), true)?;
        // The permutation is built on the host: eight bytes per sample.
        let _order = opts
            .shuffle
            .map(|_| {
                crate::memory::reserve(Device::Cpu, (n as u128).saturating_mul(8), &|| {
                    format!("the shuffling order of {n} samples")
                })
            })
            .transpose()?;
        let order = opts
            .shuffle
            .map(|seed| permutation(n, seed, self.device))
            .transpose()?;
        let copies = copies.iter().map(ids_as_s32).collect::<Result<Vec<_>>>()?;
        let sources = self.sources(data, &copies, order.as_ref())?;
        let batches = n.div_ceil(opts.batch_size);
        let accumulate = opts.accumulate.max(1);
        let count = self.counts_hits(opts.accuracy);
        let mut tally = Tally::new(opts.batch_size);
        let mut acc: Option<burn::optim::GradientsAccumulator<Net<B>>> = None;
        // Micro-batches since the last optimizer step, tallied once it is applied.
        let mut pending: Vec<Counted> = Vec::new();
        let mut unchecked: Unchecked = None;
        let (mut steps, mut seen, mut skipped, mut stopped) = (0, 0, 0, false);
        let lr_at = |k: usize| {
            let lr = opts.lrs.get(k).or(opts.lrs.last()).copied().unwrap_or(1e-3);
            lr * warmup_factor(opts.first_step.saturating_add(k as u64), opts.warmup)
        };
        for b in 0..batches {
            // A caller that exited or a deadline that passed stops training between steps.
            crate::cancel::check()?;
            let at = (opts.epoch, b + 1, batches);
            let (lo, hi) = (b * opts.batch_size, ((b + 1) * opts.batch_size).min(n));
            let running = self.save_running()?;
            let (inner, hits, grads) = self.batch_grads(&sources, (lo, hi), count, accumulate)?;
            let mut checks = Checks::with_loss(inner.clone());
            let counted = Counted {
                loss: inner,
                rows: hi - lo,
                hits,
            };
            // The first non-finite entry of a batch that was left out.
            let failed = if accumulate == 1 {
                let lr = lr_at(steps);
                let (_, bad) = self.guarded_apply(
                    grads,
                    lr,
                    &mut checks,
                    running.as_ref(),
                    Some(at),
                    &mut unchecked,
                )?;
                if bad.is_none() {
                    steps += 1;
                    seen += counted.rows;
                    tally.add(counted.loss, counted.rows, counted.hits);
                }
                bad
            } else {
                // Each micro-batch's loss, gradients and statistics are checked before they
                // are summed.
                self.check_gradients(&grads, lr_at(steps), &mut checks)?;
                self.check_statistics(&mut checks)?;
                let bad = self.read_checks(&mut checks, &mut unchecked)?.1;
                if bad.is_some() {
                    self.restore_running(running.as_ref());
                    self.replica_grads = Unshared::default();
                } else {
                    let a = acc.get_or_insert_with(burn::optim::GradientsAccumulator::new);
                    a.accumulate::<B>(self.net()?, grads);
                    self.accumulate_replicas()?;
                    pending.push(counted);
                }
                bad
            };
            if let Some(bad) = failed {
                match opts.on_non_finite {
                    OnNonFinite::Raise => return Err(self.non_finite(&bad, Some(at))),
                    OnNonFinite::Skip => skipped += 1,
                    OnNonFinite::Stop => {
                        stopped = true;
                        break;
                    }
                }
            }
            if !pending.is_empty() && (pending.len() == accumulate || b + 1 == batches) {
                self.apply_accumulated(&mut acc, lr_at(steps), at, &mut unchecked)?;
                steps += 1;
                for c in pending.drain(..) {
                    seen += c.rows;
                    tally.add(c.loss, c.rows, c.hits);
                }
            }
            if opts.progress_every > 0 && ((b + 1) % opts.progress_every == 0 || b + 1 == batches) {
                let (loss_sum, _) = tally.totals();
                progress(b + 1, batches, loss_sum / seen.max(1) as f64);
            }
        }
        // Stopped inside an accumulation: the finite micro-batches before still make a step.
        if !pending.is_empty() {
            let at = (opts.epoch, batches, batches);
            self.apply_accumulated(&mut acc, lr_at(steps), at, &mut unchecked)?;
            steps += 1;
            for c in pending.drain(..) {
                seen += c.rows;
                tally.add(c.loss, c.rows, c.hits);
            }
        }
        self.check_unchecked(&mut unchecked)?;
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
        let _batch = self.check_batch_memory(batch_size.max(1).min(n), false)?;
        let t0 = Instant::now();
        let net = <Net<B> as AutodiffModule<B>>::valid(self.net()?);
        let count = self.counts_hits(accuracy);
        let data = &ids_as_s32(data)?;
        // Sums stay on the device; they are read once at the end.
        let bs = batch_size.max(1);
        let mut tally = Tally::new(bs);
        for lo in (0..n).step_by(bs) {
            crate::cancel::check()?;
            let hi = (lo + bs).min(n);
            let batch = cut(data, lo, hi, None)?;
            let (l, out, t) = self.batch_loss(&net, &batch, false)?;
            let hits = self.batch_hits(count, &out, &t, false)?;
            tally.add(l, hi - lo, hits.map(Hits::Rows));
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
        let _batch = self.check_batch_memory(bs, false)?;
        let net = <Net<B> as AutodiffModule<B>>::valid(self.net()?);
        let mut parts = Vec::new();
        for lo in (0..n.max(1)).step_by(bs) {
            crate::cancel::check()?;
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
        crate::op::eval(&crate::Op::Concatenate { axis: 0 }, &parts, self.device)
            .map(|mut v| v.remove(0))
    }

    /// Exact gradients of the loss on `batch` for every trainable parameter.
    pub fn compute_gradients(&self, batch: &Data) -> Result<Vec<(String, Tensor)>> {
        let n = self.check_data(batch, true)?;
        let _batch = self.check_batch_memory(n, true)?;
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
    /// after each). A non-finite loss, gradient or statistic leaves the step out and fails with
    /// [`Error::NonFinite`].
    pub fn profile_step(&mut self, batch: &Data, lr: f64) -> Result<StepProfile> {
        if !valid_lr(lr) {
            return Err(bad_lr(lr));
        }
        self.replicas.clear();
        let n = self.check_data(batch, true)?;
        let _batch = self.check_batch_memory(n, true)?;
        let dev = ad_device(self.device)?;
        let sync = || B::sync(&dev).map_err(sync_err);
        sync()?;
        let running = self.save_running()?;
        let t0 = Instant::now();
        let net = self.net()?;
        let (loss, _, _) = self.batch_loss(net, batch, true)?;
        sync()?;
        let t1 = Instant::now();
        let mut checks = Checks::with_loss(loss.clone().inner());
        let grads = GradientsParams::from_grads::<B, Net<B>>(loss.backward(), net);
        let grads = self.remove_frozen(grads);
        sync()?;
        let t2 = Instant::now();
        // The optimizer phase includes the step's finiteness checks (two device reads).
        if let (_, Some(bad)) = self.guarded_step(grads, lr, &mut checks, running.as_ref())? {
            return Err(self.non_finite(&bad, None));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar_model(op: &str) -> Result<Model> {
        let spec: ModelSpec = serde_json::from_str(&format!(
            r#"{{"layers": [{{"name": "x", "op": {{"input": {{"shape": []}}}}}},
                            {{"name": "l", "op": {op}, "inputs": [0]}}],
                 "output": 1}}"#
        ))
        .map_err(|e| Error::Argument(e.to_string()))?;
        let options: CompileOptions =
            serde_json::from_str(r#"{"loss": "mse", "optimizer": {"kind": "sgd"}}"#)
                .map_err(|e| Error::Argument(e.to_string()))?;
        Model::new(spec, options, Device::Cpu)
    }

    fn floats(values: &[f32], shape: &[usize]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::from_bytes(&bytes, shape, DType::F32, Device::Cpu).expect("tensor")
    }

    /// Every layer after an input of scalar samples either refuses it with an error or builds
    /// and trains: a panic (caught at the boundary as `:panic`) means a check came too late.
    #[test]
    fn scalar_samples_never_panic_in_any_layer() {
        for op in [
            r#"{"global_avg_pool": {}}"#,
            r#"{"dense": {"units": 2}}"#,
            r#""flatten""#,
            r#"{"dropout": {"rate": 0.5}}"#,
            r#"{"batch_norm": {}}"#,
            r#"{"layer_norm": {}}"#,
            r#"{"activation": {"activation": "softmax"}}"#,
            r#"{"activation": {"activation": "log_softmax"}}"#,
            r#"{"embedding": {"vocab_size": 4, "embedding_size": 2}}"#,
            r#"{"conv": {"filters": 2, "kernel_size": [1]}}"#,
            r#"{"concatenate": {}}"#,
        ] {
            let run = crate::guard::catch(|| {
                let mut m = scalar_model(op)?;
                let x = floats(&[1.0, 2.0, 3.0, 4.0], &[4]);
                let out = m.predict(std::slice::from_ref(&x), 4)?;
                let target = floats(&vec![0.0; out.numel()], out.shape());
                let data = Data {
                    inputs: vec![x],
                    target: Some(target),
                };
                m.train_step(&data, 0.1, OnNonFinite::Raise).map(|_| ())
            });
            assert!(run.is_ok(), "{op}: panicked: {:?}", run.err());
        }
    }

    /// Learning rates reach the optimizer only when finite and not negative.
    #[test]
    fn non_finite_or_negative_learning_rates_are_argument_errors() {
        let mut m = scalar_model(r#""flatten""#).expect("model");
        let x = floats(&[1.0, 2.0], &[2]);
        let data = Data {
            inputs: vec![x.clone()],
            target: Some(floats(&[0.0, 0.0], &[2, 1])),
        };
        for lr in [f64::NAN, f64::INFINITY, -1.0, -f64::MAX] {
            assert!(matches!(
                m.train_step(&data, lr, OnNonFinite::Raise),
                Err(Error::Argument(_))
            ));
            assert!(matches!(m.profile_step(&data, lr), Err(Error::Argument(_))));
            let opts = EpochOptions {
                batch_size: 1,
                lrs: vec![0.1, lr],
                ..Default::default()
            };
            assert!(matches!(
                m.train_epoch(&data, &opts, &mut |_, _, _| {}),
                Err(Error::Argument(_))
            ));
        }
        assert_eq!(m.steps(), 0);
    }

    /// The warmup factor rises linearly to 1 over `warmup` steps, counted across epochs.
    #[test]
    fn warmup_counts_steps_from_the_first_one() {
        assert_eq!(warmup_factor(0, 0), 1.0);
        assert_eq!(warmup_factor(0, 4), 0.25);
        assert_eq!(warmup_factor(2, 4), 0.75);
        assert_eq!(warmup_factor(3, 4), 1.0);
        assert_eq!(warmup_factor(u64::MAX, 4), 1.0);
    }
}
