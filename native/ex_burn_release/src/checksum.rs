//! `checksum-Elixir.ExBurn.Nif.exs`: an Elixir map literal of artifact name ->
//! `"sha256:<hex>"`, byte for byte what `mix rustler_precompiled.download` writes
//! (`RustlerPrecompiled.write_checksum!/2`): `%{`, one sorted `  "name" => "sha256:...",` line
//! per artifact, `}`.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The checksum file name rustler_precompiled reads for `ExBurn.Nif`.
pub const FILE_NAME: &str = "checksum-Elixir.ExBurn.Nif.exs";

/// Artifact file name -> `"sha256:<64 lowercase hex>"`, sorted by name.
pub type Checksums = BTreeMap<String, String>;

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The checksum-file value for `bytes`: `sha256:<hex>`.
pub fn value(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Checksums of every `*.tar.gz` directly inside `dir`.
pub fn of_dir(dir: &Path) -> Result<Checksums, String> {
    let mut out = Checksums::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.is_file() && name.ends_with(".tar.gz") {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.insert(name.to_string(), value(&bytes));
        }
    }
    Ok(out)
}

/// The checksum file's text (an empty map is `%{\n}\n`).
pub fn render(checksums: &Checksums) -> Result<String, String> {
    let mut out = String::from("%{\n");
    for (name, value) in checksums {
        if !is_plain(name) || !is_plain(value) {
            return Err(format!(
                "{name:?} cannot be written as a plain Elixir string"
            ));
        }
        out.push_str(&format!("  \"{name}\" => \"{value}\",\n"));
    }
    out.push_str("}\n");
    Ok(out)
}

/// Reads a checksum file written by [`render`] (or by rustler_precompiled).
pub fn parse(text: &str) -> Result<Checksums, String> {
    let body = text
        .trim()
        .strip_prefix("%{")
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("a checksum file is an Elixir map literal `%{...}`")?;
    let mut out = Checksums::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(',').unwrap_or(line);
        let parsed = line
            .split_once("=>")
            .and_then(|(k, v)| Some((unquote(k.trim())?, unquote(v.trim())?)));
        let Some((name, value)) = parsed else {
            return Err(format!("unexpected checksum line {line:?}"));
        };
        let hex = value.strip_prefix("sha256:").filter(|h| {
            h.len() == 64
                && h.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        });
        if hex.is_none() {
            return Err(format!(
                "{name}: expected sha256:<64 lowercase hex>, got {value:?}"
            ));
        }
        if out.insert(name.to_string(), value.to_string()).is_some() {
            return Err(format!("{name} is listed twice"));
        }
    }
    Ok(out)
}

fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('"')?
        .strip_suffix('"')
        .filter(|inner| is_plain(inner))
}

/// No characters that would need escaping or interpolate inside an Elixir string.
fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn renders_rustler_precompiled_format_sorted() {
        let mut c = Checksums::new();
        c.insert("b.tar.gz".into(), value(b"b"));
        c.insert("a.tar.gz".into(), value(b"a"));
        let text = render(&c).unwrap();
        let expected = format!(
            "%{{\n  \"a.tar.gz\" => \"sha256:{}\",\n  \"b.tar.gz\" => \"sha256:{}\",\n}}\n",
            sha256_hex(b"a"),
            sha256_hex(b"b")
        );
        assert_eq!(text, expected);
        assert_eq!(parse(&text).unwrap(), c);
    }

    #[test]
    fn empty_map() {
        assert_eq!(render(&Checksums::new()).unwrap(), "%{\n}\n");
        assert!(parse("%{}").unwrap().is_empty());
        assert!(parse("%{\n}\n").unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_files() {
        assert!(parse("[]").is_err());
        assert!(parse("%{\n  \"a\" => \"md5:00\",\n}").is_err());
        let upper = format!("%{{\n  \"a\" => \"sha256:{}\",\n}}", "A".repeat(64));
        assert!(parse(&upper).is_err());
        let twice = format!(
            "%{{\n \"a\" => \"{0}\",\n \"a\" => \"{0}\",\n}}",
            value(b"")
        );
        assert!(parse(&twice).unwrap_err().contains("twice"));
        let mut c = Checksums::new();
        c.insert("a\"b".into(), value(b""));
        assert!(render(&c).is_err());
    }
}
