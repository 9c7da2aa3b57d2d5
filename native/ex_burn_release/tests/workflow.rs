//! One source of truth: `native/targets.txt` is read by this tool (the release workflow's
//! matrix), by `ExBurn.Nif.Config` (what users download) and drives `bin/release-build` (how
//! each artifact is built). These tests prove that the three agree, without running CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use ex_burn_release::{elf::GLIBC_FLOOR, targets::Matrix};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every `matrix.<field>` the release workflow reads.
fn workflow_fields(workflow: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in workflow.match_indices("matrix.") {
        // `steps.matrix.outputs` names a step, not the job matrix.
        if workflow[..i].ends_with('.') {
            continue;
        }
        let field: String = workflow[i + "matrix.".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !field.is_empty() {
            out.insert(field);
        }
    }
    out
}

#[test]
fn the_release_workflow_builds_the_tools_matrix() {
    let workflow = read(".github/workflows/release.yml");
    // The job matrix is the tool's output, not a hand-written list.
    assert!(workflow.contains("--manifest-path native/ex_burn_release/Cargo.toml --\n"));
    assert!(workflow.contains("$RELEASE_TOOL matrix --version \"$VERSION\""));
    assert!(workflow.contains("matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}"));
    assert!(
        !workflow.contains("nif_version_2_"),
        "NIF versions come from targets.txt"
    );

    let json = Matrix::builtin().unwrap().to_json(Some("0.0.0"));
    let fields = workflow_fields(&workflow);
    for f in [
        "target",
        "variant",
        "nif",
        "features",
        "builder",
        "library",
        "rustflags",
        "artifact",
        "runner",
        "name",
    ] {
        assert!(fields.contains(f), "the workflow does not use matrix.{f}");
    }
    for f in &fields {
        assert!(
            json.contains(&format!("\"{f}\":")),
            "release.yml reads matrix.{f}, which `ex_burn_release matrix` does not produce"
        );
    }
    // The tarball uploaded is the one `package` writes and `verify` expects.
    assert!(workflow.contains("path: dist/${{ matrix.artifact }}"));
    assert!(workflow.contains("run: bin/release-build"));
}

#[test]
fn every_builder_of_the_matrix_is_installed_and_run() {
    let workflow = read(".github/workflows/release.yml");
    let script = read("bin/release-build");
    let builders: BTreeSet<&str> = Matrix::builtin()
        .unwrap()
        .entries
        .iter()
        .map(|e| e.builder.as_str())
        .collect();
    for b in &builders {
        assert!(
            script.contains(&format!("\n  {b})")),
            "bin/release-build has no branch for builder {b}"
        );
    }
    for (builder, install) in [
        ("zigbuild", "cargo-zigbuild"),
        (
            "mingw",
            "apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64",
        ),
        ("cross", "cargo install cross"),
    ] {
        if builders.contains(builder) {
            assert!(workflow.contains(&format!("if: matrix.builder == '{builder}'")));
            assert!(workflow.contains(install), "{install}");
        }
    }
    // zig and cargo-zigbuild are pinned like the Rust toolchain (reproducible artifacts).
    assert!(workflow.contains("\"ziglang==$ZIGLANG_VERSION\""));
    assert!(workflow.contains("\"cargo-zigbuild==$CARGO_ZIGBUILD_VERSION\""));
    assert!(workflow.contains("RUST_TOOLCHAIN: \""));
}

#[test]
fn one_glibc_floor_everywhere() {
    let workflow = read(".github/workflows/release.yml");
    let script = read("bin/release-build");
    let guide = read("guides/installation.md");
    assert!(workflow.contains(&format!("glibc floor ({GLIBC_FLOOR})")));
    assert!(workflow.contains(
        "$RELEASE_TOOL inspect --lib \"target/$TARGET/dist/$LIBRARY\" --target \"$TARGET\""
    ));
    assert!(script.contains(&format!("glibc=\"${{GLIBC:-{GLIBC_FLOOR}}}\"")));
    assert!(
        script.contains("*-linux-gnu*) cargo zigbuild \"${args[@]}\" --target \"$TARGET.$glibc\"")
    );
    assert!(guide.contains(&format!("glibc {GLIBC_FLOOR} or newer")));
}

#[test]
fn release_builds_remap_paths_disable_incremental_compilation_and_use_the_dist_profile() {
    let script = read("bin/release-build");
    for needle in [
        "--remap-path-prefix=$root=.",
        "--remap-path-prefix=$cargo_home=/cargo",
        "--remap-path-prefix=$target_dir=./target",
        "export CARGO_INCREMENTAL=0",
        "--locked",
        "--profile dist",
        "$TARGET/dist/$library",
        "--no-default-features --features \"$FEATURES\"",
    ] {
        assert!(script.contains(needle), "bin/release-build lacks {needle}");
    }
}

/// ExBurn.Nif.Config (Elixir) computes the same artifact names, NIF versions, targets and
/// variants as this tool, from the same file. Needs `elixir` on PATH (like tests/cli.rs).
#[test]
fn elixir_config_and_the_tool_name_the_same_artifacts() {
    let script = r##"
        [root] = System.argv()
        Code.require_file(Path.join(root, "lib/ex_burn/nif/matrix.ex"))
        Code.require_file(Path.join(root, "lib/ex_burn/nif/config.ex"))
        c = ExBurn.Nif.Config
        IO.puts("nif " <> Enum.join(c.nif_versions(), ","))
        for t <- c.targets(), do: IO.puts("target " <> t <> " " <> Enum.join(Map.get(c.variants(), t, []), ","))
        for n <- c.artifact_names("9.8.7-rc.1"), do: IO.puts("artifact " <> n)
    "##;
    let out = Command::new("elixir")
        .args(["-e", script, repo().to_str().unwrap()])
        .output()
        .expect("elixir must be on PATH for this test (bin/setup installs it)");
    assert!(out.status.success(), "{out:?}");
    let elixir = String::from_utf8(out.stdout).unwrap();

    let m = Matrix::builtin().unwrap();
    let mut expected = vec![format!("nif {}", m.nif_versions.join(","))];
    for t in m.targets() {
        let variants: Vec<&str> = m
            .entries
            .iter()
            .filter(|e| e.target == t)
            .filter_map(|e| e.variant.as_deref())
            .collect();
        expected.push(format!("target {t} {}", variants.join(",")));
    }
    for a in m.artifacts() {
        expected.push(format!("artifact {}", a.file_name("9.8.7-rc.1")));
    }
    let got: Vec<&str> = elixir.lines().map(str::trim_end).collect();
    let expected: Vec<&str> = expected.iter().map(|s| s.trim_end()).collect();
    assert_eq!(got, expected);
}
