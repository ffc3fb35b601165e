//! Small synchronisation helpers shared by every layer.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning: shoal's shared tables stay consistent between statements, so a panic
/// in a user callback must not take the whole process's messaging down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
