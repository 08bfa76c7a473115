//! The Redis log store against a real redis-server: lines written by a worker come
//! back to a reader, streams are trimmed by length and a tenant's by bytes, and a
//! Redis that goes away costs dropped (counted) lines, never a waiting guest.

use faas_invoke::{LogLevel, LogLine, LogSink, LogSource};
use faas_store::logs::{RedisLogReader, RedisLogWriter, log_key};
use faas_store::stream_quota::{Counted, StreamQuota};
use faas_testing::RedisServer;
use std::time::{Duration, Instant};

/// 100 lines per stream, and no byte limit.
const HUNDRED_LINES: StreamQuota = StreamQuota {
    max_len: 100,
    max_bytes: 0,
};

fn line(workflow: &str, text: &str) -> LogLine {
    line_of("t", workflow, text)
}

fn line_of(tenant: &str, workflow: &str, text: &str) -> LogLine {
    LogLine {
        time_ms: 1,
        tenant: tenant.into(),
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
        let lines = reader.recent("t", workflow).await.unwrap().lines;
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn lines_come_back_in_order_per_workflow_and_streams_are_trimmed() {
    let server = RedisServer::start();
    let writer = RedisLogWriter::connect(&server.url(), HUNDRED_LINES)
        .await
        .unwrap();
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
    let batch = reader.recent("t", "a").await.unwrap();
    writer.push(line("a", "third"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let after = reader.after("t", "a", &batch.last_id, 10).await.unwrap();
        if !after.lines.is_empty() || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(after.lines.len(), 1);
    assert_eq!(after.lines[0].text, "third");

    for index in 0..2000 {
        writer.push(line("c", &index.to_string()));
        if index % 500 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept = reader.recent("t", "c").await.unwrap().lines;
    assert!((99..=100).contains(&kept.len()), "{} kept", kept.len());
    assert_eq!(kept.last().unwrap().text, "1999", "the newest are kept");

    reader.remove("t", "a").await.unwrap();
    assert!(reader.recent("t", "a").await.unwrap().lines.is_empty());
    assert_eq!(reader.recent("t", "b").await.unwrap().lines.len(), 1);
    // The stream's list of entry sizes (kept for trimming) went with it.
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut lists: Vec<String> = redis::cmd("KEYS")
        .arg(Counted::Logs.entries_key("*"))
        .query_async(&mut connection)
        .await
        .unwrap();
    lists.sort();
    let kept = ["b", "c"].map(|workflow| Counted::Logs.entries_key(&log_key("t", workflow)));
    assert_eq!(lists, kept);
}

#[tokio::test]
async fn a_redis_that_went_away_costs_counted_lines_not_time() {
    let server = RedisServer::start();
    let writer = RedisLogWriter::connect(&server.url(), HUNDRED_LINES)
        .await
        .unwrap();
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

/// A redis-server, a writer into it whose tenants' log streams hold `max_bytes` in all
/// (10,000 lines each), and a reader.
async fn within_bytes(max_bytes: u64) -> (RedisServer, RedisLogWriter, RedisLogReader) {
    let server = RedisServer::start();
    let quota = StreamQuota {
        max_len: 10_000,
        max_bytes,
    };
    let writer = RedisLogWriter::connect(&server.url(), quota).await.unwrap();
    let reader = RedisLogReader::connect(&server.url()).await.unwrap();
    (server, writer, reader)
}

#[tokio::test]
async fn a_tenants_log_streams_hold_its_bytes_in_all_and_anothers_lines_stay() {
    const MAX_BYTES: u64 = 256 << 10;
    let (server, writer, reader) = within_bytes(MAX_BYTES).await;
    for index in 0..10 {
        writer.push(line_of("quiet", "news", &format!("quiet {index}")));
    }
    // Twenty workflows' 100 lines of 4 KiB: 8 MiB asked of a quota of 256 KiB.
    let long = "x".repeat(4 << 10);
    for round in 0..100 {
        for workflow in 0..20 {
            writer.push(line_of("loud", &format!("loud-{workflow}"), &long));
        }
        if round % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    write_last(&writer, &reader, "loud", "loud-0").await;
    let held = held(&server, "loud").await;
    assert!(held <= MAX_BYTES, "loud's logs hold {held} bytes");
    let mut kept = 0;
    for workflow in 0..20 {
        kept += reader
            .recent("loud", &format!("loud-{workflow}"))
            .await
            .unwrap()
            .lines
            .len();
    }
    assert!(kept < 64, "{kept} lines of 4 KiB kept");
    // The other tenant's lines are counted apart: all there.
    assert_eq!(
        reader.recent("quiet", "news").await.unwrap().lines.len(),
        10
    );
}

#[tokio::test]
async fn a_workflow_name_another_tenant_had_is_a_stream_its_former_owner_cannot_trim() {
    // The stream was the workflow name's alone: the former owner's count of it stayed
    // in its list of streams after the removal, so its next flood trimmed the stream
    // by that name, the new owner's, as its own; its instances still running wrote
    // into it too.
    const MAX_BYTES: u64 = 256 << 10;
    let (_server, writer, reader) = within_bytes(MAX_BYTES).await;
    let long = "x".repeat(4 << 10);
    for _ in 0..60 {
        writer.push(line_of("mallory", "chatter", &long));
    }
    write_last(&writer, &reader, "mallory", "chatter").await;
    reader.remove("mallory", "chatter").await.unwrap();
    for index in 0..10 {
        writer.push(line_of("victim", "chatter", &format!("victim {index}")));
    }
    write_last(&writer, &reader, "victim", "chatter").await;
    // A late line of the removed version, and a flood of mallory's far past its bytes.
    writer.push(line_of("mallory", "chatter", &long));
    flood(&writer, &reader, "mallory", 400).await;
    let victim = reader.recent("victim", "chatter").await.unwrap().lines;
    let texts: Vec<&str> = victim.iter().map(|line| line.text.as_str()).collect();
    let mut expected: Vec<String> = (0..10).map(|index| format!("victim {index}")).collect();
    expected.push("last".to_owned());
    assert_eq!(texts, expected);
}

/// Pushes `lines` lines of 4 KiB of `tenant`'s, over four workflows, and waits until
/// they are written.
async fn flood(writer: &RedisLogWriter, reader: &RedisLogReader, tenant: &str, lines: usize) {
    let long = "x".repeat(4 << 10);
    for index in 0..lines {
        writer.push(line_of(tenant, &format!("{tenant}-{}", index % 4), &long));
        if index % 200 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    write_last(writer, reader, tenant, &format!("{tenant}-0")).await;
}

/// Pushes a line `last` to `tenant`'s `workflow` and waits until it is written: the
/// writer appends in order, so every line pushed before it is too.
async fn write_last(
    writer: &RedisLogWriter,
    reader: &RedisLogReader,
    tenant: &str,
    workflow: &str,
) {
    writer.push(line_of(tenant, workflow, "last"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader
        .recent(tenant, workflow)
        .await
        .unwrap()
        .lines
        .last()
        .map(|l| l.text.as_str())
        != Some("last")
    {
        assert!(Instant::now() < deadline, "{tenant}'s last line never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `tenant`'s log streams hold, as the quota counts it.
async fn held(server: &RedisServer, tenant: &str) -> u64 {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("HGET")
        .arg(Counted::Logs.usage_key(tenant))
        .arg("bytes")
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tenants_own_log_quota_holds_in_place_of_the_default() {
    const DEFAULT: u64 = 256 << 10;
    let (server, writer, reader) = within_bytes(DEFAULT).await;
    let tenant = |name: &str, log_max_bytes: Option<u64>| faas_store::Tenant {
        name: name.into(),
        created_at: 0,
        quotas: faas_store::Quotas {
            log_max_bytes,
            ..faas_store::Quotas::default()
        },
    };
    writer.apply_tenant_quotas(&[
        tenant("large", Some(1 << 20)),
        tenant("small", Some(64 << 10)),
        tenant("plain", None),
    ]);
    // 2 MiB of lines each.
    for name in ["large", "small", "plain"] {
        flood(&writer, &reader, name, 500).await;
    }
    let large = held(&server, "large").await;
    assert!(
        large > DEFAULT && large <= 1 << 20,
        "large's logs hold {large} bytes"
    );
    let small = held(&server, "small").await;
    assert!(small <= 64 << 10, "small's logs hold {small} bytes");
    let plain = held(&server, "plain").await;
    assert!(plain <= DEFAULT, "plain's logs hold {plain} bytes");
}

/// Bytes the redis-server at `server` has sent its clients so far.
async fn sent_by(server: &RedisServer) -> usize {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut connection)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .expect("INFO stats gives total_net_output_bytes")
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_read_of_the_largest_lines_takes_little_more_from_redis_than_it_answers() {
    let (server, writer, reader) = within_bytes(0).await;
    // 4 KiB of control characters: about 24 KiB each as stored JSON, so 1,000 of them
    // (24 MiB) hold ten times what one read answers.
    let hostile = "\u{1}".repeat(4 << 10);
    for index in 0..1_000 {
        writer.push(line("w", &hostile));
        if index % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    write_last(&writer, &reader, "t", "w").await;

    let before = sent_by(&server).await;
    let batch = reader.recent("t", "w").await.unwrap();
    let sent = sent_by(&server).await - before;
    let answered = batch.bytes;
    assert!(answered <= faas_store::logs::MAX_READ_BYTES, "{answered}");
    assert!(batch.lines.len() > 50, "{} lines", batch.lines.len());
    assert_eq!(batch.lines.last().unwrap().text, "last");
    // A page of 500 such lines would be 12 MiB, read whole to be cut to 2 MiB; pages
    // are bounded by twice the answer's bound (and Redis adds its framing).
    assert!(
        sent < 5 * faas_store::logs::MAX_READ_BYTES / 2,
        "Redis sent {sent} bytes for an answer of {answered}"
    );
}
