//! Release tooling of ExBurn (no Burn, no Erlang): everything the release workflow does to the
//! built NIF libraries, in one small binary that is tested like the rest of the workspace.
//!
//! | subcommand | what it does |
//! | --- | --- |
//! | `package`  | a built library -> `lib<crate>-v<version>-nif-<nif>-<target>[--<variant>].so.tar.gz`, byte-reproducible |
//! | `checksum` | a folder of tarballs -> `checksum-Elixir.ExBurn.Nif.exs` (rustler_precompiled's format) |
//! | `verify`   | every artifact of the matrix is present, listed and unaltered |
//! | `glibc`    | the highest `GLIBC_x.y` symbol version a library needs |
//! | `inspect`  | a built library fits its target: CPU, format, `nif_init` exported, system libraries only, glibc floor |
//! | `job`      | one matrix job's fields as `KEY=value` lines (for `bin/release-check`) |
//! | `matrix`   | the release matrix (`native/targets.txt`) as GitHub Actions JSON |
#![warn(missing_docs)]

pub mod archive;
pub mod checksum;
pub mod cli;
pub mod elf;
pub mod inspect;
pub mod naming;
pub mod targets;
pub mod verify;
