//! A function that misbehaves on purpose, to show that a bad guest fails only its own
//! request: `/misbehave/trap` traps, `/misbehave/loop` never returns,
//! `/misbehave/hog` allocates until it hits the memory limit, `/misbehave/hoard`
//! hoards host memory through regions (which count against the same limit),
//! `/misbehave/ok` answers.
//! `/misbehave/slow?ms=N` sleeps N ms, then answers with its config's `label`: tests use
//! it to hold a request in flight across a redeploy or a shutdown.
//! `/misbehave/hold?mb=N&ms=M` writes N MiB of fresh memory and holds it M ms: many at
//! once hold many times that, within the instance's memory limit each. `/misbehave/count`
//! counts the requests its instance has seen. `/misbehave/shout?kib=K&lines=N` logs N
//! lines of K KiB (by default 1000 of 8 KiB).
//! `/misbehave/forge` logs one line whose text holds a line break and a forged line of
//! the platform's log after it.
//! `/misbehave/scatter` writes every other page of a fresh 4 MiB buffer (hundreds of
//! runs of written pages, as an interpreter's heap has) after counting the bytes in it
//! that are not zero, which it answers: 0 unless an earlier instance's data leaked.

use faas_sdk::http::{Request, Response};
use std::sync::atomic::{AtomicU32, Ordering};

/// Counts requests seen by this instance: always 1 when every request gets a fresh
/// instance, which is what `/misbehave/count` shows.
static SEEN: AtomicU32 = AtomicU32::new(0);

/// What `/misbehave/forge` logs: a guest's line that, written raw, would start a line
/// of its own in the platform's log that looks like the platform's.
const FORGED_LINE: &str = "done\n2026-01-01T00:00:00.000000Z ERROR faas_gateway: forged by a guest";

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    match req.path() {
        "/misbehave/trap" => panic!("trapping on purpose"),
        "/misbehave/loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "/misbehave/hog" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "/misbehave/slow" => {
            let ms = req
                .query_param("ms")
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(100);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            let label = faas_sdk::config::get("label").unwrap_or_default();
            Response::text(200, format!("slept {ms} ms as {label}\n"))
        }
        "/misbehave/hold" => {
            let param = |name: &str| {
                req.query_param(name)
                    .and_then(|value| value.parse().ok())
                    .unwrap_or(1u64)
            };
            let held = vec![1u8; (param("mb") as usize) << 20];
            std::thread::sleep(std::time::Duration::from_millis(param("ms")));
            Response::text(
                200,
                format!("held {} MiB\n", std::hint::black_box(held).len() >> 20),
            )
        }
        "/misbehave/hoard" => {
            let chunk = vec![7u8; 1 << 20];
            let mut regions = Vec::new();
            loop {
                regions.push(faas_sdk::step::Region::from_bytes("bytes", &chunk));
                std::hint::black_box(&regions);
            }
        }
        "/misbehave/shout" => {
            // Far more log text than a workflow's log budget: it must stay bounded.
            let param = |name: &str, default: usize| {
                req.query_param(name)
                    .and_then(|value| value.parse().ok())
                    .unwrap_or(default)
            };
            let line = "x".repeat(param("kib", 8) << 10);
            for _ in 0..param("lines", 1000) {
                faas_sdk::log::info(&line);
            }
            Response::text(200, "shouted\n")
        }
        "/misbehave/forge" => {
            faas_sdk::log::info(FORGED_LINE);
            Response::text(200, "forged\n")
        }
        "/misbehave/scatter" => {
            const PAGE: usize = 4096;
            let mut buffer = vec![0u8; 4 << 20];
            let stale = buffer.iter().filter(|&&byte| byte != 0).count();
            for page in buffer.chunks_mut(2 * PAGE) {
                page[0] = 0xAB;
            }
            std::hint::black_box(&buffer);
            Response::text(200, format!("{stale}\n"))
        }
        "/misbehave/count" => {
            let seen = SEEN.fetch_add(1, Ordering::SeqCst) + 1;
            Response::text(200, format!("{seen}\n"))
        }
        _ => Response::text(200, "still fine\n"),
    }
}
