//! One object's sliding window of recent locations and its compact stored form.
//!
//! Stored form (little-endian): a version byte (1), then per point, oldest first, the
//! send time in microseconds (u64) and x, y as f32 — 16 bytes a point, 129 bytes for
//! a full window of 8. f32 keeps positions within a 1 km square to about 0.1 mm, far
//! below sensor noise, and halves what every call reads and writes.
//!
//! Points are kept in send-time order rather than arrival order: with concurrent runs
//! (fan-out, or channel mode at high rates) two locations of one object may arrive
//! out of order, and the trajectory should still run forwards in time. A point older
//! than [`MAX_AGE_US`] before the newest is dropped, so an object that left and came
//! back (or a window left over from an earlier replay) does not join up with stale
//! positions.
//!
//! Concurrent updates of one object are last-writer-wins (the store has no
//! compare-and-set): two runs that read the same window each add their point, and the
//! later write loses the other's. The next location repairs the window's shape; the
//! only cost is a missing point in the history.

/// Format version written in the first byte.
const VERSION: u8 = 1;
/// Bytes one stored point takes.
const POINT_BYTES: usize = 16;
/// How far back, before the newest point, a window reaches.
pub const MAX_AGE_US: u64 = 2_000_000;

/// One location of the object: when it was sent and where it was.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub sent_at_us: u64,
    pub x: f64,
    pub y: f64,
}

/// The object's recent points, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    points: Vec<Point>,
}

impl Window {
    /// Reads a stored window; anything unreadable (another version, a torn value)
    /// counts as empty, since a window is only a cache of recent history.
    pub fn decode(bytes: &[u8]) -> Self {
        let Some((&VERSION, body)) = bytes.split_first() else {
            return Self::default();
        };
        if body.len() % POINT_BYTES != 0 {
            return Self::default();
        }
        let points = body
            .chunks_exact(POINT_BYTES)
            .map(|chunk| {
                let (time, xy) = chunk.split_at(8);
                let (x, y) = xy.split_at(4);
                Point {
                    sent_at_us: u64::from_le_bytes(time.try_into().expect("8 bytes")),
                    x: f64::from(f32::from_le_bytes(x.try_into().expect("4 bytes"))),
                    y: f64::from(f32::from_le_bytes(y.try_into().expect("4 bytes"))),
                }
            })
            .collect();
        Self { points }
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.points.len() * POINT_BYTES);
        out.push(VERSION);
        for point in &self.points {
            out.extend_from_slice(&point.sent_at_us.to_le_bytes());
            out.extend_from_slice(&(point.x as f32).to_le_bytes());
            out.extend_from_slice(&(point.y as f32).to_le_bytes());
        }
        out
    }

    /// Adds `point` in send-time order (replacing a point with the same send time, a
    /// redelivered location), then keeps the newest `capacity` points within
    /// [`MAX_AGE_US`] of the newest.
    pub fn add(&mut self, point: Point, capacity: usize) {
        match self
            .points
            .binary_search_by_key(&point.sent_at_us, |p| p.sent_at_us)
        {
            Ok(same) => self.points[same] = point,
            Err(at) => self.points.insert(at, point),
        }
        let newest = self.points.last().map_or(0, |p| p.sent_at_us);
        let horizon = newest.saturating_sub(MAX_AGE_US);
        self.points.retain(|p| p.sent_at_us >= horizon);
        let excess = self.points.len().saturating_sub(capacity);
        self.points.drain(..excess);
    }

    /// The points, oldest first.
    pub fn points(&self) -> &[Point] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_AGE_US, Point, Window};

    fn point(sent_at_us: u64, x: f64) -> Point {
        Point {
            sent_at_us,
            x,
            y: -x,
        }
    }

    fn times(window: &Window) -> Vec<u64> {
        window.points().iter().map(|p| p.sent_at_us).collect()
    }

    #[test]
    fn keeps_the_newest_points_in_time_order() {
        let mut window = Window::default();
        for t in [1, 2, 3, 5, 4] {
            window.add(point(t, t as f64), 3);
        }
        assert_eq!(times(&window), [3, 4, 5]);
        window.add(point(4, 40.0), 3);
        assert_eq!(times(&window), [3, 4, 5]);
        assert_eq!(window.points()[1].x, 40.0);
    }

    #[test]
    fn forgets_points_older_than_the_horizon() {
        let mut window = Window::default();
        window.add(point(1, 1.0), 8);
        window.add(point(2 + MAX_AGE_US, 2.0), 8);
        assert_eq!(times(&window), [2 + MAX_AGE_US]);
    }

    #[test]
    fn round_trips_through_the_stored_form() {
        let mut window = Window::default();
        window.add(point(7, 123.25), 8);
        window.add(point(9, 999.5), 8);
        let bytes = window.encode();
        assert_eq!(bytes.len(), 1 + 2 * 16);
        assert_eq!(Window::decode(&bytes), window);
    }

    #[test]
    fn unreadable_values_are_empty_windows() {
        assert_eq!(Window::decode(&[]), Window::default());
        assert_eq!(Window::decode(&[2, 0, 0]), Window::default());
        assert_eq!(Window::decode(&[1, 0, 0]), Window::default());
    }
}
