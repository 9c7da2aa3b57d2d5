//! Element-wise runs whose instructions compute tensors of several shapes, run shape by shape.
//!
//! An optimizer written over a map of parameters (Polaris's Adam: each of its steps mapped
//! over every parameter in turn, the step's scalars computed in between) gives one long run
//! of element-wise instructions that interleaves the parameters' updates. The run cannot be
//! one kernel (its tensors do not broadcast to one shape), and it used to run op by op: a GPT-2
//! small step with AdamW ran ~4,000 small kernels for its update. Here such a run is split by
//! the shape each instruction computes: the scalars first, then every other shape as a run of
//! its own (one kernel on GPUs that fuse, chunk loops on the CPU), in an order that respects
//! the dependencies between them. Each instruction computes the same operation on the same
//! operands as op by op, so results do not change.

use super::{fuse, Instr, Program};
use crate::{Device, Error, Result, Tensor};
use std::collections::HashMap;

impl Program {
    /// Runs the element-wise instructions of `span` (a run that did not fuse whole) group by
    /// group of one result shape; `Ok(false)`, nothing done, when they have one shape.
    pub(super) fn run_grouped(
        &self,
        span: std::ops::Range<usize>,
        values: &mut Vec<Option<Tensor>>,
        device: Device,
    ) -> Result<bool> {
        let (start, end) = (span.start, span.end);
        let first = values.len();
        let instrs = &self.instrs[start..end];
        let len = instrs.len();
        // the shape each instruction computes: its operands' broadcast shape
        let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(len);
        for ins in instrs {
            let mut shape = Vec::new();
            for &a in &ins.args {
                let of: Option<&[usize]> = if a >= first {
                    shapes.get(a - first).map(Vec::as_slice)
                } else {
                    values.get(a).and_then(Option::as_ref).map(|t| t.shape())
                };
                let Some(of) = of else {
                    return Ok(false);
                };
                match crate::op::util::broadcast_shape(&shape, of) {
                    Ok(s) => shape = s,
                    Err(_) => return Ok(false),
                }
            }
            shapes.push(shape);
        }
        let (group_of, keys) = groups(&shapes);
        if keys.len() < 2 {
            return Ok(false);
        }
        let Some(order) = order(instrs, first, &group_of, keys.len()) else {
            return Ok(false);
        };
        let live = self.live_after(first, len, end);
        // a result is kept when read after the run or by another group
        let mut needed = live.clone();
        for (k, ins) in instrs.iter().enumerate() {
            for &a in ins.args.iter().filter(|&&a| a >= first) {
                if group_of[a - first] != group_of[k] {
                    needed[a - first] = true;
                }
            }
        }
        values.resize(first + len, None);
        // a value whose last read is in the run is dropped once its readers here have run, as
        // op by op in program order would (the groups run in another order)
        let mut left: HashMap<usize, usize> = HashMap::new();
        for ins in instrs {
            for &a in &ins.args {
                *left.entry(a).or_default() += 1;
            }
        }
        let mut ran = |k: usize, values: &mut Vec<Option<Tensor>>| {
            if !live[k] && !left.contains_key(&(first + k)) {
                values[first + k] = None;
            }
            for &a in &instrs[k].args {
                let n = left.entry(a).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 && (start..end).contains(&self.last_use[a]) {
                    values[a] = None;
                }
            }
        };
        for g in order {
            let members: Vec<usize> = (0..len).filter(|&k| group_of[k] == g).collect();
            let scalar = keys[g].is_empty();
            let t = crate::profile::start();
            if !scalar && self.run_group(start, first, &members, &needed, values, device)? {
                crate::profile::record(t, || "(fused run, one shape of a run)".into());
                members.iter().for_each(|&k| ran(k, values));
                continue;
            }
            for &k in &members {
                let mut out = self.eval_one(start + k, values, device)?;
                let v = out.pop().filter(|_| out.is_empty()).ok_or_else(|| {
                    Error::Execution(format!("{} gave no single result", instrs[k].op.name()))
                })?;
                values[first + k] = Some(v);
                ran(k, values);
            }
        }
        Ok(true)
    }

    /// Runs the instructions `members` of the run at `start` (values from `first`) as one
    /// fused run, their own results renumbered after the run's; whether it did.
    fn run_group(
        &self,
        start: usize,
        first: usize,
        members: &[usize],
        needed: &[bool],
        values: &mut [Option<Tensor>],
        device: Device,
    ) -> Result<bool> {
        if members.len() < 2 {
            return Ok(false);
        }
        let base = values.len();
        let mut local_of = vec![usize::MAX; needed.len()];
        for (j, &k) in members.iter().enumerate() {
            local_of[k] = j;
        }
        let instrs: Vec<Instr> = members
            .iter()
            .map(|&k| {
                let ins = &self.instrs[start + k];
                let args = ins
                    .args
                    .iter()
                    .map(|&a| match a.checked_sub(first).map(|k| local_of[k]) {
                        Some(j) if j != usize::MAX => base + j,
                        _ => a,
                    })
                    .collect();
                Instr {
                    op: ins.op.clone(),
                    args,
                }
            })
            .collect();
        let run = fuse::Run {
            instrs: &instrs,
            first: base,
            literals: &self.literals,
        };
        let live: Vec<bool> = members.iter().map(|&k| needed[k]).collect();
        let literal = |j: usize| self.literal_of(start + members[j], device);
        match fuse::execute(&run, values, &live, device, &literal)? {
            Some(out) => {
                for (&k, v) in members.iter().zip(out) {
                    values[first + k] = v;
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Each instruction's group (one per distinct shape, numbered in order of first appearance)
/// and the groups' shapes.
fn groups(shapes: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut keys: Vec<Vec<usize>> = Vec::new();
    let group_of = shapes
        .iter()
        .map(|s| match keys.iter().position(|k| k == s) {
            Some(g) => g,
            None => {
                keys.push(s.clone());
                keys.len() - 1
            }
        })
        .collect();
    (group_of, keys)
}

/// An order of the groups in which each comes after the groups it reads (scalars first, then
/// by first appearance); `None` if there is none (groups that read each other).
fn order(instrs: &[Instr], first: usize, group_of: &[usize], groups: usize) -> Option<Vec<usize>> {
    let mut reads = vec![vec![false; groups]; groups];
    for (k, ins) in instrs.iter().enumerate() {
        for &a in ins.args.iter().filter(|&&a| a >= first) {
            let (g, h) = (group_of[k], group_of[a - first]);
            if g != h {
                reads[g][h] = true;
            }
        }
    }
    let mut done = vec![false; groups];
    let mut out = Vec::with_capacity(groups);
    while out.len() < groups {
        let next =
            (0..groups).find(|&g| !done[g] && (0..groups).all(|h| !reads[g][h] || done[h]))?;
        done[next] = true;
        out.push(next);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(args: Vec<usize>) -> Instr {
        Instr {
            op: crate::op::Op::Unary(crate::op::Unary::Neg).into(),
            args,
        }
    }

    #[test]
    fn groups_follow_what_they_read() {
        // values 0 and 1 outside the run; the run starts at value 2
        let shapes = vec![vec![4, 3], vec![], vec![3], vec![4, 3], vec![3]];
        let (group_of, keys) = groups(&shapes);
        assert_eq!(group_of, vec![0, 1, 2, 0, 2]);
        assert_eq!(keys.len(), 3);
        // [4, 3] reads [3] (value 4); [3] reads the scalar (value 3)
        let instrs = vec![
            ins(vec![0]),
            ins(vec![1]),
            ins(vec![3]),
            ins(vec![2, 4]),
            ins(vec![4]),
        ];
        assert_eq!(order(&instrs, 2, &group_of, 3), Some(vec![1, 2, 0]));
        // two groups reading each other have no order
        let instrs = vec![ins(vec![4]), ins(vec![]), ins(vec![2])];
        assert_eq!(order(&instrs, 2, &[0, 1, 1], 2), None);
    }
}
