//! Resource types held by Elixir: tensors (freed on `deallocate` or garbage collection) and
//! validated programs.

use ex_burn_core::{Error, Program, Result, Tensor};
use std::sync::RwLock;

/// A tensor owned by the BEAM. `deallocate` drops the device memory at once; later use is
/// an `:deallocated` error.
pub struct TensorRes {
    inner: RwLock<Option<Tensor>>,
}

#[rustler::resource_impl]
impl rustler::Resource for TensorRes {}

impl TensorRes {
    /// Wraps a tensor.
    pub fn new(t: Tensor) -> Self {
        TensorRes {
            inner: RwLock::new(Some(t)),
        }
    }

    /// A cheap handle to the tensor (Burn primitives are reference counted).
    pub fn get(&self) -> Result<Tensor> {
        let guard = self
            .inner
            .read()
            .map_err(|_| Error::Execution("tensor lock poisoned".into()))?;
        guard
            .clone()
            .ok_or_else(|| Error::Deallocated("tensor was deallocated and cannot be used".into()))
    }

    /// Frees the tensor; returns whether it was still allocated.
    pub fn free(&self) -> Result<bool> {
        let mut guard = self
            .inner
            .write()
            .map_err(|_| Error::Execution("tensor lock poisoned".into()))?;
        let taken = guard.take();
        drop(guard);
        Ok(match taken {
            Some(t) => {
                ex_burn_core::guard::release(t.device(), t);
                true
            }
            None => false,
        })
    }
}

impl Drop for TensorRes {
    fn drop(&mut self) {
        if let Some(t) = self.inner.get_mut().ok().and_then(|slot| slot.take()) {
            ex_burn_core::guard::release(t.device(), t);
        }
    }
}

/// A validated program, ready to run many times.
pub struct ProgramRes {
    /// The program.
    pub program: Program,
}

#[rustler::resource_impl]
impl rustler::Resource for ProgramRes {}

/// A compiled model. Calls on one model are serialised by the mutex.
pub struct ModelRes {
    inner: std::sync::Mutex<Option<ex_burn_core::train::Model>>,
}

#[rustler::resource_impl]
impl rustler::Resource for ModelRes {}

impl Drop for ModelRes {
    fn drop(&mut self) {
        if let Some(model) = self.inner.get_mut().ok().and_then(|slot| slot.take()) {
            ex_burn_core::guard::release(model.device(), model);
        }
    }
}

impl ModelRes {
    /// Wraps a model.
    pub fn new(m: ex_burn_core::train::Model) -> Self {
        ModelRes {
            inner: std::sync::Mutex::new(Some(m)),
        }
    }

    /// Runs `f` with exclusive access to the model (and to the GPU when it lives on one).
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut ex_burn_core::train::Model) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| Error::Execution("model lock poisoned by an earlier panic".into()))?;
        let model = guard
            .as_mut()
            .ok_or_else(|| Error::Deallocated("model was released".into()))?;
        let device = model.device();
        ex_burn_core::guard::exclusive(device, || f(model))
    }
}
