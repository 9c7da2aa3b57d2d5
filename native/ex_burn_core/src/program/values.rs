//! Who defines and who reads each value of a program: what the plans and rewrites that
//! replace or move instructions need (`fold`, `attention`, `hoist`, `remat`).

use super::Instr;

/// The definitions and reads of a program's values (numbered as in [`super::Program`]).
pub(super) struct Values {
    /// For each value, the instruction that defines it (`usize::MAX` for inputs and
    /// constants).
    pub def: Vec<usize>,
    /// For each instruction, the number of its first value.
    pub first_of: Vec<usize>,
    /// For each value, the instructions that read it, in order (one reading it twice appears
    /// twice).
    pub reads: Vec<Vec<usize>>,
    /// Whether each value is a program output.
    pub output: Vec<bool>,
}

impl Values {
    /// The values of `instrs`, whose first value is number `first` (after the inputs and
    /// constants), with `outputs` returned. Arguments and outputs are value numbers the
    /// program validated.
    pub fn of(instrs: &[Instr], first: usize, outputs: &[usize]) -> Values {
        let mut def = vec![usize::MAX; first];
        let mut first_of = Vec::with_capacity(instrs.len());
        for (i, ins) in instrs.iter().enumerate() {
            first_of.push(def.len());
            def.resize(def.len() + ins.op.results(), i);
        }
        let mut reads = vec![Vec::new(); def.len()];
        for (i, ins) in instrs.iter().enumerate() {
            for &a in &ins.args {
                if let Some(r) = reads.get_mut(a) {
                    r.push(i);
                }
            }
        }
        let mut output = vec![false; def.len()];
        for &o in outputs {
            if let Some(x) = output.get_mut(o) {
                *x = true;
            }
        }
        Values {
            def,
            first_of,
            reads,
            output,
        }
    }

    /// How often each value is read, outputs counting twice (so that a value returned is
    /// never "read once"): for the plans that rewrite a value's only use.
    pub fn uses(&self) -> Vec<usize> {
        self.reads
            .iter()
            .zip(&self.output)
            .map(|(r, &o)| r.len() + 2 * usize::from(o))
            .collect()
    }
}
