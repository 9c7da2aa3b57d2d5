//! Generated element-wise programs over NCHW shapes with per-channel operands, broadcasts and
//! reshapes between their maps (the shapes of a batch norm and its gradient): on devices whose
//! kernels fuse, runs go on through views, which must read every element where op-by-op
//! evaluation does. Element-wise maps are computed as op by op on every device, so each
//! program's outputs must equal op-by-op evaluation's bit for bit (any NaN for a NaN). The
//! programs mix views the fused kernels read (a per-channel value reshaped or broadcast onto
//! its axis, a value of the run broadcast over the whole shape, unit axes added in front) with
//! one they must refuse: a value of the run whose own shape lines up with the last axis,
//! broadcast onto the channel axis (the last axis is as long as the channel axis in some
//! shapes, so reading it unmoved would give wrong numbers without an error).
//!
//! `EX_BURN_VIEW_PROGRAMS=N` runs N programs instead of the default.

use super::common::*;
use ex_burn_core::{Op, Program, Tensor};

/// Nx's broadcast of two shapes (aligned on the right), if they broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = (i + a.len()).checked_sub(r).map_or(1, |j| a[j]);
            let y = (i + b.len()).checked_sub(r).map_or(1, |j| b[j]);
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// Values with NaN, infinities, signed zeros and ties among ordinary ones.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5];
    (0..n)
        .map(|i| {
            let h = (i as u64 + 1)
                .wrapping_mul(seed | 1)
                .wrapping_mul(0x9E37_79B9)
                >> 7;
            if h.is_multiple_of(23) {
                special[(h / 23 % special.len() as u64) as usize]
            } else {
                (h % 2001) as f64 / 250.0 - 4.0
            }
        })
        .collect()
}

/// A program of `seed` and its inputs: `[n, c, h, w]` tensors, a per-channel vector `[c]`, a
/// per-channel `[1, c, 1, 1]` and a row `[w]`.
fn generate(seed: u64) -> (Program, Vec<Tensor>) {
    let mut g = Gen(seed);
    let (n, c, h) = (2 + g.below(2), 3 + 2 * g.below(2), 4 + 3 * g.below(2));
    // the last axis as long as the channels' in half the programs
    let w = if g.below(2) == 0 { c } else { 6 };
    let full = vec![n, c, h, w];
    let shapes = [
        full.clone(),
        full.clone(),
        vec![c],
        vec![1, c, 1, 1],
        vec![w],
    ];
    let inputs: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| f(&values(s.iter().product(), seed * 7 + k as u64), s))
        .collect();
    let mut shape_of: Vec<Vec<usize>> = shapes.to_vec();
    let mut instrs = Vec::new();
    let arith = [
        Arith::Add,
        Arith::Subtract,
        Arith::Multiply,
        Arith::Divide,
        Arith::Max,
        Arith::Min,
    ];
    let steps = 4 + g.below(9);
    while instrs.len() < steps {
        let count = shape_of.len();
        let pick = |g: &mut Gen| g.below(count);
        let (op, args, out): (Op, Vec<usize>, Vec<usize>) = match g.below(10) {
            // a binary map of two values that broadcast together
            0..=3 => {
                let (a, b) = (pick(&mut g), pick(&mut g));
                let Some(s) = broadcast(&shape_of[a], &shape_of[b]) else {
                    continue;
                };
                let op = Op::Binary {
                    op: arith[g.below(arith.len())],
                    out: None,
                };
                (op, vec![a, b], s)
            }
            // a unary map
            4 => {
                let a = pick(&mut g);
                let u = [Unary::Neg, Unary::Abs, Unary::Exp][g.below(3)];
                (Op::Unary(u), vec![a], shape_of[a].clone())
            }
            // a per-channel vector reshaped or broadcast onto the channel axis (or over all)
            5 | 6 => {
                let vectors: Vec<usize> = (0..count).filter(|&v| shape_of[v] == [c]).collect();
                let a = vectors[g.below(vectors.len())];
                match g.below(3) {
                    0 => (
                        Op::Reshape {
                            shape: vec![1, c, 1, 1],
                        },
                        vec![a],
                        vec![1, c, 1, 1],
                    ),
                    1 => (
                        Op::Broadcast {
                            shape: vec![1, c, 1, 1],
                            axes: Some(vec![1]),
                        },
                        vec![a],
                        vec![1, c, 1, 1],
                    ),
                    _ => (
                        Op::Broadcast {
                            shape: full.clone(),
                            axes: Some(vec![1]),
                        },
                        vec![a],
                        full.clone(),
                    ),
                }
            }
            // a per-channel value broadcast over the whole shape with all its axes
            7 => {
                let small: Vec<usize> = (0..count)
                    .filter(|&v| shape_of[v] == [1, c, 1, 1])
                    .collect();
                let a = small[g.below(small.len())];
                let op = Op::Broadcast {
                    shape: full.clone(),
                    axes: Some(vec![0, 1, 2, 3]),
                };
                (op, vec![a], full.clone())
            }
            // a new per-channel vector computed from one (a value of the run of shape [c])
            8 => {
                let vectors: Vec<usize> = (0..count).filter(|&v| shape_of[v] == [c]).collect();
                let (a, b) = (
                    vectors[g.below(vectors.len())],
                    vectors[g.below(vectors.len())],
                );
                let op = Op::Binary {
                    op: arith[g.below(arith.len())],
                    out: None,
                };
                (op, vec![a, b], vec![c])
            }
            // a leading unit axis added to a whole-shaped value
            _ => {
                let wide: Vec<usize> = (0..count).filter(|&v| shape_of[v] == full).collect();
                let a = wide[g.below(wide.len())];
                let mut s = vec![1];
                s.extend_from_slice(&full);
                (Op::Reshape { shape: s.clone() }, vec![a], s)
            }
        };
        instrs.push(ins(op, &args));
        shape_of.push(out);
    }
    // the last value and, at times, an earlier one (a value read after a run)
    let last = shape_of.len() - 1;
    let mut outputs = vec![last];
    let earlier = shapes.len() + g.below(instrs.len());
    if earlier != last {
        outputs.push(earlier);
    }
    (
        Program::new(shapes.len(), instrs, outputs).expect("a valid program"),
        inputs,
    )
}

#[test]
fn generated_runs_through_views_equal_op_by_op_evaluation() {
    let count = std::env::var("EX_BURN_VIEW_PROGRAMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300u64);
    let fused_before =
        ex_burn_core::kernels::counts().fused_launches + ex_burn_core::program::loop_runs();
    for seed in 1..=count {
        let (prog, inputs) = generate(seed);
        let got = prog.run(inputs.clone(), dev()).expect("the program runs");
        let want = op_by_op(&prog, &inputs);
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.shape(), b.shape(), "seed {seed} output {k}");
            for (i, (x, y)) in v(a).iter().zip(v(b)).enumerate() {
                assert!(
                    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                    "seed {seed} output {k} element {i}: {x} vs {y}; {:?}",
                    prog.instrs
                );
            }
        }
    }
    // where the kernels fuse, some of the programs ran fused
    if kernels_fuse() {
        let fused =
            ex_burn_core::kernels::counts().fused_launches + ex_burn_core::program::loop_runs();
        assert!(fused > fused_before, "no program ran fused");
    }
}
