//! Regions across worker processes (services mode): the regions fan-out example
//! (`functions/regions/fanout.toml`, 4 branches) on two replicas with
//! `spread_branches`, so branches 0 and 2 run where the producer ran (the blob mapped
//! within the worker) and branches 1 and 3 on the other worker. Two clusters in the
//! same run:
//!
//! - `same host`: both workers share a host id, so the blob's sealed memory file passes
//!   to the other worker as a descriptor (SCM_RIGHTS) and is mapped there;
//! - `two hosts`: the workers have different host ids (on this one machine), so the
//!   blob's bytes go over HTTP/2, one copy.
//!
//! Per size it reports the median handoff (producer's seal → bytes usable in the
//! consumer) and end-to-end time (→ the consumer has read every byte) of each kind of
//! branch, as the consumers measured them.
//!
//! Run through `bench/regions-spread.sh`, which starts Redis and both clusters.
//! Environment: FAAS_URL_FD and FAAS_URL_NET (the two gateways), FAAS_TOKEN, FAAS_BIN;
//! optional REGIONS_SPREAD_MIB (default `1,10,100`).

use anyhow::{Context, bail, ensure};
use faas_bench::regions::{check_report, manifest};
use faas_bench::{Target, human, quantile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const MIB: usize = 1 << 20;
/// Untimed runs per size and cluster.
const WARMUP: usize = 2;

/// How a branch got the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Handoff {
    /// In the producer's worker: mapped.
    Local,
    /// In the other worker on the same host: a memory file descriptor, mapped.
    Descriptor,
    /// In the other worker on another host: the bytes over HTTP/2.
    Network,
}

/// The columns: each cluster's local branches, then its remote ones.
const COLUMNS: [(Handoff, Handoff); 4] = [
    (Handoff::Descriptor, Handoff::Local),
    (Handoff::Descriptor, Handoff::Descriptor),
    (Handoff::Network, Handoff::Local),
    (Handoff::Network, Handoff::Network),
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
    let target = |url: String| -> anyhow::Result<Target> {
        Ok(Target {
            url,
            token: var("FAAS_TOKEN")?,
            faas: var("FAAS_BIN")?,
        })
    };
    let clusters = [
        (Handoff::Descriptor, target(var("FAAS_URL_FD")?)?),
        (Handoff::Network, target(var("FAAS_URL_NET")?)?),
    ];
    let sizes: Vec<usize> = std::env::var("REGIONS_SPREAD_MIB")
        .unwrap_or_else(|_| "1,10,100".to_owned())
        .split(',')
        .map(|size| size.trim().parse().context("REGIONS_SPREAD_MIB"))
        .collect::<anyhow::Result<_>>()?;
    let dir = faas_testing::temp_dir();
    let spread = manifest(
        dir.path(),
        "regions-spread.toml",
        "functions/regions/fanout.toml",
        &[(
            "concurrency = 4",
            "concurrency = 4\nreplicas = 2\nspread_branches = true".to_owned(),
        )],
    )?;
    for (_, cluster) in &clusters {
        cluster.deploy(&spread)?;
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;

    println!("# Regions across worker processes: 4 spread branches, 2 on the other worker\n");
    println!(
        "Each cluster runs branches 0 and 2 in the producer's worker (mapped) and 1 and 3 in \
         the other worker.\n"
    );
    println!(
        "| size | handoff, same host: local | descriptor | two hosts: local | HTTP/2 | \
         end-to-end, same host: local | descriptor | two hosts: local | HTTP/2 | runs |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for size in sizes {
        let len = size * MIB;
        let runs = match size {
            0..=10 => 10,
            11..=100 => 5,
            _ => 3,
        };
        let mut samples: BTreeMap<(Handoff, Handoff), (Vec<Duration>, Vec<Duration>)> =
            BTreeMap::new();
        for (remote, cluster) in &clusters {
            for run in 0..WARMUP + runs {
                let reports = run_once(&client, &cluster.url, len).await?;
                if run < WARMUP {
                    continue;
                }
                for report in &reports {
                    let branch = report["branch"].as_u64().context("a branch number")?;
                    let kind = if branch % 2 == 0 {
                        Handoff::Local
                    } else {
                        *remote
                    };
                    let (handoff, read) = check_report(report, len)?;
                    let entry = samples.entry((*remote, kind)).or_default();
                    entry.0.push(handoff);
                    entry.1.push(handoff + read);
                }
            }
        }
        let mut median = |kind: (Handoff, Handoff), end_to_end: bool| {
            samples
                .get_mut(&kind)
                .map_or("-".to_owned(), |(handoffs, totals)| {
                    let samples = if end_to_end { totals } else { handoffs };
                    human(quantile(samples, 0.5))
                })
        };
        let cells: Vec<String> = [false, true]
            .into_iter()
            .flat_map(|end_to_end| COLUMNS.map(|kind| (kind, end_to_end)))
            .map(|(kind, end_to_end)| median(kind, end_to_end))
            .collect();
        println!("| {size} MiB | {} | {runs} |", cells.join(" | "));
    }
    Ok(())
}

/// One run: POSTs the byte count `len` to the fan-out route; the 4 consumers' reports.
async fn run_once(client: &reqwest::Client, url: &str, len: usize) -> anyhow::Result<Vec<Value>> {
    let response = client
        .post(format!("{url}/regions-fanout"))
        .body(len.to_string())
        .send()
        .await?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        bail!("{status}: {body}");
    }
    let reports: Vec<Value> = serde_json::from_str(&body).with_context(|| body.clone())?;
    ensure!(reports.len() == 4, "expected 4 reports: {body}");
    Ok(reports)
}
