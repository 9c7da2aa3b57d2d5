//! The random number generator of ExBurn: reproducible for a seed on every device (random
//! tensors are generated on the host and moved), shared by the op table's random ops and
//! native training's initialisers and shuffles.

/// SplitMix64, a tiny, well-mixed 64-bit generator.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed ^ 0x5851_F42D_4C95_7F2D)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
