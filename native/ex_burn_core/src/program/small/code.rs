//! The interpreter's instructions and their element functions over host buffers.
//!
//! Every value of a loop has a slot in one of two arenas: f32 values, or integers (every
//! integer type up to 32 bits and s64, held as `i64` already wrapped to their type, unsigned
//! ones non-negative). An instruction reads slots defined before it and writes its own, so
//! the slots it reads never overlap the one it writes.

use super::native::Native;
use crate::kernels::Map;
use crate::op::f32_blocks::{self, BlockFn, Read, BLOCK};
use crate::op::f32_map::{run_step_any, Arg};
use crate::op::{Compare, Logical};
use crate::DType;

/// Elements between the starts of two slots, at least (four AVX-512 vectors of f32): a whole
/// number of the block kernels' blocks, so that a kernel's rounded-up blocks stay in the slot.
const SPACING: usize = 64;
const _: () = assert!(SPACING.is_multiple_of(BLOCK));

/// Where a value lives in its arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// First element.
    pub off: usize,
    /// Number of elements.
    pub len: usize,
}

/// A value of either arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Src {
    /// f32 values.
    F(Slot),
    /// Integer values.
    I(Slot),
}

impl Src {
    /// Its slot.
    pub fn slot(self) -> Slot {
        match self {
            Src::F(s) | Src::I(s) => s,
        }
    }
}

/// The two arenas.
#[derive(Debug, Clone, Default)]
pub struct Regs {
    /// f32 values.
    pub f: Vec<f32>,
    /// Integer values.
    pub i: Vec<i64>,
}

impl Regs {
    /// A new slot of `len` elements for values of the given arena. Slots start [`SPACING`]
    /// elements apart at least, so that the vectorised loops' run-time overlap checks between
    /// an instruction's operands (below) and its result pass and the vector loop runs.
    pub fn alloc(&mut self, float: bool, len: usize) -> Src {
        let room = len.div_ceil(SPACING).max(1) * SPACING;
        if float {
            let off = self.f.len();
            self.f.resize(off + room, 0.0);
            Src::F(Slot { off, len })
        } else {
            let off = self.i.len();
            self.i.resize(off + room, 0);
            Src::I(Slot { off, len })
        }
    }

    /// Whether element 0 of `s` is not zero (NaN counts as not zero, as in Nx).
    pub fn truthy(&self, s: Src) -> bool {
        match s {
            Src::F(s) => self.f[s.off] != 0.0,
            Src::I(s) => self.i[s.off] != 0,
        }
    }

    /// The values of an f32 slot.
    pub fn f32s(&self, s: Slot) -> &[f32] {
        &self.f[s.off..s.off + s.len]
    }

    /// The values of an integer slot.
    pub fn ints(&self, s: Slot) -> &[i64] {
        &self.i[s.off..s.off + s.len]
    }
}

/// Integer arithmetic of two operands, wrapping to the result type.
#[derive(Debug, Clone, Copy)]
pub enum IntOp {
    Add,
    Sub,
    Mul,
    Min,
    Max,
    And,
    Or,
    Xor,
}

/// Integer functions of one operand, wrapping to the result type.
#[derive(Debug, Clone, Copy)]
pub enum IntUnary {
    Neg,
    Abs,
    /// A cast between integer types.
    Cast,
}

/// Reductions of a whole integer value to one element.
#[derive(Debug, Clone, Copy)]
pub enum IntReduce {
    Sum,
    Product,
    Max,
    Min,
}

/// One instruction. `out` is always a slot this instruction defines; operands of one
/// element broadcast, others have `out`'s length.
#[derive(Debug, Clone)]
pub enum Ins {
    /// An f32 map by its block kernel (`op::f32_blocks`), chosen for the operands' layout:
    /// what [`Ins::map`] makes of a map that has one.
    Block {
        k: BlockFn,
        /// The map the kernel computes.
        m: Map,
        a: Slot,
        b: Option<Slot>,
        out: Slot,
    },
    /// An f32 map (the op table's element functions, `fuse::map32`).
    Map {
        m: Map,
        a: Slot,
        b: Option<Slot>,
        out: Slot,
    },
    /// f32 `select`: `t` where `p` is not zero (NaN included), else `f`.
    Select { p: Src, t: Slot, f: Slot, out: Slot },
    /// Integer `select`.
    SelectI { p: Src, t: Slot, f: Slot, out: Slot },
    /// Integers to f32, as `Tensor::cast` converts them (through f64).
    ToF32 { a: Slot, out: Slot },
    /// Integer arithmetic, wrapping to `to`.
    Int {
        op: IntOp,
        a: Slot,
        b: Slot,
        out: Slot,
        to: DType,
    },
    /// An integer function of one operand, wrapping to `to`.
    IntUnary {
        op: IntUnary,
        a: Slot,
        out: Slot,
        to: DType,
    },
    /// An IEEE comparison of f32 values, giving 0 or 1.
    CmpF {
        c: Compare,
        a: Slot,
        b: Slot,
        out: Slot,
    },
    /// A comparison of integers (their exact values), giving 0 or 1.
    CmpI {
        c: Compare,
        a: Slot,
        b: Slot,
        out: Slot,
    },
    /// A logical operation on "not zero" of any values, giving 0 or 1.
    Logical {
        op: Logical,
        a: Src,
        b: Src,
        out: Slot,
    },
    /// The f32 sum of a value, accumulated in f64 and rounded once (`op::sum32`).
    SumF { a: Slot, out: Slot },
    /// An integer reduction of a value to one element, wrapping to `to`.
    ReduceI {
        op: IntReduce,
        a: Slot,
        out: Slot,
        to: DType,
    },
    /// Whether every (`all`) or any element is not zero, giving 0 or 1.
    Truth { any: bool, a: Src, out: Slot },
    /// A copy of a value.
    Copy { a: Src, out: Src },
    /// A value broadcast to a larger shape: element `k` of `out` is `a[index[k]]`.
    Expand { a: Src, out: Src, index: Vec<u32> },
    /// Consecutive instructions compiled to machine code (`native`): the arena as they
    /// would leave it.
    Native(Native),
}

/// `v` wrapped to integer type `to` (two's complement, as Nx's integer arithmetic).
#[inline(always)]
pub fn wrap(v: i64, to: DType) -> i64 {
    match to {
        DType::S8 => v as i8 as i64,
        DType::S16 => v as i16 as i64,
        DType::S32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::U16 => v as u16 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// Element `k` of an operand that is one broadcast element or one value per element.
#[inline(always)]
fn at<T: Copy>(v: &[T], k: usize) -> T {
    if v.len() == 1 {
        v[0]
    } else {
        v[k]
    }
}

#[inline(always)]
fn compare<T: PartialOrd>(c: Compare, x: T, y: T) -> bool {
    match c {
        Compare::Equal => x == y,
        Compare::NotEqual => x != y,
        Compare::Less => x < y,
        Compare::LessEqual => x <= y,
        Compare::Greater => x > y,
        Compare::GreaterEqual => x >= y,
    }
}

#[inline(always)]
fn int_op(op: IntOp, x: i64, y: i64) -> i64 {
    match op {
        IntOp::Add => x.wrapping_add(y),
        IntOp::Sub => x.wrapping_sub(y),
        IntOp::Mul => x.wrapping_mul(y),
        IntOp::Min => x.min(y),
        IntOp::Max => x.max(y),
        IntOp::And => x & y,
        IntOp::Or => x | y,
        IntOp::Xor => x ^ y,
    }
}

impl Ins {
    /// The instruction of map `m` on `a` (and `b`) into `out`: its block kernel where it has
    /// one for these operands (a one-element operand of a larger result is broadcast), else
    /// the map.
    pub fn map(m: Map, a: Slot, b: Option<Slot>, out: Slot) -> Ins {
        let read = |s: Slot| {
            if s.len == 1 && out.len != 1 {
                Read::Scalar
            } else {
                Read::Each
            }
        };
        match f32_blocks::kernel(m, read(a), b.map(read)) {
            Some(k) => Ins::Block { k, m, a, b, out },
            None => Ins::Map { m, a, b, out },
        }
    }
}

/// Runs `code` over `regs`. Every instruction writes a slot above every slot it reads in the
/// same arena (results get fresh slots, in order; see [`Ins::reads_below`]).
pub fn run(code: &[Ins], regs: &mut Regs) {
    #[cfg(target_arch = "x86_64")]
    if crate::op::util::simd().avx2 {
        drive(code, regs, exec_avx2);
        return;
    }
    drive(code, regs, exec_any);
}

/// Runs each block kernel itself and every other instruction through `other`: the loop holds
/// nothing but the calls, so nothing is reloaded around them.
#[inline(always)]
fn drive(code: &[Ins], regs: &mut Regs, other: unsafe fn(&Ins, &mut Regs)) {
    for ins in code {
        if let Ins::Native(n) = ins {
            // SAFETY: the compiled instructions' own contract (each `Ins::Block`'s, below):
            // whole blocks within the slots' room, results above what they read.
            unsafe { (n.f)(regs.f.as_mut_ptr()) };
        } else if let Ins::Block { k, a, b, out, .. } = ins {
            // SAFETY: the slots lie in the f32 arena with room for whole blocks ([`SPACING`],
            // [`Regs::alloc`]), and `out` lies above the slots read (`reads_below`, which the
            // compiler checks of all code), so the blocks written are not read.
            unsafe {
                k(
                    regs.f.as_mut_ptr(),
                    a.off,
                    b.map_or(a.off, |b| b.off),
                    out.off,
                    out.len,
                )
            };
        } else {
            // SAFETY: `exec_avx2` is only passed where AVX2 was detected.
            unsafe { other(ins, regs) };
        }
    }
}

/// [`exec`] compiled for AVX2: the element loops of the instructions are vectorised (the same
/// IEEE operations, no fused multiply-adds, so results do not change).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
unsafe fn exec_avx2(ins: &Ins, regs: &mut Regs) {
    exec(ins, regs);
}

/// [`exec`] for any CPU.
#[inline(never)]
unsafe fn exec_any(ins: &Ins, regs: &mut Regs) {
    exec(ins, regs);
}

impl Ins {
    /// The slot the instruction writes.
    pub fn out(&self) -> Src {
        match self {
            Ins::Map { out, .. }
            | Ins::Block { out, .. }
            | Ins::Select { out, .. }
            | Ins::ToF32 { out, .. }
            | Ins::SumF { out, .. } => Src::F(*out),
            Ins::SelectI { out, .. }
            | Ins::Int { out, .. }
            | Ins::IntUnary { out, .. }
            | Ins::CmpF { out, .. }
            | Ins::CmpI { out, .. }
            | Ins::Logical { out, .. }
            | Ins::ReduceI { out, .. }
            | Ins::Truth { out, .. } => Src::I(*out),
            Ins::Copy { out, .. } | Ins::Expand { out, .. } => *out,
            Ins::Native(n) => n
                .parts
                .last()
                .map_or(Src::F(Slot { off: 0, len: 0 }), Ins::out),
        }
    }

    /// The slots the instruction reads.
    pub fn reads(&self) -> Vec<Src> {
        match self {
            Ins::Map { a, b, .. } | Ins::Block { a, b, .. } => [Some(Src::F(*a)), b.map(Src::F)]
                .into_iter()
                .flatten()
                .collect(),
            Ins::Select { p, t, f, .. } => vec![*p, Src::F(*t), Src::F(*f)],
            Ins::SelectI { p, t, f, .. } => vec![*p, Src::I(*t), Src::I(*f)],
            Ins::ToF32 { a, .. } | Ins::IntUnary { a, .. } | Ins::ReduceI { a, .. } => {
                vec![Src::I(*a)]
            }
            Ins::SumF { a, .. } => vec![Src::F(*a)],
            Ins::Int { a, b, .. } | Ins::CmpI { a, b, .. } => vec![Src::I(*a), Src::I(*b)],
            Ins::CmpF { a, b, .. } => vec![Src::F(*a), Src::F(*b)],
            Ins::Logical { a, b, .. } => vec![*a, *b],
            Ins::Truth { a, .. } | Ins::Copy { a, .. } | Ins::Expand { a, .. } => vec![*a],
            Ins::Native(n) => n.parts.iter().flat_map(Ins::reads).collect(),
        }
    }

    /// Whether every slot the instruction reads in the arena it writes lies below the slot it
    /// writes (what [`run`] relies on to read and write the arena at once).
    pub fn reads_below(&self) -> bool {
        let out = self.out();
        self.reads().iter().all(|r| match (r, out) {
            (Src::F(r), Src::F(o)) | (Src::I(r), Src::I(o)) => r.off + r.len <= o.off,
            _ => true,
        })
    }
}

/// The arenas as one instruction sees them: everything below its result's slot in that
/// result's arena, the whole other arena.
struct View<'a> {
    f: &'a [f32],
    i: &'a [i64],
}

impl View<'_> {
    #[inline(always)]
    fn f(&self, s: Slot) -> &[f32] {
        &self.f[s.off..s.off + s.len]
    }

    #[inline(always)]
    fn i(&self, s: Slot) -> &[i64] {
        &self.i[s.off..s.off + s.len]
    }

    #[inline(always)]
    fn nonzero(&self, s: Src, k: usize) -> bool {
        match s {
            Src::F(s) => at(self.f(s), k) != 0.0,
            Src::I(s) => at(self.i(s), k) != 0,
        }
    }
}

/// An f32 operand of a result of `n` elements: a broadcast element or one value per element.
#[inline(always)]
fn arg(v: &[f32], n: usize) -> Arg<'_> {
    if v.len() == 1 && n != 1 {
        Arg::Scalar(v[0])
    } else {
        Arg::Slice(v)
    }
}

#[inline(always)]
fn exec(ins: &Ins, regs: &mut Regs) {
    match ins.out() {
        Src::F(o) => {
            let (below, rest) = regs.f.split_at_mut(o.off);
            let out = &mut rest[..o.len];
            let v = View {
                f: below,
                i: &regs.i,
            };
            floats(ins, &v, out);
        }
        Src::I(o) => {
            let (below, rest) = regs.i.split_at_mut(o.off);
            let out = &mut rest[..o.len];
            let v = View {
                f: &regs.f,
                i: below,
            };
            integers(ins, &v, out);
        }
    }
}

/// Instructions with an f32 result.
#[inline(always)]
fn floats(ins: &Ins, r: &View, o: &mut [f32]) {
    let n = o.len();
    match ins {
        Ins::Map { m, a, b, .. } => {
            run_step_any(*m, arg(r.f(*a), n), b.map(|b| arg(r.f(b), n)), o);
        }
        // run by `drive` itself
        Ins::Block { .. } | Ins::Native(_) => {}
        Ins::Select { p, t, f, .. } => select(r, *p, r.f(*t), r.f(*f), o),
        Ins::ToF32 { a, .. } => {
            let a = r.i(*a);
            for (k, x) in o.iter_mut().enumerate() {
                *x = at(a, k) as f64 as f32;
            }
        }
        Ins::SumF { a, .. } => o[0] = crate::op::sum32::sum_all(r.f(*a)),
        Ins::Copy { a: Src::F(a), .. } => o.copy_from_slice(r.f(*a)),
        Ins::Expand {
            a: Src::F(a),
            index,
            ..
        } => gather(r.f(*a), index, o),
        // instructions with integer results: `integers`
        _ => {}
    }
}

/// Instructions with an integer result.
#[inline(always)]
fn integers(ins: &Ins, r: &View, o: &mut [i64]) {
    match ins {
        Ins::SelectI { p, t, f, .. } => select(r, *p, r.i(*t), r.i(*f), o),
        Ins::Int { op, a, b, to, .. } => {
            let (a, b) = (r.i(*a), r.i(*b));
            for (k, x) in o.iter_mut().enumerate() {
                *x = wrap(int_op(*op, at(a, k), at(b, k)), *to);
            }
        }
        Ins::IntUnary { op, a, to, .. } => {
            let a = r.i(*a);
            for (k, x) in o.iter_mut().enumerate() {
                let v = at(a, k);
                let y = match op {
                    IntUnary::Neg => v.wrapping_neg(),
                    IntUnary::Abs => v.wrapping_abs(),
                    IntUnary::Cast => v,
                };
                *x = wrap(y, *to);
            }
        }
        Ins::CmpF { c, a, b, .. } => {
            let (a, b) = (r.f(*a), r.f(*b));
            for (k, x) in o.iter_mut().enumerate() {
                *x = compare(*c, at(a, k), at(b, k)) as i64;
            }
        }
        Ins::CmpI { c, a, b, .. } => {
            let (a, b) = (r.i(*a), r.i(*b));
            for (k, x) in o.iter_mut().enumerate() {
                *x = compare(*c, at(a, k), at(b, k)) as i64;
            }
        }
        Ins::Logical { op, a, b, .. } => {
            for (k, x) in o.iter_mut().enumerate() {
                let (p, q) = (r.nonzero(*a, k), r.nonzero(*b, k));
                *x = match op {
                    Logical::And => p && q,
                    Logical::Or => p || q,
                    Logical::Xor => p != q,
                } as i64;
            }
        }
        Ins::ReduceI { op, a, to, .. } => {
            let a = r.i(*a);
            let v = match op {
                IntReduce::Sum => a.iter().fold(0i64, |s, &x| s.wrapping_add(x)),
                IntReduce::Product => a.iter().fold(1i64, |s, &x| s.wrapping_mul(x)),
                IntReduce::Max => a.iter().copied().max().unwrap_or(0),
                IntReduce::Min => a.iter().copied().min().unwrap_or(0),
            };
            o[0] = wrap(v, *to);
        }
        Ins::Truth { any, a, .. } => {
            let n = a.slot().len;
            let mut hit = (0..n).map(|k| r.nonzero(*a, k));
            o[0] = if *any { hit.any(|x| x) } else { hit.all(|x| x) } as i64;
        }
        Ins::Copy { a: Src::I(a), .. } => o.copy_from_slice(r.i(*a)),
        Ins::Expand {
            a: Src::I(a),
            index,
            ..
        } => gather(r.i(*a), index, o),
        // instructions with f32 results: `floats`
        _ => {}
    }
}

/// `select` of either arena: `t` where `p` is not zero (NaN included), else `f`.
#[inline(always)]
fn select<T: Copy>(r: &View, p: Src, t: &[T], f: &[T], o: &mut [T]) {
    for (k, x) in o.iter_mut().enumerate() {
        *x = if r.nonzero(p, k) { at(t, k) } else { at(f, k) };
    }
}

/// A broadcast of either arena: element `k` of `o` is `a[index[k]]`.
#[inline(always)]
fn gather<T: Copy>(a: &[T], index: &[u32], o: &mut [T]) {
    for (x, &k) in o.iter_mut().zip(index) {
        *x = a[k as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_to_their_type() {
        assert_eq!(wrap(i32::MAX as i64 + 1, DType::S32), i32::MIN as i64);
        assert_eq!(wrap(-1, DType::U8), 255);
        assert_eq!(wrap(256, DType::U16), 256);
        assert_eq!(wrap(-1, DType::U32), u32::MAX as i64);
        assert_eq!(wrap(i64::MIN, DType::S64), i64::MIN);
    }

    #[test]
    fn instructions_broadcast_one_element_and_wrap() {
        let mut regs = Regs::default();
        let Src::I(a) = regs.alloc(false, 3) else {
            unreachable!()
        };
        let Src::I(one) = regs.alloc(false, 1) else {
            unreachable!()
        };
        let Src::I(sum) = regs.alloc(false, 3) else {
            unreachable!()
        };
        let Src::I(less) = regs.alloc(false, 3) else {
            unreachable!()
        };
        let Src::F(fl) = regs.alloc(true, 3) else {
            unreachable!()
        };
        regs.i[a.off..a.off + 3].copy_from_slice(&[i32::MAX as i64, 1, -5]);
        regs.i[one.off] = 1;
        let code = [
            Ins::Int {
                op: IntOp::Add,
                a,
                b: one,
                out: sum,
                to: DType::S32,
            },
            Ins::CmpI {
                c: Compare::Less,
                a: sum,
                b: one,
                out: less,
            },
            Ins::ToF32 { a: sum, out: fl },
        ];
        assert!(code.iter().all(Ins::reads_below));
        run(&code, &mut regs);
        assert_eq!(regs.ints(sum), &[i32::MIN as i64, 2, -4]);
        assert_eq!(regs.ints(less), &[1, 0, 1]);
        assert_eq!(regs.f32s(fl), &[i32::MIN as f32, 2.0, -4.0]);
    }
}
