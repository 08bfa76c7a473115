//! What a guest's stream append costs Redis with the stream quota (bench/stream-append.sh):
//! the append script of `faas_store::stream_quota`, against the plain
//! `XADD ... MAXLEN ~ 10000` it replaced, in the same run, on one redis-server.
//!
//!   stream-append [seconds per measurement] [rounds]
//!
//! Each measurement appends from 64 tasks over one multiplexed connection (as a
//! worker's guests do) to one stream. 200-byte entries: plain; the script at the
//! default quota (10,000 entries, 64 MiB), so trimming by length; and the script at
//! 1 MiB, so trimming by bytes at every append that reaches it. 1 MiB entries (as
//! large as a guest may append, which the platform appends outside the script:
//! `stream_quota::STAGE_FROM_BYTES`): plain `XADD ... MAXLEN = 64`, and the platform's
//! append at the default quota, trimming by bytes once 64 MiB are held. Each is
//! compared with the plain append of its size.

use faas_store::redis_connection::manage;
use faas_store::stream_quota::{self, StreamQuota};
use redis::aio::ConnectionManager;
use std::time::{Duration, Instant};

/// Concurrent appenders.
const TASKS: usize = 64;
/// Bytes of a small entry's payload.
const SMALL: usize = 200;
/// Bytes of a large entry's payload: the most a guest may append.
const LARGE: usize = 1 << 20;

/// How one measurement appends.
#[derive(Clone, Copy)]
enum Way {
    /// `XADD` with `MAXLEN <trim> <entries>`.
    Plain(&'static str, u64),
    /// The platform's append under a quota.
    Script(StreamQuota),
}

impl Way {
    fn name(self) -> String {
        match self {
            Self::Plain(trim, max_len) => format!("XADD MAXLEN {trim} {max_len}"),
            Self::Script(quota) => format!(
                "append, {} entries, {} KiB",
                quota.max_len,
                quota.max_bytes >> 10
            ),
        }
    }

    async fn append(self, connection: &ConnectionManager, payload: &[u8]) -> anyhow::Result<()> {
        let key = "t:bench:s";
        match self {
            Self::Plain(trim, max_len) => {
                let _: String = redis::cmd("XADD")
                    .arg(key)
                    .arg("MAXLEN")
                    .arg(trim)
                    .arg(max_len)
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

/// One measurement: how, entries of how many bytes, and the index of the plain
/// append of that size it is compared with.
struct Measurement {
    way: Way,
    payload: usize,
    peer: usize,
}

impl Measurement {
    fn name(&self) -> String {
        let size = if self.payload >= 1 << 20 {
            format!("{} MiB", self.payload >> 20)
        } else {
            format!("{} B", self.payload)
        };
        format!("{size}: {}", self.way.name())
    }
}

/// Appends of `payload` bytes per second for `duration`, from a stream emptied first.
async fn measure(
    connection: &ConnectionManager,
    way: Way,
    payload: usize,
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
            let payload = vec![b'x'; payload];
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
    let small = |way| Measurement {
        way,
        payload: SMALL,
        peer: 0,
    };
    let measurements = [
        small(Way::Plain("~", 10_000)),
        small(Way::Script(StreamQuota::default())),
        small(Way::Script(StreamQuota {
            max_bytes: 1 << 20,
            ..StreamQuota::default()
        })),
        Measurement {
            way: Way::Plain("=", 64),
            payload: LARGE,
            peer: 3,
        },
        Measurement {
            way: Way::Script(StreamQuota::default()),
            payload: LARGE,
            peer: 3,
        },
    ];
    let mut rates = vec![Vec::new(); measurements.len()];
    for round in 1..=rounds {
        // Alternated, so a slower minute of the machine falls on all of them.
        for (measurement, rates) in measurements.iter().zip(&mut rates) {
            let duration = Duration::from_secs(seconds);
            let rate = measure(&connection, measurement.way, measurement.payload, duration).await?;
            println!(
                "round {round}: {:<40} {rate:>9.0} appends/s",
                measurement.name()
            );
            rates.push(rate);
        }
    }
    println!();
    for (measurement, own_rates) in measurements.iter().zip(&rates) {
        let ratios: Vec<f64> = own_rates
            .iter()
            .zip(&rates[measurement.peer])
            .map(|(a, b)| a / b)
            .collect();
        let (low, high) = range(own_rates);
        let (ratio_low, ratio_high) = range(&ratios);
        println!(
            "{:<40} {low:>9.0}-{high:.0} appends/s, {ratio_low:.2}-{ratio_high:.2}x plain",
            measurement.name()
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
