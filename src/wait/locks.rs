//! Lock inference: whether a thread's futex wait is on a lock that one of
//! its Python frames' locals refers to, by facts of the lock's memory.
//! Pure.

/// Whether a futex wait at `futex` is on the lock whose first word after
/// the object header is at `inner_addr` and holds `inner`. Facts checked,
/// whatever the version: up to 3.12 the word points at the lock's semaphore,
/// whose futex is inside it; from 3.13 the word is (or, for an RLock, points
/// at) a `PyMutex`, and a waiter sleeps on a semaphore in its parking-lot
/// wait entry, which records that address in a word just before it
/// (`before` holds the words preceding the futex).
pub(crate) fn futex_is_lock(futex: u64, inner: u64, inner_addr: u64, before: &[u64]) -> bool {
    const SEM_SIZE: u64 = 32;
    (inner > 0x1000 && futex >= inner && futex < inner.saturating_add(SEM_SIZE))
        || futex == inner_addr
        || before.contains(&inner_addr)
        || (inner > 0x1000 && before.contains(&inner))
}

/// A lock type's name as users know it.
pub(crate) fn lock_kind(type_name: &str) -> &str {
    match type_name {
        "thread.lock" | "_thread.lock" | "lock" => "threading.Lock",
        "_thread.RLock" | "RLock" => "threading.RLock",
        "Condition" => "threading.Condition",
        t => t,
    }
}
