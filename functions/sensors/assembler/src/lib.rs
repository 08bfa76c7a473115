//! Sensor pipeline, step 2 (`assembler`, stateful): takes one `sensors.km:Location`
//! and returns the object's `sensors.km:Trajectory`, its last `window` (config,
//! default 8) locations oldest first, ending with this one.
//!
//! The window lives in the tenant's key-value store under `traj:<object id>`, so any
//! instance (and, with Redis, any process) continues where the last one stopped. Each
//! call reads the window, adds the point and writes it back.
//!
//! With config `forward = "<channel>"` (channel mode) it also publishes the trajectory
//! on that channel, which starts the matcher.

mod window;

use faas_sdk::step::{Context, Region};
use sensor_common::sensors::{LocationView, Trajectory};
use window::{Point, Window};

/// Locations kept per object when config `window` is not set.
const DEFAULT_WINDOW: usize = 8;
/// The largest `window` accepted, which keeps a stored window well under 1 KiB.
const MAX_WINDOW: usize = 64;

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let capacity = window_size()?;
    let bytes = sensor_common::single_input(&inputs, "Location")?;
    let location = LocationView::root(&bytes);
    let key = format!("traj:{}", location.object_id());
    let stored = faas_sdk::key_value::get(&key).map_err(|err| format!("reading {key}: {err}"))?;
    let mut window = stored.as_deref().map(Window::decode).unwrap_or_default();
    window.add(
        Point {
            sent_at_us: location.sent_at_us(),
            x: location.x(),
            y: location.y(),
        },
        capacity,
    );
    faas_sdk::key_value::set(&key, window.encode())
        .map_err(|err| format!("writing {key}: {err}"))?;
    let trajectory = Trajectory {
        sensor_id: location.sensor_id(),
        seq: location.seq(),
        sent_at_us: location.sent_at_us(),
        object_id: location.object_id(),
        xs: window.points().iter().map(|p| p.x).collect(),
        ys: window.points().iter().map(|p| p.y).collect(),
    };
    let encoded = trajectory.encode().map_err(|err| err.to_string())?;
    if let Some(channel) = sensor_common::forward_channel() {
        sensor_common::forward_all(&channel, std::slice::from_ref(&encoded))?;
    }
    Ok(vec![sensor_common::region("Trajectory", &encoded)])
}

/// Config `window`: how many locations a trajectory holds.
fn window_size() -> Result<usize, String> {
    match faas_sdk::config::get("window") {
        None => Ok(DEFAULT_WINDOW),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_WINDOW).contains(&n) => Ok(n),
            _ => Err(format!(
                "config `window` must be an integer from 1 to {MAX_WINDOW}, not {text:?}"
            )),
        },
    }
}
