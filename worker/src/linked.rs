//! Linked components shared by every loaded function that runs the same bytes.
//!
//! A component deployed by many workflows (a template every tenant starts from, or one
//! function used in two steps) is loaded and linked once per engine: its compiled code
//! is mapped once, its metadata decoded once and its imports checked once, and each
//! function holds the same [`Entry`]. Only the immutable compiled code and its linking
//! are shared: every event still gets a fresh instance in a store of its own. The
//! compiled-code cache on disk is shared by content hash in the same way, so sharing
//! in memory tells a tenant nothing it could not learn before.
//!
//! An entry lives as long as a loaded function holds it: when the last workflow that
//! runs the bytes is removed, the code is unmapped, as before.

use crate::function::Entry;
use faas_workflow::FunctionKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The linked components of one engine that some loaded function holds, by kind and
/// content hash (the kind decides the export an entry was checked for).
#[derive(Default)]
pub(crate) struct SharedEntries {
    entries: Mutex<HashMap<(FunctionKind, String), Weak<Entry>>>,
}

impl SharedEntries {
    /// The entry for `digest` as a function of `kind`, if a loaded function holds one.
    pub(crate) fn get(&self, kind: FunctionKind, digest: &str) -> Option<Arc<Entry>> {
        self.lock()
            .get(&(kind, digest.to_owned()))
            .and_then(Weak::upgrade)
    }

    /// Shares `entry`, just linked, unless a concurrent load of the same bytes shared
    /// one first: then that one is returned and `entry` dropped.
    pub(crate) fn share(&self, kind: FunctionKind, digest: &str, entry: Entry) -> Arc<Entry> {
        let mut entries = self.lock();
        // Entries of removed functions go here rather than on every removal: a deploy
        // is rare, and the map stays as small as the set of components in use.
        entries.retain(|_, weak| weak.strong_count() > 0);
        let key = (kind, digest.to_owned());
        if let Some(existing) = entries.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let entry = Arc::new(entry);
        entries.insert(key, Arc::downgrade(&entry));
        entry
    }

    /// How many shared entries some loaded function still holds.
    pub(crate) fn len(&self) -> usize {
        self.lock()
            .values()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(FunctionKind, String), Weak<Entry>>> {
        // Every change is one map operation, so a poisoned map is still consistent.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
