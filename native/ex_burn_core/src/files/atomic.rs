//! Atomic writes: each save writes its own temporary file (named by process and sequence
//! number) in the target's directory, flushes it and renames it over the target, so a crash
//! or kill mid-save leaves the previous file intact and concurrent saves never share a
//! temporary. A failed save removes its temporary; temporaries left by killed processes are
//! removed by the next save to the same path.

use crate::{Error, Result};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SEQ: AtomicU64 = AtomicU64::new(0);
/// Temporaries of this process being written now.
static IN_FLIGHT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// The marker in temporary names (`.<file>.exburn-tmp.<pid>.<seq>`).
const MARK: &str = ".exburn-tmp.";

fn with_in_flight<T>(f: impl FnOnce(&mut HashSet<PathBuf>) -> T) -> T {
    let mut g = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashSet::new))
}

/// Writes `bytes` to `path` atomically (own temporary file, fsync, rename, fsync of the folder).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| Error::Io(format!("{} is not a file path", path.display())))?
        .to_string_lossy()
        .into_owned();
    remove_stale(dir, &name);
    let tmp = dir.join(format!(
        ".{name}{MARK}{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    with_in_flight(|s| s.insert(tmp.clone()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    let result = write();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    with_in_flight(|s| s.remove(&tmp));
    result.map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))
}

/// Removes temporaries of saves to `name` whose writer is gone (killed processes, or an
/// earlier ExBurn's `.tmp-<pid>` names).
fn remove_stale(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let ours = std::process::id();
    let new_prefix = format!(".{name}{MARK}");
    let old_prefix = format!(".{name}.tmp-");
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let rest = file
            .strip_prefix(&new_prefix)
            .or_else(|| file.strip_prefix(&old_prefix));
        let Some(pid) = rest.and_then(|r| r.split('.').next()?.parse::<u32>().ok()) else {
            continue;
        };
        let path = e.path();
        let stale = if pid == ours {
            !with_in_flight(|s| s.contains(&path))
        } else {
            !alive(pid)
        };
        if stale {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether process `pid` exists (on systems without a cheap check, assume it does).
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn alive(_pid: u32) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_writers_temporary_is_removed_by_the_next_save() {
        let dir = std::env::temp_dir().join(format!("exburn-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("m.safetensors");
        // pid 0x7fff_fff0 does not exist on any test machine.
        let stale = dir.join(format!(".m.safetensors{MARK}{}.3", 0x7fff_fff0u32));
        std::fs::write(&stale, b"torn").unwrap();
        write_atomic(&target, b"new").unwrap();
        assert!(!stale.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the target remains");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
