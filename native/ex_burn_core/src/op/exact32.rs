//! Correctly rounded f32 `sin`, `cos`, `tanh` and `exp` for the CPU, four lanes at a time with
//! AVX2 and FMA, and the logistic sigmoid as Nx.BinaryBackend computes it (`1 / (1 + exp(-x))`
//! in f64, rounded once).
//!
//! Each value is computed in f64 (Cody-Waite reduction by pi/2 and fdlibm's minimax
//! polynomials of `__kernel_sin`/`__kernel_cos`, error below 2^-58, for the trigonometric
//! functions; `expm1` by reduction by ln 2 and a Taylor polynomial for `tanh` and `exp`), with an error
//! far below half an f32 ulp, then rounded once to f32: the result is the f32 nearest to the
//! exact value (the tests compare with f64 libm rounded to f32, as Nx's `BinaryBackend`
//! computes). That is what the Nx doctests expect, and faster than glibc's `sinf`/`tanhf`/`expf`
//! (the eager op and the fused chunk loops both use these, so they stay bit-identical).
//! Without AVX2 and FMA (other CPUs, other architectures) the op table keeps the platform's
//! libm. `|x| > 823549` (a reduction this one does not cover) goes through f64 libm per element.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// pi/2 in three parts: the first two have 33 significant bits, so `k * P1` and `k * P2` are
/// exact for `|k| < 2^20`.
const P1: f64 = 1.570_796_326_734_125_6;
const P2: f64 = 6.077_100_506_303_966e-11;
const P3: f64 = 2.022_266_248_795_950_6e-21;
const INV_PIO2: f64 = std::f64::consts::FRAC_2_PI;
/// 1.5 * 2^52: adding it rounds to an integer, whose low bits end up in the mantissa.
const MAGIC: f64 = 6_755_399_441_055_744.0;
/// Largest |x| reduced here (k < 2^19).
const LIMIT: f64 = 823_549.0;
/// ln 2 with 32 significant bits, and the rest.
const LN2_HI: f64 = 0.693_147_180_601_954_5;
const LN2_LO: f64 = -4.200_915_072_681_084_6e-11;
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// `tanh(x)` rounds to +-1 in f32 beyond 9.01; 9.5 leaves room.
const TANH_SAT: f64 = 9.5;
/// `exp(x)` rounds to 0 in f32 below `ln 2^-150` (-103.97) and overflows above 88.73: inputs
/// are clamped to this range, whose ends give those results.
const EXP_MIN: f64 = -104.0;
const EXP_MAX: f64 = 89.0;

/// `1/n!` for n = 0..=13 (`expm1` on `|r| <= ln2 / 2` to `r^13 / 13!`: error below 2^-56).
const F: [f64; 14] = [
    1.0,
    1.0,
    0.5,
    0.166_666_666_666_666_66,
    0.041_666_666_666_666_664,
    0.008_333_333_333_333_333,
    0.001_388_888_888_888_889,
    0.000_198_412_698_412_698_4,
    2.480_158_730_158_73e-5,
    2.755_731_922_398_589_3e-6,
    2.755_731_922_398_589e-7,
    2.505_210_838_544_172e-8,
    2.087_675_698_786_81e-9,
    1.605_904_383_682_161_3e-10,
];

/// fdlibm `__kernel_sin` on `|r| <= pi/4`: `sin r = r + r z (S1 + z S2 + ... + z^5 S6)`,
/// `z = r^2`.
#[allow(clippy::excessive_precision)]
const SIN: [f64; 6] = [
    -1.666_666_666_666_663_243_48e-1,
    8.333_333_333_322_489_461_24e-3,
    -1.984_126_982_985_794_931_34e-4,
    2.755_731_370_707_006_767_89e-6,
    -2.505_076_025_340_686_341_95e-8,
    1.589_690_995_211_550_102_21e-10,
];

/// fdlibm `__kernel_cos` on `|r| <= pi/4`: `cos r = 1 - z/2 + z^2 (C1 + z C2 + ... + z^5 C6)`.
#[allow(clippy::excessive_precision)]
const COS: [f64; 6] = [
    4.166_666_666_666_660_190_37e-2,
    -1.388_888_888_887_410_957_49e-3,
    2.480_158_728_947_672_941_78e-5,
    -2.755_731_435_139_066_330_35e-7,
    2.087_572_321_298_174_827_90e-9,
    -1.135_964_755_778_819_482_65e-11,
];

/// Which function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fun {
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Hyperbolic tangent.
    Tanh,
    /// Exponential.
    Exp,
    /// `1 / (1 + exp(-x))` in f64, rounded once (the eager op only: not a fused map).
    Sigmoid,
}

impl Fun {
    /// The function of `op` (`Sin`, `Cos`, `Tanh`, `Exp`).
    pub(crate) fn of(op: crate::op::Unary) -> Option<Fun> {
        match op {
            crate::op::Unary::Sin => Some(Fun::Sin),
            crate::op::Unary::Cos => Some(Fun::Cos),
            crate::op::Unary::Tanh => Some(Fun::Tanh),
            crate::op::Unary::Exp => Some(Fun::Exp),
            _ => None,
        }
    }
}

/// Whether this CPU runs these kernels (x86-64 with AVX2 and FMA).
pub(crate) fn available() -> bool {
    let simd = super::util::simd();
    simd.avx2 && simd.fma
}

/// `dst[i] = fun(src[i])`, correctly rounded. Callers check [`available`] first; without AVX2
/// and FMA this falls back to f64 libm per element (same results, slower).
pub(crate) fn apply(fun: Fun, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        unsafe { avx2::apply(fun, src, dst) };
        return;
    }
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = reference(fun, x);
    }
}

/// [`apply`] in place.
pub(crate) fn apply_in_place(fun: Fun, buf: &mut [f32]) {
    for block in buf.chunks_mut(4096) {
        let mut src = [0f32; 4096];
        let src = &mut src[..block.len()];
        src.copy_from_slice(block);
        apply(fun, src, block);
    }
}

/// The f32 nearest to `fun(x)` by f64 libm (for arguments out of the kernels' range, and as
/// the tests' reference).
pub(crate) fn reference(fun: Fun, x: f32) -> f32 {
    let x = x as f64;
    (match fun {
        Fun::Sin => x.sin(),
        Fun::Cos => x.cos(),
        Fun::Tanh => x.tanh(),
        Fun::Exp => x.exp(),
        Fun::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }) as f32
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    #[inline(always)]
    unsafe fn c(v: f64) -> __m256d {
        _mm256_set1_pd(v)
    }

    /// `t[0] + z t[1] + z^2 t[2] + ...` by Estrin's scheme (pairs `t[2i] + z t[2i+1]`, then
    /// pairs of those with `z^2`, `z^4`, ...): a dependency chain of `log2(N)` fused
    /// multiply-adds instead of Horner's `N - 1`, the loop's kernels being latency-bound.
    #[inline(always)]
    unsafe fn estrin<const N: usize>(z: __m256d, mut t: [__m256d; N]) -> __m256d {
        let (mut n, mut p) = (N, z);
        while n > 1 {
            for i in 0..n / 2 {
                t[i] = _mm256_fmadd_pd(p, t[2 * i + 1], t[2 * i]);
            }
            if n % 2 == 1 {
                t[n / 2] = t[n - 1];
            }
            n = n.div_ceil(2);
            p = _mm256_mul_pd(p, p);
        }
        t[0]
    }

    /// The coefficients `k` as vectors.
    #[inline(always)]
    unsafe fn splat<const N: usize>(k: &[f64]) -> [__m256d; N] {
        let mut t = [_mm256_setzero_pd(); N];
        for i in 0..N {
            t[i] = c(k[i]);
        }
        t
    }

    /// sin (`shift` 0) or cos (`shift` 1) of four lanes; the mask has a bit per lane out of
    /// range (those lanes are garbage).
    #[inline(always)]
    unsafe fn trig4(x: __m128, shift: i64) -> (__m128, i32) {
        let xd = _mm256_cvtps_pd(x);
        let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
        let ok = _mm256_cmp_pd::<_CMP_LE_OQ>(_mm256_and_pd(xd, abs), c(LIMIT));
        let xs = _mm256_and_pd(xd, ok);
        let v = _mm256_fmadd_pd(xs, c(INV_PIO2), c(MAGIC));
        let quadrant = _mm256_and_si256(
            _mm256_add_epi64(_mm256_castpd_si256(v), _mm256_set1_epi64x(shift)),
            _mm256_set1_epi64x(3),
        );
        let k = _mm256_sub_pd(v, c(MAGIC));
        // |r| <= pi/4; k * P1 and k * P2 are exact
        let r = _mm256_fnmadd_pd(k, c(P1), xs);
        let r = _mm256_fnmadd_pd(k, c(P2), r);
        let r = _mm256_fnmadd_pd(k, c(P3), r);
        let z = _mm256_mul_pd(r, r);
        // Odd quadrants take cos r, even ones sin r: one polynomial with per-lane coefficients.
        let one = _mm256_set1_epi64x(1);
        let odd = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(quadrant, one), one));
        let mut k = [_mm256_setzero_pd(); 6];
        for i in 0..6 {
            k[i] = _mm256_blendv_pd(c(SIN[i]), c(COS[i]), odd);
        }
        let p = estrin(z, k);
        // sin r = r + (r z) p, cos r = (1 - z/2) + (z z) p
        let m = _mm256_fmadd_pd(
            _mm256_mul_pd(_mm256_blendv_pd(r, z, odd), z),
            p,
            _mm256_blendv_pd(r, _mm256_fnmadd_pd(c(0.5), z, c(1.0)), odd),
        );
        let neg = _mm256_castsi256_pd(_mm256_slli_epi64::<62>(_mm256_and_si256(
            quadrant,
            _mm256_set1_epi64x(2),
        )));
        let m = _mm256_xor_pd(m, neg);
        // sin(-0) = -0
        let m = if shift == 0 {
            _mm256_blendv_pd(m, xs, _mm256_cmp_pd::<_CMP_EQ_OQ>(xs, c(0.0)))
        } else {
            m
        };
        (_mm256_cvtpd_ps(m), !_mm256_movemask_pd(ok) & 0xf)
    }

    /// tanh of four lanes: `t / (t + 2)` with `t = expm1(2|x|) = 2^k expm1(r) + (2^k - 1)`,
    /// `|r| <= ln2 / 2` (no cancellation for small `x`: `k = 0` there).
    #[inline(always)]
    unsafe fn tanh4(x: __m128) -> __m128 {
        let xd = _mm256_cvtps_pd(x);
        let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
        let ax = _mm256_and_pd(xd, abs);
        let y = _mm256_mul_pd(c(2.0), _mm256_min_pd(ax, c(TANH_SAT)));
        let v = _mm256_fmadd_pd(y, c(INV_LN2), c(MAGIC));
        let k = _mm256_sub_pd(v, c(MAGIC));
        let kbits = _mm256_sub_epi64(_mm256_castpd_si256(v), _mm256_castpd_si256(c(MAGIC)));
        let r = _mm256_fnmadd_pd(k, c(LN2_HI), y);
        let r = _mm256_fnmadd_pd(k, c(LN2_LO), r);
        // expm1(r) = r (1 + r/2! + ... + r^12/13!)
        let em = _mm256_mul_pd(r, estrin::<13>(r, splat(&F[1..14])));
        let scale = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_add_epi64(
            kbits,
            _mm256_set1_epi64x(1023),
        )));
        let t = _mm256_fmadd_pd(scale, em, _mm256_sub_pd(scale, c(1.0)));
        // tanh |x| = t / (t + 2), 1 when saturated, sign of x, NaN kept
        let th = _mm256_div_pd(t, _mm256_add_pd(t, c(2.0)));
        let th = _mm256_blendv_pd(th, c(1.0), _mm256_cmp_pd::<_CMP_GT_OQ>(ax, c(TANH_SAT)));
        let th = _mm256_or_pd(th, _mm256_andnot_pd(abs, xd));
        let th = _mm256_blendv_pd(th, xd, _mm256_cmp_pd::<_CMP_UNORD_Q>(xd, xd));
        _mm256_cvtpd_ps(th)
    }

    /// `exp(y)` of four f64 lanes with `-104 <= y <= 150 ln 2`: `2^k (1 + expm1(r))`, `y = k ln2
    /// + r`, `|r| <= ln2 / 2`, relative error below 2^-56.
    #[inline(always)]
    unsafe fn exp_f64(y: __m256d) -> __m256d {
        let v = _mm256_fmadd_pd(y, c(INV_LN2), c(MAGIC));
        let k = _mm256_sub_pd(v, c(MAGIC));
        let kbits = _mm256_sub_epi64(_mm256_castpd_si256(v), _mm256_castpd_si256(c(MAGIC)));
        // |k| <= 150: k * LN2_HI is exact
        let r = _mm256_fnmadd_pd(k, c(LN2_HI), y);
        let r = _mm256_fnmadd_pd(k, c(LN2_LO), r);
        // 1 + expm1(r) = 1 + r (1 + r/2! + ... + r^12/13!)
        let e = _mm256_fmadd_pd(r, estrin::<13>(r, splat(&F[1..14])), c(1.0));
        // 2^k, a normal f64 for every k here
        let scale = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_add_epi64(
            kbits,
            _mm256_set1_epi64x(1023),
        )));
        _mm256_mul_pd(e, scale)
    }

    /// exp of four lanes, the f64 result rounded once to f32 (to 0 or infinity out of range,
    /// NaN kept).
    #[inline(always)]
    unsafe fn exp4(x: __m128) -> __m128 {
        let xd = _mm256_cvtps_pd(x);
        let ex = exp_f64(_mm256_min_pd(_mm256_max_pd(xd, c(EXP_MIN)), c(EXP_MAX)));
        let ex = _mm256_blendv_pd(ex, xd, _mm256_cmp_pd::<_CMP_UNORD_Q>(xd, xd));
        _mm256_cvtpd_ps(ex)
    }

    /// `1 / (1 + exp(-x))` of four lanes in f64, rounded once. `-x` is clamped to
    /// `[-104, 104]`: beyond, the result rounds to 1 (below) or to 0 (above: under 2^-150) in
    /// f32 either way. NaN kept.
    #[inline(always)]
    unsafe fn sigmoid4(x: __m128) -> __m128 {
        let xd = _mm256_cvtps_pd(x);
        let y = _mm256_min_pd(
            _mm256_max_pd(_mm256_sub_pd(c(0.0), xd), c(-104.0)),
            c(104.0),
        );
        let s = _mm256_div_pd(c(1.0), _mm256_add_pd(c(1.0), exp_f64(y)));
        let s = _mm256_blendv_pd(s, xd, _mm256_cmp_pd::<_CMP_UNORD_Q>(xd, xd));
        _mm256_cvtpd_ps(s)
    }

    /// `Q` blocks of four lanes of `kernel` from `src[i..i + 4 Q]` (`Q` independent dependency
    /// chains), stored together, out-of-range lanes then fixed by the reference.
    #[inline(always)]
    unsafe fn lanes<const Q: usize>(
        fun: Fun,
        kernel: impl Fn(__m128) -> (__m128, i32),
        src: &[f32],
        dst: &mut [f32],
        i: usize,
    ) {
        let mut y = [_mm_setzero_ps(); Q];
        let mut bad = [0; Q];
        for q in 0..Q {
            (y[q], bad[q]) = kernel(_mm_loadu_ps(src[i + 4 * q..][..4].as_ptr()));
        }
        for q in 0..Q {
            _mm_storeu_ps(dst[i + 4 * q..][..4].as_mut_ptr(), y[q]);
        }
        if bad != [0; Q] {
            for j in 0..4 * Q {
                if bad[j / 4] & (1 << (j % 4)) != 0 {
                    dst[i + j] = reference(fun, src[i + j]);
                }
            }
        }
    }

    /// The whole slice through `kernel`, sixteen lanes per iteration; the tail goes through
    /// padded blocks of four.
    #[inline(always)]
    unsafe fn each(
        fun: Fun,
        kernel: impl Fn(__m128) -> (__m128, i32) + Copy,
        src: &[f32],
        dst: &mut [f32],
    ) {
        let whole = src.len() / 16 * 16;
        for i in (0..whole).step_by(16) {
            lanes::<4>(fun, kernel, src, dst, i);
        }
        let mut i = whole;
        while i < src.len() {
            let rest = (src.len() - i).min(4);
            let (mut a, mut b) = ([0f32; 4], [0f32; 4]);
            a[..rest].copy_from_slice(&src[i..i + rest]);
            lanes::<1>(fun, kernel, &a, &mut b, 0);
            dst[i..i + rest].copy_from_slice(&b[..rest]);
            i += rest;
        }
    }

    /// The whole slice.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn apply(fun: Fun, src: &[f32], dst: &mut [f32]) {
        match fun {
            Fun::Sin => each(fun, |x| trig4(x, 0), src, dst),
            Fun::Cos => each(fun, |x| trig4(x, 1), src, dst),
            Fun::Tanh => each(fun, |x| (tanh4(x), 0), src, dst),
            Fun::Exp => each(fun, |x| (exp4(x), 0), src, dst),
            Fun::Sigmoid => each(fun, |x| (sigmoid4(x), 0), src, dst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<f32> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut xs: Vec<f32> = Vec::new();
        // any bit pattern (every exponent), then dense ranges where the functions bend
        for _ in 0..1_000_000 {
            xs.push(f32::from_bits(next() as u32));
        }
        for _ in 0..1_000_000 {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            xs.push(((u * 2.0 - 1.0) * 20.0) as f32);
        }
        for i in 0..200_000 {
            xs.push(i as f32 * 1e-4);
            xs.push(-(i as f32) * 7e-3);
        }
        xs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
            -3e38,
            1e-40,
            f32::MIN_POSITIVE,
            823_549.0,
            823_550.0,
            9.0,
            9.01,
            88.72,
            88.722_83,
            88.722_84,
            89.0,
            -87.33,
            -103.97,
            -103.972_08,
            -103.98,
            -104.0,
            -150.0,
            9.5,
            9.6,
            0.55,
            0.550_000_1,
            0.549_999_95,
            std::f32::consts::FRAC_PI_2,
            std::f32::consts::PI,
        ]);
        xs
    }

    #[test]
    fn kernels_are_correctly_rounded() {
        let xs = inputs();
        let mut out = vec![0f32; xs.len()];
        for fun in [Fun::Sin, Fun::Cos, Fun::Tanh, Fun::Exp, Fun::Sigmoid] {
            apply(fun, &xs, &mut out);
            let bad: Vec<(f32, f32, f32)> = xs
                .iter()
                .zip(&out)
                .map(|(&x, &got)| (x, got, reference(fun, x)))
                .filter(|(_, got, want)| {
                    !(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()))
                })
                .take(5)
                .collect();
            assert!(bad.is_empty(), "{fun:?} (x, got, want): {bad:?}");
        }
    }

    /// Per-element nanoseconds against f32 libm (`cargo test --release -p ex_burn_core
    /// exact32 -- --ignored --nocapture`; a measurement, nothing asserted on time).
    #[test]
    #[ignore]
    fn timing() {
        let xs: Vec<f32> = (0..1 << 20)
            .map(|i| (i as f32 * 1e-5).sin() * 6.0)
            .collect();
        let mut out = vec![0f32; xs.len()];
        let mut ns = |f: &mut dyn FnMut(&mut [f32])| {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let t = std::time::Instant::now();
                f(&mut out);
                best = best.min(t.elapsed().as_secs_f64() * 1e9 / xs.len() as f64);
            }
            best
        };
        // (libm called directly in each loop, as the op table's element functions call it)
        fn each(xs: &[f32], o: &mut [f32], f: impl Fn(f32) -> f32) {
            o.iter_mut().zip(xs).for_each(|(d, &x)| *d = f(x));
        }
        for fun in [Fun::Sin, Fun::Cos, Fun::Tanh, Fun::Exp, Fun::Sigmoid] {
            let ours = ns(&mut |o| apply(fun, &xs, o));
            let theirs = ns(&mut |o| match fun {
                Fun::Sin => each(&xs, o, f32::sin),
                Fun::Cos => each(&xs, o, f32::cos),
                Fun::Tanh => each(&xs, o, f32::tanh),
                Fun::Exp => each(&xs, o, f32::exp),
                Fun::Sigmoid => each(&xs, o, |x| 1.0 / (1.0 + (-x).exp())),
            });
            println!("{fun:?}: {ours:.2} ns/element, f32 libm {theirs:.2} ns/element");
        }
        // 16 elements a call, as a small loop's body calls them
        for fun in [Fun::Sin, Fun::Exp] {
            let small = ns(&mut |o| {
                for (d, s) in o.chunks_mut(16).zip(xs.chunks(16)) {
                    apply(fun, s, d)
                }
            });
            println!("{fun:?}, 16 a call: {small:.2} ns/element");
            // each call's input the previous call's result (latency, as in a loop's body)
            let mut best = f64::MAX;
            for _ in 0..15 {
                let (mut a, mut b) = ([0.5f32; 16], [0f32; 16]);
                let t = std::time::Instant::now();
                for _ in 0..100_000 {
                    apply(fun, &a, &mut b);
                    a = std::hint::black_box(b);
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e9 / 100_000.0);
            }
            println!("{fun:?}, 16 a call, chained: {best:.1} ns/call");
        }
    }

    /// Every f32 (all 2^32 bit patterns) through each kernel against f64 libm rounded
    /// (`cargo test --release -p ex_burn_core exact32 -- --ignored`; minutes on two cores).
    #[test]
    #[ignore]
    fn every_f32_is_correctly_rounded() {
        use rayon::prelude::*;
        for fun in [Fun::Sin, Fun::Cos, Fun::Tanh, Fun::Exp, Fun::Sigmoid] {
            let bad: Vec<u32> = (0u32..1 << 16)
                .into_par_iter()
                .flat_map_iter(|hi| {
                    let xs: Vec<f32> = (0..1u32 << 16)
                        .map(|lo| f32::from_bits(hi << 16 | lo))
                        .collect();
                    let mut out = vec![0f32; xs.len()];
                    apply(fun, &xs, &mut out);
                    xs.iter()
                        .zip(&out)
                        .filter(|(&x, got)| {
                            let want = reference(fun, x);
                            !(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()))
                        })
                        .map(|(x, _)| x.to_bits())
                        .take(3)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert!(bad.is_empty(), "{fun:?}: {:?}", &bad[..bad.len().min(10)]);
        }
    }

    #[test]
    fn any_length_and_offset() {
        let xs: Vec<f32> = (0..23).map(|i| i as f32 * 0.37 - 4.0).collect();
        for fun in [Fun::Tanh, Fun::Exp, Fun::Sigmoid] {
            for len in 0..xs.len() {
                let mut out = vec![7f32; len];
                apply(fun, &xs[..len], &mut out);
                for (x, y) in xs.iter().zip(&out) {
                    assert_eq!(y.to_bits(), reference(fun, *x).to_bits());
                }
            }
        }
    }
}
