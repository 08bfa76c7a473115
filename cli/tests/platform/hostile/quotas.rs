//! Quotas at rest: a tenant that fills the key-value store (many keys, large values, a
//! growing value, counters; several requests at once) is refused at its quota with an
//! error naming it, keeps the data it had, gets room back by deleting, and another
//! tenant's counters keep working during and after the attack. In memory and in Redis.

use crate::support::{Platform, client, write_manifest};
use faas_testing::RedisServer;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Small quotas, so the attacks are refused fast.
const MAX_KEYS: u64 = 40;
const MAX_BYTES: u64 = 64 << 10;

fn quota_flags() -> Vec<String> {
    [
        "--kv-max-keys".to_owned(),
        MAX_KEYS.to_string(),
        "--kv-max-bytes".to_owned(),
        MAX_BYTES.to_string(),
    ]
    .into()
}

fn start(extra: &[&str]) -> Platform {
    let flags = quota_flags();
    let mut args = vec!["--no-demo"];
    args.extend(flags.iter().map(String::as_str));
    args.extend(extra);
    Platform::start_with(&args)
}

/// Deploys the attacker (`kv-filler`, tenant `attacker`) and the victim (`kv-counter`,
/// tenant `victim`).
fn deploy(platform: &Platform, dir: &Path) {
    let attacker = write_manifest(dir, "filler", "attacker", "kv-filler", "/kv-filler/...", "");
    platform.deploy(&attacker);
    let victim = write_manifest(dir, "counter", "victim", "kv-counter", "/counter/...", "");
    platform.deploy(&victim);
}

/// Status and body text of a request.
fn send(platform: &Platform, method: &str, path: &str, body: &str) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = client()
        .request(method, platform.at(path))
        .body(body.to_owned())
        .send()
        .unwrap_or_else(|err| panic!("{path}: {err}"));
    (response.status().as_u16(), response.text().unwrap())
}

/// How many writes an attack made before it was refused (`wrote <n>, then ...`).
fn written(body: &str) -> u64 {
    body.strip_prefix("wrote ")
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an attack report: {body}"))
}

/// Asserts that `body` reports a refusal by the quota `flag` with `limit` in it.
fn assert_refused_by(body: &str, flag: &str, limit: &str) {
    for needed in [
        "too-large: key-value quota exceeded",
        "tenant `attacker`",
        limit,
        flag,
    ] {
        assert!(body.contains(needed), "`{needed}` missing from: {body}");
    }
}

/// Increments the victim's counter `live` over and over on a thread of its own, and
/// reads it back, while an attack runs.
struct Victim {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, Vec<String>)>,
}

impl Victim {
    fn start(platform: &Platform) -> Self {
        let url = platform.at("/counter/live");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let client = client();
            let (mut count, mut failures) = (0u64, Vec::new());
            while !stopped.load(Ordering::Relaxed) {
                match client.post(&url).send().map(|r| (r.status(), r.text())) {
                    Ok((status, Ok(text))) if status == 200 => {
                        count += 1;
                        if text.trim() != count.to_string() {
                            failures.push(format!("increment {count} answered {text:?}"));
                        }
                    }
                    Ok((status, text)) => failures.push(format!("POST: {status} {text:?}")),
                    Err(err) => failures.push(format!("POST: {err}")),
                }
                match client.get(&url).send().map(|r| (r.status(), r.text())) {
                    Ok((status, Ok(text))) if status == 200 && text.trim() == count.to_string() => {
                    }
                    Ok((status, text)) => {
                        failures.push(format!("GET after {count}: {status} {text:?}"))
                    }
                    Err(err) => failures.push(format!("GET: {err}")),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (count, failures)
        });
        Self { stop, thread }
    }

    /// Stops; asserts that every read and write of the victim succeeded and that there
    /// were some. Returns how many increments it made.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let (count, failures) = self.thread.join().expect("the victim's thread panicked");
        assert!(failures.is_empty(), "the victim failed: {failures:#?}");
        assert!(count > 0, "the victim made no request during the attack");
        count
    }
}

/// The whole attack, and what must hold after it; the same in both modes.
fn attack(platform: &Platform) {
    // What each tenant had before.
    assert_eq!(
        send(platform, "PUT", "/kv-filler/key/precious", "crown jewels").0,
        204
    );
    assert_eq!(
        send(platform, "POST", "/counter/before", ""),
        (200, "1\n".into())
    );
    let victim = Victim::start(platform);

    // Large values: refused by the byte quota after a few.
    let (status, body) = send(platform, "POST", "/kv-filler/bytes/blob?size=16384", "");
    assert_eq!(status, 507, "{body}");
    assert_refused_by(&body, "kv-max-bytes", &format!("{MAX_BYTES} bytes"));
    let blobs = written(&body);
    assert!((1..=4).contains(&blobs), "{body}");
    // One value growing past the room that is left.
    let (status, body) = send(platform, "POST", "/kv-filler/grow/big", "");
    assert_eq!(status, 507, "{body}");
    assert_refused_by(&body, "kv-max-bytes", &format!("{MAX_BYTES} bytes"));
    assert_eq!(
        send(platform, "DELETE", "/kv-filler/keys/blob", ""),
        (200, format!("deleted {blobs}\n"))
    );
    assert_eq!(send(platform, "DELETE", "/kv-filler/key/big", "").0, 204);

    // Many keys, from four requests at once: together they store exactly what the
    // quota leaves (one key is `precious`), never more.
    let fillers: Vec<_> = (0..4)
        .map(|i| {
            let url = platform.at(&format!("/kv-filler/keys/p{i}"));
            std::thread::spawn(move || {
                let response = client().post(url).send().unwrap();
                (response.status().as_u16(), response.text().unwrap())
            })
        })
        .collect();
    let mut keys = Vec::new();
    for filler in fillers {
        let (status, body) = filler.join().unwrap();
        assert_eq!(status, 507, "{body}");
        assert_refused_by(&body, "kv-max-keys", &format!("{MAX_KEYS} keys"));
        keys.push(written(&body));
    }
    assert_eq!(keys.iter().sum::<u64>(), MAX_KEYS - 1, "{keys:?}");

    // Counters are keys too.
    let (status, body) = send(platform, "POST", "/kv-filler/counters/n", "");
    assert_eq!(status, 507, "{body}");
    assert_refused_by(&body, "kv-max-keys", &format!("{MAX_KEYS} keys"));
    assert_eq!(written(&body), 0);

    // The attacker's own data is intact, and deleting gives room back.
    assert_eq!(
        send(platform, "GET", "/kv-filler/key/precious", ""),
        (200, "crown jewels".into())
    );
    let (status, body) = send(platform, "DELETE", "/kv-filler/keys/p0", "");
    assert_eq!(
        (status, body.clone()),
        (200, format!("deleted {}\n", keys[0]))
    );
    let (status, body) = send(platform, "POST", "/kv-filler/keys/again", "");
    assert_eq!(status, 507, "{body}");
    assert_eq!(written(&body), keys[0], "{body}");

    // The victim was served throughout, counted right, and still reads and writes.
    let count = victim.finish();
    assert_eq!(
        send(platform, "GET", "/counter/live", ""),
        (200, format!("{count}\n"))
    );
    assert_eq!(
        send(platform, "GET", "/counter/before", ""),
        (200, "1\n".into())
    );
    assert_eq!(
        send(platform, "POST", "/counter/after", "5"),
        (200, "5\n".into())
    );
}

#[test]
fn a_tenant_filling_the_embedded_store_is_stopped_at_its_quota() {
    let platform = start(&[]);
    let dir = faas_testing::temp_dir();
    deploy(&platform, dir.path());
    attack(&platform);
}

#[test]
fn a_tenant_filling_redis_is_stopped_at_its_quota() {
    let redis = RedisServer::start();
    let platform = start(&["--redis", &redis.url()]);
    let dir = faas_testing::temp_dir();
    deploy(&platform, dir.path());
    attack(&platform);

    // In Redis too, exactly the quota's worth of keys, and the usage agrees.
    let mut connection = crate::redis::connect(&redis);
    let stored: Vec<String> = redis::cmd("KEYS")
        .arg("faas:kv:8:attacker:*")
        .query(&mut connection)
        .unwrap();
    assert_eq!(stored.len() as u64, MAX_KEYS, "{stored:?}");
    let counted: u64 = redis::cmd("HGET")
        .arg("faas:kv-usage:8:attacker")
        .arg("keys")
        .query(&mut connection)
        .unwrap();
    assert_eq!(counted, MAX_KEYS);
}
