use super::common::*;
use ex_burn_core::program::Instr;
use ex_burn_core::{guard, DType, Op, Program};

#[test]
fn a_program_chains_ops_and_frees_intermediates() {
    // (x + y) * x, then sum
    let p = Program::new(
        2,
        vec![
            Instr {
                op: Step::Op(Op::Binary {
                    op: Arith::Add,
                    out: None,
                }),
                args: vec![0, 1],
            },
            Instr {
                op: Step::Op(Op::Binary {
                    op: Arith::Multiply,
                    out: None,
                }),
                args: vec![2, 0],
            },
            Instr {
                op: Step::Op(Op::Reduce {
                    kind: ReduceKind::Sum,
                    axes: None,
                    keep_axes: false,
                    out: None,
                }),
                args: vec![3],
            },
        ],
        vec![4, 3],
    )
    .unwrap();
    let out = p
        .run(vec![f(&[1., 2.], &[2]), f(&[3., 4.], &[2])], dev())
        .unwrap();
    check(&out[0], &[], DType::F32, &[16.]);
    check(&out[1], &[2], DType::F32, &[4., 12.]);
}

#[test]
fn invalid_programs_are_rejected_once() {
    let bad = Program::new(
        1,
        vec![Instr {
            op: Step::Op(Op::Unary(Unary::Exp)),
            args: vec![1],
        }],
        vec![1],
    );
    assert_eq!(bad.unwrap_err().kind(), "argument");
    let arity = Program::new(
        1,
        vec![Instr {
            op: Step::Op(Op::Binary {
                op: Arith::Add,
                out: None,
            }),
            args: vec![0],
        }],
        vec![1],
    );
    assert_eq!(arity.unwrap_err().kind(), "argument");
}

#[test]
fn single_op_program_equals_eager() {
    let p = Program::single(Op::Unary(Unary::Exp), 1).unwrap();
    let x = f(&[0., 1.], &[2]);
    assert_eq!(
        v(&p.run(vec![x.clone()], dev()).unwrap()[0]),
        v(&ev(Op::Unary(Unary::Exp), &[&x]))
    );
}

#[test]
fn guard_turns_panics_into_errors() {
    let e = guard::<()>(|| panic!("boom {}", 42)).unwrap_err();
    assert_eq!(e.kind(), "panic");
    assert!(e.to_string().contains("boom 42"));
    // integer division by zero inside the CPU backend is caught, not fatal (GPU kernels do
    // not trap on it)
    if dev() != ex_burn_core::Device::Cpu {
        return;
    }
    let r = guard(|| {
        ex_burn_core::eval(
            &Op::Binary {
                op: Arith::Quotient,
                out: None,
            },
            &[s(&[1.], &[1]), s(&[0.], &[1])],
            dev(),
        )
    });
    assert!(r.is_err());
}

#[test]
fn inputs_on_different_devices_are_refused() {
    // all builds have the CPU; this only exercises the device check when a GPU is present
    if dev() != ex_burn_core::Device::Cpu {
        let a = f(&[1.], &[1]);
        let b = a.to_device(ex_burn_core::Device::Cpu).unwrap();
        let e = ex_burn_core::eval(
            &Op::Binary {
                op: Arith::Add,
                out: None,
            },
            &[a, b],
            dev(),
        )
        .unwrap_err();
        assert_eq!(e.kind(), "device");
    }
}

/// Values that depend on no input (a causal mask from two `iota`s) are made once per device
/// and kept; what depends on an input is computed on every run.
#[test]
fn input_free_values_are_kept_and_inputs_are_read_on_every_run() {
    let ins = |op: Op, args: &[usize]| Instr {
        op: Step::Op(op),
        args: args.to_vec(),
    };
    let iota = |shape: Vec<usize>| Op::Iota {
        shape,
        dtype: DType::S32,
        axis: None,
    };
    let p = Program::new(
        1,
        vec![
            ins(iota(vec![4, 1]), &[]),                       // 1
            ins(iota(vec![1, 4]), &[]),                       // 2
            ins(Op::Compare(Compare::GreaterEqual), &[1, 2]), // 3: causal mask
            ins(
                Op::Full {
                    shape: vec![],
                    dtype: DType::F32,
                    value: ex_burn_core::Scalar::F(0.0),
                },
                &[],
            ), // 4
            ins(Op::Select { out: None }, &[3, 0, 4]),        // 5
        ],
        vec![5, 3],
    )
    .unwrap();
    let causal = [
        1., 0., 0., 0., 1., 1., 0., 0., 1., 1., 1., 0., 1., 1., 1., 1.,
    ];
    for run in 0..3 {
        let x: Vec<f64> = (0..16).map(|i| (i + run * 100) as f64).collect();
        let out = p.run(vec![f(&x, &[4, 4])], dev()).unwrap();
        let want: Vec<f64> = x.iter().zip(causal).map(|(v, m)| v * m).collect();
        check(&out[0], &[4, 4], DType::F32, &want);
        check(&out[1], &[4, 4], DType::U8, &causal);
    }
}
