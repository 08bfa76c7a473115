//! `faas logs`: a workflow's guests' log lines, once or followed.

use crate::client::{Client, ServerArgs};
use crate::output::OutputFormat;
use anyhow::{Context, bail};
use faas_gateway::admin::LogQuery;
use faas_invoke::{LogLine, LogSource};
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The arguments of `faas logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The workflow's name.
    workflow: String,
    /// Only lines of this function or step.
    #[arg(long)]
    function: Option<String>,
    /// Only lines of this run (see `faas runs`).
    #[arg(long)]
    run: Option<String>,
    /// Keep printing new lines until interrupted.
    #[arg(short, long)]
    follow: bool,
    /// Only lines from this long ago on: a number and s, m, h or d (`10m`).
    #[arg(long, value_parser = parse_age)]
    since: Option<Duration>,
    /// Output format (`json`: one JSON object per line).
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(flatten)]
    server: ServerArgs,
}

/// Parses `10m`-like ages.
fn parse_age(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not an age like 30s, 10m, 2h or 1d"))?;
    let seconds = match unit {
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{text}`: the unit must be s, m, h or d")),
    };
    Ok(Duration::from_secs(number.saturating_mul(seconds)))
}

/// Runs `faas logs`.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.server)?;
    let since_ms = match args.since {
        Some(age) => Some(
            SystemTime::now()
                .checked_sub(age)
                .unwrap_or(UNIX_EPOCH)
                .duration_since(UNIX_EPOCH)
                .context("the clock is before 1970")?
                .as_millis() as u64,
        ),
        None => None,
    };
    let query = LogQuery {
        function: args.function,
        run: args.run,
        since_ms,
        tenant: None,
    };
    if !args.follow {
        let logs = client.logs(&args.workflow, &query).await?;
        for line in &logs.lines {
            print_line(line, args.output)?;
        }
        if logs.dropped > 0 && matches!(args.output, OutputFormat::Text) {
            eprintln!(
                "({} older lines were dropped: the workflow's log budget is full)",
                logs.dropped
            );
        }
        return Ok(());
    }
    let mut response = client.follow_logs(&args.workflow, &query).await?;
    let mut pending = Vec::new();
    while let Some(chunk) = response.chunk().await.context("following logs")? {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            follow_line(&line[..end], args.output)?;
        }
    }
    bail!(
        "the gateway ended the log stream (was `{}` or its tenant removed, or the token \
         revoked?)",
        args.workflow
    )
}

/// One NDJSON line of a follow stream: a log line, a count of missed lines, or a
/// heartbeat (empty).
fn follow_line(json: &[u8], format: OutputFormat) -> anyhow::Result<()> {
    if json.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let value: serde_json::Value =
        serde_json::from_slice(json).context("the gateway sent a line that is not JSON")?;
    if let Some(missed) = value.get("missed") {
        eprintln!("({missed} lines missed: this reader fell behind)");
        return Ok(());
    }
    let line: LogLine =
        serde_json::from_value(value).context("the gateway sent an unexpected log line")?;
    print_line(&line, format)
}

fn print_line(line: &LogLine, format: OutputFormat) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string(line)?)?,
        OutputFormat::Text => writeln!(out, "{}", text_line(line))?,
    }
    // A follower reads lines as they come, even through a pipe.
    out.flush()?;
    Ok(())
}

/// `line` as `faas logs` prints it: time of day (UTC), workflow, function (or step and
/// run), level, and text, which the platform's own lines (why an event failed) start
/// with `[platform]`.
fn text_line(line: &LogLine) -> String {
    let ms = line.time_ms % 86_400_000;
    let (hours, minutes) = (ms / 3_600_000, ms / 60_000 % 60);
    let (seconds, millis) = (ms / 1000 % 60, ms % 1000);
    let who = match (&line.step, &line.run) {
        (Some(step), Some(run)) => format!("{step} run={run}"),
        _ => line.function.clone(),
    };
    let level = format!("{:?}", line.level).to_uppercase();
    let text = shown(&line.text);
    let (from, text) = match line.source {
        LogSource::Platform => ("[platform] ", text),
        // A guest's line cannot pass for one of the platform's.
        LogSource::Output | LogSource::Log if text.starts_with("[platform]") => {
            ("", format!("\\{text}"))
        }
        LogSource::Output | LogSource::Log => ("", text),
    };
    format!(
        "{hours:02}:{minutes:02}:{seconds:02}.{millis:03}Z {} {who} {level} {from}{text}",
        line.workflow
    )
}

/// `text` with what a terminal would act on rather than show escaped (`\u{1b}`): the
/// control characters but tab (a line break would start a line that looks like
/// another, escape sequences move the cursor, retitle the window or write the
/// clipboard of whoever reads the logs, the operator included) and the
/// bidirectional controls that reorder what follows them.
fn shown(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let acted_on = (c.is_control() && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if acted_on {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::{parse_age, text_line};
    use faas_invoke::{LogLevel, LogLine, LogSource};
    use std::time::Duration;

    #[test]
    fn a_text_line_says_who_and_marks_the_platforms_lines() {
        let mut line = LogLine {
            time_ms: 3_723_004,
            tenant: "t".into(),
            workflow: "wc".into(),
            function: "merge".into(),
            step: Some("merge".into()),
            run: Some("r1".into()),
            level: LogLevel::Warn,
            source: LogSource::Log,
            text: "merged".into(),
        };
        assert_eq!(
            text_line(&line),
            "01:02:03.004Z wc merge run=r1 WARN merged"
        );
        line.source = LogSource::Platform;
        line.text = "attempt 1 of 3 failed, retrying: x".into();
        assert_eq!(
            text_line(&line),
            "01:02:03.004Z wc merge run=r1 WARN [platform] attempt 1 of 3 failed, retrying: x"
        );
    }

    #[test]
    fn a_guests_text_moves_no_cursor_and_passes_for_no_platform_line() {
        let mut line = LogLine {
            time_ms: 0,
            tenant: "t".into(),
            workflow: "wc".into(),
            function: "split".into(),
            step: None,
            run: None,
            level: LogLevel::Error,
            source: LogSource::Output,
            text: "ok\n00:00:00.000Z wc split ERROR [platform] forged\u{1b}]52;c;eA==\u{7}\r\u{202e}\tend"
                .into(),
        };
        let shown = text_line(&line);
        assert_eq!(
            shown,
            "00:00:00.000Z wc split ERROR ok\\u{a}00:00:00.000Z wc split ERROR [platform] \
             forged\\u{1b}]52;c;eA==\\u{7}\\u{d}\\u{202e}\tend"
        );
        line.text = "[platform] attempt 1 of 3 failed".into();
        assert_eq!(
            text_line(&line),
            "00:00:00.000Z wc split ERROR \\[platform] attempt 1 of 3 failed"
        );
    }

    #[test]
    fn ages_parse_with_their_unit_and_bad_ones_say_why() {
        assert_eq!(parse_age("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_age("45"), Ok(Duration::from_secs(45)));
        assert!(parse_age("10y").unwrap_err().contains("unit"));
        assert!(parse_age("m").unwrap_err().contains("not an age"));
    }
}
