//! Opaque handles for C.
//!
//! A handle is the address of a `Box<V>` made by [`Registry::insert`]; the registry keeps a
//! clone of `V` keyed by that address. Lookups go through the map and never dereference the
//! caller's pointer, so a null, stale (freed) or foreign pointer is simply "not found"
//! (→ NRT_INVALID_HANDLE) instead of undefined behaviour. The box is reclaimed exactly once,
//! by [`Registry::remove`] / [`Registry::clear`], under the registry lock.

use std::collections::BTreeMap;
use std::sync::Mutex;

use platform::sync::lock;

/// Live handles of one kind.
pub struct Registry<V: Clone> {
    map: Mutex<BTreeMap<usize, V>>,
}

impl<V: Clone> Default for Registry<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> Registry<V> {
    /// An empty registry (usable in a `static`).
    pub const fn new() -> Self {
        Self { map: Mutex::new(BTreeMap::new()) }
    }

    /// Register `v`; the returned pointer is its handle (never null).
    pub fn insert<T>(&self, v: V) -> *mut T {
        // A zero-sized box has no unique address, so it could not serve as a handle.
        const { assert!(std::mem::size_of::<V>() > 0) };
        let p = Box::into_raw(Box::new(v.clone()));
        lock(&self.map).insert(p as usize, v);
        p.cast()
    }

    /// The value behind handle `p`, if `p` is a live handle of this registry.
    pub fn get<T>(&self, p: *const T) -> Option<V> {
        if p.is_null() {
            return None;
        }
        lock(&self.map).get(&(p as usize)).cloned()
    }

    /// Unregister handle `p` and free its box; the value, if `p` was live.
    pub fn remove<T>(&self, p: *const T) -> Option<V> {
        if p.is_null() {
            return None;
        }
        let v = lock(&self.map).remove(&(p as usize))?;
        // SAFETY: `p` was a key of the map, and keys are only ever the addresses returned by
        // `Box::into_raw(Box<V>)` in `insert`; removing the key under the lock guarantees this
        // is the one and only reclaim of that box.
        drop(unsafe { Box::from_raw(p as *mut V) });
        Some(v)
    }

    /// Replace the value behind live handle `p`; false if `p` is not live.
    pub fn replace<T>(&self, p: *const T, v: V) -> bool {
        let mut g = lock(&self.map);
        let Some(slot) = g.get_mut(&(p as usize)) else { return false };
        *slot = v.clone();
        // SAFETY: `p` is a key of the map, so it is the live `Box<V>` made by `insert` and
        // not yet reclaimed (reclaiming removes the key under this lock, which we hold).
        unsafe { *(p as *mut V) = v };
        true
    }

    /// Every live handle (its address) and value.
    pub fn entries(&self) -> Vec<(usize, V)> {
        lock(&self.map).iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Every live value.
    pub fn values(&self) -> Vec<V> {
        lock(&self.map).values().cloned().collect()
    }

    /// Free every handle (nrt_close for models).
    pub fn clear(&self) {
        let all = std::mem::take(&mut *lock(&self.map));
        for (addr, _) in all {
            // SAFETY: as in `remove`: every key is a live `Box<V>` address from `insert`, taken
            // out of the map under the lock, so each box is reclaimed once.
            drop(unsafe { Box::from_raw(addr as *mut V) });
        }
    }

    /// Live handles.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// No live handles.
    pub fn is_empty(&self) -> bool {
        lock(&self.map).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn handles_are_validated_not_dereferenced() {
        let r: Registry<Arc<u32>> = Registry::new();
        let a: *mut u8 = r.insert(Arc::new(7));
        let b: *mut u8 = r.insert(Arc::new(8));
        assert!(!a.is_null() && a != b);
        assert_eq!(r.get(a).as_deref(), Some(&7));
        assert_eq!(r.get(std::ptr::null::<u8>()), None);
        // A foreign pointer is "not found", never read.
        let foreign = 0x1000 as *const u8;
        assert_eq!(r.get(foreign), None);
        assert_eq!(r.remove(foreign), None);
        assert_eq!(r.remove(a).as_deref(), Some(&7));
        // Stale after free.
        assert_eq!(r.get(a), None);
        assert_eq!(r.remove(a), None);
        assert_eq!(r.len(), 1);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.get(b), None);
    }
}
