//! The glibc floor of a library: the highest `GLIBC_x.y[.z]` version named in its ELF
//! `.gnu.version_r` (`SHT_GNU_verneed`) section, which lists the symbol versions the dynamic
//! linker must find. Handles 32/64-bit and little/big-endian files.

use std::fmt;

/// The newest glibc a `-linux-gnu` artifact may need (Ubuntu 20.04, Debian 11): release jobs
/// link against it (`bin/release-build`, zigbuild) and check it (`glibc --max`).
pub const GLIBC_FLOOR: &str = "2.31";

const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
/// Upper bound on list walks, so a corrupt file cannot loop forever.
const MAX_ITEMS: usize = 1 << 16;

/// A `GLIBC_` symbol version, compared numerically (`2.2.5 < 2.17 < 2.31`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion(pub Vec<u32>);

impl GlibcVersion {
    /// Parses `2.31` (or `GLIBC_2.31`); `None` for anything else (e.g. `GLIBC_PRIVATE`).
    pub fn parse(s: &str) -> Option<GlibcVersion> {
        let s = s.strip_prefix("GLIBC_").unwrap_or(s);
        let parts: Option<Vec<u32>> = s.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| p.len() >= 2).map(GlibcVersion)
    }
}

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        write!(f, "GLIBC_{}", parts.join("."))
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    is_64: bool,
}

impl Reader<'_> {
    fn slice(&self, at: u64, len: usize) -> Result<&[u8], String> {
        let start = usize::try_from(at).map_err(|_| "offset out of range")?;
        start
            .checked_add(len)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| format!("truncated ELF file (reading {len} bytes at {at})"))
    }

    fn array<const N: usize>(&self, at: u64) -> Result<[u8; N], String> {
        self.slice(at, N)?
            .try_into()
            .map_err(|_| format!("truncated ELF file (reading {N} bytes at {at})"))
    }

    fn u16(&self, at: u64) -> Result<u64, String> {
        let b: [u8; 2] = self.array::<2>(at)?;
        Ok(u64::from(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }))
    }

    fn u32(&self, at: u64) -> Result<u64, String> {
        let b: [u8; 4] = self.array::<4>(at)?;
        Ok(u64::from(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }))
    }

    /// A word: 8 bytes in 64-bit files, 4 in 32-bit ones.
    fn word(&self, at: u64) -> Result<u64, String> {
        if self.is_64 {
            let b: [u8; 8] = self.array::<8>(at)?;
            Ok(if self.big_endian {
                u64::from_be_bytes(b)
            } else {
                u64::from_le_bytes(b)
            })
        } else {
            self.u32(at)
        }
    }

    fn c_string(&self, at: u64) -> Result<&str, String> {
        let start = usize::try_from(at).map_err(|_| "offset out of range")?;
        let rest = self
            .bytes
            .get(start..)
            .ok_or("string offset out of range")?;
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or("unterminated string")?;
        std::str::from_utf8(&rest[..end]).map_err(|_| "non-UTF-8 version name".to_string())
    }
}

struct Section {
    kind: u64,
    offset: u64,
    link: u64,
    info: u64,
}

fn sections(r: &Reader<'_>) -> Result<Vec<Section>, String> {
    // ELF header: e_shoff, e_shentsize, e_shnum.
    let (shoff, shentsize, shnum) = if r.is_64 {
        (r.word(0x28)?, r.u16(0x3a)?, r.u16(0x3c)?)
    } else {
        (r.word(0x20)?, r.u16(0x2e)?, r.u16(0x30)?)
    };
    if shnum == 0 || shoff == 0 {
        return Err("the ELF file has no section headers".into());
    }
    let (offset_at, link_at, info_at) = if r.is_64 { (24, 40, 44) } else { (16, 24, 28) };
    (0..shnum)
        .map(|i| {
            let base = shoff + i * shentsize;
            Ok(Section {
                kind: r.u32(base + 4)?,
                offset: r.word(base + offset_at)?,
                link: r.u32(base + link_at)?,
                info: r.u32(base + info_at)?,
            })
        })
        .collect()
}

/// Every version name the file requires, from all needed libraries, in `.gnu.version_r` order.
pub fn needed_versions(bytes: &[u8]) -> Result<Vec<String>, String> {
    if bytes.len() < 0x34 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    let is_64 = match bytes[4] {
        1 => false,
        2 => true,
        c => return Err(format!("unknown ELF class {c}")),
    };
    let big_endian = match bytes[5] {
        1 => false,
        2 => true,
        d => return Err(format!("unknown ELF data encoding {d}")),
    };
    let r = Reader {
        bytes,
        big_endian,
        is_64,
    };
    let sections = sections(&r)?;
    let mut names = Vec::new();
    for verneed in sections
        .iter()
        .filter(|s| s.kind == u64::from(SHT_GNU_VERNEED))
    {
        let strtab = sections
            .get(usize::try_from(verneed.link).map_err(|_| "bad sh_link")?)
            .ok_or("version section links to a missing string table")?;
        let mut need = verneed.offset;
        for _ in 0..verneed.info.min(MAX_ITEMS as u64) {
            // Elf_Verneed: vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32, vn_next u32.
            let count = r.u16(need + 2)?;
            let mut aux = need + r.u32(need + 8)?;
            for _ in 0..count.min(MAX_ITEMS as u64) {
                // Elf_Vernaux: vna_hash u32, vna_flags u16, vna_other u16, vna_name u32, vna_next u32.
                names.push(r.c_string(strtab.offset + r.u32(aux + 8)?)?.to_string());
                let next = r.u32(aux + 12)?;
                if next == 0 {
                    break;
                }
                aux += next;
            }
            let next = r.u32(need + 12)?;
            if next == 0 {
                break;
            }
            need += next;
        }
    }
    Ok(names)
}

/// The highest `GLIBC_` version the library needs; `None` when it needs none (static, musl).
pub fn max_glibc(bytes: &[u8]) -> Result<Option<GlibcVersion>, String> {
    Ok(needed_versions(bytes)?
        .iter()
        .filter_map(|n| {
            n.starts_with("GLIBC_")
                .then(|| GlibcVersion::parse(n))
                .flatten()
        })
        .max())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF file: null section, string table, one verneed section needing `names`.
    fn synthetic(is_64: bool, big_endian: bool, names: &[&str]) -> Vec<u8> {
        let put16 = |v: &mut Vec<u8>, x: u16| {
            v.extend(if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        let put32 = |v: &mut Vec<u8>, x: u32| {
            v.extend(if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        let word = |v: &mut Vec<u8>, x: u64| {
            if is_64 {
                v.extend(if big_endian {
                    x.to_be_bytes()
                } else {
                    x.to_le_bytes()
                })
            } else {
                put32(v, x as u32)
            }
        };
        let ehsize = if is_64 { 64 } else { 52 };
        let shentsize: u16 = if is_64 { 64 } else { 40 };

        // String table: "\0libc.so.6\0" then the names.
        let mut strtab = b"\0libc.so.6\0".to_vec();
        let mut name_offsets = Vec::new();
        for n in names {
            name_offsets.push(strtab.len() as u32);
            strtab.extend(n.as_bytes());
            strtab.push(0);
        }
        // Verneed: one entry with names.len() aux entries right after it.
        let mut vn = Vec::new();
        put16(&mut vn, 1);
        put16(&mut vn, names.len() as u16);
        put32(&mut vn, 1); // vn_file "libc.so.6"
        put32(&mut vn, 16); // vn_aux
        put32(&mut vn, 0); // vn_next
        for (i, off) in name_offsets.iter().enumerate() {
            put32(&mut vn, 0);
            put16(&mut vn, 0);
            put16(&mut vn, 0);
            put32(&mut vn, *off);
            put32(&mut vn, if i + 1 == names.len() { 0 } else { 16 });
        }

        let strtab_off = ehsize as u64;
        let vn_off = strtab_off + strtab.len() as u64;
        let shoff = vn_off + vn.len() as u64;

        let mut f = vec![
            0x7f,
            b'E',
            b'L',
            b'F',
            if is_64 { 2 } else { 1 },
            if big_endian { 2 } else { 1 },
            1,
        ];
        f.resize(16, 0);
        put16(&mut f, 3); // ET_DYN
        put16(&mut f, 62);
        put32(&mut f, 1);
        word(&mut f, 0); // entry
        word(&mut f, 0); // phoff
        word(&mut f, shoff);
        put32(&mut f, 0); // flags
        put16(&mut f, ehsize);
        put16(&mut f, 0);
        put16(&mut f, 0);
        put16(&mut f, shentsize);
        put16(&mut f, 3); // shnum
        put16(&mut f, 1); // shstrndx
        assert_eq!(f.len(), ehsize as usize);
        f.extend(&strtab);
        f.extend(&vn);

        let section = |f: &mut Vec<u8>, kind: u32, offset: u64, size: u64, link: u32, info: u32| {
            let start = f.len();
            put32(f, 0); // name
            put32(f, kind);
            word(f, 0); // flags
            word(f, 0); // addr
            word(f, offset);
            word(f, size);
            put32(f, link);
            put32(f, info);
            word(f, 1); // addralign
            word(f, 0); // entsize
            assert_eq!(f.len() - start, shentsize as usize);
        };
        section(&mut f, 0, 0, 0, 0, 0);
        section(&mut f, 3, strtab_off, strtab.len() as u64, 0, 0);
        section(&mut f, SHT_GNU_VERNEED, vn_off, vn.len() as u64, 1, 1);
        f
    }

    #[test]
    fn versions_compare_numerically() {
        let v = |s| GlibcVersion::parse(s).unwrap();
        assert!(v("2.2.5") < v("2.17"));
        assert!(v("2.17") < v("2.31"));
        assert!(v("GLIBC_2.31") < v("2.34"));
        assert_eq!(v("2.2.5").to_string(), "GLIBC_2.2.5");
        assert_eq!(GlibcVersion::parse("GLIBC_PRIVATE"), None);
    }

    #[test]
    fn reads_every_class_and_byte_order() {
        let names = [
            "GLIBC_2.2.5",
            "GLIBC_PRIVATE",
            "GLIBC_2.29",
            "GCC_3.0",
            "GLIBC_2.14",
        ];
        for is_64 in [true, false] {
            for big_endian in [false, true] {
                let elf = synthetic(is_64, big_endian, &names);
                assert_eq!(
                    needed_versions(&elf).unwrap(),
                    names,
                    "64={is_64} be={big_endian}"
                );
                assert_eq!(max_glibc(&elf).unwrap().unwrap().to_string(), "GLIBC_2.29");
            }
        }
    }

    #[test]
    fn no_glibc_versions_is_none() {
        assert_eq!(
            max_glibc(&synthetic(true, false, &["GCC_4.2.0"])).unwrap(),
            None
        );
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        assert!(needed_versions(b"hello").is_err());
        let mut elf = synthetic(true, false, &["GLIBC_2.17"]);
        let len = elf.len();
        elf.truncate(len - 20);
        assert!(needed_versions(&elf).is_err());
    }
}
