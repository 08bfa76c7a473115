//! What parsing a schema holds in memory, against the schema's own size: a schema is a
//! tenant's upload (up to 1 MiB with the manifest), parsed by the gateway at deploy and
//! by the workers that load it, so memory that grows many times faster than the text
//! is memory one tenant's deploys take from everyone. Measured by counting the bytes
//! this test binary holds allocated (its own global allocator): the figures are
//! deterministic, not timings.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes held now and the most held since reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// One measurement at a time: the counters are the whole process's.
static MEASURING: Mutex<()> = Mutex::new(());

// SAFETY: defers to `System`, only counting around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let held = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(held, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Keeps the other tests of this binary from allocating while the caller measures.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The most bytes held at once while `work` ran, beyond what was held before it (the
/// caller holds [`alone`]).
fn peak_during<T>(work: impl FnOnce() -> T) -> (usize, T) {
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = work();
    (PEAK.load(Ordering::Relaxed) - before, out)
}

const MIB: usize = 1 << 20;

#[test]
fn a_megabyte_of_tokens_that_fail_early_holds_next_to_nothing() {
    let _alone = alone();
    // Valid tokens all the way, wrong from the third one: nothing past it matters. A
    // list of every token, each with a copy of its text, held 65 MiB here.
    let junk = format!("karmem {}", "a ".repeat(MIB / 2));
    let (peak, parsed) = peak_during(|| faas_karmem_compiler::parse_str("junk.km", &junk));
    let err = parsed.unwrap_err();
    assert_eq!(err.to_string(), "junk.km:1:10: expected `;`, found `a`");
    println!(
        "junk: {peak} bytes held at most for {} bytes of schema",
        junk.len()
    );
    assert!(
        peak < 64 << 10,
        "{peak} bytes held for a schema refused at its 3rd token"
    );
}

#[test]
fn a_megabyte_schema_holds_a_bounded_multiple_of_itself() {
    let _alone = alone();
    let mut schema = String::from("karmem big;\n\nstruct Big table {\n");
    let mut field = 0;
    while schema.len() < MIB - 64 {
        schema.push_str(&format!("    F{field} uint8;\n"));
        field += 1;
    }
    schema.push_str("}\n");
    let (peak, parsed) = peak_during(|| faas_karmem_compiler::parse_str("big.km", &schema));
    let parsed = parsed.unwrap();
    assert_eq!(parsed.structs[0].fields.len(), field);
    let ratio = peak as f64 / schema.len() as f64;
    println!(
        "{field} fields: {peak} bytes held at most, {ratio:.1}x the schema's {} bytes",
        schema.len()
    );
    // With every token listed first it was 55 times; what is left is the
    // declarations themselves, parsed and then resolved.
    assert!(ratio < 32.0, "{ratio:.1} times the schema held");
}
