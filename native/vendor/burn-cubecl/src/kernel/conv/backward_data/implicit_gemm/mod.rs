pub mod launch;
pub use launch::*;
