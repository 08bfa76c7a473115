//! Perception frames as the pipeline's Karmem messages (`sensors.km:Perception`).
//!
//! The benchmark uses the schema-driven codec of `faas-karmem-compiler` rather than
//! generated code, so it needs no build script; the schema is the example's own file,
//! embedded at compile time. A frame is encoded once before a replay, and at send time
//! only the 8 bytes of SentAtUs are overwritten in place, at the field's offset taken
//! from the schema's computed layout (checked once by decoding a stamped message).

use crate::trace::Frame;
use anyhow::{Context, ensure};
use faas_karmem_compiler::{Schema, decode_to_json, encode_from_json, parse_str};
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

/// The pipeline's schema.
const SCHEMA: &str = include_str!("../../../functions/sensors/sensors.km");
/// The message type a frame is.
const PERCEPTION: &str = "Perception";

/// Encodes frames and stamps their send time.
pub struct Encoder {
    schema: Schema,
    /// Byte offset of SentAtUs in an encoded Perception (whose root table is at 0).
    sent_at: usize,
}

impl Encoder {
    /// Parses the schema and checks stamping on a sample message.
    pub fn new() -> anyhow::Result<Self> {
        let schema = parse_str("sensors.km", SCHEMA).context("parsing sensors.km")?;
        let perception = schema
            .find_struct(PERCEPTION)
            .context("sensors.km has no Perception")?;
        let field = perception
            .fields
            .iter()
            .find(|field| field.name == "SentAtUs")
            .context("Perception has no SentAtUs")?;
        ensure!(field.size == 8, "SentAtUs is not 8 bytes wide");
        let encoder = Self {
            sent_at: field.offset as usize,
            schema,
        };
        encoder.check()?;
        Ok(encoder)
    }

    /// The message for `frame`, its object ids shifted by `id_offset` and SentAtUs 0.
    pub fn frame(&self, frame: &Frame, id_offset: u32) -> anyhow::Result<Vec<u8>> {
        let objects: Vec<Value> = frame
            .detections
            .iter()
            .map(|d| json!({ "ObjectId": d.object_id + id_offset, "X": d.x, "Y": d.y }))
            .collect();
        let value = json!({
            "SensorId": frame.sensor_id,
            "Seq": frame.seq,
            "SentAtUs": 0,
            "Objects": objects,
        });
        encode_from_json(&self.schema, PERCEPTION, &value).context("encoding a Perception")
    }

    /// Sets SentAtUs of the encoded `message` to `micros`.
    pub fn stamp(&self, message: &mut [u8], micros: u64) {
        message[self.sent_at..self.sent_at + 8].copy_from_slice(&micros.to_le_bytes());
    }

    /// Stamps a sample message and decodes it again: the offset must hit SentAtUs and
    /// nothing else.
    fn check(&self) -> anyhow::Result<()> {
        let frame = Frame {
            at: std::time::Duration::ZERO,
            sensor_id: 1,
            seq: 3,
            detections: vec![crate::trace::Detection {
                object_id: 5,
                x: 1.5,
                y: 2.5,
            }],
        };
        let mut message = self.frame(&frame, 0)?;
        self.stamp(&mut message, 0x0123_4567_89AB_CDEF);
        let decoded = decode_to_json(&self.schema, PERCEPTION, &message)?;
        ensure!(
            decoded["SentAtUs"] == 0x0123_4567_89AB_CDEF_u64
                && decoded["Seq"] == 3
                && decoded["Objects"][0]["ObjectId"] == 5,
            "stamping SentAtUs at byte {} garbles the message: {decoded}",
            self.sent_at
        );
        Ok(())
    }
}

/// Microseconds since the Unix epoch, the unit of SentAtUs.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros() as u64
}
