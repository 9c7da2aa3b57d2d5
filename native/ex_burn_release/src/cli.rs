//! Command-line interface: `ex_burn_release <subcommand> --flag value ...`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{archive, checksum, elf, inspect, naming, targets::Matrix, verify};

/// Usage text.
pub const USAGE: &str = "\
usage: ex_burn_release <command> [--flag value]...

  package  --lib <file> --target <triple> --nif <x.y> [--variant <name>] --version <v> --out <dir>
           write lib<crate>-v<v>-nif-<x.y>-<triple>[--<name>].so.tar.gz (reproducible)
  checksum --dir <dir> --out <checksum-Elixir.ExBurn.Nif.exs>
           checksum every *.tar.gz in <dir> in rustler_precompiled's format
  verify   --dir <dir> --checksum <file> --version <v> [--targets <file>]
           every artifact of the matrix is present, listed and unaltered (exit 1 if not)
  glibc    --lib <file> [--max <x.y>]
           print the highest GLIBC_ version the library needs (exit 1 above --max)
  inspect  --lib <file> --target <triple>
           the library fits the target: format and CPU, `nif_init` exported, only system
           libraries needed, glibc floor for -linux-gnu (exit 1 if not)
  matrix   [--version <v>] [--targets <file>]
           print the release matrix as GitHub Actions JSON
  job      --target <triple> [--variant <name>] [--nif <x.y>] [--version <v>] [--targets <file>]
           one job of the matrix as KEY=value lines (TARGET, VARIANT, NIF, FEATURES, BUILDER,
           RUSTFLAGS, LIBRARY, ARTIFACT); --nif defaults to the first NIF version

--targets defaults to the native/targets.txt this tool was built with.
";

/// What a command produced: the exit code (0 success, 1 check failed) and its standard output.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Process exit code.
    pub code: u8,
    /// Text for standard output.
    pub stdout: String,
}

impl Outcome {
    fn ok(stdout: String) -> Outcome {
        Outcome { code: 0, stdout }
    }
}

/// Runs one command; `Err` is a usage or I/O error (exit code 2).
pub fn run(args: &[String]) -> Result<Outcome, String> {
    let Some((command, rest)) = args.split_first() else {
        return Err(USAGE.to_string());
    };
    let allowed: &[&str] = match command.as_str() {
        "package" => &["lib", "target", "nif", "variant", "version", "out"],
        "checksum" => &["dir", "out"],
        "verify" => &["dir", "checksum", "version", "targets"],
        "glibc" => &["lib", "max"],
        "inspect" => &["lib", "target"],
        "matrix" => &["version", "targets"],
        "job" => &["target", "variant", "nif", "version", "targets"],
        "help" | "--help" | "-h" => return Ok(Outcome::ok(USAGE.to_string())),
        other => return Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    let flags = Flags::parse(rest, allowed)?;
    match command.as_str() {
        "package" => package(&flags),
        "checksum" => write_checksum(&flags),
        "verify" => run_verify(&flags),
        "glibc" => glibc(&flags),
        "inspect" => run_inspect(&flags),
        "job" => job(&flags),
        _ => {
            let matrix = load_matrix(&flags)?;
            Ok(Outcome::ok(matrix.to_json(flags.get("version")) + "\n"))
        }
    }
}

struct Flags(BTreeMap<String, String>);

impl Flags {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Flags, String> {
        let mut map = BTreeMap::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let name = flag
                .strip_prefix("--")
                .filter(|n| allowed.contains(n))
                .ok_or_else(|| {
                    format!(
                        "unexpected argument {flag:?} (allowed: --{})",
                        allowed.join(", --")
                    )
                })?;
            let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            if map.insert(name.to_string(), value.clone()).is_some() {
                return Err(format!("--{name} given twice"));
            }
        }
        Ok(Flags(map))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required"))
    }

    fn path(&self, name: &str) -> Result<PathBuf, String> {
        self.required(name).map(PathBuf::from)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes through a temporary file and a rename, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("bad output path")?;
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn load_matrix(flags: &Flags) -> Result<Matrix, String> {
    match flags.get("targets") {
        Some(path) => Matrix::parse(&String::from_utf8_lossy(&read(Path::new(path))?)),
        None => Matrix::builtin(),
    }
}

fn package(flags: &Flags) -> Result<Outcome, String> {
    let target = flags.required("target")?;
    let nif = flags.required("nif")?;
    let version = flags.required("version")?;
    let variant = flags.get("variant");
    let ok_text = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
    };
    if ![target, nif, version]
        .into_iter()
        .chain(variant)
        .all(ok_text)
    {
        return Err(
            "--target, --nif, --version and --variant are plain names (letters, digits, . _ - +)"
                .into(),
        );
    }
    let library = read(&flags.path("lib")?)?;
    let member = naming::library_file(naming::CRATE, version, nif, target, variant);
    let tarball = archive::package(&member, &library)?;
    let out_dir = flags.path("out")?;
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let path = out_dir.join(format!("{member}.tar.gz"));
    write_atomically(&path, &tarball)?;
    Ok(Outcome::ok(format!(
        "{}  {}\n",
        checksum::value(&tarball),
        path.display()
    )))
}

fn write_checksum(flags: &Flags) -> Result<Outcome, String> {
    let sums = checksum::of_dir(&flags.path("dir")?)?;
    let out = flags.path("out")?;
    write_atomically(&out, checksum::render(&sums)?.as_bytes())?;
    Ok(Outcome::ok(format!(
        "{} artifacts -> {}\n",
        sums.len(),
        out.display()
    )))
}

fn run_verify(flags: &Flags) -> Result<Outcome, String> {
    let matrix = load_matrix(flags)?;
    let sums = checksum::parse(&String::from_utf8_lossy(&read(&flags.path("checksum")?)?))?;
    let report = verify::verify(
        &flags.path("dir")?,
        &sums,
        &matrix,
        flags.required("version")?,
    )?;
    Ok(Outcome {
        code: if report.is_ok() { 0 } else { 1 },
        stdout: report.render(),
    })
}

fn glibc(flags: &Flags) -> Result<Outcome, String> {
    let found = elf::max_glibc(&read(&flags.path("lib")?)?)?;
    let max = match flags.get("max") {
        Some(m) => Some(
            elf::GlibcVersion::parse(m)
                .ok_or_else(|| format!("--max {m:?} is not a version like 2.31"))?,
        ),
        None => None,
    };
    let text = found
        .as_ref()
        .map_or("none".to_string(), ToString::to_string);
    match (&found, &max) {
        (Some(f), Some(m)) if f > m => Ok(Outcome {
            code: 1,
            stdout: format!("{text} (newer than {m})\n"),
        }),
        _ => Ok(Outcome::ok(format!("{text}\n"))),
    }
}

fn run_inspect(flags: &Flags) -> Result<Outcome, String> {
    let target = flags.required("target")?;
    let report = inspect::inspect(&read(&flags.path("lib")?)?, target)?;
    Ok(Outcome {
        code: if report.problems.is_empty() { 0 } else { 1 },
        stdout: report.render(target),
    })
}

fn job(flags: &Flags) -> Result<Outcome, String> {
    let matrix = load_matrix(flags)?;
    let target = flags.required("target")?;
    let variant = flags.get("variant").filter(|v| !v.is_empty() && *v != "-");
    let nif = flags
        .get("nif")
        .or(matrix.nif_versions.first().map(String::as_str))
        .ok_or("no NIF version")?;
    let artifacts = matrix.artifacts();
    let artifact = artifacts
        .iter()
        .find(|a| a.entry.target == target && a.entry.variant.as_deref() == variant && a.nif == nif)
        .ok_or_else(|| {
            format!(
                "no job for target {target}, variant {}, NIF {nif} in the matrix",
                variant.unwrap_or("-")
            )
        })?;
    let e = artifact.entry;
    let mut lines = vec![
        ("TARGET", e.target.clone()),
        ("VARIANT", variant.unwrap_or("").to_string()),
        ("NIF", nif.to_string()),
        ("FEATURES", artifact.cargo_features()),
        ("BUILDER", e.builder.as_str().to_string()),
        ("RUSTFLAGS", e.rustflags().to_string()),
        ("LIBRARY", naming::built_library(naming::CRATE, &e.target)),
    ];
    if let Some(v) = flags.get("version") {
        lines.push(("ARTIFACT", artifact.file_name(v)));
    }
    let text: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    Ok(Outcome::ok(text))
}
