//! Resource types held by Elixir: tensors (freed on `deallocate` or garbage collection),
//! validated programs and compiled models.

use crate::held;
use ex_burn_core::train::Model;
use ex_burn_core::{guard, Device, Error, Program, Result, Tensor};
use std::sync::{Mutex, PoisonError, RwLock};

/// The devices a call touches: those of `tensors` and `more` (for `guard::exclusive`).
pub fn devices(tensors: &[Tensor], more: impl IntoIterator<Item = Device>) -> Vec<Device> {
    tensors.iter().map(Tensor::device).chain(more).collect()
}

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
        held::add(t.device(), t.byte_size() as u64);
        TensorRes {
            inner: RwLock::new(Some(t)),
        }
    }

    /// A cheap handle to the tensor (Burn primitives are reference counted).
    pub fn get(&self) -> Result<Tensor> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| Error::Deallocated("tensor was deallocated and cannot be used".into()))
    }

    /// `f` of the tensor, if it is still allocated.
    fn with<T>(&self, f: impl FnOnce(&Tensor) -> T) -> Option<T> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(f)
    }

    /// The tensor's device, if it is still allocated.
    pub fn device(&self) -> Option<Device> {
        self.with(Tensor::device)
    }

    /// The tensor's size in bytes, if it is still allocated.
    pub fn byte_size(&self) -> Option<usize> {
        self.with(Tensor::byte_size)
    }

    /// Frees the tensor (waiting for the GPU when it lives there); returns whether it was
    /// still allocated.
    pub fn free(&self) -> bool {
        let taken = self
            .inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match taken {
            Some(t) => {
                held::remove(t.device(), t.byte_size() as u64);
                guard::release(&[t.device()], t);
                true
            }
            None => false,
        }
    }
}

impl Drop for TensorRes {
    fn drop(&mut self) {
        let slot = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = slot.take() {
            held::remove(t.device(), t.byte_size() as u64);
            guard::release_later(vec![t.device()], t);
        }
    }
}

/// A validated program, ready to run many times.
pub struct ProgramRes {
    /// The program.
    pub program: Program,
    /// How its host runs went: whether it may run on a normal scheduler (see
    /// [`ex_burn_core::quick::Quick`]).
    pub quick: ex_burn_core::quick::Quick,
}

impl ProgramRes {
    /// A handle to `program`, with no runs recorded yet.
    pub fn new(program: Program) -> ProgramRes {
        ProgramRes {
            program,
            quick: ex_burn_core::quick::Quick::default(),
        }
    }
}

#[rustler::resource_impl]
impl rustler::Resource for ProgramRes {}

/// A compiled model. Calls on one model are serialised by the mutex; a panic inside a call
/// restores the model as it was before the call (it is never left poisoned or half-updated).
pub struct ModelRes {
    device: Device,
    inner: Mutex<Option<Model>>,
}

#[rustler::resource_impl]
impl rustler::Resource for ModelRes {}

impl Drop for ModelRes {
    fn drop(&mut self) {
        let slot = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(model) = slot.take() {
            guard::release_later(model.devices(), ModelDrop(Some(model)));
        }
    }
}

/// A model being dropped: Burn's autodiff records of its parameters go after it.
struct ModelDrop(Option<Model>);

impl Drop for ModelDrop {
    fn drop(&mut self) {
        drop(self.0.take());
        ex_burn_core::train::collect_autodiff_garbage();
    }
}

impl ModelRes {
    /// Wraps a model.
    pub fn new(m: Model) -> Self {
        ModelRes {
            device: m.device(),
            inner: Mutex::new(Some(m)),
        }
    }

    /// The device the model lives on (fixed for the resource's lifetime).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Runs `f` with shared access to the model (and exclusive access to the GPUs the model
    /// lives on and the call `touches`: its tensors' devices and any other it moves to).
    pub fn read<T>(&self, touches: &[Device], f: impl FnOnce(&Model) -> Result<T>) -> Result<T> {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let model = guard
            .as_ref()
            .ok_or_else(|| Error::Deallocated("model was released".into()))?;
        let mut on = model.devices();
        on.extend_from_slice(touches);
        guard::exclusive(&on, || f(model))
    }

    /// Runs `f` with exclusive access to the model. When `f` panics, the model is put back as
    /// it was before the call and the panic is returned as an error.
    /// `touches` as for [`ModelRes::read`].
    pub fn update<T>(
        &self,
        touches: &[Device],
        f: impl FnOnce(&mut Model) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let model = guard
            .as_mut()
            .ok_or_else(|| Error::Deallocated("model was released".into()))?;
        let mut on = model.devices();
        on.extend_from_slice(touches);
        guard::restoring(model, |m| guard::exclusive(&on, || f(m)))
    }
}
