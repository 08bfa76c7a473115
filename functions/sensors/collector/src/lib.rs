//! Sensor pipeline, step 1 (`collector`): takes one perception message (a Karmem
//! `sensors.km:Perception`, as a sensor sent it) and returns one `sensors.km:Location`
//! region per detected object, each carrying the frame's sensor, sequence number and
//! send time so the later steps need no other context.
//!
//! With config `forward = "<channel>"` (channel mode) it also publishes every
//! location on that channel, which starts one assembler run per object.

use faas_sdk::step::{Context, Region};
use sensor_common::sensors::{Location, PerceptionView};

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let bytes = sensor_common::single_input(&inputs, "Perception")?;
    let locations = locations(&bytes)?;
    if let Some(channel) = sensor_common::forward_channel() {
        sensor_common::forward_all(&channel, &locations)?;
    }
    Ok(locations
        .iter()
        .map(|location| sensor_common::region("Location", location))
        .collect())
}

/// The encoded locations of the perception `bytes`, one per detection, in frame order.
fn locations(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let frame = PerceptionView::root(bytes);
    frame
        .objects()
        .iter()
        .map(|object| {
            let location = Location {
                sensor_id: frame.sensor_id(),
                seq: frame.seq(),
                sent_at_us: frame.sent_at_us(),
                object_id: object.object_id(),
                x: object.x(),
                y: object.y(),
            };
            location.encode().map_err(|err| err.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::locations;
    use sensor_common::sensors::{Detection, Location, Perception};

    #[test]
    fn one_location_per_detection_with_the_frame_header() {
        let frame = Perception {
            sensor_id: 2,
            seq: 41,
            sent_at_us: 1_700_000_000_000_000,
            objects: vec![
                Detection {
                    object_id: 7,
                    x: 1.5,
                    y: 250.0,
                },
                Detection {
                    object_id: 9,
                    x: 500.0,
                    y: 3.25,
                },
            ],
        };
        let out = locations(&frame.encode().unwrap()).unwrap();
        let decoded: Vec<Location> = out.iter().map(|b| Location::decode(b)).collect();
        assert_eq!(decoded.len(), 2);
        assert_eq!(
            (decoded[0].object_id, decoded[0].x, decoded[0].y),
            (7, 1.5, 250.0)
        );
        assert_eq!(
            (decoded[1].object_id, decoded[1].x, decoded[1].y),
            (9, 500.0, 3.25)
        );
        assert!(decoded.iter().all(|l| l.sensor_id == 2 && l.seq == 41));
        assert!(decoded.iter().all(|l| l.sent_at_us == frame.sent_at_us));
    }

    #[test]
    fn an_empty_frame_has_no_locations() {
        let frame = Perception::default();
        assert!(locations(&frame.encode().unwrap()).unwrap().is_empty());
    }
}
