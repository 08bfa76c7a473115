//! Fan-out/fan-in with 1, 4, 16 and 64 branches: one workflow run on one worker,
//! against the same functions chained with separate HTTP calls through the gateway
//! (how Spin users chain components today). Both modes hash the same payload in
//! every branch, and the driver checks they agree.
//!
//! Run through `bench/workflow-fanout.sh`, which starts the platform.

use anyhow::{Context, ensure};
use faas_bench::{Target, ms, quantile};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const BRANCHES: [u32; 4] = [1, 4, 16, 64];
const PAYLOAD_BYTES: usize = 64 * 1024;
const LATENCY_RUNS: usize = 30;
const THROUGHPUT_FOR: Duration = Duration::from_secs(3);
const CLIENTS: usize = 4;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let target = Target::from_env()?;
    let dir = std::env::temp_dir().join(format!("faas-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let component = faas_testing::component_path("fanout-bench");
    for branches in BRANCHES {
        let path = dir.join(format!("fanout-{branches}.toml"));
        std::fs::write(&path, workflow_manifest(&component, branches))?;
        target.deploy(&path)?;
    }
    let path = dir.join("fanout-http.toml");
    std::fs::write(&path, http_manifest(&component))?;
    target.deploy(&path)?;

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    println!(
        "payload {PAYLOAD_BYTES} bytes to every branch; latency over {LATENCY_RUNS} sequential runs; \
         throughput with {CLIENTS} concurrent clients for {}s",
        THROUGHPUT_FOR.as_secs()
    );
    println!(
        "\n{:>8} | {:>12} {:>12} | {:>12} {:>12} | {:>8} | {:>10} {:>10} | {:>6}",
        "branches",
        "run p50 ms",
        "run p90 ms",
        "http p50 ms",
        "http p90 ms",
        "speedup",
        "runs/s",
        "http/s",
        "ratio"
    );
    for branches in BRANCHES {
        let run = Mode::Workflow { branches };
        let http = Mode::HttpChain { branches };
        let a = run.once(&client, &target.url).await?;
        let b = http.once(&client, &target.url).await?;
        ensure!(a == b, "the two modes disagree: {a} vs {b}");
        ensure!(a["branches"] == branches, "wrong branch count in {a}");
        let (run_p50, run_p90) = latency(&run, &client, &target.url).await?;
        let (http_p50, http_p90) = latency(&http, &client, &target.url).await?;
        let run_rate = throughput(&run, &client, &target.url).await?;
        let http_rate = throughput(&http, &client, &target.url).await?;
        println!(
            "{:>8} | {:>12} {:>12} | {:>12} {:>12} | {:>7.2}x | {:>10.1} {:>10.1} | {:>5.2}x",
            branches,
            ms(run_p50),
            ms(run_p90),
            ms(http_p50),
            ms(http_p90),
            http_p50.as_secs_f64() / run_p50.as_secs_f64(),
            run_rate,
            http_rate,
            run_rate / http_rate
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[derive(Clone, Copy)]
enum Mode {
    /// One run of workflow `fanout-<branches>`.
    Workflow { branches: u32 },
    /// source, then `branches` concurrent work calls, then sink, each an HTTP call.
    HttpChain { branches: u32 },
}

impl Mode {
    async fn once(self, client: &reqwest::Client, url: &str) -> anyhow::Result<serde_json::Value> {
        let body = match self {
            Mode::Workflow { branches } => {
                let response = client
                    .post(format!("{url}/fanout-{branches}"))
                    .send()
                    .await?;
                ensure!(
                    response.status().is_success(),
                    "run failed: {}",
                    response.text().await?
                );
                response.bytes().await?
            }
            Mode::HttpChain { branches } => {
                let payload =
                    call(client, &format!("{url}/fanout-http/source"), Vec::new()).await?;
                let mut calls = JoinSet::new();
                for _ in 0..branches {
                    let (client, url, payload) = (client.clone(), url.to_owned(), payload.clone());
                    calls.spawn(async move {
                        call(&client, &format!("{url}/fanout-http/work"), payload).await
                    });
                }
                let mut digests = Vec::with_capacity(32 * branches as usize);
                while let Some(digest) = calls.join_next().await {
                    digests.extend_from_slice(&digest??);
                }
                call(client, &format!("{url}/fanout-http/sink"), digests)
                    .await?
                    .into()
            }
        };
        serde_json::from_slice(&body).context("parsing the result")
    }
}

async fn call(client: &reqwest::Client, url: &str, body: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    let response = client.post(url).body(body).send().await?;
    ensure!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    Ok(response.bytes().await?.to_vec())
}

async fn latency(
    mode: &Mode,
    client: &reqwest::Client,
    url: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let mut samples = Vec::with_capacity(LATENCY_RUNS);
    for _ in 0..LATENCY_RUNS {
        let started = Instant::now();
        mode.once(client, url).await?;
        samples.push(started.elapsed());
    }
    Ok((quantile(&mut samples, 0.5), quantile(&mut samples, 0.9)))
}

async fn throughput(mode: &Mode, client: &reqwest::Client, url: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let (mode, client, url) = (*mode, client.clone(), url.to_owned());
        clients.spawn(async move {
            let mut runs = 0u64;
            while started.elapsed() < THROUGHPUT_FOR {
                mode.once(&client, &url).await?;
                runs += 1;
            }
            anyhow::Ok(runs)
        });
    }
    let mut runs = 0;
    while let Some(count) = clients.join_next().await {
        runs += count??;
    }
    Ok(runs as f64 / started.elapsed().as_secs_f64())
}

fn workflow_manifest(component: &Path, branches: u32) -> String {
    let component = component.display();
    let function = |role: &str| {
        format!(
            "[functions.{role}]\ncomponent = \"{component}\"\nkind = \"step\"\nconfig = {{ role = \"{role}\", payload_bytes = \"{PAYLOAD_BYTES}\" }}\n\n"
        )
    };
    format!(
        "name = \"fanout-{branches}\"\ntenant = \"bench\"\n\n{}{}{}\
         [steps.source]\nfunction = \"source\"\ninput = \"bytes\"\noutput = \"bytes\"\n\n\
         [steps.work]\nfunction = \"work\"\ninput = \"bytes\"\noutput = \"bytes\"\n\n\
         [steps.sink]\nfunction = \"sink\"\ninput = \"bytes\"\noutput = \"json\"\n\n\
         [[edges]]\nfrom = \"source\"\nto = \"work\"\ntype = \"bytes\"\nfan_out = {branches}\n\n\
         [[edges]]\nfrom = \"work\"\nto = \"sink\"\ntype = \"bytes\"\njoin = {{ timeout_ms = 60000 }}\n\n\
         [workflow]\nconcurrency = 64\ntimeout_ms = 120000\n\n\
         [[triggers.http]]\nroute = \"/fanout-{branches}\"\nstep = \"source\"\n",
        function("source"),
        function("work"),
        function("sink")
    )
}

fn http_manifest(component: &Path) -> String {
    format!(
        "name = \"fanout-http\"\ntenant = \"bench\"\n\n[functions.chain]\ncomponent = \"{}\"\nconfig = {{ payload_bytes = \"{PAYLOAD_BYTES}\" }}\n\n\
         [[triggers.http]]\nroute = \"/fanout-http/...\"\nfunction = \"chain\"\n",
        component.display()
    )
}
