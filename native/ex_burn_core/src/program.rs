//! Programs: a flat SSA instruction list validated once and run many times. This is what the
//! Defn compiler sends in one NIF call; an eager op is the one-instruction case.
//!
//! Values are numbered: `0..inputs` are the inputs, then instruction `i` defines value
//! `inputs + i`. Values are dropped after their last use, so intermediates free their memory
//! while the program runs.

use crate::op::{self, Op};
use crate::{Device, Error, Result, Tensor};
use serde::Deserialize;

/// One instruction: an op applied to earlier values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Instr {
    /// The operation.
    pub op: Op,
    /// Value numbers of its inputs.
    #[serde(default)]
    pub args: Vec<usize>,
}

/// A program as sent by the compiler.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Program {
    /// Number of input tensors.
    pub inputs: usize,
    /// Instructions in execution order.
    pub instrs: Vec<Instr>,
    /// Value numbers returned, in order.
    pub outputs: Vec<usize>,
    /// For each value, the index of the instruction that uses it last (computed on validation).
    #[serde(skip)]
    last_use: Vec<usize>,
}

impl Program {
    /// A program of a single op on `arity` inputs.
    pub fn single(op: Op, arity: usize) -> Result<Program> {
        Program::new(
            arity,
            vec![Instr {
                op,
                args: (0..arity).collect(),
            }],
            vec![arity],
        )
    }

    /// Builds and validates a program.
    pub fn new(inputs: usize, instrs: Vec<Instr>, outputs: Vec<usize>) -> Result<Program> {
        let mut p = Program {
            inputs,
            instrs,
            outputs,
            last_use: vec![],
        };
        p.validate()?;
        Ok(p)
    }

    /// Checks that every instruction only reads values defined before it and every output
    /// exists; records last uses.
    pub fn validate(&mut self) -> Result<()> {
        let total = self.inputs + self.instrs.len();
        let mut last = vec![usize::MAX; total];
        for (i, ins) in self.instrs.iter().enumerate() {
            if let Some(n) = ins.op.arity() {
                if ins.args.len() != n {
                    return Err(Error::Argument(format!(
                        "instruction {i} ({}) has {} arguments, expected {n}",
                        ins.op.name(),
                        ins.args.len()
                    )));
                }
            }
            for &a in &ins.args {
                if a >= self.inputs + i {
                    return Err(Error::Argument(format!(
                        "instruction {i} reads value {a} before it is defined"
                    )));
                }
                last[a] = i;
            }
        }
        for &o in &self.outputs {
            if o >= total {
                return Err(Error::Argument(format!(
                    "output {o} is not a value of the program"
                )));
            }
            last[o] = usize::MAX - 1;
        }
        self.last_use = last;
        Ok(())
    }

    /// Runs the program. Creation ops place results on `device`.
    pub fn run(&self, inputs: Vec<Tensor>, device: Device) -> Result<Vec<Tensor>> {
        if inputs.len() != self.inputs {
            return Err(Error::Argument(format!(
                "program takes {} inputs, got {}",
                self.inputs,
                inputs.len()
            )));
        }
        let mut values: Vec<Option<Tensor>> = inputs.into_iter().map(Some).collect();
        values.resize(self.inputs + self.instrs.len(), None);
        for (i, ins) in self.instrs.iter().enumerate() {
            let args = ins
                .args
                .iter()
                .map(|&a| {
                    values[a]
                        .clone()
                        .ok_or_else(|| Error::Execution(format!("value {a} was freed")))
                })
                .collect::<Result<Vec<_>>>()?;
            let mut out = op::eval(&ins.op, &args, device)?;
            values[self.inputs + i] = out.pop();
            for &a in &ins.args {
                if self.last_use[a] == i {
                    values[a] = None;
                }
            }
        }
        self.outputs
            .iter()
            .map(|&o| {
                values[o]
                    .clone()
                    .ok_or_else(|| Error::Execution(format!("output {o} missing")))
            })
            .collect()
    }
}
