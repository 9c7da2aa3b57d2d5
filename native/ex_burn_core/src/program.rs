//! Programs: a flat SSA instruction list validated once and run many times. This is what the
//! Defn compiler sends in one NIF call; an eager op is the one-instruction case.
//!
//! Values are numbered: `0..inputs` are the inputs, then `inputs..inputs+consts` the constants
//! (tensors attached once with [`Program::with_constants`] and kept with the program), then
//! each instruction defines [`Op::results`] values in order (one for tensor ops; the state or
//! branch outputs of `while`/`cond`, whose bodies are sub-programs). Values are dropped after
//! their last use, so intermediates free their memory while the program runs. On the CPU,
//! runs of element-wise instructions execute cache-blocked (see `fuse`).

mod attention;
mod cse;
mod fold;
mod fuse;
mod grouped;
mod hoist;
mod literal;
mod reduce_fn;
mod remat;
mod small;
mod step;
mod values;

pub use attention::attention_steps;
pub use fuse::loop_runs;
pub use fuse::row_regions;
pub use literal::literal_steps;
pub use small::loops_run as small_loops_run;
pub use step::{eval, names, Step};

use crate::profile;
use crate::{Device, Error, Result, Tensor};
use serde::Deserialize;
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

/// Values handed to hooks, in execution order: `(hook id, values)`.
pub type HookLog = Vec<(u64, Vec<Tensor>)>;

/// Receives each hook's values as the program reaches it: `(hook id, values)`.
pub type HookSink = Box<dyn FnMut(u64, Vec<Tensor>) -> Result<()>>;

/// The program-only steps (see [`names`]) that `ExBurn.Defn.Lower` lowers from no Nx operation
/// of their name (the compiler builds loops, branches and hooks itself); the folds are Nx's.
pub const NOT_NX: [&str; 3] = ["while", "cond", "hook"];

thread_local! {
    /// Where the program running on this thread hands its hooks' values
    /// ([`Program::run_streaming`]), if anywhere.
    static HOOKS: RefCell<Option<HookSink>> = const { RefCell::new(None) };
}

/// One instruction: a step applied to earlier values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instr {
    /// The operation.
    pub op: Step,
    /// Value numbers of its inputs.
    #[serde(default)]
    pub args: Vec<usize>,
}

/// Constant tensors of a program (shared by its clones; equal when they are the same set).
#[derive(Debug, Clone, Default)]
pub struct Constants(Arc<Vec<Tensor>>);

impl PartialEq for Constants {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.0.is_empty() && other.0.is_empty())
    }
}

/// Programs of at most this many instructions (eager ops, small functions) get no variant
/// scheduled for memory: nothing in them is read late.
const SCHEDULED_FROM: usize = 16;

/// A program as decoded, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    inputs: usize,
    #[serde(default)]
    consts: usize,
    instrs: Vec<Instr>,
    outputs: Vec<usize>,
}

impl TryFrom<Spec> for Program {
    type Error = Error;

    fn try_from(s: Spec) -> Result<Program> {
        Program::assemble(s.inputs, s.consts, s.instrs, s.outputs)
    }
}

/// A program as sent by the compiler; decoding validates it (sub-programs included).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Spec")]
pub struct Program {
    /// Number of input tensors.
    pub inputs: usize,
    /// Number of constant tensors (attached with [`Program::with_constants`]; root programs
    /// only: sub-programs receive what they need as inputs).
    #[serde(default)]
    pub consts: usize,
    /// Instructions in execution order.
    pub instrs: Vec<Instr>,
    /// Value numbers returned, in order.
    pub outputs: Vec<usize>,
    /// The constant tensors.
    #[serde(skip)]
    constants: Constants,
    /// For each value, the index of the instruction that uses it last (computed on validation).
    #[serde(skip)]
    last_use: Vec<usize>,
    /// For each instruction of a run of element-wise instructions, where the run ends.
    #[serde(skip)]
    runs: Vec<Option<usize>>,
    /// For each instruction that may start a row region (see `fuse`), where the instructions
    /// that may belong to one end.
    #[serde(skip)]
    row_spans: Vec<Option<usize>>,
    /// For each `dot` whose only use is a matrix transpose, that transpose (see `fold`).
    #[serde(skip)]
    folds: Vec<Option<usize>>,
    /// The attentions the program computes as one step where a kernel exists (see
    /// `attention`).
    #[serde(skip)]
    attention: Box<attention::Plans>,
    /// For each value, the scalar literal that defines it, if one does (see `literal`).
    #[serde(skip)]
    literals: Vec<Option<literal::Literal>>,
    /// For each instruction, whether its value depends on no input (see `literal`).
    #[serde(skip)]
    input_free: Vec<bool>,
    /// The literals and other input-free values made so far, by device, kept across runs.
    #[serde(skip)]
    made: literal::Made,
    /// The program scheduled for memory (see [`Program::scheduled`]), made on first use:
    /// only where it runs (devices that fuse the recomputations) or is asked for.
    #[serde(skip)]
    scheduled: OnceLock<Option<Box<Program>>>,
    /// What [`Program::run_small`] keeps between runs.
    #[serde(skip)]
    small: Box<SmallRuns>,
}

/// What [`Program::run_small`] keeps: whether the program was found not for the
/// interpreter, and the code compiled for the last inputs. Clones start afresh; not part of a
/// program's equality.
#[derive(Default)]
struct SmallRuns {
    refused: std::sync::atomic::AtomicBool,
    kept: std::sync::Mutex<Option<small::Once>>,
}

impl SmallRuns {
    fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn refuse(&self) {
        self.refused
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clone for SmallRuns {
    fn clone(&self) -> SmallRuns {
        SmallRuns::default()
    }
}

impl PartialEq for SmallRuns {
    fn eq(&self, _: &SmallRuns) -> bool {
        true
    }
}

impl std::fmt::Debug for SmallRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallRuns")
            .field("refused", &self.refused())
            .finish_non_exhaustive()
    }
}

impl Program {
    /// A program of a single step on `arity` inputs, returning all of its results.
    pub fn single(op: impl Into<Step>, arity: usize) -> Result<Program> {
        let op = op.into();
        let results = op.results();
        Program::new(
            arity,
            vec![Instr {
                op,
                args: (0..arity).collect(),
            }],
            (arity..arity + results).collect(),
        )
    }

    /// Builds and validates a program without constants.
    pub fn new(inputs: usize, instrs: Vec<Instr>, outputs: Vec<usize>) -> Result<Program> {
        Program::assemble(inputs, 0, instrs, outputs)
    }

    /// Builds and validates a program, element-wise steps repeated on the same operands
    /// computed once (see `cse`).
    fn assemble(
        inputs: usize,
        consts: usize,
        instrs: Vec<Instr>,
        outputs: Vec<usize>,
    ) -> Result<Program> {
        let p = Program::assemble_as_is(inputs, consts, instrs, outputs)?;
        match cse::rewrite(&p.instrs, inputs + consts, &p.outputs) {
            Some((instrs, outputs)) => Program::assemble_as_is(inputs, consts, instrs, outputs),
            None => Ok(p),
        }
    }

    /// A validated program of exactly these parts (no constant tensors attached yet).
    fn assemble_as_is(
        inputs: usize,
        consts: usize,
        instrs: Vec<Instr>,
        outputs: Vec<usize>,
    ) -> Result<Program> {
        let mut p = Program {
            inputs,
            consts,
            instrs,
            outputs,
            constants: Constants::default(),
            last_use: vec![],
            runs: vec![],
            row_spans: vec![],
            folds: vec![],
            attention: Box::default(),
            literals: vec![],
            input_free: vec![],
            made: literal::Made::default(),
            scheduled: OnceLock::new(),
            small: Box::default(),
        };
        p.validate()?;
        Ok(p)
    }

    /// Attaches the constant tensors (as many as `consts` says) and validates the program.
    pub fn with_constants(mut self, constants: Vec<Tensor>) -> Result<Program> {
        if constants.len() != self.consts {
            return Err(Error::Argument(format!(
                "program declares {} constants, got {}",
                self.consts,
                constants.len()
            )));
        }
        self.constants = Constants(Arc::new(constants));
        // values kept from other constants (a clone's) do not hold for these
        self.made = literal::Made::default();
        self.validate()?;
        // a variant made before holds none of these constants
        self.scheduled = OnceLock::new();
        Ok(self)
    }

    /// Checks that every instruction only reads values defined before it, that sub-programs
    /// fit their instruction, and that every output exists; records last uses.
    pub fn validate(&mut self) -> Result<()> {
        if self.constants.0.len() != self.consts && !self.constants.0.is_empty() {
            return Err(Error::Argument("constants do not match the program".into()));
        }
        let mut defined = self.inputs + self.consts;
        let mut last = vec![usize::MAX; defined];
        for (i, ins) in self.instrs.iter_mut().enumerate() {
            if let Some(n) = ins.op.arity() {
                if ins.args.len() != n {
                    return Err(Error::Argument(format!(
                        "instruction {i} ({}) has {} arguments, expected {n}",
                        ins.op.name(),
                        ins.args.len()
                    )));
                }
            }
            validate_sub_programs(&mut ins.op, i)?;
            for &a in &ins.args {
                if a >= defined {
                    return Err(Error::Argument(format!(
                        "instruction {i} reads value {a} before it is defined"
                    )));
                }
                last[a] = i;
            }
            defined += ins.op.results();
            last.resize(defined, usize::MAX);
        }
        for &o in &self.outputs {
            if o >= defined {
                return Err(Error::Argument(format!(
                    "output {o} is not a value of the program"
                )));
            }
            last[o] = usize::MAX - 1;
        }
        let first = self.inputs + self.consts;
        self.runs = element_wise_runs(&self.instrs, &[]);
        self.row_spans = row_spans(&self.instrs, &[]);
        self.folds = fold::plan(&self.instrs, first, &self.outputs);
        self.literals = literal::plan(&self.instrs, first);
        let mut by_root = attention::plan(&self.instrs, first, &self.outputs, &self.literals);
        let mut inner = vec![false; self.instrs.len()];
        for (root, a) in by_root.iter_mut().enumerate() {
            if self.folds[root].is_some() {
                *a = None;
            }
            let Some(a) = a else { continue };
            for &i in &a.inner {
                inner[i] = true;
            }
            // what the skipped instructions read lives until the attention's `dot`
            for v in a.reads(&self.instrs, first) {
                if last[v] != usize::MAX - 1 {
                    last[v] = last[v].max(root);
                }
            }
        }
        let runs = element_wise_runs(&self.instrs, &inner);
        let rows = row_spans(&self.instrs, &inner);
        *self.attention = attention::Plans {
            by_root,
            inner,
            runs,
            rows,
        };
        self.last_use = last;
        self.input_free = literal::input_free(&self.instrs, self.inputs, self.consts);
        Ok(())
    }

    /// The variant of this program scheduled for memory, if it differs: contractions that
    /// only feed the outputs (weight gradients) moved to just after their operands exist
    /// (`program/hoist.rs`), and element-wise values read long after they are made recomputed
    /// there instead of being kept (`program/remat.rs`). [`Program::run`] runs it in place of
    /// this one on NVIDIA GPUs, where the recomputations join the fused kernels that read
    /// them, and on the CPU, where they join the row regions and element-wise runs (a GPT-2
    /// layer's forward and backward: peak memory 1.26 -> 0.97 GB); it computes the same
    /// operations on the same operands.
    pub fn scheduled(&self) -> Option<&Program> {
        self.scheduled
            .get_or_init(|| self.schedule_for_memory())
            .as_deref()
    }

    /// Makes the variant of [`Program::scheduled`]; `None` when neither rewrite changes
    /// anything (and for programs of at most [`SCHEDULED_FROM`] instructions).
    fn schedule_for_memory(&self) -> Option<Box<Program>> {
        if self.instrs.len() <= SCHEDULED_FROM {
            return None;
        }
        let first = self.inputs + self.consts;
        let hoisted = hoist::rewrite(&self.instrs, first, &self.outputs);
        let (instrs, outputs) = match &hoisted {
            Some((i, o)) => (i.as_slice(), o.as_slice()),
            None => (self.instrs.as_slice(), self.outputs.as_slice()),
        };
        let (instrs, outputs) = remat::rewrite(instrs, first, outputs).or(hoisted)?;
        // both rewrites keep every read after its definition; were a variant invalid, this
        // program (the same computation) would run instead
        // as it is: its recomputations repeat steps on purpose
        let made = Program::assemble_as_is(self.inputs, self.consts, instrs, outputs);
        debug_assert!(made.is_ok(), "invalid scheduled program: {made:?}");
        let mut p = made.ok()?;
        p.constants = self.constants.clone();
        // the variant runs as it is
        let _ = p.scheduled.set(None);
        Some(Box::new(p))
    }

    /// Runs the program like [`Program::run`] and also returns what its `hook` instructions
    /// saw, in execution order: once per loop iteration for a hook in a `while` body, only
    /// when taken for a hook in a `cond` branch. The values are those tensors themselves (no
    /// copies); the caller invokes the hooks afterwards.
    pub fn run_hooked(
        &self,
        inputs: Vec<Tensor>,
        device: Device,
    ) -> Result<(Vec<Tensor>, HookLog)> {
        let log = std::rc::Rc::new(RefCell::new(HookLog::new()));
        let into = log.clone();
        let sink: HookSink = Box::new(move |id, values| {
            into.borrow_mut().push((id, values));
            Ok(())
        });
        let out = self.run_streaming(inputs, device, sink)?;
        let log = log.take();
        Ok((out, log))
    }

    /// Runs the program like [`Program::run`], handing each hook's values to `sink` as soon as
    /// the program reaches the hook (once per loop iteration in a `while` body, only when taken
    /// in a `cond` branch), so that a caller can act on them while the program goes on. An
    /// error of `sink` stops the run.
    pub fn run_streaming(
        &self,
        inputs: Vec<Tensor>,
        device: Device,
        sink: HookSink,
    ) -> Result<Vec<Tensor>> {
        let outer = HOOKS.with(|h| h.replace(Some(sink)));
        let out = self.run(inputs, device);
        HOOKS.with(|h| *h.borrow_mut() = outer);
        out
    }

    /// Runs a straight-line program of small host tensors (at most 4,096 elements a value)
    /// once with the small-tensor interpreter of `while` loops, without a tensor per op: the
    /// values of [`Program::run`] (the interpreter computes each op as the op table does).
    /// `Ok(None)` when the program does not qualify (other ops or types, larger tensors,
    /// constants, a `u8` result); a program refused once is not tried again. The compiled
    /// code is kept for the next run on inputs of the same types and shapes (a run that finds
    /// it in use by another thread compiles its own).
    pub fn run_small(&self, inputs: &[Tensor], device: Device) -> Result<Option<Vec<Tensor>>> {
        // (before the scan of the instructions: GPU programs are never for the interpreter)
        if !device.is_host() || self.small.refused() || self.consts != 0 || !self.straight_line() {
            return Ok(None);
        }
        let Some(code) = step::small_code(self) else {
            self.small.refuse();
            return Ok(None);
        };
        let mut own = None;
        let mut held = self.small.kept.try_lock().ok();
        let kept = match held.as_deref_mut() {
            Some(k) => k,
            None => &mut own,
        };
        let out = small::once(&code, inputs, device, kept)?;
        if out.is_none() {
            self.small.refuse();
        }
        Ok(out)
    }

    /// Whether every step is a tensor op: no loops, branches, hooks or folds of a function,
    /// so that the work of a run is fixed by the inputs' shapes.
    pub fn straight_line(&self) -> bool {
        self.instrs.iter().all(|i| matches!(i.op, Step::Op(_)))
    }

    /// The devices of the program's constant tensors (a run moves them to its device).
    pub fn constant_devices(&self) -> Vec<Device> {
        self.constants.0.iter().map(Tensor::device).collect()
    }

    /// Runs the program. Creation ops place results on `device`; constants move there.
    pub fn run(&self, inputs: Vec<Tensor>, device: Device) -> Result<Vec<Tensor>> {
        if inputs.len() != self.inputs {
            return Err(Error::Argument(format!(
                "program takes {} inputs, got {}",
                self.inputs,
                inputs.len()
            )));
        }
        if self.constants.0.len() != self.consts {
            return Err(Error::Argument(format!(
                "program needs {} constants; build it with its constants",
                self.consts
            )));
        }
        // on devices that fuse the recomputations (into kernels, or row by row on the CPU), the
        // variant scheduled for memory
        if fuse::regions_on(device) {
            if let Some(r) = self.scheduled() {
                return r.run(inputs, device);
            }
        }
        profile::on_device(device);
        let whole = profile::start();
        let t = profile::start();
        let mut values: Vec<Option<Tensor>> = inputs.into_iter().map(Some).collect();
        for c in self.constants.0.iter() {
            values.push(Some(c.to_device(device)?));
        }
        profile::record(t, || "(constants to device)".into());
        // transposes already computed by the dot that feeds them
        let mut folded: Vec<bool> = Vec::new();
        // no row region starts before this instruction
        let mut rows_from = if fuse::regions_on(device) {
            0
        } else {
            usize::MAX
        };
        // no element-wise run is tried before this instruction
        let mut runs_from = 0;
        // where whole runs with views may be tried again (one attempt per run)
        let mut whole_from = 0;
        // attentions run as one step (their instructions skipped) where a kernel exists
        let attend = attention::fused_on(device) && self.attention.inner.contains(&true);
        let (runs, row_spans) = if attend {
            (&self.attention.runs, &self.attention.rows)
        } else {
            (&self.runs, &self.row_spans)
        };
        let mut i = 0;
        while i < self.instrs.len() {
            crate::cancel::check()?;
            if attend && self.attention.inner[i] {
                values.extend(std::iter::repeat_n(None, self.instrs[i].op.results()));
                i += 1;
                continue;
            }
            if i > 0 {
                // the device starts what the last step queued while this one is issued
                crate::memory::start_queued(device);
            }
            if attend {
                if let Some(a) = &self.attention.by_root[i] {
                    let t = profile::start();
                    self.run_attention(i, a, &mut values, device)?;
                    profile::record(t, || "(attention)".into());
                    i += 1;
                    continue;
                }
            }
            if let Some(end) = span_at(row_spans, i, rows_from) {
                let t = profile::start();
                match self.run_rows(i, end, &mut values, device)? {
                    Ok(end) => {
                        profile::record(t, || "(row region)".into());
                        i = end;
                        continue;
                    }
                    Err(skip) => rows_from = i.saturating_add(skip),
                }
            }
            if let Some(end) = span_at(runs, i, runs_from) {
                let t = profile::start();
                // (not where a row region may start inside the run and go on after it)
                let region_after = |end: usize| {
                    (i + 1..end).any(|j| span_at(row_spans, j, rows_from).is_some_and(|e| e > end))
                };
                // the run with its views where the device's kernels may read them, else
                // (and on the CPU) the element-wise instructions before the first view
                let cut = (i..end)
                    .find(|&j| fuse::view(&self.instrs[j].op))
                    .unwrap_or(end);
                if cut < end && i >= whole_from && device != Device::Cpu {
                    // up to the first view read after the run (the op table makes it
                    // without moving data; a kernel would write it out)
                    let live = self.live_after(values.len(), end - i, end);
                    let whole = (cut..end)
                        .find(|&j| live[j - i] && fuse::view(&self.instrs[j].op))
                        .unwrap_or(end);
                    // (and not ending with views)
                    let whole = (cut..whole)
                        .rev()
                        .find(|&j| !fuse::view(&self.instrs[j].op))
                        .map_or(cut, |j| j + 1);
                    if whole > cut && !region_after(whole) {
                        if self.run_fused(i, whole, &mut values, device)? {
                            profile::record(t, || "(fused run)".into());
                            i = whole;
                            continue;
                        }
                        whole_from = end;
                    }
                }
                if cut - i >= 2 || (cut > i && fuse::worth_alone(&self.instrs[i].op)) {
                    if self.run_fused(i, cut, &mut values, device)? {
                        profile::record(t, || "(fused run)".into());
                        i = cut;
                        continue;
                    }
                    if !region_after(cut) && self.run_grouped(i..cut, &mut values, device)? {
                        i = cut;
                        continue;
                    }
                }
                // one attempt per run (a row region may end inside it: the rest is one)
                runs_from = runs_from.max(cut);
            }
            let ins = &self.instrs[i];
            let fold = match self.folds[i] {
                // (a value made once and kept is not folded)
                Some(j) if self.input_free.get(i) != Some(&true) => {
                    fold::swapped(&ins.op, &operands(ins, &values)?).map(|f| (j, f))
                }
                _ => None,
            };
            let out = if folded.get(i) == Some(&true) {
                // the dot that fed this transpose computed it already
                operands(ins, &values)?
            } else if let Some((j, (op, swapped))) = fold {
                folded.resize(self.instrs.len(), false);
                folded[j] = true;
                let t = profile::start();
                let out = crate::op::eval(&op, &swapped, device)?;
                profile::record(t, || format!("{} (transpose folded)", op.name()));
                out
            } else {
                self.eval_one(i, &mut values, device)?
            };
            if out.len() != ins.op.results() {
                return Err(Error::Execution(format!(
                    "{} gave {} results, expected {}",
                    ins.op.name(),
                    out.len(),
                    ins.op.results()
                )));
            }
            values.extend(out.into_iter().map(Some));
            self.free_last_uses(i..i + 1, &mut values);
            i += 1;
        }
        let outputs = self
            .outputs
            .iter()
            .map(|&o| {
                values[o]
                    .clone()
                    .ok_or_else(|| Error::Execution(format!("output {o} missing")))
            })
            .collect();
        profile::run_finished(whole);
        outputs
    }
}

impl Program {
    /// Runs instructions `start..end` (element-wise, one result each) cache-blocked when their
    /// operands allow it; returns whether it did.
    fn run_fused(
        &self,
        start: usize,
        end: usize,
        values: &mut Vec<Option<Tensor>>,
        device: Device,
    ) -> Result<bool> {
        let first = values.len();
        let live = self.live_after(first, end - start, end);
        let run = fuse::Run {
            instrs: &self.instrs[start..end],
            first,
            literals: &self.literals,
        };
        let literal = |k: usize| self.literal_of(start + k, device);
        match fuse::execute(&run, values, &live, device, &literal)? {
            Some(outs) => {
                values.extend(outs);
                self.free_last_uses(start..end, values);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Runs the row region that starts at instruction `start` (within `start..span`) as one
    /// kernel when one fits there: `Ok(end)`, the instruction after it, or `Err(n)`: no
    /// region starts at the next `n` instructions.
    fn run_rows(
        &self,
        start: usize,
        span: usize,
        values: &mut Vec<Option<Tensor>>,
        device: Device,
    ) -> Result<std::result::Result<usize, usize>> {
        let first = values.len();
        let live = |len: usize| self.live_after(first, len, start + len);
        // values of this run last read by the region's instructions
        let own = self.inputs + self.consts;
        let dies =
            |a: usize, len: usize| a >= own && (start..start + len).contains(&self.last_use[a]);
        let literal = |k: usize| self.literal_of(start + k, device);
        let run = fuse::Run {
            instrs: &self.instrs[start..span],
            first,
            literals: &self.literals,
        };
        let region = fuse::rows(&run, values, &live, &dies, &literal, device)?;
        Ok(match region {
            Ok(outs) => {
                let end = start + outs.len();
                values.extend(outs);
                self.free_last_uses(start..end, values);
                Ok(end)
            }
            Err(skip) => Err(skip),
        })
    }

    /// Runs the attention that ends at instruction `root` (its other instructions were
    /// skipped): as one step where the kernel takes the operands, else those instructions op
    /// by op and then `root`. Frees what only the attention read.
    fn run_attention(
        &self,
        root: usize,
        a: &attention::Attention,
        values: &mut Vec<Option<Tensor>>,
        device: Device,
    ) -> Result<()> {
        let first = self.inputs + self.consts;
        let value = |v: usize| -> Result<Tensor> {
            values
                .get(v)
                .cloned()
                .flatten()
                .ok_or_else(|| Error::Execution(format!("value {v} was freed")))
        };
        let mut steps = Vec::with_capacity(a.steps.len());
        let mut preds = Vec::new();
        for step in &a.steps {
            let (c, pred) = match *step {
                attention::Scale::Divide(c) | attention::Scale::Multiply(c) => (c, None),
                attention::Scale::Select { pred, fill } => (fill, Some(value(pred)?)),
            };
            // the literal's value as its tensor stores it, without reading the tensor back
            // (on a GPU that would wait for the device)
            let stored = self.literals.get(c).copied().flatten();
            let scalar = match stored.and_then(|(s, dtype)| s.stored_as(dtype)) {
                Some(x) => x as f32,
                None => attention::scalar_f32(&value(c)?)?,
            };
            steps.push((*step, scalar));
            preds.push(pred);
        }
        let (q, k, v) = (value(a.q)?, value(a.k)?, value(a.v)?);
        let ops = attention::Operands {
            q: &q,
            k: &k,
            v: &v,
            steps: steps
                .iter()
                .zip(&preds)
                .map(|(&(s, c), p)| (s, p.as_ref(), c))
                .collect(),
        };
        let fused = attention::run(a, &ops, device)?;
        drop(ops);
        let out = match fused {
            Some(t) => t,
            None => {
                // op by op: the skipped instructions, then the final `dot`
                for &j in &a.inner {
                    let ins = &self.instrs[j];
                    let out = eval(&ins.op, &operands(ins, values)?, device)?
                        .pop()
                        .ok_or_else(|| {
                            Error::Execution(format!("{} gave no result", ins.op.name()))
                        })?;
                    let at = attention::value_of(&self.instrs, first, j);
                    values[at] = Some(out);
                }
                let ins = &self.instrs[root];
                eval(&ins.op, &operands(ins, values)?, device)?
                    .pop()
                    .ok_or_else(|| Error::Execution("dot gave no result".into()))?
            }
        };
        values.push(Some(out));
        // the attention's own values, and what it alone read last
        for &j in &a.inner {
            values[attention::value_of(&self.instrs, first, j)] = None;
        }
        for &j in a.inner.iter().chain(std::iter::once(&root)) {
            for &r in &self.instrs[j].args {
                if self.last_use[r] == root {
                    values[r] = None;
                }
            }
        }
        Ok(())
    }

    /// The results of instruction `i` on its operands among `values`: a value that depends on
    /// no input is made once per device and kept, arithmetic with a literal operand takes the
    /// literal's value from the host, anything else is evaluated on `device`.
    fn eval_one(
        &self,
        i: usize,
        values: &mut [Option<Tensor>],
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let ins = &self.instrs[i];
        if self.input_free.get(i) == Some(&true) {
            let t = profile::start();
            let kept = self.made.get_with(i, device, || {
                eval(&ins.op, &operands(ins, values)?, device)?
                    .pop()
                    .ok_or_else(|| Error::Execution(format!("{} gave no result", ins.op.name())))
            })?;
            profile::record(t, || format!("{} (kept)", ins.op.name()));
            return Ok(vec![kept]);
        }
        let args = operands(ins, values)?;
        self.release_target(i, values);
        if let Some(op) = ins.op.as_op() {
            let t = profile::start();
            let out = literal::arithmetic(op, &ins.args, &args, &self.literals)
                .map_err(|e| e.in_op(&op.name()))?;
            if let Some(out) = out {
                profile::record(t, || format!("{} (literal)", op.name()));
                return Ok(vec![out]);
            }
        }
        let t = profile::start();
        let out = eval(&ins.op, &args, device)?;
        // on the device, by result shape (where a program's small kernels come from)
        profile::note_detail(|| format!("{:?}", out.first().map(Tensor::shape).unwrap_or(&[])));
        profile::record(t, || ins.op.name());
        Ok(out)
    }

    /// After the operands of instruction `i` are taken: when it is a `put_slice` that reads its
    /// target for the last time (and only as its target), drops the program's own hold on the
    /// target, so the operand list is the only holder and the device kernels may write the
    /// update into the target's buffer instead of a copy of it where nothing else holds that
    /// buffer (a loop's state, such as a generation's key/value cache written once per layer
    /// and token). The value is not read again: its last use is `i`.
    fn release_target(&self, i: usize, values: &mut [Option<Tensor>]) {
        let ins = &self.instrs[i];
        if !matches!(ins.op, Step::Op(crate::Op::PutSlice { .. })) {
            return;
        }
        if let Some((&a, rest)) = ins.args.split_first() {
            if self.last_use.get(a) == Some(&i) && !rest.contains(&a) {
                if let Some(slot) = values.get_mut(a) {
                    *slot = None;
                }
            }
        }
    }

    /// For the `len` values from number `first`, whether an instruction from `end` on (or the
    /// outputs) reads them.
    fn live_after(&self, first: usize, len: usize, end: usize) -> Vec<bool> {
        (0..len)
            .map(|k| {
                let last = self.last_use[first + k];
                last != usize::MAX && last >= end
            })
            .collect()
    }

    /// The kept tensor of literal instruction `i` on `device`.
    fn literal_of(&self, i: usize, device: Device) -> Result<Tensor> {
        let op = self.instrs[i]
            .op
            .as_op()
            .ok_or_else(|| Error::Execution("a literal is not an op".into()))?;
        self.made.get(i, op, device)
    }

    /// Drops the values whose last use is one of the instructions in `range`.
    fn free_last_uses(&self, range: std::ops::Range<usize>, values: &mut [Option<Tensor>]) {
        for i in range.clone() {
            for &a in &self.instrs[i].args {
                if range.contains(&self.last_use[a]) {
                    values[a] = None;
                }
            }
        }
    }
}

/// The operands of `ins` among `values`.
fn operands(ins: &Instr, values: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    ins.args
        .iter()
        .map(|&a| {
            values[a]
                .clone()
                .ok_or_else(|| Error::Execution(format!("value {a} was freed")))
        })
        .collect()
}

/// The end of the span starting at `i` in `table` (see `runs`, `row_spans`), where `i` is not
/// before `from`.
fn span_at(table: &[Option<usize>], i: usize, from: usize) -> Option<usize> {
    table.get(i).copied().flatten().filter(|_| i >= from)
}

/// For each element-wise instruction from which two or more element-wise instructions follow
/// (or one that the op table computes in several passes), where they end; instructions marked
/// in `barriers` belong to no run. Views (broadcasts, reshapes) followed by an element-wise
/// instruction belong to runs too: devices whose kernels fuse read them inside the run's
/// kernel, the CPU ends its runs before them. The run's first
/// instruction starts it; a later one does when a row region ends inside the run.
fn element_wise_runs(instrs: &[Instr], barriers: &[bool]) -> Vec<Option<usize>> {
    let mut runs = vec![None; instrs.len()];
    let mut end = instrs.len();
    // whether an element-wise instruction lies in `i + 1..end` (a run does not end with views)
    let mut maps = false;
    for i in (0..instrs.len()).rev() {
        let op = &instrs[i].op;
        let view = fuse::view(op) && maps;
        if !(fuse::elementwise(op) || view) || barriers.get(i) == Some(&true) {
            (end, maps) = (i, false);
            continue;
        }
        maps |= !view;
        if end - i >= 2 || fuse::worth_alone(op) {
            runs[i] = Some(end);
        }
    }
    runs
}

/// For each instruction of a stretch of instructions that row regions may hold, where the
/// stretch ends, if a reduction follows it in the stretch; instructions marked in `barriers`
/// belong to no stretch.
fn row_spans(instrs: &[Instr], barriers: &[bool]) -> Vec<Option<usize>> {
    let mut spans = vec![None; instrs.len()];
    let (mut end, mut reduces) = (instrs.len(), false);
    for i in (0..instrs.len()).rev() {
        if !fuse::row_capable(&instrs[i].op) || barriers.get(i) == Some(&true) {
            (end, reduces) = (i, false);
            continue;
        }
        reduces |= fuse::reduces(&instrs[i].op);
        if reduces {
            spans[i] = Some(end);
        }
    }
    spans
}

/// Validates the sub-programs of a control-flow instruction against their shape.
fn validate_sub_programs(op: &mut Step, i: usize) -> Result<()> {
    let bad = |msg: String| Err(Error::Argument(format!("instruction {i}: {msg}")));
    match op {
        Step::While { cond, body, state } => {
            cond.validate()?;
            body.validate()?;
            if cond.inputs != body.inputs || *state > body.inputs {
                return bad("while condition and body must take the same inputs".into());
            }
            if cond.outputs.len() != 1 || body.outputs.len() != *state {
                return bad(format!(
                    "while condition must return 1 value and the body {state}"
                ));
            }
            no_constants(&[cond, body], i)
        }
        Step::Cond { branches } => {
            for b in branches.iter_mut() {
                b.validate()?;
            }
            let Some(first) = branches.first() else {
                return bad("cond needs at least one branch".into());
            };
            let (n_in, n_out) = (first.inputs, first.outputs.len());
            if branches
                .iter()
                .any(|b| b.inputs != n_in || b.outputs.len() != n_out)
            {
                return bad("cond branches must take and return the same number of values".into());
            }
            no_constants(&branches.iter().collect::<Vec<_>>(), i)
        }
        Step::Reduce { body, .. } | Step::WindowReduce { body, .. } => {
            body.validate()?;
            if body.inputs != 2 || body.outputs.len() != 1 {
                return bad("a fold body takes (element, acc) and returns one value".into());
            }
            no_constants(&[body], i)
        }
        _ => Ok(()),
    }
}

fn no_constants(programs: &[&Program], i: usize) -> Result<()> {
    if programs.iter().any(|p| p.consts > 0) {
        return Err(Error::Argument(format!(
            "instruction {i}: sub-programs take constants as inputs, not as constants"
        )));
    }
    Ok(())
}

/// Hands the values of hook `id` to the sink of the running program.
pub(crate) fn hook(id: u64, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    HOOKS.with(|h| match h.borrow_mut().as_mut() {
        Some(sink) => sink(id, inputs.to_vec()).map(|()| vec![]),
        None => Err(Error::Unsupported(
            "hook runs only inside a program run with Program::run_hooked or run_streaming".into(),
        )),
    })
}
