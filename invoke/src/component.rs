//! A function's component as the gateway and the workers hold it: its bytes, hashed
//! at most once, shared by every holder ([`Component`]); and the [`ComponentPool`]
//! through which a gateway keeps one copy of each component however many workflows
//! name it.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Component bytes by function name: what a deploy uploads and a worker loads.
pub type Components = BTreeMap<String, Component>;

/// A component's bytes and their SHA-256. Cloning it shares the bytes, so a deploy
/// hands the same copy to the registry, the state at rest and every worker in the
/// process, and the SHA-256 is taken once, when first asked for (`faas deploy`, which
/// only uploads the bytes, never takes it).
#[derive(Clone)]
pub struct Component(Arc<Hashed>);

struct Hashed {
    bytes: Vec<u8>,
    sha256: OnceLock<([u8; 32], String)>,
}

impl Component {
    /// Takes `bytes` (no copy).
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Arc::new(Hashed {
            bytes,
            sha256: OnceLock::new(),
        }))
    }

    /// The SHA-256 of the bytes.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.hashed().0
    }

    /// The SHA-256 of the bytes, in hex: the name the component is stored and
    /// cached under.
    pub fn digest(&self) -> &str {
        &self.hashed().1
    }

    fn hashed(&self) -> &([u8; 32], String) {
        self.0.sha256.get_or_init(|| {
            let sha256: [u8; 32] = Sha256::digest(&self.0.bytes).into();
            (sha256, hex::encode(sha256))
        })
    }
}

impl Deref for Component {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// So that a `bytes::Bytes` (a request body) can be made of one without a copy.
impl AsRef<[u8]> for Component {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// Equal when their bytes are: SHA-256 tells them apart.
impl PartialEq for Component {
    fn eq(&self, other: &Self) -> bool {
        self.sha256() == other.sha256()
    }
}

impl Eq for Component {}

impl fmt::Debug for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Component")
            .field("digest", &self.digest())
            .field("len", &self.0.bytes.len())
            .finish()
    }
}

/// The bytes `components` take, each distinct component (by SHA-256) counted once,
/// as a [`ComponentPool`] holds them.
pub fn distinct_bytes<'a>(components: impl IntoIterator<Item = &'a Component>) -> u64 {
    let mut seen = std::collections::HashSet::new();
    components
        .into_iter()
        .filter(|component| seen.insert(component.sha256()))
        .map(|component| component.len() as u64)
        .sum()
}

/// The components alive in a process by SHA-256, so that two workflows uploading the
/// same component (every `faas new` hello, a shared step) hold one copy of its bytes.
/// It keeps none alive itself: a component whose last holder is gone is forgotten.
#[derive(Default)]
pub struct ComponentPool {
    alive: Mutex<Alive>,
}

#[derive(Default)]
struct Alive {
    by_digest: HashMap<String, Weak<Hashed>>,
    /// The size at which the forgotten entries are swept out, so that sweeping costs
    /// O(1) per component shared, amortized.
    sweep_at: usize,
}

impl ComponentPool {
    /// The pool's copy of `component`: the one already alive with the same SHA-256,
    /// or `component` itself, which becomes the pool's.
    pub fn share(&self, component: Component) -> Component {
        let mut alive = self.lock();
        if let Some(shared) = alive
            .by_digest
            .get(component.digest())
            .and_then(Weak::upgrade)
        {
            return Component(shared);
        }
        if alive.by_digest.len() >= alive.sweep_at {
            alive.by_digest.retain(|_, entry| entry.strong_count() > 0);
            alive.sweep_at = (alive.by_digest.len() * 2).max(64);
        }
        alive
            .by_digest
            .insert(component.digest().to_owned(), Arc::downgrade(&component.0));
        component
    }

    /// [`Self::share`] for every component of an upload.
    pub fn share_all(&self, components: Components) -> Components {
        components
            .into_iter()
            .map(|(function, component)| (function, self.share(component)))
            .collect()
    }

    /// The component alive with this [`Component::digest`], if any: what a gateway
    /// need not read from the shared state again.
    pub fn get(&self, digest: &str) -> Option<Component> {
        let alive = self.lock();
        alive
            .by_digest
            .get(digest)
            .and_then(Weak::upgrade)
            .map(Component)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Alive> {
        // Each operation leaves the map whole: a poisoned lock is still consistent.
        self.alive.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_shared_through_the_pool_are_one_copy() {
        let pool = ComponentPool::default();
        let first = pool.share(Component::new(b"\0asm one".to_vec()));
        let second = pool.share(Component::new(b"\0asm one".to_vec()));
        let other = pool.share(Component::new(b"\0asm two".to_vec()));
        assert!(std::ptr::eq(first.as_ptr(), second.as_ptr()));
        assert!(!std::ptr::eq(first.as_ptr(), other.as_ptr()));
        assert_eq!(first.digest(), hex::encode(Sha256::digest(b"\0asm one")));
        assert_eq!(
            pool.get(first.digest()).map(|c| c.as_ptr()),
            Some(first.as_ptr())
        );
        assert_eq!(distinct_bytes([&first, &second, &other]), 16);
    }

    #[test]
    fn a_component_no_one_holds_is_forgotten() {
        let pool = ComponentPool::default();
        let digest = pool.share(Component::new(vec![7; 10])).digest().to_owned();
        assert!(pool.get(&digest).is_none());
        // Sweeps keep the map to the components alive, however many came and went.
        let kept = pool.share(Component::new(vec![1]));
        for n in 0..1_000u32 {
            pool.share(Component::new(n.to_le_bytes().to_vec()));
        }
        assert!(pool.lock().by_digest.len() <= 128);
        assert!(pool.get(kept.digest()).is_some());
    }
}
