//! The op table's f32 maps ([`super::f32_map`]'s element functions) as kernels over whole
//! blocks of [`BLOCK`] elements of one buffer, chosen once per operand layout and called
//! through a function pointer: what the small-loop interpreter (`program::small`) runs for
//! each map of a loop body. A block is a fixed-size array, so each kernel compiles to a few
//! full-width vector operations with no remainder loop, no run-time overlap check and no
//! dispatch on the map or on its operands' layout (those are settled when the kernel is
//! chosen). The results are the element functions' own, bit for bit.

use super::exact32::{self, Fun};
use super::f32_map::{visit, Elem1, Elem2, ElemVisitor};
use crate::kernels::{Exact, Map};

/// Elements a kernel computes at a time: a kernel over `n` elements reads and writes
/// `n.div_ceil(BLOCK) * BLOCK` of them.
pub(crate) const BLOCK: usize = 16;

/// A map over the buffer at `base`: the elements of `out .. out + n` (rounded up to whole
/// blocks) from those of operands at element offsets `a` and `b` (`b` unused by functions of
/// one operand; an operand read as a broadcast scalar is the one element at its offset).
///
/// # Safety
/// Every block the kernel reads or writes lies inside the buffer, and the blocks written do
/// not overlap the elements read.
pub(crate) type BlockFn = unsafe fn(base: *mut f32, a: usize, b: usize, out: usize, n: usize);

/// How a kernel reads an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// One value per element.
    Each,
    /// One value broadcast to every element.
    Scalar,
}

/// The kernel of map `m` on operands read as `a` and `b` (`None` for a map of one
/// operand), `None` where none is compiled (`pow`, whose function depends on its exponent;
/// broadcast operands of functions of one operand; two broadcast operands).
pub(crate) fn kernel(m: Map, a: Read, b: Option<Read>) -> Option<BlockFn> {
    #[cfg(target_arch = "x86_64")]
    if super::util::simd().avx2 {
        return pick::<Avx2>(m, a, b);
    }
    pick::<Plain>(m, a, b)
}

fn pick<I: Isa>(m: Map, a: Read, b: Option<Read>) -> Option<BlockFn> {
    if let Map::Exact(e) = m {
        return (a == Read::Each && b.is_none()).then_some(match e {
            Exact::Sin => exact::<{ Fun::Sin as u8 }> as BlockFn,
            Exact::Cos => exact::<{ Fun::Cos as u8 }> as BlockFn,
            Exact::Tanh => exact::<{ Fun::Tanh as u8 }> as BlockFn,
            Exact::Exp => exact::<{ Fun::Exp as u8 }> as BlockFn,
        });
    }
    let arity_fits = m.binary() == b.is_some();
    if !arity_fits {
        return None;
    }
    visit(
        m,
        Choose::<I> {
            a,
            b,
            isa: std::marker::PhantomData,
        },
    )
    .flatten()
}

/// Chooses the kernel of an element function for the operands' layout.
struct Choose<I> {
    a: Read,
    b: Option<Read>,
    isa: std::marker::PhantomData<I>,
}

impl<I: Isa> ElemVisitor for Choose<I> {
    type Out = Option<BlockFn>;

    fn one<E: Elem1>(self) -> Option<BlockFn> {
        (self.a == Read::Each).then_some(I::each::<E>())
    }

    fn two<E: Elem2>(self) -> Option<BlockFn> {
        match (self.a, self.b?) {
            (Read::Each, Read::Each) => Some(I::each_each::<E>()),
            (Read::Each, Read::Scalar) => Some(I::each_scalar::<E>()),
            (Read::Scalar, Read::Each) => Some(I::scalar_each::<E>()),
            (Read::Scalar, Read::Scalar) => None,
        }
    }
}

/// The kernels of one instruction set.
trait Isa {
    fn each<E: Elem1>() -> BlockFn;
    fn each_each<E: Elem2>() -> BlockFn;
    fn each_scalar<E: Elem2>() -> BlockFn;
    fn scalar_each<E: Elem2>() -> BlockFn;
}

/// Block `k` of the buffer from element `at`.
#[inline(always)]
unsafe fn load(base: *mut f32, at: usize, k: usize) -> [f32; BLOCK] {
    // SAFETY: the caller's contract (the block lies inside the buffer).
    unsafe {
        base.add(at + k * BLOCK)
            .cast::<[f32; BLOCK]>()
            .read_unaligned()
    }
}

/// Writes block `k` of the buffer from element `at`.
#[inline(always)]
unsafe fn store(base: *mut f32, at: usize, k: usize, v: [f32; BLOCK]) {
    // SAFETY: the caller's contract (the block lies inside the buffer).
    unsafe {
        base.add(at + k * BLOCK)
            .cast::<[f32; BLOCK]>()
            .write_unaligned(v)
    }
}

/// The kernels, compiled for one set of target features (none, or `avx2`).
macro_rules! isa {
    ($isa:ident $(, $feature:literal)?) => {
        struct $isa;

        impl $isa {
            $(#[target_feature(enable = $feature)])?
            unsafe fn each<E: Elem1>(base: *mut f32, a: usize, _: usize, out: usize, n: usize) {
                for k in 0..n.div_ceil(BLOCK) {
                    // SAFETY (this block and the kernels below): the contract of `BlockFn`.
                    let x = unsafe { load(base, a, k) };
                    let mut v = [0f32; BLOCK];
                    for j in 0..BLOCK {
                        v[j] = E::f(x[j]);
                    }
                    unsafe { store(base, out, k, v) };
                }
            }

            $(#[target_feature(enable = $feature)])?
            unsafe fn each_each<E: Elem2>(base: *mut f32, a: usize, b: usize, out: usize, n: usize) {
                for k in 0..n.div_ceil(BLOCK) {
                    let (x, y) = unsafe { (load(base, a, k), load(base, b, k)) };
                    let mut v = [0f32; BLOCK];
                    for j in 0..BLOCK {
                        v[j] = E::f(x[j], y[j]);
                    }
                    unsafe { store(base, out, k, v) };
                }
            }

            $(#[target_feature(enable = $feature)])?
            unsafe fn each_scalar<E: Elem2>(base: *mut f32, a: usize, b: usize, out: usize, n: usize) {
                let y = unsafe { *base.add(b) };
                for k in 0..n.div_ceil(BLOCK) {
                    let x = unsafe { load(base, a, k) };
                    let mut v = [0f32; BLOCK];
                    for j in 0..BLOCK {
                        v[j] = E::f(x[j], y);
                    }
                    unsafe { store(base, out, k, v) };
                }
            }

            $(#[target_feature(enable = $feature)])?
            unsafe fn scalar_each<E: Elem2>(base: *mut f32, a: usize, b: usize, out: usize, n: usize) {
                let x = unsafe { *base.add(a) };
                for k in 0..n.div_ceil(BLOCK) {
                    let y = unsafe { load(base, b, k) };
                    let mut v = [0f32; BLOCK];
                    for j in 0..BLOCK {
                        v[j] = E::f(x, y[j]);
                    }
                    unsafe { store(base, out, k, v) };
                }
            }
        }

        impl Isa for $isa {
            fn each<E: Elem1>() -> BlockFn {
                $isa::each::<E>
            }
            fn each_each<E: Elem2>() -> BlockFn {
                $isa::each_each::<E>
            }
            fn each_scalar<E: Elem2>() -> BlockFn {
                $isa::each_scalar::<E>
            }
            fn scalar_each<E: Elem2>() -> BlockFn {
                $isa::scalar_each::<E>
            }
        }
    };
}

isa!(Plain);
#[cfg(target_arch = "x86_64")]
isa!(Avx2, "avx2");

/// The correctly rounded kernel `F` (a [`Fun`] as `u8`) on `n` elements (not rounded up:
/// the kernel runs on slices).
unsafe fn exact<const F: u8>(base: *mut f32, a: usize, _: usize, out: usize, n: usize) {
    let fun = [Fun::Sin, Fun::Cos, Fun::Tanh, Fun::Exp][F as usize];
    // SAFETY: the contract of `BlockFn`: both ranges lie in the buffer and do not overlap.
    let (x, o) = unsafe {
        (
            std::slice::from_raw_parts(base.add(a), n),
            std::slice::from_raw_parts_mut(base.add(out), n),
        )
    };
    exact32::apply(fun, x, o);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Comparison;
    use crate::op::f32_map::{run_step_any, Arg};

    /// Every kernel gives the slice maps' values bit for bit, on awkward values and lengths
    /// that are not whole blocks (elements past `n` are the kernel's own to write).
    #[test]
    fn kernels_equal_the_slice_maps() {
        let special = [
            0.0f32,
            -0.0,
            1.0,
            -1.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            3.4e38,
            0.1,
            -7.25,
            100.0,
        ];
        let maps = [
            Map::Add,
            Map::Sub,
            Map::Mul,
            Map::Div,
            Map::Max,
            Map::Min,
            Map::Cmp(Comparison::Less),
            Map::Cmp(Comparison::Equal),
            Map::Neg,
            Map::Abs,
            Map::Sqrt,
            Map::Rsqrt,
            Map::Exp,
            Map::Log,
            Map::Sin,
            Map::Cos,
            Map::Tanh,
            Map::Exact(Exact::Sin),
            Map::Exact(Exact::Tanh),
            Map::Exact(Exact::Exp),
        ];
        for n in [1usize, 5, 16, 33] {
            let x: Vec<f32> = (0..n).map(|k| special[k % special.len()]).collect();
            let y: Vec<f32> = (0..n)
                .map(|k| special[(k * 7 + 3) % special.len()])
                .collect();
            for m in maps {
                let reads: &[(Read, Option<Read>)] = if m.binary() {
                    &[
                        (Read::Each, Some(Read::Each)),
                        (Read::Each, Some(Read::Scalar)),
                        (Read::Scalar, Some(Read::Each)),
                    ]
                } else {
                    &[(Read::Each, None)]
                };
                for &(ra, rb) in reads {
                    let k = kernel(m, ra, rb).expect("a kernel");
                    // buffer: a at 0, b at 64, out at 128, room of 64 each
                    let mut buf = vec![0f32; 192];
                    buf[..n].copy_from_slice(&x);
                    buf[64..64 + n].copy_from_slice(&y);
                    // SAFETY: each operand and the result have 64 elements of room.
                    unsafe { k(buf.as_mut_ptr(), 0, 64, 128, n) };
                    fn arg(r: Read, v: &[f32]) -> Arg<'_> {
                        match r {
                            Read::Each => Arg::Slice(v),
                            Read::Scalar => Arg::Scalar(v[0]),
                        }
                    }
                    let mut want = vec![0f32; n];
                    run_step_any(m, arg(ra, &x), rb.map(|r| arg(r, &y)), &mut want);
                    let got = &buf[128..128 + n];
                    assert!(
                        got.iter()
                            .zip(&want)
                            .all(|(g, w)| g.to_bits() == w.to_bits()),
                        "{m:?} {ra:?} {rb:?} n {n}: {got:?} against {want:?}"
                    );
                }
            }
        }
        assert!(kernel(Map::Pow, Read::Each, Some(Read::Each)).is_none());
        assert!(kernel(Map::Neg, Read::Scalar, None).is_none());
        assert!(kernel(Map::Add, Read::Scalar, Some(Read::Scalar)).is_none());
    }
}
