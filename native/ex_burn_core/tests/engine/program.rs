use crate::common::*;
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
