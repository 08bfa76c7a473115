//! Sensor pipeline, step 3 (`matcher`): takes an object's `sensors.km:Trajectory` and
//! snaps it onto the example's road graph (`roads.rs`, a 1 km street grid), returning
//! a `sensors.km:Match`. It also appends the match to the stream named by config `out`
//! (default `sensors:matches`) as one text entry,
//! `<SentAtUs> <sensor> <seq> <object> <segment> <distance m> <x> <y>`, from which
//! the replay benchmark measures end-to-end latency.
//!
//! What is snapped is the trajectory's *last* point, the object's current position;
//! the mean of the window would lag behind a moving object by half the window (about
//! 7 m at 50 km/h) and pull it towards the wrong street near intersections. The rest
//! of the window contributes the heading: a segment running across the direction of
//! travel is penalised by up to [`HEADING_WEIGHT_M`], so at an intersection an object
//! is matched to the street it drives along rather than the one it is crossing.

mod roads;

use faas_sdk::step::{Context, Region};
use roads::{Projection, SEGMENTS};
use sensor_common::sensors::{Match, TrajectoryView};

/// The stream matches go to when config `out` is not set.
const DEFAULT_OUT: &str = "sensors:matches";
/// Penalty, in metres, for a segment at right angles to the heading.
const HEADING_WEIGHT_M: f64 = 5.0;
/// Travel across the window below which the heading is noise and is ignored.
const MIN_TRAVEL_M: f64 = 2.0;

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let bytes = sensor_common::single_input(&inputs, "Trajectory")?;
    let trajectory = TrajectoryView::root(&bytes);
    let xs = trajectory.xs().to_vec();
    let ys = trajectory.ys().to_vec();
    let points: Vec<(f64, f64)> = xs.into_iter().zip(ys).collect();
    let Some((segment, projection)) = snap(&points) else {
        return Err(format!(
            "trajectory of object {} has no points",
            trajectory.object_id()
        ));
    };
    let matched = Match {
        sensor_id: trajectory.sensor_id(),
        seq: trajectory.seq(),
        sent_at_us: trajectory.sent_at_us(),
        object_id: trajectory.object_id(),
        segment_id: segment as u32,
        distance: projection.distance,
        x: projection.x,
        y: projection.y,
    };
    let out = faas_sdk::config::get("out").unwrap_or_else(|| DEFAULT_OUT.to_owned());
    faas_sdk::messaging::append(&out, entry(&matched))
        .map_err(|err| format!("appending to `{out}`: {err}"))?;
    let encoded = matched.encode().map_err(|err| err.to_string())?;
    Ok(vec![sensor_common::region("Match", &encoded)])
}

/// The stream entry for `matched`: SentAtUs first, so a reader can time it without
/// parsing the rest.
fn entry(matched: &Match) -> String {
    format!(
        "{} {} {} {} {} {:.3} {:.3} {:.3}",
        matched.sent_at_us,
        matched.sensor_id,
        matched.seq,
        matched.object_id,
        matched.segment_id,
        matched.distance,
        matched.x,
        matched.y
    )
}

/// The segment the trajectory `points` (oldest first) is on, and where its last point
/// projects onto it; `None` without points.
fn snap(points: &[(f64, f64)]) -> Option<(usize, Projection)> {
    let &(x, y) = points.last()?;
    let heading = heading(points);
    SEGMENTS
        .iter()
        .map(|segment| {
            let projection = segment.project(x, y);
            let penalty = heading.map_or(0.0, |(hx, hy)| {
                let (dx, dy) = segment.direction();
                // |sin| of the angle between heading and segment: 0 along, 1 across.
                HEADING_WEIGHT_M * (hx * dy - hy * dx).abs()
            });
            (projection.distance + penalty, projection)
        })
        .enumerate()
        .min_by(|(_, (a, _)), (_, (b, _))| a.total_cmp(b))
        .map(|(segment, (_, projection))| (segment, projection))
}

/// The unit direction of travel from the first to the last point, if the object moved
/// far enough for it to mean something.
fn heading(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let (first, last) = (points.first()?, points.last()?);
    let (dx, dy) = (last.0 - first.0, last.1 - first.1);
    let travel = dx.hypot(dy);
    (travel >= MIN_TRAVEL_M).then(|| (dx / travel, dy / travel))
}

#[cfg(test)]
mod tests {
    use super::{SEGMENTS, snap};

    #[test]
    fn snaps_the_last_point_to_the_nearest_street() {
        // Driving east along y = 250 with a 2 m lane offset, between x = 300 and 320.
        let points: Vec<(f64, f64)> = (0..8).map(|i| (300.0 + 3.0 * i as f64, 252.0)).collect();
        let (segment, projection) = snap(&points).unwrap();
        assert_eq!(SEGMENTS[segment].from, (250.0, 250.0));
        assert_eq!(SEGMENTS[segment].to, (500.0, 250.0));
        assert!((projection.distance - 2.0).abs() < 1e-9);
    }

    #[test]
    fn prefers_the_street_along_the_heading_at_an_intersection() {
        // Heading north on x = 500, now 1 m past the y = 500 crossing and 1.5 m east
        // of the centre line: the crossing street is nearer, the heading decides.
        let points: Vec<(f64, f64)> = (0..8).map(|i| (501.5, 487.0 + 2.0 * i as f64)).collect();
        let (segment, _) = snap(&points).unwrap();
        assert_eq!(SEGMENTS[segment].from, (500.0, 500.0));
        assert_eq!(SEGMENTS[segment].to, (500.0, 750.0));
    }

    #[test]
    fn a_standing_object_snaps_by_distance_alone() {
        let (segment, projection) = snap(&[(10.0, 700.0)]).unwrap();
        assert_eq!(SEGMENTS[segment].from, (0.0, 500.0));
        assert_eq!(projection.distance, 10.0);
        assert!(snap(&[]).is_none());
    }
}
