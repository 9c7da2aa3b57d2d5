//! The memory guard's plans against measured peaks: each case runs alone in a child process
//! (this test binary, re-run on one ignored test) that reads its peak resident memory
//! (`VmHWM`, reset through `/proc/self/clear_refs` once the inputs exist) around one op.
//! `plans_cover_measured_peaks` checks every case at 2^21 elements, where a temporary of two
//! bytes per element stands out of the noise;
//! `EX_BURN_PEAK_N=<elements> cargo test ... memory::peak_table -- --ignored --nocapture`
//! prints the table at another size.

use super::common::*;
use ex_burn_core::op::plan::plan;
use ex_burn_core::op::TieBreak;
use ex_burn_core::{DType, Device, Op, Scalar, Tensor};

/// A tensor of `shape` and `dtype` whose every byte is `byte` (1: small positive floats, valid
/// nothing else needs; 0: zero indices).
fn filled(shape: &[usize], dtype: DType, byte: u8) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_bytes(&vec![byte; n * dtype.size()], shape, dtype, Device::Cpu).expect("input")
}

/// `u8`, `s32`, `bf16`, `f32`, ... as a type.
fn dtype(name: &str) -> DType {
    let split = name.find(|c: char| c.is_ascii_digit()).expect("a type");
    let (class, bits) = name.split_at(split);
    DType::from_nx(class, bits.parse().expect("bits")).expect("type")
}

/// A name of the op table (`"exp"`, `"add"`, ...) as one of its kind enums.
fn kind<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_json::from_value(serde_json::Value::String(name.into())).expect("a kind name")
}

/// The op names of a family of the table (every op of it is checked as it is declared).
fn family(name: &str) -> Vec<String> {
    ex_burn_core::op::names()
        .into_iter()
        .find(|(f, _)| *f == name)
        .map(|(_, names)| names)
        .expect("a family of the op table")
}

const FLOATS: &[&str] = &["bf16", "f32", "f64"];
const INTS: &[&str] = &["u8", "s16", "s32", "u64"];

/// Every case: `family:args` names (see [`case`]).
fn all_cases() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let types: Vec<&str> = INTS.iter().chain(FLOATS).copied().collect();
    for t in &types {
        for f in ["iota", "iota_axis", "eye", "full", "random"] {
            v.push(format!("{f}:{t}"));
        }
        for u in family("unary") {
            let int_only = matches!(
                u.as_str(),
                "bitwise_not" | "population_count" | "count_leading_zeros"
            );
            if !(int_only && FLOATS.contains(t)) {
                v.push(format!("unary:{u}:{t}"));
            }
        }
        for a in family("binary") {
            let int_only = matches!(
                a.as_str(),
                "quotient"
                    | "bitwise_and"
                    | "bitwise_or"
                    | "bitwise_xor"
                    | "left_shift"
                    | "right_shift"
            );
            let skip = (int_only && FLOATS.contains(t)) || (a == "atan2" && INTS.contains(t));
            if !skip {
                v.push(format!("binary:{a}:{t}:{t}"));
            }
        }
        for k in ["sum", "product", "reduce_max", "all"] {
            v.push(format!("reduce:{k}:{t}"));
            v.push(format!("reduce_axis:{k}:{t}"));
        }
        for f in [
            "argmax",
            "cumulative_sum",
            "cumulative_product",
            "cumulative_max",
            "sort",
            "argsort",
            "pad",
            "pad_interior",
            "broadcast",
            "dot",
            "take",
            "gather",
            "take_along_axis",
            "indexed_add",
            "indexed_put",
            "window_sum",
            "window_max",
            "window_scatter_max",
            "select",
            "clip",
            "compare",
            "logical_and",
            "reverse",
            "transpose",
            "slice",
            "put_slice",
        ] {
            v.push(format!("{f}:{t}"));
        }
        for to in &types {
            if to != t {
                v.push(format!("as_type:{t}:{to}"));
            }
        }
    }
    for t in FLOATS {
        v.push(format!("conv:{t}"));
        v.push(format!("softmax:{t}"));
        v.push(format!("log_softmax:{t}"));
        v.push(format!("triangular_solve:{t}"));
    }
    v.push("binary:multiply:s8:f32".into());
    v.push("binary:add:u8:s32".into());
    v.push("binary_row:add:f32:f32".into());
    v.push("binary_row:multiply:s8:f32".into());
    v.push("concatenate:u8:f32".into());
    v.push("concatenate:f32:f32".into());
    v.push("concatenate_many:f32".into());
    v.push("stack_many:f32".into());
    v
}

/// The op and inputs of case `name` (`family:args`) at about `n` elements.
fn case(name: &str, n: usize) -> (Op, Vec<Tensor>) {
    let cols = 1024;
    let rows = (n / cols).max(2);
    let mat = [rows, cols];
    let n = rows * cols;
    let parts: Vec<&str> = name.split(':').collect();
    let t = parts.last().map_or(DType::F32, |t| dtype(t));
    let x = || filled(&mat, t, 1);
    let zero = |t| filled(&[], t, 0);
    let geometry = || Geometry {
        window_dims: vec![1, 3],
        strides: None,
        padding: Some(vec![(0, 0), (1, 1)]),
        window_dilations: None,
    };
    let creation = |f: &str| match f {
        "iota" | "iota_axis" => Op::Iota {
            shape: mat.to_vec(),
            dtype: t,
            axis: (f == "iota_axis").then_some(1),
        },
        "eye" => Op::Eye {
            shape: mat.to_vec(),
            dtype: t,
        },
        "full" => Op::Full {
            shape: mat.to_vec(),
            dtype: t,
            value: Scalar::I(1),
        },
        _ => Op::RandomUniform {
            shape: mat.to_vec(),
            dtype: t,
            min: 0.0,
            max: 1.0,
            seed: 1,
        },
    };
    match parts[0] {
        f @ ("iota" | "iota_axis" | "eye" | "full" | "random") => (creation(f), vec![]),
        "unary" => (Op::Unary(kind(parts[1])), vec![x()]),
        "binary" | "binary_row" => {
            let (a, b) = (dtype(parts[2]), dtype(parts[3]));
            let b_shape: &[usize] = if parts[0] == "binary_row" {
                &[cols]
            } else {
                &mat
            };
            (
                Op::Binary {
                    op: kind(parts[1]),
                    out: None,
                },
                vec![filled(&mat, a, 1), filled(b_shape, b, 1)],
            )
        }
        "compare" => (Op::Compare(Compare::Less), vec![x(), x()]),
        "logical_and" => (Op::Logical(Logical::And), vec![x(), x()]),
        "select" => (
            Op::Select { out: None },
            vec![filled(&mat, DType::U8, 1), x(), x()],
        ),
        "clip" => (Op::Clip, vec![x(), zero(t), filled(&[], t, 1)]),
        "as_type" => (
            Op::AsType { dtype: t },
            vec![filled(&mat, dtype(parts[1]), 1)],
        ),
        "reduce" | "reduce_axis" => (
            Op::Reduce {
                kind: kind(parts[1]),
                axes: (parts[0] == "reduce_axis").then(|| vec![1]),
                keep_axes: false,
                out: None,
            },
            vec![x()],
        ),
        "argmax" => (
            Op::Arg {
                kind: ArgKind::Max,
                axis: Some(1),
                keep_axis: false,
                tie_break: TieBreak::Low,
                out: None,
            },
            vec![x()],
        ),
        f @ ("cumulative_sum" | "cumulative_product" | "cumulative_max") => (
            Op::Cumulative {
                kind: kind(f),
                axis: 1,
                reverse: false,
            },
            vec![x()],
        ),
        "sort" => (
            Op::Sort {
                axis: 1,
                descending: false,
            },
            vec![x()],
        ),
        "argsort" => (
            Op::Argsort {
                axis: 1,
                descending: false,
                out: None,
            },
            vec![x()],
        ),
        "concatenate" => (
            Op::Concatenate { axis: 0 },
            vec![filled(&mat, dtype(parts[1]), 1), x()],
        ),
        // many one-element inputs: what each input costs beyond its data
        f @ ("concatenate_many" | "stack_many") => {
            let one = filled(&[1], t, 1);
            let op = if f == "stack_many" {
                Op::Stack { axis: 0 }
            } else {
                Op::Concatenate { axis: 0 }
            };
            (op, vec![one; (n / 64).max(2)])
        }
        "pad" => (
            Op::Pad {
                config: vec![(1, 1, 0), (3, -2, 0)],
            },
            vec![x(), zero(t)],
        ),
        "pad_interior" => (
            Op::Pad {
                config: vec![(0, 0, 0), (1, 1, 1)],
            },
            vec![filled(&[rows, cols / 2], t, 1), zero(t)],
        ),
        "broadcast" => (
            Op::Broadcast {
                shape: mat.to_vec(),
                axes: Some(vec![1]),
            },
            vec![filled(&[cols], t, 1)],
        ),
        "transpose" => (Op::Transpose { axes: None }, vec![x()]),
        "reverse" => (
            Op::Reverse {
                axes: Some(vec![1]),
            },
            vec![x()],
        ),
        "slice" => (
            Op::Slice {
                starts: vec![0, 1],
                lengths: vec![rows, cols / 2],
                strides: Some(vec![1, 2]),
                dynamic: vec![],
            },
            vec![x()],
        ),
        "put_slice" => (
            Op::PutSlice {
                starts: vec![0, 0],
                dynamic: vec![],
            },
            vec![x(), filled(&[rows / 2, cols], t, 1)],
        ),
        // [rows, 64] x [64, 1024]: a result of n elements
        "dot" => (
            Op::Dot {
                contract_a: vec![1],
                batch_a: vec![],
                contract_b: vec![0],
                batch_b: vec![],
                out: None,
                precision: Default::default(),
            },
            vec![filled(&[rows, 64], t, 1), filled(&[64, cols], t, 1)],
        ),
        // [batch, 8, 32, 32] * [16, 8, 3, 3], padded: a result of about n elements
        "conv" => {
            let batch = (n / (16 * 32 * 32)).max(1);
            let op = match conv() {
                Op::Conv {
                    strides,
                    input_dilation,
                    kernel_dilation,
                    feature_group_size,
                    batch_group_size,
                    input_permutation,
                    kernel_permutation,
                    output_permutation,
                    out,
                    precision,
                    ..
                } => Op::Conv {
                    strides,
                    padding: Some(vec![(1, 1), (1, 1)]),
                    input_dilation,
                    kernel_dilation,
                    feature_group_size,
                    batch_group_size,
                    input_permutation,
                    kernel_permutation,
                    output_permutation,
                    out,
                    precision,
                },
                other => other,
            };
            (
                op,
                vec![
                    filled(&[batch, 8, 32, 32], t, 1),
                    filled(&[16, 8, 3, 3], t, 1),
                ],
            )
        }
        "take" => (
            Op::Take { axis: 0 },
            vec![filled(&[64, cols], t, 1), filled(&[rows], DType::S64, 0)],
        ),
        "take_along_axis" => (
            Op::TakeAlongAxis { axis: 1 },
            vec![x(), filled(&mat, DType::S64, 0)],
        ),
        "gather" => (
            Op::Gather { axes: vec![0] },
            vec![filled(&[64, cols], t, 1), filled(&[rows, 1], DType::S64, 0)],
        ),
        f @ ("indexed_add" | "indexed_put") => {
            let op = if f == "indexed_add" {
                Op::IndexedAdd {
                    axes: vec![0],
                    out: None,
                }
            } else {
                Op::IndexedPut {
                    axes: vec![0],
                    out: None,
                }
            };
            (op, vec![x(), filled(&[rows, 1], DType::S64, 0), x()])
        }
        f @ ("window_sum" | "window_max") => (
            Op::Window {
                kind: kind(f),
                geometry: geometry(),
            },
            vec![x()],
        ),
        "window_scatter_max" => (
            Op::WindowScatter {
                kind: ScatterKind::Max,
                window_dims: vec![1, 2],
                strides: Some(vec![1, 2]),
                padding: None,
            },
            vec![x(), filled(&[rows, cols / 2], t, 1), zero(t)],
        ),
        "softmax" => (Op::Softmax { axis: 1 }, vec![x()]),
        "log_softmax" => (Op::LogSoftmax { axis: 1 }, vec![x()]),
        "triangular_solve" => {
            let k = 256;
            (
                Op::TriangularSolve {
                    lower: true,
                    left_side: true,
                    transform_a: Default::default(),
                },
                vec![filled(&[k, k], t, 1), filled(&[k, n / k], t, 1)],
            )
        }
        other => panic!("no memory case {other}"),
    }
}

/// A field of `/proc/self/status` in bytes.
fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("field")
}

/// What one child measured: the case's plan and its peak above the memory its inputs took.
#[derive(Debug, Clone, Copy)]
struct Measured {
    plan: u128,
    peak: u64,
    result: u64,
}

/// The child's half: runs `EX_BURN_PEAK_CASE` at `EX_BURN_PEAK_N` elements and prints its
/// plan and peak.
#[test]
#[ignore = "run by the memory tests in a child process"]
fn peak_child() {
    let Ok(name) = std::env::var("EX_BURN_PEAK_CASE") else {
        return;
    };
    let n: usize = std::env::var("EX_BURN_PEAK_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 22);
    // the thread pool and allocator started before the measure
    let warm = filled(&[64, 64], DType::F32, 1);
    ex_burn_core::eval(
        &Op::Unary(Unary::Exp),
        std::slice::from_ref(&warm),
        Device::Cpu,
    )
    .expect("warm");
    let (op, inputs) = case(&name, n);
    let planned = plan(&op, &inputs).expect("plan").bytes;
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak");
    let before = status("VmRSS:");
    let out = ex_burn_core::eval(&op, &inputs, Device::Cpu).expect("op");
    let peak = status("VmHWM:").saturating_sub(before);
    let result: usize = out.iter().map(Tensor::byte_size).sum();
    println!("PEAK {name} {planned} {peak} {result}");
}

/// Runs case `name` at `n` elements in a child process.
fn measure(name: &str, n: usize) -> Measured {
    // (this very binary, even when a rebuild has replaced its file meanwhile)
    let exe = "/proc/self/exe";
    // its path in this binary (the CUDA crate's copy of these tests nests them in `engine`)
    let (_, module) = module_path!().split_once("::").unwrap_or(("", "memory"));
    let test = format!("{module}::peak_child");
    let out = std::process::Command::new(exe)
        .args([
            test.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EX_BURN_PEAK_CASE", name)
        .env("EX_BURN_PEAK_N", n.to_string())
        .output()
        .expect("child");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.find("PEAK ").map(|i| &l[i + 5..]))
        .unwrap_or_else(|| {
            panic!(
                "{name}: the child printed no peak\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let f: Vec<&str> = line.split_whitespace().collect();
    Measured {
        plan: f[1].parse().expect("plan"),
        peak: f[2].parse().expect("peak"),
        result: f[3].parse().expect("result"),
    }
}

/// Measures `names` at `n` elements, two children at a time.
fn measure_all(names: &[String], n: usize) -> Vec<(String, Measured)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                let m = measure(name, n);
                out.lock().unwrap().push((i, name.clone(), m));
            });
        }
    });
    let mut v = out.into_inner().unwrap();
    v.sort_by_key(|(i, _, _)| *i);
    v.into_iter().map(|(_, name, m)| (name, m)).collect()
}

/// Peaks measured above the plan by less than this are noise: the allocator's arenas and the
/// threads' buffers (measured up to 2.5 MiB at 2^21, 2^22 and 2^24 elements, whatever the op).
const NOISE: u64 = 3 << 20;

#[test]
fn plans_cover_measured_peaks() {
    if dev() != Device::Cpu || !cfg!(target_os = "linux") {
        eprintln!("skipped: peaks are measured on the host, through /proc");
        return;
    }
    // (s16 takes the paths of s32)
    let cases: Vec<String> = all_cases()
        .into_iter()
        .filter(|c| !c.contains("s16"))
        .collect();
    let short: Vec<String> = measure_all(&cases, 1 << 21)
        .into_iter()
        .filter(|(_, m)| m.peak as u128 > m.plan + NOISE as u128)
        .map(|(name, m)| format!("{name}: peak {} > plan {}", m.peak, m.plan))
        .collect();
    assert!(
        short.is_empty(),
        "plans below the measured peak:\n{}",
        short.join("\n")
    );
}

/// Prints every case's plan, peak and result at `EX_BURN_PEAK_N` elements (default 2^24);
/// `EX_BURN_PEAK_ONLY=prefix,prefix` picks cases.
#[test]
#[ignore = "a measurement: EX_BURN_PEAK_N=<elements> ... -- --ignored --nocapture"]
fn peak_table() {
    let n: usize = std::env::var("EX_BURN_PEAK_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 24);
    let only = std::env::var("EX_BURN_PEAK_ONLY").ok();
    let names: Vec<String> = all_cases()
        .into_iter()
        .filter(|name| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| name.starts_with(x)))
        })
        .collect();
    let mib = |b: f64| b / (1u64 << 20) as f64;
    println!(
        "{:<34} {:>10} {:>10} {:>10}  peak/plan",
        "case", "plan MiB", "peak MiB", "result MiB"
    );
    for (name, m) in measure_all(&names, n) {
        println!(
            "{name:<34} {:>10.1} {:>10.1} {:>10.1}  {:.2}",
            mib(m.plan as f64),
            mib(m.peak as f64),
            mib(m.result as f64),
            m.peak as f64 / (m.plan as f64).max(1.0)
        );
    }
}
