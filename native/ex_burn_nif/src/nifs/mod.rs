//! The NIF functions, one file per concern.

mod device;
mod eval;
mod tensor;
mod train;

/// Declares one NIF body under three scheduler flavours: `$name` (normal), `$cpu` (dirty CPU)
/// and `$io` (dirty IO). The Elixir side picks one by device and size.
macro_rules! scheduled {
    ($body:path, $name:ident, $cpu:ident, $io:ident, ($($arg:ident : $ty:ident $(<$lt:lifetime>)?),*)) => {
        #[rustler::nif]
        fn $name<'a>(env: rustler::Env<'a>, $($arg: $ty $(<$lt>)?),*) -> rustler::Term<'a> {
            $body(env, $($arg),*)
        }

        #[rustler::nif(schedule = "DirtyCpu")]
        fn $cpu<'a>(env: rustler::Env<'a>, $($arg: $ty $(<$lt>)?),*) -> rustler::Term<'a> {
            $body(env, $($arg),*)
        }

        #[rustler::nif(schedule = "DirtyIo")]
        fn $io<'a>(env: rustler::Env<'a>, $($arg: $ty $(<$lt>)?),*) -> rustler::Term<'a> {
            $body(env, $($arg),*)
        }
    };
}

pub(crate) use scheduled;

/// Argument types of scheduled NIFs, as single identifiers (the macro above needs them so).
pub(crate) type Refs = Vec<rustler::ResourceArc<crate::resource::TensorRes>>;
/// A tensor handle.
pub(crate) type Res = rustler::ResourceArc<crate::resource::TensorRes>;
/// A program handle.
pub(crate) type Prog = rustler::ResourceArc<crate::resource::ProgramRes>;
/// An optional element limit.
pub(crate) type Limit = Option<usize>;
