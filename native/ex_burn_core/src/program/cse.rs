//! Common subexpressions: an element-wise instruction (scalar literals included) equal to an
//! earlier one on the same operands is dropped, and what read it reads the earlier one.
//!
//! Nx's expressions repeat work a library writes per tensor: Polaris's Adam computes the bias
//! corrections `1 - b1 ** count` and `1 - b2 ** count` once per parameter, so a GPT-2 small
//! step with AdamW computed the same scalars 148 times (about 1,300 one-element kernels on a
//! GPU). Element-wise ops are pure functions of their operands, so the program computes the
//! same values; other steps (reductions, indexing, random numbers, hooks, loops) are kept as
//! they are.

use super::{fuse, Instr};
use std::collections::HashMap;

/// The instructions without repeated element-wise ones and the outputs renumbered (values
/// from `first` are the instructions' results); `None` when nothing repeats. The program
/// must be valid (every operand defined before it is read).
pub(super) fn rewrite(
    instrs: &[Instr],
    first: usize,
    outputs: &[usize],
) -> Option<(Vec<Instr>, Vec<usize>)> {
    // old value number -> new value number
    let mut remap: Vec<usize> = (0..first).collect();
    let mut out: Vec<Instr> = Vec::with_capacity(instrs.len());
    // the value each kept instruction defines first
    let mut value_of: Vec<usize> = Vec::with_capacity(instrs.len());
    // kept element-wise instructions by name and operands
    let mut seen: HashMap<(String, Vec<usize>), Vec<usize>> = HashMap::new();
    let mut next = first;
    let mut dropped = false;
    for ins in instrs {
        let args: Vec<usize> = ins.args.iter().map(|&a| remap[a]).collect();
        if fuse::elementwise(&ins.op) && ins.op.results() == 1 {
            let key = (ins.op.name(), args.clone());
            let same = seen
                .get(&key)
                .and_then(|kept| kept.iter().find(|&&j| out[j].op == ins.op));
            if let Some(&j) = same {
                remap.push(value_of[j]);
                dropped = true;
                continue;
            }
            seen.entry(key).or_default().push(out.len());
        }
        let results = ins.op.results();
        value_of.push(next);
        remap.extend(next..next + results);
        next += results;
        out.push(Instr {
            op: ins.op.clone(),
            args,
        });
    }
    dropped.then(|| (out, outputs.iter().map(|&o| remap[o]).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Arith, Op, Unary};
    use crate::{DType, Scalar};

    fn ins(op: Op, args: &[usize]) -> Instr {
        Instr {
            op: op.into(),
            args: args.to_vec(),
        }
    }

    fn lit(v: f64) -> Op {
        Op::Full {
            shape: vec![],
            dtype: DType::F32,
            value: Scalar::F(v),
        }
    }

    #[test]
    fn repeated_element_wise_steps_read_the_first() {
        let add = Op::Binary {
            op: Arith::Add,
            out: None,
        };
        // inputs 0, 1; values from 2
        let instrs = vec![
            ins(lit(0.9), &[]),               // 2
            ins(add.clone(), &[0, 2]),        // 3
            ins(lit(0.9), &[]),               // 4 = 2
            ins(add.clone(), &[0, 4]),        // 5 = 3
            ins(Op::Unary(Unary::Exp), &[5]), // 6 -> reads 3
            ins(lit(f64::NAN), &[]),          // 7 (NaN equals nothing)
            ins(lit(f64::NAN), &[]),          // 8
            ins(add.clone(), &[1, 2]),        // 9: other operands
        ];
        let (out, outputs) = rewrite(&instrs, 2, &[6, 5, 9, 8]).unwrap();
        assert_eq!(out.len(), 6);
        assert_eq!(out[2].args, vec![3]);
        assert_eq!(out[5].args, vec![1, 2]);
        assert_eq!(outputs, vec![4, 3, 7, 6]);
        // nothing repeats: no rewrite
        assert!(rewrite(&out, 2, &outputs).is_none());
    }
}
