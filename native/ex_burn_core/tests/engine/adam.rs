//! Adam and AdamW updates fused into one kernel (on GPUs with fused kernels) against Burn's
//! own updates, element for element, over several steps with changing learning rates.

use super::common::{dev, kernels_fuse};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig, SimpleOptimizer};
use burn::tensor::{Tensor, TensorData};
use burn::Dispatch;
use ex_burn_core::train::adam::{fused_updates, Fused, Rule};

type T = Tensor<Dispatch, 2>;

const SHAPE: [usize; 2] = [37, 70];

/// Deterministic values of mixed signs and magnitudes (zeros and large ones included).
fn values(seed: u64) -> T {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let n = SHAPE[0] * SHAPE[1];
    let v: Vec<f32> = (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((x >> 40) as f32) / (1u64 << 24) as f32 - 0.5;
            match i % 97 {
                0 => 0.0,
                1 => u * 1e4,
                2 => u * 1e-6,
                _ => u,
            }
        })
        .collect();
    let device = dev().to_dispatch().unwrap();
    Tensor::from_data(TensorData::new(v, SHAPE), &device)
}

fn host(t: &T) -> Vec<f32> {
    t.to_data().to_vec::<f32>().unwrap()
}

/// The largest distance in units in the last place between `a` and `b` (same signs).
fn ulps(a: &[f32], b: &[f32]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            assert_eq!(x.is_nan(), y.is_nan(), "{x} vs {y}");
            if x == y || x.is_nan() {
                0
            } else {
                (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs() as u32
            }
        })
        .max()
        .unwrap_or(0)
}

/// Runs four steps of `fused` and of Burn's `burn` from the same parameter and gradients;
/// returns the largest difference in ulps of parameters and moments, and how many of the
/// fused optimizer's updates ran fused.
macro_rules! race {
    ($burn:expr, $fused:expr) => {{
        let (burn, fused) = ($burn, $fused);
        let (mut p_burn, mut p_fused) = (values(1), values(1));
        let (mut s_burn, mut s_fused) = (None, None);
        let mut worst = 0;
        let before = fused_updates();
        for (step, lr) in [1e-3, 1e-3, 5e-4, 2e-2].into_iter().enumerate() {
            let g = values(10 + step as u64);
            let (p, s) = burn.step(lr, p_burn, g.clone(), s_burn);
            (p_burn, s_burn) = (p, s);
            let (p, s) = fused.step(lr, p_fused, g, s_fused);
            (p_fused, s_fused) = (p, s);
            let (a, b) = (s_burn.as_ref().unwrap(), s_fused.as_ref().unwrap());
            assert_eq!(a.momentum.time, b.momentum.time);
            worst = worst
                .max(ulps(&host(&p_burn), &host(&p_fused)))
                .max(ulps(
                    &host(&a.momentum.moment_1),
                    &host(&b.momentum.moment_1),
                ))
                .max(ulps(
                    &host(&a.momentum.moment_2),
                    &host(&b.momentum.moment_2),
                ));
        }
        (worst, fused_updates() - before)
    }};
}

#[test]
fn fused_adam_updates_equal_burns() {
    for decay in [None, Some(0.05)] {
        let c = AdamConfig::new()
            .with_beta_1(0.8)
            .with_epsilon(1e-7)
            .with_weight_decay(decay.map(WeightDecayConfig::new));
        let rule = Rule::adam(&c).expect("a rule for Adam");
        assert_eq!(rule.beta_1, 0.8);
        let (worst, fused) = race!(c.build(), Fused::new(c.build(), Some(rule)));
        assert!(worst <= 1, "Adam (decay {decay:?}): {worst} ulps apart");
        assert_eq!(fused > 0, kernels_fuse(), "fused updates: {fused}");
    }
}

#[test]
fn fused_adamw_updates_equal_burns() {
    for decay in [0.0, 0.1] {
        let c = AdamWConfig::new()
            .with_beta_2(0.99)
            .with_weight_decay(decay);
        let rule = Rule::adamw(&c).expect("a rule for AdamW");
        let (worst, fused) = race!(c.build(), Fused::new(c.build(), Some(rule)));
        assert!(worst <= 1, "AdamW (decay {decay}): {worst} ulps apart");
        assert_eq!(fused > 0, kernels_fuse(), "fused updates: {fused}");
    }
}

#[test]
fn settings_the_fused_update_does_not_cover_keep_burns() {
    use ex_burn_core::train::adam::Decay;
    // Burn's defaults, read from its configs
    let adam = Rule::adam(&AdamConfig::new()).unwrap();
    assert_eq!(
        (adam.beta_1, adam.beta_2, adam.epsilon, adam.decay),
        (0.9, 0.999, 1e-5, Decay::None)
    );
    let adamw = Rule::adamw(&AdamWConfig::new()).unwrap();
    assert_eq!(adamw.decay, Decay::Decoupled(1e-4));
    assert!(Rule::adam(&AdamConfig::new().with_amsgrad(true)).is_none());
    assert!(Rule::adamw(&AdamWConfig::new().with_cautious_weight_decay(true)).is_none());
    let c = AdamConfig::new();
    let (worst, fused) = race!(c.build(), Fused::new(c.build(), None));
    assert_eq!((worst, fused), (0, 0));
}

/// The bytes Burn's recorder writes for optimizer `O`'s record of `state`.
fn recorded<O: SimpleOptimizer<Dispatch>>(state: O::State<2>) -> Vec<u8> {
    use burn::optim::record::AdaptorRecord;
    use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(AdaptorRecord::<O, Dispatch>::from_state(state), ())
        .unwrap()
}

#[test]
fn saved_states_are_burns() {
    use burn::optim::{Adam, AdamW};
    let c = AdamConfig::new();
    let (_, state) = Fused::new(c.build(), Rule::adam(&c)).step(1e-3, values(1), values(2), None);
    let state = state.unwrap();
    assert_eq!(
        recorded::<Fused<Adam>>(state.clone()),
        recorded::<Adam>(state)
    );
    let c = AdamWConfig::new();
    let (_, state) = Fused::new(c.build(), Rule::adamw(&c)).step(1e-3, values(1), values(2), None);
    let state = state.unwrap();
    assert_eq!(
        recorded::<Fused<AdamW>>(state.clone()),
        recorded::<AdamW>(state)
    );
}
