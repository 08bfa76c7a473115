//! Components are compiled once per engine configuration and then loaded from disk;
//! the cache stays within its size, least recently used out first, and leaves no
//! temporary files behind.

use faas_invoke::Component;
use faas_invoke::LoadError;
use faas_worker::cache::{CacheOutcome, ComponentCache, Tidied};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use wasmtime::{Config, Engine};

fn engine(fuel: bool) -> Engine {
    let mut config = Config::new();
    config.consume_fuel(fuel);
    Engine::new(&config).expect("engine")
}

#[test]
fn a_component_is_compiled_once_then_loaded_from_the_cache() {
    let dir = faas_testing::temp_dir();
    let bytes = Component::new(faas_testing::component("hello"));
    let engine = engine(true);

    let (_, first) = ComponentCache::new(dir.path(), &engine)
        .load(&engine, "hello", &bytes)
        .unwrap();
    assert_eq!(first, CacheOutcome::Miss);

    // A new cache over the same directory: what a restarted worker sees.
    let (_, second) = ComponentCache::new(dir.path(), &engine)
        .load(&engine, "hello", &bytes)
        .unwrap();
    assert_eq!(second, CacheOutcome::Hit);
}

#[test]
fn an_engine_with_other_settings_does_not_reuse_artifacts() {
    let dir = faas_testing::temp_dir();
    let bytes = Component::new(faas_testing::component("hello"));
    let metered = engine(true);
    let unmetered = engine(false);
    ComponentCache::new(dir.path(), &metered)
        .load(&metered, "hello", &bytes)
        .unwrap();
    let (_, outcome) = ComponentCache::new(dir.path(), &unmetered)
        .load(&unmetered, "hello", &bytes)
        .unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
}

#[test]
fn a_corrupt_artifact_is_recompiled() {
    let dir = faas_testing::temp_dir();
    let bytes = Component::new(faas_testing::component("hello"));
    let engine = engine(true);
    let cache = ComponentCache::new(dir.path(), &engine);
    cache.load(&engine, "hello", &bytes).unwrap();
    let artifact = walk(dir.path())
        .into_iter()
        .find(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .expect("an artifact was written");
    std::fs::write(&artifact, b"garbage").unwrap();
    let (_, outcome) = cache.load(&engine, "hello", &bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert!(
        std::fs::metadata(&artifact).unwrap().len() > 1000,
        "rewritten"
    );
}

#[test]
fn bytes_that_are_not_a_component_fail_with_the_function_named() {
    let dir = faas_testing::temp_dir();
    let engine = engine(true);
    let err = ComponentCache::new(dir.path(), &engine)
        .load(
            &engine,
            "broken",
            &Component::new(b"\0asm but not really".to_vec()),
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("function `broken`:"), "{err}");
}

/// The smallest component there is (an empty one), made distinct by a custom section
/// named `tag`: compiled in a moment, yet each has its own artifact.
fn tiny_component(tag: &str) -> Component {
    assert!(tag.len() < 100);
    let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
    // Custom section (id 0): its size, then the name as a length-prefixed string.
    bytes.extend([0, tag.len() as u8 + 1, tag.len() as u8]);
    bytes.extend(tag.as_bytes());
    Component::new(bytes)
}

/// Sets `path`'s modification time (the cache's "last used") to `ago` before now.
fn used_ago(path: &Path, ago: Duration) {
    std::fs::File::open(path)
        .unwrap()
        .set_modified(SystemTime::now() - ago)
        .unwrap();
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn the_least_recently_used_artifacts_are_pruned_first() {
    let dir = faas_testing::temp_dir();
    let engine = engine(false);
    let unlimited = ComponentCache::new(dir.path(), &engine).with_max_bytes(0);
    let [a, b, c, d] = ["a", "b", "c", "d"].map(tiny_component);
    for (component, minutes) in [(&a, 3), (&b, 2), (&c, 1)] {
        unlimited.load(&engine, "f", component).unwrap();
        used_ago(
            &unlimited.artifact_path(component),
            Duration::from_secs(60 * minutes),
        );
    }
    // `a` is used again: now `b` is the least recently used.
    let (_, outcome) = unlimited.load(&engine, "f", &a).unwrap();
    assert_eq!(outcome, CacheOutcome::Hit);

    // Room for exactly three artifacts: storing `d` must push out `b`, and only `b`.
    let size_of_d = engine.precompile_component(&d).unwrap().len() as u64;
    let paths = [&a, &b, &c, &d].map(|component| unlimited.artifact_path(component));
    let limit = size(&paths[0]) + size(&paths[2]) + size_of_d;
    let cache = ComponentCache::new(dir.path(), &engine).with_max_bytes(limit);
    let (_, outcome) = cache.load(&engine, "f", &d).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    let present = paths.clone().map(|path| path.exists());
    assert_eq!(present, [true, false, true, true], "a, b, c, d");

    // A limit of one byte: `c` goes, but `a` (loaded a moment ago) and `d` (stored a
    // moment ago) stay, since another process may be loading them right now.
    let tiny = ComponentCache::new(dir.path(), &engine).with_max_bytes(1);
    assert_eq!(
        tiny.tidy(),
        Tidied {
            temp_files: 0,
            artifacts: 1
        }
    );
    let present = paths.clone().map(|path| path.exists());
    assert_eq!(present, [true, false, false, true], "a, b, c, d");
    // Once they are old enough, they go too, oldest first.
    used_ago(&paths[0], Duration::from_secs(60));
    used_ago(&paths[3], Duration::from_secs(120));
    let one = ComponentCache::new(dir.path(), &engine).with_max_bytes(size(&paths[0]));
    assert_eq!(one.tidy().artifacts, 1);
    let present = paths.map(|path| path.exists());
    assert_eq!(present, [true, false, false, false], "a, b, c, d");
}

#[test]
fn pruning_reaches_the_artifacts_of_other_engines() {
    let dir = faas_testing::temp_dir();
    let (metered, unmetered) = (engine(true), engine(false));
    let component = tiny_component("old");
    let old = ComponentCache::new(dir.path(), &metered);
    old.load(&metered, "f", &component).unwrap();
    let old_artifact = old.artifact_path(&component);
    used_ago(&old_artifact, Duration::from_secs(3600));

    // A cache for another engine (e.g. after a Wasmtime upgrade) over the same root.
    let new = ComponentCache::new(dir.path(), &unmetered).with_max_bytes(size(&old_artifact));
    new.load(&unmetered, "f", &component).unwrap();
    assert!(
        !old_artifact.exists(),
        "the other engine's artifact was pruned"
    );
    assert!(new.artifact_path(&component).exists());
}

#[test]
fn a_failed_store_leaves_no_temporary_file() {
    let dir = faas_testing::temp_dir();
    let engine = engine(false);
    let cache = ComponentCache::new(dir.path(), &engine);
    let component = tiny_component("blocked");
    // A directory where the artifact should go: the rename into place fails (whoever
    // runs the test, root included), after the artifact was written in full.
    let path = cache.artifact_path(&component);
    std::fs::create_dir_all(&path).unwrap();
    let err = cache.load(&engine, "f", &component).unwrap_err();
    assert!(matches!(err, LoadError::Cache { .. }), "{err}");
    assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
    assert_eq!(names(cache.dir()), [path.file_name().unwrap().to_owned()]);

    // Once the obstacle is gone, the same load succeeds.
    std::fs::remove_dir(&path).unwrap();
    let (_, outcome) = cache.load(&engine, "f", &component).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(names(cache.dir()), [path.file_name().unwrap().to_owned()]);
}

#[test]
fn temporary_files_of_crashed_writes_are_removed_at_start() {
    let dir = faas_testing::temp_dir();
    let engine = engine(false);
    let cache = ComponentCache::new(dir.path(), &engine);
    std::fs::create_dir_all(cache.dir()).unwrap();
    let at = |name: &str| cache.dir().join(name);
    let write = |name: &str, ago: u64| {
        std::fs::write(at(name), b"half an artifact").unwrap();
        used_ago(&at(name), Duration::from_secs(ago));
    };
    // Left by crashed writes: this version's name, and the previous versions'.
    write(".crashed.cwasm.tmp", 3600);
    write(&format!("{}.tmp4242", "ab".repeat(32)), 3600);
    // A write in progress in another process: locked, and fresh.
    write(".writing.cwasm.tmp", 3600);
    let writing = std::fs::File::open(at(".writing.cwasm.tmp")).unwrap();
    writing.lock().unwrap();
    // Just created, not locked yet.
    write(".starting.cwasm.tmp", 0);
    // Not the cache's: left alone.
    write("notes.txt", 3600);

    assert_eq!(cache.tidy().temp_files, 2);
    assert_eq!(
        names(cache.dir()),
        [".starting.cwasm.tmp", ".writing.cwasm.tmp", "notes.txt"]
    );
    drop(writing);
    assert_eq!(cache.tidy().temp_files, 1, "unlocked now");
}

#[test]
fn a_worker_tidies_its_cache_when_it_starts() {
    let dir = faas_testing::temp_dir();
    let stale = dir.path().join("engine-0000000000000000");
    std::fs::create_dir_all(&stale).unwrap();
    let temp = stale.join(".crashed.cwasm.tmp");
    std::fs::write(&temp, b"half").unwrap();
    used_ago(&temp, Duration::from_secs(3600));
    let mut config = faas_worker::WorkerConfig::new(dir.path());
    config.pooling = false;
    let _worker = faas_worker::Worker::new(config).unwrap();
    assert!(!temp.exists());
}

fn names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    names
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
