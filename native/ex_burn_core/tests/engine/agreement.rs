//! On a GPU run (`EX_BURN_TEST_DEVICE=cuda`): every op family on random inputs agrees with the
//! CPU (flex) backend within float tolerance, and the f32 matmul precision is reported.

use super::common::*;
use ex_burn_core::op::{Precision, TieBreak};
use ex_burn_core::{eval, DType, Device, Op, Tensor};

fn rand(shape: &[usize], seed: u64, lo: f64, hi: f64) -> Tensor {
    let op = Op::RandomUniform {
        shape: shape.to_vec(),
        dtype: DType::F32,
        min: lo,
        max: hi,
        seed,
    };
    eval(&op, &[], dev()).unwrap().remove(0)
}

fn on_both(op: &Op, inputs: &[Tensor]) -> (Vec<f64>, Vec<f64>) {
    let gpu = eval(op, inputs, dev())
        .unwrap_or_else(|e| panic!("{op:?} on {:?}: {e}", dev()))
        .remove(0);
    let cpu_in: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(Device::Cpu).unwrap())
        .collect();
    let cpu = eval(op, &cpu_in, Device::Cpu).unwrap().remove(0);
    assert_eq!(gpu.shape(), cpu.shape(), "{op:?}");
    assert_eq!(gpu.dtype(), cpu.dtype(), "{op:?}");
    (v(&gpu), v(&cpu))
}

fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-30)).sqrt()
}

#[test]
fn gpu_agrees_with_cpu_on_every_family() {
    if dev() == Device::Cpu {
        return;
    }
    let x = rand(&[8, 16], 1, -2.0, 2.0);
    let y = rand(&[8, 16], 2, -2.0, 2.0);
    let pos = rand(&[8, 16], 3, 0.1, 3.0);
    let unit = rand(&[8, 16], 4, -0.9, 0.9);
    let img = rand(&[2, 3, 9, 9], 5, -1.0, 1.0);
    let ker = rand(&[4, 3, 3, 3], 6, -1.0, 1.0);
    let idx = eval(
        &Op::Iota {
            shape: vec![5, 1],
            dtype: DType::S64,
            axis: Some(0),
        },
        &[],
        dev(),
    )
    .unwrap()
    .remove(0);
    let cases: Vec<(Op, Vec<Tensor>, f64)> = vec![
        (
            Op::Binary {
                op: Arith::Add,
                out: None,
            },
            vec![x.clone(), y.clone()],
            1e-6,
        ),
        (
            Op::Binary {
                op: Arith::Multiply,
                out: None,
            },
            vec![x.clone(), y.clone()],
            1e-6,
        ),
        (
            Op::Binary {
                op: Arith::Divide,
                out: None,
            },
            vec![x.clone(), pos.clone()],
            1e-6,
        ),
        (
            Op::Binary {
                op: Arith::Remainder,
                out: None,
            },
            vec![x.clone(), pos.clone()],
            1e-5,
        ),
        (
            Op::Binary {
                op: Arith::Pow,
                out: None,
            },
            vec![pos.clone(), y.clone()],
            1e-5,
        ),
        (
            Op::Binary {
                op: Arith::Max,
                out: None,
            },
            vec![x.clone(), y.clone()],
            0.0,
        ),
        (Op::Unary(Unary::Exp), vec![x.clone()], 1e-6),
        (Op::Unary(Unary::Log), vec![pos.clone()], 1e-6),
        (Op::Unary(Unary::Tanh), vec![x.clone()], 1e-6),
        (Op::Unary(Unary::Erf), vec![x.clone()], 1e-5),
        (Op::Unary(Unary::ErfInv), vec![unit.clone()], 1e-4),
        (Op::Unary(Unary::Round), vec![x.clone()], 0.0),
        (Op::Unary(Unary::Sigmoid), vec![x.clone()], 1e-6),
        (
            Op::Reduce {
                kind: ReduceKind::Sum,
                axes: Some(vec![1]),
                keep_axes: false,
                out: None,
            },
            vec![x.clone()],
            1e-5,
        ),
        (
            Op::Reduce {
                kind: ReduceKind::Max,
                axes: Some(vec![0]),
                keep_axes: true,
                out: None,
            },
            vec![x.clone()],
            0.0,
        ),
        (
            Op::Arg {
                kind: ArgKind::Max,
                axis: Some(1),
                keep_axis: false,
                tie_break: TieBreak::Low,
                out: None,
            },
            vec![x.clone()],
            0.0,
        ),
        (Op::Softmax { axis: 1 }, vec![x.clone()], 1e-5),
        (
            Op::Cumulative {
                kind: CumulativeKind::Sum,
                axis: 1,
                reverse: true,
            },
            vec![x.clone()],
            1e-5,
        ),
        (
            Op::Argsort {
                axis: 1,
                descending: true,
                out: None,
            },
            vec![x.clone()],
            0.0,
        ),
        (Op::Transpose { axes: None }, vec![x.clone()], 0.0),
        (
            Op::Slice {
                starts: vec![1, 2],
                lengths: vec![5, 9],
                strides: Some(vec![2, 3]),
                dynamic: vec![],
            },
            vec![x.clone()],
            0.0,
        ),
        (
            Op::Pad {
                config: vec![(1, -2, 1), (0, 1, 0)],
            },
            vec![x.clone(), f(&[0.5], &[])],
            0.0,
        ),
        (
            Op::Gather { axes: vec![0] },
            vec![x.clone(), idx.clone()],
            0.0,
        ),
        (
            Op::IndexedAdd {
                axes: vec![0],
                out: None,
            },
            vec![x.clone(), idx.clone(), rand(&[5, 16], 7, 0.0, 1.0)],
            1e-6,
        ),
        (
            contraction(1, 1, Default::default()),
            vec![x.clone(), y.clone()],
            1e-2,
        ),
        (
            Op::Conv {
                strides: Some(vec![2, 1]),
                padding: Some(vec![(1, 0), (1, 1)]),
                input_dilation: None,
                kernel_dilation: Some(vec![1, 2]),
                feature_group_size: 1,
                batch_group_size: 1,
                input_permutation: None,
                kernel_permutation: None,
                output_permutation: None,
                out: None,
                precision: Default::default(),
            },
            vec![img.clone(), ker.clone()],
            1e-2,
        ),
        (
            Op::Window {
                kind: WindowKind::Max,
                geometry: Geometry {
                    window_dims: vec![1, 1, 3, 3],
                    strides: Some(vec![1, 1, 2, 2]),
                    padding: None,
                    window_dilations: None,
                },
            },
            vec![img.clone()],
            0.0,
        ),
    ];
    for (op, inputs, tol) in cases {
        let (g, c) = on_both(&op, &inputs);
        let e = rel_err(&g, &c);
        println!("agreement {:<16} rel err {e:.2e}", op.name());
        assert!(e <= tol.max(1e-7), "{op:?}: relative error {e} > {tol}");
    }
}

#[test]
fn f32_matmul_precision_is_reported() {
    if dev() == Device::Cpu {
        return;
    }
    let n = 1024;
    let a = rand(&[n, n], 11, -1.0, 1.0);
    let b = rand(&[n, n], 12, -1.0, 1.0);
    let dot = |dtype, precision| Op::Dot {
        contract_a: vec![1],
        batch_a: vec![],
        contract_b: vec![0],
        batch_b: vec![],
        out: Some(dtype),
        precision,
    };
    let (ac, bc) = (
        a.to_device(Device::Cpu).unwrap(),
        b.to_device(Device::Cpu).unwrap(),
    );
    let reference = v(&eval(
        &dot(DType::F64, Precision::Default),
        &[ac.clone(), bc.clone()],
        Device::Cpu,
    )
    .unwrap()[0]);
    let gpu = v(&eval(
        &dot(DType::F32, Precision::Default),
        &[a.clone(), b.clone()],
        dev(),
    )
    .unwrap()[0]);
    let gpu_hi = v(&eval(
        &dot(DType::F32, Precision::Highest),
        &[a.clone(), b.clone()],
        dev(),
    )
    .unwrap()[0]);
    let cpu = v(&eval(&dot(DType::F32, Precision::Default), &[ac, bc], Device::Cpu).unwrap()[0]);
    let (e, e_hi, e_cpu) = (
        rel_err(&gpu, &reference),
        rel_err(&gpu_hi, &reference),
        rel_err(&cpu, &reference),
    );
    println!("matmul precision {n}x{n} f32 vs f64 reference: gpu default {e:.2e}, gpu highest {e_hi:.2e}, cpu {e_cpu:.2e}");
    assert!(e < 1e-2 && e_hi < 1e-5 && e_cpu < 1e-5);
}

/// Kernels compiled for CUDA are kept in ExBurn's on-disk cache (the CUDA crate's `cache`),
/// so that the next process does not compile them again.
#[test]
fn cuda_kernels_are_cached_on_disk() {
    if dev() == Device::Cpu {
        return;
    }
    let Some(dir) = crate::device_kernels::cache_directory() else {
        return;
    };
    let x = f(&[0.5, 2.0], &[2]);
    let _ = v(&ev(Op::Unary(Unary::Exp), &[&x]));
    fn count(d: &std::path::Path) -> usize {
        std::fs::read_dir(d).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        count(&p)
                    } else {
                        1
                    }
                })
                .sum()
        })
    }
    let files = count(&dir);
    println!("cuda kernel cache {}: {files} files", dir.display());
    assert!(files > 0, "no compiled kernel in {}", dir.display());
}

/// With `EX_BURN_CUDA_MEMORY=driver` (the default) the pages that work left free go back to
/// the driver's pool (`memory::after_work`, which the NIFs call after every GPU op, program
/// run and training step): CubeCL's pools keep about what is alive.
#[test]
fn freed_cuda_buffers_go_back_to_the_driver() {
    if dev() == Device::Cpu || crate::device_kernels::memory_mode() != Some("driver") {
        return;
    }
    let n = 1 << 25; // 128 MiB of f32
    let x = ev(
        Op::Full {
            shape: vec![n],
            dtype: DType::F32,
            value: ex_burn_core::Scalar::F(0.5),
        },
        &[],
    );
    let y = ev(Op::Unary(Unary::Exp), &[&x]);
    let (_, before) = ex_burn_core::memory::pools(dev()).expect("pools");
    drop((x, y));
    ex_burn_core::memory::after_work(dev());
    let (in_use, reserved) = ex_burn_core::memory::pools(dev()).expect("pools");
    println!("pools: {before} reserved before, {reserved} after ({in_use} in use)");
    // other tests run beside this one: what they leave free between the two calls stays
    assert!(
        reserved - in_use < 192 << 20,
        "{reserved} bytes held, {in_use} in use"
    );
}
