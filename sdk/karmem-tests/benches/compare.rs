//! Karmem against serde_json, bincode and flatbuffers on the same data in the same run:
//! the Karmem paper's batch of temperature readings (10 and 10,000 items) and a record
//! with strings and nested tables. Encoding reuses one buffer per format; decoding reads
//! every field (Karmem also through its zero-copy views, flatbuffers with its verifier).
//!
//! `cargo bench -p faas-karmem-tests --bench compare` prints criterion's report, then a
//! summary table of times and ratios.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use faas_karmem_tests::l_bench as km;
use flatbuffers::{
    FlatBufferBuilder, Follow, ForwardsUOffset, Push, PushAlignment, Table, Vector, Verifiable,
    Verifier, WIPOffset,
};
use serde::{Deserialize, Serialize};

// ---- The data, as plain serde types for serde_json and bincode. ----

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Reading {
    timestamp: u64,
    value: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Batch {
    readings: Vec<Reading>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Address {
    street: String,
    city: String,
    zip: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Person {
    id: u64,
    name: String,
    email: String,
    age: u16,
    home: Address,
    work: Address,
    scores: Vec<f64>,
}

fn batch(n: usize) -> Batch {
    Batch {
        readings: (0..n as u64)
            .map(|i| Reading {
                timestamp: 1_700_000_000_000 + i * 1000,
                value: 20.0 + (i % 100) as f64 * 0.125,
            })
            .collect(),
    }
}

fn person() -> Person {
    let addr = |s: &str, c: &str, z| Address {
        street: s.to_string(),
        city: c.to_string(),
        zip: z,
    };
    Person {
        id: 1_234_567_890_123,
        name: "Ada Lovelace".into(),
        email: "ada.lovelace@analytical-engine.example".into(),
        age: 36,
        home: addr("12 St James's Square", "London", 10_001),
        work: addr("Analytical Engine Lane 1", "Marylebone", 10_002),
        scores: vec![98.5, 87.25, 91.0, 78.75, 88.0, 99.5, 65.25, 72.0],
    }
}

fn km_batch(b: &Batch) -> km::Batch {
    km::Batch {
        readings: b
            .readings
            .iter()
            .map(|r| km::Reading {
                timestamp: r.timestamp,
                value: r.value,
            })
            .collect(),
    }
}

fn km_person(p: &Person) -> km::Person {
    let a = |a: &Address| km::Address {
        street: a.street.clone(),
        city: a.city.clone(),
        zip: a.zip,
    };
    km::Person {
        id: p.id,
        name: p.name.clone(),
        email: p.email.clone(),
        age: p.age,
        home: a(&p.home),
        work: a(&p.work),
        scores: p.scores.clone(),
    }
}

// ---- Checksums over every field, so decoders cannot skip work. ----
//
// Integer sums rather than float sums or multiplicative hashes: their latency chains
// would dominate and hide the formats' own cost.

#[inline(always)]
fn mix(acc: u64, a: u64, b: u64) -> u64 {
    acc.wrapping_add(a ^ b)
}

fn sum_scores(it: impl Iterator<Item = f64>) -> u64 {
    it.fold(0, |acc, x| acc.wrapping_add(x.to_bits()))
}

fn sum_batch(b: &Batch) -> u64 {
    b.readings
        .iter()
        .fold(0, |acc, r| mix(acc, r.timestamp, r.value.to_bits()))
}

fn sum_person(p: &Person) -> u64 {
    let a = |a: &Address| (a.street.len() + a.city.len()) as u64 + u64::from(a.zip);
    let acc = mix(
        p.id,
        (p.name.len() + p.email.len()) as u64,
        u64::from(p.age),
    );
    mix(acc, a(&p.home), a(&p.work)).wrapping_add(sum_scores(p.scores.iter().copied()))
}

fn sum_km_batch_view(bytes: &[u8]) -> u64 {
    km::BatchView::root(bytes)
        .readings()
        .iter()
        .fold(0, |acc, r| mix(acc, r.timestamp(), r.value().to_bits()))
}

fn sum_km_person_view(bytes: &[u8]) -> u64 {
    let p = km::PersonView::root(bytes);
    // Strings are validated as UTF-8, like the flatbuffers verifier and serde do.
    let len = |s: faas_karmem::Str<'_>| s.to_str().map_or(0, str::len);
    let a = |a: km::AddressView<'_>| (len(a.street()) + len(a.city())) as u64 + u64::from(a.zip());
    let acc = mix(
        p.id(),
        (len(p.name()) + len(p.email())) as u64,
        u64::from(p.age()),
    );
    mix(acc, a(p.home()), a(p.work())).wrapping_add(sum_scores(p.scores().iter()))
}

// ---- flatbuffers, written by hand in the shape flatc generates. ----

/// `struct Reading { timestamp: ulong; value: double; }`
#[derive(Clone, Copy)]
#[repr(transparent)]
struct FbReading([u8; 16]);

impl FbReading {
    fn new(timestamp: u64, value: f64) -> Self {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&timestamp.to_le_bytes());
        b[8..].copy_from_slice(&value.to_le_bytes());
        FbReading(b)
    }
    fn timestamp(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().unwrap())
    }
    fn value(&self) -> f64 {
        f64::from_le_bytes(self.0[8..].try_into().unwrap())
    }
}

impl<'a> Follow<'a> for FbReading {
    type Inner = &'a FbReading;
    unsafe fn follow(buf: &'a [u8], loc: usize) -> &'a FbReading {
        // SAFETY: FbReading is 16 bytes with alignment 1; the verifier checked the range.
        unsafe { flatbuffers::follow_cast_ref::<FbReading>(buf, loc) }
    }
}

impl Push for FbReading {
    type Output = FbReading;
    unsafe fn push(&self, dst: &mut [u8], _written_len: usize) {
        dst[..16].copy_from_slice(&self.0);
    }
    fn alignment() -> PushAlignment {
        PushAlignment::new(8)
    }
}

impl flatbuffers::SimpleToVerifyInSlice for FbReading {}

impl Verifiable for FbReading {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), flatbuffers::InvalidFlatbuffer> {
        v.in_buffer::<Self>(pos)
    }
}

macro_rules! fb_table {
    ($name:ident) => {
        #[derive(Clone, Copy)]
        struct $name<'a>(Table<'a>);
        impl<'a> Follow<'a> for $name<'a> {
            type Inner = $name<'a>;
            unsafe fn follow(buf: &'a [u8], loc: usize) -> Self {
                // SAFETY: callers (flatbuffers::root after verification) pass a table position.
                $name(unsafe { Table::new(buf, loc) })
            }
        }
    };
}

fb_table!(FbBatch);
fb_table!(FbAddress);
fb_table!(FbPerson);

const VT0: u16 = 4;
const VT1: u16 = 6;
const VT2: u16 = 8;
const VT3: u16 = 10;
const VT4: u16 = 12;
const VT5: u16 = 14;
const VT6: u16 = 16;

impl<'a> FbBatch<'a> {
    fn readings(&self) -> Vector<'a, FbReading> {
        // SAFETY: slot types match the verifier below.
        unsafe {
            self.0
                .get::<ForwardsUOffset<Vector<'a, FbReading>>>(VT0, None)
        }
        .unwrap_or_default()
    }
}

impl Verifiable for FbBatch<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), flatbuffers::InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<Vector<'_, FbReading>>>("readings", VT0, false)?
            .finish();
        Ok(())
    }
}

impl<'a> FbAddress<'a> {
    fn street(&self) -> &'a str {
        // SAFETY: slot types match the verifier below.
        unsafe { self.0.get::<ForwardsUOffset<&str>>(VT0, None) }.unwrap_or("")
    }
    fn city(&self) -> &'a str {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<&str>>(VT1, None) }.unwrap_or("")
    }
    fn zip(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.0.get::<u32>(VT2, Some(0)) }.unwrap_or(0)
    }
}

impl Verifiable for FbAddress<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), flatbuffers::InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("street", VT0, false)?
            .visit_field::<ForwardsUOffset<&str>>("city", VT1, false)?
            .visit_field::<u32>("zip", VT2, false)?
            .finish();
        Ok(())
    }
}

impl<'a> FbPerson<'a> {
    fn id(&self) -> u64 {
        // SAFETY: slot types match the verifier below.
        unsafe { self.0.get::<u64>(VT0, Some(0)) }.unwrap_or(0)
    }
    fn name(&self) -> &'a str {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<&str>>(VT1, None) }.unwrap_or("")
    }
    fn email(&self) -> &'a str {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<&str>>(VT2, None) }.unwrap_or("")
    }
    fn age(&self) -> u16 {
        // SAFETY: as above.
        unsafe { self.0.get::<u16>(VT3, Some(0)) }.unwrap_or(0)
    }
    fn home(&self) -> Option<FbAddress<'a>> {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<FbAddress<'a>>>(VT4, None) }
    }
    fn work(&self) -> Option<FbAddress<'a>> {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<FbAddress<'a>>>(VT5, None) }
    }
    fn scores(&self) -> Vector<'a, f64> {
        // SAFETY: as above.
        unsafe { self.0.get::<ForwardsUOffset<Vector<'a, f64>>>(VT6, None) }.unwrap_or_default()
    }
}

impl Verifiable for FbPerson<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), flatbuffers::InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<u64>("id", VT0, false)?
            .visit_field::<ForwardsUOffset<&str>>("name", VT1, false)?
            .visit_field::<ForwardsUOffset<&str>>("email", VT2, false)?
            .visit_field::<u16>("age", VT3, false)?
            .visit_field::<ForwardsUOffset<FbAddress<'_>>>("home", VT4, false)?
            .visit_field::<ForwardsUOffset<FbAddress<'_>>>("work", VT5, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, f64>>>("scores", VT6, false)?
            .finish();
        Ok(())
    }
}

fn fb_encode_batch(fbb: &mut FlatBufferBuilder<'_>, b: &Batch) {
    fbb.reset();
    fbb.start_vector::<FbReading>(b.readings.len());
    for r in b.readings.iter().rev() {
        fbb.push(FbReading::new(r.timestamp, r.value));
    }
    let readings = fbb.end_vector::<FbReading>(b.readings.len());
    let t = fbb.start_table();
    fbb.push_slot_always(VT0, readings);
    let root = fbb.end_table(t);
    fbb.finish(root, None);
}

fn fb_address(
    fbb: &mut FlatBufferBuilder<'_>,
    a: &Address,
) -> WIPOffset<flatbuffers::TableFinishedWIPOffset> {
    let street = fbb.create_string(&a.street);
    let city = fbb.create_string(&a.city);
    let t = fbb.start_table();
    fbb.push_slot_always(VT0, street);
    fbb.push_slot_always(VT1, city);
    fbb.push_slot(VT2, a.zip, 0);
    fbb.end_table(t)
}

fn fb_encode_person(fbb: &mut FlatBufferBuilder<'_>, p: &Person) {
    fbb.reset();
    let name = fbb.create_string(&p.name);
    let email = fbb.create_string(&p.email);
    let home = fb_address(fbb, &p.home);
    let work = fb_address(fbb, &p.work);
    let scores = fbb.create_vector(&p.scores);
    let t = fbb.start_table();
    fbb.push_slot(VT0, p.id, 0);
    fbb.push_slot_always(VT1, name);
    fbb.push_slot_always(VT2, email);
    fbb.push_slot(VT3, p.age, 0);
    fbb.push_slot_always(VT4, home);
    fbb.push_slot_always(VT5, work);
    fbb.push_slot_always(VT6, scores);
    let root = fbb.end_table(t);
    fbb.finish(root, None);
}

fn fb_sum_batch(bytes: &[u8]) -> u64 {
    let b = flatbuffers::root::<FbBatch<'_>>(bytes).expect("valid");
    b.readings()
        .iter()
        .fold(0, |acc, r| mix(acc, r.timestamp(), r.value().to_bits()))
}

fn fb_sum_person(bytes: &[u8]) -> u64 {
    let p = flatbuffers::root::<FbPerson<'_>>(bytes).expect("valid");
    let a = |a: Option<FbAddress<'_>>| {
        a.map_or(0, |a| {
            (a.street().len() + a.city().len()) as u64 + u64::from(a.zip())
        })
    };
    let acc = mix(
        p.id(),
        (p.name().len() + p.email().len()) as u64,
        u64::from(p.age()),
    );
    mix(acc, a(p.home()), a(p.work())).wrapping_add(sum_scores(p.scores().iter()))
}

// ---- The cases. ----

/// One measured operation: (dataset, operation, format, closure).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Box<dyn FnMut() -> u64>,
);

fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    let datasets: Vec<(&'static str, Option<Batch>, Option<Person>)> = vec![
        ("batch-10", Some(batch(10)), None),
        ("batch-10000", Some(batch(10_000)), None),
        ("record", None, Some(person())),
    ];
    for (name, b, p) in datasets {
        let value_sum = b
            .as_ref()
            .map(sum_batch)
            .or(p.as_ref().map(sum_person))
            .unwrap();
        // Encoded forms, and a check that every decoder reads the same value back.
        let km_owned_b = b.as_ref().map(km_batch);
        let km_owned_p = p.as_ref().map(km_person);
        let km_bytes = match (&km_owned_b, &km_owned_p) {
            (Some(x), _) => x.encode().unwrap(),
            (_, Some(x)) => x.encode().unwrap(),
            _ => unreachable!(),
        };
        let json_bytes = match (&b, &p) {
            (Some(x), _) => serde_json::to_vec(x).unwrap(),
            (_, Some(x)) => serde_json::to_vec(x).unwrap(),
            _ => unreachable!(),
        };
        let bin_bytes = match (&b, &p) {
            (Some(x), _) => bincode::serialize(x).unwrap(),
            (_, Some(x)) => bincode::serialize(x).unwrap(),
            _ => unreachable!(),
        };
        let mut fbb = FlatBufferBuilder::with_capacity(1 << 20);
        match (&b, &p) {
            (Some(x), _) => fb_encode_batch(&mut fbb, x),
            (_, Some(x)) => fb_encode_person(&mut fbb, x),
            _ => unreachable!(),
        }
        let fb_bytes = fbb.finished_data().to_vec();
        let is_batch = b.is_some();
        let km_view_sum = if is_batch {
            sum_km_batch_view(&km_bytes)
        } else {
            sum_km_person_view(&km_bytes)
        };
        let fb_sum = if is_batch {
            fb_sum_batch(&fb_bytes)
        } else {
            fb_sum_person(&fb_bytes)
        };
        assert_eq!(km_view_sum, value_sum, "{name}: karmem view");
        assert_eq!(fb_sum, value_sum, "{name}: flatbuffers");
        eprintln!(
            "{name}: karmem {} B, flatbuffers {} B, bincode {} B, serde_json {} B",
            km_bytes.len(),
            fb_bytes.len(),
            bin_bytes.len(),
            json_bytes.len()
        );

        // Encode (each into a reused buffer).
        let mut buf = vec![0u8; km_bytes.len()];
        let (kb, kp) = (km_owned_b.clone(), km_owned_p.clone());
        out.push((
            name,
            "encode",
            "karmem",
            Box::new(move || {
                let n = match (&kb, &kp) {
                    (Some(x), _) => x.encode_into(&mut buf).unwrap(),
                    (_, Some(x)) => x.encode_into(&mut buf).unwrap(),
                    _ => 0,
                };
                black_box(&buf[..n]);
                n as u64
            }),
        ));
        let (bb, pp) = (b.clone(), p.clone());
        let mut fbb = FlatBufferBuilder::with_capacity(fb_bytes.len() * 2);
        out.push((
            name,
            "encode",
            "flatbuffers",
            Box::new(move || {
                match (&bb, &pp) {
                    (Some(x), _) => fb_encode_batch(&mut fbb, x),
                    (_, Some(x)) => fb_encode_person(&mut fbb, x),
                    _ => {}
                }
                black_box(fbb.finished_data()).len() as u64
            }),
        ));
        let (bb, pp) = (b.clone(), p.clone());
        let mut v = Vec::with_capacity(bin_bytes.len());
        out.push((
            name,
            "encode",
            "bincode",
            Box::new(move || {
                v.clear();
                match (&bb, &pp) {
                    (Some(x), _) => bincode::serialize_into(&mut v, x).unwrap(),
                    (_, Some(x)) => bincode::serialize_into(&mut v, x).unwrap(),
                    _ => {}
                }
                black_box(&v).len() as u64
            }),
        ));
        let (bb, pp) = (b.clone(), p.clone());
        let mut v = Vec::with_capacity(json_bytes.len());
        out.push((
            name,
            "encode",
            "serde_json",
            Box::new(move || {
                v.clear();
                match (&bb, &pp) {
                    (Some(x), _) => serde_json::to_writer(&mut v, x).unwrap(),
                    (_, Some(x)) => serde_json::to_writer(&mut v, x).unwrap(),
                    _ => {}
                }
                black_box(&v).len() as u64
            }),
        ));

        // Decode (read every field).
        let bytes = km_bytes.clone();
        out.push((
            name,
            "decode",
            "karmem",
            Box::new(move || {
                let b = black_box(&bytes[..]);
                if is_batch {
                    sum_km_batch_view(b)
                } else {
                    sum_km_person_view(b)
                }
            }),
        ));
        let bytes = km_bytes.clone();
        out.push((
            name,
            "decode",
            "karmem-owned",
            Box::new(move || {
                let b = black_box(&bytes[..]);
                if is_batch {
                    km::Batch::decode(b)
                        .readings
                        .iter()
                        .fold(0, |acc, r| mix(acc, r.timestamp, r.value.to_bits()))
                } else {
                    let p = km::Person::decode(b);
                    let a =
                        |a: &km::Address| (a.street.len() + a.city.len()) as u64 + u64::from(a.zip);
                    let acc = mix(
                        p.id,
                        (p.name.len() + p.email.len()) as u64,
                        u64::from(p.age),
                    );
                    mix(acc, a(&p.home), a(&p.work))
                        .wrapping_add(sum_scores(p.scores.iter().copied()))
                }
            }),
        ));
        let bytes = fb_bytes.clone();
        out.push((
            name,
            "decode",
            "flatbuffers",
            Box::new(move || {
                let b = black_box(&bytes[..]);
                if is_batch {
                    fb_sum_batch(b)
                } else {
                    fb_sum_person(b)
                }
            }),
        ));
        let bytes = bin_bytes.clone();
        out.push((
            name,
            "decode",
            "bincode",
            Box::new(move || {
                let b = black_box(&bytes[..]);
                if is_batch {
                    sum_batch(&bincode::deserialize(b).unwrap())
                } else {
                    sum_person(&bincode::deserialize(b).unwrap())
                }
            }),
        ));
        let bytes = json_bytes.clone();
        out.push((
            name,
            "decode",
            "serde_json",
            Box::new(move || {
                let b = black_box(&bytes[..]);
                if is_batch {
                    sum_batch(&serde_json::from_slice(b).unwrap())
                } else {
                    sum_person(&serde_json::from_slice(b).unwrap())
                }
            }),
        ));
    }
    out
}

/// Mean time per call over ~`budget`, after a short warm-up.
fn time(f: &mut dyn FnMut() -> u64, budget: Duration) -> f64 {
    let start = Instant::now();
    while start.elapsed() < budget / 5 {
        black_box(f());
    }
    let (mut iters, start) = (0u64, Instant::now());
    while start.elapsed() < budget {
        for _ in 0..16 {
            black_box(f());
        }
        iters += 16;
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn main() {
    let mut cases = cases();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    for (data, op, format, f) in cases.iter_mut() {
        c.bench_function(&format!("{data}/{op}/{format}"), |b| {
            b.iter(|| black_box(f()))
        });
    }
    c.final_summary();
    // `cargo test --benches` and `--list` only check that the benchmarks run.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }

    // Summary: a second, shorter timing of the same closures, in one table.
    println!(
        "\n{:<12} {:<7} {:<13} {:>11} {:>16}",
        "data", "op", "format", "time", "vs karmem"
    );
    let budget = Duration::from_millis(300);
    let mut karmem = 0.0;
    // Honour criterion's name filter (the first argument that is not a flag).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    for (data, op, format, f) in cases.iter_mut() {
        if !format!("{data}/{op}/{format}").contains(&filter) {
            continue;
        }
        let ns = time(f.as_mut(), budget);
        if *format == "karmem" {
            karmem = ns;
        }
        println!(
            "{data:<12} {op:<7} {format:<13} {:>11} {:>15.1}x",
            fmt_ns(ns),
            ns / karmem
        );
    }
}
