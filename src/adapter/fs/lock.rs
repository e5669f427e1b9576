//! Process-wide exclusive locks for mutations, keyed by directory entry: the parent
//! directory's (device, inode) and the entry's name.
//!
//! A write or edit holds the lock of its target from the first look at the file (existence,
//! `expectedDigest`) to the rename, so two mutations of one file in this process never
//! interleave: the digest check and the replacement are atomic with respect to each other.
//! The key names the directory entry being replaced (what a rename acts on) by the identity
//! of the directory that holds it, never by a root-relative path: two grants whose roots
//! nest (`R` and `R/sub`) name `R/sub/f` as `sub/f` and `f`, and must share one lock (issue
//! 25, N3). Entries are removed
//! when no one holds or waits for them, so the table stays as small as the set of paths
//! being written right now.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};

/// The key: the parent directory's `(device, inode)` and the entry's name in it.
type Key = ((u64, u64), String);

#[derive(Default)]
struct Cell {
    held: Mutex<bool>,
    released: Condvar,
}

static TABLE: LazyLock<Mutex<HashMap<Key, Arc<Cell>>>> = LazyLock::new(Default::default);

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these short critical sections leaves consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A held lock; released on drop.
pub(super) struct PathLock {
    key: Key,
    cell: Arc<Cell>,
}

impl PathLock {
    /// Block until the lock of the entry `name` in the directory `dir_id` is ours.
    pub(super) fn acquire(dir_id: (u64, u64), name: String) -> PathLock {
        let key = (dir_id, name);
        let cell = Arc::clone(relock(&TABLE).entry(key.clone()).or_default());
        let mut held = relock(&cell.held);
        while *held {
            held = cell.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        *held = true;
        drop(held);
        PathLock { key, cell }
    }
}

impl Drop for PathLock {
    fn drop(&mut self) {
        *relock(&self.cell.held) = false;
        self.cell.released.notify_one();
        let mut table = relock(&TABLE);
        // Every clone of the cell is taken under the table lock, so a count of two (the
        // table's and ours) means no one else holds or waits for it.
        if Arc::strong_count(&self.cell) == 2 {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn excludes_and_cleans_up() {
        let id = (u64::MAX, 7);
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let inside = Arc::clone(&inside);
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _l = PathLock::acquire(id, "a/b".into());
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        std::hint::spin_loop();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let _other = PathLock::acquire(id, "c".into());
        assert!(relock(&TABLE).keys().all(|(r, p)| *r != id || p == "c"));
    }
}
