//! What keeping deployed routes costs the control plane as tenants fill their route
//! quotas: the gateway's index of route owners (`faas_workflow::RouteOwners`) and its
//! route table updated by one workflow's routes (`RouteTable::insert`), against the
//! peer measured in the same run, the way the gateway worked before them: each new
//! workflow's routes checked against every deployed route, and the table rebuilt from
//! every deployment.
//!
//! Every tenant holds its whole default quota: 100 workflows of 128 routes, the most a
//! workflow may have (exact routes and a prefix route, some nested). Per count of
//! tenants it times, in this process:
//!
//! - `deploy`: one more 128-route workflow of a new tenant, checked and added;
//! - `restart`: every workflow checked against those before it and added, in turn, as
//!   the gateway restores saved deployments when it starts.
//!
//! Run through `bench/route-owners.sh`. Environment: ROUTE_OWNERS_TENANTS, the counts of
//! tenants (default `1,2,4`); the peer's restart grows with their square.

use anyhow::Context;
use faas_bench::{human, quantile};
use faas_workflow::{Route, RouteOwners, RouteTable, Workflow, conflicts_by_scan};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Workflows per tenant: the default `--tenant-max-workflows`.
const WORKFLOWS: usize = 100;
/// Routes per workflow: `faas_workflow::MAX_HTTP_TRIGGERS`.
const ROUTES: usize = faas_workflow::MAX_HTTP_TRIGGERS;
/// Timed repetitions of a deploy, of which the median is printed.
const DEPLOYS: usize = 9;

/// A workflow of tenant `t` with `ROUTES` routes under `/t<t>/w<w>`: a prefix route
/// over its own exact routes, and exact routes.
fn workflow(t: usize, w: usize) -> Workflow {
    let mut text = format!(
        "name = \"t{t}-w{w}\"\ntenant = \"t{t}\"\n[functions.main]\ncomponent = \"main.wasm\"\n"
    );
    let mut route = |route: String| {
        text.push_str(&format!(
            "[[triggers.http]]\nroute = \"{route}\"\nfunction = \"main\"\n"
        ))
    };
    route(format!("/t{t}/w{w}/..."));
    for r in 1..ROUTES {
        route(format!("/t{t}/w{w}/api/route-{r}"));
    }
    Workflow::parse("workflow.toml", &text).expect("a valid generated workflow")
}

/// Every route of `deployed`, as the table's entries.
fn entries(deployed: &[Workflow]) -> impl Iterator<Item = (Route, usize)> + '_ {
    deployed.iter().enumerate().flat_map(|(at, workflow)| {
        let routes = workflow.http_triggers.iter();
        routes.map(move |trigger| (trigger.route.clone(), at))
    })
}

/// The peer's deploy: the scan, then the table rebuilt with the new workflow.
fn scanned_deploy(new: &Workflow, deployed: &mut Vec<Workflow>) -> RouteTable<usize> {
    assert!(
        !conflicts_by_scan(new, deployed.iter()),
        "{} conflicts",
        new.name
    );
    deployed.push(new.clone());
    RouteTable::new(entries(deployed))
}

/// The gateway's deploy: the index asked, then the index and table updated by the new
/// workflow's routes.
fn indexed_deploy(new: &Workflow, owners: &mut RouteOwners, table: &mut RouteTable<usize>) {
    assert_eq!(owners.conflict(new), None);
    owners.insert(new);
    for trigger in &new.http_triggers {
        table.insert(&trigger.route, usize::MAX);
    }
}

fn main() -> anyhow::Result<()> {
    let tenants: Vec<usize> = std::env::var("ROUTE_OWNERS_TENANTS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .map(|count| count.trim().parse().context("ROUTE_OWNERS_TENANTS"))
        .collect::<anyhow::Result<_>>()?;
    println!(
        "{:>7} {:>7} {:>13} {:>13} {:>6} {:>14} {:>14} {:>6}",
        "tenants", "routes", "deploy: scan", "index", "ratio", "restart: scan", "index", "ratio"
    );
    for count in tenants {
        let deployed: Vec<Workflow> = (0..count)
            .flat_map(|t| (0..WORKFLOWS).map(move |w| workflow(t, w)))
            .collect();
        let new = workflow(count, 0);

        let mut scan_times = Vec::new();
        let mut index_times = Vec::new();
        let mut owners: RouteOwners = deployed.iter().collect();
        let mut table = RouteTable::new(entries(&deployed));
        for _ in 0..DEPLOYS {
            let mut peer = deployed.clone();
            let started = Instant::now();
            black_box(scanned_deploy(&new, &mut peer));
            scan_times.push(started.elapsed());

            let started = Instant::now();
            indexed_deploy(&new, &mut owners, &mut table);
            index_times.push(started.elapsed());
            owners.remove(&new);
            for trigger in &new.http_triggers {
                table.remove_if(&trigger.route, |&at| at == usize::MAX);
            }
        }
        let median = |times: &mut Vec<Duration>| quantile(times, 0.5);
        let (scan_deploy, index_deploy) = (median(&mut scan_times), median(&mut index_times));

        let started = Instant::now();
        let mut restored = Vec::new();
        for workflow in &deployed {
            black_box(scanned_deploy(workflow, &mut restored));
        }
        let scan_restart = started.elapsed();
        let started = Instant::now();
        let (mut owners, mut table) = (RouteOwners::default(), RouteTable::default());
        for workflow in &deployed {
            indexed_deploy(workflow, &mut owners, &mut table);
        }
        let index_restart = started.elapsed();
        assert_eq!(table.len(), deployed.len() * ROUTES);

        let ratio = |peer: Duration, ours: Duration| peer.as_secs_f64() / ours.as_secs_f64();
        println!(
            "{:>7} {:>7} {:>13} {:>13} {:>5.0}x {:>14} {:>14} {:>5.0}x",
            count,
            deployed.len() * ROUTES,
            human(scan_deploy),
            human(index_deploy),
            ratio(scan_deploy, index_deploy),
            human(scan_restart),
            human(index_restart),
            ratio(scan_restart, index_restart),
        );
    }
    Ok(())
}
