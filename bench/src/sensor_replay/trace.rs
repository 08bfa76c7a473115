//! The replay benchmark's synthetic traffic: deterministic perception messages from
//! two roadside sensors at 8 Hz each, watching objects move along the example's road
//! grid (`functions/sensors/matcher/src/roads.rs`, the matcher's own table).
//!
//! Cars, cyclists and pedestrians enter from outside along a street, drive or walk
//! at plausible speeds in their lane (or on the pavement), wait at intersections now
//! and then (red lights), turn at random (mostly straight on), and leave over the
//! edge of the square or by parking. Demand swells from quiet to rush and back over
//! the trace, so a sensor sees roughly 5 to 40 objects a frame. Sensor 0 watches the
//! west part of the square (x < 600 m), sensor 1 the east part (x > 400 m); objects in
//! the overlap are reported by both, as with real overlapping fields of view.
//! Detections carry Gaussian position noise and are occasionally missed (occlusion).
//!
//! Everything comes from one seeded xorshift generator, so a seed always gives the
//! same trace.

use crate::roads::{SEGMENTS, SIZE_M, Segment};
use std::time::Duration;

/// Sensors, and how often each sends a frame.
pub const SENSORS: u32 = 2;
pub const FRAME_HZ: u32 = 8;
/// Most objects one frame may carry (the schema's limit).
pub const MAX_OBJECTS: usize = 128;

/// The simulation step: one frame of one sensor; the sensors alternate.
const TICK_S: f64 = 1.0 / (SENSORS * FRAME_HZ) as f64;
/// Seconds simulated before recording, so the streets are not empty at the start.
const WARM_UP_S: f64 = 10.0;
/// Objects on the map in the quietest and the busiest moment of the trace.
const QUIET: f64 = 12.0;
const RUSH: f64 = 62.0;
/// The sensors' fields of view: sensor 0 sees x < WEST_EDGE, sensor 1 x > EAST_EDGE.
const WEST_EDGE: f64 = 600.0;
const EAST_EDGE: f64 = 400.0;
/// Standard deviation of a detection's position error per axis, in metres.
const NOISE_M: f64 = 0.3;
/// Chance that a sensor misses an object it should see in one frame.
const MISS: f64 = 0.03;

/// One detected object of a frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Detection {
    pub object_id: u32,
    pub x: f64,
    pub y: f64,
}

/// One perception message: what one sensor saw at `at` after the trace started.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub at: Duration,
    pub sensor_id: u32,
    pub seq: u64,
    pub detections: Vec<Detection>,
}

/// A trace of `seconds` of traffic from `seed`.
pub fn generate(seed: u64, seconds: u32) -> Vec<Frame> {
    let mut world = World::new(seed);
    let ticks = seconds * SENSORS * FRAME_HZ;
    let record_s = f64::from(seconds);
    let demand =
        |t: f64| QUIET + (RUSH - QUIET) * (std::f64::consts::PI * t / record_s).sin().powi(2);
    world.populate(demand(0.0));
    for _ in 0..(WARM_UP_S / TICK_S) as u32 {
        world.step(demand(0.0));
    }
    (0..ticks)
        .map(|tick| {
            let t = f64::from(tick) * TICK_S;
            world.step(demand(t));
            let sensor_id = tick % SENSORS;
            Frame {
                at: Duration::from_secs_f64(t),
                sensor_id,
                seq: u64::from(tick / SENSORS),
                detections: world.observe(sensor_id),
            }
        })
        .collect()
}

/// A small deterministic generator (xorshift64*); good enough for traffic, and no
/// extra crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so nearby seeds give unrelated streams (and 0 works).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high).
    pub fn range(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit(); // (0, 1]: ln is finite
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }

    /// Uniform index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize
    }
}

/// What kind of road user an object is: how fast it goes and where across the street.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Car,
    Bicycle,
    Pedestrian,
}

impl Kind {
    fn pick(rng: &mut Rng) -> Self {
        match rng.unit() {
            u if u < 0.7 => Kind::Car,
            u if u < 0.85 => Kind::Bicycle,
            _ => Kind::Pedestrian,
        }
    }

    /// Speeds in m/s: cars 29-50 km/h, cyclists 14-25 km/h, walkers 4-6 km/h.
    fn speeds(self) -> (f64, f64) {
        match self {
            Kind::Car => (8.0, 14.0),
            Kind::Bicycle => (4.0, 7.0),
            Kind::Pedestrian => (1.1, 1.7),
        }
    }

    /// Distance right of the centre line: lane, cycle lane, pavement (right-hand traffic).
    fn offset(self) -> f64 {
        match self {
            Kind::Car => 1.75,
            Kind::Bicycle => 3.5,
            Kind::Pedestrian => 6.0,
        }
    }

    /// Chance of waiting at an intersection, and for how long (seconds).
    fn stop(self) -> (f64, f64, f64) {
        match self {
            Kind::Car | Kind::Bicycle => (0.3, 1.0, 6.0),
            Kind::Pedestrian => (0.5, 2.0, 10.0),
        }
    }
}

/// One road user moving along a segment.
struct Mover {
    id: u32,
    kind: Kind,
    segment: usize,
    /// Travelling from the segment's `from` to its `to` (else the other way).
    forward: bool,
    /// Metres travelled along the segment in the direction of travel.
    along: f64,
    speed: f64,
    /// Seconds left waiting at the intersection ahead.
    waiting: f64,
}

impl Mover {
    fn segment(&self) -> &'static Segment {
        &SEGMENTS[self.segment]
    }

    /// Unit direction of travel.
    fn heading(&self) -> (f64, f64) {
        let (dx, dy) = self.segment().direction();
        if self.forward { (dx, dy) } else { (-dx, -dy) }
    }

    /// The intersection the mover is heading for.
    fn next_node(&self) -> (f64, f64) {
        let segment = self.segment();
        if self.forward {
            segment.to
        } else {
            segment.from
        }
    }

    /// Where it is: on the centre line, shifted right by its kind's offset.
    fn position(&self) -> (f64, f64) {
        let segment = self.segment();
        let along = if self.forward {
            self.along
        } else {
            segment.length() - self.along
        };
        let (x, y) = segment.point_at(along);
        let (dx, dy) = self.heading();
        let offset = self.kind.offset();
        (x + dy * offset, y - dx * offset)
    }
}

/// Where a mover can go at an intersection.
enum Turn {
    /// Onto `segment`, in its `forward` direction.
    Onto { segment: usize, forward: bool },
    /// Off the map, straight on over the edge.
    Leave,
}

/// The traffic on the map.
struct World {
    rng: Rng,
    movers: Vec<Mover>,
    next_id: u32,
}

impl World {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            movers: Vec::new(),
            next_id: 1,
        }
    }

    /// Places `count` movers anywhere on the streets.
    fn populate(&mut self, count: f64) {
        for _ in 0..count as usize {
            let segment = self.rng.below(SEGMENTS.len());
            let forward = self.rng.chance(0.5);
            let along = self.rng.range(0.0, SEGMENTS[segment].length());
            self.spawn(segment, forward, along);
        }
    }

    fn spawn(&mut self, segment: usize, forward: bool, along: f64) {
        let kind = Kind::pick(&mut self.rng);
        let (low, high) = kind.speeds();
        let speed = self.rng.range(low, high);
        self.movers.push(Mover {
            id: self.next_id,
            kind,
            segment,
            forward,
            along,
            speed,
            waiting: 0.0,
        });
        self.next_id += 1;
    }

    /// Advances one tick towards `target` movers on the map: arrivals come faster
    /// below it, and parking (leaving mid-street) is likelier above it.
    fn step(&mut self, target: f64) {
        let population = self.movers.len() as f64;
        let arrivals_per_s = 0.5 + 0.5 * (target - population).max(0.0);
        if self.rng.chance((arrivals_per_s * TICK_S).min(1.0)) {
            self.arrive();
        }
        let parking_per_s = if population > target { 0.08 } else { 0.01 };
        let mut movers = std::mem::take(&mut self.movers);
        movers.retain_mut(|mover| !self.rng.chance(parking_per_s * TICK_S) && self.advance(mover));
        self.movers = movers;
    }

    /// A new mover entering the square along a street from outside.
    fn arrive(&mut self) {
        let entries: Vec<(usize, bool)> = (0..SEGMENTS.len())
            .flat_map(|segment| [(segment, true), (segment, false)])
            .filter(|&(segment, forward)| {
                let s = &SEGMENTS[segment];
                let (start, (dx, dy)) = if forward {
                    (s.from, s.direction())
                } else {
                    (s.to, (-s.direction().0, -s.direction().1))
                };
                !inside((start.0 - dx, start.1 - dy))
            })
            .collect();
        let (segment, forward) = entries[self.rng.below(entries.len())];
        self.spawn(segment, forward, 0.0);
    }

    /// Moves `mover` one tick; false when it left the map.
    fn advance(&mut self, mover: &mut Mover) -> bool {
        let (low, high) = mover.kind.speeds();
        mover.speed = (mover.speed + 0.2 * self.rng.normal()).clamp(low, high);
        if mover.waiting > 0.0 {
            mover.waiting -= TICK_S;
            return true;
        }
        mover.along += mover.speed * TICK_S;
        let length = mover.segment().length();
        if mover.along < length {
            return true;
        }
        let overshoot = mover.along - length;
        match self.turn(mover) {
            Turn::Leave => false,
            Turn::Onto { segment, forward } => {
                mover.segment = segment;
                mover.forward = forward;
                mover.along = overshoot;
                let (p, shortest, longest) = mover.kind.stop();
                if self.rng.chance(p) {
                    mover.along = 0.0;
                    mover.waiting = self.rng.range(shortest, longest);
                }
                true
            }
        }
    }

    /// Picks where `mover` goes at the intersection it reached: straight on three
    /// times as likely as each turn, never back the way it came.
    fn turn(&mut self, mover: &Mover) -> Turn {
        let node = mover.next_node();
        let heading = mover.heading();
        let mut options: Vec<(Turn, f64)> = Vec::new();
        if !inside((node.0 + heading.0, node.1 + heading.1)) {
            options.push((Turn::Leave, 3.0));
        }
        for (segment, s) in SEGMENTS.iter().enumerate() {
            if segment == mover.segment {
                continue;
            }
            let forward = s.from == node;
            if !forward && s.to != node {
                continue;
            }
            let (dx, dy) = s.direction();
            let straight = if forward {
                (dx, dy) == heading
            } else {
                (-dx, -dy) == heading
            };
            options.push((
                Turn::Onto { segment, forward },
                if straight { 3.0 } else { 1.0 },
            ));
        }
        let total: f64 = options.iter().map(|(_, weight)| weight).sum();
        let mut pick = self.rng.range(0.0, total);
        for (turn, weight) in options {
            if pick < weight {
                return turn;
            }
            pick -= weight;
        }
        Turn::Leave // only reached through rounding at the very top of the range
    }

    /// What sensor `sensor_id` reports now: every mover in its field of view, except
    /// the ones it misses, at a noisy position, by id, at most [`MAX_OBJECTS`].
    fn observe(&mut self, sensor_id: u32) -> Vec<Detection> {
        let mut seen = Vec::new();
        for mover in &self.movers {
            let (x, y) = mover.position();
            let visible = if sensor_id == 0 {
                x < WEST_EDGE
            } else {
                x > EAST_EDGE
            };
            if !visible || self.rng.chance(MISS) {
                continue;
            }
            seen.push(Detection {
                object_id: mover.id,
                x: x + NOISE_M * self.rng.normal(),
                y: y + NOISE_M * self.rng.normal(),
            });
        }
        seen.truncate(MAX_OBJECTS);
        seen
    }
}

/// Whether `point` lies in the covered square.
fn inside((x, y): (f64, f64)) -> bool {
    (0.0..=SIZE_M).contains(&x) && (0.0..=SIZE_M).contains(&y)
}

#[cfg(test)]
mod tests {
    use super::{FRAME_HZ, MAX_OBJECTS, SENSORS, generate};

    #[test]
    fn a_seed_always_gives_the_same_trace() {
        assert_eq!(generate(7, 3), generate(7, 3));
        assert_ne!(generate(7, 3), generate(8, 3));
    }

    #[test]
    fn sensors_alternate_at_their_rate_within_the_object_limit() {
        let frames = generate(1, 20);
        assert_eq!(frames.len(), (20 * SENSORS * FRAME_HZ) as usize);
        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(frame.sensor_id, i as u32 % SENSORS);
            assert_eq!(frame.seq, (i as u32 / SENSORS) as u64);
            assert!(frame.detections.len() <= MAX_OBJECTS);
        }
        let counts: Vec<usize> = frames.iter().map(|f| f.detections.len()).collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min >= 3 && *max <= 50, "objects per frame {min}..{max}");
    }
}
