//! `while` loops over small tensors, which the CPU runs whole with its interpreter: results
//! bit-identical to running the condition and body as programs, one iteration at a time.

use super::common::*;
use ex_burn_core::program::{small_loops_run, Instr};
use ex_burn_core::{DType, Op, Program, Tensor};

fn bin(op: Arith, out: Option<DType>) -> Op {
    Op::Binary { op, out }
}

fn un(u: Unary) -> Op {
    Op::Unary(u)
}

/// The loop's results, and the same loop driven by hand: the condition and body run as
/// programs (op by op), one iteration at a time.
fn both(cond: &Program, body: &Program, state: usize, inputs: &[Tensor]) -> [Vec<Tensor>; 2] {
    let step = Step::While {
        cond: cond.clone(),
        body: body.clone(),
        state,
    };
    let looped = Program::single(step, inputs.len())
        .unwrap()
        .run(inputs.to_vec(), dev())
        .unwrap();
    let mut st: Vec<Tensor> = inputs[..state].to_vec();
    let inv = &inputs[state..];
    loop {
        let args: Vec<Tensor> = st.iter().chain(inv).cloned().collect();
        let p = cond.run(args.clone(), dev()).unwrap();
        if v(&p[0])[0] == 0.0 {
            break;
        }
        st = body.run(args, dev()).unwrap();
    }
    [looped, st]
}

/// Asserts equal types, shapes and bytes.
fn same(a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!((x.dtype(), x.shape()), (y.dtype(), y.shape()));
        assert_eq!(
            x.to_bytes(None).unwrap(),
            y.to_bytes(None).unwrap(),
            "{x:?} vs {y:?}"
        );
    }
}

/// Runs `f` and says whether it ran a loop with the interpreter.
fn interpreted(f: impl FnOnce()) -> bool {
    let before = small_loops_run();
    f();
    small_loops_run() > before
}

/// `i < n` over state (i, ...) with `n` the last input.
fn counter_cond(inputs: usize) -> Program {
    Program::new(
        inputs,
        vec![ins(Op::Compare(Compare::Less), &[0, inputs - 1])],
        vec![inputs],
    )
    .unwrap()
}

/// The body of `bench/while_small.exs` as the compiler lowers it: state (i: s32, x: f32[16]),
/// invariants (v: f32[16], n: s32).
fn bench_body() -> Program {
    let f32 = Some(DType::F32);
    let c = |x: f64| lit(x, DType::F32);
    let i: Vec<Instr> = vec![
        ins(lit(1., DType::S32), &[]),                   // 4
        ins(bin(Arith::Add, Some(DType::S32)), &[4, 0]), // 5: i + 1
        ins(c(0.99), &[]),                               // 6
        ins(c(0.1), &[]),                                // 7
        ins(c(0.5), &[]),                                // 8
        ins(c(1.0001), &[]),                             // 9
        ins(bin(Arith::Multiply, f32), &[9, 1]),         // 10
        ins(bin(Arith::Add, f32), &[10, 2]),             // 11: a
        ins(un(Unary::Sin), &[11]),                      // 12
        ins(bin(Arith::Multiply, f32), &[12, 8]),        // 13: b
        ins(bin(Arith::Subtract, f32), &[13, 1]),        // 14
        ins(un(Unary::Abs), &[14]),                      // 15
        ins(bin(Arith::Add, f32), &[7, 15]),             // 16: c
        ins(un(Unary::Sqrt), &[16]),                     // 17
        ins(un(Unary::Neg), &[16]),                      // 18
        ins(un(Unary::Exp), &[18]),                      // 19
        ins(bin(Arith::Multiply, f32), &[17, 19]),       // 20: d
        ins(c(0.0), &[]),                                // 21
        ins(bin(Arith::Max, f32), &[20, 21]),            // 22
        ins(c(1.0), &[]),                                // 23
        ins(bin(Arith::Min, f32), &[11, 23]),            // 24
        ins(bin(Arith::Add, f32), &[22, 24]),            // 25: e
        ins(un(Unary::Abs), &[25]),                      // 26
        ins(bin(Arith::Add, f32), &[23, 26]),            // 27
        ins(bin(Arith::Divide, f32), &[25, 27]),         // 28: f
        ins(
            Op::Reduce {
                kind: ReduceKind::Sum,
                axes: None,
                keep_axes: false,
                out: f32,
            },
            &[28],
        ), // 29
        ins(lit(16., DType::S32), &[]),                  // 30
        ins(bin(Arith::Divide, f32), &[29, 30]),         // 31: mean
        ins(bin(Arith::Subtract, f32), &[28, 31]),       // 32: g
        ins(bin(Arith::Multiply, f32), &[6, 32]),        // 33
        ins(c(0.01), &[]),                               // 34
        ins(bin(Arith::Multiply, f32), &[34, 1]),        // 35
        ins(bin(Arith::Add, f32), &[33, 35]),            // 36
    ];
    Program::new(4, i, vec![5, 36]).unwrap()
}

#[test]
fn the_benchmark_loop_gives_the_bits_of_its_body_run_op_by_op() {
    let x: Vec<f64> = (0..16).map(|k| k as f64 / 16.0).collect();
    let mut vv: Vec<f64> = (1..=16).map(|k| k as f64 / 100.0).collect();
    vv[3] = -0.75;
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        f(&x, &[16]),
        f(&vv, &[16]),
        t(&[40.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(4), &bench_body(), 2, &inputs)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    check(&looped[0], &[], DType::S32, &[40.]);
    assert_eq!(ran, dev().is_host(), "the CPU interprets the loop");
}

/// Special values of a [2, 4] state: NaN, infinities, signed zeros, extremes.
const SPECIAL: [f64; 8] = [
    f64::NAN,
    f64::INFINITY,
    -0.0,
    1e30,
    -1e-30,
    2.5,
    f64::NEG_INFINITY,
    0.0,
];

#[test]
fn nan_and_infinity_flow_through_the_loop_as_through_the_ops() {
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        f(&SPECIAL, &[2, 4]),
        f(&[0.5; 8], &[2, 4]),
        t(&[3.], &[], DType::S32),
    ];
    // the same body on another shape: sums and broadcasts of [2, 4]
    let mut body = bench_body();
    if let Step::Op(Op::Full { value, .. }) = &mut body.instrs[26].op {
        *value = ex_burn_core::Scalar::I(8);
    }
    let [looped, by_hand] = both(&counter_cond(4), &body, 2, &inputs);
    same(&looped, &by_hand);
}

/// Past its first iterations the CPU runs the loop's runs of simple maps as machine code:
/// still the bits of the body run op by op, NaN and infinities included, on values of 8, 12
/// and 16 elements.
#[test]
fn long_loops_give_the_bits_of_their_body_run_op_by_op() {
    for (shape, x) in [
        (
            vec![16],
            (0..16).map(|k| k as f64 / 16.0 - 0.4).collect::<Vec<f64>>(),
        ),
        (vec![2, 4], SPECIAL.to_vec()),
        (
            vec![3, 4],
            (0..12).map(|k| (k as f64 * 0.7).sin() * 3.0).collect(),
        ),
    ] {
        let n: usize = shape.iter().product();
        let mut body = bench_body();
        if let Step::Op(Op::Full { value, .. }) = &mut body.instrs[26].op {
            *value = ex_burn_core::Scalar::I(n as i64);
        }
        let inputs = vec![
            t(&[0.], &[], DType::S32),
            f(&x, &shape),
            f(
                &(0..n).map(|k| k as f64 / 50.0 - 0.1).collect::<Vec<_>>(),
                &shape,
            ),
            t(&[300.], &[], DType::S32),
        ];
        let [looped, by_hand] = both(&counter_cond(4), &body, 2, &inputs);
        same(&looped, &by_hand);
    }
}

/// State (i: s32, a: u8[2,3], b: s64[2,3], m: f32[2,3]); invariants (k: s16[3], n: s32).
fn integer_body() -> Program {
    let s32 = Some(DType::S32);
    let i = vec![
        ins(lit(1., DType::S32), &[]),                           // 6
        ins(bin(Arith::Add, s32), &[0, 6]),                      // 7: i + 1
        ins(lit(77., DType::U8), &[]),                           // 8
        ins(bin(Arith::Multiply, Some(DType::U8)), &[1, 8]),     // 9: a * 77 (wraps)
        ins(bin(Arith::Add, Some(DType::U8)), &[9, 6]),          // 10: + 1
        ins(bin(Arith::Multiply, Some(DType::S64)), &[2, 2]),    // 11: b * b
        ins(bin(Arith::BitwiseXor, Some(DType::S64)), &[11, 4]), // 12: ^ k
        ins(lit(-3., DType::S64), &[]),                          // 13
        ins(bin(Arith::Max, Some(DType::S64)), &[12, 13]),       // 14
        ins(Op::Compare(Compare::Greater), &[10, 4]),            // 15: a > k
        ins(Op::Select { out: None }, &[15, 14, 2]),             // 16: s64
        ins(Op::AsType { dtype: DType::F32 }, &[16]),            // 17
        ins(un(Unary::Neg), &[1]),                               // 18: -a (u8 wraps)
        ins(Op::Logical(Logical::Xor), &[15, 18]),               // 19
        ins(Op::Select { out: None }, &[19, 17, 3]),             // 20: f32
        ins(un(Unary::Sqrt), &[4]),                              // 21: float fn of s16
        ins(bin(Arith::Add, Some(DType::F32)), &[20, 21]),       // 22
        ins(
            Op::Reduce {
                kind: ReduceKind::Sum,
                axes: Some(vec![0, 1]),
                keep_axes: true,
                out: Some(DType::S64),
            },
            &[10],
        ), // 23: [1, 1]
        ins(bin(Arith::Subtract, Some(DType::S64)), &[16, 23]),  // 24
        ins(Op::AsType { dtype: DType::S16 }, &[24]),            // 25: wraps to s16
        ins(Op::AsType { dtype: DType::S64 }, &[25]),            // 26
        ins(
            Op::Reduce {
                kind: ReduceKind::Any,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[19],
        ), // 27: u8
        ins(bin(Arith::Add, Some(DType::F32)), &[22, 27]),       // 28
        ins(un(Unary::Abs), &[26]),                              // 29
    ];
    Program::new(6, i, vec![7, 10, 29, 28]).unwrap()
}

/// The inputs of `integer_body`: state (i: s32, a: u8, b: s64, x: f32), invariants (k: s16,
/// n: s32).
fn integer_inputs() -> Vec<Tensor> {
    vec![
        t(&[0.], &[], DType::S32),
        t(&[0., 1., 2., 200., 255., 9.], &[2, 3], DType::U8),
        t(&[3., -2., 1e9, -7., 0., 5.], &[2, 3], DType::S64),
        f(&[0.5, -1.5, 2.0, 1e-3, 7.0, -0.0], &[2, 3]),
        t(&[-4., 100., 3.], &[3], DType::S16),
        t(&[6.], &[], DType::S32),
    ]
}

#[test]
fn integers_wrap_compare_select_and_cast_as_the_ops_do() {
    let inputs = integer_inputs();
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(6), &integer_body(), 4, &inputs)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    assert_eq!(ran, dev().is_host());
}

#[test]
fn loops_with_other_ops_or_large_tensors_run_op_by_op() {
    // a reduction over one axis is not for the interpreter
    let body = Program::new(
        3,
        vec![
            ins(lit(1., DType::S32), &[]),
            ins(bin(Arith::Add, Some(DType::S32)), &[0, 3]),
            ins(reduce_op(ReduceKind::Sum, &[0], true, None), &[1]),
            ins(bin(Arith::Add, None), &[1, 5]),
        ],
        vec![4, 6],
    )
    .unwrap();
    let small = vec![
        t(&[0.], &[], DType::S32),
        f(&[1., 2., 3., 4.], &[2, 2]),
        t(&[3.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(3), &body, 2, &small)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    check(&looped[1], &[2, 2], DType::F32, &[53., 80., 55., 82.]);
    assert!(!ran);
    // an element-wise body over 5,000 elements
    let body = Program::new(
        3,
        vec![
            ins(lit(1., DType::S32), &[]),
            ins(bin(Arith::Add, Some(DType::S32)), &[0, 3]),
            ins(un(Unary::Exp), &[1]),
        ],
        vec![4, 5],
    )
    .unwrap();
    let large = vec![
        t(&[0.], &[], DType::S32),
        f(&vec![0.001; 5000], &[5000]),
        t(&[2.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(3), &body, 2, &large)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    assert!(!ran);
}

#[test]
fn a_loop_that_never_runs_returns_its_state() {
    let inputs = vec![
        t(&[5.], &[], DType::S32),
        f(&[1.; 16], &[16]),
        f(&[2.; 16], &[16]),
        t(&[5.], &[], DType::S32),
    ];
    let [looped, by_hand] = both(&counter_cond(4), &bench_body(), 2, &inputs);
    same(&looped, &by_hand);
    check(&looped[1], &[16], DType::F32, &[1.; 16]);
}

#[test]
fn results_that_are_other_state_values_swap_as_they_should() {
    // state (i, a, b, c) -> (i + 1, b, a + b, c + c): Fibonacci numbers beside doublings
    let body = Program::new(
        5,
        vec![
            ins(lit(1., DType::S32), &[]),
            ins(bin(Arith::Add, Some(DType::S32)), &[0, 5]),
            ins(bin(Arith::Add, None), &[1, 2]),
            ins(bin(Arith::Add, None), &[3, 3]),
        ],
        vec![6, 2, 7, 8],
    )
    .unwrap();
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        f(&[0., 1.], &[2]),
        f(&[1., 1.], &[2]),
        t(&[1., 2., 3.], &[3], DType::S64),
        t(&[10.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(5), &body, 4, &inputs)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    check(&looped[1], &[2], DType::F32, &[55., 89.]);
    check(&looped[3], &[3], DType::S64, &[1024., 2048., 3072.]);
    assert_eq!(ran, dev().is_host());
}

#[test]
fn a_swap_of_two_state_values_reads_both_before_writing_either() {
    // state (i, a, b) -> (i + 1, b, a), three times: a and b end swapped
    let body = Program::new(
        4,
        vec![
            ins(lit(1., DType::S32), &[]),
            ins(bin(Arith::Add, Some(DType::S32)), &[0, 4]),
        ],
        vec![5, 2, 1],
    )
    .unwrap();
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        t(&[1., 2.], &[2], DType::S16),
        t(&[3., 4.], &[2], DType::S16),
        t(&[3.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(4), &body, 3, &inputs)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    check(&looped[1], &[2], DType::S16, &[3., 4.]);
    check(&looped[2], &[2], DType::S16, &[1., 2.]);
    assert_eq!(ran, dev().is_host());
}

#[test]
fn a_body_too_long_to_keep_every_value_runs_op_by_op() {
    // 1,100 instructions over 4,096 elements each: more slots than the interpreter keeps
    let mut instrs = vec![
        ins(lit(1., DType::S32), &[]),
        ins(bin(Arith::Add, Some(DType::S32)), &[0, 3]),
    ];
    let mut last = 1;
    for k in 0..1100 {
        instrs.push(ins(un(Unary::Neg), &[last]));
        last = 5 + k;
    }
    let body = Program::new(3, instrs, vec![4, last]).unwrap();
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        f(&vec![0.5; 4096], &[4096]),
        t(&[2.], &[], DType::S32),
    ];
    let mut out = None;
    let ran = interpreted(|| out = Some(both(&counter_cond(3), &body, 2, &inputs)));
    let [looped, by_hand] = out.unwrap();
    same(&looped, &by_hand);
    assert!(!ran);
}

/// `p` without its results that are `u8` (comparison results: booleans op by op).
fn returning(p: &Program, outputs: Vec<usize>) -> Program {
    Program::new(p.inputs, p.instrs.clone(), outputs).unwrap()
}

/// Straight-line programs over small host tensors run once by the interpreter
/// (`Program::run_small`, what a compiled call of such a function takes on the CPU) give the
/// bits of their ops run one at a time: the benchmark loop's body (f32 with NaN, infinities,
/// signed zeros) and the integer body (wrapping, comparisons, selects, casts), twice each
/// with other values (the code compiled by the first run is kept) and once with another
/// shape (compiled anew).
#[test]
fn small_straight_line_programs_give_the_bits_of_their_ops() {
    let host = dev().is_host();
    let f32_inputs = |x: &[f64], v: &[f64]| {
        vec![
            t(&[3.], &[], DType::S32),
            f(x, &[x.len()]),
            f(v, &[v.len()]),
            t(&[40.], &[], DType::S32),
        ]
    };
    let body = bench_body();
    let x: Vec<f64> = (0..16).map(|k| k as f64 / 16.0).collect();
    let mut special = SPECIAL.to_vec();
    special.extend((0..8).map(|k| -(k as f64) * 0.3));
    let runs = [
        f32_inputs(&x, &special),
        f32_inputs(&special, &x),
        f32_inputs(&SPECIAL, &[0.25, -3.0, 1e-20, 7.0, 0.0, -0.0, 2.0, 1.5]),
    ];
    for inputs in &runs {
        let got = body.run_small(inputs, dev()).unwrap();
        assert_eq!(got.is_some(), host, "the CPU interprets small programs");
        if let Some(got) = got {
            same(&got, &op_by_op(&body, inputs));
        }
    }
    // the integer body without its u8 result
    let ints = returning(&integer_body(), vec![7, 29, 28]);
    let inputs = integer_inputs();
    let got = ints.run_small(&inputs, dev()).unwrap();
    assert_eq!(got.is_some(), host);
    if let Some(got) = got {
        same(&got, &op_by_op(&ints, &inputs));
    }
}

/// What the interpreter does not run once: a `u8` result (a comparison's, a boolean op by
/// op), an op it does not have, tensors over its size, programs with constants; a program
/// refused once stays refused; `Program::run` gives the same values either way.
#[test]
fn other_straight_line_programs_are_left_to_op_by_op_evaluation() {
    let u8_result = integer_body();
    let inputs = integer_inputs();
    assert!(u8_result.run_small(&inputs, dev()).unwrap().is_none());
    same(
        &u8_result.run(inputs.clone(), dev()).unwrap(),
        &op_by_op(&u8_result, &inputs),
    );
    // integers divided into floats: the op table divides their f64 values and rounds once
    let divide = Program::new(
        2,
        vec![ins(bin(Arith::Divide, Some(DType::F32)), &[0, 1])],
        vec![2],
    )
    .unwrap();
    let ints = [
        t(&[1080715965., 7., -2147483647.], &[3], DType::S32),
        t(&[782., 3., 3.], &[3], DType::S32),
    ];
    assert!(divide.run_small(&ints, dev()).unwrap().is_none());
    let want = op_by_op(&divide, &ints);
    same(&divide.run(ints.to_vec(), dev()).unwrap(), &want);
    // 1080715965 / 782 = 1381989.72...: rounded once, not after rounding 1080715965 to f32
    assert_eq!(v(&want[0])[0], 1381989.75);
    // a product
    let dot = Program::new(
        2,
        vec![ins(
            matmul_op(ex_burn_core::op::Precision::Highest),
            &[0, 1],
        )],
        vec![2],
    )
    .unwrap();
    let (a, b) = (f(&[1., 2., 3., 4.], &[2, 2]), f(&[5., 6., 7., 8.], &[2, 2]));
    assert!(dot.run_small(&[a, b], dev()).unwrap().is_none());
    // 5,000 elements, then (refused for good) 16
    let exp = Program::new(1, vec![ins(un(Unary::Exp), &[0])], vec![1]).unwrap();
    assert!(exp
        .run_small(&[f(&vec![0.5; 5000], &[5000])], dev())
        .unwrap()
        .is_none());
    let small = [f(&[0.5; 16], &[16])];
    assert!(exp.run_small(&small, dev()).unwrap().is_none());
    // a fresh copy of the program is tried again
    let fresh = Program::new(1, vec![ins(un(Unary::Exp), &[0])], vec![1]).unwrap();
    let got = fresh.run_small(&small, dev()).unwrap();
    assert_eq!(got.is_some(), dev().is_host());
}

/// Generated straight-line programs over small tensors (rows and columns of a few, broadcast
/// rows and columns, NaN, infinities, signed zeros; arithmetic, powers, maps, comparisons,
/// selects, literals and full sums), run once by the interpreter, give the bits of their ops
/// run one at a time (any NaN for a NaN).
#[test]
fn generated_small_programs_give_the_bits_of_their_ops() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let pool = [
        0.0,
        -0.0,
        1.5,
        -2.25,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        3.0,
        0.1,
    ];
    let values = |n: usize, next: &mut dyn FnMut(usize) -> usize| -> Vec<f64> {
        (0..n)
            .map(|_| match next(3) {
                0 => pool[next(pool.len())],
                _ => (next(2001) as f64 - 1000.0) / 97.0,
            })
            .collect()
    };
    let f32_op = |op: Arith| Op::Binary { op, out: None };
    let mut interpreted = 0;
    for case in 0..40 {
        let (rows, cols) = (1 + next(6), 1 + next(40));
        let inputs = vec![
            f(&values(rows * cols, &mut next), &[rows, cols]),
            f(&values(rows * cols, &mut next), &[rows, cols]),
            f(&values(cols, &mut next), &[cols]),
            f(&values(rows, &mut next), &[rows, 1]),
        ];
        // values of the full shape, and every f32 value
        let (mut full, mut any): (Vec<usize>, Vec<usize>) = (vec![0, 1], vec![0, 1, 2, 3]);
        let mut instrs: Vec<Instr> = Vec::new();
        let n0 = inputs.len();
        let push = |instrs: &mut Vec<Instr>, op: Op, args: &[usize]| {
            instrs.push(ins(op, args));
            n0 + instrs.len() - 1
        };
        for _ in 0..6 + next(14) {
            let a = full[next(full.len())];
            let b = any[next(any.len())];
            let v = match next(8) {
                0 => {
                    let c = push(
                        &mut instrs,
                        lit([0.5, -2.0, 3.0, 1e-3][next(4)], DType::F32),
                        &[],
                    );
                    any.push(c);
                    push(&mut instrs, f32_op(Arith::Multiply), &[a, c])
                }
                1 | 2 => {
                    let op = [
                        Arith::Add,
                        Arith::Subtract,
                        Arith::Multiply,
                        Arith::Divide,
                        Arith::Max,
                        Arith::Min,
                    ][next(6)];
                    let args = if next(2) == 0 { [a, b] } else { [b, a] };
                    push(&mut instrs, f32_op(op), &args)
                }
                3 => {
                    let e = push(&mut instrs, lit([2., 3.][next(2)], DType::S32), &[]);
                    push(&mut instrs, f32_op(Arith::Pow), &[a, e])
                }
                4 | 5 => {
                    let u = [
                        Unary::Neg,
                        Unary::Abs,
                        Unary::Exp,
                        Unary::Sqrt,
                        Unary::Log,
                        Unary::Tanh,
                        Unary::Sin,
                        Unary::Cos,
                    ][next(8)];
                    push(&mut instrs, un(u), &[a])
                }
                6 => {
                    let c = [
                        Compare::Less,
                        Compare::GreaterEqual,
                        Compare::Equal,
                        Compare::NotEqual,
                    ][next(4)];
                    let m = push(&mut instrs, Op::Compare(c), &[a, b]);
                    let other = full[next(full.len())];
                    push(&mut instrs, Op::Select { out: None }, &[m, a, other])
                }
                _ => {
                    let s = push(
                        &mut instrs,
                        Op::Reduce {
                            kind: ReduceKind::Sum,
                            axes: None,
                            keep_axes: next(2) == 0,
                            out: None,
                        },
                        &[a],
                    );
                    any.push(s);
                    push(&mut instrs, f32_op(Arith::Subtract), &[a, s])
                }
            };
            full.push(v);
            any.push(v);
        }
        let last = *full.last().unwrap();
        let p = Program::new(n0, instrs, vec![last, full[full.len() / 2]]).unwrap();
        let want = op_by_op(&p, &inputs);
        if let Some(got) = p.run_small(&inputs, dev()).unwrap() {
            interpreted += 1;
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    (g.dtype(), g.shape()),
                    (w.dtype(), w.shape()),
                    "case {case}"
                );
                // NaN's sign and payload bits are not Nx's to define (fused runs differ there
                // from op by op too): every other value bit for bit
                let differ: Vec<_> = v(g)
                    .into_iter()
                    .zip(v(w))
                    .enumerate()
                    .filter(|(_, (x, y))| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
                    .take(3)
                    .collect();
                assert!(
                    differ.is_empty(),
                    "case {case}: first differences {differ:?} (interpreter, op by op); inputs {:?}; {:?}",
                    inputs.iter().map(v).collect::<Vec<_>>(),
                    p.instrs
                );
            }
        }
    }
    assert_eq!(
        interpreted > 30,
        dev().is_host(),
        "{interpreted} of 40 interpreted"
    );
}

/// A loop whose body divides two integers (a float result) gives the op table's quotient,
/// the f64 values' divided and rounded once (its f32 roundings' quotient differs: 1080715965
/// / 782 is 1381989.75, not 1381989.625).
#[test]
fn a_loop_dividing_integers_rounds_the_quotient_once() {
    // state (i: s32, q: f32), invariants (n: s32 = 1080715965, d: s32 = 782, stop: s32)
    let body = Program::new(
        5,
        vec![
            ins(lit(1., DType::S32), &[]),                      // 5
            ins(bin(Arith::Add, Some(DType::S32)), &[0, 5]),    // 6: i + 1
            ins(bin(Arith::Divide, Some(DType::F32)), &[2, 3]), // 7: n / d
            ins(bin(Arith::Add, Some(DType::F32)), &[1, 7]),    // 8: q + n / d
        ],
        vec![6, 8],
    )
    .unwrap();
    let inputs = vec![
        t(&[0.], &[], DType::S32),
        f(&[0.], &[]),
        t(&[1080715965.], &[], DType::S32),
        t(&[782.], &[], DType::S32),
        t(&[1.], &[], DType::S32),
    ];
    let [looped, by_hand] = both(&counter_cond(5), &body, 2, &inputs);
    same(&looped, &by_hand);
    check(&looped[1], &[], DType::F32, &[1381989.75]);
}
