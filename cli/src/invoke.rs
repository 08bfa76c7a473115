//! `faas invoke`: one HTTP request to a deployed workflow.

use crate::client::{Client, ServerArgs};
use anyhow::{Context, bail};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `faas invoke`.
#[derive(Debug, clap::Args)]
pub struct InvokeArgs {
    /// A route path (`/hello?name=you`) or a workflow name (its first route is used).
    target: String,
    /// HTTP method (default GET, or POST when a body is given).
    #[arg(long, short = 'X')]
    method: Option<String>,
    /// Request body.
    #[arg(long, short = 'd', conflicts_with = "data_file")]
    data: Option<String>,
    /// Read the request body from this file.
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// Extra header, `name: value` (repeatable).
    #[arg(long, short = 'H')]
    header: Vec<String>,
    /// Print the status line and headers before the body.
    #[arg(long, short = 'i')]
    include: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// Runs `faas invoke`; fails (exit 1) on a non-2xx answer, after printing it.
pub async fn run(args: InvokeArgs) -> anyhow::Result<()> {
    let url = args.server.url.trim_end_matches('/').to_owned();
    let path = if args.target.starts_with('/') {
        args.target.clone()
    } else {
        let status = Client::new(&args.server)?.status(&args.target).await?;
        let route = status
            .routes
            .first()
            .with_context(|| format!("workflow `{}` has no HTTP route", args.target))?;
        route.route.trim_end_matches("/...").to_owned()
    };
    let body = match (&args.data, &args.data_file) {
        (Some(data), _) => Some(data.clone().into_bytes()),
        (None, Some(file)) => {
            Some(std::fs::read(file).with_context(|| format!("reading {}", file.display()))?)
        }
        (None, None) => None,
    };
    let method = args
        .method
        .clone()
        .unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.to_owned());
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .with_context(|| format!("invalid method `{method}`"))?;
    let mut request = reqwest::Client::new().request(method, format!("{url}{path}"));
    for header in &args.header {
        let Some((name, value)) = header.split_once(':') else {
            bail!("header `{header}` is not `name: value`");
        };
        request = request.header(name.trim(), value.trim());
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("sending the request to {url}{path}"))?;
    let status = response.status();
    if args.include {
        println!("{:?} {status}", response.version());
        for (name, value) in response.headers() {
            println!("{name}: {}", String::from_utf8_lossy(value.as_bytes()));
        }
        println!();
    }
    let bytes = response
        .bytes()
        .await
        .context("reading the response body")?;
    let mut stdout = std::io::stdout();
    stdout.write_all(&bytes)?;
    // The body's last line would otherwise come out after the error below, on a
    // terminal that shows both streams.
    stdout.flush()?;
    if !status.is_success() {
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            eprintln!();
        }
        bail!("{path} answered {status}");
    }
    Ok(())
}
