//! Values of higher modules that the context carries without knowing their types.

use std::any::Any;
use std::sync::Arc;

/// A value a higher module keeps in the context (the memory layers in scope are one): opaque here, set and read
/// back — typed — by the module that owns it, so the context imports nothing from above.
#[derive(Clone, Default)]
pub(crate) struct Carried(Option<Arc<dyn Any + Send + Sync>>);

impl Carried {
    /// Carries `value`.
    pub(crate) fn new<T: Any + Send + Sync>(value: T) -> Self {
        Carried(Some(Arc::new(value)))
    }

    /// The value, if one of type `T` is carried.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref().and_then(|v| v.downcast_ref::<T>())
    }
}
