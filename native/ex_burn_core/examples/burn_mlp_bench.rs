//! The peer for ExBurn's training overhead: the same MLP trained with Burn's high-level API
//! directly (no ExBurn graph interpreter, no NIF), on the same Dispatch backend and allocator.
//!
//!     cargo run --release -p ex_burn_core --example burn_mlp_bench -- <device> <sizes> <batch> <steps> [warmup] [engine|burn [rounds]]
//!     e.g. cpu 784,1024,1024,10 512 20     (device: cpu | cuda; warmup: untimed steps, default 3)
//!
//! Prints one line: `burn_mlp <sizes> batch <b> <device>: <ms> ms/step, <samples/s> samples/s`.
//! The dataset holds `steps` batches, cut in order on the device, as ExBurn's bench does.
//!
//! With `engine` as the sixth argument it also times ExBurn's engine (`Model::train_epoch`,
//! no NIF) on the same model and data sizes in the same process: rounds of a Burn run then an
//! ExBurn epoch, alternating, and the medians (runs in separate processes differ by up to 10%
//! on the H200, so only an interleaved comparison resolves a few percent), 7 rounds unless a
//! seventh argument says otherwise. Each round also prints the heap allocations per step.
//!
//! With `burn` instead of `engine`, the second contender is another Burn loop (its own model
//! and optimizer): the A/A control, showing how much two identical contenders differ in this
//! interleaving (on the H200 within 1.5%).
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn::{Dispatch, DispatchDevice};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The allocator the NIF uses (`ex_burn_nif`), so that the comparison is about ExBurn, not malloc,
/// counting allocations (one relaxed atomic add each, for both contenders alike): host work
/// per step that no device profile shows.
#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations (and reallocations) so far.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// mimalloc, counting.
struct Counting;

// SAFETY: forwards every call unchanged to mimalloc.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        mimalloc::MiMalloc.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        mimalloc::MiMalloc.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        mimalloc::MiMalloc.realloc(ptr, layout, size)
    }
}

/// Allocations made while `f` runs, and its result.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let out = f();
    (out, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

/// The optimizer of the Burn loop.
type Adam<B> = burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<B>, B>;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Mlp<B> {
    /// Dense layers of `sizes` (input first), Burn's default initialisation.
    fn new(sizes: &[usize], device: &B::Device) -> Mlp<B> {
        let layers = sizes
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init::<B>(device))
            .collect();
        Mlp { layers }
    }

    fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let n = self.layers.len();
        for (i, l) in self.layers.iter().enumerate() {
            x = l.forward(x);
            if i + 1 < n {
                x = relu(x);
            }
        }
        x
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let device_name = args.get(1).map(String::as_str).unwrap_or("cpu");
    let sizes: Vec<usize> = args
        .get(2)
        .map(|s| s.split(',').map(|v| v.parse().expect("size")).collect())
        .unwrap_or(vec![784, 1024, 1024, 10]);
    let batch: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(512);
    let steps: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(20);
    let warmup: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(3);
    let inner = match device_name {
        #[cfg(feature = "cuda")]
        "cuda" => DispatchDevice::Cuda(burn::backend::cuda::CudaDevice::new(0)),
        _ => DispatchDevice::Flex(burn::backend::flex::FlexDevice),
    };
    let device = DispatchDevice::autodiff(inner.clone());
    type B = Dispatch;
    let mut model = Mlp::new(&sizes, &device);
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    // A resident dataset of `steps` batches, cut on the device.
    let n = batch * steps.max(warmup).max(1);
    let x_all: Tensor<B, 2> = Tensor::random([n, sizes[0]], Distribution::Normal(0.0, 1.0), &inner);
    let y_all: Tensor<B, 1, Int> = Tensor::<B, 1>::random(
        [n],
        Distribution::Uniform(0.0, *sizes.last().unwrap() as f64),
        &inner,
    )
    .int();
    let step = |k: usize, model: Mlp<B>, optim: &mut Adam<B>| -> Mlp<B> {
        let lo = (k % (n / batch)) * batch;
        let x = Tensor::from_inner(x_all.clone().narrow(0, lo, batch));
        let y = Tensor::from_inner(y_all.clone().narrow(0, lo, batch));
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        optim.step(1e-3, model, grads)
    };
    let mut control = (args.get(6).map(String::as_str) == Some("burn")).then(|| {
        (
            Mlp::new(&sizes, &device),
            AdamConfig::new().init::<B, Mlp<B>>(),
        )
    });
    for k in 0..warmup {
        model = step(k, model, &mut optim);
        if let Some((m, mut o)) = control.take() {
            control = Some((step(k, m, &mut o), o));
        }
    }
    B::sync(&inner).expect("sync");
    let sizes_s: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    let label = format!("{} batch {batch} {device_name}", sizes_s.join("-"));
    let timed = |model: Mlp<B>, optim: &mut Adam<B>| -> (Mlp<B>, f64) {
        let t0 = Instant::now();
        let mut model = model;
        for k in 0..steps {
            model = step(k, model, optim);
        }
        B::sync(&inner).expect("sync");
        (model, t0.elapsed().as_secs_f64() * 1e3 / steps as f64)
    };
    let line = |who: &str, ms: f64| {
        println!(
            "{who} {label}: {ms:.3} ms/step, {:.0} samples/s",
            batch as f64 / ms * 1e3
        )
    };
    if !matches!(args.get(6).map(String::as_str), Some("engine" | "burn")) {
        line("burn_mlp", timed(model, &mut optim).1);
        return;
    }
    // Interleaved rounds: a Burn run, then an ExBurn epoch (or the control Burn run) of as
    // many steps, `rounds` times.
    let rounds = args.get(7).and_then(|s| s.parse().ok()).unwrap_or(ROUNDS);
    let mut ours = control
        .is_none()
        .then(|| engine::Engine::new(device_name, &sizes, batch, steps, warmup));
    let other = if ours.is_some() { "engine" } else { "control" };
    let (mut burn_ms, mut engine_ms) = (Vec::new(), Vec::new());
    let per_step = |n: u64| n as f64 / steps as f64;
    for r in 0..rounds {
        let ((m, b), burn_allocs) = counted(|| timed(model, &mut optim));
        model = m;
        let (e, engine_allocs) = match (ours.as_mut(), control.take()) {
            (Some(ours), _) => counted(|| ours.epoch_ms()),
            (None, Some((m, mut o))) => {
                let ((m, e), allocs) = counted(|| timed(m, &mut o));
                control = Some((m, o));
                (e, allocs)
            }
            (None, None) => unreachable!("a second contender exists"),
        };
        println!(
            "round {r}: burn {b:.3} ms/step, {other} {e:.3} ms/step ({:+.1}%); allocations/step burn {:.0}, {other} {:.0}",
            (e / b - 1.0) * 100.0,
            per_step(burn_allocs),
            per_step(engine_allocs)
        );
        burn_ms.push(b);
        engine_ms.push(e);
    }
    let ratios: Vec<f64> = engine_ms.iter().zip(&burn_ms).map(|(e, b)| e / b).collect();
    let (b, e) = (median(burn_ms), median(engine_ms));
    line("burn_mlp", b);
    line(other, e);
    println!(
        "{other} overhead over burn: {:+.1}% (medians of {rounds} rounds; median round ratio {:+.1}%)",
        (e / b - 1.0) * 100.0,
        (median(ratios) - 1.0) * 100.0
    );
}

/// Interleaved rounds of the engine comparison (the seventh argument overrides it).
const ROUNDS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// ExBurn's training engine on the same MLP, without the BEAM.
mod engine {
    use ex_burn_core::train::{CompileOptions, Data, EpochOptions, Model, ModelSpec};
    use ex_burn_core::{eval, Device, Op};
    use serde_json::json;

    /// ExBurn's model and resident dataset.
    pub struct Engine {
        model: Model,
        data: Data,
        opts: EpochOptions,
        dev: Device,
    }

    impl Engine {
        /// Builds the model and a dataset of `steps` batches; trains a warm-up epoch of `warmup`
        /// batches.
        pub fn new(
            device: &str,
            sizes: &[usize],
            batch: usize,
            steps: usize,
            warmup: usize,
        ) -> Engine {
            let dev = match device {
                "cuda" => Device::Cuda(0),
                _ => Device::Cpu,
            };
            let mut layers =
                vec![json!({"name": "x", "op": {"input": {"shape": [sizes[0]]}}, "inputs": []})];
            for (i, &units) in sizes[1..].iter().enumerate() {
                let prev = layers.len() - 1;
                layers.push(json!({"name": format!("d{i}"), "op": {"dense": {"units": units}}, "inputs": [prev]}));
                if i + 2 < sizes.len() {
                    let prev = layers.len() - 1;
                    layers.push(json!({"name": format!("r{i}"), "op": {"activation": {"activation": "relu", "alpha": 0.0}}, "inputs": [prev]}));
                }
            }
            let output = layers.len() - 1;
            let spec: ModelSpec =
                serde_json::from_value(json!({"layers": layers, "output": output})).expect("spec");
            let options: CompileOptions = serde_json::from_value(json!({
                "loss": "cross_entropy",
                "optimizer": {"kind": "adam"},
                "learning_rate": 1e-3
            }))
            .expect("options");
            let model = Model::new(spec, options, dev).expect("model");
            let data = |batches: usize, seed: u64| -> Data {
                let n = batch * batches.max(1);
                let op = |v: serde_json::Value| -> Op { serde_json::from_value(v).expect("op") };
                let x = eval(
                    &op(
                        json!({"random_normal": {"shape": [n, sizes[0]], "dtype": ["f", 32], "seed": seed}}),
                    ),
                    &[],
                    dev,
                );
                let y = eval(
                    &op(
                        json!({"random_uniform": {"shape": [n], "dtype": ["s", 64], "min": 0.0, "max": *sizes.last().unwrap() as f64, "seed": seed + 1}}),
                    ),
                    &[],
                    dev,
                );
                Data {
                    inputs: x.expect("x"),
                    target: y.expect("y").pop(),
                }
            };
            let opts = EpochOptions {
                batch_size: batch,
                shuffle: None,
                lrs: vec![1e-3],
                accumulate: 1,
                progress_every: 0,
                accuracy: false,
                ..Default::default()
            };
            let mut engine = Engine {
                model,
                data: data(warmup, 1),
                opts,
                dev,
            };
            engine.epoch_ms();
            engine.data = data(steps, 3);
            engine
        }

        /// Trains one epoch over the dataset; returns its milliseconds per step (the device
        /// synchronised at the end, as the Burn loop is).
        pub fn epoch_ms(&mut self) -> f64 {
            let s = self
                .model
                .train_epoch(&self.data, &self.opts, &mut |_, _, _| {})
                .expect("epoch");
            self.dev.sync().expect("sync");
            s.seconds * 1e3 / s.steps as f64
        }
    }
}
