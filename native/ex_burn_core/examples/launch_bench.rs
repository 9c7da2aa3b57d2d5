//! What one kernel launch costs on a GPU backend, apart from the kernel's own work: chains of
//! element-wise ops on Burn's Dispatch backend (the one ExBurn uses), on a small tensor (where
//! the launch is all there is) and on a large one (where the GPU's memory bandwidth is).
//!
//!     cargo run --release -p ex_burn_core --features cuda --example launch_bench -- [cuda|cpu] [ops]
//!
//! For each size it prints the time per op of a chain of `ops` (default 2,000) `add`s, taken
//! as the host's enqueue time (from the first op to the last returning) and the wall time to
//! the end of the GPU's work (a read of the result); the medians of 5 rounds after a warm-up.
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn::{Dispatch, DispatchDevice};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = match args.first().map(String::as_str) {
        #[cfg(feature = "cuda")]
        Some("cuda") | None => DispatchDevice::Cuda(burn::backend::cuda::CudaDevice::new(0)),
        _ => DispatchDevice::Flex(burn::backend::flex::FlexDevice),
    };
    let ops: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    for numel in [1024usize, 1 << 20, 25 << 20] {
        let x = Tensor::<Dispatch, 1>::ones([numel], &device);
        let (mut enqueue, mut wall) = (Vec::new(), Vec::new());
        for round in 0..6 {
            let mut y = x.clone();
            Dispatch::sync(&device).expect("sync");
            let t0 = Instant::now();
            for _ in 0..ops {
                y = y + x.clone();
            }
            let t1 = t0.elapsed();
            let sum: f32 = y.narrow(0, 0, 1).into_scalar();
            let t2 = t0.elapsed();
            assert_eq!(sum, 1.0 + ops as f32);
            if round > 0 {
                enqueue.push(t1.as_secs_f64() * 1e6 / ops as f64);
                wall.push(t2.as_secs_f64() * 1e6 / ops as f64);
            }
        }
        let bytes = numel as f64 * 12.0;
        let wall_us = median(wall);
        println!(
            "launch_bench {numel} elements: enqueue {:.2} us/op, wall {:.2} us/op ({:.0} GB/s)",
            median(enqueue),
            wall_us,
            bytes / wall_us / 1e3
        );
    }
}
