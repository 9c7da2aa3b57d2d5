//! Helpers for the op tests: build tensors from numbers, run ops, read values back.
#![allow(dead_code)]

use ex_burn_core::{eval, DType, Device, Op, Scalar, Tensor};

pub use ex_burn_core::op::{
    ArgKind, Arith, Compare, CumulativeKind, Geometry, Logical, ReduceKind, ScatterKind, Unary,
    WindowKind,
};
pub use ex_burn_core::Step;

/// Encodes numbers as Nx bytes of `dtype`.
pub fn bytes_of(values: &[f64], dtype: DType) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in values {
        match dtype {
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::S8 => out.extend((v as i64 as i8).to_le_bytes()),
            DType::S16 => out.extend((v as i64 as i16).to_le_bytes()),
            DType::S32 => out.extend((v as i64 as i32).to_le_bytes()),
            DType::S64 => out.extend((v as i64).to_le_bytes()),
            DType::U8 => out.extend((v as i64 as u8).to_le_bytes()),
            DType::U16 => out.extend((v as i64 as u16).to_le_bytes()),
            DType::U32 => out.extend((v as i64 as u32).to_le_bytes()),
            DType::U64 => out.extend((v as u64).to_le_bytes()),
        }
    }
    out
}

/// Decodes Nx bytes of `dtype` into f64 values.
pub fn values_of(bytes: &[u8], dtype: DType) -> Vec<f64> {
    bytes
        .chunks(dtype.size())
        .map(|c| match dtype {
            DType::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
            DType::BF16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            DType::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::S8 => i8::from_le_bytes([c[0]]) as f64,
            DType::S16 => i16::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::S32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::S64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U8 => c[0] as f64,
            DType::U16 => u16::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U32 => u32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U64 => u64::from_le_bytes(c.try_into().unwrap()) as f64,
        })
        .collect()
}

/// The device tests run on: `EX_BURN_TEST_DEVICE=cuda` selects `{:cuda, 0}` (with the
/// device kernels this binary has installed first).
pub fn dev() -> Device {
    match std::env::var("EX_BURN_TEST_DEVICE").as_deref() {
        Ok("cuda") => {
            crate::device_kernels::install();
            Device::Cuda(0)
        }
        Ok("vulkan") => Device::Vulkan(0),
        _ => Device::Cpu,
    }
}

/// Whether device kernels are installed and fuse (NVIDIA GPUs with the CUDA kernels).
pub fn kernels_fuse() -> bool {
    ex_burn_core::kernels::installed().is_some_and(|k| k.fusion())
}

/// Whether the test device evaluates f32 library functions, small sums and small products in
/// f64 and rounds once (the CPU and CUDA); the wgpu devices (Vulkan, Metal) compute no f64 and
/// keep their f32 kernels.
pub fn rounds_from_f64() -> bool {
    matches!(dev(), Device::Cpu | Device::Cuda(_))
}

/// Whether the test device computes f64: the CPU and CUDA. The wgpu devices (Vulkan, Metal)
/// refuse f64 tensors with an `UnsupportedDtype` error naming the device
/// (`tensor::f64_is_refused_where_the_device_computes_none`); f64 cases skip them.
pub fn f64_on_device() -> bool {
    rounds_from_f64()
}

/// Whether the test device takes `dtype` (the wgpu devices refuse f64, and f16 or bf16 where
/// their driver reports no support for it).
pub fn supported(dtype: DType) -> bool {
    dev().check_dtype(dtype).is_ok()
}

/// The widest float type the test device computes: f64, or f32 on the wgpu devices.
pub fn wide_float() -> DType {
    if f64_on_device() {
        DType::F64
    } else {
        DType::F32
    }
}

/// Asserts `got == want` where the device rounds from f64 ([`rounds_from_f64`]), else
/// `|got - want| <= tol`; `what` names the value.
pub fn assert_rounded(got: f64, want: f64, tol: f64, what: &dyn Fn() -> String) {
    if rounds_from_f64() {
        assert!(got == want, "{}: {got}, want {want}", what());
    } else {
        assert!(
            (got - want).abs() <= tol,
            "{}: {got}, want {want} (tol {tol})",
            what()
        );
    }
}

/// A tensor of `dtype` and `shape` holding `values`.
pub fn t(values: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_bytes(&bytes_of(values, dtype), shape, dtype, dev()).expect("tensor")
}

/// An f32 tensor.
pub fn f(values: &[f64], shape: &[usize]) -> Tensor {
    t(values, shape, DType::F32)
}

/// An s64 tensor.
pub fn s(values: &[f64], shape: &[usize]) -> Tensor {
    t(values, shape, DType::S64)
}

/// Runs one op (or program step).
pub fn ev(op: impl Into<Step>, inputs: &[&Tensor]) -> Tensor {
    let op = op.into();
    let owned: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    ex_burn_core::program::eval(&op, &owned, dev())
        .unwrap_or_else(|e| panic!("{op:?} failed: {e}"))
        .remove(0)
}

/// Runs one op expecting an error; returns its kind.
pub fn ev_err(op: Op, inputs: &[&Tensor]) -> String {
    let owned: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    match ex_burn_core::guard(|| eval(&op, &owned, dev())) {
        Ok(_) => panic!("{op:?} should have failed"),
        Err(e) => e.kind().to_string(),
    }
}

/// The values of a tensor as f64.
pub fn v(t: &Tensor) -> Vec<f64> {
    values_of(&t.to_bytes(None).expect("read"), t.dtype())
}

/// Asserts shape, dtype and values (exactly).
pub fn check(t: &Tensor, shape: &[usize], dtype: DType, want: &[f64]) {
    assert_eq!(t.shape(), shape, "shape");
    assert_eq!(t.dtype(), dtype, "dtype");
    let got = v(t);
    assert_eq!(got.len(), want.len(), "length of {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.is_nan() && w.is_nan()) || g == w,
            "got {got:?}, want {want:?}"
        );
    }
}

/// Asserts values within a relative/absolute tolerance.
pub fn close(t: &Tensor, want: &[f64], tol: f64) {
    let got = v(t);
    assert_eq!(got.len(), want.len(), "length of {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "got {got:?}, want {want:?} (tol {tol})");
    }
}

/// A convolution with Nx's defaults (no strides, padding, dilation, groups or permutations).
pub fn conv() -> Op {
    Op::Conv {
        strides: None,
        padding: None,
        input_dilation: None,
        kernel_dilation: None,
        feature_group_size: 1,
        batch_group_size: 1,
        input_permutation: None,
        kernel_permutation: None,
        output_permutation: None,
        out: None,
        precision: Default::default(),
    }
}

/// `n` deterministic f32-representable values of both signs spread over `binades` binades
/// from 2^`lowest` (what makes the order of f32 additions matter).
pub fn spread(n: usize, seed: u64, binades: u64, lowest: i32) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            ((u - 0.5) * 2f64.powi((s % binades) as i32 + lowest)) as f32 as f64
        })
        .collect()
}

/// Evaluates `prog`'s instructions one at a time (no fusion, no folding).
pub fn op_by_op(prog: &ex_burn_core::Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut values: Vec<Tensor> = inputs.to_vec();
    for i in &prog.instrs {
        let args: Vec<&Tensor> = i.args.iter().map(|&a| &values[a]).collect();
        let r = ev(i.op.clone(), &args);
        values.push(r);
    }
    prog.outputs.iter().map(|&o| values[o].clone()).collect()
}

/// A program instruction.
pub fn ins(op: impl Into<Step>, args: &[usize]) -> ex_burn_core::program::Instr {
    ex_burn_core::program::Instr {
        op: op.into(),
        args: args.to_vec(),
    }
}

/// A scalar literal of `dtype` (`full` of rank 0).
pub fn lit(v: f64, dtype: DType) -> Op {
    Op::Full {
        shape: vec![],
        dtype,
        value: if dtype.is_float() {
            Scalar::F(v)
        } else {
            Scalar::I(v as i64)
        },
    }
}

/// `[m, k] x [k, n]` as a `dot`.
pub fn matmul_op(precision: ex_burn_core::op::Precision) -> Op {
    contraction(1, 0, precision)
}

/// A `dot` contracting axis `a` of the first operand with axis `b` of the second.
pub fn contraction(a: usize, b: usize, precision: ex_burn_core::op::Precision) -> Op {
    Op::Dot {
        contract_a: vec![a],
        batch_a: vec![],
        contract_b: vec![b],
        batch_b: vec![],
        out: None,
        precision,
    }
}

/// A reduction of `kind` over `axes`.
pub fn reduce_op(kind: ReduceKind, axes: &[usize], keep_axes: bool, out: Option<DType>) -> Op {
    Op::Reduce {
        kind,
        axes: Some(axes.to_vec()),
        keep_axes,
        out,
    }
}

/// A small deterministic generator (SplitMix64) for generated test programs.
pub struct Gen(pub u64);

impl Gen {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
