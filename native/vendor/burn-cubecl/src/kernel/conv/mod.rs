mod backward_data;
mod backward_weight;
mod base;
mod conv_transpose2d;
mod conv_transpose3d;
mod deform_conv2d;
mod deform_conv_transpose2d;
mod direct;
mod forward;
mod im2col;

mod tune_key;

pub(crate) use backward_data::*;
pub(crate) use conv_transpose2d::*;
pub(crate) use conv_transpose3d::*;
pub(crate) use deform_conv_transpose2d::*;
pub(crate) use deform_conv2d::*;
pub(crate) use direct::*;
pub(crate) use im2col::*;

pub use base::*;
pub use conv_transpose2d::{ConvTranspose2dStrategy, conv_transpose2d};

pub(crate) use tune_key::*;
