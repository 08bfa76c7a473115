//! Where guests' log lines are kept for `faas logs` in embedded mode: a bounded buffer
//! per workflow, in memory. Each buffer holds at most its byte budget (the oldest lines
//! go first, and are counted); a follower gets new lines through a bounded channel and
//! is told how many it missed when it falls behind, so no reader makes the gateway
//! buffer without bound either.

use faas_invoke::{LogLine, LogSink};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The default byte budget of one workflow's buffer.
pub const DEFAULT_LOG_BUDGET_BYTES: usize = 1 << 20;

/// How many lines a follower may be behind before it is told it missed some.
const FOLLOW_LAG_LINES: usize = 256;

/// Which lines a reader wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// Only lines of this function or step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Only lines of this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Only lines taken at or after this time (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Only lines of this tenant: the gateway sets it to the workflow's, so lines a
    /// removed workflow's last events wrote never reach a new owner of its name.
    #[serde(skip)]
    pub tenant: Option<String>,
}

impl LogQuery {
    /// Whether `line` is one the reader wants.
    pub fn matches(&self, line: &LogLine) -> bool {
        self.function
            .as_deref()
            .is_none_or(|wanted| line.function == wanted || line.step.as_deref() == Some(wanted))
            && self
                .run
                .as_deref()
                .is_none_or(|wanted| line.run.as_deref() == Some(wanted))
            && self.since_ms.is_none_or(|since| line.time_ms >= since)
            && self
                .tenant
                .as_deref()
                .is_none_or(|tenant| line.tenant == tenant)
    }
}

/// The answer to a logs query (not following).
#[derive(Debug, Serialize, Deserialize)]
pub struct LogsResponse {
    /// The lines kept that match, oldest first.
    pub lines: Vec<LogLine>,
    /// How many lines of this workflow were dropped (over the budget) since it was
    /// deployed on this gateway.
    pub dropped: u64,
}

/// One workflow's lines.
struct Buffer {
    lines: VecDeque<Arc<LogLine>>,
    bytes: usize,
    dropped: u64,
    follow: broadcast::Sender<Arc<LogLine>>,
}

impl Buffer {
    fn new() -> Self {
        Self {
            lines: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            follow: broadcast::channel(FOLLOW_LAG_LINES).0,
        }
    }
}

/// Every workflow's buffer, each within the same byte budget.
pub struct MemoryLogs {
    budget: usize,
    buffers: Mutex<HashMap<String, Buffer>>,
}

impl MemoryLogs {
    /// Buffers of at most `budget` bytes each.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            buffers: Mutex::default(),
        }
    }

    /// The lines of `workflow` that match `query`, oldest first, and the dropped count.
    pub fn read(&self, workflow: &str, query: &LogQuery) -> LogsResponse {
        self.read_and_follow(workflow, query, false).0
    }

    /// As [`Self::read`] and, when `follow`, a receiver of the lines pushed after the
    /// read (taken under the same lock, so none is missed or seen twice).
    pub fn read_and_follow(
        &self,
        workflow: &str,
        query: &LogQuery,
        follow: bool,
    ) -> (LogsResponse, Option<broadcast::Receiver<Arc<LogLine>>>) {
        let mut buffers = self.lock();
        let receiver = follow.then(|| {
            buffers
                .entry(workflow.to_owned())
                .or_insert_with(Buffer::new)
                .follow
                .subscribe()
        });
        let response = match buffers.get(workflow) {
            Some(buffer) => LogsResponse {
                lines: buffer
                    .lines
                    .iter()
                    .filter(|line| query.matches(line))
                    .map(|line| LogLine::clone(line))
                    .collect(),
                dropped: buffer.dropped,
            },
            None => LogsResponse {
                lines: Vec::new(),
                dropped: 0,
            },
        };
        (response, receiver)
    }

    /// How many bytes `workflow`'s buffer holds.
    pub fn bytes(&self, workflow: &str) -> usize {
        self.lock().get(workflow).map_or(0, |buffer| buffer.bytes)
    }

    /// Forgets `workflow`'s lines (it was removed); its followers' streams end.
    pub fn remove(&self, workflow: &str) {
        self.lock().remove(workflow);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Buffer>> {
        // A panic while holding the lock leaves the buffers consistent enough to read.
        self.buffers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LogSink for MemoryLogs {
    fn push(&self, line: LogLine) {
        let cost = line.cost();
        let line = Arc::new(line);
        let mut buffers = self.lock();
        // Looked up before the entry API, which would copy the name for every line.
        let buffer = match buffers.get_mut(&line.workflow) {
            Some(buffer) => buffer,
            None => buffers
                .entry(line.workflow.clone())
                .or_insert_with(Buffer::new),
        };
        buffer.bytes += cost;
        buffer.lines.push_back(line.clone());
        while buffer.bytes > self.budget {
            let Some(oldest) = buffer.lines.pop_front() else {
                break;
            };
            buffer.bytes -= oldest.cost();
            buffer.dropped += 1;
        }
        // No follower is not an error; a slow one sees `Lagged` on its side.
        let _ = buffer.follow.send(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_invoke::{LogLevel, LogSource};

    fn line(workflow: &str, function: &str, run: Option<&str>, text: &str) -> LogLine {
        LogLine {
            time_ms: 1,
            tenant: "t".into(),
            workflow: workflow.into(),
            function: function.into(),
            step: run.map(|_| function.to_owned()),
            run: run.map(str::to_owned),
            level: LogLevel::Info,
            source: LogSource::Output,
            text: text.into(),
        }
    }

    #[test]
    fn a_buffer_stays_within_its_budget_and_counts_what_it_dropped() {
        let logs = MemoryLogs::new(4096);
        for _ in 0..1000 {
            logs.push(line("a", "f", None, &"x".repeat(100)));
        }
        logs.push(line("b", "g", None, "other"));
        assert!(logs.bytes("a") <= 4096);
        let read = logs.read("a", &LogQuery::default());
        assert_eq!(read.dropped as usize + read.lines.len(), 1000);
        assert_eq!(logs.read("b", &LogQuery::default()).lines.len(), 1);
    }

    #[test]
    fn queries_filter_by_function_step_and_run() {
        let logs = MemoryLogs::new(1 << 20);
        logs.push(line("a", "f", None, "1"));
        logs.push(line("a", "s", Some("r1"), "2"));
        logs.push(line("a", "s", Some("r2"), "3"));
        let texts = |query: LogQuery| -> Vec<String> {
            logs.read("a", &query)
                .lines
                .into_iter()
                .map(|line| line.text)
                .collect()
        };
        assert_eq!(texts(LogQuery::default()), ["1", "2", "3"]);
        let by_run = LogQuery {
            run: Some("r2".into()),
            ..LogQuery::default()
        };
        assert_eq!(texts(by_run), ["3"]);
        let by_function = LogQuery {
            function: Some("f".into()),
            ..LogQuery::default()
        };
        assert_eq!(texts(by_function), ["1"]);
        // A line another tenant's event wrote under the same name is not shown.
        let mut theirs = line("a", "f", None, "4");
        theirs.tenant = "other".into();
        logs.push(theirs);
        let own = LogQuery {
            tenant: Some("t".into()),
            ..LogQuery::default()
        };
        assert_eq!(texts(own), ["1", "2", "3"]);
    }

    #[tokio::test]
    async fn a_follower_sees_new_lines_and_is_told_what_it_missed() {
        let logs = MemoryLogs::new(1 << 20);
        let (_, receiver) = logs.read_and_follow("a", &LogQuery::default(), true);
        let mut receiver = receiver.unwrap();
        logs.push(line("a", "f", None, "new"));
        assert_eq!(receiver.recv().await.unwrap().text, "new");
        for _ in 0..FOLLOW_LAG_LINES + 10 {
            logs.push(line("a", "f", None, "flood"));
        }
        assert!(matches!(
            receiver.recv().await,
            Err(broadcast::error::RecvError::Lagged(10))
        ));
    }
}

/// How often a follow stream sends an empty line while no line comes, so that a
/// client that went away is noticed (by the failed write) and its stream dropped.
const FOLLOW_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a Redis follow stream looks for new lines, and how many it takes at once.
const REDIS_FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);
const REDIS_FOLLOW_LINES: usize = 256;

/// Where this gateway reads guests' log lines: its own memory (embedded mode, the
/// workers in the same process write there) or Redis (services mode). The gateway
/// writes there too: a line for each event that failed before a worker ran it.
#[derive(Clone)]
pub enum LogStore {
    /// Bounded buffers in this process.
    Memory(Arc<MemoryLogs>),
    /// The workers' streams in Redis.
    Redis(RedisLogs),
}

/// Services mode's log streams: read for `faas logs`, appended to like a worker does.
#[derive(Clone)]
pub struct RedisLogs {
    /// Reads the streams.
    pub reader: faas_store::logs::RedisLogReader,
    /// Appends this gateway's lines.
    pub writer: Arc<faas_store::logs::RedisLogWriter>,
}

impl LogSink for LogStore {
    fn push(&self, line: LogLine) {
        match self {
            Self::Memory(logs) => logs.push(line),
            Self::Redis(redis) => redis.writer.push(line),
        }
    }
}

impl LogStore {
    /// The lines of `workflow` matching `query` and, when `follow`, a stream of NDJSON
    /// chunks: those lines and then new ones as they come.
    ///
    /// # Errors
    /// When Redis fails.
    pub(crate) async fn read(
        &self,
        workflow: &str,
        query: LogQuery,
        follow: bool,
    ) -> Result<ReadOutcome, faas_store::logs::LogStoreError> {
        match self {
            Self::Memory(logs) => {
                let (read, receiver) = logs.read_and_follow(workflow, &query, follow);
                Ok(match receiver {
                    Some(receiver) => {
                        ReadOutcome::Follow(Box::pin(follow_stream(read.lines, receiver, query)))
                    }
                    None => ReadOutcome::Lines(read),
                })
            }
            Self::Redis(RedisLogs { reader, .. }) => {
                let batch = reader.recent(workflow).await?;
                let lines: Vec<LogLine> = batch
                    .lines
                    .into_iter()
                    .filter(|line| query.matches(line))
                    .collect();
                if !follow {
                    return Ok(ReadOutcome::Lines(LogsResponse { lines, dropped: 0 }));
                }
                let first = futures_util::stream::iter(vec![ndjson_lines(&lines)]);
                let state = (reader.clone(), workflow.to_owned(), batch.last_id, query);
                let rest = futures_util::stream::unfold(state, |state| async move {
                    let (reader, workflow, mut last_id, query) = state;
                    let deadline = tokio::time::Instant::now() + FOLLOW_HEARTBEAT;
                    loop {
                        tokio::time::sleep(REDIS_FOLLOW_POLL).await;
                        // A failed read is retried at the next poll; the heartbeat
                        // still goes out.
                        if let Ok(batch) =
                            reader.after(&workflow, &last_id, REDIS_FOLLOW_LINES).await
                        {
                            last_id = batch.last_id;
                            let lines: Vec<LogLine> = batch
                                .lines
                                .into_iter()
                                .filter(|line| query.matches(line))
                                .collect();
                            if !lines.is_empty() {
                                let chunk = ndjson_lines(&lines);
                                return Some((chunk, (reader, workflow, last_id, query)));
                            }
                        }
                        if tokio::time::Instant::now() >= deadline {
                            let chunk = bytes::Bytes::from_static(b"\n");
                            return Some((chunk, (reader, workflow, last_id, query)));
                        }
                    }
                });
                Ok(ReadOutcome::Follow(Box::pin(
                    futures_util::StreamExt::chain(first, rest),
                )))
            }
        }
    }

    /// Forgets `workflow`'s lines (it was removed).
    pub(crate) async fn remove(&self, workflow: &str) {
        match self {
            Self::Memory(logs) => logs.remove(workflow),
            Self::Redis(RedisLogs { reader, .. }) => {
                if let Err(err) = reader.remove(workflow).await {
                    tracing::warn!(workflow, "removing the workflow's logs: {err}");
                }
            }
        }
    }
}

/// What a read gives: the lines, or a follow stream of NDJSON chunks.
pub(crate) enum ReadOutcome {
    /// Not following.
    Lines(LogsResponse),
    /// Following.
    Follow(std::pin::Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>),
}

/// `lines` as NDJSON.
fn ndjson_lines(lines: &[LogLine]) -> bytes::Bytes {
    lines
        .iter()
        .flat_map(|line| ndjson(line).to_vec())
        .collect::<Vec<u8>>()
        .into()
}

/// Parses a logs query string: `function=`, `run=`, `since_ms=`, `follow=1`.
///
/// # Errors
/// A parameter it does not know or a `since_ms` that is not a number, named.
pub(crate) fn parse_query(query: Option<&str>) -> Result<(LogQuery, bool), String> {
    let mut parsed = LogQuery::default();
    let mut follow = false;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "function" => parsed.function = Some(value.to_owned()),
            "run" => parsed.run = Some(value.to_owned()),
            "since_ms" => {
                parsed.since_ms = Some(value.parse().map_err(|_| {
                    format!("since_ms must be milliseconds since the Unix epoch, not `{value}`")
                })?)
            }
            "follow" => follow = matches!(value, "1" | "true" | ""),
            other => {
                return Err(format!(
                    "unknown logs parameter `{other}` (expected function, run, since_ms, follow)"
                ));
            }
        }
    }
    Ok((parsed, follow))
}

/// One NDJSON line of a follow stream: a [`LogLine`], or how many lines the reader
/// missed because it fell behind.
pub(crate) fn follow_stream(
    first: Vec<LogLine>,
    receiver: broadcast::Receiver<Arc<LogLine>>,
    query: LogQuery,
) -> impl futures_util::Stream<Item = bytes::Bytes> + Send + 'static {
    let first = futures_util::stream::iter(
        first
            .into_iter()
            .map(|line| ndjson(&line))
            .collect::<Vec<_>>(),
    );
    let rest =
        futures_util::stream::unfold((receiver, query), move |(mut receiver, query)| async move {
            loop {
                let next = tokio::time::timeout(FOLLOW_HEARTBEAT, receiver.recv()).await;
                let chunk = match next {
                    Err(_) => bytes::Bytes::from_static(b"\n"),
                    Ok(Ok(line)) if query.matches(&line) => ndjson(&*line),
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(missed))) => {
                        ndjson(&serde_json::json!({ "missed": missed }))
                    }
                    // The workflow was removed.
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                return Some((chunk, (receiver, query)));
            }
        });
    futures_util::StreamExt::chain(first, rest)
}

/// `value` as one NDJSON line.
fn ndjson<T: Serialize + ?Sized>(value: &T) -> bytes::Bytes {
    // Lines and counts always serialize.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes.into()
}
