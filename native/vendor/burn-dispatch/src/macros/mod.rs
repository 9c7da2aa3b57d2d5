//! The dispatch macros, by concern (one file before ExBurn split it; content unchanged). Order
//! matters: `macro_rules!` are in scope textually, and later files use earlier macros.

#[macro_use]
mod registry;
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
mod collection;
