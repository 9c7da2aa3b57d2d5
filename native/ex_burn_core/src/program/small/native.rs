//! Runs of f32 maps in a loop's code compiled to x86-64 machine code (AVX2).
//!
//! The interpreter calls one block kernel per instruction, each reading its operands from the
//! arena and writing its result back: a loop body that is one chain of dependent element-wise
//! steps on a 16-element value then costs a call and a store-to-load round trip per step.
//! Here consecutive instructions of the simplest maps on values of at most 16 elements (IEEE
//! `+ - * /`, square root, negation, absolute value, Nx's `max`/`min`,
//! comparisons giving 1.0 or 0.0) become one function that keeps values in vector registers
//! (a value is two 8-lane registers; up to seven values cached, least recently used evicted)
//! and still writes every result to its slot, so the rest of the code reads the arena as
//! before and an evicted value is simply loaded again. Each operation is the same IEEE
//! operation as the op table's element function (no fused multiply-adds; `max`/`min` with
//! the op table's NaN rule), so results are bit-identical to the interpreter's
//! (`tests` below compare random programs, NaN payloads aside).
//!
//! The code is written into an anonymous mapping made executable only after it is complete
//! (never writable and executable at once) and unmapped with the loop. Where the mapping
//! cannot be made (a system forbidding executable memory), the loop stays interpreted.

use super::code::{Ins, Slot};
use crate::kernels::{Comparison, Map};
use std::sync::Arc;

/// Largest value compiled, in elements: two 8-lane registers.
const MAX_LEN: usize = 16;

/// Fewest instructions worth a compiled run (a single one gains nothing over its kernel).
const MIN_RUN: usize = 2;

/// Register pairs that cache values (ymm0..ymm13); ymm14 and ymm15 are scratch.
const PAIRS: usize = 7;
const S0: u8 = 14;
const S1: u8 = 15;

/// Executable memory holding compiled runs; unmapped when the last run using it goes.
pub struct Exec {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is read-only and executable once made; nothing mutates it.
unsafe impl Send for Exec {}
// SAFETY: as above.
unsafe impl Sync for Exec {}

impl Exec {
    /// A mapping holding `code`, or `None` where executable memory cannot be had.
    #[cfg(not(unix))]
    fn new(_: &[u8]) -> Option<Exec> {
        None
    }

    /// A mapping holding `code`, or `None` where executable memory cannot be had.
    #[cfg(unix)]
    fn new(code: &[u8]) -> Option<Exec> {
        let len = code.len().max(1);
        // SAFETY: an anonymous private mapping of `len` bytes; every failure is checked.
        unsafe {
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return None;
            }
            let exec = Exec {
                ptr: ptr.cast(),
                len,
            };
            std::ptr::copy_nonoverlapping(code.as_ptr(), exec.ptr, code.len());
            if libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                return None;
            }
            Some(exec)
        }
    }
}

impl Drop for Exec {
    #[cfg(not(unix))]
    fn drop(&mut self) {}

    #[cfg(unix)]
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; no run of it is executing (they are called
        // from the code that owns them).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A compiled function over the f32 arena (its first element's address).
pub type RunFn = unsafe extern "sysv64" fn(base: *mut f32);

/// A compiled run of instructions.
#[derive(Clone)]
pub struct Native {
    /// Its entry point.
    pub f: RunFn,
    /// The instructions it runs (what the interpreter would run instead).
    pub parts: Vec<Ins>,
    /// The memory holding it (kept mapped as long as the run may be called).
    pub _mem: Arc<Exec>,
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native")
            .field("parts", &self.parts)
            .finish()
    }
}

/// Whether this CPU runs compiled code (x86-64 with AVX2).
fn available() -> bool {
    cfg!(target_arch = "x86_64") && crate::op::util::simd().avx2
}

/// What an operation computes, per 8-lane half.
#[derive(Clone, Copy)]
enum Kind {
    /// `vaddps`, `vsubps`, `vmulps`, `vdivps` (the opcode).
    Arith(u8),
    /// Nx `max` (`true`) or `min`: the IEEE instruction, then the left operand where it is NaN.
    Extremum(bool),
    /// 1.0 where the comparison (a `vcmpps` predicate) holds, else 0.0.
    Cmp(u8),
    Neg,
    Abs,
    Sqrt,
}

/// The operation of instruction `ins`, where it is one compiled here.
fn kind(ins: &Ins) -> Option<(Kind, Slot, Option<Slot>, Slot)> {
    let Ins::Block { m, a, b, out, .. } = ins else {
        return None;
    };
    if out.len > MAX_LEN {
        return None;
    }
    let k = match m {
        Map::Add => Kind::Arith(0x58),
        Map::Sub => Kind::Arith(0x5c),
        Map::Mul => Kind::Arith(0x59),
        Map::Div => Kind::Arith(0x5e),
        Map::Max => Kind::Extremum(true),
        Map::Min => Kind::Extremum(false),
        Map::Cmp(c) => Kind::Cmp(match c {
            Comparison::Equal => 0x00,        // EQ_OQ
            Comparison::NotEqual => 0x04,     // NEQ_UQ: true for NaN, as `!=`
            Comparison::Less => 0x11,         // LT_OQ
            Comparison::LessEqual => 0x12,    // LE_OQ
            Comparison::Greater => 0x1e,      // GT_OQ
            Comparison::GreaterEqual => 0x1d, // GE_OQ
        }),
        Map::Neg => Kind::Neg,
        Map::Abs => Kind::Abs,
        Map::Sqrt => Kind::Sqrt,
        _ => return None,
    };
    Some((k, *a, *b, *out))
}

/// Replaces each run of at least [`MIN_RUN`] consecutive compilable instructions of `codes`
/// by one compiled instruction (all runs in one mapping). Leaves the code as it is where this
/// CPU or system runs no compiled code.
pub fn compile(codes: &mut [&mut Vec<Ins>]) {
    if !available() {
        return;
    }
    let mut asm = Asm::default();
    // (which code, first instruction, count, offset of its code)
    let mut runs = Vec::new();
    for (c, code) in codes.iter().enumerate() {
        let mut k = 0;
        while k < code.len() {
            let n = code[k..]
                .iter()
                .take_while(|ins| kind(ins).is_some())
                .count();
            if n >= MIN_RUN {
                runs.push((c, k, n, asm.code.len()));
                asm.run(&code[k..k + n]);
            }
            k += n.max(1);
        }
    }
    if runs.is_empty() {
        return;
    }
    let Some(mem) = Exec::new(&asm.code).map(Arc::new) else {
        return;
    };
    // replace from the back, so earlier positions stay valid
    for &(c, k, n, at) in runs.iter().rev() {
        // SAFETY: `at` is the start of a function assembled into the mapping.
        let f: RunFn = unsafe { std::mem::transmute(mem.ptr.add(at)) };
        let parts: Vec<Ins> = codes[c].drain(k..k + n).collect();
        let native = Native {
            f,
            parts,
            _mem: mem.clone(),
        };
        codes[c].insert(k, Ins::Native(native));
    }
}

/// What a register pair holds: a value (its slot's offset) loaded whole, or broadcast from one
/// element (in the pair's first register only).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Each(usize),
    Scalar(usize),
}

/// A memory operand or a register.
#[derive(Clone, Copy)]
enum Rm {
    Reg(u8),
    /// `[rdi + disp]`.
    Mem(i32),
}

/// The assembler: code, and what the register pairs hold in the run being assembled.
#[derive(Default)]
struct Asm {
    code: Vec<u8>,
    held: [Option<(Key, u64)>; PAIRS],
    clock: u64,
}

/// Byte offset of element `k` of the arena, plus `extra` bytes. Arenas hold at most
/// `MAX_SLOTS` (2^22) elements, so it fits.
fn disp(k: usize, extra: usize) -> i32 {
    i32::try_from(k * 4 + extra).expect("arena offsets fit 32 bits")
}

impl Asm {
    /// A VEX-encoded (3-byte prefix, 256-bit) instruction: `reg` in ModRM.reg, `vvvv` the
    /// extra source (0 where unused), `rm` a register or `[rdi + disp32]`.
    fn vex(&mut self, map: u8, pp: u8, reg: u8, vvvv: u8, rm: Rm, op: u8) {
        let b = match rm {
            Rm::Reg(r) => r >> 3,
            Rm::Mem(_) => 0,
        };
        self.code.extend([
            0xc4,
            ((!(reg >> 3) & 1) << 7) | (1 << 6) | ((!b & 1) << 5) | map,
            ((!vvvv & 0xf) << 3) | (1 << 2) | pp,
            op,
        ]);
        match rm {
            Rm::Reg(r) => self.code.push(0xc0 | ((reg & 7) << 3) | (r & 7)),
            Rm::Mem(d) => {
                // mod 10, rm 111: [rdi + disp32]
                self.code.push(0x80 | ((reg & 7) << 3) | 7);
                self.code.extend(d.to_le_bytes());
            }
        }
    }

    /// `vmovups ymm(r), [rdi + d]`.
    fn load(&mut self, r: u8, d: i32) {
        self.vex(1, 0, r, 0, Rm::Mem(d), 0x10);
    }

    /// `vmovups [rdi + d], ymm(r)`.
    fn store(&mut self, r: u8, d: i32) {
        self.vex(1, 0, r, 0, Rm::Mem(d), 0x11);
    }

    /// `vbroadcastss ymm(r), [rdi + d]`.
    fn broadcast(&mut self, r: u8, d: i32) {
        self.vex(2, 1, r, 0, Rm::Mem(d), 0x18);
    }

    /// A packed-single operation `d = op(a, b)` of map 0F, no prefix.
    fn ps(&mut self, op: u8, d: u8, a: u8, b: u8) {
        self.vex(1, 0, d, a, Rm::Reg(b), op);
    }

    /// `vcmpps ymm(d), ymm(a), ymm(b), pred`.
    fn cmp(&mut self, pred: u8, d: u8, a: u8, b: u8) {
        self.ps(0xc2, d, a, b);
        self.code.push(pred);
    }

    /// `vblendvps ymm(d), ymm(a), ymm(b), ymm(mask)`: `b` where the mask's lane is negative.
    fn blend(&mut self, d: u8, a: u8, b: u8, mask: u8) {
        self.vex(3, 1, d, a, Rm::Reg(b), 0x4a);
        self.code.push(mask << 4);
    }

    /// `ymm(d)` = every lane `bits`, a constant `vpcmpeqd` and shifts can make: all ones
    /// shifted left by `left`, then right by `right`.
    fn constant(&mut self, d: u8, left: u8, right: u8) {
        self.vex(1, 1, d, d, Rm::Reg(d), 0x76); // vpcmpeqd d, d, d
        if left > 0 {
            self.vex(1, 1, 6, d, Rm::Reg(d), 0x72); // vpslld d, d, left
            self.code.push(left);
        }
        if right > 0 {
            self.vex(1, 1, 2, d, Rm::Reg(d), 0x72); // vpsrld d, d, right
            self.code.push(right);
        }
    }

    /// The pair holding `key` (its 8-lane halves loaded), loading it into the least recently
    /// used pair other than `keep` if none does.
    fn operand(&mut self, key: Key, halves: usize, keep: Option<usize>) -> usize {
        self.clock += 1;
        if let Some(p) = self
            .held
            .iter()
            .position(|h| h.is_some_and(|(k, _)| k == key))
        {
            self.held[p] = Some((key, self.clock));
            return p;
        }
        let p = self.victim(keep, None);
        match key {
            Key::Each(off) => {
                for h in 0..halves {
                    self.load(reg(p, h), disp(off, 32 * h));
                }
            }
            Key::Scalar(off) => self.broadcast(reg(p, 0), disp(off, 0)),
        }
        self.held[p] = Some((key, self.clock));
        p
    }

    /// A pair to overwrite: an empty one, else the least recently used, never `a` or `b`.
    fn victim(&self, a: Option<usize>, b: Option<usize>) -> usize {
        (0..PAIRS)
            .filter(|&p| Some(p) != a && Some(p) != b)
            .min_by_key(|&p| self.held[p].map_or(0, |(_, t)| t))
            .expect("more pairs than operands")
    }

    /// One compiled run: a function of the arena's address (in `rdi`).
    fn run(&mut self, code: &[Ins]) {
        self.held = [None; PAIRS];
        for ins in code {
            let (k, a, b, out) = kind(ins).expect("only compiled instructions in a run");
            let halves = out.len.div_ceil(8);
            let key = |s: Slot| {
                if s.len == 1 && out.len != 1 {
                    Key::Scalar(s.off)
                } else {
                    Key::Each(s.off)
                }
            };
            let pa = self.operand(key(a), halves, None);
            let pb = b.map(|b| self.operand(key(b), halves, Some(pa)));
            let pd = self.victim(Some(pa), pb);
            let half = |p: usize, s: Slot, h: usize| match key(s) {
                Key::Scalar(_) => reg(p, 0),
                Key::Each(_) => reg(p, h),
            };
            for h in 0..halves {
                let x = half(pa, a, h);
                let y = pb.zip(b).map(|(p, s)| half(p, s, h)).unwrap_or(x);
                let d = reg(pd, h);
                match k {
                    Kind::Arith(op) => self.ps(op, d, x, y),
                    Kind::Extremum(max) => {
                        // (x > y or x < y) ? x : y by the IEEE instruction, then x where it
                        // is NaN (the instruction gives y there)
                        self.ps(if max { 0x5f } else { 0x5d }, S0, x, y);
                        self.cmp(0x03, S1, x, x);
                        self.blend(d, S0, x, S1);
                    }
                    Kind::Cmp(pred) => {
                        self.cmp(pred, S0, x, y);
                        self.constant(S1, 25, 2); // 0x3f800000 = 1.0
                        self.ps(0x54, d, S0, S1); // vandps
                    }
                    Kind::Neg => {
                        self.constant(S0, 31, 0); // the sign bit
                        self.ps(0x57, d, x, S0); // vxorps
                    }
                    Kind::Abs => {
                        self.constant(S0, 0, 1); // all but the sign bit
                        self.ps(0x54, d, x, S0); // vandps
                    }
                    Kind::Sqrt => self.ps(0x51, d, 0, x),
                }
                self.store(d, disp(out.off, 32 * h));
            }
            self.clock += 1;
            self.held[pd] = Some((Key::Each(out.off), self.clock));
        }
        self.code.extend([0xc5, 0xf8, 0x77, 0xc3]); // vzeroupper; ret
    }
}

/// Register `h` (0 or 1) of pair `p`.
fn reg(p: usize, h: usize) -> u8 {
    (2 * p + h) as u8
}

#[cfg(test)]
mod tests {
    use super::super::code::{run, Regs, Src};
    use super::*;

    /// A small random generator (xorshift).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn value(&mut self) -> f32 {
            const SPECIAL: [f32; 12] = [
                0.0,
                -0.0,
                1.0,
                -1.0,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                1e-40,
                -1e-45,
                f32::MAX,
                0.5,
                3.0,
            ];
            match self.below(4) {
                0 => SPECIAL[self.below(SPECIAL.len())],
                1 => f32::from_bits(self.next() as u32),
                _ => (self.below(2001) as f32 - 1000.0) / 97.0,
            }
        }
    }

    const MAPS: [Map; 14] = [
        Map::Add,
        Map::Sub,
        Map::Mul,
        Map::Div,
        Map::Max,
        Map::Min,
        Map::Neg,
        Map::Abs,
        Map::Sqrt,
        Map::Cmp(Comparison::Equal),
        Map::Cmp(Comparison::NotEqual),
        Map::Cmp(Comparison::Less),
        Map::Cmp(Comparison::LessEqual),
        Map::Cmp(Comparison::GreaterEqual),
    ];

    /// Equal bits, or both NaN (payloads are not part of the contract).
    fn same(x: f32, y: f32) -> bool {
        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
    }

    /// Random programs of the compiled maps (values of 1 to 16 elements, scalars broadcast,
    /// more live values than registers) give the interpreter's results.
    #[test]
    fn compiled_runs_equal_the_interpreter() {
        if !available() {
            return;
        }
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let greater = Map::Cmp(Comparison::Greater);
        for trial in 0..3000 {
            let mut regs = Regs::default();
            let len = [1, 2, 7, 8, 9, 15, 16][trial % 7];
            let mut vals: Vec<Slot> = Vec::new();
            let mut ones: Vec<Slot> = Vec::new();
            for _ in 0..6 {
                let Src::F(s) = regs.alloc(true, len) else {
                    unreachable!()
                };
                let Src::F(o) = regs.alloc(true, 1) else {
                    unreachable!()
                };
                for k in 0..len {
                    regs.f[s.off + k] = rng.value();
                }
                regs.f[o.off] = rng.value();
                vals.push(s);
                ones.push(o);
            }
            let mut code = Vec::new();
            for _ in 0..rng.below(40) + 2 {
                let m = if rng.below(16) == 0 {
                    greater
                } else {
                    MAPS[rng.below(MAPS.len())]
                };
                let a = vals[vals.len() - 1 - rng.below(vals.len().min(12))];
                let b = m.binary().then(|| {
                    if rng.below(4) == 0 {
                        ones[rng.below(ones.len())]
                    } else {
                        vals[rng.below(vals.len())]
                    }
                });
                // a broadcast left operand now and then
                let (a, b) = match b {
                    Some(b) if b.len == 1 && len > 1 && rng.below(3) == 0 => (b, Some(a)),
                    _ => (a, b),
                };
                let Src::F(out) = regs.alloc(true, len) else {
                    unreachable!()
                };
                code.push(Ins::map(m, a, b, out));
                vals.push(out);
            }
            let mut want = regs.clone();
            run(&code, &mut want);
            let mut compiled = code.clone();
            compile(&mut [&mut compiled]);
            assert!(
                compiled.iter().any(|i| matches!(i, Ins::Native(_))),
                "{code:?}"
            );
            let mut got = regs.clone();
            run(&compiled, &mut got);
            for s in &vals {
                for k in 0..s.len {
                    let (w, g) = (want.f[s.off + k], got.f[s.off + k]);
                    assert!(same(w, g), "trial {trial}: {w:?} vs {g:?} in {code:?}");
                }
            }
        }
    }

    #[test]
    fn only_runs_of_small_simple_maps_compile() {
        if !available() {
            return;
        }
        let mut regs = Regs::default();
        let slot = |regs: &mut Regs, len| match regs.alloc(true, len) {
            Src::F(s) => s,
            Src::I(_) => unreachable!(),
        };
        let (a, b, c, d, e, f) = (
            slot(&mut regs, 16),
            slot(&mut regs, 16),
            slot(&mut regs, 16),
            slot(&mut regs, 17),
            slot(&mut regs, 17),
            slot(&mut regs, 17),
        );
        let mut code = vec![
            Ins::map(Map::Add, a, Some(a), b),
            Ins::map(Map::Log, b, None, c),
            Ins::map(Map::Add, a, Some(c), b),
            Ins::map(Map::Mul, b, Some(b), c),
            Ins::map(Map::Neg, d, None, e),
            Ins::map(Map::Abs, d, None, f),
        ];
        compile(&mut [&mut code]);
        let kinds: Vec<bool> = code.iter().map(|i| matches!(i, Ins::Native(_))).collect();
        assert_eq!(kinds, [false, false, true, false, false]);
    }
}
