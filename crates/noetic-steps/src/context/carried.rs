//! Values of higher modules that the context carries without knowing their types.

use std::any::Any;
use std::sync::Arc;

use crate::sync::CachePadded;

/// A value a higher module keeps in the context (the memory layers in scope are one): opaque here, set and read
/// back — typed — by the module that owns it, so the context imports nothing from above.
#[derive(Clone, Default)]
pub struct Carried(Option<Arc<dyn Any + Send + Sync>>);

impl Carried {
    /// Carries `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Carried(Some(Arc::new(value)))
    }

    /// Carries `value` alone on its cache lines ([`CachePadded`]): for the runtime's per-thread copies, whose reference
    /// counts different threads write at once.
    pub fn padded<T: Any + Send + Sync>(value: T) -> Self {
        Carried(Some(Arc::new(CachePadded::new(value))))
    }

    /// True when both carry the same value (or both none).
    pub(crate) fn is(&self, other: &Carried) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }

    /// The value, if one of type `T` is carried.
    pub fn get<T: Any>(&self) -> Option<&T> {
        let value = self.0.as_deref()?;
        value.downcast_ref::<T>().or_else(|| value.downcast_ref::<CachePadded<T>>().map(|p| &**p))
    }
}
