//! What a guest's stream append costs Redis with the stream quota (bench/stream-append.sh):
//! the append script of `faas_store::stream_quota`, against the plain
//! `XADD ... MAXLEN ~ 10000` it replaced, in the same run, on one redis-server.
//!
//!   stream-append [seconds per measurement] [rounds]
//!
//! Each measurement appends 200-byte entries from 64 tasks over one multiplexed
//! connection (as a worker's guests do) to one stream: plain; the script at the
//! default quota (10,000 entries, 64 MiB), so trimming by length; and the script at
//! 1 MiB, so trimming by bytes at every append that reaches it.

use faas_store::redis_connection::manage;
use faas_store::stream_quota::{self, StreamQuota};
use redis::aio::ConnectionManager;
use std::time::{Duration, Instant};

/// Concurrent appenders.
const TASKS: usize = 64;
/// Bytes of each entry's payload.
const PAYLOAD: usize = 200;

/// How one measurement appends.
#[derive(Clone, Copy)]
enum Way {
    Plain,
    Script(StreamQuota),
}

impl Way {
    fn name(self) -> String {
        match self {
            Self::Plain => "XADD MAXLEN ~ 10000".to_owned(),
            Self::Script(quota) => format!(
                "script, {} entries, {} KiB",
                quota.max_len,
                quota.max_bytes >> 10
            ),
        }
    }

    async fn append(self, connection: &ConnectionManager, payload: &[u8]) -> anyhow::Result<()> {
        let key = "t:bench:s";
        match self {
            Self::Plain => {
                let _: String = redis::cmd("XADD")
                    .arg(key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(10_000)
                    .arg("*")
                    .arg("payload")
                    .arg(payload)
                    .query_async(&mut connection.clone())
                    .await?;
            }
            Self::Script(quota) => {
                let fields: [(&str, &[u8]); 1] = [("payload", payload)];
                stream_quota::append(connection, quota, "bench", "s", key, &fields).await?;
            }
        }
        Ok(())
    }
}

/// Appends per second for `duration`, from a stream emptied first.
async fn measure(
    connection: &ConnectionManager,
    way: Way,
    duration: Duration,
) -> anyhow::Result<f64> {
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut connection.clone())
        .await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let connection = connection.clone();
        tasks.spawn(async move {
            let payload = vec![b'x'; PAYLOAD];
            let mut done = 0u64;
            while started.elapsed() < duration {
                way.append(&connection, &payload).await?;
                done += 1;
            }
            anyhow::Ok(done)
        });
    }
    let mut done = 0;
    while let Some(finished) = tasks.join_next().await {
        done += finished??;
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(5), |arg| arg.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |arg| arg.parse())?;
    let server = faas_testing::RedisServer::start();
    let connection = manage(redis::Client::open(server.url())?).await?;
    let ways = [
        Way::Plain,
        Way::Script(StreamQuota::default()),
        Way::Script(StreamQuota {
            max_bytes: 1 << 20,
            ..StreamQuota::default()
        }),
    ];
    let mut rates = vec![Vec::new(); ways.len()];
    for round in 1..=rounds {
        // Alternated, so a slower minute of the machine falls on all of them.
        for (way, rates) in ways.iter().zip(&mut rates) {
            let rate = measure(&connection, *way, Duration::from_secs(seconds)).await?;
            println!("round {round}: {:<32} {rate:>9.0} appends/s", way.name());
            rates.push(rate);
        }
    }
    println!();
    for (way, way_rates) in ways.iter().zip(&rates) {
        let ratios: Vec<f64> = way_rates
            .iter()
            .zip(&rates[0])
            .map(|(a, b)| a / b)
            .collect();
        let (low, high) = range(way_rates);
        let (ratio_low, ratio_high) = range(&ratios);
        println!(
            "{:<32} {low:>9.0}-{high:.0} appends/s, {ratio_low:.2}-{ratio_high:.2}x plain",
            way.name()
        );
    }
    Ok(())
}

/// The lowest and highest of `values`.
fn range(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(0.0, f64::max);
    (low, high)
}
