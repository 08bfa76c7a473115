//! A function that misbehaves on purpose, to show that a bad guest fails only its own
//! request: `/misbehave/trap` traps, `/misbehave/loop` never returns,
//! `/misbehave/hog` allocates until it hits the memory limit, `/misbehave/ok` answers.

use faas_sdk::http::{Request, Response};

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
        _ => Response::text(200, "still fine\n"),
    }
}
