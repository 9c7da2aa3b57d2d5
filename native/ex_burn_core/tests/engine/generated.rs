//! Generated programs: chains of element-wise maps, comparisons, selects and reductions over
//! the trailing axis (the shapes of softmax, layer norm, cross-entropy and their gradients),
//! on inputs with NaN, infinities, signed zeros and subnormals, at sizes on both sides of
//! the thresholds where the compiler fuses element-wise runs and runs row regions, some long
//! enough to run as the variant scheduled for memory (late reads recomputed, weight gradients
//! moved); every third with products (`x . w`, `x . w^T`, folded weight gradients) on whole
//! numbers, exact in any order of addition. On the
//! CPU each program's outputs equal op-by-op evaluation's bit for bit, as the fused runs and
//! row regions promise (any NaN for a NaN: where two NaNs of different signs meet, which one
//! an addition passes on depends on the operand order of the compiled instruction). Other
//! devices add in other orders, and arbitrary programs amplify that without bound (a
//! division by a sum that cancels): they are not checked here.
//!
//! `EX_BURN_GENERATED_PROGRAMS=N` runs N programs instead of the default (a longer campaign);
//! `EX_BURN_GENERATED_SEED=S` starts from seed S. A failure names its seed and program.

use super::common::*;
use ex_burn_core::program::Instr;
use ex_burn_core::{DType, Device, Op, Program, Tensor};

impl Gen {
    /// A value in [-4, 4), sometimes a special one (when `specials`).
    fn value(&mut self, specials: bool) -> f64 {
        if specials && self.below(40) == 0 {
            return self.pick(&[
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                1.0e-40,
                -3.0e38,
                88.5,
            ]);
        }
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
    }
}

/// What a value of a generated program is.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// f32 of the program's full shape `[lead.., cols]`.
    Full,
    /// A boolean mask of the full shape.
    Mask,
    /// f32 `[lead.., 1]` (a reduction over the trailing axis, kept).
    Column,
    /// f32 `[cols]` (an input: a bias).
    Row,
    /// f32 of the full shape's trailing axes broadcast over the first (an input of
    /// `[lead[1..].., cols]`, or a reduction over the first axis, kept).
    Trailing,
    /// s32 of the full shape (small whole numbers).
    Int,
    /// f32 `[cols, cols]` (the operand of products, and a weight gradient).
    Square,
    /// An f32 scalar literal.
    Scalar,
    /// Anything else (another type or shape): read by no later step.
    Other,
}

const UNARY: [Unary; 12] = [
    Unary::Neg,
    Unary::Abs,
    Unary::Sqrt,
    Unary::Rsqrt,
    Unary::Exp,
    Unary::Log,
    Unary::Sin,
    Unary::Cos,
    Unary::Tanh,
    Unary::Sigmoid,
    Unary::Floor,
    Unary::Log1p,
];

const BINARY: [Arith; 9] = [
    Arith::Add,
    Arith::Subtract,
    Arith::Multiply,
    Arith::Divide,
    Arith::Max,
    Arith::Min,
    Arith::Pow,
    Arith::Remainder,
    Arith::Atan2,
];

const COMPARE: [Compare; 6] = [
    Compare::Equal,
    Compare::NotEqual,
    Compare::Less,
    Compare::LessEqual,
    Compare::Greater,
    Compare::GreaterEqual,
];

/// Shapes on both sides of the vector reduction's 512 columns and of the fused runs'
/// 131,072 elements; three-axis ones with operands of the trailing two (an attention mask).
const SHAPES: [&[usize]; 15] = [
    &[5, 17],
    &[3, 511],
    &[2, 512],
    &[4, 513],
    &[33, 64],
    &[1, 1500],
    &[7, 1],
    &[300, 512],
    &[257, 513],
    &[100, 1500],
    &[1024, 130],
    &[3, 5, 17],
    &[2, 64, 64],
    &[4, 33, 513],
    &[8, 128, 128],
];

/// A generated program with its inputs: `x` and `y` (full shape), `b` (`[cols]`), `t` (the
/// trailing axes) and `i` (s32, full shape).
struct Case {
    program: Program,
    inputs: Vec<Tensor>,
    shape: Vec<usize>,
}

fn generate(seed: u64) -> Case {
    let mut g = Gen(seed);
    let shape: Vec<usize> = g.pick(&SHAPES).to_vec();
    let rank = shape.len();
    let cols = shape[rank - 1];
    let specials = g.below(2) == 0;
    let n: usize = shape.iter().product();
    let trailing = &shape[1..];
    let nt: usize = trailing.iter().product();
    let mut values = |len: usize| -> Vec<f64> { (0..len).map(|_| g.value(specials)).collect() };
    let (x, y, b, t) = (values(n), values(n), values(cols), values(nt));
    let ints: Vec<f64> = (0..n).map(|_| g.below(9) as f64 - 4.0).collect();
    let inputs = vec![
        f(&x, &shape),
        f(&y, &shape),
        f(&b, &[cols]),
        f(&t, trailing),
        super::common::t(&ints, &shape, DType::S32),
    ];
    let mut kinds = vec![Kind::Full, Kind::Full, Kind::Row, Kind::Trailing, Kind::Int];
    let mut instrs: Vec<Instr> = Vec::new();
    let f32_op = |op: Arith| Op::Binary { op, out: None };
    let last_axis = rank - 1;
    // (half of them long enough to run as the variant scheduled for memory: values read late
    // recomputed where they are read)
    let longest = if g.below(2) == 0 { 12 } else { 30 };
    let steps = 3 + g.below(longest);
    for _ in 0..steps {
        let of = |g: &mut Gen, kinds: &[Kind], want: &[Kind]| -> usize {
            let found: Vec<usize> = (0..kinds.len())
                .filter(|&i| want.contains(&kinds[i]))
                .collect();
            // (the full inputs always exist)
            found[found.len() - 1 - g.below(found.len().min(4))]
        };
        let (op, args, kind) = match g.below(12) {
            0 | 1 => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                (Op::Unary(g.pick(&UNARY)), vec![a], Kind::Full)
            }
            2..=4 => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                let other = g.pick(&[
                    Kind::Full,
                    Kind::Column,
                    Kind::Row,
                    Kind::Trailing,
                    Kind::Scalar,
                    Kind::Mask,
                    Kind::Int,
                ]);
                let b = if other == Kind::Scalar {
                    instrs.push(ins(lit(g.value(true), DType::F32), &[]));
                    kinds.push(Kind::Scalar);
                    kinds.len() - 1
                } else {
                    of(&mut g, &kinds, &[other, Kind::Full])
                };
                let args = if g.below(2) == 0 {
                    vec![a, b]
                } else {
                    vec![b, a]
                };
                (f32_op(g.pick(&BINARY)), args, Kind::Full)
            }
            5 => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                let b = of(
                    &mut g,
                    &kinds,
                    &[Kind::Full, Kind::Column, Kind::Row, Kind::Trailing],
                );
                (Op::Compare(g.pick(&COMPARE)), vec![a, b], Kind::Mask)
            }
            6 => {
                let p = of(&mut g, &kinds, &[Kind::Mask, Kind::Full]);
                let t = of(&mut g, &kinds, &[Kind::Full, Kind::Column, Kind::Trailing]);
                let e = of(&mut g, &kinds, &[Kind::Full, Kind::Row, Kind::Scalar]);
                (Op::Select { out: None }, vec![p, t, e], Kind::Full)
            }
            7 | 8 => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                let kind = g.pick(&[ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min]);
                (
                    reduce_op(kind, &[last_axis], true, None),
                    vec![a],
                    Kind::Column,
                )
            }
            9 => {
                // a reduction without kept axes, shaped back: a reshape or a broadcast
                let a = of(&mut g, &kinds, &[Kind::Full]);
                let kind = g.pick(&[ReduceKind::Sum, ReduceKind::Max]);
                instrs.push(ins(reduce_op(kind, &[last_axis], false, None), &[a]));
                kinds.push(Kind::Other);
                let r = kinds.len() - 1;
                if g.below(2) == 0 {
                    let mut column = shape.clone();
                    column[last_axis] = 1;
                    (Op::Reshape { shape: column }, vec![r], Kind::Column)
                } else {
                    let axes: Vec<usize> = (0..last_axis).collect();
                    let op = Op::Broadcast {
                        shape: shape.clone(),
                        axes: Some(axes),
                    };
                    (op, vec![r], Kind::Full)
                }
            }
            10 => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                (Op::AsType { dtype: DType::BF16 }, vec![a], Kind::Other)
            }
            _ => {
                let a = of(&mut g, &kinds, &[Kind::Full]);
                let kind = g.pick(&[ReduceKind::Sum, ReduceKind::Max]);
                let to = if rank == 2 { Kind::Row } else { Kind::Trailing };
                (reduce_op(kind, &[0], true, None), vec![a], to)
            }
        };
        instrs.push(ins(op, &args));
        kinds.push(kind);
    }
    // the last value, and up to two earlier ones read after the rest
    let last = kinds.len() - 1;
    let mut outputs = vec![last];
    for _ in 0..g.below(3) {
        let v = 5 + g.below(kinds.len() - 5);
        if !outputs.contains(&v) {
            outputs.push(v);
        }
    }
    let program = Program::new(5, instrs, outputs).expect("a valid generated program");
    Case {
        program,
        inputs,
        shape,
    }
}

/// 2-axis shapes for programs with products (their square operand is `[cols, cols]`).
const PRODUCT_SHAPES: [(usize, usize); 6] = [
    (5, 17),
    (2, 512),
    (33, 64),
    (300, 512),
    (1024, 130),
    (129, 1024),
];

/// A generated program with products: `x . w`, `x . w^T` and the transpose of `x^T . y` (a
/// weight gradient, folded into its `dot`), between whole-number maps, selects and
/// reductions. Inputs are small whole numbers and every product's operands are clamped to
/// [-4, 4] first, so that each product is exact in f32 whichever order the GEMM adds in (a
/// folded transpose multiplies the swapped operands); inputs `x`, `y` (`[rows, cols]`), `w`
/// (`[cols, cols]`) and `b` (`[cols]`).
fn generate_products(seed: u64) -> Case {
    let mut g = Gen(seed);
    let (rows, cols) = g.pick(&PRODUCT_SHAPES);
    let mut whole =
        |len: usize| -> Vec<f64> { (0..len).map(|_| g.below(7) as f64 - 3.0).collect() };
    let (x, y, w, b) = (
        whole(rows * cols),
        whole(rows * cols),
        whole(cols * cols),
        whole(cols),
    );
    let inputs = vec![
        f(&x, &[rows, cols]),
        f(&y, &[rows, cols]),
        f(&w, &[cols, cols]),
        f(&b, &[cols]),
    ];
    let mut kinds = vec![Kind::Full, Kind::Full, Kind::Square, Kind::Row];
    let mut instrs: Vec<Instr> = Vec::new();
    let push = |instrs: &mut Vec<Instr>, kinds: &mut Vec<Kind>, op: Op, args: &[usize], k: Kind| {
        instrs.push(ins(op, args));
        kinds.push(k);
        kinds.len() - 1
    };
    // one of the last values of kind `want` (a full one where there is none yet)
    let of = |g: &mut Gen, kinds: &[Kind], want: Kind| -> usize {
        let mut found: Vec<usize> = (0..kinds.len()).filter(|&i| kinds[i] == want).collect();
        if found.is_empty() {
            found = (0..kinds.len())
                .filter(|&i| kinds[i] == Kind::Full)
                .collect();
        }
        found[found.len() - 1 - g.below(found.len().min(4))]
    };
    // a value clamped to [-4, 4] (NaN stays NaN)
    let clamp = |g: &mut Gen, instrs: &mut Vec<Instr>, kinds: &mut Vec<Kind>, want: Kind| {
        let v = of(g, kinds, want);
        let lo = push(instrs, kinds, lit(-4.0, DType::F32), &[], Kind::Scalar);
        let hi = push(instrs, kinds, lit(4.0, DType::F32), &[], Kind::Scalar);
        let m = push(
            instrs,
            kinds,
            Op::Binary {
                op: Arith::Max,
                out: None,
            },
            &[v, lo],
            want,
        );
        push(
            instrs,
            kinds,
            Op::Binary {
                op: Arith::Min,
                out: None,
            },
            &[m, hi],
            want,
        )
    };
    let whole_maps = [
        Arith::Add,
        Arith::Subtract,
        Arith::Multiply,
        Arith::Max,
        Arith::Min,
    ];
    for _ in 0..3 + g.below(20) {
        match g.below(10) {
            0 | 1 => {
                let k = g.pick(&[Kind::Full, Kind::Square]);
                let a = of(&mut g, &kinds, k);
                let u = g.pick(&[Unary::Neg, Unary::Abs, Unary::Floor]);
                push(&mut instrs, &mut kinds, Op::Unary(u), &[a], k);
            }
            2 | 3 => {
                let k = g.pick(&[Kind::Full, Kind::Square]);
                let a = of(&mut g, &kinds, k);
                let other = match (k, g.below(3)) {
                    (_, 0) => push(
                        &mut instrs,
                        &mut kinds,
                        lit(g.below(5) as f64 - 2.0, DType::F32),
                        &[],
                        Kind::Scalar,
                    ),
                    (Kind::Full, 1) => {
                        let want = g.pick(&[Kind::Row, Kind::Column, Kind::Full]);
                        of(&mut g, &kinds, want)
                    }
                    _ => of(&mut g, &kinds, k),
                };
                let args = if g.below(2) == 0 {
                    [a, other]
                } else {
                    [other, a]
                };
                let op = Op::Binary {
                    op: g.pick(&whole_maps),
                    out: None,
                };
                push(&mut instrs, &mut kinds, op, &args, k);
            }
            4 => {
                let a = of(&mut g, &kinds, Kind::Full);
                let want = g.pick(&[Kind::Full, Kind::Row]);
                let c = of(&mut g, &kinds, want);
                let m = push(
                    &mut instrs,
                    &mut kinds,
                    Op::Compare(g.pick(&COMPARE)),
                    &[a, c],
                    Kind::Mask,
                );
                let t = of(&mut g, &kinds, Kind::Full);
                push(
                    &mut instrs,
                    &mut kinds,
                    Op::Select { out: None },
                    &[m, t, a],
                    Kind::Full,
                );
            }
            5 => {
                let a = of(&mut g, &kinds, Kind::Full);
                let kind = g.pick(&[ReduceKind::Sum, ReduceKind::Max]);
                push(
                    &mut instrs,
                    &mut kinds,
                    reduce_op(kind, &[1], true, None),
                    &[a],
                    Kind::Column,
                );
            }
            6 | 7 => {
                // x . w, or x . w^T
                let a = clamp(&mut g, &mut instrs, &mut kinds, Kind::Full);
                let w = clamp(&mut g, &mut instrs, &mut kinds, Kind::Square);
                let op = contraction(1, g.below(2), ex_burn_core::op::Precision::Default);
                push(&mut instrs, &mut kinds, op, &[a, w], Kind::Full);
            }
            _ => {
                // transpose(x^T . y): [cols, cols]
                let a = clamp(&mut g, &mut instrs, &mut kinds, Kind::Full);
                let c = clamp(&mut g, &mut instrs, &mut kinds, Kind::Full);
                let op = contraction(0, 0, ex_burn_core::op::Precision::Default);
                let d = push(&mut instrs, &mut kinds, op, &[a, c], Kind::Other);
                push(
                    &mut instrs,
                    &mut kinds,
                    Op::Transpose { axes: None },
                    &[d],
                    Kind::Square,
                );
            }
        }
    }
    let last = kinds.len() - 1;
    let mut outputs = vec![last];
    for _ in 0..g.below(3) {
        let v = 4 + g.below(kinds.len() - 4);
        if !outputs.contains(&v) && kinds[v] != Kind::Other {
            outputs.push(v);
        }
    }
    let program = Program::new(4, instrs, outputs).expect("a valid generated program");
    Case {
        program,
        inputs,
        shape: vec![rows, cols],
    }
}

/// The outputs of `prog` evaluated one instruction at a time, or the first error.
fn one_by_one(prog: &Program, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let mut values: Vec<Tensor> = inputs.to_vec();
    for i in &prog.instrs {
        let args: Vec<Tensor> = i.args.iter().map(|&a| values[a].clone()).collect();
        let mut out =
            ex_burn_core::program::eval(&i.op, &args, dev()).map_err(|e| e.to_string())?;
        values.push(out.remove(0));
    }
    Ok(prog.outputs.iter().map(|&o| values[o].clone()).collect())
}

/// Where `got` differs from `want` (`None`: nowhere): any bit, but any NaN for a NaN.
fn difference(got: &Tensor, want: &Tensor) -> Option<String> {
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Some(format!(
            "{:?} {:?} vs {:?} {:?}",
            got.shape(),
            got.dtype(),
            want.shape(),
            want.dtype()
        ));
    }
    let (gb, wb) = (got.to_bytes(None).unwrap(), want.to_bytes(None).unwrap());
    let width = got.dtype().size();
    v(got)
        .iter()
        .zip(v(want))
        .enumerate()
        .find(|&(i, (p, q))| {
            let bits = |b: &[u8]| b[i * width..(i + 1) * width].to_vec();
            !(p.is_nan() && q.is_nan()) && bits(&gb) != bits(&wb)
        })
        .map(|(i, (p, q))| {
            let bits = |b: &[u8]| format!("{:02x?}", &b[i * width..(i + 1) * width]);
            format!(
                "element {i}: {p:e} ({}) vs {q:e} ({})",
                bits(&gb),
                bits(&wb)
            )
        })
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn generated_programs_equal_op_by_op_evaluation() {
    if dev() != Device::Cpu {
        return;
    }
    let count = env_number("EX_BURN_GENERATED_PROGRAMS", 160);
    let start = env_number("EX_BURN_GENERATED_SEED", 1);
    let (mut fused, mut regions, mut failed, mut scheduled) = (0, 0, 0, 0);
    for seed in start..start + count {
        // (every third program with products)
        let case = if seed % 3 == 0 {
            generate_products(seed)
        } else {
            generate(seed)
        };
        let (runs, rows) = (
            ex_burn_core::program::loop_runs(),
            ex_burn_core::program::row_regions(),
        );
        let got = case.program.run(case.inputs.clone(), dev());
        fused += ex_burn_core::program::loop_runs() - runs;
        scheduled += usize::from(case.program.scheduled().is_some());
        regions += ex_burn_core::program::row_regions() - rows;
        let want = one_by_one(&case.program, &case.inputs);
        let what = || {
            format!(
                "seed {seed}, shape {:?}: {:?}",
                case.shape, case.program.instrs
            )
        };
        match (got, want) {
            (Ok(got), Ok(want)) => {
                for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                    if let Some(d) = difference(a, b) {
                        panic!("output {k} differs at {d}; {}", what());
                    }
                }
            }
            (Err(_), Err(_)) => failed += 1,
            (got, want) => panic!(
                "one way failed, the other did not ({:?} / {:?}); {}",
                got.err(),
                want.err(),
                what()
            ),
        }
    }
    // the programs reach the paths they are meant to check, and most of them run
    eprintln!(
        "{count} programs: {fused} fused runs, {regions} row regions, {scheduled} run as \
         scheduled for memory, {failed} errors"
    );
    if count >= 100 {
        assert!(
            fused > 0 && regions > 0,
            "fused runs {fused}, row regions {regions}"
        );
    }
    assert!(
        failed * 10 <= count,
        "{failed} of {count} programs failed both ways"
    );
}
