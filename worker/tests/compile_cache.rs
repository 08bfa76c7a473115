//! Components are compiled once per engine configuration and then loaded from disk.

use faas_worker::cache::{CacheOutcome, ComponentCache};
use wasmtime::{Config, Engine};

fn engine(fuel: bool) -> Engine {
    let mut config = Config::new();
    config.consume_fuel(fuel);
    Engine::new(&config).expect("engine")
}

#[test]
fn a_component_is_compiled_once_then_loaded_from_the_cache() {
    let dir = faas_testing::temp_dir();
    let bytes = faas_testing::component("hello");
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
    let bytes = faas_testing::component("hello");
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
    let bytes = faas_testing::component("hello");
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
        .load(&engine, "broken", b"\0asm but not really")
        .unwrap_err();
    assert!(err.to_string().starts_with("function `broken`:"), "{err}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
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
