//! `window_scatter_max` / `window_scatter_min` of f32 CUDA tensors (the gradient of max and
//! min pooling) as two kernels of ours: each window's selection, then each result element as
//! the init value plus the sources of the windows that selected it, in the windows' order
//! (the values `ex_burn_core::kernels::WindowScatterGeometry` defines, bit for bit those of
//! the CPU). The engine's general path composes it from whole-tensor ops, a pass per window
//! offset: 17 ms a step for the max pooling of a ResNet-50 at batch 64 on an H200.

use crate::elementwise::{self, coordinate, grid, grid_loop, header, submit};
use burn::DispatchTensor;
use ex_burn_core::kernels::{row_major_strides, Operand, WindowScatterCall, WindowScatterGeometry};
use ex_burn_core::Result;
use std::fmt::Write;

/// The window scatter `call` as two kernels; `None` where it does not apply (an operand not
/// an f32 CUDA tensor, or strides of another rank).
pub fn run(call: &WindowScatterCall) -> Result<Option<DispatchTensor>> {
    let g = &call.geometry;
    let rank = g.shape.len();
    let (Some(xs), Some(ss)) = (
        elementwise::strides(call.input),
        elementwise::strides(call.source),
    ) else {
        return Ok(None);
    };
    if elementwise::strides(call.init).is_none()
        || xs.len() != rank
        || ss.len() != rank
        || g.windows() == 0
        || g.window_len() == 0
        || g.window_len() > u32::MAX as usize
        || !elementwise::available()
    {
        return Ok(None);
    }
    let windows = g.windows();
    let select = select_source(g, &xs);
    let Some(chosen) = submit(
        &select,
        &[call.input, call.init],
        &[g.counts.to_vec()],
        grid(windows),
        windows,
    )?
    .and_then(|mut o| o.pop()) else {
        return Ok(None);
    };
    let chosen = Operand {
        prim: &chosen,
        shape: g.counts,
    };
    let Some(cs) = elementwise::strides(chosen) else {
        return Ok(None);
    };
    let n: usize = g.shape.iter().product();
    let gather = gather_source(g, &cs, &ss);
    let out = submit(
        &gather,
        &[chosen, call.source, call.init],
        &[g.shape.to_vec()],
        grid(n),
        n,
    )?;
    ex_burn_core::profile::note_detail(|| {
        format!("window scatter {:?} windows {:?}", g.shape, g.window)
    });
    Ok(out.and_then(|mut o| o.pop()))
}

/// The first kernel: for each window `i` (row-major over `counts`), the row-major index inside
/// the window of the element it selects, as an f32 (window sizes are far below 2^24). The
/// input `e0` is read with `strides`, padding as the init value `e1[0]`.
fn select_source(g: &WindowScatterGeometry, strides: &[usize]) -> String {
    let rank = g.shape.len();
    let (windows, wst, est) = (
        g.windows(),
        row_major_strides(g.counts),
        row_major_strides(g.window),
    );
    let mut s = header("", 2, 1);
    s.push_str(&grid_loop("i"));
    s.push_str(
        "    const float init = e1[0];\n    float best = init;\n    unsigned int pick = 0;\n",
    );
    for (a, &inner) in wst.iter().enumerate() {
        let _ = writeln!(
            s,
            "    const long long b{a} = (long long){} * {}LL - {}LL;",
            coordinate(inner, g.counts[a], windows),
            g.strides[a],
            g.lo[a]
        );
    }
    let _ = writeln!(
        s,
        "    for (unsigned int q = 0; q < {}u; q++) {{",
        g.window_len()
    );
    let mut inside = vec!["true".to_string()];
    let mut offset = vec!["0LL".to_string()];
    for a in 0..rank {
        let _ = writeln!(
            s,
            "      const long long p{a} = b{a} + (long long)(q / {}u % {}u);",
            est[a], g.window[a]
        );
        inside.push(format!("p{a} >= 0 && p{a} < {}LL", g.shape[a]));
        offset.push(format!("p{a} * {}LL", strides[a]));
    }
    let _ = writeln!(
        s,
        "      const float x = ({}) ? e0[{}] : init;\n      if (q == 0u || x {} best) {{ best = x; \
         pick = q; }}\n    }}\n    o0[i] = (float)pick;\n  }}\n}}",
        inside.join(" && "),
        offset.join(" + "),
        if g.max { ">=" } else { "<=" }
    );
    s
}

/// The second kernel: for each element `i` of the result, the init value `e2[0]` plus, in
/// row-major order of the windows covering it, the source (`e1`, read with `source`
/// strides) of each window whose selection (`e0`, read with `chosen` strides) is it.
fn gather_source(g: &WindowScatterGeometry, chosen: &[usize], source: &[usize]) -> String {
    let rank = g.shape.len();
    let (n, xst, est) = (
        g.shape.iter().product::<usize>(),
        row_major_strides(g.shape),
        row_major_strides(g.window),
    );
    let mut s = header("", 3, 1);
    s.push_str(&grid_loop("i"));
    s.push_str("    float acc = e2[0];\n");
    for (a, &inner) in xst.iter().enumerate() {
        let (w, st, c) = (g.window[a], g.strides[a], g.counts[a]);
        // windows j with j * st <= pp < j * st + w, clamped to those that exist
        let _ = writeln!(
            s,
            "    const long long pp{a} = (long long){} + {}LL;\n    const long long f{a} = pp{a} + \
             1 >= {w}LL ? (pp{a} + 1 - {w}LL + {st}LL - 1) / {st}LL : 0;\n    const long long \
             l{a} = pp{a} / {st}LL < {c}LL ? pp{a} / {st}LL : {c}LL - 1;",
            coordinate(inner, g.shape[a], n),
            g.lo[a]
        );
    }
    for a in 0..rank {
        let _ = writeln!(
            s,
            "{}for (long long w{a} = f{a}; w{a} <= l{a}; w{a}++) {{",
            "  ".repeat(a + 2)
        );
    }
    let ind = "  ".repeat(rank + 2);
    let sum = |f: &dyn Fn(usize) -> String| {
        let terms: Vec<String> = (0..rank).map(f).collect();
        if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        }
    };
    let q = sum(&|a| format!("(pp{a} - w{a} * {}LL) * {}LL", g.strides[a], est[a]));
    let at = sum(&|a| format!("w{a} * {}LL", chosen[a]));
    let src = sum(&|a| format!("w{a} * {}LL", source[a]));
    let _ = writeln!(
        s,
        "{ind}if (e0[{at}] == (float)({q})) acc = acc + e1[{src}];"
    );
    for a in (0..rank).rev() {
        let _ = writeln!(s, "{}}}", "  ".repeat(a + 2));
    }
    s.push_str("    o0[i] = acc;\n  }\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_compile() {
        let g = WindowScatterGeometry {
            shape: &[64, 64, 112, 112],
            counts: &[64, 64, 56, 56],
            window: &[1, 1, 3, 3],
            strides: &[1, 1, 2, 2],
            lo: &[0, 0, 1, 1],
            max: true,
        };
        elementwise::assert_compiles(&select_source(&g, &row_major_strides(g.shape)));
        elementwise::assert_compiles(&gather_source(
            &g,
            &row_major_strides(g.counts),
            &row_major_strides(g.counts),
        ));
        let scalar = WindowScatterGeometry {
            shape: &[],
            counts: &[],
            window: &[],
            strides: &[],
            lo: &[],
            max: false,
        };
        elementwise::assert_compiles(&select_source(&scalar, &[]));
        elementwise::assert_compiles(&gather_source(&scalar, &[], &[]));
    }
}
