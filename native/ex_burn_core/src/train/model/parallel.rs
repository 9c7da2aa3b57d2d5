//! Data-parallel training: a replica of the model (parameters and optimizer state) on each
//! further device, each batch split into one slice of rows per device, the gradients summed
//! across devices ([`crate::collective::all_reduce`]: NCCL between CUDA GPUs) and the same
//! update applied on every device. Each slice's loss is weighted by its share of the batch's
//! rows, so the summed gradients are those of the whole batch's mean loss, as on one device.

use super::params::ParamRef;
use super::Hits;
use super::*;
use crate::collective;
use burn::tensor::Tensor as BurnTensor;

/// The most devices one model trains on.
const MAX_DEVICES: usize = 64;

/// A batch's loss (off the autodiff graph), which samples were predicted right, and the
/// gradients, on the model's device.
pub(super) type BatchGrads = (BurnTensor<B, 1>, Option<Hits>, GradientsParams);

/// One device's share of a split batch: its gradients, its slice's weighted loss and count
/// of right predictions.
struct Pass {
    grads: GradientsParams,
    loss: Tensor,
    hits: Option<Tensor>,
}

/// An epoch's data (and shuffling order) on each device it trains on, the model's own first:
/// the other devices get their copy once per epoch, so batches are cut where they train.
pub(super) struct Sources<'a> {
    home: (&'a Data, Option<&'a Tensor>),
    others: Vec<(Data, Option<Tensor>)>,
}

impl Model {
    /// Makes the model train on `devices` (its own device first; empty: its device alone):
    /// replicas are made on the other devices from the current parameters and optimizer state,
    /// or kept when they are there already.
    pub(super) fn use_devices(&mut self, devices: &[Device]) -> Result<()> {
        if devices.len() <= 1 {
            if let Some(&d) = devices.first() {
                self.check_first(d)?;
            }
            self.replicas.clear();
            return Ok(());
        }
        self.check_first(devices[0])?;
        if devices.len() > MAX_DEVICES {
            return Err(Error::Argument(format!(
                "a model trains on at most {MAX_DEVICES} devices, got {}",
                devices.len()
            )));
        }
        if let Some(l) = self
            .spec
            .layers
            .iter()
            .find(|l| matches!(l.op, LayerOp::BatchNorm { .. }))
        {
            return Err(Error::Argument(format!(
                "batch normalization layer {:?} trains on one device only (its statistics would \
                 differ per device)",
                l.name
            )));
        }
        for d in devices {
            d.to_dispatch()?;
            d.check_dtype(self.options.dtype)?;
        }
        let wanted = &devices[1..];
        if self
            .replicas
            .iter()
            .map(|r| r.device)
            .eq(wanted.iter().copied())
        {
            // sums of an accumulation an earlier call left unapplied (it failed) are not this
            // call's
            for r in &mut self.replicas {
                r.accumulated = Unshared::default();
            }
            return Ok(());
        }
        self.replicas.clear();
        let mut replicas = Vec::with_capacity(wanted.len());
        let params = self.spec.param_elements()?;
        let bytes = params * self.options.dtype.size().max(4) as u128;
        for &d in wanted {
            // room for the copy's parameters first (the optimizer state grows with the steps,
            // as on the model's own device)
            let _room = crate::memory::reserve(d, bytes, &|| {
                format!("a copy of the model's parameters ({params} elements) on {d}")
            })?;
            let mut r = self.to_device(d)?;
            // Parameters of their own in the autodiff graph (a copy on the model's own device
            // would share the model's, and one backward pass would take both replicas'
            // gradients).
            let own = r.parameters()?;
            r.set_parameters(&own, None, false)?;
            replicas.push(r);
        }
        self.replicas = replicas;
        Ok(())
    }

    fn check_first(&self, first: Device) -> Result<()> {
        if first != self.device {
            return Err(Error::Argument(format!(
                "the first of the devices must be the model's device ({}), got {first}",
                self.device
            )));
        }
        Ok(())
    }

    /// The devices the model trains on (its own first).
    pub fn devices(&self) -> Vec<Device> {
        std::iter::once(self.device)
            .chain(self.replicas.iter().map(|r| r.device))
            .collect()
    }

    /// The epoch's `data` and `order` on every device the model trains on: `copies` (one per
    /// replica, on its device, of the shapes and types of `data`) or, when empty, copies made
    /// here.
    pub(super) fn sources<'a>(
        &self,
        data: &'a Data,
        copies: &[Data],
        order: Option<&'a Tensor>,
    ) -> Result<Sources<'a>> {
        if !copies.is_empty() && copies.len() != self.replicas.len() {
            return Err(Error::Argument(format!(
                "expected the data copied to {} other device(s), got {} copies",
                self.replicas.len(),
                copies.len()
            )));
        }
        let others = self
            .replicas
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let d = r.device;
                let copy = match copies.get(k) {
                    Some(c) => {
                        check_copy(data, c, d)?;
                        c.clone()
                    }
                    None => data.to_device(d)?,
                };
                Ok((copy, order.map(|o| o.to_device(d)).transpose()?))
            })
            .collect::<Result<_>>()?;
        Ok(Sources {
            home: (data, order),
            others,
        })
    }

    /// Forward and backward passes of the batch of rows `lo..hi` (of the shuffled order): on
    /// the model's device, or split over its replicas with the gradients, the loss and the
    /// count of right predictions summed across them (the replicas' own gradient sums are kept
    /// for [`Model::apply`]). No device read.
    pub(super) fn batch_grads(
        &mut self,
        sources: &Sources,
        (lo, hi): (usize, usize),
        count: bool,
        accumulate: usize,
    ) -> Result<BatchGrads> {
        if self.replicas.is_empty() {
            let (data, order) = sources.home;
            let batch = cut(data, lo, hi, order)?;
            let f = self.forward_loss(&batch, count)?;
            let grads = self.grads(f.loss, accumulate)?;
            return Ok((f.inner, f.hits.map(Hits::Rows), grads));
        }
        self.split_grads(sources, (lo, hi), count, accumulate)
    }

    fn split_grads(
        &mut self,
        sources: &Sources,
        (lo, hi): (usize, usize),
        count: bool,
        accumulate: usize,
    ) -> Result<BatchGrads> {
        let rows = hi - lo;
        let parts = self.replicas.len() + 1;
        let range = |k: usize| (lo + k * rows / parts, lo + (k + 1) * rows / parts);
        let passes = if self.on_distinct_gpus() {
            self.passes_on_threads(sources, range, rows, count, accumulate)?
        } else {
            self.passes_in_turn(sources, range, rows, count, accumulate)?
        };
        let mut grads = Vec::with_capacity(parts);
        let mut losses = Vec::with_capacity(parts);
        let mut hits = Vec::with_capacity(parts);
        for pass in passes {
            match pass {
                Some(p) => {
                    grads.push(p.grads);
                    losses.push(Some(p.loss));
                    hits.push(p.hits);
                }
                None => {
                    grads.push(GradientsParams::new());
                    losses.push(None);
                    hits.push(None);
                }
            }
        }
        let extra = if count {
            vec![losses, hits]
        } else {
            vec![losses]
        };
        let mut sums = self.sum_across(&mut grads, extra)?.into_iter();
        let mut grads = grads.into_iter();
        let own = grads
            .next()
            .ok_or_else(|| Error::Execution("no gradients".into()))?;
        self.replica_grads = Unshared::new(grads.collect());
        let burn = |t: Tensor| BurnTensor::<B, 1>::from_primitive(TensorPrimitive::Float(t.prim()));
        let loss = sums
            .next()
            .map(burn)
            .ok_or_else(|| Error::Argument("the batch has no samples".into()))?;
        let right = sums.next().map(|c| Hits::Count(burn(c).int()));
        Ok((loss, right, own))
    }

    /// Each device's forward and backward passes of its slice, issued from this thread: every
    /// device's forward pass before any backward pass (issuing one device's passes takes the
    /// host milliseconds, and a device whose forward pass waited for the previous device's
    /// backward pass to be issued would start that much later). `None` for a device without
    /// rows.
    fn passes_in_turn(
        &self,
        sources: &Sources,
        range: impl Fn(usize) -> (usize, usize),
        rows: usize,
        count: bool,
        accumulate: usize,
    ) -> Result<Vec<Option<Pass>>> {
        let parts = self.replicas.len() + 1;
        let mut forwards = Vec::with_capacity(parts);
        let mut reserved = Vec::with_capacity(parts);
        for k in 0..parts {
            let (a, b) = range(k);
            if a == b {
                forwards.push(None);
                continue;
            }
            let (model, source) = self.part(k, sources);
            let (share, f, room) = model.slice_forward(source, (a, b), rows, count)?;
            reserved.push(room);
            forwards.push(Some((share, f)));
        }
        forwards
            .into_iter()
            .enumerate()
            .map(|(k, forward)| {
                forward
                    .map(|(share, f)| self.part(k, sources).0.backward_pass(f, share, accumulate))
                    .transpose()
            })
            .collect()
    }

    /// Each device's forward and backward passes of its slice, each device's issued from a
    /// thread of its own (the model's from this one), so that the host time of issuing them
    /// is spent side by side rather than once per device: with four GPUs, issuing every
    /// device's passes from one thread took longer than the devices took to run them. Only
    /// for distinct CUDA GPUs (each thread queues work for its own device). `None` for a device
    /// without rows.
    fn passes_on_threads(
        &self,
        sources: &Sources,
        range: impl Fn(usize) -> (usize, usize) + Sync,
        rows: usize,
        count: bool,
        accumulate: usize,
    ) -> Result<Vec<Option<Pass>>> {
        let parts = self.replicas.len() + 1;
        let pass = |k: usize| -> Result<Option<Pass>> {
            let (a, b) = range(k);
            if a == b {
                return Ok(None);
            }
            let (model, source) = self.part(k, sources);
            // the reservation stays on the thread that made it, until the passes are issued
            let (share, f, _room) = model.slice_forward(source, (a, b), rows, count)?;
            model.backward_pass(f, share, accumulate).map(Some)
        };
        // the gradients are summed from here, on this thread's stream
        let stream = burn::tensor::StreamId::current();
        std::thread::scope(|s| {
            let others: Vec<_> = (1..parts)
                .map(|k| {
                    let pass = &pass;
                    on_replica_thread(s, k, stream, move || pass(k))
                })
                .collect();
            // the model's own passes on this thread, as the caller issues its work (its
            // stream, its panic handling)
            let mut out = vec![pass(0)];
            out.extend(others.into_iter().map(joined));
            out.into_iter().collect()
        })
    }

    /// The forward pass of rows `a..b` (of the shuffled order) of this model's copy of the
    /// data, with the memory its activations need reserved (on the calling thread), and the
    /// slice's share of the batch's `rows`.
    fn slice_forward(
        &self,
        (data, order): (&Data, Option<&Tensor>),
        (a, b): (usize, usize),
        rows: usize,
        count: bool,
    ) -> Result<(f64, Forward, crate::memory::Reservation)> {
        let slice = cut(data, a, b, order)?;
        let room = self.check_batch_memory(b - a, true)?;
        let share = (b - a) as f64 / rows as f64;
        Ok((share, self.forward_loss(&slice, count)?, room))
    }

    /// The backward pass of a slice's forward pass `f`, its loss weighted by `share` of the
    /// batch's rows, and the slice's loss and count of right predictions (so weighted).
    fn backward_pass(&self, f: Forward, share: f64, accumulate: usize) -> Result<Pass> {
        let grads = self.grads(f.loss.mul_scalar(share), accumulate)?;
        let float = |t: BurnTensor<B, 1>| Tensor::wrap(t.into_primitive().tensor(), Kind::Float);
        Ok(Pass {
            grads,
            loss: float(f.inner.mul_scalar(share)),
            hits: f.hits.map(|h| float(h.float().sum())),
        })
    }

    /// Adds the gradients [`Model::split_grads`] kept for the replicas to each replica's sum
    /// of an accumulation's micro-batches (applied by [`Model::apply_replica_sums`]).
    pub(super) fn accumulate_replicas(&mut self) -> Result<()> {
        if self.replicas.is_empty() {
            return Ok(());
        }
        let grads = self.take_replica_grads("micro-batch")?;
        for (r, g) in self.replicas.iter_mut().zip(grads) {
            let net = r
                .net
                .as_ref()
                .ok_or_else(|| Error::Execution("replica parameters are unavailable".into()))?;
            r.accumulated
                .get_mut()
                .get_or_insert_with(burn::optim::GradientsAccumulator::new)
                .accumulate::<B>(net, g);
        }
        Ok(())
    }

    /// Applies each replica's sum of an accumulation's micro-batches. A replica that missed
    /// the update would train on other weights: on an error the replicas are dropped, rebuilt
    /// from the model's by the next call.
    pub(super) fn apply_replica_sums(&mut self, lr: f64) -> Result<()> {
        let applied = self
            .replicas
            .iter_mut()
            .try_for_each(|r| match r.accumulated.take() {
                Some(mut sum) => r.apply(sum.grads(), lr),
                None => Err(Error::Execution(
                    "a replica's accumulated gradients are missing for this step".into(),
                )),
            });
        if applied.is_err() {
            self.replicas.clear();
        }
        applied
    }

    /// The model (`k` 0) or replica `k - 1`, with the data and order on its device.
    fn part<'a>(
        &'a self,
        k: usize,
        sources: &'a Sources,
    ) -> (&'a Model, (&'a Data, Option<&'a Tensor>)) {
        if k == 0 {
            (self, sources.home)
        } else {
            let (d, o) = &sources.others[k - 1];
            (&self.replicas[k - 1], (d, o.as_ref()))
        }
    }

    /// Replaces each parameter's gradient in every set (one set per device, the model's
    /// first) by its sum over the devices, and sums each of `extra` (one value or none per
    /// device); a device without a value (no rows in the batch) adds zeros. Returns the sums of
    /// `extra` on the model's device.
    fn sum_across(
        &self,
        grads: &mut [GradientsParams],
        extra: Vec<Vec<Option<Tensor>>>,
    ) -> Result<Vec<Tensor>> {
        let devices = self.devices();
        let net = self.net()?;
        let filled = |parts: Vec<Option<Tensor>>| -> Result<Option<Vec<Tensor>>> {
            let Some(like) = parts.iter().flatten().next().cloned() else {
                return Ok(None);
            };
            let set = parts
                .into_iter()
                .zip(&devices)
                .map(|(t, &d)| t.map_or_else(|| zeros_like(&like, d), Ok))
                .collect::<Result<Vec<_>>>()?;
            Ok(Some(set))
        };
        let mut refs = Vec::new();
        let mut sets = Vec::new();
        for (_, p) in self.param_refs(net) {
            let parts: Vec<Option<Tensor>> = grads.iter_mut().map(|g| take(&p, g)).collect();
            if let Some(set) = filled(parts)? {
                refs.push(p);
                sets.push(set);
            }
        }
        let params = sets.len();
        for parts in extra {
            sets.push(
                filled(parts)?.ok_or_else(|| Error::Argument("the batch has no samples".into()))?,
            );
        }
        let mut summed = collective::all_reduce(sets)?;
        let extra = summed.split_off(params);
        for (p, set) in refs.iter().zip(summed) {
            for (g, t) in grads.iter_mut().zip(set) {
                put(p, g, t);
            }
        }
        Ok(extra
            .into_iter()
            .filter_map(|set| set.into_iter().next())
            .collect())
    }

    /// Applies the gradients [`Model::split_grads`] kept for the replicas. A replica that
    /// missed the update would train on other weights: on an error the replicas are dropped,
    /// rebuilt from the model's by the next call.
    pub(super) fn apply_replicas(&mut self, lr: f64) -> Result<()> {
        if self.replicas.is_empty() {
            return Ok(());
        }
        let grads = self.take_replica_grads("step")?;
        let applied = self
            .replicas
            .iter_mut()
            .zip(grads)
            .try_for_each(|(r, g)| r.apply(g, lr));
        if applied.is_err() {
            self.replicas.clear();
        }
        applied
    }

    /// Applies `grads` to the model and the gradients [`Model::split_grads`] kept to the
    /// replicas. On distinct CUDA GPUs each replica's update is issued from a thread of its own
    /// while this thread issues the model's (so the last device does not wait for every other
    /// device's update to be issued before its own and its next forward pass); elsewhere in
    /// turn. On a replica's error the replicas are dropped (see [`Model::apply_replicas`]).
    pub(super) fn apply_everywhere(&mut self, grads: GradientsParams, lr: f64) -> Result<()> {
        if self.replicas.is_empty() || !self.on_distinct_gpus() {
            self.apply(grads, lr)?;
            return self.apply_replicas(lr);
        }
        let replica_grads = self.take_replica_grads("step")?;
        let mut replicas = std::mem::take(&mut self.replicas);
        let stream = burn::tensor::StreamId::current();
        let (home, others) = std::thread::scope(|s| {
            let threads: Vec<_> = replicas
                .iter_mut()
                .zip(replica_grads)
                .enumerate()
                .map(|(k, (r, g))| on_replica_thread(s, k + 1, stream, move || r.apply(g, lr)))
                .collect();
            let home = self.apply(grads, lr);
            // every thread joined, then the first error kept
            let joins: Vec<Result<()>> = threads.into_iter().map(joined).collect();
            let others: Result<()> = joins.into_iter().collect();
            (home, others)
        });
        if others.is_ok() {
            self.replicas = replicas;
        }
        home.and(others)
    }

    /// Whether the model and its replicas are on distinct CUDA GPUs (each can be given work
    /// from a thread of its own; the only GPUs this was run on).
    fn on_distinct_gpus(&self) -> bool {
        #[cfg(test)]
        if tests::THREADED.with(std::cell::Cell::get) {
            return true;
        }
        let devices = self.devices();
        devices.iter().all(|d| matches!(d, Device::Cuda(_)))
            && devices
                .iter()
                .enumerate()
                .all(|(i, d)| !devices[..i].contains(d))
    }

    /// The gradients [`Model::split_grads`] kept, one set per replica (`what`, the step or
    /// micro-batch, names them in the error; the replicas are dropped when they are missing).
    fn take_replica_grads(&mut self, what: &str) -> Result<Vec<GradientsParams>> {
        let grads = self.replica_grads.take();
        if grads.len() != self.replicas.len() {
            self.replicas.clear();
            return Err(Error::Execution(format!(
                "the replicas' gradients are missing for this {what}"
            )));
        }
        Ok(grads)
    }
}

/// Removes the gradient of `p` from `grads`.
fn take(p: &ParamRef, grads: &mut GradientsParams) -> Option<Tensor> {
    let id = p.id();
    let prim = match p {
        ParamRef::R1(_) => grads.remove::<B, 1>(id)?.into_primitive().tensor(),
        ParamRef::R2(_) => grads.remove::<B, 2>(id)?.into_primitive().tensor(),
        ParamRef::R3(_) => grads.remove::<B, 3>(id)?.into_primitive().tensor(),
        ParamRef::R4(_) => grads.remove::<B, 4>(id)?.into_primitive().tensor(),
    };
    Some(Tensor::wrap(prim, Kind::Float))
}

/// Registers `t` as the gradient of `p` in `grads`.
fn put(p: &ParamRef, grads: &mut GradientsParams, t: Tensor) {
    let id = p.id();
    let prim = TensorPrimitive::Float(t.prim());
    match p {
        ParamRef::R1(_) => grads.register::<B, 1>(id, BurnTensor::from_primitive(prim)),
        ParamRef::R2(_) => grads.register::<B, 2>(id, BurnTensor::from_primitive(prim)),
        ParamRef::R3(_) => grads.register::<B, 3>(id, BurnTensor::from_primitive(prim)),
        ParamRef::R4(_) => grads.register::<B, 4>(id, BurnTensor::from_primitive(prim)),
    }
}

/// Zeros of `like`'s shape and type on `device`.
fn zeros_like(like: &Tensor, device: Device) -> Result<Tensor> {
    let prim = B::float_zeros(
        crate::tensor::prim_shape(like.shape()),
        &device.to_dispatch()?,
        like.dtype().float_dtype()?,
    );
    Ok(Tensor::wrap(prim, Kind::Float))
}

/// Runs `f` for replica `k` on a thread of `scope`, on `stream` (the caller's: a collective
/// reads and writes buffers of one stream) and with its panics made errors.
fn on_replica_thread<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    k: usize,
    stream: burn::tensor::StreamId,
    f: impl FnOnce() -> Result<T> + Send + 'scope,
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, Result<T>>> {
    std::thread::Builder::new()
        .name(format!("ex_burn-replica-{k}"))
        .spawn_scoped(scope, move || crate::guard::guard(|| stream.executes(f)))
}

/// The result of a replica's thread, or the error of starting or joining it.
fn joined<T>(t: std::io::Result<std::thread::ScopedJoinHandle<'_, Result<T>>>) -> Result<T> {
    match t {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err(Error::Execution("a replica's thread panicked".into()))),
        Err(e) => Err(Error::Execution(format!(
            "could not start a thread for a replica: {e}"
        ))),
    }
}

/// Checks that `copy` holds tensors of `data`'s shapes and types on `device`.
fn check_copy(data: &Data, copy: &Data, device: Device) -> Result<()> {
    let of = |d: &Data| -> Vec<(Vec<usize>, crate::DType, Device)> {
        d.inputs
            .iter()
            .chain(d.target.iter())
            .map(|t| (t.shape().to_vec(), t.dtype(), t.device()))
            .collect()
    };
    let want: Vec<_> = of(data)
        .into_iter()
        .map(|(s, t, _)| (s, t, device))
        .collect();
    if of(copy) != want || copy.target.is_some() != data.target.is_some() {
        return Err(Error::Argument(format!(
            "the copy of the data for {device} does not match the data (same shapes and types, \
             on that device)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::spec::ModelSpec;

    thread_local! {
        /// Makes this thread's data-parallel calls take the threaded path whatever the
        /// devices (CI has no GPUs; on the CPU the replicas then share its one device).
        pub(super) static THREADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    fn tensor(values: &[f64], shape: &[usize], dtype: DType) -> Tensor {
        let bytes: Vec<u8> = match dtype {
            DType::F32 => values
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
            _ => values
                .iter()
                .flat_map(|&v| (v as i64).to_le_bytes())
                .collect(),
        };
        Tensor::from_bytes(&bytes, shape, dtype, Device::Cpu).expect("tensor")
    }

    /// Each epoch's loss and accuracy, and the final parameters' bytes.
    type Trained = (Vec<(f64, Option<f64>)>, Vec<Vec<u8>>);

    /// Three epochs of 48 samples over three replicas on the CPU (`accumulate` micro-batches
    /// a step), on the threaded path or not.
    fn train(threaded: bool, accumulate: usize) -> Trained {
        let spec: ModelSpec = serde_json::from_str(
            r#"{"layers": [{"name": "x", "op": {"input": {"shape": [4]}}},
                           {"name": "h", "op": {"dense": {"units": 8}}, "inputs": [0]},
                           {"name": "a", "op": {"activation": {"activation": "tanh"}}, "inputs": [1]},
                           {"name": "out", "op": {"dense": {"units": 3}}, "inputs": [2]}],
                "output": 3}"#,
        )
        .expect("spec");
        let options: CompileOptions = serde_json::from_str(
            r#"{"loss": "cross_entropy", "optimizer": {"kind": "adam"}, "learning_rate": 0.01}"#,
        )
        .expect("options");
        let n = 48;
        let xs: Vec<f64> = (0..n * 4)
            .map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0)
            .collect();
        let ys: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
        let data = Data {
            inputs: vec![tensor(&xs, &[n, 4], DType::F32)],
            target: Some(tensor(&ys, &[n], DType::S64)),
        };
        let mut m = Model::new(spec, options, Device::Cpu).expect("model");
        THREADED.with(|t| t.set(threaded));
        let stats = (1..=3)
            .map(|epoch| {
                let o = EpochOptions {
                    batch_size: 14,
                    shuffle: Some(epoch as u64),
                    lrs: vec![0.01],
                    accumulate,
                    accuracy: true,
                    epoch,
                    devices: vec![Device::Cpu; 3],
                    ..Default::default()
                };
                let s = m.train_epoch(&data, &o, &mut |_, _, _| {}).expect("epoch");
                (s.loss, s.accuracy)
            })
            .collect();
        THREADED.with(|t| t.set(false));
        let params = m
            .parameters()
            .expect("parameters")
            .into_iter()
            .map(|(_, t)| t.to_bytes(None).expect("values"))
            .collect();
        (stats, params)
    }

    /// The replicas' passes and updates issued from threads of their own train exactly as
    /// when issued in turn from the caller's thread: same losses, same weights, bit for bit
    /// (with and without accumulated micro-batches; 48 samples in batches of 14 leave a short
    /// last batch, split unevenly).
    #[test]
    fn threaded_replicas_train_as_replicas_in_turn() {
        for accumulate in [1, 2] {
            let (in_turn, threaded) = (train(false, accumulate), train(true, accumulate));
            assert_eq!(in_turn.0, threaded.0, "losses, accumulate {accumulate}");
            assert_eq!(in_turn.1, threaded.1, "parameters, accumulate {accumulate}");
            assert!(in_turn.0.iter().all(|(l, _)| l.is_finite()));
        }
    }
}
