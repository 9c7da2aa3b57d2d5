//! The release matrix: `native/targets.txt`, the one list of NIF versions, targets and variants
//! that the release workflow builds and that `ExBurn.Nif` offers (see the file's header for the
//! format).

use crate::naming;

/// The matrix file as it was when this tool was built.
pub const TARGETS_TXT: &str = include_str!("../../targets.txt");

/// How a release job builds one artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builder {
    /// `cargo build --target` with the runner's own toolchain.
    Cargo,
    /// `cargo zigbuild`: zig links; `-linux-gnu` triples get `.2.31` (glibc 2.31 symbols),
    /// musl ones link only against musl's libc (libunwind is linked in statically).
    Zigbuild,
    /// `cargo build --target` linked by the mingw-w64 GCC of the (Linux) runner, for
    /// `*-windows-gnu`: the toolchain cross-rs's image holds, without Docker.
    Mingw,
    /// `cross build --target`: a Docker image per target (Cross.toml).
    Cross,
}

impl Builder {
    fn parse(s: &str) -> Option<Builder> {
        match s {
            "cargo" => Some(Builder::Cargo),
            "zigbuild" => Some(Builder::Zigbuild),
            "mingw" => Some(Builder::Mingw),
            "cross" => Some(Builder::Cross),
            _ => None,
        }
    }

    /// The name used in the matrix file and the workflow.
    pub fn as_str(self) -> &'static str {
        match self {
            Builder::Cargo => "cargo",
            Builder::Zigbuild => "zigbuild",
            Builder::Mingw => "mingw",
            Builder::Cross => "cross",
        }
    }
}

/// One line of the matrix: a target and variant, built once per NIF version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Rust target triple.
    pub target: String,
    /// `None` for the default artifact, else the `--<variant>` suffix.
    pub variant: Option<String>,
    /// Cargo features of `ex_burn_nif` (always including `flex`).
    pub features: Vec<String>,
    /// GitHub Actions runner label.
    pub runner: String,
    /// How the artifact is built.
    pub builder: Builder,
}

impl Entry {
    /// Extra rustc flags the target needs: musl cdylibs must not link the C runtime
    /// statically; GNU ld writes the link time into a PE header unless told not to, which
    /// would make two builds of a Windows DLL differ.
    pub fn rustflags(&self) -> &'static str {
        if self.target.ends_with("-musl") {
            "-C target-feature=-crt-static"
        } else if self.target.ends_with("-windows-gnu") {
            "-C link-arg=-Wl,--no-insert-timestamp"
        } else {
            ""
        }
    }
}

/// One published file: an entry at one NIF version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact<'a> {
    /// The matrix line.
    pub entry: &'a Entry,
    /// The NIF version, e.g. `2.15`.
    pub nif: &'a str,
}

impl Artifact<'_> {
    /// The tarball name for `version`.
    pub fn file_name(&self, version: &str) -> String {
        naming::artifact_file(
            naming::CRATE,
            version,
            self.nif,
            &self.entry.target,
            self.entry.variant.as_deref(),
        )
    }

    /// Cargo features: the entry's, plus the rustler feature that selects the NIF version.
    pub fn cargo_features(&self) -> String {
        let mut features = self.entry.features.clone();
        features.push(format!(
            "rustler/nif_version_{}",
            self.nif.replace('.', "_")
        ));
        features.join(",")
    }
}

/// The parsed matrix file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    /// NIF versions every entry is built for, in file order.
    pub nif_versions: Vec<String>,
    /// Target/variant lines, in file order.
    pub entries: Vec<Entry>,
}

impl Matrix {
    /// The matrix embedded at build time ([`TARGETS_TXT`]).
    pub fn builtin() -> Result<Matrix, String> {
        Matrix::parse(TARGETS_TXT)
    }

    /// Parses and validates the matrix format; errors name the offending line.
    pub fn parse(text: &str) -> Result<Matrix, String> {
        let mut nif_versions: Vec<String> = Vec::new();
        let mut entries: Vec<Entry> = Vec::new();

        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |msg: String| format!("targets file line {}: {msg}: {raw:?}", index + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();

            if fields[0] == "nif" {
                if fields.len() != 2 || !is_nif_version(fields[1]) {
                    return Err(err("expected `nif <major>.<minor>`".into()));
                }
                if nif_versions.iter().any(|v| v == fields[1]) {
                    return Err(err("duplicate NIF version".into()));
                }
                nif_versions.push(fields[1].to_string());
                continue;
            }

            let [target, variant, features, runner, builder] = fields[..] else {
                return Err(err(
                    "expected `<target> <variant> <features> <runner> <builder>`".into(),
                ));
            };
            if target.split('-').count() < 3
                || !target
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(err(format!("`{target}` is not a target triple")));
            }
            let variant = match variant {
                "-" => None,
                "cpu" | "flex" => {
                    return Err(err(
                        "the CPU build is the default artifact, written `-`".into()
                    ))
                }
                v if is_name(v) => Some(v.to_string()),
                v => return Err(err(format!("bad variant name `{v}`"))),
            };
            let features: Vec<String> = features.split(',').map(str::to_string).collect();
            if features.iter().any(|f| !is_name(f)) {
                return Err(err("features are comma-separated names".into()));
            }
            if !features.iter().any(|f| f == "flex") {
                return Err(err(
                    "every build includes the `flex` feature (the CPU device)".into(),
                ));
            }
            let builder = Builder::parse(builder).ok_or_else(|| {
                err(format!(
                    "unknown builder `{builder}` (cargo, zigbuild, mingw, cross)"
                ))
            })?;
            if entries
                .iter()
                .any(|e| e.target == target && e.variant == variant)
            {
                return Err(err("duplicate target/variant".into()));
            }
            entries.push(Entry {
                target: target.to_string(),
                variant,
                features,
                runner: runner.to_string(),
                builder,
            });
        }

        if nif_versions.is_empty() {
            return Err("targets file: no `nif <version>` line".into());
        }
        if entries.is_empty() {
            return Err("targets file: no targets".into());
        }
        for entry in &entries {
            if !entries
                .iter()
                .any(|e| e.target == entry.target && e.variant.is_none())
            {
                return Err(format!(
                    "targets file: `{}` has variants but no default (`-`) line",
                    entry.target
                ));
            }
        }
        Ok(Matrix {
            nif_versions,
            entries,
        })
    }

    /// The distinct targets, in file order.
    pub fn targets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for e in &self.entries {
            if !out.contains(&e.target.as_str()) {
                out.push(&e.target);
            }
        }
        out
    }

    /// Every published file: each entry at each NIF version.
    pub fn artifacts(&self) -> Vec<Artifact<'_>> {
        self.nif_versions
            .iter()
            .flat_map(|nif| {
                self.entries
                    .iter()
                    .map(move |entry| Artifact { entry, nif })
            })
            .collect()
    }

    /// The matrix as `{"include": [...]}` for `strategy.matrix` of GitHub Actions. With a
    /// `version`, each job also gets its tarball name (`artifact`).
    pub fn to_json(&self, version: Option<&str>) -> String {
        let jobs: Vec<String> = self
            .artifacts()
            .iter()
            .map(|a| {
                let e = a.entry;
                let variant = e.variant.as_deref().unwrap_or("");
                let name = match variant {
                    "" => format!("{} nif-{}", e.target, a.nif),
                    v => format!("{}--{v} nif-{}", e.target, a.nif),
                };
                let mut fields = vec![
                    ("name", name),
                    ("target", e.target.clone()),
                    ("variant", variant.to_string()),
                    ("nif", a.nif.to_string()),
                    ("features", a.cargo_features()),
                    ("runner", e.runner.clone()),
                    ("builder", e.builder.as_str().to_string()),
                    ("library", naming::built_library(naming::CRATE, &e.target)),
                    ("rustflags", e.rustflags().to_string()),
                ];
                if let Some(v) = version {
                    fields.push(("artifact", a.file_name(v)));
                }
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{}", json_string(v)))
                    .collect();
                format!("{{{}}}", body.join(","))
            })
            .collect();
        format!("{{\"include\":[{}]}}", jobs.join(","))
    }
}

fn is_nif_version(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => [a, b]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())),
        None => false,
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str =
        "# comment\nnif 2.15\n\nx86_64-unknown-linux-gnu - flex ubuntu-22.04 zigbuild\n\
                         x86_64-unknown-linux-gnu cuda flex,cuda ubuntu-22.04 zigbuild # gpu\n\
                         x86_64-unknown-linux-musl - flex ubuntu-22.04 cross\n";

    #[test]
    fn the_repository_matrix_is_valid_and_matches_the_contract() {
        let m = Matrix::builtin().unwrap();
        assert_eq!(m.nif_versions, ["2.15"]);
        let variants = |t: &str| -> Vec<Option<&str>> {
            m.entries
                .iter()
                .filter(|e| e.target == t)
                .map(|e| e.variant.as_deref())
                .collect()
        };
        for t in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
            assert_eq!(variants(t), [None, Some("cuda"), Some("vulkan")], "{t}");
        }
        for t in [
            "x86_64-unknown-linux-musl",
            "aarch64-unknown-linux-musl",
            "aarch64-apple-darwin",
            "x86_64-apple-darwin",
            "aarch64-apple-ios",
            "aarch64-linux-android",
        ] {
            assert_eq!(variants(t), [None], "{t}");
        }
        assert!(variants("x86_64-pc-windows-msvc").contains(&Some("vulkan")));
        for e in &m.entries {
            if e.target.contains("apple") {
                assert!(e.features.contains(&"metal".to_string()), "{e:?}");
            }
            if let Some(v) = &e.variant {
                assert!(
                    e.features.contains(v),
                    "a variant builds its own feature: {e:?}"
                );
            }
        }
    }

    #[test]
    fn parses_lines_comments_and_defaults() {
        let m = Matrix::parse(SMALL).unwrap();
        assert_eq!(
            m.targets(),
            ["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl"]
        );
        assert_eq!(m.entries[1].variant.as_deref(), Some("cuda"));
        assert_eq!(m.entries[1].features, ["flex", "cuda"]);
        assert_eq!(m.entries[2].builder, Builder::Cross);
        assert_eq!(m.entries[2].rustflags(), "-C target-feature=-crt-static");
        assert_eq!(m.entries[0].rustflags(), "");
        assert_eq!(m.artifacts().len(), 3);
    }

    #[test]
    fn every_nif_version_multiplies_the_artifacts() {
        let m = Matrix::parse(&SMALL.replace("nif 2.15", "nif 2.15\nnif 2.17")).unwrap();
        let names: Vec<String> = m.artifacts().iter().map(|a| a.file_name("1.0.0")).collect();
        assert_eq!(names.len(), 6);
        assert!(names.contains(
            &"libex_burn_nif-v1.0.0-nif-2.17-x86_64-unknown-linux-gnu--cuda.so.tar.gz".to_string()
        ));
        let a = &m.artifacts()[4];
        assert_eq!(a.cargo_features(), "flex,cuda,rustler/nif_version_2_17");
    }

    #[test]
    fn rejects_malformed_files() {
        let bad = [
            ("x86_64-unknown-linux-gnu - flex r cargo\n", "no `nif"),
            ("nif 2.15\n", "no targets"),
            ("nif 2\nx86_64-unknown-linux-gnu - flex r cargo\n", "line 1"),
            ("nif 2.15\nx86_64-unknown-linux-gnu - flex r\n", "line 2"),
            ("nif 2.15\nx86_64-unknown-linux-gnu - cuda r cargo\n", "flex"),
            ("nif 2.15\nx86_64-unknown-linux-gnu - flex r make\n", "unknown builder"),
            ("nif 2.15\nx86_64-unknown-linux-gnu cpu flex r cargo\n", "default artifact"),
            ("nif 2.15\nx86_64-linux - flex r cargo\n", "not a target triple"),
            ("nif 2.15\nx86_64-unknown-linux-gnu cuda flex,cuda r cargo\n", "no default"),
            (
                "nif 2.15\nx86_64-unknown-linux-gnu - flex r cargo\nx86_64-unknown-linux-gnu - flex r cargo\n",
                "duplicate",
            ),
            ("nif 2.15\nnif 2.15\n", "duplicate NIF"),
        ];
        for (text, expected) in bad {
            let e = Matrix::parse(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn json_has_one_job_per_artifact() {
        let m = Matrix::parse(SMALL).unwrap();
        let json = m.to_json(Some("0.4.0"));
        assert!(json.starts_with("{\"include\":[{\"name\":\"x86_64-unknown-linux-gnu nif-2.15\""));
        assert_eq!(json.matches("\"target\":").count(), 3);
        assert!(json.contains("\"variant\":\"cuda\""));
        assert!(json.contains("\"features\":\"flex,cuda,rustler/nif_version_2_15\""));
        assert!(json.contains("\"library\":\"libex_burn_nif.so\""));
        assert!(json.contains(
            "\"artifact\":\"libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-musl.so.tar.gz\""
        ));
        assert!(!m.to_json(None).contains("artifact"));
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
