//! A matrix transpose of a `dot`'s result, where that transpose is the result's only use, is
//! computed as the `dot` of the swapped operands: (AB)ᵀ = BᵀAᵀ. Nx's autodiff writes the
//! weight gradient of every dense layer this way (`transpose(dot(dy, x))`); without the fold
//! the transposed view is copied by whatever reads it next (on the CPU a strided copy as slow
//! as a third of the GEMM), with it the GEMM writes the gradient in place.

use super::Instr;
use super::Step;
use crate::op::Op;
use crate::Tensor;

/// For each instruction, the index of the transpose it feeds when the pair may fold: the
/// instruction is a `dot`, its result is read once, by a two-axis transpose, and is not a
/// program output. `first` is the value number of the first instruction's first result.
pub(super) fn plan(instrs: &[Instr], first: usize, outputs: &[usize]) -> Vec<Option<usize>> {
    let values = super::values::Values::of(instrs, first, outputs);
    let uses = values.uses();
    let defined_by = values.def;
    let mut folds = vec![None; instrs.len()];
    for (j, ins) in instrs.iter().enumerate() {
        let two_axes = matches!(ins.op.as_op(), Some(Op::Transpose { axes: None }))
            || matches!(ins.op.as_op(), Some(Op::Transpose { axes: Some(a) }) if a == &[1, 0]);
        if let (true, &[v]) = (two_axes, ins.args.as_slice()) {
            let i = defined_by[v];
            if i != usize::MAX
                && uses[v] == 1
                && matches!(instrs[i].op.as_op(), Some(Op::Dot { .. }))
            {
                folds[i] = Some(j);
            }
        }
    }
    folds
}

/// The `dot` computing the transpose of `op` applied to `args`, with its operands: only for
/// contractions whose result is a matrix of one free axis from each side (no batch axes).
pub(super) fn swapped(op: &Step, args: &[Tensor]) -> Option<(Op, Vec<Tensor>)> {
    let Some(Op::Dot {
        contract_a,
        batch_a,
        contract_b,
        batch_b,
        out,
        precision,
    }) = op.as_op()
    else {
        return None;
    };
    let [a, b] = args else { return None };
    let free = |t: &Tensor, c: &[usize]| t.rank().checked_sub(c.len());
    if !batch_a.is_empty()
        || !batch_b.is_empty()
        || free(a, contract_a) != Some(1)
        || free(b, contract_b) != Some(1)
    {
        return None;
    }
    let op = Op::Dot {
        contract_a: contract_b.clone(),
        batch_a: vec![],
        contract_b: contract_a.clone(),
        batch_b: vec![],
        out: *out,
        precision: *precision,
    };
    Some((op, vec![b.clone(), a.clone()]))
}
