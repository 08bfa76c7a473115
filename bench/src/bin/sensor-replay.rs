//! Replay benchmark of the sensor pipeline example (`functions/sensors`, after Eisl
//! 2022's WebAssembly stream processing for cooperative ITS): a deterministic
//! synthetic trace of two roadside sensors at 8 Hz is replayed at 1x, 2x, 4x and 16x
//! its recorded rate into both deployments of the same three components, and the
//! end-to-end latency of every match (perception sent -> match on the output stream)
//! is measured:
//!
//! - `workflow`: one workflow, collector -> fan-out per object -> assembler ->
//!   matcher, on one worker (`functions/sensors/workflow.toml`);
//! - `channels`: three workflows chained through Redis pub/sub channels, as in the
//!   study's Spin pipeline (`functions/sensors/channels/*.toml`).
//!
//! The study's goal, reported against at the end: p99 under 10 ms at 4x. Every
//! expected match is accounted for; missing ones are reported, not hidden.
//!
//! Run through `bench/sensor-replay.sh`, which builds everything and starts Redis and
//! the platform. Environment: FAAS_URL, FAAS_TOKEN, FAAS_BIN (see `Target`),
//! REDIS_URL; optional SENSOR_TRACE_SECS (default 20), SENSOR_RATES (default
//! `1,2,4,16`) and SENSOR_MODES (default `workflow,channels`; one of them alone, say,
//! to profile it).

#[path = "../sensor_replay/encode.rs"]
mod encode;
#[path = "../sensor_replay/replay.rs"]
mod replay;
#[path = "../../../functions/sensors/matcher/src/roads.rs"]
#[allow(dead_code)] // the matcher's module: the bench drives traffic, it does not match
mod roads;
#[path = "../sensor_replay/trace.rs"]
mod trace;

use anyhow::{Context, ensure};
use faas_bench::{Target, ms, quantile};
use replay::{Mode, Outcome};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The trace's seed: the same seed, the same traffic.
const SEED: u64 = 2022;
/// The two deployments. Channels and streams as set in the manifests, in the Redis
/// namespace of their tenant `sensors` (`t:<tenant>:<name>`), which is where a
/// producer outside the platform publishes and where the platform appends.
const MODES: [Mode; 2] = [
    Mode {
        name: "workflow",
        channel: "t:sensors:sensors.raw.wf",
        stream: "t:sensors:sensors:matches:wf",
    },
    Mode {
        name: "channels",
        channel: "t:sensors:sensors.raw",
        stream: "t:sensors:sensors:matches",
    },
];
/// Every channel a trigger listens on, which must be subscribed before replaying.
const CHANNELS: [&str; 4] = [
    "t:sensors:sensors.raw.wf",
    "t:sensors:sensors.raw",
    "t:sensors:sensors.locations",
    "t:sensors:sensors.trajectories",
];
/// Frames of the untimed warm-up replay per mode (first instantiations, connections).
const WARM_UP_FRAMES: usize = 16;
/// Each replay's object ids are shifted by a multiple of this, above every trace id.
const ID_SPACE: u32 = 1_000_000;
/// The study's target: p99 below this at [`GOAL_RATE`].
const GOAL_P99: Duration = Duration::from_millis(10);
const GOAL_RATE: f64 = 4.0;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let target = Target::from_env()?;
    let redis_url = std::env::var("REDIS_URL").context("REDIS_URL is not set")?;
    let seconds = env_or("SENSOR_TRACE_SECS", 20u32)?;
    let rates = rates()?;
    let modes = modes()?;
    let encoder = encode::Encoder::new()?;
    let frames = trace::generate(SEED, seconds);
    describe(&frames, seconds);

    for manifest in manifests() {
        target.deploy(&manifest)?;
    }
    let client = redis::Client::open(redis_url.as_str())?;
    wait_for_subscribers(&client).await?;

    println!(
        "\n{:<8} {:>4} {:>6} {:>5} | {:>8} {:>8} {:>7} {:>4} | {:>8} {:>8} {:>8} {:>8} | {:>9} {:>8}",
        "mode",
        "rate",
        "msg/s",
        "msgs",
        "expected",
        "received",
        "missing",
        "dup",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "matches/s",
        "lag ms"
    );
    let mut replays = 0u32;
    let mut next_ids = || {
        replays += 1;
        replays * ID_SPACE..(replays + 1) * ID_SPACE
    };
    let mut goal = Vec::new();
    for mode in modes {
        let warm_up = &frames[..WARM_UP_FRAMES.min(frames.len())];
        replay::replay(&client, &encoder, mode, warm_up, 4.0, next_ids()).await?;
        for &rate in &rates {
            let outcome =
                replay::replay(&client, &encoder, mode, &frames, rate, next_ids()).await?;
            let p99 = row(mode, rate, &outcome, seconds);
            if rate == GOAL_RATE {
                goal.push((mode.name, p99, outcome.expected - outcome.received));
            }
        }
    }
    report_goal(&goal);
    Ok(())
}

/// The four manifests of the example: the workflow and the three chained stages.
fn manifests() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions/sensors");
    let mut paths = vec![dir.join("workflow.toml")];
    for stage in ["collector", "assembler", "matcher"] {
        paths.push(dir.join("channels").join(format!("{stage}.toml")));
    }
    paths
}

/// Pub/sub drops what nobody hears, so replays start only once every trigger has
/// subscribed (the platform subscribes shortly after a deploy).
async fn wait_for_subscribers(client: &redis::Client) -> anyhow::Result<()> {
    let mut connection = client.get_multiplexed_async_connection().await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&CHANNELS)
            .query_async(&mut connection)
            .await?;
        if counts.iter().all(|(_, subscribers)| *subscribers > 0) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "triggers did not subscribe in time: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints what the trace holds.
fn describe(frames: &[trace::Frame], seconds: u32) {
    let counts: Vec<usize> = frames.iter().map(|f| f.detections.len()).collect();
    let total: usize = counts.iter().sum();
    let objects: HashSet<u32> = frames
        .iter()
        .flat_map(|f| f.detections.iter().map(|d| d.object_id))
        .collect();
    println!(
        "trace: seed {SEED}, {seconds} s, {} sensors x {} Hz = {} perception messages; \
         {}..{} objects per message (mean {:.1}), {} distinct objects, {} matches expected per replay",
        trace::SENSORS,
        trace::FRAME_HZ,
        frames.len(),
        counts.iter().min().unwrap_or(&0),
        counts.iter().max().unwrap_or(&0),
        total as f64 / frames.len().max(1) as f64,
        objects.len(),
        total
    );
    println!(
        "each rate replays the whole trace (16x: {} messages in {:.2} s); latency = \
         stream-read time - SentAtUs, per match",
        frames.len(),
        f64::from(seconds) / 16.0
    );
}

/// Prints one replay's row and returns its p99 (None without any match).
fn row(mode: Mode, rate: f64, outcome: &Outcome, seconds: u32) -> Option<Duration> {
    let mut latencies = outcome.latencies.clone();
    let q = |samples: &mut Vec<Duration>, at| (!samples.is_empty()).then(|| quantile(samples, at));
    let (p50, p95, p99, max) = (
        q(&mut latencies, 0.5),
        q(&mut latencies, 0.95),
        q(&mut latencies, 0.99),
        q(&mut latencies, 1.0),
    );
    let show = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), ms);
    let rate_in = outcome.messages as f64 * rate / f64::from(seconds);
    println!(
        "{:<8} {:>3}x {:>6.0} {:>5} | {:>8} {:>8} {:>7} {:>4} | {:>8} {:>8} {:>8} {:>8} | {:>9.0} {:>8}",
        mode.name,
        rate,
        rate_in,
        outcome.messages,
        outcome.expected,
        outcome.received,
        outcome.expected - outcome.received,
        outcome.duplicates,
        show(p50),
        show(p95),
        show(p99),
        show(max),
        outcome.received as f64 / outcome.elapsed.as_secs_f64().max(1e-9),
        ms(outcome.max_send_lag),
    );
    if outcome.unheard > 0 {
        println!(
            "         ({} messages had no subscriber and were dropped by Redis)",
            outcome.unheard
        );
    }
    p99
}

/// The goal line: p99 under 10 ms at 4x, per mode, with losses named.
fn report_goal(goal: &[(&str, Option<Duration>, usize)]) {
    println!(
        "\ngoal: p99 end-to-end < {} ms at {GOAL_RATE}x (the study's Spin pipeline: p95 82 s)",
        GOAL_P99.as_millis()
    );
    for (mode, p99, missing) in goal {
        let verdict = match p99 {
            Some(p99) if *p99 < GOAL_P99 && *missing == 0 => "met",
            Some(_) if *missing > 0 => "NOT met (matches missing)",
            Some(_) => "NOT met",
            None => "NOT met (no matches)",
        };
        let shown = p99.map_or_else(|| "-".to_owned(), ms);
        println!("  {mode:<8} p99 {shown} ms, {missing} missing: {verdict}");
    }
}

/// Environment variable `name` parsed, or `default` when unset.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .parse()
            .map_err(|err| anyhow::anyhow!("{name}={text:?}: {err}")),
    }
}

/// SENSOR_MODES: the deployments to replay into, by name, in [`MODES`]' order.
fn modes() -> anyhow::Result<Vec<Mode>> {
    let text = std::env::var("SENSOR_MODES").unwrap_or_else(|_| "workflow,channels".to_owned());
    let named: Vec<&str> = text.split(',').map(str::trim).collect();
    if let Some(unknown) = named
        .iter()
        .find(|name| !MODES.iter().any(|mode| mode.name == **name))
    {
        anyhow::bail!("SENSOR_MODES: {unknown:?} is not workflow or channels");
    }
    Ok(MODES
        .into_iter()
        .filter(|mode| named.contains(&mode.name))
        .collect())
}

/// SENSOR_RATES: the speed-ups to replay at.
fn rates() -> anyhow::Result<Vec<f64>> {
    let text = std::env::var("SENSOR_RATES").unwrap_or_else(|_| "1,2,4,16".to_owned());
    text.split(',')
        .map(|rate| match rate.trim().parse::<f64>() {
            Ok(rate) if rate > 0.0 => Ok(rate),
            _ => anyhow::bail!("SENSOR_RATES: {rate:?} is not a positive number"),
        })
        .collect()
}
