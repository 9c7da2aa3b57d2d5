//! What a built NIF library is, read from its bytes (ELF, PE or Mach-O, through the `object`
//! crate): the architecture, whether the BEAM can find its entry point `nif_init`, and which
//! shared libraries the loader must find. A release artifact passes when the architecture is
//! its target's, `nif_init` is exported, every needed library is one that the target's systems
//! always have (so a user never installs anything beside the BEAM), and a `-linux-gnu` library
//! needs no glibc newer than [`crate::elf::GLIBC_FLOOR`].

use std::fmt::Write as _;

use object::{Architecture, BinaryFormat, NameOrOrdinal, Object, ObjectSymbol};

use crate::elf::{self, GlibcVersion};

/// The platform family a target triple names, with the libraries its systems always have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// Linux with glibc (`*-linux-gnu`).
    LinuxGnu,
    /// Linux with musl (`*-linux-musl`).
    LinuxMusl,
    /// Android (`*-linux-android`).
    Android,
    /// Windows (`*-windows-gnu`, `*-windows-msvc`).
    Windows,
    /// macOS and iOS (`*-apple-*`).
    Apple,
}

impl Platform {
    /// The platform of a Rust target triple; `None` for one ExBurn does not ship.
    pub fn of(target: &str) -> Option<Platform> {
        if target.contains("-apple-") {
            Some(Platform::Apple)
        } else if target.contains("-windows-") {
            Some(Platform::Windows)
        } else if target.ends_with("-linux-android") {
            Some(Platform::Android)
        } else if target.ends_with("-linux-musl") {
            Some(Platform::LinuxMusl)
        } else if target.ends_with("-linux-gnu") {
            Some(Platform::LinuxGnu)
        } else {
            None
        }
    }

    fn format(self) -> BinaryFormat {
        match self {
            Platform::Windows => BinaryFormat::Pe,
            Platform::Apple => BinaryFormat::MachO,
            _ => BinaryFormat::Elf,
        }
    }

    /// The symbol the BEAM looks up (Mach-O prefixes C symbols with `_`).
    fn entry_symbol(self) -> &'static str {
        match self {
            Platform::Apple => "_nif_init",
            _ => "nif_init",
        }
    }

    /// Whether every installation of the platform has `library` (a `DT_NEEDED` name, a PE
    /// import DLL, a Mach-O dylib path).
    pub fn is_system_library(self, library: &str) -> bool {
        match self {
            // glibc's own libraries and libgcc_s (a dependency of glibc's pthread_cancel,
            // present wherever glibc is). Not libstdc++: minimal images lack it.
            Platform::LinuxGnu => {
                const GLIBC: [&str; 8] = [
                    "libc.so.6",
                    "libm.so.6",
                    "libdl.so.2",
                    "libpthread.so.0",
                    "librt.so.1",
                    "libutil.so.1",
                    "libgcc_s.so.1",
                    "ld-linux-",
                ];
                GLIBC
                    .iter()
                    .any(|s| library == *s || (s.ends_with('-') && library.starts_with(s)))
            }
            // musl is one library, which is also its loader; nothing else (not even
            // libgcc_s, which Alpine installs only on request).
            Platform::LinuxMusl => library == "libc.so" || library.starts_with("ld-musl-"),
            Platform::Android => matches!(
                library,
                "libc.so" | "libm.so" | "libdl.so" | "liblog.so" | "libandroid.so"
            ),
            Platform::Windows => {
                let l = library.to_ascii_lowercase();
                const WINDOWS: [&str; 26] = [
                    "kernel32.dll",
                    "ntdll.dll",
                    "msvcrt.dll",
                    "user32.dll",
                    "advapi32.dll",
                    "ws2_32.dll",
                    "bcrypt.dll",
                    "bcryptprimitives.dll",
                    "userenv.dll",
                    "ole32.dll",
                    "oleaut32.dll",
                    "shell32.dll",
                    "gdi32.dll",
                    "crypt32.dll",
                    "secur32.dll",
                    "ncrypt.dll",
                    "dbghelp.dll",
                    "psapi.dll",
                    "powrprof.dll",
                    "opengl32.dll",
                    "d3d12.dll",
                    "dxgi.dll",
                    "d3dcompiler_47.dll",
                    // Device enumeration and COM (wgpu's Vulkan/DX12 adapters): in every
                    // Windows since 8, so in every Windows that Erlang/OTP supports.
                    "setupapi.dll",
                    "combase.dll",
                    // The MSVC runtime: installed with Erlang/OTP on Windows.
                    "vcruntime140.dll",
                ];
                WINDOWS.contains(&l.as_str())
                    || l.starts_with("api-ms-win-")
                    || l.starts_with("ext-ms-win-")
            }
            Platform::Apple => {
                library.starts_with("/System/Library/Frameworks/")
                    || matches!(
                        library,
                        "/usr/lib/libSystem.B.dylib"
                            | "/usr/lib/libc++.1.dylib"
                            | "/usr/lib/libobjc.A.dylib"
                            | "/usr/lib/libiconv.2.dylib"
                            | "/usr/lib/libresolv.9.dylib"
                    )
            }
        }
    }
}

/// The CPU a target triple names, as the `object` crate reports it.
pub fn architecture_of(target: &str) -> Option<Architecture> {
    match target.split('-').next()? {
        "x86_64" => Some(Architecture::X86_64),
        "aarch64" | "arm64" => Some(Architecture::Aarch64),
        "riscv64gc" | "riscv64" => Some(Architecture::Riscv64),
        _ => None,
    }
}

/// What was read from a library, and what is wrong with it for its target.
#[derive(Debug, PartialEq, Eq)]
pub struct Report {
    /// File format (`Elf`, `Pe`, `MachO`, ...).
    pub format: String,
    /// CPU architecture.
    pub architecture: String,
    /// Whether the entry point the BEAM calls is exported.
    pub exports_nif_init: bool,
    /// Every shared library the loader must find, in file order.
    pub needed: Vec<String>,
    /// For ELF files, the highest `GLIBC_` symbol version needed.
    pub glibc: Option<String>,
    /// Problems; empty when the library is fit to ship for the target.
    pub problems: Vec<String>,
}

impl Report {
    /// The report as text: one fact per line, problems last.
    pub fn render(&self, target: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "target        {target}");
        let _ = writeln!(out, "format        {}", self.format);
        let _ = writeln!(out, "architecture  {}", self.architecture);
        let _ = writeln!(
            out,
            "nif_init      {}",
            if self.exports_nif_init {
                "exported"
            } else {
                "NOT exported"
            }
        );
        let _ = writeln!(out, "needs         {}", self.needed.join(" "));
        if let Some(g) = &self.glibc {
            let _ = writeln!(out, "glibc         {g}");
        }
        if self.problems.is_empty() {
            let _ = writeln!(out, "ok");
        }
        for p in &self.problems {
            let _ = writeln!(out, "problem: {p}");
        }
        out
    }
}

/// Reads `bytes` as the library of `target` (a Rust triple).
pub fn inspect(bytes: &[u8], target: &str) -> Result<Report, String> {
    let platform = Platform::of(target).ok_or_else(|| {
        format!("{target}: not a platform ExBurn ships (linux, android, windows, apple)")
    })?;
    let file = object::File::parse(bytes).map_err(|e| format!("not a library object: {e}"))?;
    let mut problems = Vec::new();

    let format = file.format();
    if format != platform.format() {
        problems.push(format!(
            "a {format:?} file, but {target} loads {:?} files",
            platform.format()
        ));
    }
    let architecture = file.architecture();
    match architecture_of(target) {
        Some(a) if a == architecture => {}
        Some(a) => problems.push(format!("built for {architecture:?}, but {target} is {a:?}")),
        None => problems.push(format!("unknown CPU in {target}")),
    }

    let entry = platform.entry_symbol();
    let mut exports = Vec::new();
    for export in file.exports().map_err(|e| format!("export table: {e}"))? {
        exports.push(export.map_err(|e| format!("export table: {e}"))?);
    }
    let exported = exports
        .iter()
        .any(|e| e.name() == NameOrOrdinal::Name(entry.as_bytes()))
        // Some toolchains leave the export table empty and mark dynamic symbols instead.
        || file
            .dynamic_symbols()
            .any(|s| s.is_definition() && s.is_global() && s.name_bytes() == Ok(entry.as_bytes()));
    if !exported {
        problems.push(format!(
            "`{entry}` is not exported: the BEAM cannot load it as a NIF"
        ));
    }

    let mut needed = Vec::new();
    for library in file
        .import_libraries()
        .map_err(|e| format!("import table: {e}"))?
    {
        let library = library.map_err(|e| format!("import table: {e}"))?;
        let name = String::from_utf8_lossy(library.name()).into_owned();
        // PE import tables name a DLL once per import descriptor, in any case.
        if !needed
            .iter()
            .any(|n: &String| n.eq_ignore_ascii_case(&name))
        {
            needed.push(name);
        }
    }
    for library in &needed {
        if !platform.is_system_library(library) {
            problems.push(format!(
                "needs {library}, which {target} systems do not always have"
            ));
        }
    }
    // Imports by ordinal only would hide which function a DLL must provide.
    if platform == Platform::Windows {
        let mut by_ordinal = 0;
        for import in file.imports().map_err(|e| format!("import table: {e}"))? {
            let import = import.map_err(|e| format!("import table: {e}"))?;
            by_ordinal += usize::from(matches!(import.name(), NameOrOrdinal::Ordinal(_)));
        }
        if by_ordinal > 0 {
            problems.push(format!("{by_ordinal} functions imported by ordinal"));
        }
    }

    let glibc = if format == BinaryFormat::Elf {
        elf::max_glibc(bytes)?
    } else {
        None
    };
    match (platform, &glibc) {
        (Platform::LinuxGnu, Some(found)) => {
            let floor = GlibcVersion::parse(elf::GLIBC_FLOOR).expect("valid floor");
            if *found > floor {
                problems.push(format!(
                    "needs {found}, newer than the glibc floor {floor} (Ubuntu 20.04, Debian 11)"
                ));
            }
        }
        (Platform::LinuxMusl | Platform::Android, Some(found)) => problems.push(format!(
            "needs glibc symbols ({found}) on a non-glibc target"
        )),
        _ => {}
    }

    Ok(Report {
        format: format!("{format:?}"),
        architecture: format!("{architecture:?}"),
        exports_nif_init: exported,
        needed,
        glibc: glibc.map(|g| g.to_string()),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_of_every_matrix_target() {
        let matrix = crate::targets::Matrix::builtin().unwrap();
        for entry in &matrix.entries {
            assert!(Platform::of(&entry.target).is_some(), "{}", entry.target);
            assert!(architecture_of(&entry.target).is_some(), "{}", entry.target);
        }
        assert_eq!(
            Platform::of("aarch64-unknown-linux-musl"),
            Some(Platform::LinuxMusl)
        );
        assert_eq!(
            Platform::of("x86_64-pc-windows-gnu"),
            Some(Platform::Windows)
        );
        assert_eq!(Platform::of("aarch64-apple-ios"), Some(Platform::Apple));
        assert_eq!(Platform::of("wasm32-unknown-unknown"), None);
    }

    #[test]
    fn system_libraries_by_platform() {
        use Platform::*;
        assert!(LinuxGnu.is_system_library("libc.so.6"));
        assert!(LinuxGnu.is_system_library("ld-linux-aarch64.so.1"));
        assert!(!LinuxGnu.is_system_library("libstdc++.so.6"));
        assert!(!LinuxGnu.is_system_library("libcuda.so.1"));
        assert!(LinuxMusl.is_system_library("libc.so"));
        assert!(!LinuxMusl.is_system_library("libgcc_s.so.1"));
        assert!(!LinuxMusl.is_system_library("libc.so.6"));
        assert!(Windows.is_system_library("KERNEL32.dll"));
        assert!(Windows.is_system_library("api-ms-win-core-synch-l1-2-0.dll"));
        assert!(!Windows.is_system_library("libgcc_s_seh-1.dll"));
        assert!(!Windows.is_system_library("libwinpthread-1.dll"));
        assert!(!Windows.is_system_library("vulkan-1.dll"));
        assert!(
            Apple.is_system_library("/System/Library/Frameworks/Metal.framework/Versions/A/Metal")
        );
        assert!(!Apple.is_system_library("/opt/homebrew/lib/libomp.dylib"));
    }

    #[test]
    fn the_tool_itself_is_read_and_judged() {
        // This test binary is a host executable: the right format and CPU for the host, but
        // no `nif_init`, so it is reported as unfit, with the reason.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let host = if cfg!(target_arch = "aarch64") {
            "aarch64-unknown-linux-gnu"
        } else {
            "x86_64-unknown-linux-gnu"
        };
        if !cfg!(target_os = "linux") {
            return;
        }
        let report = inspect(&exe, host).unwrap();
        assert_eq!(report.format, "Elf");
        assert!(!report.exports_nif_init);
        assert!(
            report.problems.iter().any(|p| p.contains("nif_init")),
            "{report:?}"
        );
        assert!(report.needed.iter().any(|l| l == "libc.so.6"), "{report:?}");
        // The same bytes judged as another target: wrong CPU or format, named.
        let other = inspect(&exe, "aarch64-apple-darwin").unwrap();
        assert!(
            other.problems.iter().any(|p| p.contains("MachO")),
            "{other:?}"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(inspect(b"not a library", "x86_64-unknown-linux-gnu").is_err());
        assert!(inspect(b"\x7fELF\x02\x01\x01", "x86_64-unknown-linux-gnu").is_err());
        assert!(inspect(b"MZ", "x86_64-pc-windows-gnu").is_err());
        assert!(inspect(&[], "x86_64-pc-windows-gnu").is_err());
        assert!(inspect(b"\x7fELF", "riscv-unknown").is_err());
    }
}
