//! Native training: model specs built into Burn modules, losses, optimizers, the training
//! loop with Burn autodiff (one call per step or per epoch), and checkpoints.

pub mod adam;
pub mod checkpoint;
pub mod loss;
pub mod model;
pub mod net;
pub mod optim;
pub mod spec;
mod tally;

pub use model::{
    collect_autodiff_garbage, CompileOptions, Data, EpochOptions, EvalOptions, Model, OnNonFinite,
    Stats, Step, StepOptions, StepProfile,
};
pub use spec::ModelSpec;
