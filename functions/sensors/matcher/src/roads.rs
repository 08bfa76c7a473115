//! The road graph the example ships with: a grid of 5 x 5 streets 250 m apart that
//! covers a 1 km square (coordinates in metres, origin at the south-west corner), cut
//! at the intersections into 40 segments of 250 m. Segment ids are the table indices.
//!
//! Dependency-free on purpose: the matcher snaps trajectories onto it, and the replay
//! benchmark (`bench/src/bin/sensor-replay.rs`) includes this same file to drive its
//! synthetic traffic along the streets, so the two can never disagree.

/// Side of the covered square, in metres.
pub const SIZE_M: f64 = 1000.0;
/// Streets in each direction.
pub const STREETS: usize = 5;
/// Distance between neighbouring parallel streets, in metres.
pub const BLOCK_M: f64 = SIZE_M / (STREETS - 1) as f64;
/// Segments per street (one per block).
const BLOCKS: usize = STREETS - 1;
/// How many segments the graph has: east-west ones first, then north-south ones.
pub const SEGMENT_COUNT: usize = 2 * STREETS * BLOCKS;

/// A straight piece of street between two neighbouring intersections, drawn from
/// south-west to north-east.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    pub from: (f64, f64),
    pub to: (f64, f64),
}

/// Every segment; a segment's id is its index.
pub const SEGMENTS: [Segment; SEGMENT_COUNT] = grid();

/// Builds the grid: street `s` of each direction, block `b` along it.
const fn grid() -> [Segment; SEGMENT_COUNT] {
    let zero = Segment {
        from: (0.0, 0.0),
        to: (0.0, 0.0),
    };
    let mut segments = [zero; SEGMENT_COUNT];
    let mut s = 0;
    while s < STREETS {
        let across = s as f64 * BLOCK_M;
        let mut b = 0;
        while b < BLOCKS {
            let (start, end) = (b as f64 * BLOCK_M, (b + 1) as f64 * BLOCK_M);
            // East-west street at y = across, then north-south street at x = across.
            segments[s * BLOCKS + b] = Segment {
                from: (start, across),
                to: (end, across),
            };
            segments[STREETS * BLOCKS + s * BLOCKS + b] = Segment {
                from: (across, start),
                to: (across, end),
            };
            b += 1;
        }
        s += 1;
    }
    segments
}

/// Where a point lies relative to a segment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Projection {
    /// Distance from the point to the segment, in metres.
    pub distance: f64,
    /// The segment's point closest to the point.
    pub x: f64,
    pub y: f64,
}

impl Segment {
    /// Length in metres.
    pub fn length(&self) -> f64 {
        (self.to.0 - self.from.0).hypot(self.to.1 - self.from.1)
    }

    /// Unit vector from `from` to `to`.
    pub fn direction(&self) -> (f64, f64) {
        let length = self.length();
        (
            (self.to.0 - self.from.0) / length,
            (self.to.1 - self.from.1) / length,
        )
    }

    /// The point `along` metres from `from` towards `to`.
    pub fn point_at(&self, along: f64) -> (f64, f64) {
        let (dx, dy) = self.direction();
        (self.from.0 + dx * along, self.from.1 + dy * along)
    }

    /// The closest point of the segment to `(x, y)` and the distance to it.
    pub fn project(&self, x: f64, y: f64) -> Projection {
        let (dx, dy) = self.direction();
        let along = ((x - self.from.0) * dx + (y - self.from.1) * dy).clamp(0.0, self.length());
        let (px, py) = self.point_at(along);
        Projection {
            distance: (x - px).hypot(y - py),
            x: px,
            y: py,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BLOCK_M, SEGMENTS, SIZE_M};

    #[test]
    fn forty_blocks_inside_the_square() {
        assert_eq!(SEGMENTS.len(), 40);
        for segment in SEGMENTS {
            assert!((segment.length() - BLOCK_M).abs() < 1e-9);
            for (x, y) in [segment.from, segment.to] {
                assert!((0.0..=SIZE_M).contains(&x) && (0.0..=SIZE_M).contains(&y));
            }
        }
    }

    #[test]
    fn projects_onto_the_closest_point() {
        let first = SEGMENTS[0]; // (0, 0) -> (250, 0)
        let p = first.project(100.0, 3.0);
        assert_eq!((p.x, p.y, p.distance), (100.0, 0.0, 3.0));
        let beyond = first.project(260.0, 0.0);
        assert_eq!((beyond.x, beyond.distance), (250.0, 10.0));
    }
}
