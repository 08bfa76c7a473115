//! The Redis log store against a real redis-server: lines written by a worker come
//! back to a reader, streams are trimmed by length, and a Redis that goes away costs
//! dropped (counted) lines, never a waiting guest.

use faas_invoke::{LogLevel, LogLine, LogSink, LogSource};
use faas_store::logs::{RedisLogReader, RedisLogWriter};
use faas_testing::RedisServer;
use std::time::{Duration, Instant};

fn line(workflow: &str, text: &str) -> LogLine {
    LogLine {
        time_ms: 1,
        tenant: "t".into(),
        workflow: workflow.into(),
        function: "f".into(),
        step: Some("s".into()),
        run: Some("r1".into()),
        level: LogLevel::Info,
        source: LogSource::Log,
        text: text.into(),
    }
}

/// Reads `workflow`'s lines until there are at least `count`, for up to 5 s.
async fn wait_for(reader: &RedisLogReader, workflow: &str, count: usize) -> Vec<LogLine> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines = reader.recent(workflow).await.unwrap().lines;
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn lines_come_back_in_order_per_workflow_and_streams_are_trimmed() {
    let server = RedisServer::start();
    let writer = RedisLogWriter::connect(&server.url(), 100).await.unwrap();
    let reader = RedisLogReader::connect(&server.url()).await.unwrap();
    writer.push(line("a", "first"));
    writer.push(line("b", "other"));
    writer.push(line("a", "second"));
    let lines = wait_for(&reader, "a", 2).await;
    let texts: Vec<&str> = lines.iter().map(|line| line.text.as_str()).collect();
    assert_eq!(texts, ["first", "second"]);
    assert_eq!(lines[0].run.as_deref(), Some("r1"));
    assert_eq!(wait_for(&reader, "b", 1).await.len(), 1);

    // Only what came after an id is read when following.
    let batch = reader.recent("a").await.unwrap();
    writer.push(line("a", "third"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let after = reader.after("a", &batch.last_id, 10).await.unwrap();
        if !after.lines.is_empty() || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(after.lines.len(), 1);
    assert_eq!(after.lines[0].text, "third");

    // `MAXLEN ~ 100` keeps about 100 (Redis trims whole macro nodes).
    for index in 0..2000 {
        writer.push(line("c", &index.to_string()));
        if index % 500 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept = reader.recent("c").await.unwrap().lines;
    assert!(!kept.is_empty() && kept.len() < 400, "{} kept", kept.len());
    assert_eq!(kept.last().unwrap().text, "1999", "the newest are kept");

    reader.remove("a").await.unwrap();
    assert!(reader.recent("a").await.unwrap().lines.is_empty());
    assert_eq!(reader.recent("b").await.unwrap().lines.len(), 1);
}

#[tokio::test]
async fn a_redis_that_went_away_costs_counted_lines_not_time() {
    let server = RedisServer::start();
    let writer = RedisLogWriter::connect(&server.url(), 100).await.unwrap();
    drop(server);
    let started = Instant::now();
    for index in 0..20_000 {
        writer.push(line("a", &index.to_string()));
    }
    // Pushing never waits for Redis: 20,000 lines in far less than one round trip's
    // timeout.
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "pushing took {:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.dropped() < 20_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(writer.dropped(), 20_000, "every line is counted as dropped");
}
