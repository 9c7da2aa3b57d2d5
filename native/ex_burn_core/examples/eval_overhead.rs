//! Per-call cost of the engine's eager path without the BEAM: `cargo run --release --example
//! eval_overhead`. Prints the median of 200 batches of 10k calls for a 4-element add.
use ex_burn_core::op::Arith;
use ex_burn_core::{eval, DType, Device, Op, Tensor};
use std::time::Instant;

fn main() {
    let bytes: Vec<u8> = [1f32, 2., 3., 4.]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let a = Tensor::from_bytes(&bytes, &[4], DType::F32, Device::Cpu).unwrap();
    let b = a.clone();
    let op = Op::Binary {
        op: Arith::Add,
        out: None,
    };
    let inputs = vec![a, b];
    let mut per_call = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        for _ in 0..10_000 {
            std::hint::black_box(eval(&op, &inputs, Device::Cpu).unwrap());
        }
        per_call.push(t.elapsed().as_nanos() as f64 / 10_000.0);
    }
    per_call.sort_by(|x, y| x.partial_cmp(y).unwrap());
    println!(
        "eager add (4 x f32), core eval only: median {:.0} ns",
        per_call[100]
    );
    println!("Burn Dispatch float_add alone: {:.0} ns", raw_burn_add());
}

#[allow(dead_code)]
fn raw_burn_add() -> f64 {
    use burn::tensor::ops::FloatTensorOps;
    use burn::tensor::TensorData;
    let dev = burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice);
    let p = burn::Dispatch::float_from_data(TensorData::new(vec![1f32, 2., 3., 4.], [4]), &dev);
    let t = Instant::now();
    for _ in 0..100_000 {
        std::hint::black_box(burn::Dispatch::float_add(p.clone(), p.clone()));
    }
    t.elapsed().as_nanos() as f64 / 100_000.0
}
