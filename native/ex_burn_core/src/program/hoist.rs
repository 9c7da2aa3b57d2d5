//! Hoisting: contractions that only feed the program's outputs run as soon as their operands
//! exist, so that what they read can be freed early.
//!
//! A gradient program computes each weight's gradient as a product of an activation saved by
//! the forward pass and the gradient flowing back (`dW = xᵀ dY`), and bias gradients as sums;
//! Nx's gradient puts all of them at the end of the program, after the whole backward pass,
//! so every saved activation stays alive until then. Their results are the size of the
//! parameters, smaller than what they read: computed right after their last operand is
//! made, they end the activations' lifetimes early (in a GPT-2-small layer of 8 x 512 tokens,
//! ~170 MiB of the MLP's and the layer norms' activations no longer alive during the
//! attention's backward pass).
//!
//! [`rewrite`] moves each such `dot` or `reduce` to just before the first `dot` at or after
//! the point where its operands exist (a `dot` never sits inside an element-wise run or a row
//! region, so no fused kernel is split), keeping the order of everything else. The program
//! computes the same operations on the same operands.

use super::Instr;
use crate::op::Op;

/// The instructions in their new order and the outputs renumbered; `None` when nothing moves.
pub(super) fn rewrite(
    instrs: &[Instr],
    first: usize,
    outputs: &[usize],
) -> Option<(Vec<Instr>, Vec<usize>)> {
    let n = instrs.len();
    let super::values::Values {
        def,
        first_of: base,
        reads: readers,
        output,
    } = super::values::Values::of(instrs, first, outputs);
    // values that reach the outputs through transposes and reshapes alone (later first)
    let mut terminal = vec![false; def.len()];
    for v in (first..def.len()).rev() {
        terminal[v] = output[v]
            || (!readers[v].is_empty()
                && readers[v].iter().all(|&r| {
                    matches!(
                        instrs[r].op.as_op(),
                        Some(Op::Transpose { .. } | Op::Reshape { .. })
                    ) && instrs[r].op.results() == 1
                        && terminal[base[r]]
                }));
    }
    let dots: Vec<usize> = (0..n)
        .filter(|&i| matches!(instrs[i].op.as_op(), Some(Op::Dot { .. })))
        .collect();
    // for each instruction, where it goes: before instruction `slot` (its own index if
    // it stays)
    let mut slot: Vec<usize> = (0..n).collect();
    let mut moved = false;
    for i in 0..n {
        let contraction = matches!(
            instrs[i].op.as_op(),
            Some(Op::Dot { .. } | Op::Reduce { .. })
        );
        if !contraction || instrs[i].op.results() != 1 || !terminal[base[i]] {
            continue;
        }
        // operands exist after the latest of their (possibly moved) definitions
        let ready = instrs[i]
            .args
            .iter()
            .filter(|&&a| a >= first)
            .map(|&a| slot[def[a]] + 1)
            .max()
            .unwrap_or(0);
        // the first `dot` at or after `ready` other than this one (binary search: programs
        // of thousands of products stay cheap to plan)
        let k = dots.partition_point(|&d| d < ready);
        let to = dots[k..].iter().copied().find(|&d| d != i).unwrap_or(i);
        if to < i {
            slot[i] = to;
            moved = true;
        }
    }
    if !moved {
        return None;
    }
    // the new order: by slot, moved instructions before the one they were put in front of
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (slot[i], usize::from(slot[i] == i), i));
    let mut new = vec![usize::MAX; def.len()];
    for (v, x) in new.iter_mut().enumerate().take(first) {
        *x = v;
    }
    let mut next = first;
    let mut out = Vec::with_capacity(n);
    for &i in &order {
        let ins = &instrs[i];
        let args = ins.args.iter().map(|&a| new[a]).collect::<Vec<_>>();
        if args.contains(&usize::MAX) {
            // an operand would come later (cannot happen: moves only go after operands)
            return None;
        }
        out.push(Instr {
            op: ins.op.clone(),
            args,
        });
        for r in 0..ins.op.results() {
            new[base[i] + r] = next;
            next += 1;
        }
    }
    Some((out, outputs.iter().map(|&o| new[o]).collect()))
}
