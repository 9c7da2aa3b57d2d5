mod bernoulli;
mod normal;
mod uniform;

pub use bernoulli::*;
pub use normal::*;
pub use uniform::*;
