//! Optimizers with Burn's config field names and defaults: SGD (momentum, dampening,
//! Nesterov), Adam, AdamW and RMSprop, with weight decay and per-parameter gradient clipping
//! by norm or value.

use super::adam::{Fused, Rule};
use super::net::Net;
use crate::tensor::B;
use crate::{Error, Result};
use burn::grad_clipping::GradientClippingConfig;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, GradientsParams, Optimizer, RmsProp, RmsPropConfig, Sgd,
    SgdConfig,
};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use serde::{Deserialize, Serialize};

/// Which optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Stochastic gradient descent (optionally with momentum).
    Sgd,
    /// Adam.
    Adam,
    /// Adam with decoupled weight decay.
    Adamw,
    /// RMSprop.
    Rmsprop,
}

/// Optimizer settings; absent fields take Burn's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    /// The optimizer.
    pub kind: Kind,
    /// SGD / RMSprop momentum (SGD: none unless given; RMSprop: 0.9).
    #[serde(default)]
    pub momentum: Option<f64>,
    /// SGD momentum dampening (Burn's default 0.1).
    #[serde(default)]
    pub dampening: Option<f64>,
    /// SGD Nesterov momentum.
    #[serde(default)]
    pub nesterov: bool,
    /// Adam/AdamW first-moment decay (0.9).
    #[serde(default)]
    pub beta_1: Option<f32>,
    /// Adam/AdamW second-moment decay (0.999).
    #[serde(default)]
    pub beta_2: Option<f32>,
    /// Numerical epsilon (1e-5).
    #[serde(default)]
    pub epsilon: Option<f32>,
    /// RMSprop smoothing constant (0.99).
    #[serde(default)]
    pub alpha: Option<f32>,
    /// RMSprop centred variant.
    #[serde(default)]
    pub centered: bool,
    /// L2 penalty (AdamW: decoupled decay, Burn's default 1e-4).
    #[serde(default)]
    pub weight_decay: Option<f64>,
    /// Clip each parameter's gradient to this L2 norm.
    #[serde(default)]
    pub clip_norm: Option<f32>,
    /// Clip each gradient element to [-v, v].
    #[serde(default)]
    pub clip_value: Option<f32>,
}

/// A live optimizer with its state.
#[derive(Clone)]
pub enum Optim {
    /// SGD.
    Sgd(OptimizerAdaptor<Sgd<B>, Net<B>, B>),
    /// Adam (its update fused on GPUs with fused kernels, see [`super::adam`]).
    Adam(OptimizerAdaptor<Fused<Adam>, Net<B>, B>),
    /// AdamW (likewise).
    AdamW(OptimizerAdaptor<Fused<AdamW>, Net<B>, B>),
    /// RMSprop.
    RmsProp(OptimizerAdaptor<RmsProp, Net<B>, B>),
}

impl OptimConfig {
    /// Checks every setting's range (and that the ones given belong to this optimizer).
    pub fn validate(&self) -> Result<()> {
        let range = |name: &str, v: Option<f64>, lo: f64, hi: f64, open_hi: bool| -> Result<()> {
            match v {
                Some(x) if !(x.is_finite() && x >= lo && (x < hi || (!open_hi && x == hi))) => {
                    Err(Error::Argument(format!(
                        "{name} must be in [{lo}, {hi}{}, got {x}",
                        if open_hi { ")" } else { "]" }
                    )))
                }
                _ => Ok(()),
            }
        };
        let f = |v: Option<f32>| v.map(f64::from);
        range("momentum", self.momentum, 0.0, 1.0, true)?;
        range("dampening", self.dampening, 0.0, 1.0, false)?;
        range("beta_1", f(self.beta_1), 0.0, 1.0, true)?;
        range("beta_2", f(self.beta_2), 0.0, 1.0, true)?;
        range("epsilon", f(self.epsilon), f64::MIN_POSITIVE, 1.0, false)?;
        range("alpha", f(self.alpha), 0.0, 1.0, false)?;
        range("weight_decay", self.weight_decay, 0.0, 1e6, false)?;
        range(
            "clip_norm",
            f(self.clip_norm),
            f64::MIN_POSITIVE,
            f64::MAX,
            false,
        )?;
        range(
            "clip_value",
            f(self.clip_value),
            f64::MIN_POSITIVE,
            f64::MAX,
            false,
        )?;
        let misplaced: &[(&str, bool)] = match self.kind {
            Kind::Sgd => &[
                ("beta_1", self.beta_1.is_some()),
                ("beta_2", self.beta_2.is_some()),
                ("epsilon", self.epsilon.is_some()),
                ("alpha", self.alpha.is_some()),
                ("centered", self.centered),
            ],
            Kind::Adam | Kind::Adamw => &[
                ("momentum", self.momentum.is_some()),
                ("dampening", self.dampening.is_some()),
                ("nesterov", self.nesterov),
                ("alpha", self.alpha.is_some()),
                ("centered", self.centered),
            ],
            Kind::Rmsprop => &[
                ("dampening", self.dampening.is_some()),
                ("nesterov", self.nesterov),
                ("beta_1", self.beta_1.is_some()),
                ("beta_2", self.beta_2.is_some()),
            ],
        };
        if let Some((name, _)) = misplaced.iter().find(|(_, given)| *given) {
            return Err(Error::Argument(format!(
                "{name} is not a setting of the {:?} optimizer",
                self.kind
            )));
        }
        self.clipping().map(|_| ())
    }

    fn clipping(&self) -> Result<Option<GradientClippingConfig>> {
        match (self.clip_norm, self.clip_value) {
            (Some(_), Some(_)) => Err(Error::Argument(
                "give clip_norm or clip_value, not both".into(),
            )),
            (Some(n), None) => Ok(Some(GradientClippingConfig::Norm(n))),
            (None, Some(v)) => Ok(Some(GradientClippingConfig::Value(v))),
            (None, None) => Ok(None),
        }
    }

    fn decay(&self) -> Option<WeightDecayConfig> {
        self.weight_decay.map(|p| WeightDecayConfig::new(p as f32))
    }

    /// A fresh optimizer.
    pub fn init(&self) -> Result<Optim> {
        let clip = self.clipping()?;
        Ok(match self.kind {
            Kind::Sgd => {
                let mut c = SgdConfig::new()
                    .with_weight_decay(self.decay())
                    .with_gradient_clipping(clip);
                if let Some(m) = self.momentum {
                    let mut mc = MomentumConfig::new()
                        .with_momentum(m)
                        .with_nesterov(self.nesterov);
                    if let Some(d) = self.dampening {
                        mc = mc.with_dampening(d);
                    }
                    c = c.with_momentum(Some(mc));
                } else if self.nesterov {
                    return Err(Error::Argument("nesterov needs momentum".into()));
                }
                Optim::Sgd(c.init())
            }
            Kind::Adam => {
                let mut c = AdamConfig::new().with_weight_decay(self.decay());
                if let Some(b) = self.beta_1 {
                    c = c.with_beta_1(b);
                }
                if let Some(b) = self.beta_2 {
                    c = c.with_beta_2(b);
                }
                if let Some(e) = self.epsilon {
                    c = c.with_epsilon(e);
                }
                Optim::Adam(fused(Fused::new(c.build(), Rule::adam(&c)), clip))
            }
            Kind::Adamw => {
                let mut c = AdamWConfig::new();
                if let Some(w) = self.weight_decay {
                    c = c.with_weight_decay(w as f32);
                }
                if let Some(b) = self.beta_1 {
                    c = c.with_beta_1(b);
                }
                if let Some(b) = self.beta_2 {
                    c = c.with_beta_2(b);
                }
                if let Some(e) = self.epsilon {
                    c = c.with_epsilon(e);
                }
                Optim::AdamW(fused(Fused::new(c.build(), Rule::adamw(&c)), clip))
            }
            Kind::Rmsprop => {
                let mut c = RmsPropConfig::new()
                    .with_weight_decay(self.decay())
                    .with_grad_clipping(clip)
                    .with_centered(self.centered);
                if let Some(m) = self.momentum {
                    c = c.with_momentum(m as f32);
                }
                if let Some(a) = self.alpha {
                    c = c.with_alpha(a);
                }
                if let Some(e) = self.epsilon {
                    c = c.with_epsilon(e);
                }
                Optim::RmsProp(c.init())
            }
        })
    }
}

/// Burn's adaptor around `optim`, clipping gradients as `clip` says (as `AdamConfig::init`
/// builds it).
fn fused<O>(optim: O, clip: Option<GradientClippingConfig>) -> OptimizerAdaptor<O, Net<B>, B>
where
    O: burn::optim::SimpleOptimizer<B>,
{
    let adaptor = OptimizerAdaptor::from(optim);
    match clip {
        Some(c) => adaptor.with_grad_clipping(c.init()),
        None => adaptor,
    }
}

type Rec = BinBytesRecorder<FullPrecisionSettings>;

impl Optim {
    /// One update with learning rate `lr`.
    pub fn step(&mut self, lr: f64, net: Net<B>, grads: GradientsParams) -> Net<B> {
        match self {
            Optim::Sgd(o) => o.step(lr, net, grads),
            Optim::Adam(o) => o.step(lr, net, grads),
            Optim::AdamW(o) => o.step(lr, net, grads),
            Optim::RmsProp(o) => o.step(lr, net, grads),
        }
    }

    /// The optimizer state as bytes (Burn's binary record format).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let r = Rec::default();
        let bytes = match self {
            Optim::Sgd(o) => r.record(o.to_record(), ()),
            Optim::Adam(o) => r.record(o.to_record(), ()),
            Optim::AdamW(o) => r.record(o.to_record(), ()),
            Optim::RmsProp(o) => r.record(o.to_record(), ()),
        };
        bytes.map_err(|e| Error::Execution(format!("cannot record the optimizer state: {e}")))
    }

    /// Restores a state written by [`Optim::to_bytes`] onto `device`.
    pub fn load_bytes(self, bytes: Vec<u8>, device: &burn::DispatchDevice) -> Result<Optim> {
        let r = Rec::default();
        let bad = |e: burn::record::RecorderError| {
            Error::Corrupt(format!("optimizer state does not match: {e}"))
        };
        Ok(match self {
            Optim::Sgd(o) => Optim::Sgd(o.load_record(r.load(bytes, device).map_err(bad)?)),
            Optim::Adam(o) => Optim::Adam(o.load_record(r.load(bytes, device).map_err(bad)?)),
            Optim::AdamW(o) => Optim::AdamW(o.load_record(r.load(bytes, device).map_err(bad)?)),
            Optim::RmsProp(o) => Optim::RmsProp(o.load_record(r.load(bytes, device).map_err(bad)?)),
        })
    }
}
