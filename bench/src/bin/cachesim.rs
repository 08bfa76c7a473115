//! The native build of the `cachesim` function (bench/cachesim.sh): the same simulation
//! core, run on the settings given as `name=value` arguments, printing the same line of
//! JSON the function answers.
//!
//!   cachesim requests=2000000 capacity=65536

use cachesim_core::{SimConfig, simulate};

fn main() -> anyhow::Result<()> {
    let mut config = SimConfig::default();
    for arg in std::env::args().skip(1) {
        config.set_query(&arg).map_err(anyhow::Error::msg)?;
    }
    println!("{}", simulate(&config).to_json());
    Ok(())
}
