//! The `ex_burn_release` binary end to end: packaging, the checksum file (read back by Elixir),
//! `verify` on complete, incomplete and tampered folders, the glibc reader on real ELF files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ex_burn_release::{archive, checksum, naming, targets::Matrix};

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ex_burn_release"))
        .args(args)
        .output()
        .expect("run ex_burn_release")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A fresh scratch directory under the cargo target dir.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ex_burn_release-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fake_library(dir: &Path, seed: u8) -> PathBuf {
    let path = dir.join(format!("lib{seed}.so"));
    let bytes: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8 ^ seed).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

fn package(lib: &Path, target: &str, variant: Option<&str>, version: &str, out: &Path) -> Output {
    let mut args = vec![
        "package",
        "--lib",
        lib.to_str().unwrap(),
        "--target",
        target,
        "--nif",
        "2.15",
    ];
    args.extend(["--version", version, "--out", out.to_str().unwrap()]);
    if let Some(v) = variant {
        args.extend(["--variant", v]);
    }
    tool(&args)
}

/// Packages a fake library for every artifact of the repository's matrix.
fn full_release(dir: &Path, version: &str) -> PathBuf {
    let out = dir.join("release");
    let lib = fake_library(dir, 7);
    let matrix = Matrix::builtin().unwrap();
    for a in matrix.artifacts() {
        let o = package(
            &lib,
            &a.entry.target,
            a.entry.variant.as_deref(),
            version,
            &out,
        );
        assert!(o.status.success(), "{o:?}");
    }
    out
}

#[test]
fn packaging_twice_gives_identical_bytes_and_the_right_member() {
    let dir = scratch("twice");
    let lib = fake_library(&dir, 1);
    let (a, b) = (dir.join("a"), dir.join("b"));
    for out in [&a, &b] {
        let o = package(&lib, "x86_64-unknown-linux-gnu", Some("cuda"), "0.4.0", out);
        assert!(o.status.success(), "{o:?}");
        assert!(stdout(&o).starts_with("sha256:"));
    }
    let name = "libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-gnu--cuda.so.tar.gz";
    let first = std::fs::read(a.join(name)).unwrap();
    assert_eq!(first, std::fs::read(b.join(name)).unwrap());

    let entries = archive::unpack(&first).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].name, naming::member_of(name).unwrap());
    assert_eq!(entries[0].mode, 0o755);
    assert_eq!(entries[0].data, std::fs::read(&lib).unwrap());

    // Windows and macOS names come out of the same command.
    let o = package(&lib, "x86_64-pc-windows-msvc", Some("vulkan"), "0.4.0", &a);
    assert!(o.status.success());
    assert!(a
        .join("ex_burn_nif-v0.4.0-nif-2.15-x86_64-pc-windows-msvc--vulkan.dll.tar.gz")
        .is_file());
    let o = package(&lib, "aarch64-apple-darwin", None, "0.4.0", &a);
    assert!(o.status.success());
    assert!(a
        .join("libex_burn_nif-v0.4.0-nif-2.15-aarch64-apple-darwin.so.tar.gz")
        .is_file());
}

#[test]
fn a_different_library_gives_a_different_tarball() {
    let dir = scratch("different");
    for seed in [1, 2] {
        let lib = fake_library(&dir, seed);
        assert!(package(
            &lib,
            "x86_64-unknown-linux-musl",
            None,
            "1.0.0",
            &dir.join(seed.to_string())
        )
        .status
        .success());
    }
    let name = "libex_burn_nif-v1.0.0-nif-2.15-x86_64-unknown-linux-musl.so.tar.gz";
    assert_ne!(
        std::fs::read(dir.join("1").join(name)).unwrap(),
        std::fs::read(dir.join("2").join(name)).unwrap()
    );
}

#[test]
fn checksum_file_is_sorted_and_elixir_reads_it_as_rustler_precompiled_writes_it() {
    let dir = scratch("checksum");
    let release = full_release(&dir, "0.4.0");
    let file = dir.join(checksum::FILE_NAME);
    let o = tool(&[
        "checksum",
        "--dir",
        release.to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = std::fs::read_to_string(&file).unwrap();

    let lines: Vec<&str> = text.lines().collect();
    let expected = Matrix::builtin().unwrap().artifacts().len();
    assert_eq!(lines.len(), expected + 2);
    assert_eq!((lines[0], lines[lines.len() - 1]), ("%{", "}"));
    let body = &lines[1..lines.len() - 1];
    assert!(body.windows(2).all(|w| w[0] < w[1]), "sorted");
    for line in body {
        let (name, value) = line
            .trim()
            .trim_end_matches(',')
            .split_once(" => ")
            .unwrap();
        let name = name.trim_matches('"');
        let bytes = std::fs::read(release.join(name)).unwrap();
        assert_eq!(
            value,
            format!("\"sha256:{}\"", checksum::sha256_hex(&bytes))
        );
    }

    // Elixir evaluates the file into the map of name -> "sha256:<hex>", and rendering that map
    // with rustler_precompiled's own line format (write_checksum!/2) reproduces the bytes.
    let script = r##"
        [file, dir] = System.argv()
        {map, _} = Code.eval_file(file)
        for {name, value} <- map do
          hash = :crypto.hash(:sha256, File.read!(Path.join(dir, name))) |> Base.encode16(case: :lower)
          if value != "sha256:" <> hash, do: raise("mismatch for #{name}")
        end
        lines = for {f, c} <- Enum.sort(map), do: ~s(  "#{f}" => #{inspect(c, limit: :infinity)},\n)
        if IO.iodata_to_binary(["%{\n", lines, "}\n"]) != File.read!(file), do: raise("format differs")
        IO.puts(map_size(map))
    "##;
    let elixir = Command::new("elixir")
        .args([
            "-e",
            script,
            file.to_str().unwrap(),
            release.to_str().unwrap(),
        ])
        .output()
        .expect("elixir must be on PATH for this test (bin/setup installs it)");
    assert!(elixir.status.success(), "{elixir:?}");
    assert_eq!(stdout(&elixir).trim(), expected.to_string());
}

#[test]
fn the_repository_checksum_file_is_empty_until_a_release() {
    // Until the first real release the shipped file must not claim any artifact.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(checksum::FILE_NAME);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, checksum::render(&checksum::Checksums::new()).unwrap());
}

fn verify(release: &Path, file: &Path, version: &str) -> Output {
    tool(&[
        "verify",
        "--dir",
        release.to_str().unwrap(),
        "--checksum",
        file.to_str().unwrap(),
        "--version",
        version,
    ])
}

#[test]
fn verify_passes_a_complete_release_and_fails_missing_altered_and_stale_artifacts() {
    let dir = scratch("verify");
    let release = full_release(&dir, "0.5.0");
    let file = dir.join(checksum::FILE_NAME);
    let write = || {
        tool(&[
            "checksum",
            "--dir",
            release.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ])
    };
    assert!(write().status.success());

    let ok = verify(&release, &file, "0.5.0");
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(stdout(&ok).contains("ok: 16 artifacts"), "{}", stdout(&ok));

    // The wrong version: nothing expected is there, everything present is unexpected.
    let wrong = verify(&release, &file, "0.5.1");
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stdout(&wrong)
        .contains("missing: libex_burn_nif-v0.5.1-nif-2.15-aarch64-apple-ios.so.tar.gz"));

    // A missing artifact (and regenerating the checksum file does not hide it).
    let gone = "libex_burn_nif-v0.5.0-nif-2.15-aarch64-unknown-linux-gnu--vulkan.so.tar.gz";
    let saved = std::fs::read(release.join(gone)).unwrap();
    std::fs::remove_file(release.join(gone)).unwrap();
    let o = verify(&release, &file, "0.5.0");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), format!("missing: {gone}"));
    assert!(write().status.success());
    let o = verify(&release, &file, "0.5.0");
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(&format!("missing: {gone}")));
    assert!(stdout(&o).contains(&format!("not in the checksum file: {gone}")));
    std::fs::write(release.join(gone), &saved).unwrap();
    assert!(write().status.success());

    // An altered artifact: one flipped byte.
    let altered = "ex_burn_nif-v0.5.0-nif-2.15-x86_64-pc-windows-msvc.dll.tar.gz";
    let mut bytes = std::fs::read(release.join(altered)).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(release.join(altered), &bytes).unwrap();
    let o = verify(&release, &file, "0.5.0");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).starts_with(&format!("altered: {altered} (checksum file sha256:")),
        "{}",
        stdout(&o)
    );
    bytes[mid] ^= 0xff;
    std::fs::write(release.join(altered), &bytes).unwrap();
    assert_eq!(verify(&release, &file, "0.5.0").status.code(), Some(0));

    // A tarball that holds the wrong file, listed with its true hash.
    let wrong_member = "libex_burn_nif-v0.5.0-nif-2.15-x86_64-apple-darwin.so.tar.gz";
    std::fs::write(
        release.join(wrong_member),
        archive::package("libex_burn_nif.dylib", b"x").unwrap(),
    )
    .unwrap();
    assert!(write().status.success());
    let o = verify(&release, &file, "0.5.0");
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(&format!(
        "malformed: {wrong_member}: holds \"libex_burn_nif.dylib\""
    )));

    // A stale entry no matrix line produces.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text = text.replacen(
        "%{\n",
        &format!(
            "%{{\n  \"libex_burn_nif-v0.4.9-old.so.tar.gz\" => \"{}\",\n",
            checksum::value(b"")
        ),
        1,
    );
    std::fs::write(&file, text).unwrap();
    let o = verify(&release, &file, "0.5.0");
    assert!(
        stdout(&o).contains("unexpected (not in the matrix): libex_burn_nif-v0.4.9-old.so.tar.gz")
    );
}

#[test]
fn verify_reads_a_given_targets_file() {
    let dir = scratch("verify-targets");
    let targets = dir.join("targets.txt");
    std::fs::write(
        &targets,
        "nif 2.15\nx86_64-unknown-linux-gnu - flex ubuntu-22.04 zigbuild\n",
    )
    .unwrap();
    let release = dir.join("release");
    let lib = fake_library(&dir, 3);
    assert!(
        package(&lib, "x86_64-unknown-linux-gnu", None, "0.1.0", &release)
            .status
            .success()
    );
    let file = dir.join("sums.exs");
    assert!(tool(&[
        "checksum",
        "--dir",
        release.to_str().unwrap(),
        "--out",
        file.to_str().unwrap()
    ])
    .status
    .success());
    let (r, f, t) = (
        release.to_str().unwrap(),
        file.to_str().unwrap(),
        targets.to_str().unwrap(),
    );
    let o = tool(&[
        "verify",
        "--dir",
        r,
        "--checksum",
        f,
        "--version",
        "0.1.0",
        "--targets",
        t,
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // Against the repository matrix the same folder is far from complete.
    assert_eq!(
        tool(&["verify", "--dir", r, "--checksum", f, "--version", "0.1.0"])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn glibc_reader_on_real_elf_files() {
    if cfg!(not(all(target_os = "linux", target_env = "gnu"))) {
        return; // glibc symbol versions exist only on GNU/Linux hosts
    }
    for path in [std::env::current_exe().unwrap(), PathBuf::from("/bin/ls")] {
        let o = tool(&["glibc", "--lib", path.to_str().unwrap()]);
        assert!(o.status.success(), "{o:?}");
        let found = stdout(&o).trim().to_string();
        let v =
            ex_burn_release::elf::GlibcVersion::parse(&found).unwrap_or_else(|| panic!("{found}"));
        assert!(
            v >= ex_burn_release::elf::GlibcVersion(vec![2, 2, 5]),
            "{found}"
        );
        assert_eq!(
            tool(&["glibc", "--lib", path.to_str().unwrap(), "--max", "2.0"])
                .status
                .code(),
            Some(1)
        );
        assert_eq!(
            tool(&["glibc", "--lib", path.to_str().unwrap(), "--max", "99.0"])
                .status
                .code(),
            Some(0)
        );
    }
}

#[test]
fn matrix_json_lists_every_artifact() {
    let o = tool(&["matrix", "--version", "0.4.0"]);
    assert!(o.status.success());
    let json = stdout(&o);
    let m = Matrix::builtin().unwrap();
    assert_eq!(json.matches("\"artifact\":").count(), m.artifacts().len());
    for a in m.artifacts() {
        assert!(json.contains(&format!("\"artifact\":\"{}\"", a.file_name("0.4.0"))));
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(tool(&[]).status.code(), Some(2));
    assert_eq!(tool(&["bogus"]).status.code(), Some(2));
    assert_eq!(tool(&["checksum", "--dir"]).status.code(), Some(2));
    assert_eq!(
        tool(&["package", "--lib", "x", "--nope", "y"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        tool(&["glibc", "--lib", "/nonexistent"]).status.code(),
        Some(2)
    );
}
