//! Deterministic `.tar.gz`: a hand-written ustar writer (sorted entries, mtime 0, uid/gid 0, no
//! owner names, fixed mode) and a gzip stream without file name or time at a fixed level, so the
//! same library always gives the same bytes; plus the small reader `verify` uses.

use std::io::{Read, Write};

use flate2::{read::GzDecoder, Compression, GzBuilder};

const BLOCK: usize = 512;

/// File mode of the packaged library.
pub const LIBRARY_MODE: u32 = 0o755;

/// The gzip level (fixed: a different level gives different bytes).
pub const GZIP_LEVEL: u32 = 9;

/// One regular file of an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive (at most 100 bytes, no `..`).
    pub name: String,
    /// Permission bits, e.g. `0o755`.
    pub mode: u32,
    /// File contents.
    pub data: Vec<u8>,
}

/// A ustar archive of `entries`, sorted by name, with every varying header field zeroed.
pub fn tar(entries: &[Entry]) -> Result<Vec<u8>, String> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for e in sorted {
        out.extend_from_slice(&header(e)?);
        out.extend_from_slice(&e.data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn header(e: &Entry) -> Result<[u8; BLOCK], String> {
    let name = e.name.as_bytes();
    if name.is_empty()
        || name.len() > 100
        || e.name.split('/').any(|p| p == "..")
        || name.contains(&0)
    {
        return Err(format!("cannot store {:?} in a ustar header", e.name));
    }
    if e.mode > 0o7777 {
        return Err(format!("bad mode {:o}", e.mode));
    }
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(e.mode))?; // mode
    octal(&mut h[108..116], 0)?; // uid
    octal(&mut h[116..124], 0)?; // gid
    octal(&mut h[124..136], e.data.len() as u64)?; // size
    octal(&mut h[136..148], 0)?; // mtime
    h[148..156].fill(b' '); // checksum placeholder
    h[156] = b'0'; // regular file
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    octal(&mut h[329..337], 0)?; // devmajor
    octal(&mut h[337..345], 0)?; // devminor
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum))?;
    h[155] = b' ';
    Ok(h)
}

/// Zero-padded octal digits followed by NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) -> Result<(), String> {
    let digits = field.len() - 1;
    let s = format!("{value:0digits$o}");
    if s.len() > digits {
        return Err(format!("{value} does not fit a {digits}-digit tar field"));
    }
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
    Ok(())
}

/// A gzip stream with no file name, mtime 0 and a fixed level.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::new(GZIP_LEVEL));
    encoder
        .write_all(data)
        .expect("writing to a Vec cannot fail");
    encoder.finish().expect("writing to a Vec cannot fail")
}

/// The release tarball: `library` stored as the single top-level file `member`.
pub fn package(member: &str, library: &[u8]) -> Result<Vec<u8>, String> {
    let entry = Entry {
        name: member.to_string(),
        mode: LIBRARY_MODE,
        data: library.to_vec(),
    };
    Ok(gzip(&tar(&[entry])?))
}

/// Reads a `.tar.gz` back into its regular files (names and contents).
pub fn unpack(tar_gz: &[u8]) -> Result<Vec<Entry>, String> {
    let mut raw = Vec::new();
    GzDecoder::new(tar_gz)
        .read_to_end(&mut raw)
        .map_err(|e| format!("not a gzip stream: {e}"))?;
    let mut entries = Vec::new();
    let mut pos = 0;
    while pos + BLOCK <= raw.len() {
        let h = &raw[pos..pos + BLOCK];
        if h.iter().all(|&b| b == 0) {
            return Ok(entries);
        }
        let size = parse_octal(&h[124..136])? as usize;
        let name_end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8(h[..name_end].to_vec())
            .map_err(|_| "non-UTF-8 member name".to_string())?;
        let start = pos + BLOCK;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= raw.len())
            .ok_or("truncated tar member")?;
        if matches!(h[156], b'0' | 0) {
            entries.push(Entry {
                name,
                mode: parse_octal(&h[100..108])? as u32,
                data: raw[start..end].to_vec(),
            });
        } else {
            return Err(format!("member {name:?} is not a regular file"));
        }
        pos = start + size.div_ceil(BLOCK) * BLOCK;
    }
    Err("tar archive has no end-of-archive marker".into())
}

fn parse_octal(field: &[u8]) -> Result<u64, String> {
    let text: String = field
        .iter()
        .take_while(|&&b| b != 0 && b != b' ')
        .map(|&b| b as char)
        .collect();
    u64::from_str_radix(text.trim_start(), 8).map_err(|_| format!("bad octal field {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_are_fixed() {
        let t = tar(&[Entry {
            name: "a.so".into(),
            mode: 0o755,
            data: vec![1, 2, 3],
        }])
        .unwrap();
        assert_eq!(t.len(), 4 * BLOCK);
        assert_eq!(&t[..4], b"a.so");
        assert_eq!(&t[100..108], b"0000755\0");
        assert_eq!(&t[108..116], b"0000000\0");
        assert_eq!(&t[124..136], b"00000000003\0");
        assert_eq!(&t[136..148], b"00000000000\0");
        assert_eq!(&t[257..265], b"ustar\x0000");
        assert_eq!(&t[BLOCK..BLOCK + 3], &[1, 2, 3]);
        // The checksum is the byte sum with the checksum field read as spaces.
        let mut h = t[..BLOCK].to_vec();
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(parse_octal(&t[148..156]).unwrap(), u64::from(sum));
    }

    #[test]
    fn entries_are_sorted_and_round_trip() {
        let b = Entry {
            name: "b".into(),
            mode: 0o644,
            data: vec![7; 600],
        };
        let a = Entry {
            name: "a".into(),
            mode: 0o755,
            data: vec![],
        };
        let packed = gzip(&tar(&[b.clone(), a.clone()]).unwrap());
        assert_eq!(unpack(&packed).unwrap(), vec![a, b]);
    }

    #[test]
    fn gzip_header_has_no_name_and_no_time() {
        let gz = gzip(b"hello");
        assert_eq!(&gz[..4], &[0x1f, 0x8b, 8, 0], "no FNAME flag");
        assert_eq!(&gz[4..8], &[0, 0, 0, 0], "mtime 0");
    }

    #[test]
    fn refuses_what_ustar_cannot_hold() {
        let long = Entry {
            name: "x".repeat(101),
            mode: 0o644,
            data: vec![],
        };
        assert!(tar(&[long]).is_err());
        let up = Entry {
            name: "../x".into(),
            mode: 0o644,
            data: vec![],
        };
        assert!(tar(&[up]).is_err());
        assert!(unpack(b"not gzip").is_err());
    }
}
