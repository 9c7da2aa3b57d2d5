//! Reshapes of strided f32 CUDA tensors (transposed, sliced or permuted views) without Burn's
//! general copy kernel.
//!
//! Burn 0.21 copies a strided tensor before most reshapes (CubeCL's `CopyKernelPack`, a slow
//! kernel on an attention's transposed scores), even where the new shape can be read from
//! the same buffer with other strides. Here such a reshape is a view with computed strides
//! (cuBLAS then reads a transposed operand as it is stored), and one that cannot be a view is
//! one copy by an element-wise kernel of ours. More of Burn's strided paths are kernels of ours
//! here: `put_slice` (one pass writing the result), f32 sums over leading axes and around kept
//! ones (batch normalization's statistics), `slice` at starts read on the device, and the
//! scatter-add of rows behind an embedding's gradient.

use crate::elementwise::{
    self, f32_cube, grid, grid_loop, header, header_with, map_source, strided_index, submit,
};
use burn_dispatch::{BackendTensor, DispatchTensor, DispatchTensorKind};
use ex_burn_core::kernels::{Operand, Start};
use ex_burn_core::Result;

/// The strides that read a tensor of `shape` stored with `strides` as `new` (same elements in
/// row-major order) from the same buffer: each run of axes merged or split must be evenly
/// strided; `None` where no strides can.
pub fn view_strides(shape: &[usize], strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    if shape.iter().product::<usize>() == 0 {
        return None;
    }
    let old: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let wide: Vec<usize> = (0..new.len()).filter(|&j| new[j] != 1).collect();
    let mut out = vec![0; new.len()];
    let (mut i, mut j) = (0, 0);
    while i < old.len() && j < wide.len() {
        let (i0, j0) = (i, j);
        let (mut have, mut want) = (old[i].0, new[wide[j]]);
        (i, j) = (i + 1, j + 1);
        while have != want {
            if have < want && i < old.len() {
                have *= old[i].0;
                i += 1;
            } else if want < have && j < wide.len() {
                want *= new[wide[j]];
                j += 1;
            } else {
                return None;
            }
        }
        if (i0..i - 1).any(|k| old[k].1 != old[k + 1].1 * old[k + 1].0) {
            return None;
        }
        // the new axes of this run, innermost first, from the run's innermost stride
        let mut s = old[i - 1].1;
        for &w in wide[j0..j].iter().rev() {
            out[w] = s;
            s *= new[w];
        }
    }
    if i != old.len() || j != wide.len() {
        return None;
    }
    for k in (0..new.len()).rev() {
        if new[k] == 1 {
            out[k] = out.get(k + 1).map_or(1, |&s| s * new[k + 1]);
        }
    }
    Some(out)
}

/// Whether `strides` are the row-major strides of `shape` (unit axes aside).
pub fn contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut want = 1;
    shape.iter().zip(strides).rev().all(|(&d, &s)| {
        let ok = d == 1 || s == want;
        want *= d;
        ok
    })
}

/// `t` (an f32 CUDA tensor stored with strides other than row-major) as `shape`: a view of
/// its buffer where strides can express it, else its elements copied into a row-major buffer
/// of `t`'s shape by one kernel (the engine reshapes that). `None` where Burn's reshape only
/// changes metadata (a row-major tensor) or this does not apply (another type or device).
pub fn reshape(t: Operand, shape: &[usize]) -> Result<Option<DispatchTensor>> {
    let prim = t.prim;
    let Some(cube) = f32_cube(prim) else {
        return Ok(None);
    };
    let strides = cube.meta.strides().to_vec();
    let have = t.shape;
    if strides.len() != have.len() || contiguous(have, &strides) {
        return Ok(None);
    }
    let dims = ex_burn_core::tensor::prim_shape(shape);
    if let Some(view_strides) = view_strides(have, &strides, &dims) {
        let mut view = cube.clone();
        *view.meta.shape_mut() = dims;
        *view.meta.strides_mut() = view_strides.into_iter().collect();
        return Ok(Some(DispatchTensor {
            kind: DispatchTensorKind::Cuda(BackendTensor::Float(view)),
            checkpointing: prim.checkpointing,
        }));
    }
    if !elementwise::available() {
        return Ok(None);
    }
    let index = strided_index(have, &strides, have);
    let source = map_source(1, &format!("o0[i] = e0[{index}];"));
    let n = t.numel();
    Ok(submit(&source, &[t], &[have.to_vec()], grid(n), n)?.and_then(|mut o| o.pop()))
}

/// `update` written into a copy of `t` at `starts` (Nx's `put_slice`), both f32 CUDA tensors
/// read through their strides, as one kernel of ours that writes every element once. Burn
/// copies `t` into a new buffer and then writes the window: for the gradient of a slice (the
/// update put into a broadcast zero of the projection's size, three times per attention
/// layer) that is two passes over a large buffer instead of one. A start read on the device
/// ([`Start::Read`], a key/value cache's position in a generation loop) is an operand of the
/// kernel, clamped there, so the kernel is compiled once for every position and the host
/// never waits for it. `None` where this does not apply (another type or device).
pub fn put_slice(t: Operand, update: Operand, starts: &[Start]) -> Result<Option<DispatchTensor>> {
    let (Some(ts), Some(us)) = (elementwise::strides(t), elementwise::strides(update)) else {
        return Ok(None);
    };
    let (full, lens) = (t.shape, update.shape);
    let rank = full.len();
    if ts.len() != rank
        || us.len() != rank
        || lens.len() != rank
        || starts.len() != rank
        || t.numel() == 0
        || !elementwise::available()
    {
        return Ok(None);
    }
    let mut inputs = vec![t, update];
    let at = starts_as_inputs(starts, &mut inputs);
    if elementwise::reusable(t, t.numel()) {
        // nothing else holds `t`'s buffer: the update written into it, one thread per element
        // of the update (a cache of 377 MB was copied whole for each layer's keys and values)
        let source = put_slice_in_place_source(full, lens, &us, &at);
        let n = update.numel();
        if n == 0 {
            return Ok(None);
        }
        let out = elementwise::submit_reusing(
            &source,
            &inputs,
            &[full.to_vec()],
            grid(n),
            n,
            &[Some(0)],
        )?;
        ex_burn_core::profile::note("kernel, in place");
        return Ok(out.and_then(|mut o| o.pop()));
    }
    let source = put_slice_source(full, lens, &ts, &us, &at);
    let n = t.numel();
    let out = submit(&source, &inputs, &[full.to_vec()], grid(n), n)?;
    ex_burn_core::profile::note("kernel");
    Ok(out.and_then(|mut o| o.pop()))
}

/// The kernel of [`put_slice`] written over the target's buffer (`o0`, the same buffer as
/// operand `e0`, which it does not read; contiguous, of shape `full`): for each element `i` of
/// the update (shape `lens`, stored with strides `us`), its place in the window at `starts`.
fn put_slice_in_place_source(
    full: &[usize],
    lens: &[usize],
    us: &[usize],
    starts: &[At],
) -> String {
    let (mut read, mut to, mut from) = (String::new(), Vec::new(), Vec::new());
    let total: usize = lens.iter().product();
    for a in 0..full.len() {
        let s = start_expr(a, full[a] - lens[a], starts[a], &mut read);
        let inner: usize = full[a + 1..].iter().product();
        if lens[a] == 1 {
            to.push(format!("{s} * {inner}ULL"));
            continue;
        }
        let c = format!(
            "(unsigned long long){}",
            elementwise::coordinate(lens[a + 1..].iter().product(), lens[a], total)
        );
        to.push(format!("({s} + {c}) * {inner}ULL"));
        if us[a] != 0 {
            from.push(format!("{c} * {}ULL", us[a]));
        }
    }
    let from = if from.is_empty() {
        "0".to_string()
    } else {
        from.join(" + ")
    };
    let inputs = 2 + read_starts(starts);
    format!(
        "{}{}{read}    o0[{}] = e1[{from}];\n  }}\n}}\n",
        elementwise::header_with("", inputs, 1, false),
        elementwise::grid_loop("i"),
        to.join(" + ")
    )
}

/// The window of `t` (an f32 CUDA tensor read through its strides) of `lens` elements per
/// axis, every `steps`-th taken, at `starts` (Nx's `slice`), as one kernel of ours. Used where
/// a start is read on the device ([`Start::Read`], the position of a generation loop reading
/// its logits or cache): the kernel reads and clamps it, so the host never waits for it and
/// the kernel is compiled once for every position. `None` where this does not apply (another
/// type or device, an empty window).
pub fn slice(
    t: Operand,
    starts: &[Start],
    lens: &[usize],
    steps: &[usize],
) -> Result<Option<DispatchTensor>> {
    let Some(ts) = elementwise::strides(t) else {
        return Ok(None);
    };
    let full = t.shape;
    let rank = full.len();
    let fits = lens.iter().zip(full).all(|(&l, &d)| l <= d) && steps.iter().all(|&s| s > 0);
    if ts.len() != rank
        || starts.len() != rank
        || lens.len() != rank
        || steps.len() != rank
        || !fits
        || !elementwise::available()
    {
        return Ok(None);
    }
    let out: Vec<usize> = lens
        .iter()
        .zip(steps)
        .map(|(&l, &s)| l.div_ceil(s))
        .collect();
    let n: usize = out.iter().product();
    if n == 0 {
        return Ok(None);
    }
    let mut inputs = vec![t];
    let at = starts_as_inputs(starts, &mut inputs);
    let source = slice_source(full, lens, &out, steps, &ts, &at, inputs.len());
    let res = submit(&source, &inputs, &[out], grid(n), n)?;
    ex_burn_core::profile::note("kernel");
    Ok(res.and_then(|mut o| o.pop()))
}

/// The kernel of [`slice`]: a source of shape `full` stored with strides `ts`, its window of
/// `lens` at `starts` read every `steps` elements into a result of shape `out`.
fn slice_source(
    full: &[usize],
    lens: &[usize],
    out: &[usize],
    steps: &[usize],
    ts: &[usize],
    starts: &[At],
    inputs: usize,
) -> String {
    let (mut read, mut terms) = (String::new(), Vec::new());
    let total: usize = out.iter().product();
    for a in 0..full.len() {
        let s = start_expr(a, full[a] - lens[a], starts[a], &mut read);
        if full[a] == 1 || ts[a] == 0 {
            continue;
        }
        let inner: usize = out[a + 1..].iter().product();
        let c = format!(
            "(unsigned long long){}",
            elementwise::coordinate(inner, out[a], total)
        );
        terms.push(format!("({s} + {c} * {}ULL) * {}ULL", steps[a], ts[a]));
    }
    let index = if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    };
    map_source(inputs, &format!("{read}    o0[i] = e0[{index}];"))
}

/// The kernel's view of `starts`: each read start becomes the next operand after `inputs`.
fn starts_as_inputs<'a>(starts: &[Start<'a>], inputs: &mut Vec<Operand<'a>>) -> Vec<At> {
    starts
        .iter()
        .map(|s| match *s {
            Start::At(v) => At::Fixed(v),
            Start::Read(o) => {
                inputs.push(o);
                At::Operand(inputs.len() - 1)
            }
        })
        .collect()
}

/// The expression of the start along axis `a` of a window that fits at starts `0..=hi`:
/// a constant, or the operand read once per thread (into `read`) and clamped as Nx clamps.
fn start_expr(a: usize, hi: usize, at: At, read: &mut String) -> String {
    match at {
        At::Fixed(v) => format!("{v}ULL"),
        At::Operand(j) => {
            read.push_str(&format!(
                "    const float r{a} = e{j}[0];\n    const unsigned long long s{a} = r{a} > \
                 0.0f ? (r{a} < {hi}.0f ? (unsigned long long)r{a} : {hi}ULL) : 0ULL;\n"
            ));
            format!("s{a}")
        }
    }
}

/// How many of `starts` are read from operands (the kernels' operands after the target and
/// the update).
fn read_starts(starts: &[At]) -> usize {
    starts
        .iter()
        .filter(|s| matches!(s, At::Operand(_)))
        .count()
}

/// A window's start along one axis in the kernels of [`put_slice`] and [`slice`].
#[derive(Clone, Copy)]
enum At {
    /// A constant of the source.
    Fixed(usize),
    /// Element 0 of operand `e{j}` (an integer held in f32), clamped so the window fits.
    Operand(usize),
}

/// The kernel of [`put_slice`]: a target of shape `full` stored with strides `ts`, an update
/// of shape `lens` stored with strides `us`, its window at `starts`.
fn put_slice_source(
    full: &[usize],
    lens: &[usize],
    ts: &[usize],
    us: &[usize],
    starts: &[At],
) -> String {
    let (mut inside, mut at, mut read) = (Vec::new(), Vec::new(), String::new());
    let total: usize = full.iter().product();
    for a in 0..full.len() {
        let inner: usize = full[a + 1..].iter().product();
        let c = format!(
            "(unsigned long long){}",
            elementwise::coordinate(inner, full[a], total)
        );
        let s = start_expr(a, full[a] - lens[a], starts[a], &mut read);
        if lens[a] != full[a] {
            // unsigned: c - s < len exactly when s <= c < s + len
            inside.push(format!("{c} - {s} < {}ULL", lens[a]));
        }
        if lens[a] != 1 && us[a] != 0 {
            at.push(format!("({c} - {s}) * {}ULL", us[a]));
        }
    }
    let inside = if inside.is_empty() {
        "true".to_string()
    } else {
        inside.join(" && ")
    };
    let at = if at.is_empty() {
        "0".to_string()
    } else {
        at.join(" + ")
    };
    let index = strided_index(full, ts, full);
    let inputs = 2 + read_starts(starts);
    map_source(
        inputs,
        &format!("{read}    o0[i] = ({inside}) ? e1[{at}] : e0[{index}];"),
    )
}

/// `x` (`[rows, cols]`) with row `r[j] = hi[j] * 2^24 + lo[j]` increased by row `j` of `upd`
/// (`[m, cols]`) for every `j` in order, all f32 CUDA tensors read through their strides (the
/// row numbers in range). Burn's `select_add` walks the updates in one thread per column: 768
/// threads for GPT-2's embedding gradient, one thread for the gradient of a loss that picks
/// one logit per token (10 ms and 6 ms a step on an H200). Here the result starts as a copy of
/// `x` (one coalesced pass), then each thread takes one column of a block of rows, walks every
/// update in order and adds those that fall in its block, written over the copy. Each element
/// still gets its additions one at a time in the order of `j`, so the sums are bit for bit
/// those of the walk. `None` where this does not apply (other ranks or types).
pub fn add_rows(
    x: Operand,
    (hi, lo): (Operand, Operand),
    upd: Operand,
) -> Result<Option<DispatchTensor>> {
    let strides = [x, hi, lo, upd].map(elementwise::strides);
    let [Some(xs), Some(hs), Some(ls), Some(us)] = strides else {
        return Ok(None);
    };
    let ([rows, cols], [m], [m_lo], [um, uc]) = (x.shape, hi.shape, lo.shape, upd.shape) else {
        return Ok(None);
    };
    let (rows, cols, m) = (*rows, *cols, *m);
    if (*m_lo, *um, *uc) != (m, m, cols)
        || rows == 0
        || cols == 0
        || m == 0
        || !elementwise::available()
    {
        return Ok(None);
    }
    // the result starts as a copy of `x`
    let shape = [rows, cols];
    let copy = map_source(
        1,
        &format!("o0[i] = e0[{}];", strided_index(&shape, &xs, &shape)),
    );
    let total = rows * cols;
    let Some(base) =
        submit(&copy, &[x], &[shape.to_vec()], grid(total), total)?.and_then(|mut o| o.pop())
    else {
        return Ok(None);
    };
    let base = Operand {
        prim: &base,
        shape: &shape,
    };
    if !elementwise::reusable(base, total) {
        return Ok(None);
    }
    // Every thread walks all `m` updates: the walks' steps (threads times `m`) are the cost,
    // bounded to ~2^27; at least 64 blocks where there are rows for them, so that the
    // additions of one column are spread over many threads.
    let blocks = ((1 << 27) / (cols * m)).max(64).clamp(1, rows);
    let per = rows.div_ceil(blocks);
    let blocks = rows.div_ceil(per);
    let walk = format!(
        "{}{}    const unsigned long long c = t % {cols}ULL, r0 = t / {cols}ULL * {per}ULL;\n    \
         const unsigned long long r1 = r0 + {per}ULL < {rows}ULL ? r0 + {per}ULL : {rows}ULL;\n    \
         for (unsigned long long j = 0; j < {m}ULL; j++) {{\n      const unsigned long long r = \
         (unsigned long long)(unsigned int)e1[j * {h0}ULL] * 16777216ULL + (unsigned int)e2[j * \
         {l0}ULL];\n      if (r >= r0 && r < r1) {{ const unsigned long long o = r * {cols}ULL + \
         c; o0[o] = o0[o] + e3[j * {u0}ULL + c * {u1}ULL]; }}\n    }}\n  }}\n}}\n",
        header_with("", 4, 1, false),
        grid_loop("t"),
        h0 = hs[0],
        l0 = ls[0],
        u0 = us[0],
        u1 = us[1],
    );
    let n = blocks * cols;
    let out = elementwise::submit_reusing(
        &walk,
        &[base, hi, lo, upd],
        &[shape.to_vec()],
        grid(n),
        n,
        &[Some(0)],
    )?;
    ex_burn_core::profile::note_detail(|| format!("add rows {m} into {rows}x{cols}"));
    Ok(out.and_then(|mut o| o.pop()))
}

/// The sum of an f32 CUDA tensor over its first `lead` axes (a bias gradient: over batch and
/// positions), as two kernels of ours: partial sums of column blocks of rows, then their sums.
/// Burn's reduction kernel walks such (strided) reductions several times slower. The result
/// has the remaining axes; `None` where this does not apply (another type or device, nothing
/// to sum).
pub fn leading_sum(t: Operand, lead: usize) -> Result<Option<DispatchTensor>> {
    let Some(strides) = elementwise::strides(t) else {
        return Ok(None);
    };
    let shape = t.shape;
    if lead == 0 || lead >= shape.len() || strides.len() != shape.len() || !elementwise::available()
    {
        return Ok(None);
    }
    let rows: usize = shape[..lead].iter().product();
    let cols: usize = shape[lead..].iter().product();
    if rows == 0 || cols == 0 {
        return Ok(None);
    }
    // enough partial sums to fill the GPU (~64k threads), each over at least 16 rows
    let splits = (65_536 / cols).clamp(1, (rows / 16).max(1));
    let chunk = rows.div_ceil(splits);
    let index = strided_index(shape, &strides, shape);
    let partial = format!(
        "{}{}    unsigned long long c = t % {cols}ULL, r0 = t / {cols}ULL * {chunk}ULL;\n    \
         unsigned long long r1 = r0 + {chunk}ULL < {rows}ULL ? r0 + {chunk}ULL : {rows}ULL;\n    \
         float a = 0.0f;\n    for (unsigned long long r = r0; r < r1; r++) {{ unsigned long long \
         i = r * {cols}ULL + c; a += e0[{index}]; }}\n    o0[t] = a;\n  }}\n}}\n",
        header("", 1, 1),
        grid_loop("t")
    );
    let n = splits * cols;
    let Some(part) =
        submit(&partial, &[t], &[vec![splits, cols]], grid(n), n)?.and_then(|mut o| o.pop())
    else {
        return Ok(None);
    };
    let total = format!(
        "{}{}    float a = 0.0f;\n    for (unsigned long long s = 0; s < {splits}ULL; s++) a += e0[s * \
         {cols}ULL + c];\n    o0[c] = a;\n  }}\n}}\n",
        header("", 1, 1),
        grid_loop("c")
    );
    let part = Operand {
        prim: &part,
        shape: &[splits, cols],
    };
    let out = submit(&total, &[part], &[shape[lead..].to_vec()], grid(cols), cols)?;
    ex_burn_core::profile::note_detail(|| format!("leading {rows}x{cols}"));
    Ok(out.and_then(|mut o| o.pop()))
}

/// Threads of a block of [`sum_around`]'s first kernel.
const AROUND_THREADS: usize = 256;

/// The sum of an f32 CUDA tensor over every axis outside `kept` (reduced axes on both
/// sides: a batch normalization's statistics over `[n, c, h, w]`), as two kernels of ours:
/// partial sums, a block of threads for each kept element and slice of the outer axes (the
/// block's threads read consecutive elements of the inner axes, then add their sums in a
/// tree), then each kept element's partial sums in order. Burn reduced such axes in two
/// passes of its reduction kernel. The result has the kept axes' shape; `None` where this
/// does not apply.
pub fn sum_around(t: Operand, kept: std::ops::Range<usize>) -> Result<Option<DispatchTensor>> {
    let Some(strides) = elementwise::strides(t) else {
        return Ok(None);
    };
    let shape = t.shape;
    if strides.len() != shape.len() || !elementwise::available() {
        return Ok(None);
    }
    let Some(plan) = Around::of(shape, &strides, kept.clone()) else {
        return Ok(None);
    };
    let (partial, total) = plan.sources();
    let n = plan.k * plan.splits;
    let Some(part) = submit(
        &partial,
        &[t],
        &[vec![plan.k, plan.splits]],
        (n.min(65_535) as u32, AROUND_THREADS as u32),
        n,
    )?
    .and_then(|mut o| o.pop()) else {
        return Ok(None);
    };
    let part = Operand {
        prim: &part,
        shape: &[plan.k, plan.splits],
    };
    let out = submit(
        &total,
        &[part],
        &[shape[kept].to_vec()],
        grid(plan.k),
        plan.k,
    )?;
    ex_burn_core::profile::note_detail(|| {
        format!("sum around {}x{}x{}", plan.outer, plan.k, plan.inner)
    });
    Ok(out.and_then(|mut o| o.pop()))
}

/// How [`sum_around`] cuts a tensor: `outer` x `k` x `inner` elements (the axes before, in
/// and after the kept run), the outer axes in `splits` slices of `per`.
struct Around {
    outer: usize,
    k: usize,
    inner: usize,
    splits: usize,
    per: usize,
    /// CUDA C offsets of outer index `o`, kept index `kk` and inner index `ii`.
    at: [String; 3],
}

impl Around {
    /// The plan for a tensor of `shape` stored with `strides`; `None` where the kept run does
    /// not have reduced axes on both sides, or something is empty or too large.
    fn of(shape: &[usize], strides: &[usize], kept: std::ops::Range<usize>) -> Option<Around> {
        let rank = shape.len();
        if kept.start == 0 || kept.end >= rank || kept.is_empty() {
            return None;
        }
        let size = |r: std::ops::Range<usize>| shape[r].iter().product::<usize>();
        let (outer, k, inner) = (
            size(0..kept.start),
            size(kept.clone()),
            size(kept.end..rank),
        );
        if outer == 0 || k == 0 || inner == 0 || outer * inner > u32::MAX as usize {
            return None;
        }
        // about 1,024 blocks in all, each over at least one outer slice
        let splits = 1024usize.div_ceil(k).clamp(1, outer);
        let per = outer.div_ceil(splits);
        let splits = outer.div_ceil(per);
        // an index's coordinates along `axes`, times their strides
        let offset = |var: &str, axes: std::ops::Range<usize>| {
            let total: usize = shape[axes.clone()].iter().product();
            let terms: Vec<String> = axes
                .clone()
                .filter(|&a| shape[a] != 1)
                .map(|a| {
                    let inner: usize = shape[a + 1..axes.end].iter().product();
                    let c = elementwise::coordinate_of(var, inner, shape[a], total);
                    format!("{c} * {}ULL", strides[a])
                })
                .collect();
            if terms.is_empty() {
                "0ULL".to_string()
            } else {
                terms.join(" + ")
            }
        };
        let at = [
            offset("o", 0..kept.start),
            offset("kk", kept.clone()),
            offset("ii", kept.end..rank),
        ];
        Some(Around {
            outer,
            k,
            inner,
            splits,
            per,
            at,
        })
    }

    /// The two kernels: partial sums (`[k, splits]`, contiguous), then their sums per kept
    /// element.
    fn sources(&self) -> (String, String) {
        let Around {
            outer,
            inner,
            splits,
            per,
            ..
        } = *self;
        let [at_o, at_k, at_i] = &self.at;
        let warps = AROUND_THREADS / 32;
        let partial = format!(
            "{}  __shared__ float warp[{warps}];\n  for (unsigned long long b = blockIdx.x; b < n; b \
             += gridDim.x) {{\n    const unsigned long long kk = b / {splits}ULL, first = b % \
             {splits}ULL * {per}ULL;\n    const unsigned long long last = first + {per}ULL < \
             {outer}ULL ? first + {per}ULL : {outer}ULL;\n    const unsigned long long base = \
             {at_k};\n    float a = 0.0f;\n    for (unsigned int j = threadIdx.x; j < (unsigned \
             int)((last - first) * {inner}ULL); j += blockDim.x) {{\n      const unsigned long long \
             o = first + j / {inner}u, ii = j % {inner}u;\n      a += e0[base + {at_o} + \
             {at_i}];\n    }}\n    for (int d = 16; d > 0; d >>= 1) a += \
             __shfl_down_sync(0xffffffffu, a, d);\n    if ((threadIdx.x & 31u) == 0u) \
             warp[threadIdx.x >> 5] = a;\n    __syncthreads();\n    if (threadIdx.x < 32u) {{\n      \
             a = threadIdx.x < {warps}u ? warp[threadIdx.x] : 0.0f;\n      for (int d = 16; d > 0; \
             d >>= 1) a += __shfl_down_sync(0xffffffffu, a, d);\n      if (threadIdx.x == 0u) \
             o0[b] = a;\n    }}\n    __syncthreads();\n  }}\n}}\n",
            header("", 1, 1),
        );
        let total = format!(
            "{}{}    float a = 0.0f;\n    for (unsigned long long s = 0; s < {splits}ULL; s++) a += \
             e0[c * {splits}ULL + s];\n    o0[c] = a;\n  }}\n}}\n",
            header("", 1, 1),
            grid_loop("c"),
        );
        (partial, total)
    }
}

#[cfg(test)]
mod tests {
    use super::view_strides;

    #[test]
    fn sum_around_sources_compile() {
        for (shape, strides, kept) in [
            (vec![64, 256, 56, 56], vec![802816, 3136, 56, 1], 1..2),
            (vec![8, 2, 3, 5, 7], vec![210, 105, 35, 7, 1], 1..3),
        ] {
            let (partial, total) = super::Around::of(&shape, &strides, kept).unwrap().sources();
            crate::elementwise::assert_compiles(&partial);
            crate::elementwise::assert_compiles(&total);
        }
    }

    #[test]
    fn put_slice_source_compiles() {
        // a [3, 40, 32] update into a broadcast zero [3, 40, 96] at [0, 0, 32]
        use super::At::{Fixed, Operand};
        let source = super::put_slice_source(
            &[3, 40, 96],
            &[3, 40, 32],
            &[0, 0, 0],
            &[1280, 32, 1],
            &[Fixed(0), Fixed(0), Fixed(32)],
        );
        crate::elementwise::assert_compiles(&source);
        // a key/value cache [2, 12, 160, 64] written at a position read on the device
        let source = super::put_slice_source(
            &[2, 12, 160, 64],
            &[2, 12, 1, 64],
            &[122880, 10240, 64, 1],
            &[768, 64, 64, 1],
            &[Fixed(0), Fixed(0), Operand(2), Fixed(0)],
        );
        assert!(source.contains("e2[0]"));
        crate::elementwise::assert_compiles(&source);
        // the same written into the cache's own buffer: one thread per update element
        let source = super::put_slice_in_place_source(
            &[2, 12, 160, 64],
            &[2, 12, 1, 64],
            &[768, 64, 64, 1],
            &[Fixed(0), Fixed(0), Operand(2), Fixed(0)],
        );
        assert!(source.contains("e2[0]") && !source.contains("__restrict__"));
        crate::elementwise::assert_compiles(&source);
    }

    #[test]
    fn slice_source_compiles() {
        use super::At::{Fixed, Operand};
        // one position's logits [1, 1, 50257] of [1, 160, 50257], the position read on the
        // device
        let source = super::slice_source(
            &[1, 160, 50257],
            &[1, 1, 50257],
            &[1, 1, 50257],
            &[1, 1, 1],
            &[8041120, 50257, 1],
            &[Fixed(0), Operand(1), Fixed(0)],
            2,
        );
        assert!(source.contains("e1[0]") && source.contains("159ULL"));
        crate::elementwise::assert_compiles(&source);
        // every second column of a transposed [6, 4] from column 1
        let source = super::slice_source(
            &[6, 4],
            &[6, 3],
            &[6, 2],
            &[1, 2],
            &[1, 6],
            &[Fixed(0), Fixed(1)],
            1,
        );
        crate::elementwise::assert_compiles(&source);
    }

    #[test]
    fn views_exist_where_merged_axes_are_evenly_strided() {
        // row-major [2, 3, 4]: any reshape
        assert_eq!(
            view_strides(&[2, 3, 4], &[12, 4, 1], &[6, 4]),
            Some(vec![4, 1])
        );
        assert_eq!(view_strides(&[2, 3, 4], &[12, 4, 1], &[24]), Some(vec![1]));
        assert_eq!(
            view_strides(&[2, 3, 4], &[12, 4, 1], &[2, 1, 12]),
            Some(vec![12, 12, 1])
        );
        // [2, 3, 4] transposed to [4, 2, 3] (strides [1, 12, 4]): the last two merge, not the first
        assert_eq!(
            view_strides(&[4, 2, 3], &[1, 12, 4], &[4, 6]),
            Some(vec![1, 4])
        );
        assert_eq!(view_strides(&[4, 2, 3], &[1, 12, 4], &[8, 3]), None);
        assert_eq!(view_strides(&[4, 2, 3], &[1, 12, 4], &[24]), None);
        // splitting an axis of any stride is a view
        assert_eq!(
            view_strides(&[4, 6], &[1, 4], &[4, 2, 3]),
            Some(vec![1, 12, 4])
        );
        // rows of a slice (padded to 8) cannot be flattened, only split or given unit axes
        assert_eq!(view_strides(&[3, 5], &[8, 1], &[15]), None);
        assert_eq!(
            view_strides(&[3, 5], &[8, 1], &[3, 1, 5]),
            Some(vec![8, 5, 1])
        );
        // attention's transposed scores [8, 12, 512, 512] -> [96, 512, 512]
        let s = [12 * 512 * 512, 512 * 512, 1, 512];
        assert_eq!(
            view_strides(&[8, 12, 512, 512], &s, &[96, 512, 512]),
            Some(vec![512 * 512, 1, 512])
        );
    }
}
