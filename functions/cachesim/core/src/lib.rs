//! Cache replacement simulation, after the cache-replacement benchmarks of Hockley
//! (2021): an LRU and an LFU cache of the same capacity replay the same deterministic
//! request trace, and the result is their hit ratios plus a checksum of every hit and
//! eviction.
//!
//! The trace ([`Trace`]) mixes a Zipf-like hot set (popularity density proportional to
//! rank^(-2/3), i.e. Zipf with α = 2/3, over `universe` keys) with periodic scans of
//! keys never seen before, which flush an LRU cache but not an LFU one. Its randomness
//! is a SplitMix64 generator with a fixed seed, so a run is the same everywhere.
//!
//! Everything is integer arithmetic over plain vectors (an open-addressing hash table,
//! an intrusive list, a binary heap), with no dependencies: the same code is compiled
//! to wasm32-wasip2 for the `cachesim` function and natively for `bench/`, so the two
//! builds compute the same checksum and differ only in their compiler and runtime.

use std::fmt::Write as _;

/// The settings of one simulation. `name=value` pairs set them ([`SimConfig::set`]),
/// from a query string in the function and from the command line natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// How many requests the trace has.
    pub requests: u64,
    /// How many keys each cache holds.
    pub capacity: u32,
    /// How many distinct keys the hot set has.
    pub universe: u32,
    /// A scan starts every this many requests...
    pub scan_every: u64,
    /// ...and lasts this many requests, each for a key never requested before.
    pub scan_len: u64,
    /// The trace generator's seed.
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            requests: 2_000_000,
            capacity: 1 << 16,
            universe: 1 << 20,
            scan_every: 100_000,
            scan_len: 20_000,
            seed: 2021,
        }
    }
}

/// Bounds that keep every index within a `u32` and the memory within reason.
const MAX_REQUESTS: u64 = 1 << 32;
const MAX_CAPACITY: u32 = 1 << 22;
const MAX_UNIVERSE: u32 = 1 << 30;

impl SimConfig {
    /// Sets the setting `name` (a field's name) from its decimal `value`.
    ///
    /// # Errors
    /// A message naming the setting if the name is unknown or the value is not a number
    /// within its bounds.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let number: u64 = value
            .parse()
            .map_err(|_| format!("`{name}` must be a whole number, not `{value}`"))?;
        let within = |max: u64| {
            if (1..=max).contains(&number) {
                Ok(number)
            } else {
                Err(format!("`{name}` must be between 1 and {max}"))
            }
        };
        match name {
            "requests" => self.requests = within(MAX_REQUESTS)?,
            "capacity" => self.capacity = within(MAX_CAPACITY.into())? as u32,
            "universe" => self.universe = within(MAX_UNIVERSE.into())? as u32,
            "scan_every" => self.scan_every = within(MAX_REQUESTS)?,
            "scan_len" => self.scan_len = number,
            "seed" => self.seed = number,
            _ => return Err(format!("unknown setting `{name}`")),
        }
        if self.scan_len >= self.scan_every {
            return Err("`scan_len` must be less than `scan_every`".to_owned());
        }
        Ok(())
    }

    /// Applies every `name=value` pair of a query string (`a=1&b=2`).
    ///
    /// # Errors
    /// As [`SimConfig::set`], or for a pair without `=`.
    pub fn set_query(&mut self, query: &str) -> Result<(), String> {
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not name=value"))?;
            self.set(name, value)?;
        }
        Ok(())
    }
}

/// SplitMix64 (Steele, Lea and Flood 2014): tiny, fast, and good enough to drive a
/// trace.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The request trace: a key per request.
#[derive(Debug, Clone)]
pub struct Trace {
    config: SimConfig,
    rng: SplitMix64,
    emitted: u64,
    /// Keys of past scans: each scan request takes the next one.
    scanned: u32,
}

impl Trace {
    /// The trace `config` describes.
    pub fn new(config: &SimConfig) -> Self {
        Self {
            config: *config,
            rng: SplitMix64::new(config.seed),
            emitted: 0,
            scanned: 0,
        }
    }
}

/// Spreads key indices over all of `u32` (an odd multiplier is a bijection), so keys
/// are not small consecutive numbers.
fn scramble(index: u32) -> u32 {
    index.wrapping_mul(0x9E37_79B1)
}

impl Iterator for Trace {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.emitted == self.config.requests {
            return None;
        }
        let in_scan = self.emitted % self.config.scan_every < self.config.scan_len;
        self.emitted += 1;
        let index = if in_scan {
            // Indices past the hot set, each used once.
            self.scanned = self.scanned.wrapping_add(1);
            self.config.universe.wrapping_add(self.scanned)
        } else {
            // u^3 for a uniform u in [0, 1): P(rank < x) = x^(1/3).
            let u = self.rng.next_u64() >> 32;
            let cubed = (((u * u) >> 32) * u) >> 32;
            ((cubed * u64::from(self.config.universe)) >> 32) as u32
        };
        Some(scramble(index))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.config.requests - self.emitted).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// What one access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The key was cached.
    Hit,
    /// The key was not cached; it is now, in place of `evicted` if the cache was full.
    Miss {
        /// The key it replaced.
        evicted: Option<u32>,
    },
}

/// A marker for "no slot" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// An open-addressing (linear probing) hash table from key to slot, with
/// backward-shift deletion. An entry is `key << 32 | slot`.
#[derive(Debug, Clone)]
struct SlotMap {
    entries: Vec<u64>,
    mask: usize,
    shift: u32,
}

const EMPTY: u64 = u64::MAX;

impl SlotMap {
    /// A table for up to `capacity` keys, at most half full.
    fn new(capacity: u32) -> Self {
        let size = (capacity as usize * 2).next_power_of_two().max(2);
        Self {
            entries: vec![EMPTY; size],
            mask: size - 1,
            shift: 64 - size.trailing_zeros(),
        }
    }

    fn home(&self, key: u32) -> usize {
        // Fibonacci hashing: the multiplication's top bits.
        (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The index of `key`'s entry, or of the empty entry where it would go.
    fn find(&self, key: u32) -> Result<usize, usize> {
        let mut i = self.home(key);
        loop {
            let entry = self.entries[i];
            if entry == EMPTY {
                return Err(i);
            }
            if (entry >> 32) as u32 == key {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn get(&self, key: u32) -> Option<u32> {
        self.find(key).ok().map(|i| self.entries[i] as u32)
    }

    fn insert(&mut self, key: u32, slot: u32) {
        let (Ok(i) | Err(i)) = self.find(key);
        self.entries[i] = (u64::from(key) << 32) | u64::from(slot);
    }

    fn remove(&mut self, key: u32) {
        let Ok(mut hole) = self.find(key) else {
            return;
        };
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let entry = self.entries[j];
            if entry == EMPTY {
                break;
            }
            // The entry may fill the hole if the hole lies between its home and j.
            let home = self.home((entry >> 32) as u32);
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.entries[hole] = entry;
                hole = j;
            }
        }
        self.entries[hole] = EMPTY;
    }
}

/// A least-recently-used cache: a hash table into slots kept in an intrusive list,
/// most recent first.
#[derive(Debug, Clone)]
pub struct Lru {
    map: SlotMap,
    keys: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    capacity: u32,
}

impl Lru {
    /// An empty cache of `capacity` keys (at least 1).
    pub fn new(capacity: u32) -> Self {
        let capacity = capacity.max(1);
        Self {
            map: SlotMap::new(capacity),
            keys: Vec::with_capacity(capacity as usize),
            prev: Vec::with_capacity(capacity as usize),
            next: Vec::with_capacity(capacity as usize),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = (self.prev[slot as usize], self.next[slot as usize]);
        match prev {
            NIL => self.head = next,
            prev => self.next[prev as usize] = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.prev[next as usize] = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        self.prev[slot as usize] = NIL;
        self.next[slot as usize] = self.head;
        match self.head {
            NIL => self.tail = slot,
            head => self.prev[head as usize] = slot,
        }
        self.head = slot;
    }

    /// Requests `key`.
    pub fn access(&mut self, key: u32) -> Access {
        if let Some(slot) = self.map.get(key) {
            if slot != self.head {
                self.unlink(slot);
                self.push_front(slot);
            }
            return Access::Hit;
        }
        let (slot, evicted) = if (self.keys.len() as u32) < self.capacity {
            self.keys.push(key);
            self.prev.push(NIL);
            self.next.push(NIL);
            (self.keys.len() as u32 - 1, None)
        } else {
            let slot = self.tail;
            let evicted = self.keys[slot as usize];
            self.map.remove(evicted);
            self.unlink(slot);
            self.keys[slot as usize] = key;
            (slot, Some(evicted))
        };
        self.map.insert(key, slot);
        self.push_front(slot);
        Access::Miss { evicted }
    }
}

/// A least-frequently-used cache (ties go to the least recently used): a hash table
/// into slots ordered by a binary min-heap of `frequency << 40 | last access`.
#[derive(Debug, Clone)]
pub struct Lfu {
    map: SlotMap,
    keys: Vec<u32>,
    /// Heap entries: (priority, slot).
    heap: Vec<(u64, u32)>,
    /// Each slot's index in `heap`.
    position: Vec<u32>,
    tick: u64,
    capacity: u32,
}

/// Where the frequency starts in a priority; below it, the tick of the last access.
const FREQUENCY_SHIFT: u32 = 40;

impl Lfu {
    /// An empty cache of `capacity` keys (at least 1).
    pub fn new(capacity: u32) -> Self {
        let capacity = capacity.max(1);
        Self {
            map: SlotMap::new(capacity),
            keys: Vec::with_capacity(capacity as usize),
            heap: Vec::with_capacity(capacity as usize),
            position: Vec::with_capacity(capacity as usize),
            tick: 0,
            capacity,
        }
    }

    fn place(&mut self, index: usize, entry: (u64, u32)) {
        self.heap[index] = entry;
        self.position[entry.1 as usize] = index as u32;
    }

    fn sift_up(&mut self, mut index: usize) {
        let entry = self.heap[index];
        while index > 0 {
            let parent = (index - 1) / 2;
            if self.heap[parent].0 <= entry.0 {
                break;
            }
            self.place(index, self.heap[parent]);
            index = parent;
        }
        self.place(index, entry);
    }

    fn sift_down(&mut self, mut index: usize) {
        let entry = self.heap[index];
        let len = self.heap.len();
        loop {
            let left = 2 * index + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].0 < self.heap[left].0 {
                right
            } else {
                left
            };
            if self.heap[child].0 >= entry.0 {
                break;
            }
            self.place(index, self.heap[child]);
            index = child;
        }
        self.place(index, entry);
    }

    /// Requests `key`.
    pub fn access(&mut self, key: u32) -> Access {
        self.tick += 1;
        if let Some(slot) = self.map.get(key) {
            let index = self.position[slot as usize] as usize;
            let frequency = self.heap[index].0 >> FREQUENCY_SHIFT;
            self.heap[index].0 = ((frequency + 1) << FREQUENCY_SHIFT) | self.tick;
            self.sift_down(index);
            return Access::Hit;
        }
        let priority = (1 << FREQUENCY_SHIFT) | self.tick;
        if (self.keys.len() as u32) < self.capacity {
            let slot = self.keys.len() as u32;
            self.keys.push(key);
            self.position.push(self.heap.len() as u32);
            self.heap.push((priority, slot));
            self.map.insert(key, slot);
            self.sift_up(self.heap.len() - 1);
            return Access::Miss { evicted: None };
        }
        let slot = self.heap[0].1;
        let evicted = self.keys[slot as usize];
        self.map.remove(evicted);
        self.keys[slot as usize] = key;
        self.map.insert(key, slot);
        self.heap[0].0 = priority;
        self.sift_down(0);
        Access::Miss {
            evicted: Some(evicted),
        }
    }
}

/// Folds what each access did into a checksum (FNV-1a style), so two runs agree only
/// if every hit and every eviction agrees.
#[derive(Debug, Clone, Copy)]
struct Checksum(u64);

impl Checksum {
    fn add(&mut self, key: u32, access: Access) {
        let word = match access {
            Access::Hit => (1 << 32) | u64::from(key),
            Access::Miss { evicted: None } => u64::from(key),
            Access::Miss { evicted: Some(old) } => (2 << 32) | u64::from(old),
        };
        self.0 = (self.0 ^ word).wrapping_mul(0x0000_0100_0000_01B3);
    }
}

/// The outcome of a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The settings it ran with.
    pub config: SimConfig,
    /// Requests the LRU cache held.
    pub lru_hits: u64,
    /// Requests the LFU cache held.
    pub lfu_hits: u64,
    /// Every access of both caches, folded.
    pub checksum: u64,
}

impl Report {
    /// The report as one line of JSON (the same bytes in every build).
    pub fn to_json(&self) -> String {
        let ratio = |hits: u64| hits as f64 / self.config.requests as f64;
        let mut json = String::new();
        let _ = write!(
            json,
            r#"{{"requests":{},"capacity":{},"universe":{},"scan_every":{},"scan_len":{},"seed":{},"lru_hits":{},"lfu_hits":{},"lru_hit_ratio":{:.6},"lfu_hit_ratio":{:.6},"checksum":"{:016x}"}}"#,
            self.config.requests,
            self.config.capacity,
            self.config.universe,
            self.config.scan_every,
            self.config.scan_len,
            self.config.seed,
            self.lru_hits,
            self.lfu_hits,
            ratio(self.lru_hits),
            ratio(self.lfu_hits),
            self.checksum,
        );
        json
    }
}

/// Replays the trace `config` describes through an LRU and an LFU cache.
pub fn simulate(config: &SimConfig) -> Report {
    let mut lru = Lru::new(config.capacity);
    let mut lfu = Lfu::new(config.capacity);
    let (mut lru_sum, mut lfu_sum) = (Checksum(0xCBF2_9CE4_8422_2325), Checksum(0));
    let (mut lru_hits, mut lfu_hits) = (0, 0);
    for key in Trace::new(config) {
        let access = lru.access(key);
        lru_hits += u64::from(access == Access::Hit);
        lru_sum.add(key, access);
        let access = lfu.access(key);
        lfu_hits += u64::from(access == Access::Hit);
        lfu_sum.add(key, access);
    }
    Report {
        config: *config,
        lru_hits,
        lfu_hits,
        checksum: lru_sum.0 ^ lfu_sum.0.rotate_left(32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    /// A reference LRU: a map from key to last-use tick, evicting the oldest.
    fn reference_lru(trace: &[u32], capacity: usize) -> Vec<Access> {
        let mut last: HashMap<u32, u64> = HashMap::new();
        let mut by_tick: BTreeMap<u64, u32> = BTreeMap::new();
        let mut out = Vec::new();
        for (tick, &key) in trace.iter().enumerate() {
            let tick = tick as u64;
            if let Some(old) = last.insert(key, tick) {
                by_tick.remove(&old);
                by_tick.insert(tick, key);
                out.push(Access::Hit);
                continue;
            }
            let evicted = (by_tick.len() == capacity).then(|| {
                let (_, victim) = by_tick.pop_first().unwrap();
                last.remove(&victim);
                victim
            });
            by_tick.insert(tick, key);
            out.push(Access::Miss { evicted });
        }
        out
    }

    /// A reference LFU: evicts the smallest (frequency, last use).
    fn reference_lfu(trace: &[u32], capacity: usize) -> Vec<Access> {
        let mut state: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut order: BTreeMap<(u64, u64), u32> = BTreeMap::new();
        let mut out = Vec::new();
        for (tick, &key) in trace.iter().enumerate() {
            let tick = tick as u64 + 1;
            if let Some(&(frequency, last)) = state.get(&key) {
                order.remove(&(frequency, last));
                order.insert((frequency + 1, tick), key);
                state.insert(key, (frequency + 1, tick));
                out.push(Access::Hit);
                continue;
            }
            let evicted = (order.len() == capacity).then(|| {
                let (_, victim) = order.pop_first().unwrap();
                state.remove(&victim);
                victim
            });
            order.insert((1, tick), key);
            state.insert(key, (1, tick));
            out.push(Access::Miss { evicted });
        }
        out
    }

    fn small_trace() -> Vec<u32> {
        let config = SimConfig {
            requests: 20_000,
            capacity: 64,
            universe: 500,
            scan_every: 1_000,
            scan_len: 150,
            seed: 7,
        };
        Trace::new(&config).collect()
    }

    #[test]
    fn lru_matches_the_reference() {
        let trace = small_trace();
        let mut lru = Lru::new(64);
        let ours: Vec<Access> = trace.iter().map(|&key| lru.access(key)).collect();
        assert_eq!(ours, reference_lru(&trace, 64));
    }

    #[test]
    fn lfu_matches_the_reference() {
        let trace = small_trace();
        let mut lfu = Lfu::new(64);
        let ours: Vec<Access> = trace.iter().map(|&key| lfu.access(key)).collect();
        assert_eq!(ours, reference_lfu(&trace, 64));
    }

    #[test]
    fn the_slot_map_survives_many_removals() {
        let mut map = SlotMap::new(100);
        let mut reference = HashMap::new();
        let mut rng = SplitMix64::new(1);
        for step in 0..100_000u32 {
            let key = (rng.next_u64() % 300) as u32;
            if reference.len() < 100 && step % 3 != 0 {
                map.insert(key, step);
                reference.insert(key, step);
            } else {
                map.remove(key);
                reference.remove(&key);
            }
            assert_eq!(map.get(key), reference.get(&key).copied());
        }
        for key in 0..300 {
            assert_eq!(map.get(key), reference.get(&key).copied());
        }
    }

    #[test]
    fn the_trace_is_deterministic_and_lfu_resists_scans() {
        let config = SimConfig {
            requests: 200_000,
            ..SimConfig::default()
        };
        let first = simulate(&config);
        assert_eq!(first, simulate(&config));
        assert!(first.lfu_hits > first.lru_hits, "{}", first.to_json());
        assert_ne!(
            first.checksum,
            simulate(&SimConfig { seed: 1, ..config }).checksum
        );
    }

    #[test]
    fn settings_are_checked() {
        let mut config = SimConfig::default();
        config.set_query("requests=10&capacity=3").unwrap();
        assert_eq!((config.requests, config.capacity), (10, 3));
        assert!(config.set("capacity", "0").is_err());
        assert!(config.set("bogus", "1").is_err());
        assert!(config.set_query("requests").is_err());
        assert!(config.set("scan_len", "100000").is_err());
    }
}
