//! The release gate: every target x NIF version x variant of the matrix has a tarball in the
//! folder, a line in the checksum file and a matching hash; the tarball holds exactly its one
//! library; and nothing else is listed (a stale entry is as wrong as a missing one).

use std::collections::BTreeSet;
use std::path::Path;

use crate::{archive, checksum, naming, targets::Matrix};

/// What is wrong with a release folder; empty lists mean it is complete.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// How many artifacts the matrix expects.
    pub expected: usize,
    /// Expected tarballs absent from the folder.
    pub missing: Vec<String>,
    /// Expected tarballs without a line in the checksum file.
    pub unlisted: Vec<String>,
    /// Tarballs whose sha256 differs from the checksum file (name, listed, actual).
    pub altered: Vec<(String, String, String)>,
    /// Tarballs that do not hold exactly the one library they are named after.
    pub malformed: Vec<(String, String)>,
    /// Checksum lines or tarballs that no matrix entry produces.
    pub unexpected: Vec<String>,
}

impl Report {
    /// No problem found.
    pub fn is_ok(&self) -> bool {
        self.missing.is_empty()
            && self.unlisted.is_empty()
            && self.altered.is_empty()
            && self.malformed.is_empty()
            && self.unexpected.is_empty()
    }

    /// A human-readable account, one problem per line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.missing {
            out.push_str(&format!("missing: {name}\n"));
        }
        for name in &self.unlisted {
            out.push_str(&format!("not in the checksum file: {name}\n"));
        }
        for (name, listed, actual) in &self.altered {
            out.push_str(&format!(
                "altered: {name} (checksum file {listed}, file sha256:{actual})\n"
            ));
        }
        for (name, why) in &self.malformed {
            out.push_str(&format!("malformed: {name}: {why}\n"));
        }
        for name in &self.unexpected {
            out.push_str(&format!("unexpected (not in the matrix): {name}\n"));
        }
        if self.is_ok() {
            out.push_str(&format!(
                "ok: {} artifacts present, listed and unaltered\n",
                self.expected
            ));
        }
        out
    }
}

/// Checks `dir` and `checksums` against every artifact of `matrix` at `version`.
pub fn verify(
    dir: &Path,
    checksums: &checksum::Checksums,
    matrix: &Matrix,
    version: &str,
) -> Result<Report, String> {
    let expected: BTreeSet<String> = matrix
        .artifacts()
        .iter()
        .map(|a| a.file_name(version))
        .collect();
    let on_disk = checksum::of_dir(dir)?;
    let mut report = Report {
        expected: expected.len(),
        ..Report::default()
    };

    for name in &expected {
        let listed = checksums.get(name);
        if listed.is_none() {
            report.unlisted.push(name.clone());
        }
        let Some(actual) = on_disk.get(name) else {
            report.missing.push(name.clone());
            continue;
        };
        if let Some(listed) = listed {
            if listed != actual {
                let hex = actual.trim_start_matches("sha256:").to_string();
                report.altered.push((name.clone(), listed.clone(), hex));
                continue;
            }
        }
        let bytes = std::fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
        if let Err(why) = check_contents(name, &bytes) {
            report.malformed.push((name.clone(), why));
        }
    }
    let extra: BTreeSet<&String> = checksums
        .keys()
        .chain(on_disk.keys())
        .filter(|n| !expected.contains(*n))
        .collect();
    report.unexpected = extra.into_iter().cloned().collect();
    Ok(report)
}

/// The tarball holds one regular file, at the top level, named like the tarball minus `.tar.gz`.
pub fn check_contents(name: &str, tar_gz: &[u8]) -> Result<(), String> {
    let member = naming::member_of(name).ok_or("not a .tar.gz name")?;
    let entries = archive::unpack(tar_gz)?;
    match entries.as_slice() {
        [one] if one.name == member && !one.data.is_empty() => Ok(()),
        [one] => Err(format!(
            "holds {:?} ({} bytes), expected {member:?}",
            one.name,
            one.data.len()
        )),
        many => Err(format!(
            "holds {} files, expected only {member:?}",
            many.len()
        )),
    }
}
