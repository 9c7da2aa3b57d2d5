//! The peer for ExBurn's training overhead: the same MLP trained with Burn's high-level API
//! directly (no ExBurn graph interpreter, no NIF), on the same Dispatch backend and allocator.
//!
//!     cargo run --release -p ex_burn_core --example burn_mlp_bench -- <device> <sizes> <batch> <steps> [warmup]
//!     e.g. cpu 784,1024,1024,10 512 20     (device: cpu | cuda; warmup: untimed steps, default 3)
//!
//! Prints one line: `burn_mlp <sizes> batch <b> <device>: <ms> ms/step, <samples/s> samples/s`.
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn::{Dispatch, DispatchDevice};
use std::time::Instant;

/// The allocator the NIF uses (`ex_burn_nif`), so that the comparison is about ExBurn, not malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Mlp<B> {
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
    let layers = sizes
        .windows(2)
        .map(|w| LinearConfig::new(w[0], w[1]).init::<B>(&device))
        .collect();
    let mut model = Mlp { layers };
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    // A resident dataset of 8 batches, cut on the device.
    let n = batch * 8;
    let x_all: Tensor<B, 2> = Tensor::random([n, sizes[0]], Distribution::Normal(0.0, 1.0), &inner);
    let y_all: Tensor<B, 1, Int> = Tensor::<B, 1>::random(
        [n],
        Distribution::Uniform(0.0, *sizes.last().unwrap() as f64),
        &inner,
    )
    .int();
    let mut step = |k: usize, model: Mlp<B>| -> Mlp<B> {
        let lo = (k % 8) * batch;
        let x = Tensor::from_inner(x_all.clone().narrow(0, lo, batch));
        let y = Tensor::from_inner(y_all.clone().narrow(0, lo, batch));
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        optim.step(1e-3, model, grads)
    };
    for k in 0..warmup {
        model = step(k, model);
    }
    B::sync(&inner).expect("sync");
    let t0 = Instant::now();
    for k in 0..steps {
        model = step(k, model);
    }
    B::sync(&inner).expect("sync");
    let ms = t0.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let sizes_s: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    println!(
        "burn_mlp {} batch {batch} {device_name}: {ms:.3} ms/step, {:.0} samples/s",
        sizes_s.join("-"),
        batch as f64 / ms * 1e3
    );
}
