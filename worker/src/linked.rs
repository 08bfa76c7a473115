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
//!
//! Where a component's instances run can change once after it is linked: a component
//! whose events keep faulting pages in moves to an engine that resets slots whole
//! (`placement.rs`). Every function that shares it moves with it; an event in flight
//! keeps the entry it started with.

use crate::function::Entry;
use crate::placement::Placement;
use faas_workflow::FunctionKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

/// A component linked for the functions that run its bytes: the entry their events
/// start instances from, and how its slots are to be reset.
pub(crate) struct Linked {
    entry: RwLock<Arc<Entry>>,
    /// Whether it stays on its engine or moves to one that resets slots whole.
    pub(crate) placement: Placement,
}

impl Linked {
    /// The entry the next event starts its instance from.
    pub(crate) fn entry(&self) -> Arc<Entry> {
        self.entry
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Starts every later event from `entry` (the same component, linked on another
    /// engine).
    pub(crate) fn replace(&self, entry: Entry) {
        *self
            .entry
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(entry);
    }
}

/// The linked components of one engine that some loaded function holds, by kind and
/// content hash (the kind decides the export an entry was checked for).
#[derive(Default)]
pub(crate) struct SharedEntries {
    entries: Mutex<HashMap<(FunctionKind, String), Weak<Linked>>>,
}

impl SharedEntries {
    /// The entry for `digest` as a function of `kind`, if a loaded function holds one.
    pub(crate) fn get(&self, kind: FunctionKind, digest: &str) -> Option<Arc<Linked>> {
        self.lock()
            .get(&(kind, digest.to_owned()))
            .and_then(Weak::upgrade)
    }

    /// Shares `entry`, just linked and placed as `placement` says, unless a concurrent
    /// load of the same bytes shared one first: then that one is returned and `entry`
    /// dropped.
    pub(crate) fn share(
        &self,
        kind: FunctionKind,
        digest: &str,
        entry: Entry,
        placement: Placement,
    ) -> Arc<Linked> {
        let mut entries = self.lock();
        // Entries of removed functions go here rather than on every removal: a deploy
        // is rare, and the map stays as small as the set of components in use.
        entries.retain(|_, weak| weak.strong_count() > 0);
        let key = (kind, digest.to_owned());
        if let Some(existing) = entries.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let linked = Arc::new(Linked {
            entry: RwLock::new(Arc::new(entry)),
            placement,
        });
        entries.insert(key, Arc::downgrade(&linked));
        linked
    }

    /// How many shared entries some loaded function still holds.
    pub(crate) fn len(&self) -> usize {
        self.lock()
            .values()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(FunctionKind, String), Weak<Linked>>> {
        // Every change is one map operation, so a poisoned map is still consistent.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
