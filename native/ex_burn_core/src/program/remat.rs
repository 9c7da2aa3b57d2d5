//! Rematerialisation: element-wise values recomputed where they are read late instead of
//! being kept alive until then.
//!
//! A gradient program reads forward values again in its backward part. When such a value is
//! an element-wise function of values that are alive at that later read anyway (the softmax's
//! exponentials and probabilities, from the masked scores and the row maxima and sums kept
//! for the backward pass), keeping it costs its whole size over the stretch between the two
//! passes, while recomputing it where it is read costs no memory: the recomputation joins the
//! element-wise run or row region that reads it (one more `exp` per element in a kernel that
//! reads the scores instead of the probabilities), or, before a product, is one more
//! element-wise kernel. In a GPT-2-small layer of 8 x 512 tokens that is two tensors of
//! 96 MiB each across the layer's MLP, forward and backward.
//!
//! [`rewrite`] gives the rewritten instruction list, or `None` when nothing is worth
//! recomputing. Values are recomputed only from values that the original program keeps alive
//! at that point anyway (or inputs, constants and other recomputed element-wise values), so
//! the rewrite never extends a lifetime; results are identical (the same operations on the
//! same operands).

use super::{fuse, Instr};
use crate::op::Op;

/// A read is late when it comes more than this many instructions after the definition.
const LATE: usize = 8;

/// At most this many instructions recomputed for one late read.
const MAX_CHAIN: usize = 8;

/// A value read late by more instructions than this is kept: many readers share it (an
/// optimizer step's bias corrections, read by every parameter's update), and recomputing it
/// at each would multiply its work by their number (a GPT-2 small step with AdamW recomputed
/// its scalars 148 times, ~900 one-element kernels). The activations this rewrite is for (a
/// softmax's exponentials and probabilities) have one to a few late reads.
const MAX_LATE_READS: usize = 16;

/// The instructions of a program with element-wise values recomputed at their late reads, and
/// its outputs renumbered; `None` when no value qualifies. `first` is the number of inputs
/// and constants.
pub(super) fn rewrite(
    instrs: &[Instr],
    first: usize,
    outputs: &[usize],
) -> Option<(Vec<Instr>, Vec<usize>)> {
    let mut shape = Shape::of(instrs, first, outputs);
    // a chain reads only values defined before its value: decided in definition order, each
    // value's chains see the final decision for every value they may recompute
    let mut any = false;
    for v in shape.candidates() {
        let reads = &shape.reads[v];
        let d = shape.def[v];
        // the last reads, late and fusing the recomputation, are recomputed; the others keep v
        let keep = reads
            .iter()
            .rposition(|&u| u <= d + LATE || !fuse::row_capable(&instrs[u].op))
            .map_or(d, |k| reads[k]);
        let mut late: Vec<usize> = reads.iter().copied().filter(|&u| u > keep).collect();
        late.dedup();
        if late.is_empty() || late.len() > MAX_LATE_READS {
            continue;
        }
        let ok = late.iter().all(|&u| shape.chain(v, u, &mut Vec::new()));
        if ok {
            shape.kept[v] = keep;
            any = true;
        }
    }
    any.then(|| shape.emit(outputs))
}

/// What the rewrite needs to know about the program.
struct Shape<'a> {
    instrs: &'a [Instr],
    first: usize,
    /// For each value, the instruction that defines it (`usize::MAX` for inputs, constants).
    def: Vec<usize>,
    /// For each value, the instructions that read it, in order.
    reads: Vec<Vec<usize>>,
    /// Whether each value is a program output.
    output: Vec<bool>,
    /// For each value, the last instruction that reads the value itself: its last read, or
    /// for a recomputed value the last read before those that recompute it.
    kept: Vec<usize>,
}

impl<'a> Shape<'a> {
    fn of(instrs: &'a [Instr], first: usize, outputs: &[usize]) -> Shape<'a> {
        let values = super::values::Values::of(instrs, first, outputs);
        let kept = values
            .reads
            .iter()
            .map(|r| r.last().copied().unwrap_or(0))
            .collect();
        Shape {
            instrs,
            first,
            def: values.def,
            reads: values.reads,
            output: values.output,
            kept,
        }
    }

    /// Whether value `v` is the single result of an element-wise instruction.
    fn element_wise(&self, v: usize) -> bool {
        let d = self.def[v];
        d != usize::MAX && self.instrs[d].op.results() == 1 && fuse::elementwise(&self.instrs[d].op)
    }

    /// Element-wise values read late, other than outputs and scalar literals (as small to
    /// keep as to make again), in definition order.
    fn candidates(&self) -> Vec<usize> {
        (self.first..self.def.len())
            .filter(|&v| {
                let d = self.def[v];
                self.element_wise(v)
                    && !self.output[v]
                    && !matches!(self.instrs[d].op.as_op(), Some(Op::Full { .. }))
                    && self.reads[v].last().is_some_and(|&u| u > d + LATE)
            })
            .collect()
    }

    /// Whether instruction `u` reads a recomputed copy of value `a`.
    fn recomputes(&self, a: usize, u: usize) -> bool {
        a >= self.first && u > self.kept[a] && self.reads[a].contains(&u)
    }

    /// Whether `w` is alive at instruction `u` without being recomputed: an input, a
    /// constant, an output, or a value read as itself at or after `u`.
    fn alive(&self, w: usize, u: usize) -> bool {
        w < self.first || self.output[w] || self.kept[w] >= u
    }

    /// Appends to `chain` (in order, without repeats) the values to recompute so that `v` is
    /// available at instruction `u`; false when that takes more than [`MAX_CHAIN`]
    /// instructions or a value that is neither alive there nor element-wise.
    fn chain(&self, v: usize, u: usize, chain: &mut Vec<usize>) -> bool {
        if chain.contains(&v) {
            return true;
        }
        if !self.element_wise(v) {
            return false;
        }
        for &a in &self.instrs[self.def[v]].args {
            if !(self.alive(a, u) || self.chain(a, u, chain)) {
                return false;
            }
        }
        chain.push(v);
        chain.len() <= MAX_CHAIN
    }

    /// The rewritten instructions and outputs: before each recomputing read, the value's
    /// chain (shared by the reads of one instruction and, within [`LATE`] instructions, by
    /// later ones).
    fn emit(&self, outputs: &[usize]) -> (Vec<Instr>, Vec<usize>) {
        let instrs = self.instrs;
        let mut out: Vec<Instr> = Vec::with_capacity(instrs.len() + 16);
        // new number of each original value
        let mut new: Vec<usize> = (0..self.first).collect();
        let mut next = self.first;
        // recomputed copies: original value -> (new number, instruction it was made for)
        let mut copies: std::collections::HashMap<usize, (usize, usize)> = Default::default();
        for (i, ins) in instrs.iter().enumerate() {
            let mut args = Vec::with_capacity(ins.args.len());
            for &a in &ins.args {
                if !self.recomputes(a, i) {
                    args.push(new[a]);
                    continue;
                }
                let mut chain = Vec::new();
                self.chain(a, i, &mut chain);
                for &w in &chain {
                    if copies.get(&w).is_some_and(|&(_, at)| i <= at + LATE) {
                        continue;
                    }
                    let src = &instrs[self.def[w]];
                    let args = src
                        .args
                        .iter()
                        .map(|&x| match copies.get(&x) {
                            Some(&(n, at)) if chain.contains(&x) && i <= at + LATE => n,
                            _ => new[x],
                        })
                        .collect();
                    out.push(Instr {
                        op: src.op.clone(),
                        args,
                    });
                    copies.insert(w, (next, i));
                    next += 1;
                }
                // (the chain always ends with `a`; were it missing, the value itself is read,
                // alive longer but the same)
                args.push(copies.get(&a).map_or(new[a], |c| c.0));
            }
            out.push(Instr {
                op: ins.op.clone(),
                args,
            });
            for _ in 0..ins.op.results() {
                new.push(next);
                next += 1;
            }
        }
        (out, outputs.iter().map(|&o| new[o]).collect())
    }
}
