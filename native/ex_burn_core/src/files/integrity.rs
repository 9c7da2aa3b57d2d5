//! A SHA-256 over every byte of a safetensors file (header, metadata, tensor data), stored in
//! the file's own metadata under [`KEY`]. The digest is computed with its own value zeroed and
//! then written in place, so any changed byte (a flip in the spec, the optimizer state, the
//! padding or the digest itself) is detected.

use crate::{Error, Result};
use sha2::{Digest, Sha256};

/// The metadata key of the integrity code.
pub const KEY: &str = "ex_burn_integrity";

const PREFIX: &str = "sha256:";
const HEX: usize = 64;

/// The placeholder value written before sealing.
pub fn placeholder() -> String {
    format!("{PREFIX}{}", "0".repeat(HEX))
}

/// Where the digest's hex digits sit in `bytes`: inside the JSON header, right after
/// `"ex_burn_integrity":"sha256:` (quotes inside other JSON strings are escaped, so this
/// sequence cannot appear elsewhere).
fn locate(bytes: &[u8]) -> Option<usize> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = usize::try_from(n).ok()?.checked_add(8)?;
    let header = bytes.get(8..end)?;
    let needle = format!("\"{KEY}\":\"{PREFIX}");
    let at = header
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?;
    let start = 8 + at + needle.len();
    (bytes.len() >= start + HEX).then_some(start)
}

fn digest(bytes: &[u8], at: usize) -> String {
    let mut h = Sha256::new();
    h.update(&bytes[..at]);
    h.update([b'0'; HEX]);
    h.update(&bytes[at + HEX..]);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the digest of `bytes` (serialised with [`placeholder`] under [`KEY`]) in place.
pub fn seal(bytes: &mut [u8]) -> Result<()> {
    let at = locate(bytes)
        .ok_or_else(|| Error::Execution("the integrity placeholder is missing".into()))?;
    let d = digest(bytes, at);
    bytes[at..at + HEX].copy_from_slice(d.as_bytes());
    Ok(())
}

/// Whether `bytes` carry an integrity code; when they do, checks it.
pub fn verify(bytes: &[u8]) -> Result<bool> {
    let Some(at) = locate(bytes) else {
        return Ok(false);
    };
    let stored = &bytes[at..at + HEX];
    if stored != digest(bytes, at).as_bytes() {
        return Err(Error::Corrupt(
            "integrity check failed (SHA-256 of the file does not match the one it stores): the \
             file was altered or damaged"
                .into(),
        ));
    }
    Ok(true)
}
