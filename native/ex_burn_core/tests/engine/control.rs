//! Programs with constants, several results per instruction, and while/cond sub-programs.

use super::common::*;
use ex_burn_core::{DType, Op, Program, Scalar};

fn scalar(v: f64) -> Op {
    Op::Full {
        shape: vec![],
        dtype: DType::S64,
        value: Scalar::I(v as i64),
    }
}

fn add() -> Op {
    Op::Binary {
        op: Arith::Add,
        out: None,
    }
}

/// state (i, acc), invariant step: while i < 5 do (i + 1, acc + step)
fn counting_loop() -> Step {
    let cond = Program::new(
        3,
        vec![
            ins(scalar(5.), &[]),
            ins(Op::Compare(Compare::Less), &[0, 3]),
        ],
        vec![4],
    )
    .unwrap();
    let body = Program::new(
        3,
        vec![
            ins(scalar(1.), &[]),
            ins(add(), &[0, 3]),
            ins(add(), &[1, 2]),
        ],
        vec![4, 5],
    )
    .unwrap();
    Step::While {
        cond,
        body,
        state: 2,
    }
}

#[test]
fn while_runs_its_body_until_the_condition_fails() {
    let p = Program::new(3, vec![ins(counting_loop(), &[0, 1, 2])], vec![3, 4]).unwrap();
    let out = p
        .run(vec![s(&[0.], &[]), s(&[10.], &[]), s(&[3.], &[])], dev())
        .unwrap();
    check(&out[0], &[], DType::S64, &[5.]);
    check(&out[1], &[], DType::S64, &[25.]);
}

#[test]
fn while_whose_condition_is_false_returns_the_initial_state() {
    let p = Program::single(counting_loop(), 3).unwrap();
    let out = p
        .run(vec![s(&[7.], &[]), s(&[1.], &[]), s(&[3.], &[])], dev())
        .unwrap();
    check(&out[0], &[], DType::S64, &[7.]);
    check(&out[1], &[], DType::S64, &[1.]);
}

#[test]
fn cond_runs_the_first_true_branch_or_the_last() {
    let branch = |op: Op| Program::new(1, vec![ins(op, &[0])], vec![1]).unwrap();
    let cond = Step::Cond {
        branches: vec![
            branch(Op::Unary(Unary::Neg)),
            branch(Op::Unary(Unary::Abs)),
            branch(Op::Unary(Unary::Exp)),
        ],
    };
    let p = Program::single(cond, 3).unwrap();
    let x = f(&[-2.], &[]);
    let yes = t(&[1.], &[], DType::U8);
    let no = t(&[0.], &[], DType::U8);
    let run = |a: &ex_burn_core::Tensor, b: &ex_burn_core::Tensor| {
        v(&p.run(vec![a.clone(), b.clone(), x.clone()], dev()).unwrap()[0])
    };
    assert_eq!(run(&yes, &yes), vec![2.]);
    assert_eq!(run(&no, &yes), vec![2.]);
    close(
        &p.run(vec![no.clone(), no.clone(), x.clone()], dev())
            .unwrap()[0],
        &[(-2f64).exp()],
        1e-6,
    );
}

#[test]
fn multi_result_instructions_number_their_values_in_order() {
    // value 3 and 4 are the loop's two results; 5 = 3 * 4
    let p = Program::new(
        3,
        vec![
            ins(counting_loop(), &[0, 1, 2]),
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: None,
                },
                &[3, 4],
            ),
        ],
        vec![5],
    )
    .unwrap();
    let out = p
        .run(vec![s(&[3.], &[]), s(&[0.], &[]), s(&[1.], &[])], dev())
        .unwrap();
    check(&out[0], &[], DType::S64, &[10.]);
}

#[test]
fn constants_are_attached_once_and_read_like_inputs() {
    let raw = Program::new(1, vec![], vec![0]).unwrap();
    assert_eq!(raw.consts, 0);
    let mut p: Program = Program::new(
        1,
        vec![ins(
            Op::Binary {
                op: Arith::Add,
                out: None,
            },
            &[0, 0],
        )],
        vec![1],
    )
    .unwrap();
    p.consts = 1;
    p.instrs[0].args = vec![0, 1];
    p.outputs = vec![2];
    let p = p.with_constants(vec![f(&[10., 20.], &[2])]).unwrap();
    for _ in 0..2 {
        let out = p.run(vec![f(&[1., 2.], &[2])], dev()).unwrap();
        check(&out[0], &[2], DType::F32, &[11., 22.]);
    }
}

#[test]
fn malformed_control_flow_is_rejected_at_validation() {
    let body = Program::new(1, vec![], vec![0]).unwrap();
    let two_out = Program::new(1, vec![], vec![0, 0]).unwrap();
    let bad_while = Step::While {
        cond: two_out.clone(),
        body: body.clone(),
        state: 1,
    };
    assert_eq!(
        Program::single(bad_while, 1).unwrap_err().kind(),
        "argument"
    );
    let bad_cond = Step::Cond {
        branches: vec![body, two_out],
    };
    assert_eq!(Program::single(bad_cond, 2).unwrap_err().kind(), "argument");
    let missing = Program::new(1, vec![], vec![0]).unwrap();
    let mut needs_const = missing.clone();
    needs_const.consts = 1;
    assert_eq!(
        needs_const.with_constants(vec![]).unwrap_err().kind(),
        "argument"
    );
}

#[test]
fn a_non_scalar_predicate_is_an_error() {
    let branch = Program::new(1, vec![], vec![0]).unwrap();
    let cond = Step::Cond {
        branches: vec![branch.clone(), branch],
    };
    let p = Program::single(cond, 2).unwrap();
    let pred = t(&[1., 0.], &[2], DType::U8);
    let e = p.run(vec![pred, f(&[1.], &[])], dev()).unwrap_err();
    assert_eq!(e.kind(), "shape");
}

/// The counting loop with `hook 7` on (i, acc) at the start of every iteration.
fn hooked_loop() -> Step {
    let Step::While { cond, body, state } = counting_loop() else {
        unreachable!("counting_loop is a while")
    };
    let mut instrs = vec![ins(Step::Hook { id: 7, inputs: 2 }, &[0, 1])];
    instrs.extend(body.instrs.clone());
    Step::While {
        cond,
        body: Program::new(3, instrs, body.outputs.clone()).unwrap(),
        state,
    }
}

#[test]
fn hooks_log_their_values_per_iteration_and_only_in_taken_branches() {
    let branch = |hooked: bool| {
        let mut instrs = vec![ins(Op::Unary(Unary::Neg), &[0])];
        if hooked {
            instrs.push(ins(Step::Hook { id: 9, inputs: 1 }, &[1]));
        }
        Program::new(1, instrs, vec![1]).unwrap()
    };
    // 0..3: loop state and step; then hook 1 on the result, then cond (pred, arg)
    let p = Program::new(
        4,
        vec![
            ins(hooked_loop(), &[0, 1, 2]),
            ins(Step::Hook { id: 1, inputs: 1 }, &[5]),
            ins(
                Step::Cond {
                    branches: vec![branch(true), branch(false)],
                },
                &[3, 5],
            ),
        ],
        vec![6],
    )
    .unwrap();
    let logged = |pred: f64| {
        let inputs = vec![
            s(&[2.], &[]),
            s(&[0.], &[]),
            s(&[10.], &[]),
            t(&[pred], &[], DType::U8),
        ];
        let (out, log) = p.run_hooked(inputs, dev()).unwrap();
        assert_eq!(v(&out[0]), vec![-30.]);
        log.iter()
            .map(|(id, vals)| (*id, vals.iter().flat_map(v).collect::<Vec<f64>>()))
            .collect::<Vec<_>>()
    };
    let iterations = vec![(7, vec![2., 0.]), (7, vec![3., 10.]), (7, vec![4., 20.])];
    let mut want = iterations.clone();
    want.extend([(1, vec![30.]), (9, vec![-30.])]);
    assert_eq!(logged(1.), want);
    let mut want = iterations;
    want.push((1, vec![30.]));
    assert_eq!(logged(0.), want);
    // outside `run_hooked` a hook is an error, not a silent no-op
    let err = p
        .run(
            vec![
                s(&[2.], &[]),
                s(&[0.], &[]),
                s(&[10.], &[]),
                t(&[0.], &[], DType::U8),
            ],
            dev(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("hook"), "{err}");
}

/// Results written over an operand's buffer on CUDA, where nothing else holds it.
fn reused() -> u64 {
    ex_burn_core::kernels::counts().reused_buffers
}

/// A generation loop's cache: state (i, cache), invariants (n, update); each step writes the
/// update into layers 0 and 1 of the cache at position i (read on the device).
fn cache_loop() -> Step {
    let put = |layer: i64| Op::PutSlice {
        starts: vec![layer, 0, 0, 0],
        dynamic: vec![2],
    };
    let cond = Program::new(4, vec![ins(Op::Compare(Compare::Less), &[0, 2])], vec![4]).unwrap();
    let body = Program::new(
        4,
        vec![
            ins(put(0), &[1, 3, 0]), // 4: the body's own cache (in place after the first step)
            ins(put(1), &[4, 3, 0]), // 5: a value made here and read last here (in place)
            ins(scalar(1.), &[]),    // 6
            ins(add(), &[0, 6]),     // 7
        ],
        vec![7, 5],
    )
    .unwrap();
    Step::While {
        cond,
        body,
        state: 2,
    }
}

#[test]
fn a_loop_writes_its_cache_in_place_and_never_the_callers_tensor() {
    // (more elements than the loop interpreter of small tensors takes: the device runs it)
    let (layers, heads, max, d, n) = (3, 2, 64, 16, 5);
    let start: Vec<f64> = (0..layers * heads * max * d).map(|k| -(k as f64)).collect();
    let cache = f(&start, &[layers, heads, max, d]);
    let update: Vec<f64> = (0..heads * d).map(|k| 100.0 + k as f64).collect();
    let upd = f(&update, &[1, heads, 1, d]);
    // inputs: i, n, cache, update; the loop's arguments: state (i, cache), then (n, update)
    let p = Program::new(4, vec![ins(cache_loop(), &[0, 2, 1, 3])], vec![4, 5]).unwrap();
    let before = reused();
    let out = p
        .run(
            vec![s(&[0.], &[]), s(&[n as f64], &[]), cache.clone(), upd],
            dev(),
        )
        .unwrap();
    let written = reused() - before;
    check(&out[0], &[], DType::S64, &[n as f64]);
    let mut want = start.clone();
    for layer in 0..2 {
        for h in 0..heads {
            for pos in 0..n {
                for c in 0..d {
                    want[((layer * heads + h) * max + pos) * d + c] = update[h * d + c];
                }
            }
        }
    }
    assert_eq!(v(&out[1]), want);
    assert_eq!(v(&cache), start, "the caller's cache is unchanged");
    if matches!(dev(), ex_burn_core::Device::Cuda(_)) {
        // every write but the first step's into the caller's cache
        assert_eq!(written, 2 * n as u64 - 1, "writes in place");
    }
}

#[test]
fn put_slice_leaves_a_target_read_later_or_held_elsewhere_alone() {
    // rows of 64 elements: buffers without padding between rows
    let x: Vec<f64> = (0..512).map(|k| k as f64 * 0.5 - 3.0).collect();
    let (xt, upd) = (f(&x, &[8, 64]), f(&[9., 8., 7.], &[1, 3]));
    let neg: Vec<f64> = x.iter().map(|a| -a).collect();
    let mut put = neg.clone();
    put[64 + 2..64 + 5].copy_from_slice(&[9., 8., 7.]);
    let put_slice = || {
        ins(
            Op::PutSlice {
                starts: vec![1, 2],
                dynamic: vec![],
            },
            &[2, 1],
        )
    };
    let neg_op = || ins(Op::Unary(Unary::Neg), &[0]); // 2: a value of the program's own
    let reshape = || {
        ins(
            Op::Reshape {
                shape: vec![16, 32],
            },
            &[2],
        )
    };
    for (instrs, outputs, in_place) in [
        // the target is only read there: written in place on CUDA
        (vec![neg_op(), put_slice()], vec![3], 1),
        // the target is also a result
        (vec![neg_op(), put_slice()], vec![3, 2], 0),
        // a view of the target (its buffer) is read after it
        (vec![neg_op(), reshape(), put_slice()], vec![4, 3], 0),
    ] {
        let p = Program::new(2, instrs, outputs.clone()).unwrap();
        let before = reused();
        let out = p.run(vec![xt.clone(), upd.clone()], dev()).unwrap();
        let written = reused() - before;
        assert_eq!(v(&out[0]), put, "outputs {outputs:?}");
        if let Some(other) = out.get(1) {
            assert_eq!(v(other), neg, "outputs {outputs:?}: the target's value");
        }
        assert_eq!(v(&xt), x, "the input is unchanged");
        if matches!(dev(), ex_burn_core::Device::Cuda(_)) {
            assert_eq!(written, in_place, "outputs {outputs:?}: writes in place");
        }
    }
}
