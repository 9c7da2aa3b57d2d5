//! Safe writes and reads of files.
//!
//! A save writes a temporary file in the target's directory, flushes it and renames it over
//! the target, so a crash or kill mid-save leaves the previous file intact and concurrent
//! saves never share a temporary. Only regular files are written or read: a target that
//! exists and is anything else (a device node, a FIFO, a directory, a socket) is refused
//! before anything is created; a symbolic link is followed and the regular file it points to
//! is replaced (a link to nothing is refused). On Linux the temporary is an unnamed file
//! (`O_TMPFILE`), so a kill mid-write leaves nothing behind; elsewhere (or where the file
//! system lacks it) it is created exclusively under an unpredictable name. Only files this
//! process created are ever removed.

use crate::{Error, Result};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The marker in temporary names (`.<file>.exburn-tmp.<random>`).
const MARK: &str = ".exburn-tmp.";

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename over the target (or the
/// regular file a symbolic link at `path` points to), fsync of the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let target = writable_target(path)?;
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let name = target
        .file_name()
        .ok_or_else(|| Error::Argument(format!("{} is not a file path", path.display())))?
        .to_string_lossy()
        .into_owned();
    let mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
    let io = |e: std::io::Error| Error::Io(format!("cannot write {}: {e}", path.display()));

    // the data, in a file only this call knows
    let (mut file, named) = temporary(&dir, &name).map_err(io)?;
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            file.set_permissions(mode)?;
        }
        file.sync_all()
    })();
    let placed = written.and_then(|()| match &named {
        Some(tmp) => std::fs::rename(tmp, &target),
        None => link_and_rename(&file, &dir, &name, &target),
    });
    if placed.is_err() {
        if let Some(tmp) = &named {
            let _ = std::fs::remove_file(tmp);
        }
    }
    placed.map_err(io)?;
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The regular file a save to `path` replaces (or creates): `path` itself, or what a symbolic
/// link there points to. Anything else that exists there is refused (kind `argument`).
fn writable_target(path: &Path) -> Result<PathBuf> {
    let refuse = |what: &str| {
        Err(Error::Argument(format!(
            "cannot save to {}: {what} (only regular files are written)",
            path.display()
        )))
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path.to_path_buf()),
        Err(e) => Err(Error::Io(format!("cannot write {}: {e}", path.display()))),
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(real) if real.is_file() => Ok(real),
            Ok(_) => refuse("the symbolic link points to something that is not a regular file"),
            Err(_) => refuse("the symbolic link points to nothing"),
        },
        Ok(m) if m.is_file() => Ok(path.to_path_buf()),
        Ok(m) if m.is_dir() => refuse("it is a directory"),
        Ok(_) => refuse("it is a device, FIFO or socket"),
    }
}

/// A new file in `dir` for a save to `name`: unnamed where the system can (`None`), else
/// created exclusively under an unpredictable name (`Some(path)`).
fn temporary(dir: &Path, name: &str) -> std::io::Result<(File, Option<PathBuf>)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(f) = OpenOptions::new()
            .write(true)
            .mode(0o666)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
        {
            return Ok((f, None));
        }
    }
    let mut last = None;
    for _ in 0..8 {
        let tmp = dir.join(format!(".{name}{MARK}{:016x}", random()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((f, Some(tmp))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary name was free")))
}

/// Gives the unnamed `file` a fresh unpredictable name in `dir`, then renames it over
/// `target` (the name exists only between the two calls).
#[cfg(target_os = "linux")]
fn link_and_rename(file: &File, dir: &Path, name: &str, target: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    for _ in 0..8 {
        let tmp = dir.join(format!(".{name}{MARK}{:016x}", random()));
        let to = CString::new(tmp.as_os_str().as_bytes())?;
        // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                continue;
            }
            return Err(e);
        }
        return std::fs::rename(&tmp, target).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        });
    }
    Err(std::io::Error::other("no temporary name was free"))
}

#[cfg(not(target_os = "linux"))]
fn link_and_rename(_file: &File, _dir: &Path, _name: &str, _target: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "unnamed temporaries exist only on Linux",
    ))
}

/// 64 bits no other process can predict (std's per-process random hash keys, a counter and
/// the time).
fn random() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Reads the regular file at `path` (following symbolic links). Anything else (a FIFO, a
/// device, a directory) is refused before it is read, and the file is opened without blocking
/// and checked again once open, so a FIFO swapped in meanwhile cannot stall the caller. Its
/// size is checked against the memory guard before reading.
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let shown = path.display();
    let refuse = |what: &str| Err(Error::Argument(format!("cannot read {shown}: {what}")));
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        Ok(m) if m.is_dir() => return refuse("it is a directory"),
        Ok(_) => return refuse("it is not a regular file (a device, FIFO or socket)"),
        Err(e) => return Err(Error::Io(format!("cannot read {shown}: {e}"))),
    }
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let io = |e: std::io::Error| Error::Io(format!("cannot read {shown}: {e}"));
    let file = options.open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return refuse("it is not a regular file");
    }
    let len = meta.len();
    let _read = crate::memory::reserve(crate::Device::Cpu, len as u128, &|| {
        format!("reading {shown}")
    })?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| Error::OutOfMemory(format!("cannot hold the {len} bytes of {shown}")))?;
    // a file that grows while it is read is read as far as it was when checked
    file.take(len).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("exburn-atomic-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_save_leaves_only_the_target_and_never_touches_look_alikes() {
        let dir = scratch("lookalike");
        let target = dir.join("m.safetensors");
        // a user's file named like one of our temporaries, of a process that does not exist
        let lookalike = dir.join(format!(".m.safetensors{MARK}{}.3", 0x7fff_fff0u32));
        std::fs::write(&lookalike, b"mine").unwrap();
        write_atomic(&target, b"new").unwrap();
        write_atomic(&target, b"newer").unwrap();
        assert_eq!(std::fs::read(&lookalike).unwrap(), b"mine");
        assert_eq!(std::fs::read(&target).unwrap(), b"newer");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_and_links_write_their_target() {
        use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
        let dir = scratch("special");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        for p in [fifo.as_path(), Path::new("/dev/null"), dir.as_path()] {
            let e = write_atomic(p, b"x").unwrap_err();
            assert!(matches!(e, Error::Argument(_)), "{p:?}: {e}");
            let e = read_regular(p).unwrap_err();
            assert!(matches!(e, Error::Argument(_)), "{p:?}: {e}");
        }
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());

        let real = dir.join("real");
        std::fs::write(&real, b"old").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.join("link");
        symlink(&real, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(read_regular(&link).unwrap(), b"new");

        let dangling = dir.join("dangling");
        symlink(dir.join("nothing"), &dangling).unwrap();
        assert!(matches!(
            write_atomic(&dangling, b"x"),
            Err(Error::Argument(_))
        ));
        assert!(!dir.join("nothing").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
