//! The engine's op tests, one module per op family, in one test binary (so a GPU build
//! carries a single executable). `EX_BURN_TEST_DEVICE=cuda` runs them on `{:cuda, 0}`.

mod common;

mod agreement;
mod attention;
mod binary;
mod control;
mod conv;
mod creation;
mod dot;
mod fold;
mod fusion;
mod hostile;
mod index;
mod linalg;
mod literal;
mod memory;
mod nn;
mod program;
mod reduce;
mod rows;
mod scatter;
mod scheduled;
mod shape;
mod sort;
mod tensor;
mod train;
mod train_math;
mod unary;
mod widening;
mod window;
