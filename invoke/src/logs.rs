//! A guest's log lines on their way from the worker that ran it to where a tenant
//! reads them (`faas logs`): the [`LogLine`] both sides share and the [`LogSink`] a
//! worker hands them to.

use serde::{Deserialize, Serialize};

/// The longest text one line keeps, in bytes; the rest is cut (and the line says so),
/// so that a guest printing one huge line costs a bounded amount.
pub const MAX_LOG_LINE_BYTES: usize = 4 * 1024;

/// How severe a line is: the level a guest gave `faas_sdk::log`, or the stream it
/// wrote to (stdout and stderr are `info`: they share one pipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// `log::trace`.
    Trace,
    /// `log::debug`.
    Debug,
    /// `log::info` and stdout.
    Info,
    /// `log::warn`, and a step's failed attempt that is retried.
    Warn,
    /// `log::error` and stderr, and a failed event.
    Error,
}

/// Where a line came from: the guest, or the platform speaking of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The guest's standard output and error (WASI), which share one pipe.
    Output,
    /// The `faas:platform/log` interface (`faas_sdk::log`).
    Log,
    /// The platform, saying why an event of the function failed (the worker: a trap,
    /// a limit, a deadline, no valid response; the gateway: no worker took it, or its
    /// worker went away), so that its tenant sees it beside the guest's own lines and
    /// not only in the one response or run that failed.
    Platform,
}

/// One line a guest wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When the worker took it, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The workflow's tenant (used to scope who may read it, never shown to others).
    pub tenant: String,
    /// The workflow.
    pub workflow: String,
    /// The function (or step's function) that wrote it.
    pub function: String,
    /// The step, when it ran as a step of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The run, when it ran as a step of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Its level.
    pub level: LogLevel,
    /// Where it came from.
    pub source: LogSource,
    /// The text, at most [`MAX_LOG_LINE_BYTES`] (cut on a character boundary).
    pub text: String,
}

impl LogLine {
    /// Now, as a line's `time_ms`: milliseconds since the Unix epoch.
    pub fn now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64)
    }

    /// Cuts `text` to [`MAX_LOG_LINE_BYTES`], marking the cut; returns whether it cut.
    /// The kept part is a new allocation of its own size: a log store keeps lines
    /// long after, and `truncate` would keep all of a guest's long text with them.
    pub fn cut_text(text: &mut String) -> bool {
        if text.len() <= MAX_LOG_LINE_BYTES {
            return false;
        }
        let end = text.floor_char_boundary(MAX_LOG_LINE_BYTES);
        *text = [&text[..end], " [cut]"].concat();
        true
    }

    /// The bytes this line holds, as a log store counts them against its budget.
    pub fn cost(&self) -> usize {
        // The fixed part approximates the struct and its small strings.
        128 + self.text.len()
            + self.workflow.len()
            + self.function.len()
            + self.step.as_ref().map_or(0, String::len)
            + self.run.as_ref().map_or(0, String::len)
    }
}

/// The most bytes of an event's failure message that the platform's own log prints.
pub const LOG_EXCERPT_BYTES: usize = 256;

/// The start of `text`, at most [`LOG_EXCERPT_BYTES`] (cut at a character boundary), for
/// a line of the platform's own log that prints it escaped (`detail = ?excerpt`): an
/// event's failure message can carry its guest's text (output, a returned error), which
/// must neither start lines of its own there (newlines, terminal escapes) nor let one
/// failing tenant fill the operator's log. The whole message is the tenant's to read,
/// in the response, the run and `faas logs`.
pub fn log_excerpt(text: &str) -> &str {
    let mut end = text.len().min(LOG_EXCERPT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Where a worker hands its guests' lines. Implementations must not block or wait:
/// this is called on the guest's path, so a slow store drops (and counts) lines
/// rather than slowing guests.
pub trait LogSink: Send + Sync {
    /// Takes one line.
    fn push(&self, line: LogLine);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_excerpt_is_short_and_printed_escaped() {
        let text = format!(
            "trapped\nFORGED line \u{1b}[31m{}",
            "é".repeat(LOG_EXCERPT_BYTES)
        );
        let excerpt = log_excerpt(&text);
        assert!(excerpt.len() <= LOG_EXCERPT_BYTES && text.starts_with(excerpt));
        let printed = format!("{excerpt:?}");
        assert!(
            !printed.contains('\n') && !printed.contains('\u{1b}'),
            "{printed}"
        );
        assert_eq!(log_excerpt("short"), "short");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary() {
        let mut text = "é".repeat(MAX_LOG_LINE_BYTES);
        assert!(LogLine::cut_text(&mut text));
        assert!(text.len() <= MAX_LOG_LINE_BYTES + " [cut]".len());
        assert!(text.ends_with(" [cut]"));
        assert!(
            text.capacity() < 2 * MAX_LOG_LINE_BYTES,
            "it holds {} bytes, not the guest's whole text",
            text.capacity()
        );
        let mut short = "hello".to_owned();
        assert!(!LogLine::cut_text(&mut short));
        assert_eq!(short, "hello");
    }
}
