//! Non-finite values kept out of a model. Before each update one small vector is read from the
//! device: the loss, and per gradient (times the learning rate) and per batch-norm statistic a
//! mark (its sum) that is finite when all its elements are; a step with a non-finite entry is
//! left out, so no NaN or infinity from the data, the forward or the backward pass is ever
//! written into the weights or the optimizer state. The parameters are checked at the end of
//! an epoch (or of a single step) and whenever a step fails its check: what that can still find
//! is an overflow of an update itself, which fails loudly (undoing it would need a copy of the
//! whole model at every step; the step after such an overflow fails its own check, so training
//! stops there). Datasets are checked the same way, in chunks, before training.

use super::params::ParamRef;
use super::*;
use burn::module::RunningState;

type T1 = burn::tensor::Tensor<B, 1>;

/// Elements per chunk of a dataset check: bounds its temporary (16 MiB of f32).
const CHECK_CHUNK: usize = 1 << 22;

/// A tensor's mark: a value that is finite when every element of the tensor is (and, rarely,
/// not finite although they all are), with the elements to settle such a case exactly.
pub(super) struct Mark {
    value: T1,
    source: Option<Exact>,
}

/// Whether a marked tensor really holds NaN or infinity (looks at its elements; one read).
type Exact = Box<dyn Fn() -> bool>;

/// The mark of `t`: its sum (one pass over it, no temporary, no reshape), which is NaN or
/// infinite when an element is. A sum of finite elements can overflow too; [`Checks::read`]
/// then looks at the elements themselves. Half-precision tensors, whose sums overflow easily,
/// are marked by the sum of `x * 0` instead (0 for finite `x`, NaN otherwise), which cannot
/// overflow.
fn mark<const D: usize>(t: burn::tensor::Tensor<B, D>) -> Mark {
    let value = match t.dtype() {
        burn::tensor::DType::F16 | burn::tensor::DType::BF16 => t.clone().mul_scalar(0.0).sum(),
        _ => t.clone().sum(),
    };
    Mark {
        value,
        source: Some(Box::new(move || any_non_finite(&t))),
    }
}

/// Whether any element of `t` is NaN or infinite (one device read).
fn any_non_finite<const D: usize>(t: &burn::tensor::Tensor<B, D>) -> bool {
    t.clone()
        .is_finite()
        .bool_not()
        .any()
        .into_data()
        .iter::<bool>()
        .next()
        .unwrap_or(true)
}

/// What one entry of a step's check vector stands for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Checked {
    /// The batch's loss.
    Loss,
    /// A parameter's gradient.
    Gradient(String),
    /// A parameter after the update.
    Parameter(String),
    /// A batch-norm running statistic after the batch.
    Statistic(String),
}

/// The first non-finite entry of a step's check.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Bad {
    pub(super) what: Checked,
    pub(super) value: f64,
}

/// A step's check vector, built on the device and read once.
pub(super) struct Checks {
    what: Vec<Checked>,
    values: Vec<T1>,
    sources: Vec<Option<Exact>>,
}

impl Checks {
    /// A check whose first entry is the loss value itself.
    pub(super) fn with_loss(loss: T1) -> Checks {
        Checks {
            what: vec![Checked::Loss],
            values: vec![loss],
            sources: vec![None],
        }
    }

    /// A check without the loss.
    pub(super) fn new() -> Checks {
        Checks {
            what: Vec::new(),
            values: Vec::new(),
            sources: Vec::new(),
        }
    }

    fn push(&mut self, what: Checked, mark: Mark) {
        self.what.push(what);
        self.values.push(mark.value);
        self.sources.push(mark.source);
    }

    /// Reads the vector (one device read): the first entry (the loss when there is one) and
    /// the first non-finite entry. A mark that is not finite although its tensor's elements all
    /// are (an overflowing sum) is told apart by a look at the elements (one more read).
    pub(super) fn read(self) -> (f64, Option<Bad>) {
        if self.values.is_empty() {
            return (0.0, None);
        }
        let dtype = self.values[0].dtype();
        let values = self
            .values
            .into_iter()
            .map(|v| if v.dtype() == dtype { v } else { v.cast(dtype) })
            .collect();
        let read: Vec<f64> = burn::tensor::Tensor::cat(values, 0)
            .into_data()
            .iter::<f64>()
            .collect();
        let (sources, what) = (self.sources, self.what);
        let bad_at =
            |i: usize| !read[i].is_finite() && sources[i].as_ref().is_none_or(|exact| exact());
        // A parameter first: an earlier update's damage explains whatever else is not finite.
        let bad = (0..read.len())
            .find(|&i| matches!(what[i], Checked::Parameter(_)) && bad_at(i))
            .or_else(|| (0..read.len()).find(|&i| bad_at(i)))
            .map(|i| Bad {
                what: what[i].clone(),
                value: read[i],
            });
        (read.first().copied().unwrap_or(f64::NAN), bad)
    }
}

/// Batch-norm running statistics before a batch's forward pass (which updates them).
pub(super) struct Running(Vec<(usize, T1, T1)>);

impl ParamRef<'_> {
    fn value_mark(&self) -> Mark {
        match self {
            ParamRef::R1(p) => mark(p.val().inner()),
            ParamRef::R2(p) => mark(p.val().inner()),
            ParamRef::R3(p) => mark(p.val().inner()),
            ParamRef::R4(p) => mark(p.val().inner()),
        }
    }

    /// The mark of this parameter's gradient times `lr` (the product is only formed when
    /// `lr > 1`, where it can overflow although the gradient is finite).
    fn grad_mark(&self, grads: &GradientsParams, lr: f64) -> Option<Mark> {
        fn scaled<const D: usize>(g: burn::tensor::Tensor<B, D>, lr: f64) -> Mark {
            mark(if lr > 1.0 { g.mul_scalar(lr) } else { g })
        }
        let id = self.id();
        match self {
            ParamRef::R1(_) => grads.get::<B, 1>(id).map(|g| scaled(g, lr)),
            ParamRef::R2(_) => grads.get::<B, 2>(id).map(|g| scaled(g, lr)),
            ParamRef::R3(_) => grads.get::<B, 3>(id).map(|g| scaled(g, lr)),
            ParamRef::R4(_) => grads.get::<B, 4>(id).map(|g| scaled(g, lr)),
        }
    }
}

impl Model {
    /// Adds a mark per gradient in `grads` (frozen parameters have none).
    /// Adds a mark per gradient in `grads` times the learning rate `lr` (frozen parameters
    /// have none).
    pub(super) fn check_gradients(
        &self,
        grads: &GradientsParams,
        lr: f64,
        checks: &mut Checks,
    ) -> Result<()> {
        for (name, p) in self.param_refs(self.net()?) {
            if let Some(m) = p.grad_mark(grads, lr) {
                checks.push(Checked::Gradient(name), m);
            }
        }
        Ok(())
    }

    /// Adds a mark per batch-norm running statistic (updated by the forward pass).
    pub(super) fn check_statistics(&self, checks: &mut Checks) -> Result<()> {
        let net = self.net()?;
        for (i, l) in self.spec.layers.iter().enumerate() {
            if let (LayerOp::BatchNorm { .. }, Some(s)) = (&l.op, self.slots[i]) {
                let bn = &net.bn[s];
                for (name, st) in [("mean", &bn.running_mean), ("var", &bn.running_var)] {
                    let v = st.value_sync().inner();
                    checks.push(Checked::Statistic(format!("{}.{name}", l.name)), mark(v));
                }
            }
        }
        Ok(())
    }

    /// Adds a mark per parameter.
    pub(super) fn check_parameters(&self, checks: &mut Checks) -> Result<()> {
        for (name, p) in self.param_refs(self.net()?) {
            checks.push(Checked::Parameter(name), p.value_mark());
        }
        Ok(())
    }

    /// Checks the parameters after an update (one device read): an update that overflowed
    /// fails with [`Model::overflowed`]'s error.
    pub(super) fn check_update(&self, at: Option<(usize, usize, usize)>) -> Result<()> {
        let mut checks = Checks::new();
        self.check_parameters(&mut checks)?;
        match checks.read().1 {
            Some(bad) => Err(self.overflowed(&bad, at)),
            None => Ok(()),
        }
    }

    /// The running statistics of the batch norms (`None` when there are none).
    pub(super) fn save_running(&self) -> Result<Option<Running>> {
        let net = self.net()?;
        if net.bn.is_empty() {
            return Ok(None);
        }
        let saved = net
            .bn
            .iter()
            .enumerate()
            .map(|(s, bn)| (s, bn.running_mean.value_sync(), bn.running_var.value_sync()))
            .collect();
        Ok(Some(Running(saved)))
    }

    /// Puts back running statistics saved by [`Self::save_running`].
    pub(super) fn restore_running(&mut self, running: Option<&Running>) {
        let (Some(Running(saved)), Some(net)) = (running, self.net.as_mut()) else {
            return;
        };
        for (s, mean, var) in saved {
            if let Some(bn) = net.bn.get_mut(*s) {
                // Fresh states: the old ones are shared with the rolled-back network.
                bn.running_mean = RunningState::new(mean.clone());
                bn.running_var = RunningState::new(var.clone());
            }
        }
    }

    /// The error of a step whose check before the update found `bad`, at `(epoch, batch,
    /// batches)` when known. The step was left out.
    pub(super) fn non_finite(&self, bad: &Bad, at: Option<(usize, usize, usize)>) -> Error {
        let value = bad.value;
        let (what, hint) = match &bad.what {
            Checked::Loss => (
                format!("the loss is {value}"),
                "check the data for NaN or infinite values, lower the learning rate, clip \
                 gradients",
            ),
            Checked::Gradient(name) => (
                format!(
                    "the gradient of {name:?} (times the learning rate) holds NaN or infinite \
                     values"
                ),
                "check the data for NaN or infinite values, lower the learning rate, clip \
                 gradients",
            ),
            Checked::Statistic(name) => (
                format!("the batch would make the running statistic {name:?} NaN or infinite"),
                "check the data for NaN or infinite values",
            ),
            Checked::Parameter(name) => (
                format!("{name:?} holds NaN or infinite values"),
                "reload the model from a checkpoint",
            ),
        };
        Error::NonFinite(format!(
            "{what} at {} (optimizer step {}): the step was not applied and the weights are as \
             before it; {hint}, or pass on_non_finite: :skip or :stop",
            place(at),
            self.steps + 1
        ))
    }

    /// The error of an update that made a parameter NaN or infinite although the loss and
    /// the gradients were finite (an overflow: a learning rate or gradients too large for the
    /// parameters' type). Such an update cannot be left out after the fact (undoing it would
    /// need a copy of every parameter and of the optimizer state at every step), so it always
    /// fails, whatever `on_non_finite` says, and the message says the weights are damaged.
    pub(super) fn overflowed(&self, bad: &Bad, at: Option<(usize, usize, usize)>) -> Error {
        let name = match &bad.what {
            Checked::Parameter(name) | Checked::Gradient(name) | Checked::Statistic(name) => {
                format!("{name:?}")
            }
            Checked::Loss => "a parameter".into(),
        };
        Error::NonFinite(format!(
            "the update at {} (optimizer step {}) overflowed: {name} now holds NaN or infinite \
             values although the loss and the gradients were finite; the model's weights are \
             damaged: reload them from a checkpoint and lower the learning rate or clip gradients",
            place(at),
            self.steps
        ))
    }

    /// Checks the training data, then the validation data when given ([`Model::check_finite`]):
    /// what runs before an epoch with [`EpochOptions::check_inputs`](super::EpochOptions).
    pub fn check_inputs(&self, data: &Data, validation: Option<&Data>) -> Result<()> {
        self.check_finite(data, "training")?;
        validation.map_or(Ok(()), |v| self.check_finite(v, "validation"))
    }

    /// Checks that the float tensors of `data` hold no NaN or infinity, before training on it:
    /// a mark per chunk of 4M elements on the device and one read (integer tensors are always
    /// finite). `label` names the data in the error ("training", "validation").
    pub fn check_finite(&self, data: &Data, label: &str) -> Result<()> {
        let ninputs = data.inputs.len();
        let named: Vec<(String, &Tensor)> = data
            .inputs
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let name = if ninputs == 1 {
                    format!("the {label} inputs")
                } else {
                    format!("input {} of the {label} inputs", k + 1)
                };
                (name, t)
            })
            .chain(
                data.target
                    .iter()
                    .map(|t| (format!("the {label} targets"), t)),
            )
            .filter(|(_, t)| t.dtype().is_float() && t.numel() > 0)
            .collect();
        if named.is_empty() {
            return Ok(());
        }
        for (_, t) in &named {
            if t.device() != self.device {
                return Err(Error::Device(format!(
                    "data is on {} but the model is on {}",
                    t.device(),
                    self.device
                )));
            }
        }
        let chunk = named.iter().map(|(_, t)| t.numel()).max().unwrap_or(0);
        let chunk = chunk.min(CHECK_CHUNK);
        let _scratch = crate::memory::reserve(self.device, chunk as u128 * 8, &|| {
            format!("the finiteness check of {label} data ({chunk} elements at a time)")
        })?;
        let mut parts = Vec::new();
        let mut marks = Vec::new();
        for (k, (_, t)) in named.iter().enumerate() {
            let flat = flat(t)?;
            for lo in (0..t.numel()).step_by(CHECK_CHUNK) {
                let hi = (lo + CHECK_CHUNK).min(t.numel());
                let m = mark(flat.clone().slice(lo..hi));
                marks.push(m.value.cast(burn::tensor::FloatDType::F32));
                parts.push((k, lo, hi));
            }
        }
        let read: Vec<f64> = burn::tensor::Tensor::cat(marks, 0)
            .into_data()
            .iter::<f64>()
            .collect();
        // The first chunk whose elements (not merely whose sum) are not all finite.
        let mut found = None;
        for i in (0..read.len()).filter(|&i| !read[i].is_finite()) {
            let (k, lo, hi) = parts[i];
            if let Some((at, value)) = first_non_finite(&flat(named[k].1)?.slice(lo..hi))? {
                found = Some((k, lo + at, value));
                break;
            }
        }
        let Some((k, index, value)) = found else {
            return Ok(());
        };
        let (name, t) = &named[k];
        let per_sample = (t.numel() / t.shape().first().copied().unwrap_or(1).max(1)).max(1);
        let found = if value.is_nan() {
            "NaN".to_string()
        } else {
            format!("{value}")
        };
        Err(Error::NonFinite(format!(
            "{name} hold {found}, first at sample {} (element {} of the tensor): nothing was \
             trained; remove or repair those samples (fit's check_inputs: false skips this check)",
            index / per_sample,
            index
        )))
    }
}

/// Where a step happened, for error messages.
fn place(at: Option<(usize, usize, usize)>) -> String {
    match at {
        Some((epoch, batch, batches)) => format!("epoch {epoch}, batch {batch} of {batches}"),
        None => "a training step".into(),
    }
}

/// All elements of a tensor as a rank-1 Burn tensor.
fn flat(t: &Tensor) -> Result<T1> {
    let p = t.reshape(vec![t.numel()])?.prim();
    Ok(burn::tensor::Tensor::from_primitive(
        TensorPrimitive::Float(p),
    ))
}

/// The index and value of the first non-finite element of `t` (two reads), if there is one.
fn first_non_finite(t: &T1) -> Result<Option<(usize, f64)>> {
    let bad = t.clone().is_finite().bool_not().int();
    let at = bad
        .argmax(0)
        .into_data()
        .iter::<i64>()
        .next()
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| Error::Execution("the finiteness check read nothing".into()))?;
    let value = scalar(t.clone().slice(at..at + 1));
    Ok((!value.is_finite()).then_some((at, value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MLP: &str = r#"{"layers": [
        {"name": "x", "op": {"input": {"shape": [4]}}},
        {"name": "h", "op": {"dense": {"units": 8}}, "inputs": [0]},
        {"name": "r", "op": {"activation": {"activation": "relu"}}, "inputs": [1]},
        {"name": "o", "op": {"dense": {"units": 3}}, "inputs": [2]}], "output": 3}"#;

    const WITH_BN: &str = r#"{"layers": [
        {"name": "x", "op": {"input": {"shape": [4]}}},
        {"name": "bn", "op": {"batch_norm": {}}, "inputs": [0]},
        {"name": "o", "op": {"dense": {"units": 3}}, "inputs": [1]}], "output": 2}"#;

    fn model(spec: &str, optimizer: &str) -> Model {
        let spec: ModelSpec = serde_json::from_str(spec).expect("spec");
        let options: CompileOptions = serde_json::from_str(&format!(
            r#"{{"loss": "cross_entropy", "optimizer": {{"kind": "{optimizer}"}}, "seed": 1}}"#
        ))
        .expect("options");
        Model::new(spec, options, Device::Cpu).expect("model")
    }

    fn floats(values: &[f32], shape: &[usize]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::from_bytes(&bytes, shape, DType::F32, Device::Cpu).expect("tensor")
    }

    /// `n` samples of 4 features, the `nan_at` ones NaN in feature 2, with class ids.
    fn data(n: usize, nan_at: &[usize], scale: f32) -> Data {
        let mut x = Vec::with_capacity(n * 4);
        for i in 0..n {
            for j in 0..4 {
                let v = ((i * 7 + j * 3) % 11) as f32 / 5.0 - 1.0;
                x.push(if j == 2 && nan_at.contains(&i) {
                    f32::NAN
                } else {
                    v * scale
                });
            }
        }
        let ids: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
        Data {
            inputs: vec![floats(&x, &[n, 4])],
            target: Some(
                Tensor::from_data(TensorData::new(ids, [n]), DType::S64, vec![n], Device::Cpu)
                    .expect("ids"),
            ),
        }
    }

    fn values(m: &Model) -> Vec<(String, Vec<f64>)> {
        m.parameters()
            .expect("parameters")
            .into_iter()
            .map(|(n, t)| {
                let p: burn::tensor::Tensor<B, 1> = flat(&t).expect("flat");
                (n, p.into_data().iter::<f64>().collect())
            })
            .collect()
    }

    fn all_finite(m: &Model) -> bool {
        values(m)
            .iter()
            .all(|(_, v)| v.iter().all(|x| x.is_finite()))
    }

    fn epoch(on: OnNonFinite, batch_size: usize, accumulate: usize, lr: f64) -> EpochOptions {
        EpochOptions {
            batch_size,
            lrs: vec![lr],
            accumulate,
            on_non_finite: on,
            epoch: 1,
            ..Default::default()
        }
    }

    /// The reported case: NaN in x before a relu. The loss is NaN (relu keeps NaN), the step
    /// fails, and neither the weights nor the optimizer state change.
    #[test]
    fn nan_input_before_relu_fails_the_step_and_changes_nothing() {
        for optimizer in ["sgd", "adam"] {
            let mut m = model(MLP, optimizer);
            let (before, state) = (values(&m), m.optimizer_state().expect("state"));
            let e = m.train_step(&data(8, &[3], 1.0), 0.1, OnNonFinite::Raise);
            match e {
                Err(Error::NonFinite(msg)) => assert!(msg.contains("the loss is NaN"), "{msg}"),
                other => panic!("expected a non-finite error, got {other:?}"),
            }
            assert_eq!(values(&m), before);
            assert_eq!(m.optimizer_state().expect("state"), state);
            assert_eq!(m.steps(), 0);
            let opts = epoch(OnNonFinite::Raise, 4, 1, 0.1);
            match m.train_epoch(&data(8, &[5], 1.0), &opts, &mut |_, _, _| {}) {
                Err(Error::NonFinite(msg)) => {
                    assert!(msg.contains("epoch 1, batch 2 of 2"), "{msg}")
                }
                other => panic!("expected a non-finite error, got {other:?}"),
            }
            // The first batch's step stays; the failing one left no trace.
            assert_eq!(m.steps(), 1);
            assert!(all_finite(&m));
        }
    }

    /// `Skip` leaves the bad batches' steps out and trains on the others; `Stop` ends there.
    #[test]
    fn skip_trains_on_the_finite_batches_and_stop_ends_the_epoch() {
        let mut m = model(MLP, "adam");
        let before = values(&m);
        let opts = epoch(OnNonFinite::Skip, 2, 1, 0.01);
        let s = m
            .train_epoch(&data(12, &[0, 7], 1.0), &opts, &mut |_, _, _| {})
            .expect("epoch");
        assert_eq!((s.steps, s.skipped, s.samples, s.stopped), (4, 2, 8, false));
        assert!(s.loss.is_finite());
        assert!(all_finite(&m));
        assert_ne!(values(&m), before, "the finite batches trained");
        let opts = epoch(OnNonFinite::Stop, 2, 1, 0.01);
        let s = m
            .train_epoch(&data(12, &[5], 1.0), &opts, &mut |_, _, _| {})
            .expect("epoch");
        assert_eq!((s.steps, s.skipped, s.stopped), (2, 0, true));
        assert!(all_finite(&m));
    }

    /// Gradient accumulation checks each micro-batch: a bad one is left out alone.
    #[test]
    fn accumulation_leaves_out_the_bad_micro_batch() {
        let mut m = model(MLP, "sgd");
        let opts = epoch(OnNonFinite::Skip, 2, 2, 0.01);
        let s = m
            .train_epoch(&data(12, &[2], 1.0), &opts, &mut |_, _, _| {})
            .expect("epoch");
        assert_eq!((s.steps, s.skipped, s.samples), (3, 1, 10));
        assert!(all_finite(&m));
        let opts = epoch(OnNonFinite::Raise, 2, 2, 0.01);
        assert!(matches!(
            m.train_epoch(&data(12, &[11], 1.0), &opts, &mut |_, _, _| {}),
            Err(Error::NonFinite(_))
        ));
        assert!(all_finite(&m));
    }

    /// A learning rate whose product with the gradients overflows is caught before the
    /// update; the weights and the optimizer state stay as they were.
    #[test]
    fn an_update_to_infinity_is_left_out() {
        let mut m = model(MLP, "sgd");
        let (before, steps) = (values(&m), m.steps());
        let state = m.optimizer_state().expect("state");
        let d = data(8, &[], 1.0e3);
        match m.train_step(&d, 1.0e38, OnNonFinite::Raise) {
            Err(Error::NonFinite(msg)) => {
                assert!(msg.contains("(times the learning rate)"), "{msg}")
            }
            other => panic!("expected a non-finite error, got {other:?}"),
        }
        assert_eq!((values(&m), m.steps()), (before.clone(), steps));
        assert_eq!(m.optimizer_state().expect("state"), state);
        let step = m.train_step(&d, 1.0e38, OnNonFinite::Skip).expect("skip");
        assert!(step.loss.is_finite() && !step.applied);
        assert_eq!(values(&m), before);
        let opts = epoch(OnNonFinite::Skip, 4, 1, 1.0e38);
        let s = m.train_epoch(&d, &opts, &mut |_, _, _| {}).expect("epoch");
        assert_eq!((s.steps, s.skipped), (0, 2));
        assert_eq!(values(&m), before);
        assert!(matches!(
            m.profile_step(&d, 1.0e38),
            Err(Error::NonFinite(_))
        ));
        assert_eq!(values(&m), before);
    }

    /// An update that overflows although the loss and the scaled gradients were finite (here
    /// weight decay on a huge weight that zero inputs leave without gradient) fails whatever
    /// `on_non_finite` says, and says that the weights are damaged.
    #[test]
    fn an_overflowing_update_fails_loudly() {
        let spec: ModelSpec = serde_json::from_str(MLP).expect("spec");
        let options: CompileOptions = serde_json::from_str(
            r#"{"loss": "cross_entropy", "seed": 1,
                "optimizer": {"kind": "sgd", "weight_decay": 1.0}}"#,
        )
        .expect("options");
        let mut m = Model::new(spec, options, Device::Cpu).expect("model");
        let kernel = m
            .parameters()
            .expect("parameters")
            .into_iter()
            .find(|(n, _)| n.starts_with("h") && n.ends_with("kernel"))
            .expect("the first layer's kernel");
        let huge = floats(&vec![3.0e38; kernel.1.numel()], kernel.1.shape());
        m.set_parameters(&[(kernel.0.clone(), huge)], None, false)
            .expect("set");
        let fresh = m.clone();
        match m.train_step(&data(8, &[], 0.0), 3.0, OnNonFinite::Skip) {
            Err(Error::NonFinite(msg)) => assert!(
                msg.contains("overflowed") && msg.contains("damaged") && msg.contains(&kernel.0),
                "{msg}"
            ),
            other => panic!("expected an overflow error, got {other:?}"),
        }
        // In an epoch the parameters are read with the next step's check (one read per step),
        // or at the epoch's end after its last step; the error names the update's batch.
        for (n, place) in [(16, "epoch 1, batch 1 of 2"), (8, "epoch 1, batch 1 of 1")] {
            let mut m = fresh.clone();
            let opts = epoch(OnNonFinite::Skip, 8, 1, 3.0);
            match m.train_epoch(&data(n, &[], 0.0), &opts, &mut |_, _, _| {}) {
                Err(Error::NonFinite(msg)) => {
                    assert!(msg.contains("overflowed") && msg.contains(place), "{msg}")
                }
                other => panic!("expected an overflow error, got {other:?}"),
            }
        }
    }

    /// A batch norm's running statistics are undone with the step that poisoned them.
    #[test]
    fn batch_norm_statistics_are_undone_with_the_step() {
        let mut m = model(WITH_BN, "sgd");
        m.train_step(&data(8, &[], 1.0), 0.01, OnNonFinite::Raise)
            .expect("finite step");
        let before = values(&m);
        assert!(m
            .train_step(&data(8, &[1], 1.0), 0.01, OnNonFinite::Raise)
            .is_err());
        assert_eq!(values(&m), before, "parameters and running statistics");
        m.train_step(&data(8, &[], 1.0), 0.01, OnNonFinite::Raise)
            .expect("training goes on");
        assert!(all_finite(&m));
    }

    /// Finite values whose sum overflows are not mistaken for infinities.
    #[test]
    fn huge_finite_values_pass() {
        let m = model(MLP, "sgd");
        let big = Data {
            inputs: vec![floats(&[3.0e38; 16], &[4, 4])],
            target: None,
        };
        m.check_finite(&big, "training").expect("finite");
        let mut checks = Checks::new();
        checks.push(Checked::Loss, mark(flat(&big.inputs[0]).expect("flat")));
        let (sum, bad) = checks.read();
        assert!(sum.is_infinite(), "the sum overflows: {sum}");
        assert_eq!(bad, None, "but no element is infinite");
        // one infinite element among huge finite ones is found
        let mut values = [3.0e38f32; 16];
        values[9] = f32::INFINITY;
        let mut checks = Checks::new();
        let t = floats(&values, &[4, 4]);
        checks.push(
            Checked::Parameter("p".into()),
            mark(flat(&t).expect("flat")),
        );
        assert!(matches!(
            checks.read().1,
            Some(Bad {
                what: Checked::Parameter(_),
                ..
            })
        ));
    }

    /// The data check names the tensor, the value and the first sample holding it.
    #[test]
    fn the_data_check_names_tensor_and_sample() {
        let m = model(MLP, "sgd");
        m.check_finite(&data(8, &[], 1.0), "training")
            .expect("finite");
        match m.check_finite(&data(8, &[6, 3], 1.0), "training") {
            Err(Error::NonFinite(msg)) => assert!(
                msg.starts_with("the training inputs hold NaN, first at sample 3"),
                "{msg}"
            ),
            other => panic!("expected a non-finite error, got {other:?}"),
        }
        let mut y = vec![0.0f32; 24];
        y[22] = f32::NEG_INFINITY;
        let d = Data {
            inputs: data(8, &[], 1.0).inputs,
            target: Some(floats(&y, &[8, 3])),
        };
        match m.check_finite(&d, "validation") {
            Err(Error::NonFinite(msg)) => assert!(
                msg.starts_with("the validation targets hold -inf, first at sample 7"),
                "{msg}"
            ),
            other => panic!("expected a non-finite error, got {other:?}"),
        }
    }
}
