//! Artifact names, exactly as rustler_precompiled computes them (`lib_name/4`,
//! `lib_name_with_ext/2` and the variant suffix): a different name is a 404 for users.

/// The NIF crate every artifact is built from.
pub const CRATE: &str = "ex_burn_nif";

/// Whether `target` is a Windows triple (no `lib` prefix, `.dll`).
pub fn is_windows(target: &str) -> bool {
    target.contains("windows")
}

/// `lib<crate>-v<version>-nif-<nif>-<target>[--<variant>]`, without extension.
pub fn lib_name(
    crate_name: &str,
    version: &str,
    nif: &str,
    target: &str,
    variant: Option<&str>,
) -> String {
    let prefix = if is_windows(target) { "" } else { "lib" };
    let suffix = variant.map(|v| format!("--{v}")).unwrap_or_default();
    format!("{prefix}{crate_name}-v{version}-nif-{nif}-{target}{suffix}")
}

/// The library file inside the tarball: [`lib_name`] plus `.dll` on Windows, `.so` elsewhere
/// (macOS and iOS included, as rustler_precompiled expects).
pub fn library_file(
    crate_name: &str,
    version: &str,
    nif: &str,
    target: &str,
    variant: Option<&str>,
) -> String {
    let ext = if is_windows(target) { "dll" } else { "so" };
    format!(
        "{}.{ext}",
        lib_name(crate_name, version, nif, target, variant)
    )
}

/// The published tarball: [`library_file`] plus `.tar.gz`.
pub fn artifact_file(
    crate_name: &str,
    version: &str,
    nif: &str,
    target: &str,
    variant: Option<&str>,
) -> String {
    format!(
        "{}.tar.gz",
        library_file(crate_name, version, nif, target, variant)
    )
}

/// The file cargo writes for the `crate_name` cdylib on `target`
/// (in `target/<target>/dist/`, the profile released artifacts are built with).
pub fn built_library(crate_name: &str, target: &str) -> String {
    if is_windows(target) {
        format!("{crate_name}.dll")
    } else if target.contains("apple") {
        format!("lib{crate_name}.dylib")
    } else {
        format!("lib{crate_name}.so")
    }
}

/// The tarball's name without `.tar.gz`: the one file the tarball must hold.
pub fn member_of(artifact: &str) -> Option<&str> {
    artifact.strip_suffix(".tar.gz")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_default_and_variant() {
        assert_eq!(
            artifact_file(CRATE, "0.4.0", "2.15", "x86_64-unknown-linux-gnu", None),
            "libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-gnu.so.tar.gz"
        );
        assert_eq!(
            artifact_file(
                CRATE,
                "0.4.0",
                "2.15",
                "x86_64-unknown-linux-gnu",
                Some("cuda")
            ),
            "libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-gnu--cuda.so.tar.gz"
        );
    }

    #[test]
    fn macos_and_ios_use_so() {
        assert_eq!(
            library_file(CRATE, "1.2.3", "2.15", "aarch64-apple-darwin", None),
            "libex_burn_nif-v1.2.3-nif-2.15-aarch64-apple-darwin.so"
        );
        assert_eq!(
            artifact_file(CRATE, "1.2.3", "2.15", "aarch64-apple-ios", None),
            "libex_burn_nif-v1.2.3-nif-2.15-aarch64-apple-ios.so.tar.gz"
        );
        assert_eq!(
            built_library(CRATE, "x86_64-apple-darwin"),
            "libex_burn_nif.dylib"
        );
    }

    #[test]
    fn windows_drops_lib_and_uses_dll() {
        assert_eq!(
            artifact_file(
                CRATE,
                "0.4.0",
                "2.15",
                "x86_64-pc-windows-msvc",
                Some("vulkan")
            ),
            "ex_burn_nif-v0.4.0-nif-2.15-x86_64-pc-windows-msvc--vulkan.dll.tar.gz"
        );
        assert_eq!(
            artifact_file(CRATE, "0.4.0", "2.15", "x86_64-pc-windows-gnu", None),
            "ex_burn_nif-v0.4.0-nif-2.15-x86_64-pc-windows-gnu.dll.tar.gz"
        );
        assert_eq!(
            built_library(CRATE, "x86_64-pc-windows-gnu"),
            "ex_burn_nif.dll"
        );
    }

    #[test]
    fn android_and_musl() {
        assert_eq!(
            artifact_file(CRATE, "0.4.0", "2.15", "aarch64-linux-android", None),
            "libex_burn_nif-v0.4.0-nif-2.15-aarch64-linux-android.so.tar.gz"
        );
        assert_eq!(
            built_library(CRATE, "aarch64-unknown-linux-musl"),
            "libex_burn_nif.so"
        );
    }

    #[test]
    fn member_is_the_name_without_tar_gz() {
        let a = artifact_file(CRATE, "0.4.0", "2.15", "x86_64-unknown-linux-musl", None);
        assert_eq!(
            member_of(&a),
            Some(library_file(CRATE, "0.4.0", "2.15", "x86_64-unknown-linux-musl", None).as_str())
        );
        assert_eq!(member_of("foo.zip"), None);
    }
}
