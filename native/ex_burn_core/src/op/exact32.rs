//! Correctly rounded f32 `sin`, `cos` and `tanh` for the CPU, four lanes at a time with AVX2.
//!
//! Each value is computed in f64 (Cody-Waite reduction by pi/2 and Taylor polynomials for the
//! trigonometric functions; `expm1` by a Taylor polynomial or `exp` by reduction by ln 2 for
//! `tanh`), with an error far below half an f32 ulp, then rounded once to f32: the result is
//! the f32 nearest to the exact value (the tests compare with f64 libm rounded to f32, as Nx's
//! `BinaryBackend` computes). That is what the Nx doctests expect, and 2x faster than glibc's
//! `tanhf` (the eager op and the fused chunk loops both use these, so they stay bit-identical).
//! Without AVX2 (other CPUs, other architectures) the op table keeps the platform's libm.
//! `|x| > 823549` (a reduction this one does not cover) goes through f64 libm per element.

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
/// Below `2|x|` = 1.1 `expm1` is a Taylor polynomial; above, `exp(y) - 1` loses < 1 bit.
const EXPM1_SMALL: f64 = 1.1;

/// `1/n!` for n = 0..=19.
const F: [f64; 20] = [
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
    1.147_074_559_772_972_5e-11,
    7.647_163_731_819_816e-13,
    4.779_477_332_387_385e-14,
    2.811_457_254_345_520_6e-15,
    1.561_920_696_858_622_5e-16,
    8.220_635_246_624_33e-18,
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
}

impl Fun {
    /// The function of `op` (`Sin`, `Cos`, `Tanh`).
    pub(crate) fn of(op: &crate::Op) -> Option<Fun> {
        match op {
            crate::Op::Sin => Some(Fun::Sin),
            crate::Op::Cos => Some(Fun::Cos),
            crate::Op::Tanh => Some(Fun::Tanh),
            _ => None,
        }
    }
}

/// Whether this CPU runs these kernels (x86-64 with AVX2), detected once.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `dst[i] = fun(src[i])`, correctly rounded. Callers check [`available`] first; without AVX2
/// this falls back to f64 libm per element (same results, slower).
pub(crate) fn apply(fun: Fun, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX2 was detected on this CPU.
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
    }) as f32
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    #[inline(always)]
    unsafe fn c(v: f64) -> __m256d {
        _mm256_set1_pd(v)
    }

    /// `k[0] + z * (k[1] + z * (... + z * k[last]))`.
    #[inline(always)]
    unsafe fn horner(z: __m256d, k: &[f64]) -> __m256d {
        let mut acc = c(k[k.len() - 1]);
        for &ki in k[..k.len() - 1].iter().rev() {
            acc = _mm256_add_pd(c(ki), _mm256_mul_pd(z, acc));
        }
        acc
    }

    /// sin (`shift` 0) or cos (`shift` 1) of four lanes; the mask has a bit per lane out of
    /// range (those lanes are garbage).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn trig4(x: __m128, shift: i64) -> (__m128, i32) {
        let xd = _mm256_cvtps_pd(x);
        let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
        let ok = _mm256_cmp_pd::<_CMP_LE_OQ>(_mm256_and_pd(xd, abs), c(LIMIT));
        let xs = _mm256_and_pd(xd, ok);
        let v = _mm256_add_pd(_mm256_mul_pd(xs, c(INV_PIO2)), c(MAGIC));
        let quadrant = _mm256_and_si256(
            _mm256_add_epi64(_mm256_castpd_si256(v), _mm256_set1_epi64x(shift)),
            _mm256_set1_epi64x(3),
        );
        let k = _mm256_sub_pd(v, c(MAGIC));
        let r = _mm256_sub_pd(
            _mm256_sub_pd(
                _mm256_sub_pd(xs, _mm256_mul_pd(k, c(P1))),
                _mm256_mul_pd(k, c(P2)),
            ),
            _mm256_mul_pd(k, c(P3)),
        );
        let z = _mm256_mul_pd(r, r);
        // sin r = r + r z (-1/3! + z (1/5! - ... + z / 17!))
        let ps = horner(z, &[-F[3], F[5], -F[7], F[9], -F[11], F[13], -F[15], F[17]]);
        let s = _mm256_add_pd(r, _mm256_mul_pd(_mm256_mul_pd(r, z), ps));
        // cos r = 1 - z/2 + z^2 (1/4! - z/6! + ... + z^7/18!)
        let pc = horner(
            z,
            &[F[4], -F[6], F[8], -F[10], F[12], -F[14], F[16], -F[18]],
        );
        let cs = _mm256_add_pd(
            _mm256_sub_pd(c(1.0), _mm256_mul_pd(c(0.5), z)),
            _mm256_mul_pd(_mm256_mul_pd(z, z), pc),
        );
        let one = _mm256_set1_epi64x(1);
        let odd = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(quadrant, one), one));
        let m = _mm256_blendv_pd(s, cs, odd);
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

    /// tanh of four lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn tanh4(x: __m128) -> __m128 {
        let xd = _mm256_cvtps_pd(x);
        let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
        let ax = _mm256_and_pd(xd, abs);
        let y = _mm256_mul_pd(c(2.0), _mm256_min_pd(ax, c(TANH_SAT)));
        // expm1(y) for y <= 1.1: y (1 + y/2! + ... + y^18/19!)
        let ys = _mm256_min_pd(y, c(EXPM1_SMALL));
        let t_small = _mm256_mul_pd(ys, horner(ys, &F[1..20]));
        // exp(y) - 1 for y > 1.1: 2^k exp(r), |r| <= ln2 / 2, exp(r) to r^14 / 14!
        let v = _mm256_add_pd(_mm256_mul_pd(y, c(INV_LN2)), c(MAGIC));
        let k = _mm256_sub_pd(v, c(MAGIC));
        let kbits = _mm256_sub_epi64(_mm256_castpd_si256(v), _mm256_castpd_si256(c(MAGIC)));
        let r = _mm256_sub_pd(
            _mm256_sub_pd(y, _mm256_mul_pd(k, c(LN2_HI))),
            _mm256_mul_pd(k, c(LN2_LO)),
        );
        let er = _mm256_add_pd(c(1.0), _mm256_mul_pd(r, horner(r, &F[1..15])));
        let scale = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_add_epi64(
            kbits,
            _mm256_set1_epi64x(1023),
        )));
        let t_big = _mm256_sub_pd(_mm256_mul_pd(er, scale), c(1.0));
        let t = _mm256_blendv_pd(
            t_big,
            t_small,
            _mm256_cmp_pd::<_CMP_LE_OQ>(y, c(EXPM1_SMALL)),
        );
        // tanh |x| = t / (t + 2), 1 when saturated, sign of x, NaN kept
        let th = _mm256_div_pd(t, _mm256_add_pd(t, c(2.0)));
        let th = _mm256_blendv_pd(th, c(1.0), _mm256_cmp_pd::<_CMP_GT_OQ>(ax, c(TANH_SAT)));
        let th = _mm256_or_pd(th, _mm256_andnot_pd(abs, xd));
        let th = _mm256_blendv_pd(th, xd, _mm256_cmp_pd::<_CMP_UNORD_Q>(xd, xd));
        _mm256_cvtpd_ps(th)
    }

    /// Four lanes of `fun`, out-of-range lanes fixed by the reference.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn lanes(fun: Fun, src: &[f32], dst: &mut [f32]) {
        let x = _mm_loadu_ps(src.as_ptr());
        let (y, bad) = match fun {
            Fun::Sin => trig4(x, 0),
            Fun::Cos => trig4(x, 1),
            Fun::Tanh => (tanh4(x), 0),
        };
        _mm_storeu_ps(dst.as_mut_ptr(), y);
        if bad != 0 {
            for i in 0..4 {
                if bad & (1 << i) != 0 {
                    dst[i] = reference(fun, src[i]);
                }
            }
        }
    }

    /// The whole slice; the tail goes through a padded block of four.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn apply(fun: Fun, src: &[f32], dst: &mut [f32]) {
        let whole = src.len() / 4 * 4;
        for i in (0..whole).step_by(4) {
            lanes(fun, &src[i..i + 4], &mut dst[i..i + 4]);
        }
        if whole < src.len() {
            let (mut a, mut b) = ([0f32; 4], [0f32; 4]);
            let rest = src.len() - whole;
            a[..rest].copy_from_slice(&src[whole..]);
            lanes(fun, &a, &mut b);
            dst[whole..].copy_from_slice(&b[..rest]);
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
        for fun in [Fun::Sin, Fun::Cos, Fun::Tanh] {
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

    #[test]
    fn any_length_and_offset() {
        let xs: Vec<f32> = (0..23).map(|i| i as f32 * 0.37 - 4.0).collect();
        for len in 0..xs.len() {
            let mut out = vec![7f32; len];
            apply(Fun::Tanh, &xs[..len], &mut out);
            for (x, y) in xs.iter().zip(&out) {
                assert_eq!(y.to_bits(), reference(Fun::Tanh, *x).to_bits());
            }
        }
    }
}
