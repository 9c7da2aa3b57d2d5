//! [`Unshared`]: a model's in-flight gradients, which clones of the model do not get and
//! threads sharing the model never see.

/// Gradients on their way to an update (a split batch's, an accumulation's sum): a clone of
/// the model starts without any. The value is reachable only through `&mut Unshared` or by
/// value (no method takes `&self`), so a `&Unshared` shared between threads gives access to
/// nothing, and the type is `Sync` whatever `T` is (Burn's gradient containers hold
/// `Box<dyn Any + Send>` values, which are not): the replicas of data-parallel training run
/// their passes on threads of their own, with the model shared.
#[derive(Default)]
pub(super) struct Unshared<T: Default>(T);

impl<T: Default> Unshared<T> {
    /// `value`, unshared.
    pub(super) fn new(value: T) -> Self {
        Unshared(value)
    }

    /// The value, to change.
    pub(super) fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }

    /// The value, leaving the default in its place.
    pub(super) fn take(&mut self) -> T {
        std::mem::take(&mut self.0)
    }
}

impl<T: Default> Clone for Unshared<T> {
    fn clone(&self) -> Self {
        Unshared::default()
    }
}

// SAFETY: no `&self` method or field access exists outside this module (the field is private
// and the only `&self` method, `clone`, never reads it), so threads holding `&Unshared<T>`
// cannot reach a `T` together; moving one between threads still needs `T: Send`.
unsafe impl<T: Default + Send> Sync for Unshared<T> {}
