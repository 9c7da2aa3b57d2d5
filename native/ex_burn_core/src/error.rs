//! The one error type of the engine. Each variant has a stable `kind` that the NIF layer
//! turns into `{:error, {kind, message}}` and Elixir into `ExBurn.Error.kind`.

use thiserror::Error;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ExBurn's engine.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// Shapes that do not fit together (wrong rank, mismatched dimensions, byte sizes).
    #[error("{0}")]
    Shape(String),
    /// A dtype that is valid but wrong for this operation (e.g. bitwise ops on floats).
    #[error("{0}")]
    Dtype(String),
    /// A dtype that Burn cannot hold at all (complex, f8, sub-byte integers).
    #[error("{0}")]
    UnsupportedDtype(String),
    /// An operation or option combination this engine does not implement.
    #[error("{0}")]
    Unsupported(String),
    /// A device whose backend is not compiled into this library.
    #[error("{0}")]
    DeviceUnavailable(String),
    /// A device that exists in this build but failed (no driver, bad index, missing NVRTC).
    #[error("{0}")]
    Device(String),
    /// A tensor that was freed with `deallocate` and used again.
    #[error("{0}")]
    Deallocated(String),
    /// A malformed argument (bad axis, negative size, wrong arity).
    #[error("{0}")]
    Argument(String),
    /// A file-system error.
    #[error("{0}")]
    Io(String),
    /// A truncated, corrupt or foreign file.
    #[error("{0}")]
    Corrupt(String),
    /// A request larger than the device can hold (or than the configured limit), refused
    /// before allocating; also a backend allocation failure.
    #[error("{0}")]
    OutOfMemory(String),
    /// A training loss that is NaN or infinite, detected before the optimizer step.
    #[error("{0}")]
    NonFinite(String),
    /// A backend failure while running (kernel failure).
    #[error("{0}")]
    Execution(String),
    /// A panic inside Burn or the engine, caught before it reached the VM.
    #[error("{0}")]
    Panic(String),
    /// The work was stopped: its caller exited or its time ran out (`cancel`).
    #[error("{0}")]
    Cancelled(String),
}

impl Error {
    /// The stable kind of the error, as an atom name on the Elixir side.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Shape(_) => "shape",
            Error::Dtype(_) => "dtype",
            Error::UnsupportedDtype(_) => "unsupported_dtype",
            Error::Unsupported(_) => "unsupported",
            Error::DeviceUnavailable(_) => "device_unavailable",
            Error::Device(_) => "device",
            Error::Deallocated(_) => "deallocated",
            Error::Argument(_) => "argument",
            Error::Io(_) => "io",
            Error::Corrupt(_) => "corrupt",
            Error::OutOfMemory(_) => "out_of_memory",
            Error::NonFinite(_) => "non_finite",
            Error::Execution(_) => "execution",
            Error::Panic(_) => "panic",
            Error::Cancelled(_) => "cancelled",
        }
    }

    /// Prefixes the message with the name of the operation that failed.
    pub fn in_op(self, op: &str) -> Error {
        let wrap = |m: String| {
            if m.starts_with(op) {
                m
            } else {
                format!("{op}: {m}")
            }
        };
        match self {
            Error::Shape(m) => Error::Shape(wrap(m)),
            Error::Dtype(m) => Error::Dtype(wrap(m)),
            Error::UnsupportedDtype(m) => Error::UnsupportedDtype(wrap(m)),
            Error::Unsupported(m) => Error::Unsupported(wrap(m)),
            Error::Argument(m) => Error::Argument(wrap(m)),
            Error::Execution(m) => Error::Execution(wrap(m)),
            Error::OutOfMemory(m) => Error::OutOfMemory(wrap(m)),
            Error::Panic(m) => Error::Panic(wrap(m)),
            other => other,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// Returns `Err(Error::Shape(..))` built with `format!` syntax.
#[macro_export]
macro_rules! shape_err {
    ($($arg:tt)*) => { Err($crate::Error::Shape(format!($($arg)*))) };
}

/// Returns `Err(Error::Argument(..))` built with `format!` syntax.
#[macro_export]
macro_rules! arg_err {
    ($($arg:tt)*) => { Err($crate::Error::Argument(format!($($arg)*))) };
}
