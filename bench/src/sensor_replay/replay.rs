//! Replaying a trace into a deployed pipeline and timing what comes out.
//!
//! A publisher sends each frame with PUBLISH to the mode's input channel at its
//! scheduled time (the trace's offsets divided by the speed-up), stamping SentAtUs
//! with the wall clock just before sending. A reader follows the mode's output stream
//! with XREAD BLOCK on its own connection and takes, for every match, now - SentAtUs
//! as the end-to-end latency. Both run on the same machine, so they share one clock.
//!
//! Losses are counted, never hidden: a replay ends when every expected match arrived,
//! or once nothing new arrived for [`STALL`] after the last send.

use crate::encode::{Encoder, unix_micros};
use crate::trace::Frame;
use anyhow::{Context, bail};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamReadOptions, StreamReadReply};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::time::sleep_until;

/// How long the reader waits for more after the last send before calling the rest
/// lost.
const STALL: Duration = Duration::from_secs(5);
/// How long one XREAD blocks, which bounds how late the reader notices the end.
const BLOCK: Duration = Duration::from_millis(200);
/// Entries one XREAD returns at most.
const BATCH: usize = 1000;
/// Delay before the first send, so the reader is listening when matches come back.
const LEAD_IN: Duration = Duration::from_millis(100);

/// One deployment to replay into: where perceptions go in and matches come out.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub name: &'static str,
    pub channel: &'static str,
    pub stream: &'static str,
}

/// What one replay measured.
pub struct Outcome {
    pub messages: usize,
    pub expected: usize,
    /// Distinct (object, sensor, frame) matches received.
    pub received: usize,
    /// Matches received more than once.
    pub duplicates: usize,
    /// Messages no subscriber heard (PUBLISH answered 0): lost before the platform.
    pub unheard: usize,
    /// End-to-end latency of every distinct match.
    pub latencies: Vec<Duration>,
    /// From the first send to the last match received.
    pub elapsed: Duration,
    /// How far behind its schedule the latest send went out.
    pub max_send_lag: Duration,
}

/// Replays `frames` into `mode` at `speed` times the recorded rate. Object ids are
/// shifted into `ids` (see [`Encoder::frame`]) so matches of an earlier replay still
/// in flight are told apart and ignored, and assembler windows start empty.
pub async fn replay(
    client: &redis::Client,
    encoder: &Encoder,
    mode: Mode,
    frames: &[Frame],
    speed: f64,
    ids: Range<u32>,
) -> anyhow::Result<Outcome> {
    let mut publisher = client.get_multiplexed_async_connection().await?;
    let _: () = publisher.del(mode.stream).await?;
    let expected: usize = frames.iter().map(|frame| frame.detections.len()).sum();
    let sending = Arc::new(AtomicBool::new(true));
    let reader = tokio::spawn(read(
        client.get_multiplexed_async_connection().await?,
        mode.stream,
        expected,
        ids.clone(),
        sending.clone(),
    ));
    let started = Instant::now() + LEAD_IN;
    let sent = publish(
        &mut publisher,
        encoder,
        mode,
        frames,
        speed,
        ids.start,
        started,
    )
    .await;
    sending.store(false, Ordering::Release);
    let (unheard, max_send_lag) = sent?;
    let read = reader.await.context("the stream reader panicked")??;
    Ok(Outcome {
        messages: frames.len(),
        expected,
        received: read.latencies.len(),
        duplicates: read.duplicates,
        unheard,
        latencies: read.latencies,
        elapsed: read.last_at.saturating_duration_since(started),
        max_send_lag,
    })
}

/// Sends every frame at its time; returns how many no subscriber heard and the
/// largest lag behind schedule.
async fn publish(
    connection: &mut MultiplexedConnection,
    encoder: &Encoder,
    mode: Mode,
    frames: &[Frame],
    speed: f64,
    id_offset: u32,
    started: Instant,
) -> anyhow::Result<(usize, Duration)> {
    // Encoded up front, so the schedule only pays for stamping the send time.
    let mut messages: Vec<Vec<u8>> = frames
        .iter()
        .map(|frame| encoder.frame(frame, id_offset))
        .collect::<anyhow::Result<_>>()?;
    let (mut unheard, mut max_lag) = (0, Duration::ZERO);
    for (frame, message) in frames.iter().zip(&mut messages) {
        let due = started + frame.at.div_f64(speed);
        sleep_until(due.into()).await;
        max_lag = max_lag.max(due.elapsed());
        encoder.stamp(message, unix_micros());
        let receivers: i64 = connection.publish(mode.channel, &message[..]).await?;
        if receivers == 0 {
            unheard += 1;
        }
    }
    Ok((unheard, max_lag))
}

/// What the reader saw.
struct Read {
    latencies: Vec<Duration>,
    duplicates: usize,
    last_at: Instant,
}

/// Follows `stream` until `expected` distinct matches of objects in `ids` arrived, or
/// until nothing new came for [`STALL`] once `sending` turned false.
async fn read(
    mut connection: MultiplexedConnection,
    stream: &'static str,
    expected: usize,
    ids: Range<u32>,
    sending: Arc<AtomicBool>,
) -> anyhow::Result<Read> {
    let options = StreamReadOptions::default()
        .count(BATCH)
        .block(BLOCK.as_millis() as usize);
    let mut seen = HashSet::with_capacity(expected);
    let mut latencies = Vec::with_capacity(expected);
    let (mut duplicates, mut last_id) = (0, "0-0".to_owned());
    let (mut last_at, mut idle_since) = (Instant::now(), None::<Instant>);
    while latencies.len() < expected {
        let reply: Option<StreamReadReply> = connection
            .xread_options(&[stream], &[&last_id], &options)
            .await?;
        let now_us = unix_micros();
        let entries: Vec<_> = reply
            .into_iter()
            .flat_map(|reply| reply.keys)
            .flat_map(|key| key.ids)
            .collect();
        let mut fresh = false;
        for entry in &entries {
            let payload: Vec<u8> = entry.get("payload").context("an entry without payload")?;
            let matched = parse(&payload)?;
            if !ids.contains(&matched.object_id) {
                continue; // a straggler of an earlier replay
            }
            if !seen.insert((matched.object_id, matched.sensor_id, matched.seq)) {
                duplicates += 1;
                continue;
            }
            fresh = true;
            latencies.push(Duration::from_micros(
                now_us.saturating_sub(matched.sent_at_us),
            ));
        }
        if let Some(entry) = entries.last() {
            last_id.clone_from(&entry.id);
        }
        if fresh {
            last_at = Instant::now();
            idle_since = None;
        } else if !sending.load(Ordering::Acquire) {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= STALL {
                break;
            }
        }
    }
    Ok(Read {
        latencies,
        duplicates,
        last_at,
    })
}

/// The fields of a matcher stream entry the benchmark needs.
struct Matched {
    sent_at_us: u64,
    sensor_id: u32,
    seq: u64,
    object_id: u32,
}

/// Parses `<SentAtUs> <sensor> <seq> <object> ...` (the matcher's entry format).
fn parse(payload: &[u8]) -> anyhow::Result<Matched> {
    let text = std::str::from_utf8(payload).context("a non-UTF-8 entry")?;
    let mut fields = text.split(' ');
    let mut next = |name: &str| {
        fields
            .next()
            .with_context(|| format!("entry {text:?} has no {name}"))
    };
    let (sent, sensor, seq, object) = (
        next("SentAtUs")?,
        next("sensor")?,
        next("seq")?,
        next("object")?,
    );
    let parsed = (|| {
        Ok::<_, std::num::ParseIntError>(Matched {
            sent_at_us: sent.parse()?,
            sensor_id: sensor.parse()?,
            seq: seq.parse()?,
            object_id: object.parse()?,
        })
    })();
    match parsed {
        Ok(matched) => Ok(matched),
        Err(err) => bail!("entry {text:?}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_the_matcher_entry() {
        let m = parse(b"1700000000000123 1 42 1000007 17 1.750 300.000 251.750").unwrap();
        assert_eq!(
            (m.sent_at_us, m.sensor_id, m.seq, m.object_id),
            (1_700_000_000_000_123, 1, 42, 1_000_007)
        );
        assert!(parse(b"12 1").is_err());
        assert!(parse(b"x 1 2 3").is_err());
    }
}
