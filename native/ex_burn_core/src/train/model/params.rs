//! Parameters by name: reading, replacing and freezing them, gradients per parameter, moving
//! a model between devices and types, and its optimizer state.

use super::*;

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

    pub(super) fn grad(&self, grads: &<B as AutodiffBackend>::Gradients) -> Option<Tensor> {
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

    pub(super) fn remove_frozen(&self, mut grads: GradientsParams) -> GradientsParams {
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
        self.replicas.clear();
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
        self.replicas.clear();
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
        self.replicas.clear();
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
        m.replicas.clear();
        if self.device != device && self.device != Device::Cpu && device != Device::Cpu {
            // Between two GPUs each parameter goes through the host, as `Tensor::to_device`
            // copies (Burn moves no autodiff module between backends, and its copies between
            // GPUs are not ordered with the destination's queued work).
            let moved = self
                .parameters()?
                .into_iter()
                .map(|(n, t)| Ok((n, t.to_device(device)?)))
                .collect::<Result<Vec<_>>>()?;
            m.device = device;
            m.set_parameters(&moved, None, false)?;
        } else {
            let net = m
                .net
                .take()
                .ok_or_else(|| Error::Execution("model parameters are unavailable".into()))?;
            m.net = Some(<Net<B> as Module<B>>::to_device(net, &ad));
            m.device = device;
        }
        m.optim = m
            .options
            .optimizer
            .init()?
            .load_bytes(self.optim.to_bytes()?, &device.to_dispatch()?)?;
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
        self.replicas.clear();
        // Optimizer state lives on the inner (non-autodiff) device.
        let inner = self.device.to_dispatch()?;
        self.optim = self.options.optimizer.init()?.load_bytes(bytes, &inner)?;
        self.steps = steps;
        Ok(())
    }

    /// Replaces the optimizer (its state starts afresh).
    pub fn set_optimizer(&mut self, config: OptimConfig) -> Result<()> {
        self.replicas.clear();
        self.optim = config.init()?;
        self.options.optimizer = config;
        Ok(())
    }

    /// Frozen layer names.
    pub fn frozen_layers(&self) -> Vec<String> {
        self.frozen.iter().cloned().collect()
    }
}

pub(super) fn to_param<const D: usize>(
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

pub(super) fn inner_of(ad: &burn::DispatchDevice) -> burn::DispatchDevice {
    use burn::tensor::backend::DeviceOps;
    ad.inner().clone()
}
