//! Data-parallel training: the same losses and parameters as on one device at equal global
//! batch, uneven and empty slices, replicas refreshed after the model changes, refusals.

use super::common::*;
use super::train::{blobs, mlp, opts};
use ex_burn_core::train::model::{CompileOptions, Data};
use ex_burn_core::train::optim::Kind;
use ex_burn_core::train::spec::{LayerOp, LayerSpec};
use ex_burn_core::train::{loss::Loss, EpochOptions, Model};
use ex_burn_core::{Device, Error};

/// `n` devices to split over: distinct GPUs where the test device has that many, else the
/// test device repeated (replicas on one device, summed through it).
fn devices(n: usize) -> Vec<Device> {
    let d = dev();
    let count = ex_burn_core::kernels::serving(d.family())
        .and_then(|k| k.device_count().ok())
        .unwrap_or(1);
    match d {
        Device::Cuda(_) if count >= n => (0..n).map(Device::Cuda).collect(),
        _ => vec![d; n],
    }
}

fn adam() -> CompileOptions {
    let mut o = opts(Kind::Adam, Loss::CrossEntropy);
    o.learning_rate = 0.01;
    o
}

fn epoch(batch_size: usize, devices: Vec<Device>, epoch: usize) -> EpochOptions {
    accumulating(batch_size, 1, devices, epoch)
}

fn accumulating(
    batch_size: usize,
    accumulate: usize,
    devices: Vec<Device>,
    epoch: usize,
) -> EpochOptions {
    EpochOptions {
        batch_size,
        shuffle: Some(epoch as u64),
        lrs: vec![0.01],
        accumulate,
        accuracy: true,
        epoch,
        devices,
        ..Default::default()
    }
}

/// Each epoch's loss and accuracy, and the final parameters by name.
type Run = (Vec<(f64, Option<f64>)>, Vec<(String, Vec<f64>)>);

/// One epoch per entry of `plan` (the devices it trains on) over `n` samples.
fn run(n: usize, batch: usize, plan: &[Vec<Device>]) -> Run {
    run_with(n, batch, 1, plan)
}

/// [`run`] with `accumulate` micro-batches of `batch` rows to a step.
fn run_with(n: usize, batch: usize, accumulate: usize, plan: &[Vec<Device>]) -> Run {
    let (x, y) = blobs(n);
    let d = plan[0].first().copied().unwrap_or_else(dev);
    let mut m = Model::new(mlp(4, 16, 2, false), adam(), d).unwrap();
    let data = Data {
        inputs: vec![x.to_device(d).unwrap()],
        target: Some(y.to_device(d).unwrap()),
    };
    let mut stats = Vec::new();
    for (e, devices) in plan.iter().enumerate() {
        let s = m
            .train_epoch(
                &data,
                &accumulating(batch, accumulate, devices.clone(), e + 1),
                &mut |_, _, _| {},
            )
            .unwrap();
        stats.push((s.loss, s.accuracy));
    }
    let params = m
        .parameters()
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, v(&t)))
        .collect();
    (stats, params)
}

fn assert_close(a: &Run, b: &Run) {
    assert_eq!(a.0.len(), b.0.len());
    for (x, y) in a.0.iter().zip(&b.0) {
        assert!((x.0 - y.0).abs() <= 1e-4, "losses {:?} vs {:?}", a.0, b.0);
        assert_eq!(x.1, y.1, "accuracies {:?} vs {:?}", a.0, b.0);
    }
    for ((ka, va), (kb, vb)) in a.1.iter().zip(&b.1) {
        assert_eq!(ka, kb);
        let worst = va
            .iter()
            .zip(vb)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-4, "{ka} differs by {worst}");
    }
}

#[test]
fn split_batches_train_as_one_device_does() {
    // 20 optimizer steps (5 epochs of 4 batches of 16), Adam
    let one = run(64, 16, &vec![vec![]; 5]);
    let two = run(64, 16, &vec![devices(2); 5]);
    assert_close(&one, &two);
    // three devices, slices of 5, 5 and 6 rows, and a last batch of 2 rows: one slice empty
    let one = run(66, 16, &vec![vec![]; 5]);
    let three = run(66, 16, &vec![devices(3); 5]);
    assert_close(&one, &three);
    // a last batch of one row: the model's own slice is empty
    let one = run(65, 16, &vec![vec![]; 3]);
    let two = run(65, 16, &vec![devices(2); 3]);
    assert_close(&one, &two);
    // a mutation check: a different batch size changes the losses
    let other = run(64, 32, &vec![devices(2); 5]);
    assert!((other.0[4].0 - run(64, 16, &vec![vec![]; 5]).0[4].0).abs() > 1e-4);
}

#[test]
fn accumulated_micro_batches_train_as_one_device_does() {
    // 4 epochs of 8 micro-batches of 8 rows, 2 to a step: 16 optimizer steps
    let one = run_with(64, 8, 2, &vec![vec![]; 4]);
    let two = run_with(64, 8, 2, &vec![devices(2); 4]);
    assert_close(&one, &two);
    // 3 to a step over 9 micro-batches, the last of one row (the model's own slice empty)
    let one = run_with(65, 8, 3, &vec![vec![]; 3]);
    let three = run_with(65, 8, 3, &vec![devices(3); 3]);
    assert_close(&one, &three);
    // a mutation check: without accumulation the losses differ
    let plain = run_with(64, 8, 1, &vec![devices(2); 4]);
    assert!((plain.0[3].0 - two.0[3].0).abs() > 1e-4);
}

#[test]
fn replicas_follow_the_model_between_calls() {
    // one device, then two, then one, then two again: the replicas are rebuilt from the
    // model's parameters and optimizer state where the model trained alone in between
    let alone = run(64, 16, &vec![vec![]; 4]);
    let two = devices(2);
    let mixed = run(64, 16, &[vec![], two.clone(), vec![], two]);
    assert_close(&alone, &mixed);
}

#[test]
fn unsupported_combinations_are_argument_errors() {
    let (x, y) = blobs(8);
    let d = dev();
    let data = Data {
        inputs: vec![x.to_device(d).unwrap()],
        target: Some(y.to_device(d).unwrap()),
    };
    let mut m = Model::new(mlp(4, 8, 2, false), adam(), d).unwrap();
    let mut with = |o: EpochOptions| m.train_epoch(&data, &o, &mut |_, _, _| {});
    let other_first = epoch(4, vec![Device::Vulkan(7), d], 1);
    assert!(
        matches!(with(other_first), Err(Error::Argument(m)) if m.contains("first of the devices"))
    );
    let too_many = epoch(4, vec![d; 65], 1);
    assert!(matches!(with(too_many), Err(Error::Argument(m)) if m.contains("at most 64")));
    // batch norm keeps per-device statistics: refused
    let mut spec = mlp(4, 8, 2, false);
    spec.layers.insert(
        2,
        LayerSpec {
            name: "bn".into(),
            op: LayerOp::BatchNorm {
                epsilon: 1e-5,
                momentum: 0.1,
                channel_index: -1,
            },
            inputs: vec![1],
        },
    );
    spec.layers[3].inputs = vec![2];
    spec.layers[4].inputs = vec![3];
    spec.output = 4;
    let mut bn = Model::new(spec, adam(), d).unwrap();
    let e = bn.train_epoch(&data, &epoch(4, devices(2), 1), &mut |_, _, _| {});
    assert!(matches!(e, Err(Error::Argument(m)) if m.contains("batch normalization")));
}

/// Sums across devices of many parameter sets (a model's worth) while another thread keeps
/// compiling new kernels on the first device: every sum has the right values and all of them
/// end (a watchdog turns a wait that never ends into a failure instead of a hung suite). On
/// GPUs a server that loads a new kernel waits for the device's running kernels, NCCL's
/// among them, which wait for the other participants' parts of the sum.
#[test]
fn sums_across_devices_finish_while_kernels_compile() {
    use ex_burn_core::{collective, DType, Op, Tensor};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let devs = devices(2);
    let (done, finished) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let compiling = {
        let stop = stop.clone();
        let d = devs[0];
        std::thread::spawn(move || {
            // element-wise maxima of a new shape each time: a new kernel each on GPUs
            let mut cols = 3;
            while !stop.load(Ordering::Relaxed) && cols < 400 {
                let a: Vec<f64> = (0..5 * cols).map(|i| (i % 7) as f64).collect();
                let x = Tensor::from_bytes(&bytes_of(&a, DType::F32), &[5, cols], DType::F32, d)
                    .unwrap();
                let op = Op::Binary {
                    op: Arith::Max,
                    out: None,
                };
                let m = ex_burn_core::program::eval(&op.into(), &[x.clone(), x], d).unwrap();
                assert_eq!(values_of(&m[0].to_bytes(None).unwrap(), DType::F32), a);
                cols += 1;
            }
        })
    };
    let summing = std::thread::spawn(move || {
        for round in 0..12 {
            let sets: Vec<Vec<Tensor>> = (0..150)
                .map(|k| {
                    devs.iter()
                        .enumerate()
                        .map(|(j, &d)| {
                            let x = [(round * 1000 + k) as f64, j as f64 + 0.5];
                            Tensor::from_bytes(&bytes_of(&x, DType::F32), &[2], DType::F32, d)
                                .unwrap()
                        })
                        .collect()
                })
                .collect();
            let sums = collective::all_reduce(sets).unwrap();
            for (k, set) in sums.iter().enumerate() {
                let want = [2.0 * (round * 1000 + k) as f64, 2.0];
                for s in set {
                    assert_eq!(values_of(&s.to_bytes(None).unwrap(), DType::F32), want);
                }
            }
        }
        let _ = done.send(());
    });
    let result = finished.recv_timeout(std::time::Duration::from_secs(240));
    stop.store(true, Ordering::Relaxed);
    assert!(
        result.is_ok(),
        "the sums did not finish within 240 s: {}",
        if summing.is_finished() {
            "the summing thread failed"
        } else {
            "still waiting (a deadlock)"
        }
    );
    summing.join().unwrap();
    compiling.join().unwrap();
}
