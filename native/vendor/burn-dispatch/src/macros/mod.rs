//! The dispatch macros, by concern (the published crate has them in one file, `macros.rs`).
//! Each file is a run of that file's macros, unchanged and in its order.

#[macro_use]
mod backends;
#[macro_use]
mod device;
#[macro_use]
mod creation;
#[macro_use]
mod unary;
#[macro_use]
mod binary;
#[macro_use]
mod multi;
#[macro_use]
mod vec;
#[macro_use]
mod transaction;
