//! Training mathematics checked by hand: each optimizer's first steps, exact gradients
//! against finite differences (f64), clipping, accumulation, frozen layers.

use super::common::*;
use super::train::{blobs, mlp, opts};
use ex_burn_core::train::model::CompileOptions;
use ex_burn_core::train::model::Data;
use ex_burn_core::train::optim::Kind;
use ex_burn_core::train::spec::{LayerOp, LayerSpec, ModelSpec};
use ex_burn_core::train::{loss::Loss, EpochOptions, Model, OnNonFinite};
use ex_burn_core::{DType, Device, Tensor};

/// y = w x (one weight, no bias), MSE, in f64.
fn scalar_model(kind: Kind, f: impl FnOnce(&mut ex_burn_core::train::optim::OptimConfig)) -> Model {
    let spec = ModelSpec {
        layers: vec![
            LayerSpec {
                name: "x".into(),
                op: LayerOp::Input {
                    shape: vec![1],
                    dtype: None,
                },
                inputs: vec![],
            },
            LayerSpec {
                name: "w".into(),
                op: LayerOp::Dense {
                    units: 1,
                    use_bias: false,
                },
                inputs: vec![0],
            },
        ],
        output: 1,
    };
    let mut o = opts(kind, Loss::Mse);
    o.dtype = DType::F64;
    f(&mut o.optimizer);
    Model::new(spec, o, dev()).unwrap()
}

fn data() -> Data {
    Data {
        inputs: vec![t(&[1.0, 2.0], &[2, 1], DType::F64)],
        target: Some(t(&[3.0, 5.0], &[2, 1], DType::F64)),
    }
}

fn weight(m: &Model) -> f64 {
    v(&m.parameters().unwrap()[0].1)[0]
}

/// d/dw mean((w x - y)^2) for x = [1, 2], y = [3, 5].
fn grad(w: f64) -> f64 {
    (2.0 * (w - 3.0) + 2.0 * 2.0 * (2.0 * w - 5.0)) / 2.0
}

fn run(m: &mut Model, steps: usize, lr: f64) -> Vec<f64> {
    (0..steps)
        .map(|_| {
            m.train_step(&data(), lr, OnNonFinite::Raise).unwrap();
            weight(m)
        })
        .collect()
}

fn close_all(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        // Burn applies some optimizer scalars in f32: agree to 1e-7 relative.
        assert!(
            (g - w).abs() < 1e-7 * (1.0 + w.abs()),
            "got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn sgd_plain_momentum_nesterov_and_decay() {
    // f64 models are refused on the wgpu devices (`f64_model` asserts it)
    if !f64_on_device() {
        return;
    }
    let lr = 0.1;
    let mut m = scalar_model(Kind::Sgd, |_| {});
    let mut w = weight(&m);
    let want: Vec<f64> = (0..3)
        .map(|_| {
            w -= lr * grad(w);
            w
        })
        .collect();
    close_all(&run(&mut m, 3, lr), &want);

    // Burn's momentum: v1 = g, v = (1 - dampening) g + momentum v; nesterov: g + momentum v
    for nesterov in [false, true] {
        let mut m = scalar_model(Kind::Sgd, |o| {
            o.momentum = Some(0.9);
            o.dampening = Some(0.1);
            o.nesterov = nesterov;
            o.weight_decay = Some(0.01);
        });
        let (mut w, mut vel) = (weight(&m), None::<f64>);
        let want: Vec<f64> = (0..3)
            .map(|_| {
                let g = grad(w) + 0.01 * w;
                let nv = match vel {
                    None => g,
                    Some(v) => (1.0 - 0.1) * g + 0.9 * v,
                };
                vel = Some(nv);
                let step = if nesterov { 0.9 * nv + g } else { nv };
                w -= lr * step;
                w
            })
            .collect();
        close_all(&run(&mut m, 3, lr), &want);
    }
}

#[test]
fn adam_and_adamw_follow_their_formulas() {
    // f64 models are refused on the wgpu devices (`f64_model` asserts it)
    if !f64_on_device() {
        return;
    }
    let (lr, b1, b2, eps) = (0.05, 0.9f64, 0.999f64, 1e-5f64);
    for (kind, wd) in [(Kind::Adam, 0.0), (Kind::Adamw, 0.02)] {
        let mut m = scalar_model(kind, |o| {
            o.weight_decay = if kind == Kind::Adamw { Some(wd) } else { None }
        });
        let (mut w, mut m1, mut m2) = (weight(&m), 0.0, 0.0);
        let want: Vec<f64> = (1..=3)
            .map(|t| {
                let g = grad(w);
                m1 = b1 * m1 + (1.0 - b1) * g;
                m2 = b2 * m2 + (1.0 - b2) * g * g;
                let (mh, vh) = (m1 / (1.0 - b1.powi(t)), m2 / (1.0 - b2.powi(t)));
                let update = mh / (vh.sqrt() + eps);
                w = w * (1.0 - lr * wd) - lr * update;
                w
            })
            .collect();
        // Burn computes in f32 optimizer arithmetic for the scalars: allow 1e-6 relative.
        let got = run(&mut m, 3, lr);
        for (g, e) in got.iter().zip(&want) {
            assert!(
                (g - e).abs() < 1e-6 * (1.0 + e.abs()),
                "{kind:?}: got {got:?}, want {want:?}"
            );
        }
    }
}

#[test]
fn rmsprop_follows_its_formula() {
    // f64 models are refused on the wgpu devices (`f64_model` asserts it)
    if !f64_on_device() {
        return;
    }
    let (lr, alpha, eps) = (0.01, 0.99f64, 1e-5f64);
    let mut m = scalar_model(Kind::Rmsprop, |o| o.momentum = Some(0.0));
    let (mut w, mut sq) = (weight(&m), 0.0);
    let want: Vec<f64> = (0..3)
        .map(|_| {
            let g = grad(w);
            sq = alpha * sq + (1.0 - alpha) * g * g;
            w -= lr * g / (sq.sqrt() + eps);
            w
        })
        .collect();
    let got = run(&mut m, 3, lr);
    for (g, e) in got.iter().zip(&want) {
        assert!(
            (g - e).abs() < 1e-6 * (1.0 + e.abs()),
            "got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn clipping_by_value_and_by_norm() {
    // f64 models are refused on the wgpu devices (`f64_model` asserts it)
    if !f64_on_device() {
        return;
    }
    let lr = 0.1;
    let mut m = scalar_model(Kind::Sgd, |o| o.clip_value = Some(0.5));
    let w0 = weight(&m);
    run(&mut m, 1, lr);
    close_all(&[weight(&m)], &[w0 - lr * grad(w0).clamp(-0.5, 0.5)]);
    let mut m = scalar_model(Kind::Sgd, |o| o.clip_norm = Some(0.25));
    let w0 = weight(&m);
    run(&mut m, 1, lr);
    let g = grad(w0);
    let clipped = if g.abs() > 0.25 { 0.25 * g.signum() } else { g };
    assert!((weight(&m) - (w0 - lr * clipped)).abs() < 1e-6, "norm clip");
}

/// An f64 model on the test device; `None` on the wgpu devices, which refuse f64 models with
/// an `UnsupportedDtype` error naming the device (asserted here).
fn f64_model(spec: ModelSpec, o: CompileOptions) -> Option<Model> {
    let m = Model::new(spec, o, dev());
    if matches!(dev(), Device::Vulkan(_) | Device::Metal(_)) {
        let e = m.err().expect("f64 model refused");
        assert!(
            matches!(e, ex_burn_core::Error::UnsupportedDtype(ref s) if s.contains("vulkan") || s.contains("metal")),
            "{e:?}"
        );
        return None;
    }
    Some(m.unwrap())
}

#[test]
fn gradients_match_finite_differences_in_f64() {
    let mut o = opts(Kind::Sgd, Loss::CrossEntropy);
    o.dtype = DType::F64;
    let Some(mut m) = f64_model(mlp(4, 5, 3, true), o) else {
        return;
    };
    let (x, _) = blobs(6);
    let y = t(&[0., 1., 2., 1., 0., 2.], &[6], DType::S64);
    let batch = Data {
        inputs: vec![x],
        target: Some(y),
    };
    let grads = m.compute_gradients(&batch).unwrap();
    let params = m.parameters().unwrap();
    assert_eq!(grads.len(), 4);
    let h = 1e-6;
    for (name, g) in &grads {
        let (_, p) = params.iter().find(|(n, _)| n == name).unwrap();
        let base = v(p);
        let gv = v(g);
        for k in (0..base.len()).step_by(3) {
            let mut loss_at = |delta: f64| {
                let mut vals = base.clone();
                vals[k] += delta;
                let tp = t(&vals, p.shape(), DType::F64);
                m.set_parameters(&[(name.clone(), tp)], None, false)
                    .unwrap();
                m.evaluate(&batch, 6, true).unwrap().loss
            };
            let fd = (loss_at(h) - loss_at(-h)) / (2.0 * h);
            loss_at(0.0);
            assert!(
                (fd - gv[k]).abs() < 1e-6 * (1.0 + fd.abs()),
                "{name}[{k}]: autodiff {} vs finite difference {fd}",
                gv[k]
            );
        }
    }
}

#[test]
fn accumulation_equals_one_large_batch() {
    let (x, y) = blobs(16);
    let data = Data {
        inputs: vec![x],
        target: Some(y),
    };
    let mk = || {
        let mut o = opts(Kind::Sgd, Loss::CrossEntropy);
        o.dtype = DType::F64;
        f64_model(mlp(4, 6, 2, false), o)
    };
    let (Some(_), Some(_)) = (mk(), mk()) else {
        return;
    };
    let (mut a, mut b) = (mk().unwrap(), mk().unwrap());
    let one = EpochOptions {
        batch_size: 16,
        shuffle: None,
        lrs: vec![0.1],
        accumulate: 1,
        progress_every: 0,
        accuracy: true,
        ..Default::default()
    };
    let acc = EpochOptions {
        batch_size: 8,
        shuffle: None,
        lrs: vec![0.1],
        accumulate: 2,
        progress_every: 0,
        accuracy: true,
        ..Default::default()
    };
    let sa = a.train_epoch(&data, &one, &mut |_, _, _| {}).unwrap();
    let sb = b.train_epoch(&data, &acc, &mut |_, _, _| {}).unwrap();
    assert_eq!((sa.steps, sb.steps), (1, 1));
    for ((n, pa), (_, pb)) in a
        .parameters()
        .unwrap()
        .iter()
        .zip(b.parameters().unwrap().iter())
    {
        for (x, y) in v(pa).iter().zip(v(pb)) {
            assert!((x - y).abs() < 1e-12, "{n}: {x} vs {y}");
        }
    }
}

#[test]
fn frozen_layers_do_not_move() {
    let (x, y) = blobs(16);
    let data = Data {
        inputs: vec![x],
        target: Some(y),
    };
    let mut m = Model::new(
        mlp(4, 6, 2, false),
        opts(Kind::Adam, Loss::CrossEntropy),
        dev(),
    )
    .unwrap();
    m.freeze(&["h".to_string()]).unwrap();
    let before: Vec<(String, Tensor)> = m.parameters().unwrap();
    for _ in 0..3 {
        m.train_step(&data, 0.1, OnNonFinite::Raise).unwrap();
    }
    for ((n, b), (_, a)) in before.iter().zip(m.parameters().unwrap().iter()) {
        let moved = v(b) != v(a);
        assert_eq!(moved, !n.starts_with("h."), "{n} moved={moved}");
    }
    assert!(m.freeze(&["nope".to_string()]).is_err());
    m.unfreeze(&[]);
    m.train_step(&data, 0.1, OnNonFinite::Raise).unwrap();
    assert_ne!(v(&before[0].1), v(&m.parameters().unwrap()[0].1));
}
