//! Ahead-of-time compilation with an on-disk cache.
//!
//! An artifact is named by the SHA-256 of the component's bytes, inside a directory
//! named by the engine's compatibility hash: a new Wasmtime version or engine setting
//! never loads an old artifact, and the same component deployed twice (or by two
//! workflows) is compiled once. A worker's two engines (with and without fuel
//! metering) differ in their hash, so each has its own directory under the same root.
//!
//! The cache is bounded ([`ComponentCache::with_max_bytes`]): after each store, and
//! when a worker starts ([`ComponentCache::tidy`]), the least recently used artifacts
//! of the whole root (every engine's directory, so those of an older Wasmtime go
//! first) are deleted until it fits. A load refreshes its artifact's modification
//! time, which is what "recently used" means here (access times are often not kept).
//! Never deleted: an artifact this process is loading, and one used in the last
//! [`RECENT`] (another process sharing the directory may be loading it); so a burst of
//! compiles may take the cache over its size for a moment. A process that still loses
//! an artifact to another's pruning compiles it again rather than failing.
//!
//! An artifact is written to a temporary file in its directory, locked (`flock`) while
//! it is written, and renamed into place, so readers never see half a file. A failed
//! write (a full disk) removes its temporary file; one left by a crashed process
//! (unlocked, and older than [`RECENT`]) is removed by [`ComponentCache::tidy`].

use faas_invoke::LoadError;
use std::collections::BTreeMap;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The default [`ComponentCache::with_max_bytes`]: 2 GiB. A compiled component takes
/// one to a few times its size in `.wasm` (1-20 MiB for typical functions), so this
/// holds hundreds of them: every function a worker runs, and then some.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;

/// How long an artifact counts as in use after it was stored or loaded, and how old a
/// temporary file must be before it can be an abandoned one: a load opens its artifact
/// within milliseconds, a write keeps its temporary file's time fresh.
pub const RECENT: Duration = Duration::from_secs(10);

/// The extension of artifacts.
const ARTIFACT_EXTENSION: &str = "cwasm";
/// How temporary files end (`.<random>.cwasm.tmp`); the versions before this one
/// wrote `<digest>.tmp<pid>`, which [`is_temporary`] also recognises.
const TEMP_SUFFIX: &str = ".cwasm.tmp";
/// How the directory of each engine's artifacts starts.
const ENGINE_DIR_PREFIX: &str = "engine-";

/// Artifacts this process is loading (with how many loads of each are under way):
/// pruning leaves them alone. Shared by every cache of the process, since a worker's
/// runtimes, and several workers in `faas up`, share one root.
static LOADING: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

fn loading() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, usize>> {
    // Every change is one map operation, so a poisoned map is still consistent.
    LOADING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Marks an artifact as being loaded for as long as it lives.
struct Loading(PathBuf);

impl Loading {
    fn new(path: &Path) -> Self {
        *loading().entry(path.to_owned()).or_default() += 1;
        Self(path.to_owned())
    }
}

impl Drop for Loading {
    fn drop(&mut self) {
        let mut map = loading();
        if let Some(count) = map.get_mut(&self.0) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.0);
            }
        }
    }
}

/// Whether a component came from the cache or had to be compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A cached artifact was loaded; nothing was compiled.
    Hit,
    /// The component was compiled and the artifact stored.
    Miss,
}

/// What [`ComponentCache::tidy`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tidied {
    /// Temporary files abandoned by a failed or crashed write.
    pub temp_files: usize,
    /// Artifacts pruned, least recently used first, to fit the size limit.
    pub artifacts: usize,
}

/// The on-disk cache of precompiled components for one engine.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    root: PathBuf,
    dir: PathBuf,
    max_bytes: u64,
}

impl ComponentCache {
    /// A cache under `root` for artifacts of `engine`, holding at most
    /// [`DEFAULT_CACHE_MAX_BYTES`] under `root`.
    pub fn new(root: &Path, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            root: root.to_owned(),
            dir: root.join(format!("{ENGINE_DIR_PREFIX}{:016x}", hasher.finish())),
            max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }

    /// The same cache, pruned to `max_bytes` of artifacts under its root; 0 means no
    /// limit.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = if max_bytes == 0 { u64::MAX } else { max_bytes };
        self
    }

    /// The directory of this engine's artifacts.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the artifact of `component` is (or would be) stored.
    pub fn artifact_path(&self, component: &faas_invoke::Component) -> PathBuf {
        self.path_of(component.digest())
    }

    /// Where the artifact of the component with this [`faas_invoke::Component::digest`] is.
    fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.{ARTIFACT_EXTENSION}"))
    }

    /// Whether the artifact of the component with this
    /// [`faas_invoke::Component::digest`] is in the cache now (one `stat`).
    pub fn contains(&self, digest: &str) -> bool {
        self.path_of(digest).exists()
    }

    /// Marks the artifact of the component with this [`faas_invoke::Component::digest`] as used
    /// now, as a load does, when its code needed no load: it is shared in memory by a
    /// function already loaded (the worker's `linked.rs`). Otherwise an artifact that
    /// many workflows run would look as old as its first load to pruning.
    pub fn mark_used(&self, digest: &str) {
        touch(&self.path_of(digest));
    }

    /// Loads the component `bytes`, compiling it only if no artifact is cached.
    ///
    /// This compiles on the calling thread: call it from a blocking context.
    ///
    /// # Errors
    /// [`LoadError::Compile`] if the bytes are not a valid component, or
    /// [`LoadError::Cache`] if the cache directory cannot be written.
    pub fn load(
        &self,
        engine: &Engine,
        function: &str,
        bytes: &faas_invoke::Component,
    ) -> Result<(Component, CacheOutcome), LoadError> {
        self.load_with(engine, function, bytes, |bytes| {
            crate::compiler::in_process(engine, function, bytes)
        })
    }

    /// [`Self::load`], with `compile` turning the bytes into an artifact on a miss
    /// (the worker's `compiler.rs` compiles in a child process).
    ///
    /// # Errors
    /// As [`Self::load`], and whatever `compile` returns.
    pub(crate) fn load_with(
        &self,
        engine: &Engine,
        function: &str,
        bytes: &faas_invoke::Component,
        compile: impl FnOnce(&[u8]) -> Result<Vec<u8>, LoadError>,
    ) -> Result<(Component, CacheOutcome), LoadError> {
        let path = self.artifact_path(bytes);
        // From here until this function returns, pruning in this process leaves the
        // artifact alone.
        let _loading = Loading::new(&path);
        if path.exists() {
            // Used now: pruning in other processes leaves it alone for a while.
            touch(&path);
            // SAFETY: only this cache writes into its directory, always with output of
            // `Engine::precompile_component` for an engine of the same compatibility
            // hash (the directory name), and files appear atomically by rename.
            // Wasmtime also re-checks compatibility in the artifact's header.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(err) => {
                    tracing::warn!(path = %path.display(), "discarding unusable cached artifact: {err}");
                }
            }
        }
        let compiled = compile(bytes)?;
        self.store(&path, &compiled)?;
        // SAFETY: as above; the file was written by us a moment ago.
        let component = unsafe { Component::deserialize_file(engine, &path) }.map_err(|err| {
            // A component this engine refuses (more memories than an instance may
            // have...) is refused again at every deploy: its file would only fill the
            // disk, deploy after deploy, with nothing pruning it.
            if let Err(err) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), "cannot remove a refused artifact: {err}");
            }
            LoadError::Compile {
                function: function.to_owned(),
                message: format!("{err:#}"),
            }
        })?;
        self.prune();
        Ok((component, CacheOutcome::Miss))
    }

    /// The cached artifact of the component with this [`faas_invoke::Component::digest`],
    /// loaded for `engine`, if one is there and fits it. What moving a loaded
    /// component to another engine of the same compatibility hash (the same cache
    /// directory) needs: the bytes are not kept once loaded.
    ///
    /// This maps the file on the calling thread: call it from a blocking context.
    pub fn load_cached(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path_of(digest);
        let _loading = Loading::new(&path);
        if !path.exists() {
            return None;
        }
        touch(&path);
        // SAFETY: as in `load`: only this cache writes artifacts into its directory,
        // atomically, and Wasmtime re-checks compatibility in the artifact's header.
        unsafe { Component::deserialize_file(engine, &path) }.ok()
    }

    /// Removes temporary files abandoned by failed or crashed writes and prunes the
    /// cache to its size; what a worker does when it starts. Problems are logged, not
    /// returned: a cache that cannot be tidied still works.
    pub fn tidy(&self) -> Tidied {
        let tidied = Tidied {
            temp_files: self.remove_abandoned_temp_files(),
            artifacts: self.prune(),
        };
        if tidied != Tidied::default() {
            tracing::info!(
                root = %self.root.display(),
                temp_files = tidied.temp_files,
                artifacts = tidied.artifacts,
                "tidied the compiled-code cache"
            );
        }
        tidied
    }

    /// Writes an artifact under a temporary name and renames it into place, so a
    /// reader never sees half a file.
    fn store(&self, path: &Path, compiled: &[u8]) -> Result<(), LoadError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| LoadError::Cache {
            path: self.dir.clone(),
            source,
        })?;
        write_artifact(&self.dir, path, |file| file.write_all(compiled))
    }

    /// Deletes the least recently used artifacts under the root until they fit in
    /// `max_bytes`, except those being loaded or recently used; returns how many it
    /// deleted.
    fn prune(&self) -> usize {
        let mut artifacts = self.artifacts();
        let mut total: u64 = artifacts.iter().map(|artifact| artifact.bytes).sum();
        if total <= self.max_bytes {
            return 0;
        }
        artifacts.sort_by_key(|artifact| artifact.used);
        // Held while deleting, so no load in this process can start on an artifact
        // between the check and the deletion.
        let loading = loading();
        let mut deleted = 0;
        for artifact in artifacts {
            if total <= self.max_bytes {
                break;
            }
            // Looked at again just before deleting: another process may have loaded
            // it since the listing.
            if loading.contains_key(&artifact.path) || recently_used(&artifact.path) {
                continue;
            }
            match std::fs::remove_file(&artifact.path) {
                Ok(()) => {
                    deleted += 1;
                    total -= artifact.bytes;
                }
                // Another process pruned it first.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    total -= artifact.bytes;
                }
                Err(err) => {
                    tracing::warn!(path = %artifact.path.display(), "cannot prune cached artifact: {err}");
                }
            }
        }
        if total > self.max_bytes {
            tracing::debug!(
                total,
                max_bytes = self.max_bytes,
                "compiled-code cache over its size: the rest is in use"
            );
        }
        deleted
    }

    /// Every artifact under the root, of every engine.
    fn artifacts(&self) -> Vec<Artifact> {
        let mut found = Vec::new();
        for dir in engine_dirs(&self.root) {
            for path in files(&dir) {
                if path
                    .extension()
                    .is_none_or(|extension| extension != ARTIFACT_EXTENSION)
                {
                    continue;
                }
                let Ok(metadata) = std::fs::metadata(&path) else {
                    continue;
                };
                found.push(Artifact {
                    bytes: metadata.len(),
                    used: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    path,
                });
            }
        }
        found
    }

    /// Deletes temporary files that no write holds any more (not locked, and not
    /// written to for [`RECENT`]); returns how many.
    fn remove_abandoned_temp_files(&self) -> usize {
        let mut removed = 0;
        for dir in engine_dirs(&self.root) {
            for path in files(&dir).into_iter().filter(|path| is_temporary(path)) {
                let Ok(file) = File::open(&path) else {
                    continue;
                };
                // A write in progress holds the lock; a crashed one released it.
                if file.try_lock().is_err() || recently_used(&path) {
                    continue;
                }
                match std::fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => {
                        tracing::warn!(path = %path.display(), "cannot remove temporary file: {err}");
                    }
                }
            }
        }
        removed
    }
}

/// An artifact found on disk.
#[derive(Debug)]
struct Artifact {
    path: PathBuf,
    bytes: u64,
    /// When it was last stored or loaded (its modification time).
    used: SystemTime,
}

/// Writes `path` through a temporary file in `dir`: `write` fills it, then it is
/// renamed over `path`. When anything fails the temporary file is removed (dropping a
/// `NamedTempFile` deletes it), so a full disk leaves no partial files behind.
fn write_artifact(
    dir: &Path,
    path: &Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), LoadError> {
    use std::os::unix::fs::PermissionsExt;
    let cache_error = |source: std::io::Error| LoadError::Cache {
        path: path.to_owned(),
        source,
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".")
        .suffix(TEMP_SUFFIX)
        // Readable by other users' processes sharing the cache, like any artifact.
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(cache_error)?;
    // Held until the file is closed: tells `tidy` in any process that this temporary
    // file is being written, however long that takes.
    temp.as_file().lock().map_err(cache_error)?;
    write(temp.as_file_mut()).map_err(cache_error)?;
    temp.persist(path)
        .map(drop)
        .map_err(|err| cache_error(err.error))
}

/// Sets `path`'s modification time to now: it was just used.
fn touch(path: &Path) {
    if let Err(err) = File::open(path).and_then(|file| file.set_modified(SystemTime::now())) {
        tracing::debug!(path = %path.display(), "cannot mark cached artifact as used: {err}");
    }
}

/// Whether `path` was modified within [`RECENT`] (or cannot be looked at, which is
/// treated the same way: when in doubt, keep).
fn recently_used(path: &Path) -> bool {
    let Ok(modified) = std::fs::metadata(path).and_then(|metadata| metadata.modified()) else {
        return true;
    };
    // A time in the future (clock changes) counts as recent.
    SystemTime::now()
        .duration_since(modified)
        .is_ok_and(|age| age < RECENT)
        || modified > SystemTime::now()
}

/// Whether `path` is a temporary file of a write: `.<random>.cwasm.tmp`, or
/// `<digest>.tmp<pid>` from versions before this one.
fn is_temporary(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    name.ends_with(TEMP_SUFFIX)
        || name.split_once(".tmp").is_some_and(|(digest, pid)| {
            !digest.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The engine directories under `root`.
fn engine_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(ENGINE_DIR_PREFIX)
                && entry.file_type().is_ok_and(|kind| kind.is_dir())
        })
        .map(|entry| entry.path())
        .collect()
}

/// The regular files in `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .map(|entry| entry.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifact.cwasm");
        // Half an artifact, then the disk is full.
        let err = write_artifact(dir.path(), &path, |file| {
            file.write_all(b"half an artif")?;
            Err(std::io::Error::from_raw_os_error(28))
        })
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("artifact.cwasm"), "{message}");
        assert!(message.contains("No space left on device"), "{message}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    #[test]
    fn a_write_replaces_the_artifact_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("artifact.cwasm");
        std::fs::write(&path, b"old").unwrap();
        write_artifact(dir.path(), &path, |file| file.write_all(b"new artifact")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new artifact");
        assert_eq!(names(dir.path()), ["artifact.cwasm"]);
    }

    #[test]
    fn temporary_files_are_told_from_artifacts() {
        assert!(is_temporary(Path::new("/c/engine-1/.a1B2c3.cwasm.tmp")));
        assert!(is_temporary(Path::new("/c/engine-1/0123abcd.tmp4242")));
        assert!(!is_temporary(Path::new("/c/engine-1/0123abcd.cwasm")));
        assert!(!is_temporary(Path::new("/c/engine-1/notes.tmpl")));
        assert!(!is_temporary(Path::new("/c/engine-1/.tmp")));
    }
}
